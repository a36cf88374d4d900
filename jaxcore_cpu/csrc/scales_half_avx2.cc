// AVX2 conversion of 16-bit scales (kernels.h, ExpandHalf), 8 at a time: float16 through
// F16C's vcvtph2ps (exact, as every 16-bit value is a float32), bfloat16 by widening each
// value into the high half of an int32 lane.
#include <immintrin.h>

#include <cstdint>

#include "kernels.h"

namespace jaxcore_cpu {
namespace internal {

void ExpandHalfAvx2(const uint16_t* in, int64_t count, HalfType type, float* out) {
  int64_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256 v = type == HalfType::kF16
                         ? _mm256_cvtph_ps(h)
                         : _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_storeu_ps(out + i, v);
  }
  ExpandHalfPortable(in + i, count - i, type, out + i);
}

}  // namespace internal
}  // namespace jaxcore_cpu
