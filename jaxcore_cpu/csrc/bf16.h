// bfloat16 <-> float32 conversions of the activations and results (plain C++), one value at a
// time or whole row-major arrays a row per task; float16 -> float32 for 16-bit scales.
#ifndef JAXCORE_CPU_CSRC_BF16_H_
#define JAXCORE_CPU_CSRC_BF16_H_

#include <cstdint>
#include <cstring>

#include "problem.h"

namespace jaxcore_cpu {
namespace internal {

inline float Bf16ToF32(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

// IEEE binary16 to float32, exactly: subnormals scaled up, infinities and NaNs (payload
// kept) carried over.
inline float F16ToF32(uint16_t v) {
  const uint32_t sign = static_cast<uint32_t>(v & 0x8000u) << 16;
  const uint32_t exponent = (v >> 10) & 0x1Fu, mantissa = v & 0x3FFu;
  uint32_t bits;
  if (exponent == 0x1Fu) {
    bits = sign | 0x7F800000u | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa * 2^-24, exact in float32.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    std::memcpy(&bits, &magnitude, sizeof(bits));
    bits |= sign;
  }
  float f;
  std::memcpy(&f, &bits, sizeof(f));
  return f;
}

inline uint16_t F32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  if ((bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu)) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // quiet NaN stays NaN
  }
  bits += 0x7FFFu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

// dst = src as float32, for `rows` rows of `cols` values (a row per task).
inline void Bf16RowsToF32(Runner& runner, const uint16_t* src, int64_t rows, int64_t cols,
                          float* dst) {
  runner.Parallel(rows, [&](int64_t r, int) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = Bf16ToF32(src[r * cols + c]);
  });
}

// dst = src rounded to bfloat16, for `rows` rows of `cols` values (a row per task).
inline void F32RowsToBf16(Runner& runner, const float* src, int64_t rows, int64_t cols,
                          uint16_t* dst) {
  runner.Parallel(rows, [&](int64_t r, int) {
    for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = F32ToBf16(src[r * cols + c]);
  });
}

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_BF16_H_
