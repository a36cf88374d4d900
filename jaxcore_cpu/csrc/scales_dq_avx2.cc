// AVX2 expansion of double-quantized scales (kernels.h, ExpandDq), 8 codes at a time, for the
// AVX2 and AVX-VNNI tables (before it they expanded one code at a time, portably: NF4 with
// double-quantized scales at M = 1 ran ~10 % slower than plain NF4 there, now 0-4 %). GCC
// contracts a vector multiply and add into a fused multiply-add, whose single rounding would
// differ from the reference's two: an empty asm statement keeps the product a value of its own.
#include <immintrin.h>

#include <cstdint>
#include <limits>

#include "kernels.h"

namespace jaxcore_cpu {
namespace internal {

void ExpandDqAvx2(const int8_t* codes, int64_t count, float gs, float offset, float* out) {
  const __m256 scale = _mm256_set1_ps(gs);
  const __m256 shift = _mm256_set1_ps(offset);
  const __m256 most = _mm256_set1_ps(std::numeric_limits<float>::max());
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i));
    __m256 product = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), scale);
    asm("" : "+x"(product));  // not fused with the add
    // min(most, v) returns v where v is NaN (the second operand), as the reference keeps it.
    _mm256_storeu_ps(out + i, _mm256_min_ps(most, _mm256_add_ps(product, shift)));
  }
  ExpandDqPortable(codes + i, count - i, gs, offset, out + i);
}

}  // namespace internal
}  // namespace jaxcore_cpu
