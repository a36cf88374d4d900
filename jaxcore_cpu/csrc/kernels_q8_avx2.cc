// AVX2 int8-activation kernels (Precision::kInt8), compiled with -mavx2 -mfma: the 256-bit
// task kernel of kernels_q8_ymm.h taking its products with vpmaddubsw and vpmaddwd, and the
// activation quantizer every 256-bit table shares.
#include <immintrin.h>

#include <cstring>
#include <limits>

#include "kernels.h"
#include "kernels_q8_ymm.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

struct MaddubsProducts {
  static constexpr bool kVnni = false;
};

}  // namespace

// Q8QuantizePortable's arithmetic, eight values at a time: the same amax, the same 127 / amax
// and round-to-nearest-even (vcvtps2dq under the default rounding mode, as nearbyint), so
// the codes are identical, and the same NaN scale for a unit holding NaN or infinity. The
// scalar loop cost ~0.25 ms per 16 x 4096 activations on Zen 4, serial before the kernels.
void Q8QuantizeAvx2(Format fmt, int span, const float* x, int64_t k, int64_t rows, int8_t* q,
                    float* d, int32_t* sum) {
  constexpr int kMaxSpan = 2;  // Q8ScaleSpan's largest
  if (span < 1 || span > kMaxSpan) return Q8QuantizePortable(fmt, span, x, k, rows, q, d, sum);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 most = _mm256_set1_ps(std::numeric_limits<float>::max());
  // packs_epi32 then packs_epi16 leave the 4-code units as a0 b0 c0 d0 | a1 b1 c1 d1 (a..d:
  // the four input vectors, 0/1: their halves); this puts them back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  // Q8CodeAt's order for the nibble-packed formats: rows 0 2 4 6 1 3 5 7 of each eight.
  const __m256i nibble_order =
      _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15, 0, 2, 4, 6, 1, 3, 5,
                       7, 8, 10, 12, 14, 9, 11, 13, 15);
  const bool nibbles = fmt != Format::kInt8;
  for (int64_t g0 = 0; g0 + span <= k / kQ8Group; g0 += span) {
    __m256 v[kMaxSpan][4];
    __m256 bad = _mm256_setzero_ps(), m8 = _mm256_setzero_ps();
    for (int gi = 0; gi < span; ++gi) {
      for (int i = 0; i < 4; ++i) {
        v[gi][i] = _mm256_loadu_ps(x + (g0 + gi) * kQ8Group + 8 * i);
        const __m256 a = _mm256_and_ps(v[gi][i], magnitude);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, most, _CMP_NLE_UQ));  // NaN or infinity
        m8 = _mm256_max_ps(m8, a);
      }
    }
    if (_mm256_movemask_ps(bad) != 0) {
      for (int64_t g = g0; g < g0 + span; ++g) {
        std::memset(q + g * rows * kQ8Group, 0, kQ8Group);
        d[g * rows] = std::numeric_limits<float>::quiet_NaN();
        sum[g * rows] = 0;
      }
      continue;
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float dg = amax / 127.0f;
    const __m256 s = _mm256_set1_ps(dg > 0.0f ? 127.0f / amax : 0.0f);
    for (int gi = 0; gi < span; ++gi) {
      const int64_t g = g0 + gi;
      __m256i c[4];
      for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[gi][i], s));
      // |codes| <= 127: neither pack saturates.
      const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]),
                                               _mm256_packs_epi32(c[2], c[3]));
      __m256i codes = _mm256_permutevar8x32_epi32(bytes, order);
      if (nibbles) codes = _mm256_shuffle_epi8(codes, nibble_order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g * rows * kQ8Group), codes);
      const __m256i s8 =
          _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
      d[g * rows] = dg;
      sum[g * rows] = _mm_cvtsi128_si32(s4);
    }
  }
}

void Q8TaskAvx2(const Q8Task& t) { Q8TaskYmm<MaddubsProducts>(t); }

}  // namespace internal
}  // namespace jaxcore_cpu
