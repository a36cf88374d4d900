// Run-time choice of instruction set: the best the CPU and OS support, or a lower one the
// caller asks for (tests, and users pinning the portable kernels).
#include <algorithm>
#include <atomic>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif

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
#elif defined(__aarch64__)
  constexpr unsigned long kHwcapAsimdDp = 1ul << 20;  // HWCAP_ASIMDDP (asm/hwcap.h)
  if (getauxval(AT_HWCAP) & kHwcapAsimdDp) return Isa::kDotProd;
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

std::vector<Isa> SupportedIsas() {
  const Isa best = DetectIsa();
  std::vector<Isa> isas = {Isa::kPortable};
#if defined(__x86_64__) || defined(_M_X64)
  for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(best)) isas.push_back(isa);
  }
#else
  if (best != Isa::kPortable) isas.push_back(best);
#endif
  return isas;
}

bool SetIsa(Isa isa) {
  const std::vector<Isa> supported = SupportedIsas();
  if (std::find(supported.begin(), supported.end(), isa) == supported.end()) return false;
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
    case Isa::kDotProd:
      return "dotprod";
  }
  return "unknown";
}

}  // namespace jaxcore_cpu
