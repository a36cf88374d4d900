// Lane shuffles the AVX-512 kernels share: they move float values of a 64-column chunk
// between the orders their decoders leave them in and column order. Include only from
// sources compiled with -mavx512f.
#ifndef JAXCORE_CPU_CSRC_LANES_AVX512_H_
#define JAXCORE_CPU_CSRC_LANES_AVX512_H_

#include <immintrin.h>

namespace jaxcore_cpu {
namespace internal {
// Internal linkage, as lanes_avx2.h: each source compiles its own copy.
namespace {

// 4 x 4 transpose of the 128-bit lanes of v[0..3] (its own inverse): lane L of v[j] goes
// to lane j of v[L].
inline void TransposeLanes(__m512 v[4]) {
  const __m512 a0 = _mm512_shuffle_f32x4(v[0], v[1], 0x44);
  const __m512 a1 = _mm512_shuffle_f32x4(v[0], v[1], 0xEE);
  const __m512 a2 = _mm512_shuffle_f32x4(v[2], v[3], 0x44);
  const __m512 a3 = _mm512_shuffle_f32x4(v[2], v[3], 0xEE);
  v[0] = _mm512_shuffle_f32x4(a0, a2, 0x88);
  v[1] = _mm512_shuffle_f32x4(a0, a2, 0xDD);
  v[2] = _mm512_shuffle_f32x4(a1, a3, 0x88);
  v[3] = _mm512_shuffle_f32x4(a1, a3, 0xDD);
}

// Values of a 64-column chunk held four columns to an int32 lane (int32 lane i of v[b]:
// column 4 i + b, as a row of 64 bytes loaded whole gives them) into column order (v[k]:
// columns 16 k .. 16 k + 15). After TransposeLanes, lane 4 b + t of v[k] is column
// 16 k + 4 t + b; one permute per vector puts it at lane 4 t + b.
inline void BytesToColumnOrder(__m512 v[4]) {
  TransposeLanes(v);
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  for (int k = 0; k < 4; ++k) v[k] = _mm512_permutexvar_ps(order, v[k]);
}

}  // namespace
}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_LANES_AVX512_H_
