// AVX-512 expansion of double-quantized scales (kernels.h, ExpandDq), 16 codes at a time.
// The multiply and the add use the explicit-rounding forms: GCC contracts the plain
// intrinsics into a fused multiply-add, whose single rounding would differ from the
// reference's two.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jaxcore_cpu {
namespace internal {

void ExpandDqAvx512(const int8_t* codes, int64_t count, float gs, float offset, float* out) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const __m512 scale = _mm512_set1_ps(gs);
  const __m512 shift = _mm512_set1_ps(offset);
  const __m512 most = _mm512_set1_ps(std::numeric_limits<float>::max());
  int64_t i = 0;
  for (; i + 16 <= count; i += 16) {
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + i));
    const __m512 v = _mm512_add_round_ps(
        _mm512_mul_round_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), scale, kRound), shift,
        kRound);
    // min(most, v) returns v where v is NaN (the second operand), as the reference keeps it.
    _mm512_storeu_ps(out + i, _mm512_min_ps(most, v));
  }
  ExpandDqPortable(codes + i, count - i, gs, offset, out + i);
}

}  // namespace internal
}  // namespace jaxcore_cpu
