// Kernel tests: every entry of kernels.h on every path this machine runs (available_isas()),
// against the scalar `_ref` oracle, on shapes that hit every tail (0, 1, primes, tile ± 1,
// KC + 1). Float tolerances scale with the reduction length; ops made of correctly rounded IEEE
// operations in the reference's order (binary, masked_fill, sum_cols, max_rows, adamw) must match
// bit for bit. Also: thread-count bit-identity, the exp error bound, dispatch errors.
#include <doctest/doctest.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "core/kernels/kernels.h"
#include "core/kernels/table.h"
#include "core/threadpool.h"
#include "tests/kernel_testing.h"

namespace k = tg::kernels;
using tg::testing::for_each_isa;
using tg::testing::randv;

namespace {

// |got - want| <= tol[i]; reports the first few failures with their index.
void check_close(const std::vector<float>& got, const std::vector<float>& want,
                 const std::vector<double>& tol, const char* what) {
  int bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    const bool ok =
        d <= tol[i] || (std::isnan(got[i]) && std::isnan(want[i])) || (got[i] == want[i]);
    if (!ok && bad++ < 3) {
      INFO(what << "[" << i << "]: got " << got[i] << " want " << want[i] << " tol " << tol[i]);
      CHECK(ok);
    }
  }
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements out of tolerance");
}

void check_equal(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0 && bad++ == 0) first = i;
  CHECK_MESSAGE(bad == 0, what << ": " << bad << " elements differ, first at " << first << " ("
                               << (bad ? got[first] : 0.f) << " vs " << (bad ? want[first] : 0.f)
                               << ")");
}

const int64_t kLens[] = {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 64, 65, 127, 1000};

// ---- GEMM ---------------------------------------------------------------------------------------
struct GemmCase {
  int64_t M, N, K;
  int layout;  // 0: A·B, 1: A·Bᵀ, 2: Aᵀ·B, 3: Aᵀ·Bᵀ, 4: both with non-unit strides
  float beta;
};

void run_gemm_case(const GemmCase& gc, std::mt19937& g) {
  const int64_t M = gc.M, N = gc.N, K = gc.K;
  INFO("M=" << M << " N=" << N << " K=" << K << " layout=" << gc.layout << " beta=" << gc.beta);
  const int64_t pad = 3;  // extra elements per row for layout 4 (strided, non-contiguous)
  // Room for the widest layout (4): rows of 2·(cols + pad) elements.
  std::vector<float> A = randv(g, (M + 1) * (K + pad + 1) * 2);
  std::vector<float> B = randv(g, (K + 1) * (N + pad + 1) * 2);
  int64_t rsA = K, csA = 1, rsB = N, csB = 1;
  switch (gc.layout) {
    case 1:
      rsB = 1, csB = K;
      break;
    case 2:
      rsA = 1, csA = M;
      break;
    case 3:
      rsA = 1, csA = M, rsB = 1, csB = K;
      break;
    case 4:
      rsA = 2 * (K + pad), csA = 2, rsB = 1 * (N + pad) * 2, csB = 2;
      break;
    default:
      break;
  }
  const int64_t ldc = N + 5;
  std::vector<float> C0 = randv(g, std::max<int64_t>(M * ldc, 1));
  std::vector<float> C = C0, R = C0;
  k::sgemm(M, N, K, A.data(), rsA, csA, B.data(), rsB, csB, gc.beta, C.data(), ldc);
  k::sgemm_ref(M, N, K, A.data(), rsA, csA, B.data(), rsB, csB, gc.beta, R.data(), ldc);
  // Error bound of a length-K dot product: ~K·eps·Σ|a||b|, for each of the two results.
  std::vector<float> absA(A.size()), absB(B.size()), S(C0.size(), 0.f);
  for (size_t i = 0; i < A.size(); ++i) absA[i] = std::fabs(A[i]);
  for (size_t i = 0; i < B.size(); ++i) absB[i] = std::fabs(B[i]);
  k::sgemm_ref(M, N, K, absA.data(), rsA, csA, absB.data(), rsB, csB, 0.f, S.data(), ldc);
  std::vector<double> tol(C0.size());
  for (size_t i = 0; i < tol.size(); ++i)
    tol[i] = 2.0 * (K + 2) * FLT_EPSILON * (S[i] + std::fabs(C0[i]) + 1e-30);
  check_close(C, R, tol, "sgemm");
}

}  // namespace

TEST_CASE("dispatch: scalar is always available, the default is the fastest path") {
  const auto isas = k::available_isas();
  REQUIRE(!isas.empty());
  CHECK(isas.front() == "scalar");
  MESSAGE("available kernel paths: " <<
          [&] {
            std::string s;
            for (auto& i : isas) s += i + " ";
            return s;
          }() << "(active: " << k::active_isa()
                                     << ")");
}

TEST_CASE("dispatch: unknown names and unavailable paths are distinct errors") {
  const std::string before = k::active_isa();
  CHECK_THROWS_AS(k::set_isa("sse9"), std::invalid_argument);
  CHECK_THROWS_WITH_AS(k::set_isa("sse9"), doctest::Contains("unknown kernel path 'sse9'"),
                       std::invalid_argument);
  const auto isas = k::available_isas();
  for (const char* name : {"avx2", "avx512", "avx512_bf16", "neon"}) {
    if (std::find(isas.begin(), isas.end(), name) != isas.end()) continue;
    CHECK_THROWS_WITH_AS(k::set_isa(name), doctest::Contains("is not available"),
                         std::runtime_error);
  }
  const char* old = std::getenv("TAPEGRAD_ISA");
  const std::string saved = old ? old : "";
  setenv("TAPEGRAD_ISA", "bogus", 1);
  CHECK_THROWS_WITH_AS(k::set_isa_from_env(), doctest::Contains("TAPEGRAD_ISA"),
                       std::invalid_argument);
  setenv("TAPEGRAD_ISA", "scalar", 1);
  k::set_isa_from_env();
  CHECK(k::active_isa() == "scalar");
  if (old)
    setenv("TAPEGRAD_ISA", saved.c_str(), 1);
  else
    unsetenv("TAPEGRAD_ISA");
  k::set_isa(before);
}

TEST_CASE("sgemm micro-kernel alone: full and edge tiles against a double-precision sum") {
  std::mt19937 g(7);
  for_each_isa([&](const std::string&) {
    const k::KernelTable& t = k::active_table();
    const int64_t MR = t.sgemm_blocking.mr, NR = t.sgemm_blocking.nr;
    for (int64_t kc : {1, 2, 16, 37}) {
      std::vector<float> a = randv(g, MR * kc), b = randv(g, NR * kc);
      // 64-byte aligned copies: micro-kernels may use aligned loads of the packed B panel.
      float* ap = static_cast<float*>(std::aligned_alloc(64, ((MR * kc * 4 + 63) / 64) * 64));
      float* bp = static_cast<float*>(std::aligned_alloc(64, ((NR * kc * 4 + 63) / 64) * 64));
      std::memcpy(ap, a.data(), a.size() * 4);
      std::memcpy(bp, b.data(), b.size() * 4);
      // Row counts on both sides of the smaller-tile instances (AVX-512: 4 and 8 rows).
      std::vector<int64_t> ms;
      for (int64_t m : {MR, MR - 1, int64_t(9), int64_t(8), int64_t(5), int64_t(4), int64_t(1)})
        if (m >= 1 && m <= MR && std::find(ms.begin(), ms.end(), m) == ms.end()) ms.push_back(m);
      for (int64_t m : ms) {
        for (int64_t n : {NR, NR - 1, NR / 2 + 1, int64_t(1)}) {
          for (int variant = 0; variant < 6; ++variant) {
            // variants: packed A / in-place row-major A / in-place transposed A (when the table
            // has them; transposed only for full tiles), × accumulate.
            const bool accumulate = variant & 1, row_a = variant / 2 == 1, col_a = variant / 2 == 2;
            if (row_a && t.sgemm_ukernel_rowa == nullptr) continue;
            if (col_a && (t.sgemm_ukernel_cola == nullptr || m != MR)) continue;
            const int64_t ldc = NR + 3;
            std::vector<float> c(MR * ldc, 0.5f);
            if (col_a) {
              // kc rows of lda = MR + 5, the last exactly MR long: nothing past it may be read.
              const int64_t lda = MR + 5;
              std::vector<float> acol((kc - 1) * lda + MR);
              for (int64_t p = 0; p < kc; ++p)
                for (int64_t i = 0; i < MR; ++i) acol[p * lda + i] = a[p * MR + i];
              t.sgemm_ukernel_cola(kc, acol.data(), lda, bp, NR, c.data(), ldc, m, n, accumulate);
            } else if (row_a) {
              // Exactly m rows of lda = kc + 3: rows >= m must not be read (ASan checks).
              const int64_t lda = kc + 3;
              std::vector<float> arow(m * lda);
              for (int64_t i = 0; i < m; ++i)
                for (int64_t p = 0; p < kc; ++p) arow[i * lda + p] = a[p * MR + i];
              t.sgemm_ukernel_rowa(kc, arow.data(), lda, bp, NR, c.data(), ldc, m, n, accumulate);
            } else {
              t.sgemm_ukernel(kc, ap, bp, NR, c.data(), ldc, m, n, accumulate);
            }
            for (int64_t i = 0; i < MR; ++i) {
              for (int64_t j = 0; j < ldc; ++j) {
                double want = 0.5;
                if (i < m && j < n) {
                  double s = 0;
                  for (int64_t p = 0; p < kc; ++p) s += double(a[p * MR + i]) * b[p * NR + j];
                  want = accumulate ? 0.5 + s : s;
                }
                INFO("kc=" << kc << " m=" << m << " n=" << n << " i=" << i << " j=" << j
                           << " variant=" << variant);
                CHECK(std::fabs(c[i * ldc + j] - want) <= 4 * (kc + 2) * FLT_EPSILON);
              }
            }
          }
        }
      }
      std::free(ap);
      std::free(bp);
    }
  });
}

TEST_CASE("sgemm pack helpers: row-major A and transposed B panels, exact copies") {
  std::mt19937 g(9);
  for_each_isa([&](const std::string&) {
    const k::KernelTable& t = k::active_table();
    const int64_t MR = t.sgemm_blocking.mr, NR = t.sgemm_blocking.nr;
    for (int64_t kc : {1, 7, 15, 16, 17, 40}) {
      INFO("kc=" << kc);
      const int64_t ld = kc + 5;  // source row stride, not a multiple of the vector width
      // Both packs transpose R source rows of kc floats (row i at i·ld) into kc rows of R. Exactly
      // R rows, the last one exactly kc long: nothing past it may be read.
      auto check_pack = [&](auto pack, int64_t R, const char* name) {
        std::vector<float> src = randv(g, (R - 1) * ld + kc), out(R * kc, -1.f), want(R * kc);
        for (int64_t p = 0; p < kc; ++p)
          for (int64_t i = 0; i < R; ++i) want[p * R + i] = src[i * ld + p];
        pack(kc, src.data(), ld, out.data());
        check_equal(out, want, name);
      };
      if (t.sgemm_pack_a_rowmajor != nullptr)
        check_pack(t.sgemm_pack_a_rowmajor, MR, "pack_a_rowmajor");
      if (t.sgemm_pack_b_colmajor != nullptr)
        check_pack(t.sgemm_pack_b_colmajor, NR, "pack_b_colmajor");
    }
  });
}

TEST_CASE("sgemm matches sgemm_ref: awkward shapes, every transpose, beta 0/1/other") {
  std::mt19937 g(42);
  for_each_isa([&](const std::string&) {
    const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table());
    const int64_t dims[] = {0, 1, 2, 7, 13, bk.mr - 1, bk.mr + 1, bk.nr + 1, 31, 67};
    const int64_t ks[] = {0, 1, 5, 16, 61, bk.kc + 1};
    std::uniform_int_distribution<int> pick(0, 9), pk(0, 5), pl(0, 4), pb(0, 2);
    const float betas[] = {0.f, 1.f, 0.5f};
    for (int t = 0; t < 60; ++t) {
      GemmCase c{dims[pick(g)], dims[pick(g)], ks[pk(g)], pl(g), betas[pb(g)]};
      run_gemm_case(c, g);
    }
    // A wide and a tall case crossing MC and NC block edges.
    run_gemm_case({bk.mc + 3, 40, 33, 0, 1.f}, g);
    run_gemm_case({9, bk.nc + 5, 20, 1, 0.f}, g);
    // Several column blocks and K blocks: the packed A is kept and reused across column blocks.
    run_gemm_case({2 * bk.mr + 5, bk.nc + 40, 2 * bk.kc + 3, 2, 1.f}, g);
    run_gemm_case({bk.mc + bk.mr + 1, bk.nc + 9, bk.kc + 2, 0, 0.f}, g);
    // A narrow row-major B read in place (K·N <= 2^16) over many K blocks and groups, with an
    // edge panel; a wider one packed over as many.
    run_gemm_case({37, 25, 9 * bk.kc + 5, 0, 1.f}, g);
    run_gemm_case({37, 100, 9 * bk.kc + 5, 0, 1.f}, g);
    // A transposed A read in place: whole row panels only, or an edge panel, over K blocks.
    run_gemm_case({4 * bk.mr, bk.nr, 2 * bk.kc + 3, 2, 0.5f}, g);
    run_gemm_case({bk.mc + 2 * bk.mr + 1, 3 * bk.nr + 1, bk.kc + 1, 2, 1.f}, g);
  });
}

TEST_CASE("sgemm: A's layout never changes the bits (packed, in place row-major, transposed)") {
  // Each C element is the same chain of FMAs whichever way A reaches the micro-kernel, so C is
  // the same to the bit. Few column panels (A read in place when the table can), then many
  // (A packed), each with A row-major, transposed and with strides; M has an edge row panel.
  std::mt19937 g(44);
  for_each_isa([&](const std::string&) {
    const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table());
    for (int64_t N : {2 * bk.nr + 5, 9 * bk.nr + 3}) {
      const int64_t M = bk.mc + bk.mr + 7, K = bk.kc + 21;
      INFO("M=" << M << " N=" << N << " K=" << K);
      std::vector<float> A = randv(g, M * K), B = randv(g, K * N);
      std::vector<float> At(K * M), As(2 * M * K);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t p = 0; p < K; ++p) {
          At[p * M + i] = A[i * K + p];
          As[2 * (i * K + p)] = A[i * K + p];
        }
      std::vector<float> C(M * N), Ct(M * N), Cs(M * N);
      k::sgemm(M, N, K, A.data(), K, 1, B.data(), N, 1, 0.f, C.data(), N);
      k::sgemm(M, N, K, At.data(), 1, M, B.data(), N, 1, 0.f, Ct.data(), N);
      k::sgemm(M, N, K, As.data(), 2 * K, 2, B.data(), N, 1, 0.f, Cs.data(), N);
      check_equal(Ct, C, "transposed A vs row-major A");
      check_equal(Cs, C, "strided A vs row-major A");
    }
  });
}

TEST_CASE("multi-threaded sgemm matches sgemm_ref (row and column splits, shared B panel)") {
  std::mt19937 g(43);
  const int before = tg::num_threads();
  for_each_isa([&](const std::string&) {
    const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table());
    for (int threads : {2, 3}) {
      tg::set_num_threads(threads);
      INFO("threads = " << threads);
      run_gemm_case({150, 211, 130, 0, 0.f}, g);                 // rows split
      run_gemm_case({bk.mr + 1, 2 * bk.nc + 7, 90, 1, 1.f}, g);  // short M: columns split
      run_gemm_case({97, 301, bk.kc + 1, 2, 0.5f}, g);           // Aᵀ·B, two K blocks
      run_gemm_case({130, 129, 140, 4, 1.f}, g);                 // strided both
      run_gemm_case({150, bk.nc + 70, bk.kc + 9, 0, 0.f}, g);    // kept packed A
      // M in whole row panels, N in few column panels: rows split, shared B panel; in place
      // (small B) and packed (transposed, two K blocks).
      run_gemm_case({8 * bk.mr, 2 * bk.nr + 6, 50, 0, 1.f}, g);
      run_gemm_case({8 * bk.mr, 2 * bk.nr + 6, 2 * bk.kc + 5, 1, 0.f}, g);
      // N ≈ NC/3: three K blocks share one packed B panel, K spans three such groups.
      run_gemm_case({8 * bk.mr, bk.nc / 3 - 1, 7 * bk.kc + 3, 0, 1.f}, g);
      // Rows split across column blocks: the kept packed A is shared by the team.
      run_gemm_case({16 * bk.mr, bk.nc + 40, bk.kc + 9, 2, 1.f}, g);
      // M = 128 rows: 10⅔ panels of 12 (AVX-512) or 21⅓ of 6 (AVX2), so there the last share
      // ends in a short tile; kept packed A shared by the team, and A read in place.
      run_gemm_case({128, bk.nc + 40, bk.kc + 9, 0, 1.f}, g);
      run_gemm_case({128, 2 * bk.nr + 6, bk.kc + 9, 0, 0.f}, g);
      // dY·W-like: N = 128 with a long K (B packed); N = 25 (B read in place).
      run_gemm_case({128, 128, 9 * bk.kc + 5, 0, 0.f}, g);
      run_gemm_case({128, 100, 9 * bk.kc + 5, 0, 1.f}, g);
      run_gemm_case({128, 25, 9 * bk.kc + 5, 0, 1.f}, g);
      // dYᵀ·X-like: a transposed A read in place (few column panels), many row blocks, an edge
      // row panel packed, two K blocks; the same with B transposed (packed).
      run_gemm_case({3 * bk.mc + bk.mr + 5, 2 * bk.nr + 6, bk.kc + 7, 2, 0.f}, g);
      run_gemm_case({3 * bk.mc + 5, bk.nr + 3, bk.kc + 7, 3, 1.f}, g);
    }
  });
  tg::set_num_threads(before);
}

TEST_CASE("threaded sgemm: a member done with its rows takes the others' last panels, same bits") {
  std::mt19937 g(44);
  const int before = tg::num_threads();
  for_each_isa([&](const std::string&) {
    const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table());
    // Many row panels and a short edge panel, few columns: the team splits rows.
    const int64_t M = 60 * bk.mr + 5, N = 3 * bk.nr + 6, K = 4 * bk.kc + 3;
    const std::vector<float> A = randv(g, M * K), B = randv(g, K * N);
    std::vector<float> C1(M * N);
    tg::set_num_threads(1);
    k::sgemm(M, N, K, A.data(), K, 1, B.data(), 1, K, 0.f, C1.data(), N);
    for (int threads : {2, 3}) {
      tg::set_num_threads(threads);
      INFO("threads = " << threads);
      const int64_t taken_before = k::sgemm_panels_taken_over();
      for (int rep = 0; rep < 30; ++rep) {
        // NaN where a panel was skipped, a double sum where one was computed twice.
        std::vector<float> C(M * N, NAN);
        k::sgemm(M, N, K, A.data(), K, 1, B.data(), 1, K, 0.f, C.data(), N);
        check_equal(C, C1, "threaded vs one thread");
      }
      // With more members than cores one of them always starts late, so the others take over
      // its panels; otherwise it is up to the scheduler.
      const int64_t taken = k::sgemm_panels_taken_over() - taken_before;
      MESSAGE("panels taken over: " << taken);
      if (threads > int(std::thread::hardware_concurrency())) CHECK(taken > 0);
    }
  });
  tg::set_num_threads(before);
}

TEST_CASE("GEMM blocking: the analytical model on known caches, unknown caches keep the table's") {
  // Zen 4 (L1d 32 KiB 8-way, L2 1 MiB, L3 32 MiB shared by 16): KC from 6 of 8 L1 ways over MR
  // floats per k (at most 512); the B panel KC×NC in the L3 share (2 MiB, at most twice L2) for
  // AVX-512's 12-row tile, in L2 for AVX2's 6-row one, KC shortened to keep NC >= 1024; the A
  // block MC×KC a quarter of L2; NC and MC in whole micro-tiles.
  k::CacheInfo zen4;
  zen4.l1d = {32 << 10, 8, 2}, zen4.l2 = {1 << 20, 8, 2}, zen4.l3 = {32 << 20, 16, 16};
  zen4.l3_streams_panel = true;  // AMD's
  const k::GemmBlocking avx512{12, 32, 240, 256, 1024}, avx2{6, 16, 240, 256, 1024};
  const k::GemmBlocking z512 = k::derive_blocking(avx512, zen4),
                        z2 = k::derive_blocking(avx2, zen4);
  CHECK(z512.kc == 512);   // 6·4096 / (12·4) = 512
  CHECK(z512.nc == 1024);  // 2 MiB / (512·4), a multiple of 32
  CHECK(z512.mc == 120);   // 256 KiB / (512·4) = 128, a multiple of 12
  CHECK(z2.kc == 256);     // 6·4096 / (6·4) = 1024, capped at 512, then 1 MiB / (1024·4)
  CHECK(z2.nc == 1024);
  CHECK(z2.mc == 252);  // 256 KiB / (256·4) = 256, a multiple of 6
  CHECK((z512.mr == 12 && z512.nr == 32));
  // Zen 3 (the same but L2 512 KiB), the AVX2-only machine issue 17 was filed on: the B panel
  // in L2 keeps NC 1024 by halving KC; the A block a quarter of L2.
  k::CacheInfo zen3 = zen4;
  zen3.l2.bytes = 512 << 10;
  const k::GemmBlocking z3 = k::derive_blocking(avx2, zen3);
  CHECK(z3.kc == 128);  // 512 KiB / (1024·4)
  CHECK(z3.nc == 1024);
  CHECK(z3.mc == 252);  // 128 KiB / (128·4) = 256, a multiple of 6
  // No L3 share known: the B panel fills L2 (KC shortened for NC 1024); a large share (a VM's
  // L3 shared by 2): twice L2.
  k::CacheInfo no_l3 = zen4, vm = zen4;
  no_l3.l3 = {};
  vm.l3.shared_by = 2;
  CHECK((k::derive_blocking(avx512, no_l3).kc == 256 &&
         k::derive_blocking(avx512, no_l3).nc == 1024));
  CHECK((k::derive_blocking(avx512, vm).kc == 512 && k::derive_blocking(avx512, vm).nc == 1024));
  // The Intel Xeon here (L1d 48 KiB 12-way, L2 2 MiB, the VM's L3 480 MiB shared by 2), whose
  // L3 does not stream a panel as L2 does: the B panel keeps to half of L2 on both paths (KC
  // shortened for NC 1024), whatever the L3 share.
  k::CacheInfo xeon;
  xeon.l1d = {48 << 10, 12, 2}, xeon.l2 = {2 << 20, 16, 2}, xeon.l3 = {480 << 20, 16, 2};
  for (const k::GemmBlocking& table : {avx512, avx2}) {
    const k::GemmBlocking b = k::derive_blocking(table, xeon);
    CAPTURE(table.mr);
    CHECK(b.kc == 256);  // 1 MiB / (1024·4)
    CHECK(b.nc == 1024);
    CHECK(b.mc == 512 / table.mr * table.mr);  // 512 KiB / (256·4), whole tiles
  }
  // Caches a hypervisor might claim (L1 1 GiB 64-way, L2 and L3 1 TiB): the blocks stay within
  // the bounds TAPEGRAD_GEMM_BLOCKING accepts (MC, KC <= 8192, NC <= 65536), in whole tiles.
  k::CacheInfo absurd;
  absurd.l1d = {int64_t(1) << 30, 64, 1}, absurd.l2 = {int64_t(1) << 40, 8, 1};
  absurd.l3 = {int64_t(1) << 40, 16, 1};
  for (const k::GemmBlocking& table : {avx512, avx2}) {
    const k::GemmBlocking b = k::derive_blocking(table, absurd);
    CAPTURE(table.mr);
    CHECK((b.mc >= table.mr && b.mc <= 8192 && b.mc % table.mr == 0));
    CHECK((b.kc >= 128 && b.kc <= 8192));
    CHECK((b.nc >= table.nr && b.nc <= 65536 && b.nc % table.nr == 0));
  }
  // Nothing known: the table's values.
  const k::GemmBlocking none = k::derive_blocking(avx2, k::CacheInfo{});
  CHECK((none.mc == 240 && none.kc == 256 && none.nc == 1024));
  // Whatever the caches, KC is at least 128 and a block holds at least one micro-tile.
  k::CacheInfo tiny;
  tiny.l1d = {1024, 4, 1}, tiny.l2 = {4096, 4, 1};
  const k::GemmBlocking t = k::derive_blocking(avx512, tiny);
  CHECK((t.kc == 128 && t.mc == 12 && t.nc == 32));
}

TEST_CASE("caches: AMD's legacy CPUID leaves 0x80000005/6 decode to sizes and ways") {
  // The registers the Zen 5 VM of issue 34 returns (0x8000001D empty there): L1d 48 KiB 12-way,
  // L2 1 MiB with ways code 6 (8 to 15 ways: 8), L3 1016 × 512 KiB (the whole package) with
  // code 9 (reserved: unknown ways).
  k::CacheInfo c;
  REQUIRE(k::amd_legacy_caches(0x300c0140u, 0x04006140u, 0x0fe09140u, c));
  CHECK((c.l1d.bytes == 48 << 10 && c.l1d.ways == 12 && c.l1d.shared_by == 0));
  CHECK((c.l2.bytes == 1 << 20 && c.l2.ways == 8 && c.l2.shared_by == 0));
  CHECK((c.l3.bytes == int64_t(1016) << 19 && c.l3.ways == 0 && c.l3.shared_by == 0));
  // Zen 4 (L1d 32 KiB 8-way; L2 1 MiB code 8: 16 ways; L3 32 MiB code 0xA: 32 ways), a fully
  // associative L1 (0xFF) and a disabled L3 (code 0).
  CHECK(k::amd_legacy_caches(0x20080140u, 0x04008140u, 0x0100A140u, c));
  CHECK((c.l1d.bytes == 32 << 10 && c.l1d.ways == 8 && c.l2.ways == 16));
  CHECK((c.l3.bytes == 32 << 20 && c.l3.ways == 32));
  CHECK(k::amd_legacy_caches(0x10FF0140u, 0x0200F140u, 0x00800140u, c));
  CHECK((c.l1d.bytes == 16 << 10 && c.l1d.ways == 0 && c.l2.ways == 0 && c.l3.bytes == 0));
  // No L1d reported: nothing usable.
  CHECK_FALSE(k::amd_legacy_caches(0u, 0x04006140u, 0u, c));
  // On the VM, derive_blocking then has what it needs (KC from 10 of 12 ways, capped at 512, and
  // shortened to keep NC 1024 in the 1 MiB L2).
  REQUIRE(k::amd_legacy_caches(0x300c0140u, 0x04006140u, 0x0fe09140u, c));
  c.l3_streams_panel = true;
  const k::GemmBlocking b = k::derive_blocking({12, 32, 240, 256, 1024}, c);
  CHECK((b.kc == 256 && b.nc == 1024 && b.mc == 252));
  MESSAGE("this machine's caches: " << k::describe(k::cache_info()));
}

TEST_CASE("GEMM blocking: TAPEGRAD_GEMM_BLOCKING overrides the derived blocks; bad values fail") {
  int64_t v[3];
  std::string err;
  CHECK(k::parse_gemm_blocking("240,256,1024", v, err));
  CHECK((v[0] == 240 && v[1] == 256 && v[2] == 1024));
  for (const char* bad : {"", "240,256", "240,256,1024,5", "0,256,1024", "240,-1,1024", "a,b,c",
                          "240,256,70000", "240,,1024", "240 ,256,1024"}) {
    INFO("'" << bad << "'");
    err.clear();
    CHECK_FALSE(k::parse_gemm_blocking(bad, v, err));
    CHECK(err.find('\n') == std::string::npos);
    CHECK(err.find("MC,KC,NC") != std::string::npos);
  }
  const char* before = std::getenv("TAPEGRAD_GEMM_BLOCKING");
  const std::string saved = before != nullptr ? before : "";
  setenv("TAPEGRAD_GEMM_BLOCKING", "13,7,19", 1);
  k::reload_gemm_blocking_env();
  const char* source = nullptr;
  const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table(), &source);
  CHECK((bk.mc == 13 && bk.kc == 7 && bk.nc == 19));
  CHECK(std::string(source) == "TAPEGRAD_GEMM_BLOCKING");
  setenv("TAPEGRAD_GEMM_BLOCKING", "13,7", 1);
  k::reload_gemm_blocking_env();
  CHECK_THROWS_WITH_AS(k::gemm_blocking_for(k::active_table()),
                       doctest::Contains("TAPEGRAD_GEMM_BLOCKING: '13,7' is not MC,KC,NC"),
                       std::invalid_argument);
  if (before != nullptr)
    setenv("TAPEGRAD_GEMM_BLOCKING", saved.c_str(), 1);
  else
    unsetenv("TAPEGRAD_GEMM_BLOCKING");
  k::reload_gemm_blocking_env();
}

TEST_CASE("sgemm with odd small blocks (MC, KC, NC not multiples of the tile) matches sgemm_ref") {
  // Every block edge at once, on every path, alone and in a team, and the same bits for both.
  std::mt19937 g(45);
  const int before = tg::num_threads();
  k::set_sgemm_blocking_override(13, 7, 19);
  for_each_isa([&](const std::string&) {
    for (int threads : {1, 2}) {
      tg::set_num_threads(threads);
      INFO("threads = " << threads);
      run_gemm_case({61, 83, 40, 0, 0.f}, g);
      run_gemm_case({30, 150, 33, 1, 1.f}, g);
      run_gemm_case({70, 20, 29, 2, 0.5f}, g);
    }
    const int64_t M = 150, N = 211, K = 130;
    const std::vector<float> A = randv(g, M * K), B = randv(g, K * N);
    std::vector<float> C1(M * N), C2(M * N);
    tg::set_num_threads(1);
    k::sgemm(M, N, K, A.data(), K, 1, B.data(), N, 1, 0.f, C1.data(), N);
    tg::set_num_threads(2);
    k::sgemm(M, N, K, A.data(), K, 1, B.data(), N, 1, 0.f, C2.data(), N);
    CHECK(std::memcmp(C1.data(), C2.data(), C1.size() * sizeof(float)) == 0);
  });
  k::set_sgemm_blocking_override(0, 0, 0);
  tg::set_num_threads(before);
}

TEST_CASE("sgemm ignores NaN in C when beta == 0") {
  for_each_isa([&](const std::string&) {
    std::vector<float> a(6 * 4, 1.f), b(4 * 5, 1.f), c(6 * 5, std::nanf(""));
    k::sgemm(6, 5, 4, a.data(), 4, 1, b.data(), 5, 1, 0.f, c.data(), 5);
    for (float x : c) CHECK(x == 4.f);
  });
}

TEST_CASE("sgemm_batched matches the reference per batch entry") {
  std::mt19937 g(3);
  for_each_isa([&](const std::string&) {
    const int64_t batch = 5, M = 17, N = 19, K = 23;
    // Q·Kᵀ-like: B transposed, batches strided.
    std::vector<float> A = randv(g, batch * M * K), B = randv(g, batch * N * K);
    std::vector<float> C(batch * M * N, 0.f), R(batch * M * N, 0.f);
    k::sgemm_batched(batch, M, N, K, A.data(), M * K, K, 1, B.data(), N * K, 1, K, 0.f, C.data(),
                     M * N, N);
    k::sgemm_batched_ref(batch, M, N, K, A.data(), M * K, K, 1, B.data(), N * K, 1, K, 0.f,
                         R.data(), M * N, N);
    check_close(C, R, std::vector<double>(C.size(), 4.0 * (K + 2) * FLT_EPSILON * K), "batched");
  });
}

// One row of A, batched (kernels.h: sgemm_batched's M == 1 route, B read in place): per entry the
// bits of sgemm's packed route (sgemm itself) and of sgemm_row_ref (fused on the SIMD paths, as
// their micro-kernels; product then sum on the scalar path), for both layouts of B
// (tg::testing::RowLayout); C starts as NaN (beta 0 must not read it).
void run_row_case(std::mt19937& g, const tg::testing::RowShape& s, bool dots, bool fused,
                  std::vector<float>& out) {
  const int64_t batch = s.batch, N = s.N, K = s.K;
  INFO("batch=" << batch << " N=" << N << " K=" << K << " dots=" << dots);
  const tg::testing::RowLayout l(N, K, dots);
  const std::vector<float> A = randv(g, batch * l.sA), B = randv(g, batch * l.sB);
  std::vector<float> C(size_t(batch * l.sC), std::nanf("")), P = C, R = C;
  k::sgemm_batched(batch, 1, N, K, A.data(), l.sA, K, 1, B.data(), l.sB, l.rsB, l.csB, 0.f,
                   C.data(), l.sC, N);
  const int64_t kc = k::gemm_blocking_for(k::active_table()).kc;
  for (int64_t b = 0; b < batch; ++b) {
    const float* a = A.data() + b * l.sA;
    k::sgemm(1, N, K, a, K, 1, B.data() + b * l.sB, l.rsB, l.csB, 0.f, P.data() + b * l.sC, N);
    k::sgemm_row_ref(dots, fused, N, K, kc, a, B.data() + b * l.sB, l.ldb, R.data() + b * l.sC,
                     false);
  }
  check_equal(C, P, "one-row route vs the packed sgemm");
  check_equal(C, R, "one-row route vs sgemm_row_ref");
  out.insert(out.end(), C.begin(), C.end());
}

TEST_CASE("sgemm_batched, one row of A: B read in place, the packed GEMM's bits, 1/2/3 threads") {
  std::mt19937 g(77);
  for (const bool small_kc : {false, true}) {
    if (small_kc) k::set_sgemm_blocking_override(13, 7, 19);  // every K block edge
    INFO("small KC = " << small_kc);
    for_each_isa([&](const std::string& isa) {
      tg::testing::same_bits_at_1_2_3_threads(
          g(), [&](std::mt19937& same, std::vector<float>& all) {
            for (const tg::testing::RowShape& s : tg::testing::kRowShapes)
              for (const bool dots : {true, false})
                run_row_case(same, s, dots, isa != "scalar", all);
          });
    });
    k::set_sgemm_blocking_override(0, 0, 0);
  }
}

TEST_CASE("one-row kernels: the table's dots and axpys against sgemm_row_ref, every tail, from C") {
  std::mt19937 g(78);
  for_each_isa([&](const std::string& isa) {
    const k::KernelTable& t = k::active_table();
    for (int64_t n = 0; n <= 70; ++n)
      for (const int64_t kk : {0, 1, 17, 64})
        for (int v = 0; v < 8; ++v) {
          const bool dots = v & 1, accumulate = v & 2;
          const int64_t kc = v & 4 ? 7 : std::max<int64_t>(kk, 1);
          INFO("n=" << n << " k=" << kk << " kc=" << kc << " dots=" << dots
                    << " accumulate=" << accumulate);
          const int64_t ldb = dots ? kk + 3 : n + 5;
          // At least one element each: no kernel is handed the null data() of an empty vector.
          const std::vector<float> a = randv(g, std::max<int64_t>(kk, 1)),
                                   b = randv(g, std::max<int64_t>((dots ? n : kk) * ldb, 1));
          std::vector<float> c = randv(g, std::max<int64_t>(n, 1));
          if (!accumulate) std::fill(c.begin(), c.end(), std::nanf(""));  // C not read
          std::vector<float> r = c;
          (dots ? t.sgemm_row_dots : t.sgemm_row_axpys)(n, kk, kc, a.data(), b.data(), ldb,
                                                        c.data(), accumulate);
          k::sgemm_row_ref(dots, isa != "scalar", n, kk, kc, a.data(), b.data(), ldb, r.data(),
                           accumulate);
          check_equal(c, r, dots ? "sgemm_row_dots" : "sgemm_row_axpys");
        }
  });
}

TEST_CASE("the default thread count is the CPUs this thread may run on, not the machine's") {
  cpu_set_t all;
  CPU_ZERO(&all);
  REQUIRE(::sched_getaffinity(0, sizeof all, &all) == 0);
  CHECK(tg::usable_cpus() == std::clamp(CPU_COUNT(&all), 1, tg::kMaxThreads));
  // Pinned to one CPU (as mpirun binds a rank, or taskset -c 0), as a thread may do to itself.
  int first = 0;
  while (!CPU_ISSET(first, &all)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
  const int pinned = tg::usable_cpus();
  REQUIRE(::sched_setaffinity(0, sizeof all, &all) == 0);
  CHECK(pinned == 1);
}

TEST_CASE("parallel_for: every task runs once; a throwing task's exception reaches the caller") {
  const int before = tg::num_threads();
  for (int threads : {1, 2, 3}) {
    INFO("threads=" << threads);
    tg::set_num_threads(threads);
    std::vector<std::atomic<int>> hits(1000);
    tg::parallel_for(1000, [&](int64_t i) { hits[size_t(i)].fetch_add(1); });
    bool once = true;
    for (const auto& h : hits) once = once && h.load() == 1;
    CHECK(once);
    CHECK_THROWS_WITH_AS(tg::parallel_for(64,
                                          [](int64_t i) {
                                            if (i == 37) throw std::runtime_error("task 37");
                                          }),
                         "task 37", std::runtime_error);
    // The pool still works, in parallel, after the exception.
    std::atomic<int> n{0};
    tg::parallel_for(100, [&](int64_t) { n.fetch_add(1); });
    CHECK(n.load() == 100);
  }
  tg::set_num_threads(before);
}

TEST_CASE(
    "parallel_team: a member that throws releases the others; its exception reaches the caller") {
  const int before = tg::num_threads();
  // Before the barrier could be aborted, the other members waited for ever: fail, not hang.
  std::atomic<bool> done{false};
  std::thread watchdog([&] {
    for (int i = 0; i < 600 && !done.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (!done.load()) {
      std::fprintf(stderr, "parallel_team test: members still waiting after 60 s\n");
      std::_Exit(1);
    }
  });
  for (int threads : {1, 2, 3}) {
    for (int thrower = 0; thrower < threads; ++thrower) {
      // Throw before the first barrier, or between two; many times, since which exception
      // reaches the pool first (the cause or a waiter's TeamAborted) is a race.
      for (int rep = 0; rep < 200; ++rep) {
        const int phase = rep % 2;
        INFO("threads=" << threads << " thrower=" << thrower << " phase=" << phase);
        tg::set_num_threads(threads);
        std::atomic<int> passed{0};
        CHECK_THROWS_WITH_AS(tg::parallel_team(threads,
                                               [&](int tid, int, tg::Barrier& barrier) {
                                                 if (phase == 1) barrier.arrive_and_wait();
                                                 if (tid == thrower)
                                                   throw std::runtime_error("member failed");
                                                 barrier.arrive_and_wait();
                                                 passed.fetch_add(1);
                                               }),
                             "member failed", std::runtime_error);
        CHECK(passed.load() == 0);  // nobody got past the barrier the thrower never reached
        // The pool still runs teams afterwards.
        std::atomic<int> n{0};
        tg::parallel_team(threads, [&](int, int, tg::Barrier& barrier) {
          barrier.arrive_and_wait();
          n.fetch_add(1);
        });
        CHECK(n.load() == threads);
      }
    }
  }
  done.store(true);
  watchdog.join();
  tg::set_num_threads(before);
}

TEST_CASE("results are bit-identical for 1, 2 and 3 threads") {
  std::mt19937 g(11);
  const int before = tg::num_threads();
  const int64_t M = 301, N = 517, K = 211, n = (1 << 17) + 33;
  std::vector<float> A = randv(g, M * K), B = randv(g, K * N), x = randv(g, n, -5.f, 5.f);
  std::vector<float> y = randv(g, n);
  const int64_t Kl = 2600;  // a long K against a narrow B: dY·W-like
  std::vector<float> Al = randv(g, 128 * Kl), Bl = randv(g, Kl * 100);
  for_each_isa([&](const std::string&) {
    std::vector<std::vector<float>> outs;
    for (int t : {1, 2, 3}) {
      tg::set_num_threads(t);
      std::vector<float> C(M * N), Cb(M * N, 1.f), e(n), sm(n), gl(n), mx(n / 1024);
      k::sgemm(M, N, K, A.data(), K, 1, B.data(), N, 1, 0.f, C.data(), N);
      k::sgemm(M, N, K, A.data(), 1, M, B.data(), 1, K, 1.f, Cb.data(), N);  // Aᵀ·Bᵀ, beta 1
      // Few columns, many rows: the team splits rows instead of columns.
      std::vector<float> Cr(M * 40);
      k::sgemm(M, 40, K, A.data(), K, 1, B.data(), N, 1, 0.f, Cr.data(), 40);
      // 128 rows (the last panel short on AVX-512 and AVX2), the packed A kept across column
      // blocks.
      const int64_t Nk = k::gemm_blocking_for(k::active_table()).nc + 76;
      std::vector<float> Bk(K * Nk), Ck(128 * Nk);
      for (int64_t i = 0; i < K * Nk; ++i) Bk[size_t(i)] = B[size_t(i % (K * N))];
      k::sgemm(128, Nk, K, A.data(), K, 1, Bk.data(), Nk, 1, 0.f, Ck.data(), Nk);
      std::vector<float> Cl(128 * 100);
      k::sgemm(128, 100, Kl, Al.data(), Kl, 1, Bl.data(), 100, 1, 0.f, Cl.data(), 100);
      // dYᵀ·X-like: 2600 × 100 × 128 with A transposed (read in place, few column panels).
      std::vector<float> Ct(Kl * 100);
      k::sgemm(Kl, 100, 128, Al.data(), 1, Kl, Bl.data(), 100, 1, 0.f, Ct.data(), 100);
      k::exp(n, x.data(), e.data());
      k::softmax_rows(n / 1024, 1024, x.data(), sm.data());
      k::gelu_forward(n, x.data(), gl.data());
      k::max_rows(n / 1024, 1024, x.data(), mx.data());
      std::vector<float> gv(n / 1024);  // one row through a linear layer of 128 × 1024
      k::gemv_rows(n / 1024, 1024, x.data(), 1024, y.data(), y.data(), gv.data());
      // Attention-like batch: 6 heads of (64 × 64) · (64 × 96)ᵀ.
      std::vector<float> bc(6 * 64 * 96);
      k::sgemm_batched(6, 64, 96, 64, A.data(), 64 * 64, 64, 1, B.data(), 96 * 64, 1, 64, 0.f,
                       bc.data(), 64 * 96, 96);
      std::vector<float> ln(n), mean(n / 1024), rstd(n / 1024), ad = x, am(n, 0.f), av(n, 0.f);
      k::layernorm_forward(n / 1024, 1024, x.data(), y.data(), y.data(), 1e-5f, ln.data(),
                           mean.data(), rstd.data());
      k::adamw(n, ad.data(), y.data(), am.data(), av.data(), 1e-3f, 0.9f, 0.999f, 1e-8f, 0.1f, 1);
      std::vector<float> all;
      for (auto* v : {&C, &Cb, &Cr, &Ck, &Cl, &Ct, &e, &sm, &gl, &mx, &gv, &bc, &ln, &mean, &rstd,
                      &ad, &am, &av})
        all.insert(all.end(), v->begin(), v->end());
      outs.push_back(std::move(all));
    }
    check_equal(outs[1], outs[0], "2 threads vs 1");
    check_equal(outs[2], outs[0], "3 threads vs 1");
  });
  tg::set_num_threads(before);
}

namespace {

// out_head's three GEMMs with its vocabulary V padded to Vp (train --pad-vocab) against the
// unpadded ones: x [M, d]; w [Vp, d], rows V.. zero; dl [M, Vp] (the logits' gradient), columns
// V.. zero. gemm(M, N, K, A, rsA, csA, B, rsB, csB, C, ldc) is C = A·B for T's GEMM.
template <class T, class Gemm>
void check_padded_out_head(const Gemm& gemm, const std::vector<T>& x, const std::vector<T>& w,
                           const std::vector<T>& dl, int64_t M, int64_t d, int64_t V, int64_t Vp) {
  std::vector<T> dl_v(size_t(M * V));  // the unpadded gradient
  for (int64_t i = 0; i < M; ++i) std::copy_n(dl.begin() + i * Vp, V, dl_v.begin() + i * V);
  const auto same = [](const float* a, const float* b, int64_t n) {
    return std::memcmp(a, b, size_t(n) * sizeof(float)) == 0;
  };
  // logits = x · wᵀ: N is V or Vp
  std::vector<float> y(size_t(M * V)), yp(size_t(M * Vp));
  gemm(M, V, d, x.data(), d, 1, w.data(), 1, d, y.data(), V);
  gemm(M, Vp, d, x.data(), d, 1, w.data(), 1, d, yp.data(), Vp);
  for (int64_t i = 0; i < M; ++i) CHECK_MESSAGE(same(yp.data() + i * Vp, y.data() + i * V, V), i);
  // dx = dl · w: K is V or Vp (the padding's K terms are 0·0)
  std::vector<float> gx(size_t(M * d)), gxp(size_t(M * d));
  gemm(M, d, V, dl_v.data(), V, 1, w.data(), d, 1, gx.data(), d);
  gemm(M, d, Vp, dl.data(), Vp, 1, w.data(), d, 1, gxp.data(), d);
  CHECK(same(gx.data(), gxp.data(), M * d));
  // dw = dlᵀ · x: M is V or Vp, dlᵀ read through its strides as linear's backward reads it
  std::vector<float> gw(size_t(V * d)), gwp(size_t(Vp * d));
  gemm(V, d, M, dl_v.data(), 1, V, x.data(), d, 1, gw.data(), d);
  gemm(Vp, d, M, dl.data(), 1, Vp, x.data(), d, 1, gwp.data(), d);
  CHECK(same(gw.data(), gwp.data(), V * d));
  for (int64_t j = V * d; j < Vp * d; ++j) CHECK(gwp[size_t(j)] == 0.f);
}

}  // namespace

// Each C element's chain depends on its own row and column and on K's blocking, never on the
// other dims, so the vocabulary's part keeps its bits; checked across the shortcuts' thresholds:
// B read in place or packed (500 · 128 against 600 · 128 elements), one thread or a team
// (32 · 500 · 128 multiply-adds against 32 · 600 · 128), a K block of padding only (KC + 3),
// more than one column block (NC + 37), one row, an odd V (bf16's pairs of k).
TEST_CASE("out_head's GEMMs padded with zero rows (--pad-vocab) keep the vocabulary's bits") {
  std::mt19937 g(47);
  const int before = tg::num_threads();
  for_each_isa([&](const std::string&) {
    const k::GemmBlocking bk = k::gemm_blocking_for(k::active_table());
    struct Case {
      int64_t M, d, V;
    };
    for (const int threads : {1, 2}) {
      tg::set_num_threads(threads);
      for (const Case c : {Case{1, 64, 257}, Case{7, 128, 500}, Case{32, 128, 500},
                           Case{128, 64, 257}, Case{24, 32, bk.kc + 3}, Case{40, 48, bk.nc + 37}})
        for (const int64_t n : {int64_t(64), int64_t(100)}) {
          const int64_t Vp = (c.V + n - 1) / n * n;
          CAPTURE(threads);
          CAPTURE(c.M);
          CAPTURE(c.V);
          CAPTURE(Vp);
          const std::vector<float> x = randv(g, c.M * c.d);
          std::vector<float> w = randv(g, Vp * c.d), dl = randv(g, c.M * Vp);
          std::fill(w.begin() + c.V * c.d, w.end(), 0.f);
          for (int64_t i = 0; i < c.M; ++i)
            std::fill(dl.begin() + i * Vp + c.V, dl.begin() + (i + 1) * Vp, 0.f);
          check_padded_out_head<float>(
              [](int64_t M, int64_t N, int64_t K, const float* A, int64_t rsA, int64_t csA,
                 const float* B, int64_t rsB, int64_t csB, float* C,
                 int64_t ldc) { k::sgemm(M, N, K, A, rsA, csA, B, rsB, csB, 0.f, C, ldc); },
              x, w, dl, c.M, c.d, c.V, Vp);
          const auto bf16 = [](const std::vector<float>& v) {
            std::vector<uint16_t> h(v.size());
            k::f32_to_bf16(int64_t(v.size()), v.data(), h.data());
            return h;
          };
          check_padded_out_head<uint16_t>(
              [](int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t rsA, int64_t csA,
                 const uint16_t* B, int64_t rsB, int64_t csB, float* C,
                 int64_t ldc) { k::gemm_bf16(M, N, K, A, rsA, csA, B, rsB, csB, 0.f, C, ldc); },
              bf16(x), bf16(w), bf16(dl), c.M, c.d, c.V, Vp);
        }
    }
  });
  tg::set_num_threads(before);
}

TEST_CASE("binary ops: contiguous, row broadcast and scalar match the reference exactly") {
  std::mt19937 g(5);
  for_each_isa([&](const std::string&) {
    for (k::BinOp op : {k::BinOp::add, k::BinOp::sub, k::BinOp::mul, k::BinOp::div}) {
      for (int64_t n : kLens) {
        INFO("op=" << int(op) << " n=" << n);
        std::vector<float> a = randv(g, n), b = randv(g, n, 0.5f, 2.f), o(n), r(n);
        k::binary(op, n, a.data(), b.data(), o.data());
        k::binary_ref(op, n, a.data(), b.data(), r.data());
        check_equal(o, r, "binary");
        k::binary_scalar(op, n, a.data(), 1.7f, o.data());
        k::binary_scalar_ref(op, n, a.data(), 1.7f, r.data());
        check_equal(o, r, "binary_scalar");
        const int64_t rows = 3;
        std::vector<float> m = randv(g, rows * n), mo(rows * n), mr(rows * n);
        k::binary_rowbcast(op, rows, n, m.data(), b.data(), mo.data());
        k::binary_rowbcast_ref(op, rows, n, m.data(), b.data(), mr.data());
        check_equal(mo, mr, "binary_rowbcast");
      }
    }
  });
}

TEST_CASE("exp: max relative error <= 2e-7 against std::exp over the whole float range") {
  // The sweep: every input step over the normal-result range, then denormal results, then the
  // special values.
  std::vector<float> xs;
  for (double x = -87.33; x <= 88.72; x += 0.00137) xs.push_back(static_cast<float>(x));
  std::mt19937 g(9);
  for (int i = 0; i < 20000; ++i) xs.push_back(randv(g, 1, -87.3f, 88.7f)[0]);
  for (float x = -1e-3f; x <= 1e-3f; x += 1.3e-6f) xs.push_back(x);  // around exp's fixed point
  const size_t n_normal = xs.size();
  for (double x = -103.9; x <= -87.34; x += 0.013) xs.push_back(static_cast<float>(x));
  const size_t n_checked = xs.size();
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {-inf,   inf,    std::nanf(""), 0.f,  -0.f,  1e-40f, -1e-40f, 1e-45f,
                            -200.f, -1e30f, 88.73f,        89.f, 100.f, 1e30f,  88.72f};
  for (float s : specials) xs.push_back(s);
  for_each_isa([&](const std::string&) {
    std::vector<float> y(xs.size());
    k::exp(static_cast<int64_t>(xs.size()), xs.data(), y.data());
    double worst = 0;
    float worst_x = 0;
    int bad = 0;
    for (size_t i = 0; i < n_checked; ++i) {
      const double want = std::exp(double(xs[i]));
      const double err = std::fabs(double(y[i]) - want);
      if (i < n_normal) {
        if (err / want > worst) worst = err / want, worst_x = xs[i];
        if (err > 2e-7 * want) ++bad;
      } else if (err > 2e-7 * want + 1.5e-45) {  // denormal results: at most one denormal ulp
        ++bad;
      }
    }
    MESSAGE("exp worst relative error " << worst << " at x = " << worst_x);
    CHECK(bad == 0);
    CHECK(worst <= 2e-7);
    const float* s = y.data() + n_checked;
    CHECK(s[0] == 0.f);
    CHECK(s[1] == inf);
    CHECK(std::isnan(s[2]));
    CHECK(s[3] == 1.f);
    CHECK(s[4] == 1.f);
    CHECK(s[5] == 1.f);
    CHECK(s[6] == 1.f);
    CHECK(s[7] == 1.f);
    CHECK(s[8] == 0.f);
    CHECK(s[9] == 0.f);
    CHECK(s[10] == inf);
    CHECK(s[11] == inf);
    CHECK(s[12] == inf);
    CHECK(s[13] == inf);
    CHECK(std::isfinite(s[14]));
  });
}

// rows × cols logits in [-8, 8) for the row kernels, with row 1 all -inf (a fully masked row) and
// every other entry of row 2 -inf (as under a causal mask).
static std::vector<float> masked_rows(std::mt19937& g, int64_t rows, int64_t cols) {
  const float ninf = -std::numeric_limits<float>::infinity();
  std::vector<float> x = randv(g, rows * cols, -8.f, 8.f);
  for (int64_t c = 0; c < cols; ++c) x[1 * cols + c] = ninf;
  for (int64_t c = 1; c < cols; c += 2) x[2 * cols + c] = ninf;
  return x;
}

TEST_CASE("softmax forward/backward match the reference; all -inf rows give NaN") {
  std::mt19937 g(13);
  for_each_isa([&](const std::string&) {
    for (int64_t cols : kLens) {
      INFO("cols=" << cols);
      const int64_t rows = 4;
      const std::vector<float> x = masked_rows(g, rows, cols);
      std::vector<float> y(rows * cols), r(rows * cols);
      k::softmax_rows(rows, cols, x.data(), y.data());
      k::softmax_rows_ref(rows, cols, x.data(), r.data());
      std::vector<double> tol(y.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = 4.0 * (cols + 4) * FLT_EPSILON * r[i];
      check_close(y, r, tol, "softmax");
      for (int64_t c = 0; c < cols; ++c) CHECK(std::isnan(y[1 * cols + c]));
      // Backward from the reference output (row 1 excluded: NaN in, NaN out).
      std::vector<float> dy = randv(g, rows * cols), dx(rows * cols), dr(rows * cols);
      k::softmax_rows_backward(rows, cols, r.data(), dy.data(), dx.data());
      k::softmax_rows_backward_ref(rows, cols, r.data(), dy.data(), dr.data());
      for (size_t i = 0; i < tol.size(); ++i)
        tol[i] = 4.0 * (cols + 4) * FLT_EPSILON * std::fabs(r[i]) * 2.0 + 1e-30;
      check_close(dx, dr, tol, "softmax_backward");
    }
  });
}

TEST_CASE("softmax_stats_rows and exp_rows_scaled match the reference and softmax_rows") {
  std::mt19937 g(19);
  for_each_isa([&](const std::string&) {
    for (int64_t cols : kLens) {
      INFO("cols=" << cols);
      const int64_t rows = 4;
      const std::vector<float> x = masked_rows(g, rows, cols);
      std::vector<float> m(rows), s(rows), mr(rows), sr(rows);
      k::softmax_stats_rows(rows, cols, cols, x.data(), m.data(), s.data());
      k::softmax_stats_rows_ref(rows, cols, cols, x.data(), mr.data(), sr.data());
      CHECK(m == mr);  // a max is exact
      std::vector<double> tol(rows);
      for (int64_t r = 0; r < rows; ++r) tol[r] = 4.0 * (cols + 4) * FLT_EPSILON * std::fabs(sr[r]);
      check_close(s, sr, tol, "softmax_stats sum");
      CHECK(std::isnan(s[1]));
      // exp(x - m) / s is the softmax, up to rounding.
      std::vector<float> inv(rows), y(rows * cols), yr(rows * cols), sm(rows * cols);
      for (int64_t r = 0; r < rows; ++r) inv[r] = 1.f / sr[r];
      k::exp_rows_scaled(rows, cols, cols, x.data(), mr.data(), inv.data(), y.data());
      k::exp_rows_scaled_ref(rows, cols, cols, x.data(), mr.data(), inv.data(), yr.data());
      k::softmax_rows_ref(rows, cols, x.data(), sm.data());
      std::vector<double> t2(y.size());
      for (size_t i = 0; i < t2.size(); ++i) t2[i] = 4.0 * (cols + 4) * FLT_EPSILON * yr[i];
      check_close(y, yr, t2, "exp_rows_scaled");
      check_close(y, sm, t2, "exp_rows_scaled vs softmax");
      // In place (out == x).
      std::vector<float> xi = x;
      k::exp_rows_scaled(rows, cols, cols, xi.data(), mr.data(), inv.data(), xi.data());
      CHECK((y.empty() || std::memcmp(xi.data(), y.data(), y.size() * sizeof(float)) == 0));
      // Rows ld apart (a padded vocabulary): the first cols columns give the same bits, and the
      // padding, NaN here, is neither read nor written.
      for (const int64_t pad : {int64_t(1), int64_t(47)}) {
        const int64_t ld = cols + pad;
        std::vector<float> xp(size_t(rows * ld), std::numeric_limits<float>::quiet_NaN());
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(x.begin() + r * cols, cols, xp.begin() + r * ld);
        std::vector<float> mp(rows), sp(rows);
        k::softmax_stats_rows(rows, cols, ld, xp.data(), mp.data(), sp.data());
        CHECK(std::memcmp(mp.data(), m.data(), rows * sizeof(float)) == 0);
        CHECK(std::memcmp(sp.data(), s.data(), rows * sizeof(float)) == 0);
        k::exp_rows_scaled(rows, cols, ld, xp.data(), mr.data(), inv.data(), xp.data());
        for (int64_t r = 0; r < rows; ++r) {
          CHECK((cols == 0 ||  // (y.data() is null then, which memcmp may not be given)
                 std::memcmp(xp.data() + r * ld, y.data() + r * cols, cols * sizeof(float)) == 0));
          for (int64_t c = cols; c < ld; ++c) CHECK(std::isnan(xp[size_t(r * ld + c)]));
        }
      }
    }
  });
}

TEST_CASE("masked_fill matches the reference, full and broadcast masks") {
  std::mt19937 g(17);
  const float ninf = -std::numeric_limits<float>::infinity();
  for_each_isa([&](const std::string&) {
    for (int64_t cols : kLens) {
      const int64_t T = cols, rows = 3 * std::max<int64_t>(T, 1);
      std::vector<float> x = randv(g, rows * cols), o(rows * cols), r(rows * cols);
      std::vector<uint8_t> mask(std::max<int64_t>(T, 1) * cols);
      for (int64_t i = 0; i < std::max<int64_t>(T, 1); ++i)
        for (int64_t j = 0; j < cols; ++j) mask[i * cols + j] = j > i;  // causal
      const int64_t mrows = std::max<int64_t>(T, 1);
      k::masked_fill(rows, cols, x.data(), mask.data(), mrows, ninf, o.data());
      k::masked_fill_ref(rows, cols, x.data(), mask.data(), mrows, ninf, r.data());
      check_equal(o, r, "masked_fill broadcast");
      std::vector<uint8_t> full(rows * cols);
      for (auto& m : full) m = g() & 1;
      k::masked_fill(rows, cols, x.data(), full.data(), rows, 0.f, o.data());
      k::masked_fill_ref(rows, cols, x.data(), full.data(), rows, 0.f, r.data());
      check_equal(o, r, "masked_fill full");
    }
  });
}

TEST_CASE("layernorm forward/backward match the reference") {
  std::mt19937 g(19);
  for_each_isa([&](const std::string&) {
    for (int64_t C : kLens) {
      if (C == 0) continue;
      INFO("C=" << C);
      const int64_t rows = 5;
      std::vector<float> x = randv(g, rows * C, -2.f, 3.f), w = randv(g, C), b = randv(g, C);
      std::vector<float> o(rows * C), r(rows * C), m(rows), mr(rows), s(rows), sr(rows);
      k::layernorm_forward(rows, C, x.data(), w.data(), b.data(), 1e-5f, o.data(), m.data(),
                           s.data());
      k::layernorm_forward_ref(rows, C, x.data(), w.data(), b.data(), 1e-5f, r.data(), mr.data(),
                               sr.data());
      const double tl = 8.0 * (C + 8) * FLT_EPSILON;
      std::vector<double> tol(r.size());
      for (size_t i = 0; i < tol.size(); ++i) tol[i] = tl * (1.0 + std::fabs(r[i]));
      check_close(o, r, tol, "layernorm out");
      check_close(m, mr, std::vector<double>(rows, tl * 3), "layernorm mean");
      std::vector<double> ts(rows);
      for (int64_t i = 0; i < rows; ++i) ts[i] = tl * sr[i];
      check_close(s, sr, ts, "layernorm rstd");
      // Backward accumulates into pre-filled buffers.
      std::vector<float> dout = randv(g, rows * C), dx = randv(g, rows * C), dw = randv(g, C);
      std::vector<float> db = randv(g, C), dxr = dx, dwr = dw, dbr = db;
      k::layernorm_backward(rows, C, dout.data(), x.data(), w.data(), mr.data(), sr.data(),
                            dx.data(), dw.data(), db.data());
      k::layernorm_backward_ref(rows, C, dout.data(), x.data(), w.data(), mr.data(), sr.data(),
                                dxr.data(), dwr.data(), dbr.data());
      std::vector<double> tx(dx.size(), tl * 4), tw(C, tl * rows * 4);
      check_close(dx, dxr, tx, "layernorm dx");
      check_close(dw, dwr, tw, "layernorm dweight");
      check_close(db, dbr, tw, "layernorm dbias");
    }
  });
}

TEST_CASE("gelu forward/backward match the reference") {
  std::mt19937 g(23);
  for_each_isa([&](const std::string&) {
    for (int64_t n : kLens) {
      INFO("n=" << n);
      std::vector<float> x = randv(g, n, -9.f, 9.f), o(n), r(n), dout = randv(g, n);
      k::gelu_forward(n, x.data(), o.data());
      k::gelu_forward_ref(n, x.data(), r.data());
      // The reference's 1 + tanh(u) cancels for negative x; the tolerance is absolute in x.
      std::vector<double> tol(n);
      for (int64_t i = 0; i < n; ++i) tol[i] = 1e-6 * (1.0 + std::fabs(x[i]));
      check_close(o, r, tol, "gelu");
      k::gelu_backward(n, x.data(), dout.data(), o.data());
      k::gelu_backward_ref(n, x.data(), dout.data(), r.data());
      for (int64_t i = 0; i < n; ++i) tol[i] = 2e-6 * (1.0 + std::fabs(x[i]));
      check_close(o, r, tol, "gelu_backward");
    }
  });
}

TEST_CASE("row reductions and column sums match the reference") {
  std::mt19937 g(29);
  const float nan = std::nanf("");
  for_each_isa([&](const std::string&) {
    for (int64_t cols : kLens) {
      INFO("cols=" << cols);
      const int64_t rows = 4;
      std::vector<float> x = randv(g, rows * cols), o(rows), r(rows);
      if (cols > 2) x[2 * cols + cols / 2] = nan;
      k::sum_rows(rows, cols, x.data(), o.data());
      k::sum_rows_ref(rows, cols, x.data(), r.data());
      check_close(o, r, std::vector<double>(rows, 2.0 * (cols + 2) * FLT_EPSILON * cols),
                  "sum_rows");
      k::max_rows(rows, cols, x.data(), o.data());
      k::max_rows_ref(rows, cols, x.data(), r.data());
      check_equal(o, r, "max_rows");
      if (cols > 2) CHECK(std::isnan(o[2]));
      std::vector<float> sc(cols), scr(cols);
      if (cols > 2) x[2 * cols + cols / 2] = 0.25f;
      k::sum_cols(rows, cols, x.data(), sc.data());
      k::sum_cols_ref(rows, cols, x.data(), scr.data());
      check_equal(sc, scr, "sum_cols");
    }
    // Rows wider than a page take sum_cols' other path (row by row, in blocks of 4096 columns).
    for (int64_t cols : {1025, 3072, 4096, 8195}) {
      INFO("cols=" << cols);
      const int64_t rows = 5;
      const std::vector<float> x = randv(g, rows * cols);
      std::vector<float> sc(cols), scr(cols);
      k::sum_cols(rows, cols, x.data(), sc.data());
      k::sum_cols_ref(rows, cols, x.data(), scr.data());
      check_equal(sc, scr, "sum_cols");
    }
  });
}

TEST_CASE("gemv_rows matches the reference (every tail, a row stride, with and without bias)") {
  std::mt19937 g(31);
  for_each_isa([&](const std::string&) {
    for (int64_t cols : kLens) {
      for (int64_t rows : {int64_t(1), int64_t(3), int64_t(4), int64_t(9), int64_t(70)}) {
        INFO("rows=" << rows << " cols=" << cols);
        const int64_t ldw = cols + 3;  // a row stride wider than the row
        std::vector<float> w = randv(g, rows * ldw), x = randv(g, cols), b = randv(g, rows);
        std::vector<float> o(rows), r(rows), tol(rows);
        std::vector<double> t(rows);
        for (int64_t i = 0; i < rows; ++i) {
          double mag = std::fabs(b[size_t(i)]);
          for (int64_t c = 0; c < cols; ++c)
            mag += std::fabs(double(w[size_t(i * ldw + c)]) * x[size_t(c)]);
          t[size_t(i)] = 2.0 * (cols + 2) * FLT_EPSILON * mag;
        }
        for (const float* bias :
             {static_cast<const float*>(nullptr), static_cast<const float*>(b.data())}) {
          k::gemv_rows(rows, cols, w.data(), ldw, x.data(), bias, o.data());
          k::gemv_rows_ref(rows, cols, w.data(), ldw, x.data(), bias, r.data());
          check_close(o, r, t, "gemv_rows");
        }
      }
    }
  });
}

TEST_CASE("adamw is bit-identical to the reference (PyTorch's update order)") {
  std::mt19937 g(31);
  for_each_isa([&](const std::string&) {
    for (int64_t n : kLens) {
      std::vector<float> p = randv(g, n), gr = randv(g, n), m = randv(g, n, -0.1f, 0.1f);
      std::vector<float> v = randv(g, n, 0.f, 0.01f), pr = p, mr = m, vr = v;
      for (int64_t step = 1; step <= 3; ++step) {
        k::adamw(n, p.data(), gr.data(), m.data(), v.data(), 4e-4f, 0.9f, 0.999f, 1e-8f, 0.1f,
                 step);
        k::adamw_ref(n, pr.data(), gr.data(), mr.data(), vr.data(), 4e-4f, 0.9f, 0.999f, 1e-8f,
                     0.1f, step);
      }
      check_equal(p, pr, "adamw p");
      check_equal(m, mr, "adamw m");
      check_equal(v, vr, "adamw v");
    }
  });
}

TEST_CASE("float64 entries run the reference") {
  const double a[] = {1, 2, 3, 4}, b[] = {5, 6, 7, 8};
  double c[4];
  k::dgemm(2, 2, 2, a, 2, 1, b, 2, 1, 0.0, c, 2);
  CHECK(c[0] == 19);
  CHECK(c[3] == 50);
  double y[4];
  k::softmax_rows(1, 4, a, y);
  CHECK(std::fabs(y[0] + y[1] + y[2] + y[3] - 1.0) < 1e-15);
}

TEST_CASE("mt19937 twist/temper and bernoulli_words are bit-identical to the reference") {
  std::mt19937 g(29);
  for_each_isa([&](const std::string&) {
    // The twist against std::mt19937 itself: twist the seeded state, temper, compare the stream.
    std::mt19937 ref(5489u);
    uint32_t s[624];
    s[0] = 5489u;
    for (uint32_t i = 1; i < 624; ++i) s[i] = 1812433253u * (s[i - 1] ^ (s[i - 1] >> 30)) + i;
    bool same = true;
    for (int round = 0; round < 3; ++round) {
      uint32_t s_ref[624];
      std::memcpy(s_ref, s, sizeof s);
      k::mt19937_twist(s);
      k::mt19937_twist_ref(s_ref);
      same = same && std::memcmp(s, s_ref, sizeof s) == 0;
      uint32_t out[624];
      k::mt19937_temper(624, s, out);
      for (uint32_t w : out) same = same && w == ref();
    }
    CHECK(same);
    // Bernoulli over random words; limits at the edges of the 53-bit range and at a word split.
    for (int64_t n :
         {int64_t(0), int64_t(1), int64_t(15), int64_t(16), int64_t(17), int64_t(1000)}) {
      std::vector<uint32_t> w(static_cast<size_t>(2 * n));
      for (auto& x : w) x = g();
      if (n > 3) w[2] = 0x7FFFFu, w[3] = 0x1234u;  // hi half equal to a limit's below
      for (uint64_t limit : {uint64_t(0), uint64_t(1), (uint64_t(0x7FFFF) << 32) | 0x1234u,
                             (uint64_t(0x7FFFF) << 32) | 0x1235u, uint64_t(1) << 52,
                             (uint64_t(1) << 53) - 1, uint64_t(1) << 53}) {
        std::vector<float> o(static_cast<size_t>(n)), r(static_cast<size_t>(n));
        k::bernoulli_words(n, w.data(), limit, 1.25f, -0.5f, o.data());
        k::bernoulli_words_ref(n, w.data(), limit, 1.25f, -0.5f, r.data());
        CHECK_MESSAGE(o == r, "n " << n << " limit " << limit);
      }
    }
  });
}
