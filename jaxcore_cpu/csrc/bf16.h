// bfloat16 <-> float32 conversions of the activations and results (plain C++).
#ifndef JAXCORE_CPU_CSRC_BF16_H_
#define JAXCORE_CPU_CSRC_BF16_H_

#include <cstdint>
#include <cstring>

namespace jaxcore_cpu {
namespace internal {

inline float Bf16ToF32(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
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

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_BF16_H_
