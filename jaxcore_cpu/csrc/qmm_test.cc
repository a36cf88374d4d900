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
//
// The invariant checks live in qmm_invariants_test.cc; the shared pieces in qmm_test_util.h.
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
#include "qmm_test_util.h"

namespace jaxcore_cpu {
namespace testing {

// M in {1, 3, 5, 7, 11, 12, 17, 33}, N in {1, 5, 17, 63, 130}, K from 2 to 520; every one of
// them misaligned to 8/16-wide SIMD and to the GEMM tiles somewhere.
const Case kCases[] = {
    {1, 2, 1, true, 0, 0},        {3, 6, 5, false, 3, 2},      {7, 64, 17, false, 16, 16},
    {17, 130, 63, true, 0, 0},    {33, 130, 130, false, 65, 26}, {1, 130, 63, false, 13, 10},
    {33, 64, 5, true, 0, 0},      {7, 6, 130, true, 0, 0},     {17, 2, 17, false, 1, 2},
    {3, 256, 130, false, 64, 64}, {33, 520, 63, false, 8, 8},  {5, 64, 1, false, 32, 32},
    // Blocks that are multiples of 32, where Precision::kInt8 takes its own kernels (M = 130:
    // also the GEMM over two row blocks, the second ragged).
    {16, 512, 100, false, 128, 64}, {2, 1024, 70, true, 0, 0},  {64, 96, 33, false, 96, 32},
    {4, 192, 77, false, 32, 64},    {130, 96, 70, false, 32, 32},
    // The SIMD int8-activation task kernels: several column blocks (M = 5 and 16), M > 64, a
    // pair of groups then a lone one in each 96-row block.
    {5, 128, 1800, false, 64, 64},  {16, 288, 700, false, 96, 32}, {70, 192, 65, false, 96, 64},
    // Plans whose last tasks are shorter (on 4 threads): narrower last column chunks (M = 6,
    // int8 activations) and shorter last K ranges, across scale blocks (M = 1).
    {6, 64, 4200, false, 32, 32},   {1, 2048, 40, false, 64, 64},
    // M = 9..12 under Path::kAuto: two passes of the AVX2 GEMV for int8 and int4.
    {12, 192, 77, true, 0, 0},      {11, 160, 45, false, 32, 32},
};

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

  // o's problem, over exactly-sized copies of its operands (AddressSanitizer watches the ends).
  Problem p = F32Problem(o, nullptr, precision);
  p.x = x;
  p.x_dtype = x_dtype;
  p.qvalue = qvalue.get();
  p.scale = scale.get();
  p.out = out;
  p.out_dtype = out_dtype;
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
  for (Isa isa : SupportedIsas()) {
    if (!SetIsa(isa) || ActiveIsa() != isa) {
      Fail(std::string("SetIsa(") + IsaName(isa) + ") did not take effect");
      continue;
    }
    for (Format fmt : formats) {
      for (const Case& c : kCases) {
        for (DType x_dtype : dtypes) {
          const Operands o = MakeOperands(fmt, c, x_dtype == DType::kBF16, rng);
          for (DType out_dtype : dtypes) {
            for (Path path : paths) {
              const std::string label =
                  std::string(IsaName(isa)) + " " + FormatName(fmt) + " " +
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
  const std::vector<Isa> supported = SupportedIsas();
  if (supported.front() != Isa::kPortable || supported.back() != best) {
    Fail("SupportedIsas() does not run from portable to DetectIsa()");
  }
  for (int isa = 0; isa <= static_cast<int>(Isa::kAmx); ++isa) {
    const char* name = IsaName(static_cast<Isa>(isa));
    if (name == nullptr || std::strlen(name) == 0 || std::strcmp(name, "unknown") == 0) {
      Fail("IsaName(" + std::to_string(isa) + ") is " + (name ? name : "null"));
    }
    const bool runs =
        std::find(supported.begin(), supported.end(), static_cast<Isa>(isa)) != supported.end();
    if (!runs && SetIsa(static_cast<Isa>(isa))) {
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
      {"both double-quantized and 16-bit scales",
       [](Problem& p) { p.scale_codes = reinterpret_cast<const int8_t*>(q); p.group_scale = scale; p.group_count = 1; p.scale_half = reinterpret_cast<const uint16_t*>(q); },
       Format::kNf4},
      {"unknown 16-bit scale type",
       [](Problem& p) { p.scale_half = reinterpret_cast<const uint16_t*>(q); p.scale_half_type = static_cast<HalfType>(4); },
       Format::kInt8},

  };
  for (const Bad& b : bad) {
    Problem p = valid(b.fmt);
    b.edit(p);
    if (Validate(p).empty()) Fail(std::string("Validate accepted a problem with ") + b.what);
  }
}

}  // namespace testing
}  // namespace jaxcore_cpu

int main() {
  using namespace jaxcore_cpu;
  using namespace jaxcore_cpu::testing;
  CheckInt8AcrossIsas();
  CheckScheduleIndependence();
  CheckWorkspaceCoversEveryIsa();
  CheckPartialSumsStaySmall();
  CheckEmptyK();
  CheckNonFiniteActivations();
  CheckInfiniteActivationsFloat32();
  CheckDoubleQuantScales();
  CheckHalfScales();
  CheckPlacement();
  std::printf("detected instruction set: %s\n", IsaName(DetectIsa()));
  // CI runs this test on emulated CPUs with and without an instruction set (qemu's -cpu) and
  // says which it expects the run-time check to find.
  if (const char* expect = std::getenv("JAXCORE_EXPECT_ISA"); expect && *expect) {
    if (std::strcmp(expect, IsaName(DetectIsa())) != 0) {
      Fail(std::string("expected to detect ") + expect + ", detected " + IsaName(DetectIsa()));
    }
  }
  CheckIsaControls();
  CheckValidate();
  const int runs = RunMatmulChecks() + RunTransposedChecks();
  if (failures > 0) {
    std::fprintf(stderr, "%d check(s) failed (%d runs)\n", failures, runs);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
