// Run-time choice of instruction set: the best the CPU and OS support, or a lower one the
// caller asks for (tests, and users pinning the portable kernels).
#include <algorithm>
#include <atomic>

#if defined(__aarch64__)
#include <sys/auxv.h>
#endif
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels.h"
#include "qmm.h"

namespace jaxcore_cpu {
namespace {

// AMX tiles with bf16 products that this process may use: the CPU has them (CPUID leaf 7:
// EDX bits 22 AMX-BF16 and 24 AMX-TILE), the OS saves their state (XCR0 bits 17 and 18), and
// Linux grants the process the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, Linux 5.16 and
// later: without it the first tile instruction faults).
bool AmxUsable() {
#if (defined(__x86_64__) || defined(_M_X64)) && defined(__linux__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if ((edx & (1u << 22)) == 0 || (edx & (1u << 24)) == 0) return false;
  if ((ecx & (1u << 27)) == 0) return false;  // OSXSAVE: XGETBV is available
  unsigned xcr0_lo = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  constexpr unsigned kTileState = (1u << 17) | (1u << 18);
  if ((xcr0_lo & kTileState) != kTileState) return false;
  constexpr long kArchReqXcompPerm = 0x1023;
  constexpr long kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

Isa Detect() {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  // libgcc's checks include the OS saving the YMM state (XGETBV), not only the CPUID bits.
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni")) {
    return AmxUsable() ? Isa::kAmx : Isa::kAvx512;
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

namespace internal {

bool IntelCpu() {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool intel = [] {
    __builtin_cpu_init();
    return __builtin_cpu_is("intel") != 0;
  }();
  return intel;
#else
  return false;
#endif
}

}  // namespace internal

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
  // The ladder, least capable first, up to the best (kAmx's value is not its rung).
  if (best != Isa::kPortable) {
    for (Isa isa : {Isa::kAvx2, Isa::kAvxVnni, Isa::kAvx512, Isa::kAmx}) {
      isas.push_back(isa);
      if (isa == best) break;
    }
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
    case Isa::kAmx:
      return "amx";
  }
  return "unknown";
}

}  // namespace jaxcore_cpu
