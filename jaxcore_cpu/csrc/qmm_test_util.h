// Shared pieces of the native kernel tests (qmm_test.cc, qmm_invariants_test.cc): the
// failure counter, an independent NF4 table and dequantizing reference operands, a work-claiming
// thread pool that checks the Runner contract, and the invariant checks main() runs.
#ifndef JAXCORE_CPU_CSRC_QMM_TEST_UTIL_H_
#define JAXCORE_CPU_CSRC_QMM_TEST_UTIL_H_


#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qmm.h"

namespace jaxcore_cpu {
namespace testing {

// jaxcore/kernels/_nf4.py's NF4_CODE, copied independently of the kernels' own table.
constexpr double kNf4[16] = {
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
};

// Errors are measured relative to sum_k |x[m, k]| |W[k, n]| of each output (for int4 plus
// sum_k |x[m, k]| 8 scale[k, n]: the kernels may subtract the zero point 8 once per block,
// scale * (sum x v - 8 sum x), whose float32 rounding is relative to both sums): float32
// accumulation stays well inside 2e-6 of it at these K (4e-7 the worst seen over every ISA);
// a bfloat16 output adds its rounding (2^-9 of the value). AMX's float32 GEMV splits each
// activation into three bf16 parts: two of them would leave 2^-16 of it, 7e-6 here.
constexpr double kTolF32 = 2e-6;
constexpr double kTolBf16 = 1e-2;
// Precision::kInt8 rounds activations (and NF4 codes) to int8: ~1e-3 typical, 6e-3 worst seen.
constexpr double kTolInt8 = 2e-2;
constexpr int kShownFailures = 20;
constexpr float kCanary = -12345.625f;
constexpr uint16_t kCanaryBf16 = 0xDEAD;
constexpr int64_t kGuard = 16;  // canary elements on each side of the output

inline int failures = 0;

inline void Fail(const std::string& what) {
  if (++failures <= kShownFailures) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// float32 -> bfloat16, round to nearest even (finite values only, as generated here).
inline uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

inline float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

inline const char* FormatName(Format f) {
  switch (f) {
    case Format::kInt8:
      return "int8";
    case Format::kInt4:
      return "int4";
    case Format::kNf4:
      return "nf4";
  }
  return "?";
}

inline const char* PathName(Path p) {
  switch (p) {
    case Path::kAuto:
      return "auto";
    case Path::kGemv:
      return "gemv";
    case Path::kGemm:
      return "gemm";
  }
  return "?";
}

inline const char* DTypeName(DType d) { return d == DType::kF32 ? "f32" : "bf16"; }

// A pool of `workers` threads (the caller is worker 0) that claim tasks from one atomic
// counter, so a slow thread never holds up the others' share. Checks the Runner contract
// from the caller's side: every task index in range and run exactly once.
class ThreadRunner final : public Runner {
 public:
  explicit ThreadRunner(int workers) : workers_(workers) {}
  int max_workers() const override { return workers_; }

  void Parallel(int64_t num_tasks, TaskBody body) override {
    if (num_tasks < 0) {
      Fail("Runner::Parallel called with num_tasks = " + std::to_string(num_tasks));
      return;
    }
    ++calls_;
    std::atomic<int64_t> next{0};
    std::unique_ptr<std::atomic<int>[]> runs(new std::atomic<int>[num_tasks]);
    for (int64_t t = 0; t < num_tasks; ++t) runs[t].store(0);
    auto work = [&](int worker) {
      for (;;) {
        const int64_t task = next.fetch_add(1);
        if (task >= num_tasks) return;
        runs[task].fetch_add(1);
        body(task, worker);
      }
    };
    std::vector<std::thread> threads;
    const int64_t extra = std::min<int64_t>(workers_ - 1, std::max<int64_t>(num_tasks - 1, 0));
    for (int w = 1; w <= extra; ++w) threads.emplace_back(work, w);
    work(0);
    for (auto& t : threads) t.join();
    for (int64_t t = 0; t < num_tasks; ++t) {
      if (runs[t].load() != 1) {
        Fail("task " + std::to_string(t) + " ran " + std::to_string(runs[t].load()) + " times");
      }
    }
  }

  int64_t calls() const { return calls_; }

 private:
  int workers_;
  int64_t calls_ = 0;
};

struct Case {
  int64_t m, k, n;
  bool per_channel;
  int64_t block_int8;  // blocked layouts: the block size for int8 ...
  int64_t block_4bit;  // ... and for the 4-bit formats (even)
};

struct Operands {
  Format fmt;
  int64_t m, k, n, block;
  std::vector<float> x;          // the activations as float (bf16-exact for bf16 runs)
  std::vector<uint16_t> x_bf16;  // the same, as bfloat16 bits
  std::vector<uint8_t> qvalue;   // exactly (k, n) int8 or (k / 2, n) packed bytes
  std::vector<float> scale;      // exactly (k / block, n)
  std::vector<double> w;         // dequantized (k, n), from the documented layout
  std::vector<double> w_mag;     // |W[k, n]|, plus 8 scale[k, n] for int4 (see kTolF32)
};

inline Operands MakeOperands(Format fmt, const Case& c, bool bf16_x, std::mt19937& rng) {
  Operands o;
  o.fmt = fmt;
  o.m = c.m;
  o.k = c.k;
  o.n = c.n;
  o.block = c.per_channel ? c.k : (fmt == Format::kInt8 ? c.block_int8 : c.block_4bit);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_real_distribution<float> positive(0.01f, 0.2f);
  o.x.resize(c.m * c.k);
  o.x_bf16.resize(c.m * c.k);
  for (size_t i = 0; i < o.x.size(); ++i) {
    float v = unit(rng) * 2.0f;
    if (bf16_x) v = FromBf16(ToBf16(v));
    o.x[i] = v;
    o.x_bf16[i] = ToBf16(v);
  }
  const int64_t blocks = c.k / o.block;
  o.scale.resize(blocks * c.n);
  for (auto& s : o.scale) s = positive(rng);
  std::vector<int> q(c.k * c.n);  // the stored integer of every logical element
  if (fmt == Format::kInt8) {
    std::uniform_int_distribution<int> dist(-128, 127);
    for (auto& v : q) v = dist(rng);
    o.qvalue.resize(c.k * c.n);
    for (int64_t i = 0; i < c.k * c.n; ++i) o.qvalue[i] = static_cast<uint8_t>(static_cast<int8_t>(q[i]));
  } else {
    std::uniform_int_distribution<int> dist(0, 15);
    for (auto& v : q) v = dist(rng);
    o.qvalue.assign((c.k / 2) * c.n, 0);
    for (int64_t r = 0; r < c.k; ++r) {
      for (int64_t j = 0; j < c.n; ++j) {
        const uint8_t nibble = static_cast<uint8_t>(q[r * c.n + j]);
        o.qvalue[(r / 2) * c.n + j] |= (r % 2 == 0) ? nibble : static_cast<uint8_t>(nibble << 4);
      }
    }
  }
  o.w.resize(c.k * c.n);
  o.w_mag.resize(c.k * c.n);
  for (int64_t r = 0; r < c.k; ++r) {
    for (int64_t j = 0; j < c.n; ++j) {
      const double s = o.scale[(r / o.block) * c.n + j];
      const int v = q[r * c.n + j];
      double u = 0.0;
      switch (fmt) {
        case Format::kInt8:
          u = v;
          break;
        case Format::kInt4:
          u = v - 8;
          break;
        case Format::kNf4:
          u = kNf4[v];
          break;
      }
      o.w[r * c.n + j] = u * s;
      o.w_mag[r * c.n + j] = std::fabs(u * s) + (fmt == Format::kInt4 ? 8.0 * s : 0.0);
    }
  }
  return o;
}

// The problem of `o` with float32 activations and output, writing to `out`.
inline Problem F32Problem(const Operands& o, float* out, Precision precision) {
  Problem p;
  p.fmt = o.fmt;
  p.m = o.m;
  p.k = o.k;
  p.n = o.n;
  p.block_size = o.block;
  p.x = o.x.data();
  p.qvalue = o.qvalue.data();
  p.scale = o.scale.data();
  p.out = out;
  p.precision = precision;
  return p;
}

// The checks of qmm_invariants_test.cc: properties that hold across instruction sets,
// schedules and plans rather than against the reference.
void CheckInt8AcrossIsas();
void CheckScheduleIndependence();
void CheckDoubleQuantScales();
void CheckHalfScales();
void CheckWorkspaceCoversEveryIsa();
void CheckPartialSumsStaySmall();
void CheckEmptyK();
void CheckNonFiniteActivations();
void CheckInfiniteActivationsFloat32();
// placement_test.cc: a call's CPU claims and ScopedAvoidCpus (placement.h).
void CheckPlacement();
// qmm_transposed_test.cc: the transposed product against the reference; returns its runs.
int RunTransposedChecks();

}  // namespace testing
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_QMM_TEST_UTIL_H_
