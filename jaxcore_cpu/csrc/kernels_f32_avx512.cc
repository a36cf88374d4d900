// AVX-512 float32 GEMM micro-kernel (compiled with the AVX-512 flags; only called after the
// run-time cpuid check). The AVX2 one keeps 6 rows x 16 columns in twelve ymm registers and
// issues 256-bit FMAs; here one zmm register holds a row of the 16-column sliver, so 12
// rows fit in twelve accumulators and every FMA is 512 bits wide with its activation
// broadcast from memory. On cores with two 512-bit FMA units (Intel Xeon) that doubles the
// float32 GEMM rate; on Zen 4 (512-bit FMAs in two halves) it matches the AVX2 kernel with
// half the instructions. Twelve independent accumulators cover the FMA latency (4 cycles)
// on two units.
#include <immintrin.h>

#include <cstdint>

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
// stores them on every iteration.
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
    JAXCORE_ROW(0)
    JAXCORE_ROW(1)
    JAXCORE_ROW(2)
    JAXCORE_ROW(3)
    JAXCORE_ROW(4)
    JAXCORE_ROW(5)
    JAXCORE_ROW(6)
    JAXCORE_ROW(7)
    JAXCORE_ROW(8)
    JAXCORE_ROW(9)
    JAXCORE_ROW(10)
    JAXCORE_ROW(11)
  }
  // The masked load and store touch only the first `cols` columns of each row of C.
  const __mmask16 mask = static_cast<__mmask16>((1u << cols) - 1u);
  JAXCORE_STORE(0)
  JAXCORE_STORE(1)
  JAXCORE_STORE(2)
  JAXCORE_STORE(3)
  JAXCORE_STORE(4)
  JAXCORE_STORE(5)
  JAXCORE_STORE(6)
  JAXCORE_STORE(7)
  JAXCORE_STORE(8)
  JAXCORE_STORE(9)
  JAXCORE_STORE(10)
  JAXCORE_STORE(11)
}
#undef JAXCORE_ROW
#undef JAXCORE_STORE

}  // namespace

void MicroKernelAvx512(int mr, int64_t kc, const float* a, const float* b, float* c,
                       int64_t ldc, bool accumulate, int cols) {
  switch (mr) {
    case 1: return MicroKernelT<1>(kc, a, b, c, ldc, accumulate, cols);
    case 2: return MicroKernelT<2>(kc, a, b, c, ldc, accumulate, cols);
    case 3: return MicroKernelT<3>(kc, a, b, c, ldc, accumulate, cols);
    case 4: return MicroKernelT<4>(kc, a, b, c, ldc, accumulate, cols);
    case 5: return MicroKernelT<5>(kc, a, b, c, ldc, accumulate, cols);
    case 6: return MicroKernelT<6>(kc, a, b, c, ldc, accumulate, cols);
    case 7: return MicroKernelT<7>(kc, a, b, c, ldc, accumulate, cols);
    case 8: return MicroKernelT<8>(kc, a, b, c, ldc, accumulate, cols);
    case 9: return MicroKernelT<9>(kc, a, b, c, ldc, accumulate, cols);
    case 10: return MicroKernelT<10>(kc, a, b, c, ldc, accumulate, cols);
    case 11: return MicroKernelT<11>(kc, a, b, c, ldc, accumulate, cols);
    default: return MicroKernelT<12>(kc, a, b, c, ldc, accumulate, cols);
  }
}

}  // namespace internal
}  // namespace jaxcore_cpu
