// Scalar reference kernels: the specification, the fallback, and the test oracle.
#include "core/kernels/kernels.h"

namespace tg::kernels {

namespace {
// i-k-j order so the inner loop walks B and C along a row; accumulate in T.
template <class T>
void gemm_ref(int64_t M, int64_t N, int64_t K, const T* A, int64_t rsA, int64_t csA, const T* B,
              int64_t rsB, int64_t csB, T beta, T* C, int64_t ldc) {
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    if (beta == T(0)) {
      for (int64_t j = 0; j < N; ++j) c[j] = T(0);
    } else if (beta != T(1)) {
      for (int64_t j = 0; j < N; ++j) c[j] *= beta;
    }
    for (int64_t k = 0; k < K; ++k) {
      const T a = A[i * rsA + k * csA];
      const T* b = B + k * rsB;
      for (int64_t j = 0; j < N; ++j) c[j] += a * b[j * csB];
    }
  }
}
}  // namespace

void sgemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
               const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  gemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}
void dgemm_ref(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
               const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc) {
  gemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}

// Until the dispatched kernels land, the public entry points are the references.
void sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
           const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc) {
  sgemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}
void dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
           const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc) {
  dgemm_ref(M, N, K, A, rsA, csA, B, rsB, csB, beta, C, ldc);
}

}  // namespace tg::kernels
