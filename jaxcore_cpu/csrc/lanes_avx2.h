// Lane shuffles the AVX2 kernels share: two rounds of in-lane byte unpacks leave 32 columns
// in the order {0-3, 16-19}, {4-7, 20-23}, {8-11, 24-27}, {12-15, 28-31} (one vector each);
// these move float values of 32 columns between that order and column order. Include only
// from sources compiled with -mavx2.
#ifndef JAXCORE_CPU_CSRC_LANES_AVX2_H_
#define JAXCORE_CPU_CSRC_LANES_AVX2_H_

#include <immintrin.h>

namespace jaxcore_cpu {
namespace internal {
// Internal linkage: sources built with different ISA flags (AVX2, AVX-VNNI, the AVX-512
// encoding of AVX-VNNI) each compile their own copy, so the linker cannot hand one of them
// another's instructions.
namespace {

// The unpacking's order to column order (v[j] = columns 8 j .. 8 j + 7).
inline void ToColumnOrder(const __m256 f[4], __m256 v[4]) {
  v[0] = _mm256_permute2f128_ps(f[0], f[1], 0x20);
  v[1] = _mm256_permute2f128_ps(f[2], f[3], 0x20);
  v[2] = _mm256_permute2f128_ps(f[0], f[1], 0x31);
  v[3] = _mm256_permute2f128_ps(f[2], f[3], 0x31);
}

// The inverse of ToColumnOrder.
inline void FromColumnOrder(const __m256 v[4], __m256 f[4]) {
  f[0] = _mm256_permute2f128_ps(v[0], v[2], 0x20);
  f[1] = _mm256_permute2f128_ps(v[0], v[2], 0x31);
  f[2] = _mm256_permute2f128_ps(v[1], v[3], 0x20);
  f[3] = _mm256_permute2f128_ps(v[1], v[3], 0x31);
}

}  // namespace
}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_LANES_AVX2_H_
