// AVX-512 float32 GEMM micro-kernel (compiled with the AVX-512 flags; only called after the
// run-time cpuid check). The AVX2 one keeps 6 rows x 16 columns in twelve ymm registers and
// issues 256-bit FMAs; here one zmm register holds a row of the 16-column sliver, so 12
// rows fit in twelve accumulators and every FMA is 512 bits wide with its activation
// broadcast from memory. On cores with two 512-bit FMA units (Intel Xeon) that doubles the
// float32 GEMM rate; on Zen 4 (512-bit FMAs in two halves) it matches the AVX2 kernel with
// half the instructions. Twelve independent accumulators cover the FMA latency (4 cycles)
// on two units.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "kernels.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jaxcore_cpu {
namespace internal {
namespace {

static_assert(kNr == 16, "one zmm register per sliver row");
static_assert(kMr == 12, "twelve named accumulators");

// Named accumulators rather than an array: GCC keeps arrays of vectors on the stack and
// stores them on every iteration. X(i) for each row of a micro-tile:
#define JAXCORE_FOR_ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#define JAXCORE_ROW(i)                                                     \
  if constexpr (MR > i) {                                                  \
    c##i = _mm512_fmadd_ps(_mm512_set1_ps(a[k * kMr + i]), bk, c##i);       \
  }

#define JAXCORE_STORE(i)                                                   \
  if constexpr (MR > i) {                                                  \
    float* ci = c + i * ldc;                                               \
    const __m512 v = accumulate ? _mm512_add_ps(c##i, _mm512_maskz_loadu_ps(mask, ci)) : c##i; \
    _mm512_mask_storeu_ps(ci, mask, v);                                    \
  }

template <int MR>
void MicroKernelT(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                  bool accumulate, int cols) {
  static_assert(MR >= 1 && MR <= kMr, "micro-tile rows");
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
         c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 bk = _mm512_loadu_ps(b + k * kNr);
    JAXCORE_FOR_ROWS(JAXCORE_ROW)
  }
  // The masked load and store touch only the first `cols` columns of each row of C.
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  JAXCORE_FOR_ROWS(JAXCORE_STORE)
}
#undef JAXCORE_ROW
#undef JAXCORE_STORE

// Two slivers: 24 accumulators (c for b0's columns, d for b1's), each activation broadcast
// once into a register for its two FMAs. Per step of k that is 14 loads for 24 FMAs, where
// MicroKernelT issues 13 for 12.
#define JAXCORE_ROW(i)                                                     \
  if constexpr (MR > i) {                                                  \
    const __m512 ai = _mm512_set1_ps(a[k * kMr + i]);                      \
    c##i = _mm512_fmadd_ps(ai, b0k, c##i);                                 \
    d##i = _mm512_fmadd_ps(ai, b1k, d##i);                                 \
  }

#define JAXCORE_STORE(i)                                                   \
  if constexpr (MR > i) {                                                  \
    float* ci = c + i * ldc;                                               \
    const __m512 lo = accumulate ? _mm512_add_ps(c##i, _mm512_loadu_ps(ci)) : c##i; \
    const __m512 hi = accumulate ? _mm512_add_ps(d##i, _mm512_maskz_loadu_ps(mask, ci + kNr)) \
                                 : d##i;                                   \
    _mm512_storeu_ps(ci, lo);                                              \
    _mm512_mask_storeu_ps(ci + kNr, mask, hi);                             \
  }

template <int MR>
void MicroKernelPairT(int64_t kc, const float* a, const float* b0, const float* b1, float* c,
                      int64_t ldc, bool accumulate, int cols) {
  static_assert(MR >= 1 && MR <= kMr, "micro-tile rows");
  __m512 c0 = _mm512_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0, c6 = c0,
         c7 = c0, c8 = c0, c9 = c0, c10 = c0, c11 = c0;
  __m512 d0 = c0, d1 = c0, d2 = c0, d3 = c0, d4 = c0, d5 = c0, d6 = c0, d7 = c0, d8 = c0,
         d9 = c0, d10 = c0, d11 = c0;
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0k = _mm512_loadu_ps(b0 + k * kNr);
    const __m512 b1k = _mm512_loadu_ps(b1 + k * kNr);
    JAXCORE_FOR_ROWS(JAXCORE_ROW)
  }
  // The first sliver's columns are all written (cols > kNr); of the second, cols - kNr.
  const __mmask16 mask = static_cast<__mmask16>((1u << (cols - kNr)) - 1u);
  JAXCORE_FOR_ROWS(JAXCORE_STORE)
}
#undef JAXCORE_ROW
#undef JAXCORE_STORE
#undef JAXCORE_FOR_ROWS

// A kernel's instances for MR = 1..kMr, indexed by MR - 1: instance(mr) names the one for
// the std::integral_constant mr.
template <typename Instance, int... I>
constexpr auto ByRows(Instance instance, std::integer_sequence<int, I...>) {
  return std::array{instance(std::integral_constant<int, I + 1>{})...};
}
constexpr auto kSingle = ByRows([](auto mr) { return &MicroKernelT<mr>; },
                                std::make_integer_sequence<int, kMr>());
constexpr auto kPair = ByRows([](auto mr) { return &MicroKernelPairT<mr>; },
                              std::make_integer_sequence<int, kMr>());

int TableIndex(int mr) { return std::clamp(mr, 1, kMr) - 1; }

}  // namespace

void MicroKernelAvx512(int mr, int64_t kc, const float* a, const float* b, float* c,
                       int64_t ldc, bool accumulate, int cols) {
  kSingle[TableIndex(mr)](kc, a, b, c, ldc, accumulate, cols);
}

void MicroKernelPairAvx512(int mr, int64_t kc, const float* a, const float* b0, const float* b1,
                           float* c, int64_t ldc, bool accumulate, int cols) {
  kPair[TableIndex(mr)](kc, a, b0, b1, c, ldc, accumulate, cols);
}

}  // namespace internal
}  // namespace jaxcore_cpu

