// Keeps the workers of one parallel call on distinct CPUs.
//
// The pool thread that a call wakes to help it is sometimes put by the scheduler on the CPU
// its caller runs on (wake-affine placement) while the other CPUs look busy, often with other
// pools' threads polling for work, and the two then share one CPU until the load balancer
// moves one of them: on the 2-vCPU Zen 4 VM that took the whole call in 7-13 % of int4 calls
// at M = 16 (K = N = 4096), which ran at one CPU's speed (2.0-2.2 ms against 1.0-1.1). A
// helper that finds another worker of its call on its CPU moves itself, for the call, to the
// CPUs no worker of the call has claimed.
#ifndef JAXCORE_CPU_CSRC_PLACEMENT_H_
#define JAXCORE_CPU_CSRC_PLACEMENT_H_

#include <atomic>
#include <cstdint>

#if defined(__linux__)
#include <sched.h>
#endif

namespace jaxcore_cpu {

// The CPUs the workers of one call run on (CPUs 0-63; higher ones are not tracked).
class CpuClaims {
 public:
  // Forgets every claim (a new call).
  void Reset() { mask_.store(0, std::memory_order_relaxed); }

  // Claims the calling thread's CPU. Returns true where a worker of the call had claimed it
  // already (this thread shares it), false where it was free or is not tracked.
  bool Claim();

  // The CPUs claimed so far, as a bit mask.
  uint64_t claimed() const { return mask_.load(std::memory_order_acquire); }

 private:
  std::atomic<uint64_t> mask_{0};
};

// For its lifetime, keeps the calling thread off the CPUs in `avoid` (a CpuClaims mask),
// where its affinity allows another CPU; the thread's affinity is restored on destruction.
// Setting the calling thread's affinity moves it at once.
class ScopedAvoidCpus {
 public:
  explicit ScopedAvoidCpus(uint64_t avoid);
  ~ScopedAvoidCpus();
  ScopedAvoidCpus(const ScopedAvoidCpus&) = delete;
  ScopedAvoidCpus& operator=(const ScopedAvoidCpus&) = delete;

  // Whether the thread was moved (its affinity allowed a CPU outside `avoid`).
  bool moved() const { return moved_; }

 private:
  bool moved_ = false;
#if defined(__linux__)
  cpu_set_t saved_;
#endif
};

}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_PLACEMENT_H_
