// Scalar pieces the AVX2 and AVX-512 float32 GEMV kernels share: where a band's prefetch
// lands, and the band's activations copied row-interleaved. Plain C++ (no intrinsics).
#ifndef JAXCORE_CPU_CSRC_GEMV_BANDS_H_
#define JAXCORE_CPU_CSRC_GEMV_BANDS_H_

#include <cstdint>

#include "kernels.h"

namespace jaxcore_cpu {
namespace internal {
// Internal linkage: the two kernels are built with different ISA flags and each compiles its
// own copy, so the linker cannot hand the AVX2 one code the compiler vectorized for AVX-512.
namespace {

// The address `ahead` bytes along the rows of the band of stored rows [sr0, sr1) of a
// segment whose band walks its first `wide` columns, running on into the next band's rows
// past the end of the columns. An integer: past the weight's last row it names bytes the
// kernel never reads, and a prefetch does not fault.
inline uintptr_t BandAhead(const GemvSegment& s, int64_t sr0, int64_t sr1, int64_t ahead,
                           int64_t wide) {
  return reinterpret_cast<uintptr_t>(s.q) + s.n0 +
         (ahead < wide ? sr0 * s.ldq + ahead : sr1 * s.ldq + ahead - wide);
}

// xb[r][mi] = x[mi][r0 + r] for the first `rows` logical rows from r0: each row's M
// activations in one or two cache lines (rows of x a multiple of 4 KiB apart would share
// one L1 set).
template <int M>
inline void InterleaveRows(const GemvSegment& s, int64_t r0, int64_t rows, float (*xb)[M]) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int mi = 0; mi < M; ++mi) xb[r][mi] = s.x[mi * s.ldx + r0 + r];
  }
}

}  // namespace
}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_GEMV_BANDS_H_
