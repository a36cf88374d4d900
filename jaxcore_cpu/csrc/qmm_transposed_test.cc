// Native checks of the transposed product out(M, K) = x(M, N) @ W^T (Problem::transposed):
// every format x path x activation/output dtype x instruction set up to DetectIsa() x odd sizes,
// serially and on the work-claiming pool, against the double-precision dequantized reference,
// with canaries around the output; the zero result of an empty N; and Validate()'s refusals.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "qmm.h"
#include "qmm_test_util.h"

namespace jaxcore_cpu {
namespace testing {
namespace {

// (M, K, N): M across the kernels' activation tiles (1..4) and passes (16 rows), K across the
// four-row tiles and tasks (ragged last rows and tasks), N across SIMD widths and the column
// chunks (N = 4500 at M = 16 spans several 1024-column chunks). Every case runs every path.
const Case kTransposedCases[] = {
    {1, 2, 1, true, 0, 0},          {1, 130, 63, false, 13, 10},  {3, 6, 5, false, 3, 2},
    {2, 64, 17, false, 16, 16},     {4, 256, 130, false, 64, 64}, {5, 70, 33, true, 0, 0},
    {7, 520, 63, false, 8, 8},      {16, 96, 4500, false, 32, 32}, {17, 130, 200, false, 65, 26},
    {33, 64, 40, false, 32, 32},    {1, 2048, 700, false, 64, 64}, {6, 18, 1, true, 0, 0},
    // The GEMM path's edges: a ragged last column tile (K = 150 of 64-column tiles, blocks
    // of 30), depth past one 512-deep panel and ragged (N = 600), two activation row blocks.
    {100, 150, 600, false, 30, 30}, {40, 200, 1030, true, 0, 0},
};

// Activations (M, N) for one case and dtype, with the reference product and the magnitude
// each output's error is measured against (computed once for all of the case's runs).
struct TransposedInputs {
  std::vector<float> x;
  std::vector<double> ref, mag;  // (M, K)
};

TransposedInputs MakeTransposedInputs(const Operands& o, DType x_dtype, std::mt19937& rng) {
  std::uniform_real_distribution<float> unit(-2.0f, 2.0f);
  TransposedInputs in;
  in.x.resize(o.m * o.n);
  for (auto& v : in.x) v = x_dtype == DType::kBF16 ? FromBf16(ToBf16(unit(rng))) : unit(rng);
  in.ref.assign(o.m * o.k, 0.0);
  in.mag.assign(o.m * o.k, 0.0);
  for (int64_t i = 0; i < o.m; ++i) {
    for (int64_t r = 0; r < o.k; ++r) {
      double ref = 0.0, mag = 0.0;
      for (int64_t j = 0; j < o.n; ++j) {
        ref += in.x[i * o.n + j] * o.w[r * o.n + j];
        mag += std::fabs(in.x[i * o.n + j]) * o.w_mag[r * o.n + j];
      }
      in.ref[i * o.k + r] = ref;
      in.mag[i * o.k + r] = mag;
    }
  }
  return in;
}

void CheckTransposedRun(const Operands& o, const TransposedInputs& in, DType x_dtype,
                        DType out_dtype, Path path, Runner& runner, bool workspace,
                        const std::string& label, double* worst) {
  // Every operand exactly sized, so an over-read is a heap overflow under ASan.
  const std::vector<float>& xv = in.x;
  std::unique_ptr<float[]> x_f32(new float[xv.size()]);
  std::unique_ptr<uint16_t[]> x_bf16(new uint16_t[xv.size()]);
  for (size_t i = 0; i < xv.size(); ++i) {
    x_f32[i] = xv[i];
    x_bf16[i] = ToBf16(xv[i]);
  }
  std::unique_ptr<uint8_t[]> qvalue(new uint8_t[o.qvalue.size()]);
  std::copy(o.qvalue.begin(), o.qvalue.end(), qvalue.get());
  std::unique_ptr<float[]> scale(new float[o.scale.size()]);
  std::copy(o.scale.begin(), o.scale.end(), scale.get());

  const int64_t count = o.m * o.k;
  std::vector<float> out_f32(count + 2 * kGuard, kCanary);
  std::vector<uint16_t> out_bf16(count + 2 * kGuard, kCanaryBf16);
  Problem p = F32Problem(o, nullptr, Precision::kInt8);  // ignored by the transposed product
  p.transposed = true;
  p.x = x_dtype == DType::kF32 ? static_cast<const void*>(x_f32.get()) : x_bf16.get();
  p.x_dtype = x_dtype;
  p.qvalue = qvalue.get();
  p.scale = scale.get();
  p.out = out_dtype == DType::kF32 ? static_cast<void*>(out_f32.data() + kGuard)
                                   : static_cast<void*>(out_bf16.data() + kGuard);
  p.out_dtype = out_dtype;
  if (std::string err = Validate(p); !err.empty()) {
    Fail(label + ": Validate rejected a valid problem: " + err);
    return;
  }
  if (workspace) {
    const size_t bytes = WorkspaceBytes(p, path, runner.max_workers());
    void* ws = std::aligned_alloc(64, std::max<size_t>(64, (bytes + 63) / 64 * 64));
    Run(p, path, runner, ws);
    std::free(ws);
  } else {
    Run(p, path, runner);
  }
  for (int64_t g = 0; g < kGuard; ++g) {
    const bool intact = out_dtype == DType::kF32
                            ? out_f32[g] == kCanary && out_f32[kGuard + count + g] == kCanary
                            : out_bf16[g] == kCanaryBf16 &&
                                  out_bf16[kGuard + count + g] == kCanaryBf16;
    if (!intact) {
      Fail(label + ": wrote outside the output");
      break;
    }
  }
  const double tol = out_dtype == DType::kF32 ? kTolF32 : kTolBf16;
  int reported = 0;
  for (int64_t i = 0; i < o.m; ++i) {
    for (int64_t r = 0; r < o.k; ++r) {
      const double ref = in.ref[i * o.k + r], mag = in.mag[i * o.k + r];
      const double got = out_dtype == DType::kF32 ? out_f32[kGuard + i * o.k + r]
                                                  : FromBf16(out_bf16[kGuard + i * o.k + r]);
      const double err = std::fabs(got - ref) / std::max(mag, 1e-30);
      if (std::isnan(got) || err > tol) {
        if (reported++ < 3) {
          Fail(label + ": out[" + std::to_string(i) + "," + std::to_string(r) + "] = " +
               std::to_string(got) + ", reference " + std::to_string(ref));
        } else {
          ++failures;
        }
      } else {
        *worst = std::max(*worst, err);
      }
    }
  }
}

// N = 0: every output is an empty sum, written as zeros (over a canary-filled buffer).
void CheckTransposedEmptyN() {
  for (auto [out_dtype, path] : {std::pair{DType::kF32, Path::kGemv}, {DType::kBF16, Path::kGemv},
                                 {DType::kF32, Path::kGemm}, {DType::kBF16, Path::kGemm}}) {
    std::vector<float> out_f32(3 * 8, kCanary);
    std::vector<uint16_t> out_bf16(3 * 8, kCanaryBf16);
    static const float scale[1] = {1.0f};
    static const uint8_t q[1] = {0};
    static const float x[1] = {0.0f};
    Problem p;
    p.fmt = Format::kInt4;
    p.m = 3;
    p.k = 8;
    p.n = 0;
    p.block_size = 4;
    p.x = x;
    p.qvalue = q;
    p.scale = scale;
    p.out = out_dtype == DType::kF32 ? static_cast<void*>(out_f32.data())
                                     : static_cast<void*>(out_bf16.data());
    p.out_dtype = out_dtype;
    p.transposed = true;
    if (std::string err = Validate(p); !err.empty()) Fail("N = 0 transposed rejected: " + err);
    ThreadRunner threads(3);
    Run(p, path, threads);
    const bool zeros = out_dtype == DType::kF32
                           ? std::all_of(out_f32.begin(), out_f32.end(), [](float v) { return v == 0.0f; })
                           : std::all_of(out_bf16.begin(), out_bf16.end(), [](uint16_t v) { return v == 0; });
    if (!zeros) {
      Fail(std::string("transposed N = 0 (") + PathName(path) + ") left its " +
           DTypeName(out_dtype) + " output unwritten");
    }
  }
}

void CheckTransposedValidate() {
  static const float x[8] = {};
  static const uint8_t q[64] = {};
  static const int8_t codes[64] = {};
  static const float scale[64] = {};
  static float out[64];
  Problem p;
  p.fmt = Format::kNf4;
  p.m = 1;
  p.k = 8;
  p.n = 4;
  p.block_size = 4;
  p.x = x;
  p.qvalue = q;
  p.scale = scale;
  p.out = out;
  p.transposed = true;
  if (std::string err = Validate(p); !err.empty()) Fail("a valid transposed problem rejected: " + err);
  Problem dq = p;
  dq.scale_codes = codes;
  dq.group_scale = scale;
  dq.group_count = 1;
  if (Validate(dq).empty()) Fail("Validate accepted a transposed product with double-quant scales");
  for (auto edit : {+[](Problem& b) { b.x = nullptr; }, +[](Problem& b) { b.out = nullptr; },
                    +[](Problem& b) { b.scale = nullptr; }, +[](Problem& b) { b.qvalue = nullptr; }}) {
    Problem b = p;
    edit(b);
    if (Validate(b).empty()) Fail("Validate accepted a transposed problem with a null operand");
  }
}

}  // namespace

int RunTransposedChecks() {
  std::mt19937 rng(20261127);
  const Isa best = DetectIsa();
  SerialRunner serial;
  ThreadRunner threads(4);
  int runs = 0;
  double worst[2] = {0.0, 0.0};
  for (Isa isa : SupportedIsas()) {
    if (!SetIsa(isa)) continue;
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      for (const Case& c : kTransposedCases) {
        const Operands o = MakeOperands(fmt, c, false, rng);
        for (DType x_dtype : {DType::kF32, DType::kBF16}) {
          const TransposedInputs in = MakeTransposedInputs(o, x_dtype, rng);
          for (DType out_dtype : {DType::kF32, DType::kBF16}) {
            const std::string label = std::string("transposed ") + IsaName(isa) +
                                      " " + FormatName(fmt) + " x=" + DTypeName(x_dtype) +
                                      " out=" + DTypeName(out_dtype) + " m=" + std::to_string(o.m) +
                                      " k=" + std::to_string(o.k) + " n=" + std::to_string(o.n) +
                                      " block=" + std::to_string(o.block);
            const int w = out_dtype == DType::kF32 ? 0 : 1;
            // kAuto takes one of the other two: once, on the pool.
            for (Path path : {Path::kAuto, Path::kGemv, Path::kGemm}) {
              const std::string at = label + " " + PathName(path);
              if (path != Path::kAuto) {
                CheckTransposedRun(o, in, x_dtype, out_dtype, path, serial, false,
                                   at + " serial", &worst[w]);
                ++runs;
              }
              CheckTransposedRun(o, in, x_dtype, out_dtype, path, threads, true,
                                 at + " 4 threads", &worst[w]);
              ++runs;
            }
          }
        }
      }
    }
  }
  SetIsa(best);
  CheckTransposedEmptyN();
  CheckTransposedValidate();
  std::printf("%d transposed runs over ISAs portable..%s; worst relative error f32 out %.3g, "
              "bf16 out %.3g\n", runs, IsaName(best), worst[0], worst[1]);
  return runs;
}

}  // namespace testing
}  // namespace jaxcore_cpu
