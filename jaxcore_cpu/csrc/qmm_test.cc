// Native test of the quantized matmul kernels through the C++ API of qmm.h (no Python, no
// XLA): every format x path x activation/output dtype x instruction set up to DetectIsa(),
// on odd sizes (M, K, N that are not multiples of the SIMD width or the tiles), per-channel
// and blocked scales, run serially and on a small work-claiming thread pool, against a
// double-precision reference that dequantizes the weight exactly as qmm.h documents it.
// Also: Validate() rejects every malformed problem with a message, the kernels never write
// outside the output (canaries here, AddressSanitizer under `--config=asan`), and SetIsa()
// refuses instruction sets the CPU lacks.
//
// Plain main(): prints every failure (the first few in full) and returns 1 if there was any.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "qmm.h"

namespace jaxcore_cpu {
namespace {

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
// accumulation stays well inside 1e-5 of it at these K; a bfloat16 output adds its
// rounding (2^-9 of the value).
constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16 = 1e-2;
// Precision::kInt8 rounds activations (and NF4 codes) to int8: ~1e-3 typical, 4e-3 worst seen.
constexpr double kTolInt8 = 2e-2;
constexpr int kShownFailures = 20;
constexpr float kCanary = -12345.625f;
constexpr uint16_t kCanaryBf16 = 0xDEAD;
constexpr int64_t kGuard = 16;  // canary elements on each side of the output

int failures = 0;

void Fail(const std::string& what) {
  if (++failures <= kShownFailures) std::fprintf(stderr, "FAIL: %s\n", what.c_str());
}

// float32 -> bfloat16, round to nearest even (finite values only, as generated here).
uint16_t ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

float FromBf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

const char* FormatName(Format f) {
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

const char* PathName(Path p) {
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

const char* DTypeName(DType d) { return d == DType::kF32 ? "f32" : "bf16"; }

// A pool of `workers` threads (the caller is worker 0) that claim tasks from one atomic
// counter, so a slow thread never holds up the others' share. Checks the Runner contract
// from the caller's side: every task index in range and run exactly once.
class ThreadRunner final : public Runner {
 public:
  explicit ThreadRunner(int workers) : workers_(workers) {}
  int max_workers() const override { return workers_; }

  void Parallel(int64_t num_tasks,
                const std::function<void(int64_t, int)>& body) override {
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

// M in {1, 3, 5, 7, 17, 33}, N in {1, 5, 17, 63, 130}, K from 2 to 520; every one of them
// misaligned to 8/16-wide SIMD and to the GEMM tiles somewhere.
const Case kCases[] = {
    {1, 2, 1, true, 0, 0},        {3, 6, 5, false, 3, 2},      {7, 64, 17, false, 16, 16},
    {17, 130, 63, true, 0, 0},    {33, 130, 130, false, 65, 26}, {1, 130, 63, false, 13, 10},
    {33, 64, 5, true, 0, 0},      {7, 6, 130, true, 0, 0},     {17, 2, 17, false, 1, 2},
    {3, 256, 130, false, 64, 64}, {33, 520, 63, false, 8, 8},  {5, 64, 1, false, 32, 32},
    // Blocks that are multiples of 32, where Precision::kInt8 takes its own kernels.
    {16, 512, 100, false, 128, 64}, {2, 1024, 70, true, 0, 0},  {64, 96, 33, false, 96, 32},
    {4, 192, 77, false, 32, 64},
    // AVX-512 int8 activations: several column blocks (M = 5 and 16), M > 64, a pair of
    // groups then a lone one in each 96-row block.
    {5, 128, 1800, false, 64, 64},  {16, 288, 700, false, 96, 32}, {70, 192, 65, false, 96, 64},
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

Operands MakeOperands(Format fmt, const Case& c, bool bf16_x, std::mt19937& rng) {
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

// One Run() of `o` with the given dtypes and path on `runner`, checked against the
// reference. `workspace`: use the explicit-workspace overload with exactly the bytes
// WorkspaceBytes() asks for.
void CheckRun(const Operands& o, DType x_dtype, DType out_dtype, Path path, Runner& runner,
              bool workspace, const std::string& label, double* worst,
              Precision precision = Precision::kFloat32) {
  const int64_t count = o.m * o.n;
  std::vector<float> out_f32;
  std::vector<uint16_t> out_bf16;
  void* out = nullptr;
  if (out_dtype == DType::kF32) {
    out_f32.assign(count + 2 * kGuard, kCanary);
    out = out_f32.data() + kGuard;
  } else {
    out_bf16.assign(count + 2 * kGuard, kCanaryBf16);
    out = out_bf16.data() + kGuard;
  }
  // Inputs copied into buffers of exactly their size, so an over-read is a heap overflow.
  std::unique_ptr<float[]> x_f32;
  std::unique_ptr<uint16_t[]> x_bf16;
  const void* x = nullptr;
  if (x_dtype == DType::kF32) {
    x_f32.reset(new float[o.x.size()]);
    std::copy(o.x.begin(), o.x.end(), x_f32.get());
    x = x_f32.get();
  } else {
    x_bf16.reset(new uint16_t[o.x_bf16.size()]);
    std::copy(o.x_bf16.begin(), o.x_bf16.end(), x_bf16.get());
    x = x_bf16.get();
  }
  std::unique_ptr<uint8_t[]> qvalue(new uint8_t[o.qvalue.size()]);
  std::copy(o.qvalue.begin(), o.qvalue.end(), qvalue.get());
  std::unique_ptr<float[]> scale(new float[o.scale.size()]);
  std::copy(o.scale.begin(), o.scale.end(), scale.get());

  Problem p;
  p.fmt = o.fmt;
  p.m = o.m;
  p.k = o.k;
  p.n = o.n;
  p.block_size = o.block;
  p.x = x;
  p.x_dtype = x_dtype;
  p.qvalue = qvalue.get();
  p.scale = scale.get();
  p.out = out;
  p.out_dtype = out_dtype;
  p.precision = precision;
  const std::string invalid = Validate(p);
  if (!invalid.empty()) {
    Fail(label + ": Validate rejected a valid problem: " + invalid);
    return;
  }
  if (workspace) {
    const size_t bytes = WorkspaceBytes(p, path, runner.max_workers());
    const size_t rounded = std::max<size_t>(64, (bytes + 63) / 64 * 64);
    void* ws = std::aligned_alloc(64, rounded);
    if (ws == nullptr) {
      Fail(label + ": cannot allocate " + std::to_string(rounded) + " workspace bytes");
      return;
    }
    Run(p, path, runner, ws);
    std::free(ws);
  } else {
    Run(p, path, runner);
  }

  for (int64_t g = 0; g < kGuard; ++g) {
    const bool intact = out_dtype == DType::kF32
                            ? out_f32[g] == kCanary && out_f32[kGuard + count + g] == kCanary
                            : out_bf16[g] == kCanaryBf16 && out_bf16[kGuard + count + g] == kCanaryBf16;
    if (!intact) {
      Fail(label + ": wrote outside the output");
      break;
    }
  }
  const double tol = precision == Precision::kInt8 ? kTolInt8
                     : out_dtype == DType::kF32    ? kTolF32
                                                   : kTolBf16;
  int reported = 0;
  for (int64_t i = 0; i < o.m; ++i) {
    for (int64_t j = 0; j < o.n; ++j) {
      double ref = 0.0, mag = 0.0;
      for (int64_t r = 0; r < o.k; ++r) {
        const double xv = o.x[i * o.k + r];
        const double wv = o.w[r * o.n + j];
        ref += xv * wv;
        mag += std::fabs(xv) * o.w_mag[r * o.n + j];
      }
      const double got = out_dtype == DType::kF32
                             ? static_cast<double>(out_f32[kGuard + i * o.n + j])
                             : static_cast<double>(FromBf16(out_bf16[kGuard + i * o.n + j]));
      const double err = std::fabs(got - ref) / std::max(mag, 1e-30);
      if (std::isnan(got) || err > tol) {
        if (reported++ < 3) {
          Fail(label + ": out[" + std::to_string(i) + "," + std::to_string(j) + "] = " +
               std::to_string(got) + ", reference " + std::to_string(ref) + " (relative error " +
               std::to_string(err) + " > " + std::to_string(tol) + ")");
        } else {
          ++failures;
        }
      } else if (err > *worst) {
        *worst = err;
      }
    }
  }
}

int RunMatmulChecks() {
  std::mt19937 rng(20240611);
  const Isa best = DetectIsa();
  const Format formats[] = {Format::kInt8, Format::kInt4, Format::kNf4};
  const Path paths[] = {Path::kAuto, Path::kGemv, Path::kGemm};
  const DType dtypes[] = {DType::kF32, DType::kBF16};
  SerialRunner serial;
  ThreadRunner threads(4);
  int runs = 0;
  double worst[3] = {0.0, 0.0, 0.0};
  for (int isa = 0; isa <= static_cast<int>(best); ++isa) {
    if (!SetIsa(static_cast<Isa>(isa)) || ActiveIsa() != static_cast<Isa>(isa)) {
      Fail(std::string("SetIsa(") + IsaName(static_cast<Isa>(isa)) + ") did not take effect");
      continue;
    }
    for (Format fmt : formats) {
      for (const Case& c : kCases) {
        for (DType x_dtype : dtypes) {
          const Operands o = MakeOperands(fmt, c, x_dtype == DType::kBF16, rng);
          for (DType out_dtype : dtypes) {
            for (Path path : paths) {
              const std::string label =
                  std::string(IsaName(static_cast<Isa>(isa))) + " " + FormatName(fmt) + " " +
                  PathName(path) + " x=" + DTypeName(x_dtype) + " out=" + DTypeName(out_dtype) +
                  " m=" + std::to_string(o.m) + " k=" + std::to_string(o.k) +
                  " n=" + std::to_string(o.n) + " block=" + std::to_string(o.block);
              const int w = out_dtype == DType::kF32 ? 0 : 1;
              CheckRun(o, x_dtype, out_dtype, path, serial, false, label + " serial", &worst[w]);
              CheckRun(o, x_dtype, out_dtype, path, threads, true, label + " 4 threads", &worst[w]);
              runs += 2;
              if (path == Path::kAuto) {
                CheckRun(o, x_dtype, out_dtype, path, threads, true, label + " int8 activations",
                         &worst[2], Precision::kInt8);
                ++runs;
              }
            }
          }
        }
      }
    }
  }
  SetIsa(best);
  if (threads.calls() == 0) Fail("Run() never used the runner it was given");
  std::printf("%d runs over ISAs portable..%s; worst relative error f32 out %.3g, bf16 out %.3g, "
              "int8 activations %.3g\n", runs, IsaName(best), worst[0], worst[1], worst[2]);
  return runs;
}

void CheckIsaControls() {
  const Isa best = DetectIsa();
  for (int isa = 0; isa <= static_cast<int>(Isa::kAvx512); ++isa) {
    const char* name = IsaName(static_cast<Isa>(isa));
    if (name == nullptr || std::strlen(name) == 0) Fail("IsaName(" + std::to_string(isa) + ") is empty");
  }
  for (int isa = static_cast<int>(best) + 1; isa <= static_cast<int>(Isa::kAvx512); ++isa) {
    if (SetIsa(static_cast<Isa>(isa))) {
      Fail(std::string("SetIsa accepted ") + IsaName(static_cast<Isa>(isa)) +
           ", which this CPU lacks (best: " + IsaName(best) + ")");
    }
  }
  if (SetIsa(static_cast<Isa>(-1)) || SetIsa(static_cast<Isa>(99))) {
    Fail("SetIsa accepted an instruction set outside the enum");
  }
  if (ActiveIsa() != best) Fail("a refused SetIsa changed the active instruction set");
}

void CheckValidate() {
  static const float x[64] = {};
  static const uint8_t q[64 * 64] = {};
  static const float scale[64 * 64] = {};
  static float out[64 * 64];
  auto valid = [&](Format fmt) {
    Problem p;
    p.fmt = fmt;
    p.m = 1;
    p.k = 8;
    p.n = 4;
    p.block_size = 4;
    p.x = x;
    p.qvalue = q;
    p.scale = scale;
    p.out = out;
    return p;
  };
  for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
    const std::string ok = Validate(valid(fmt));
    if (!ok.empty()) Fail(std::string("Validate rejected a valid ") + FormatName(fmt) + " problem: " + ok);
  }
  struct Bad {
    const char* what;
    std::function<void(Problem&)> edit;
    Format fmt;
  };
  const Bad bad[] = {
      {"k not divisible by block_size", [](Problem& p) { p.k = 6; }, Format::kInt8},
      {"k not divisible by block_size (4-bit)", [](Problem& p) { p.k = 10; }, Format::kInt4},
      {"odd block_size for 4-bit", [](Problem& p) { p.k = 6; p.block_size = 3; }, Format::kInt4},
      {"odd block_size for nf4", [](Problem& p) { p.k = 9; p.block_size = 3; }, Format::kNf4},
      {"odd k for 4-bit", [](Problem& p) { p.k = 5; p.block_size = 5; }, Format::kNf4},
      {"m < 0", [](Problem& p) { p.m = -1; }, Format::kInt8},
      {"n < 0", [](Problem& p) { p.n = -3; }, Format::kInt8},
      {"k < 0", [](Problem& p) { p.k = -8; }, Format::kInt8},
      {"block_size = 0", [](Problem& p) { p.block_size = 0; }, Format::kInt8},
      {"block_size < 0", [](Problem& p) { p.block_size = -4; }, Format::kInt4},
      {"block_size > k", [](Problem& p) { p.block_size = 16; }, Format::kInt8},
      {"null x", [](Problem& p) { p.x = nullptr; }, Format::kInt8},
      {"null qvalue", [](Problem& p) { p.qvalue = nullptr; }, Format::kInt4},
      {"null scale", [](Problem& p) { p.scale = nullptr; }, Format::kNf4},
      {"null out", [](Problem& p) { p.out = nullptr; }, Format::kInt8},
      {"unknown format", [](Problem& p) { p.fmt = static_cast<Format>(7); }, Format::kInt8},
      {"m * k overflowing int64", [](Problem& p) { p.m = p.k = int64_t{1} << 39; p.block_size = p.k; }, Format::kInt8},
      {"a size past 2^40", [](Problem& p) { p.n = int64_t{1} << 41; }, Format::kInt8},
      {"unknown precision", [](Problem& p) { p.precision = static_cast<Precision>(3); }, Format::kInt8},
      {"unknown x dtype", [](Problem& p) { p.x_dtype = static_cast<DType>(5); }, Format::kInt8},
      {"unknown out dtype", [](Problem& p) { p.out_dtype = static_cast<DType>(-2); }, Format::kInt8},
      // Double-quantized scales: B * N = 2 * 4 codes make one group of 256.
      {"dq group count 2 for 1 group",
       [](Problem& p) { p.scale_codes = reinterpret_cast<const int8_t*>(q); p.group_scale = scale; p.group_count = 2; },
       Format::kNf4},
      {"dq group size 0",
       [](Problem& p) { p.scale_codes = reinterpret_cast<const int8_t*>(q); p.group_scale = scale; p.group_count = 1; p.dq_group = 0; },
       Format::kNf4},
      {"null dq group scales",
       [](Problem& p) { p.scale_codes = reinterpret_cast<const int8_t*>(q); p.group_count = 1; p.scale = scale; },
       Format::kNf4},
  };
  for (const Bad& b : bad) {
    Problem p = valid(b.fmt);
    b.edit(p);
    if (Validate(p).empty()) Fail(std::string("Validate accepted a problem with ") + b.what);
  }
}

}  // namespace
}  // namespace jaxcore_cpu

namespace jaxcore_cpu {
namespace {

// The problem of `o` with float32 activations and output, writing to `out`.
Problem F32Problem(const Operands& o, float* out, Precision precision) {
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

// Precision::kInt8 sums integers exactly, so every instruction set must agree with the
// portable kernels to float32 rounding: a stricter check than the int8 tolerance. The cases
// cover narrow (M <= 4) and wide blocks, ragged columns and M = 64 (the most every table
// takes in int8).
void CheckInt8AcrossIsas() {
  std::mt19937 rng(7);
  const Isa best = DetectIsa();
  const Case cases[] = {{9, 256, 200, false, 64, 64}, {3, 192, 130, true, 0, 0},
                        {64, 128, 77, false, 32, 64}};
  for (const Case& c : cases) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      const Operands o = MakeOperands(fmt, c, false, rng);
      std::vector<float> ref(o.m * o.n, 0.0f);
      SetIsa(Isa::kPortable);
      SerialRunner serial;
      Run(F32Problem(o, ref.data(), Precision::kInt8), Path::kAuto, serial);
      double scale = 1e-30;
      for (float v : ref) scale = std::max(scale, static_cast<double>(std::fabs(v)));
      for (int isa = 1; isa <= static_cast<int>(best); ++isa) {
        SetIsa(static_cast<Isa>(isa));
        std::vector<float> out(o.m * o.n, 0.0f);
        Run(F32Problem(o, out.data(), Precision::kInt8), Path::kAuto, serial);
        for (int64_t i = 0; i < o.m * o.n; ++i) {
          if (std::fabs(ref[i] - out[i]) > 1e-6 * scale) {
            Fail(std::string("int8 activations: ") + FormatName(fmt) + " " +
                 IsaName(static_cast<Isa>(isa)) + " m=" + std::to_string(o.m) +
                 " differs from portable at " + std::to_string(i) + ": " +
                 std::to_string(out[i]) + " vs " + std::to_string(ref[i]));
            break;
          }
        }
      }
    }
  }
  SetIsa(best);
}

// Runs the tasks one at a time in a shuffled order, each under a random worker id: any
// schedule a thread pool could produce for `workers` threads.
class ShuffledRunner final : public Runner {
 public:
  ShuffledRunner(int workers, unsigned seed) : workers_(workers), rng_(seed) {}
  int max_workers() const override { return workers_; }
  void Parallel(int64_t num_tasks, const std::function<void(int64_t, int)>& body) override {
    std::vector<int64_t> order(num_tasks);
    for (int64_t t = 0; t < num_tasks; ++t) order[t] = t;
    std::shuffle(order.begin(), order.end(), rng_);
    std::uniform_int_distribution<int> worker(0, workers_ - 1);
    for (int64_t t : order) body(t, worker(rng_));
  }

 private:
  int workers_;
  std::mt19937 rng_;
};

// The result must not depend on which thread ran which task: the split-K path sums its
// partial results in a fixed order, so every schedule gives the same bits. 64 workers make
// the whole-row int8 plan split the columns as well (M = 16: more tasks than K ranges).
void CheckScheduleIndependence() {
  std::mt19937 rng(11);
  for (const auto& [c, workers] : {std::pair<Case, int>{{3, 1024, 300, false, 64, 64}, 4},
                                   std::pair<Case, int>{{16, 512, 1000, false, 64, 64}, 64}}) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      const Operands o = MakeOperands(fmt, c, false, rng);
      for (Precision precision : {Precision::kFloat32, Precision::kInt8}) {
        std::vector<float> first;
        for (unsigned seed = 0; seed < 4; ++seed) {
          std::vector<float> out(o.m * o.n, 0.0f);
          const Problem p = F32Problem(o, out.data(), precision);
          ShuffledRunner runner(workers, seed);
          Run(p, Path::kGemv, runner);
          if (seed == 0) {
            first = out;
          } else if (std::memcmp(first.data(), out.data(), sizeof(float) * out.size()) != 0) {
            Fail(std::string("split-K result depends on the task schedule: ") + FormatName(fmt) +
                 (precision == Precision::kInt8 ? " int8 activations" : " float32") +
                 ", schedule seed " + std::to_string(seed));
            break;
          }
        }
        // ... and it is the product: one worker (one task per K range) agrees to rounding.
        std::vector<float> serial_out(o.m * o.n, 0.0f);
        SerialRunner serial;
        Run(F32Problem(o, serial_out.data(), precision), Path::kGemv, serial);
        double scale = 1e-30;
        for (float v : serial_out) scale = std::max(scale, static_cast<double>(std::fabs(v)));
        for (int64_t i = 0; i < o.m * o.n; ++i) {
          if (std::fabs(first[i] - serial_out[i]) > 1e-5 * scale) {
            Fail(std::string("split-K plan for ") + std::to_string(workers) + " workers: " +
                 FormatName(fmt) + " differs from one worker's at " + std::to_string(i));
            break;
          }
        }
      }
    }
  }
}

// Double-quantized scales (Problem::scale_codes) give exactly the result of the float32
// scales they expand to (the same expansion then the same kernels), on every path, ISA and
// precision, with groups of 256 straddling scale rows (N = 300), split-K tasks starting
// inside a scale block (K = 520 in blocks of 40) and a NaN group.
void CheckDoubleQuantScales() {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> unit(0.001f, 0.01f);
  const Isa best = DetectIsa();
  for (const Case& c : {Case{1, 256, 300, false, 64, 64}, Case{16, 512, 300, false, 64, 64},
                        Case{70, 128, 33, false, 64, 64}, Case{2, 520, 300, false, 40, 40}}) {
    const Operands o = MakeOperands(Format::kNf4, c, false, rng);
    const int64_t count = o.k / o.block * o.n;
    const int64_t groups = (count + 255) / 256;
    std::vector<int8_t> codes(count);
    for (auto& v : codes) v = static_cast<int8_t>(code(rng));
    std::vector<float> group_scale(groups);
    for (auto& v : group_scale) v = unit(rng);
    if (groups > 1) group_scale[1] = std::nanf("");
    const float offset = 0.05f;
    Operands expanded = o;
    for (int64_t i = 0; i < count; ++i) {
      volatile float product = static_cast<float>(codes[i]) * group_scale[i / 256];
      const float v = product + offset;
      expanded.scale[i] = v > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max() : v;
    }
    for (int isa = 0; isa <= static_cast<int>(best); ++isa) {
      SetIsa(static_cast<Isa>(isa));
      for (Precision precision : {Precision::kFloat32, Precision::kInt8}) {
        for (Path path : {Path::kAuto, Path::kGemv, Path::kGemm}) {
          std::vector<float> want(o.m * o.n), got(o.m * o.n);
          ThreadRunner threads(3);
          Run(F32Problem(expanded, want.data(), precision), path, threads);
          Problem p = F32Problem(o, got.data(), precision);
          p.scale = nullptr;
          p.scale_codes = codes.data();
          p.group_scale = group_scale.data();
          p.group_count = groups;
          p.scale_offset = offset;
          if (std::string err = Validate(p); !err.empty()) Fail("dq problem rejected: " + err);
          Run(p, path, threads);
          for (int64_t i = 0; i < o.m * o.n; ++i) {
            const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
            if (!same) {
              Fail(std::string("double-quant scales: ") + IsaName(static_cast<Isa>(isa)) + " " +
                   PathName(path) + " m=" + std::to_string(o.m) + " differs at " +
                   std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
                   std::to_string(want[i]));
              break;
            }
          }
        }
      }
    }
  }
  SetIsa(best);
}

// WorkspaceBytes() must cover whichever instruction set Run() finds active: a caller sizes
// the workspace first, and SetIsa() may switch tables (whose int8 plans differ) before the
// run. Each run writes into exactly the bytes asked for (AddressSanitizer watches the end).
void CheckWorkspaceCoversEveryIsa() {
  std::mt19937 rng(13);
  const Isa best = DetectIsa();
  // M = 70 runs int8 only with AVX-512 and float32 GEMM (larger scratch) elsewhere.
  for (const Case& c : {Case{70, 192, 1100, false, 64, 64}, Case{16, 256, 300, false, 64, 64}}) {
    const Operands o = MakeOperands(Format::kInt4, c, false, rng);
    std::vector<float> out(o.m * o.n, 0.0f);
    const Problem p = F32Problem(o, out.data(), Precision::kInt8);
    ShuffledRunner threads(4, 3);  // every worker's scratch gets used
    for (int sized = 0; sized <= static_cast<int>(best); ++sized) {
      SetIsa(static_cast<Isa>(sized));
      const size_t bytes = WorkspaceBytes(p, Path::kAuto, threads.max_workers());
      for (int ran = 0; ran <= static_cast<int>(best); ++ran) {
        SetIsa(static_cast<Isa>(ran));
        void* ws = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
        Run(p, Path::kAuto, threads, ws);
        std::free(ws);
      }
    }
  }
  SetIsa(best);
}

// The split-K partial sums stay a small share of the weight as workers grow: each K
// range's sums are written and read back once more per call, so a plan that split K 32
// ways at M = 16 moved as many bytes through its scratch as it read of the weight (and
// stopped scaling past two cores). Every worker still gets several tasks.
void CheckPartialSumsStaySmall() {
  const Isa best = DetectIsa();
  for (int isa = 0; isa <= static_cast<int>(best); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    for (Format fmt : {Format::kInt8, Format::kInt4}) {
      for (int64_t m : {1, 4, 16}) {
        for (int workers : {2, 16, 64}) {
          Problem p;
          p.fmt = fmt;
          p.m = m;
          p.k = 4096;
          p.n = 4096;
          p.block_size = 64;
          p.precision = Precision::kInt8;
          const int64_t weight = fmt == Format::kInt8 ? p.k * p.n : p.k / 2 * p.n;
          const SplitPlan plan = PlanSplit(p, Path::kAuto, workers);
          const std::string label = std::string(FormatName(fmt)) + " m=" + std::to_string(m) +
                                    ", " + std::to_string(workers) + " workers, " +
                                    IsaName(static_cast<Isa>(isa));
          if (plan.partial_bytes > weight / 4) {
            Fail("partial sums of " + std::to_string(plan.partial_bytes) + " bytes for a " +
                 std::to_string(weight) + "-byte weight (" + label + ")");
          }
          const int64_t tasks = plan.col_chunks * plan.k_ranges;
          if (tasks < std::min<int64_t>(2 * workers, 32)) {
            Fail("only " + std::to_string(tasks) + " tasks (" + label + ")");
          }
        }
      }
    }
  }
  SetIsa(best);
}

// K = 0 is a valid, empty product: every path, ISA and precision writes zeros, in both
// result dtypes (the int8 whole-row planner once divided by a zero K range here).
void CheckEmptyK() {
  const Isa best = DetectIsa();
  for (int isa = 0; isa <= static_cast<int>(best); ++isa) {
    SetIsa(static_cast<Isa>(isa));
    for (Format fmt : {Format::kInt8, Format::kInt4}) {
      for (Precision precision : {Precision::kFloat32, Precision::kInt8}) {
        for (Path path : {Path::kAuto, Path::kGemv, Path::kGemm}) {
          for (DType out_dtype : {DType::kF32, DType::kBF16}) {
            for (int64_t m : {1, 16}) {
              std::vector<float> out_f32(m * 5, kCanary);
              std::vector<uint16_t> out_bf16(m * 5, kCanaryBf16);
              Problem p;
              p.fmt = fmt;
              p.m = m;
              p.k = 0;
              p.n = 5;
              p.block_size = 64;
              p.out_dtype = out_dtype;
              p.precision = precision;
              p.out = out_dtype == DType::kF32 ? static_cast<void*>(out_f32.data())
                                               : static_cast<void*>(out_bf16.data());
              if (std::string err = Validate(p); !err.empty()) Fail("K = 0 rejected: " + err);
              ThreadRunner threads(2);
              Run(p, path, threads);
              const bool zeros =
                  out_dtype == DType::kF32
                      ? std::all_of(out_f32.begin(), out_f32.end(), [](float v) { return v == 0.0f; })
                      : std::all_of(out_bf16.begin(), out_bf16.end(), [](uint16_t v) { return v == 0; });
              if (!zeros) {
                Fail(std::string("K = 0 did not give zeros: ") + IsaName(static_cast<Isa>(isa)) +
                     " " + FormatName(fmt) + " " + PathName(path) + " m=" + std::to_string(m));
              }
            }
          }
        }
      }
    }
  }
  SetIsa(best);
}

}  // namespace
}  // namespace jaxcore_cpu

int main() {
  using namespace jaxcore_cpu;
  CheckInt8AcrossIsas();
  CheckScheduleIndependence();
  CheckWorkspaceCoversEveryIsa();
  CheckPartialSumsStaySmall();
  CheckEmptyK();
  CheckDoubleQuantScales();
  std::printf("detected instruction set: %s\n", IsaName(DetectIsa()));
  CheckIsaControls();
  CheckValidate();
  const int runs = RunMatmulChecks();
  if (failures > 0) {
    std::fprintf(stderr, "%d check(s) failed (%d runs)\n", failures, runs);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
