// Kernel entry points used by core/ops. Everything above this header is ISA-agnostic; the
// implementations choose a path (scalar reference, AVX2+FMA, AVX-512, NEON) at one dispatch point.
//
// Shape legend: C[M, N] (+)= A[M, K] · B[K, N]. Every operand is addressed by a row stride and a
// column stride (in elements), so transposed views (Aᵀ, Bᵀ) need no copy.
#pragma once
#include <cstdint>

namespace tg::kernels {

// C = A·B when beta == 0, C = C + A·B when beta == 1 (gradient accumulation). Other betas scale C.
// C is addressed as C[i*ldc + j]; it must not alias A or B.
void sgemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
           const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void dgemm(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
           const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc);

// The scalar references: the oracle every faster path is tested against.
void sgemm_ref(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
               const float* B, int64_t rsB, int64_t csB, float beta, float* C, int64_t ldc);
void dgemm_ref(int64_t M, int64_t N, int64_t K, const double* A, int64_t rsA, int64_t csA,
               const double* B, int64_t rsB, int64_t csB, double beta, double* C, int64_t ldc);

}  // namespace tg::kernels
