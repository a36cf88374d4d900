// Run-time choice of instruction set: the best the CPU and OS support, or a lower one the
// caller asks for (tests, and users pinning the portable kernels).
#include <atomic>

#include "qmm.h"

namespace jaxcore_cpu {
namespace {

Isa Detect() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  // libgcc's checks include the OS saving the YMM state (XGETBV), not only the CPUID bits.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni")) {
    return Isa::kAvx512;
  }
  if (avx2 && CpuHasAvxVnni()) return Isa::kAvxVnni;
  if (avx2) return Isa::kAvx2;
#endif
  return Isa::kPortable;
}

std::atomic<int> active_isa{-1};

}  // namespace

bool CpuHasAvxVnni() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avxvnni") != 0;
  }();
  return has;
#else
  return false;
#endif
}

Isa DetectIsa() {
  static const Isa detected = Detect();
  return detected;
}

Isa ActiveIsa() {
  const int active = active_isa.load(std::memory_order_relaxed);
  return active < 0 ? DetectIsa() : static_cast<Isa>(active);
}

bool SetIsa(Isa isa) {
  if (static_cast<int>(isa) < 0 || static_cast<int>(isa) > static_cast<int>(DetectIsa())) {
    return false;
  }
  active_isa.store(static_cast<int>(isa), std::memory_order_relaxed);
  return true;
}

const char* IsaName(Isa isa) {
  switch (isa) {
    case Isa::kPortable:
      return "portable";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvxVnni:
      return "avxvnni";
    case Isa::kAvx512:
      return "avx512";
  }
  return "unknown";
}

}  // namespace jaxcore_cpu
