// Native test of placement.h: a call's CPU claims and a worker's move off its caller's CPU.
// Linux only (elsewhere the classes do nothing, which the check also confirms).
#include <cstdint>
#include <string>

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#include "placement.h"
#include "qmm_test_util.h"

namespace jaxcore_cpu {
namespace testing {
namespace {

#if defined(__linux__)
cpu_set_t Affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) != 0) Fail("getaffinity failed");
  return set;
}

bool SetAffinity(const cpu_set_t& set) {
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// The allowed CPUs below 64 (the ones CpuClaims tracks), as a mask.
uint64_t TrackedMask(const cpu_set_t& set) {
  uint64_t mask = 0;
  for (int cpu = 0; cpu < 64; ++cpu) {
    if (CPU_ISSET(cpu, &set)) mask |= uint64_t{1} << cpu;
  }
  return mask;
}
#endif

}  // namespace

void CheckPlacement() {
  {  // Avoiding nothing never moves a thread.
    ScopedAvoidCpus none(0);
    if (none.moved()) Fail("ScopedAvoidCpus(0) moved the thread");
  }
#if defined(__linux__)
  const cpu_set_t original = Affinity();
  const uint64_t tracked = TrackedMask(original);
  const int here = sched_getcpu();
  if (here < 0 || here >= 64 || ((tracked >> here) & 1) == 0) return;  // not trackable here
  // Pinned to one CPU, the first claim finds it free and the second finds it taken.
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(here, &one);
  if (!SetAffinity(one)) return Fail("could not pin the test thread to its CPU");
  CpuClaims claims;
  claims.Reset();
  if (claims.Claim()) Fail("CpuClaims: the first claim of a CPU reported a collision");
  if (!claims.Claim()) Fail("CpuClaims: a second claim of the same CPU was not reported");
  if (claims.claimed() != uint64_t{1} << here) {
    Fail("CpuClaims::claimed() = " + std::to_string(claims.claimed()) + ", expected CPU " +
         std::to_string(here) + " alone");
  }
  claims.Reset();
  if (claims.claimed() != 0) Fail("CpuClaims::Reset() kept a claim");
  {  // Pinned to the one CPU it must avoid: it stays, and its affinity is left alone.
    ScopedAvoidCpus stay(uint64_t{1} << here);
    if (stay.moved()) Fail("ScopedAvoidCpus moved a thread whose affinity allows no other CPU");
    const cpu_set_t pinned = Affinity();
    if (!CPU_EQUAL(&one, &pinned)) Fail("ScopedAvoidCpus changed a pin");
  }
  if (!SetAffinity(original)) return Fail("could not restore the test thread's affinity");
  if (CPU_COUNT(&original) < 2) return;  // one usable CPU: nowhere to move to
  {  // With other CPUs allowed, it leaves the avoided one at once and comes back after.
    const int start = sched_getcpu();
    ScopedAvoidCpus apart(uint64_t{1} << start);
    if (!apart.moved()) Fail("ScopedAvoidCpus did not move a thread that has other CPUs");
    if (sched_getcpu() == start) Fail("ScopedAvoidCpus left the thread on the avoided CPU");
    const cpu_set_t during = Affinity();
    if (CPU_ISSET(start, &during)) Fail("ScopedAvoidCpus: the avoided CPU is still allowed");
  }
  const cpu_set_t after = Affinity();
  if (!CPU_EQUAL(&after, &original)) Fail("ScopedAvoidCpus did not restore the affinity");
  {  // Avoiding every allowed CPU: it stays put.
    ScopedAvoidCpus nowhere(tracked);
    if (nowhere.moved() != (CPU_COUNT(&original) > __builtin_popcountll(tracked))) {
      Fail("ScopedAvoidCpus moved a thread off every CPU it may use");
    }
  }
#endif
}

}  // namespace testing
}  // namespace jaxcore_cpu
