// Placement of a parallel call's workers: see placement.h.
#include "placement.h"

#if defined(__linux__)
#include <pthread.h>
#endif

namespace jaxcore_cpu {

bool CpuClaims::Claim() {
#if defined(__linux__)
  const int cpu = sched_getcpu();
  if (cpu < 0 || cpu >= 64) return false;
  const uint64_t bit = uint64_t{1} << cpu;
  return (mask_.fetch_or(bit, std::memory_order_acq_rel) & bit) != 0;
#else
  return false;
#endif
}

ScopedAvoidCpus::ScopedAvoidCpus(uint64_t avoid) {
#if defined(__linux__)
  if (avoid == 0 || pthread_getaffinity_np(pthread_self(), sizeof(saved_), &saved_) != 0) return;
  cpu_set_t target = saved_;
  for (int cpu = 0; cpu < 64; ++cpu) {
    if ((avoid >> cpu) & 1) CPU_CLR(cpu, &target);
  }
  if (CPU_COUNT(&target) == 0) return;  // nowhere else to go: stay
  moved_ = pthread_setaffinity_np(pthread_self(), sizeof(target), &target) == 0;
#else
  (void)avoid;
#endif
}

ScopedAvoidCpus::~ScopedAvoidCpus() {
#if defined(__linux__)
  if (moved_) pthread_setaffinity_np(pthread_self(), sizeof(saved_), &saved_);
#endif
}

}  // namespace jaxcore_cpu
