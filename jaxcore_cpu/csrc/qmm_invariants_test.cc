// Native test of the quantized matmul kernels, part two: invariants across instruction sets,
// schedules and plans (int8 activations agree on every ISA, results do not depend on which
// thread ran which task, double-quant scales equal their expansion, the workspace covers
// every ISA, partial sums stay small, an empty K gives zeros, NaN or infinite int8
// activations give NaN rows). main() is in qmm_test.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"
#include "qmm.h"
#include "qmm_test_util.h"

namespace jaxcore_cpu {
namespace testing {

// Runs `o` with int8 activations on the portable kernels and on every instruction set up to
// DetectIsa(), and fails where one differs from portable by more than float32 rounding.
void CheckInt8AgreesWithPortable(const Operands& o, const char* what) {
  std::vector<float> ref(o.m * o.n, 0.0f);
  SetIsa(Isa::kPortable);
  SerialRunner serial;
  Run(F32Problem(o, ref.data(), Precision::kInt8), Path::kAuto, serial);
  double scale = 1e-30;
  for (float v : ref) scale = std::max(scale, static_cast<double>(std::fabs(v)));
  for (Isa isa : SupportedIsas()) {
    if (isa == Isa::kPortable) continue;
    SetIsa(isa);
    std::vector<float> out(o.m * o.n, 0.0f);
    Run(F32Problem(o, out.data(), Precision::kInt8), Path::kAuto, serial);
    for (int64_t i = 0; i < o.m * o.n; ++i) {
      if (std::fabs(ref[i] - out[i]) > 1e-6 * scale) {
        Fail(std::string("int8 activations") + what + ": " + FormatName(o.fmt) + " " +
             IsaName(isa) + " m=" + std::to_string(o.m) +
             " differs from portable at " + std::to_string(i) + ": " + std::to_string(out[i]) +
             " vs " + std::to_string(ref[i]));
        break;
      }
    }
  }
  SetIsa(DetectIsa());
}

// Precision::kInt8 sums integers exactly, so every instruction set must agree with the
// portable kernels to float32 rounding: a stricter check than the int8 tolerance. The cases
// cover one and two rows (the register kernels), narrow (M <= 4) and wide blocks, ragged
// columns, K split into ranges inside scale blocks, M = 13 (4-bit groups taken in pairs, an
// odd row left over) and M = 64 (the most every table takes in int8), each also with
// activations that are all rounding ties.
void CheckInt8AcrossIsas() {
  std::mt19937 rng(7);
  const Case cases[] = {{9, 256, 200, false, 64, 64},  {13, 384, 200, false, 64, 128},
                        {3, 192, 130, true, 0, 0},     {64, 128, 77, false, 32, 64},
                        {1, 256, 200, false, 64, 64},
                        {1, 3840, 96, false, 128, 96}, {1, 1024, 70, true, 0, 0},
                        {2, 384, 100, false, 96, 64},  {4, 256, 90, false, 64, 128}};
  for (const Case& c : cases) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      Operands o = MakeOperands(fmt, c, false, rng);
      CheckInt8AgreesWithPortable(o, "");
      // Every group's first activation is 127, so 127 / amax is 1 and the others, exact
      // halves, are rounding ties: round-half-even (nearbyint, the portable quantizer) and
      // any other tie rule give different codes.
      std::uniform_int_distribution<int> halves(-253, 253);
      for (int64_t i = 0; i < o.m * o.k; ++i) {
        o.x[i] = i % 32 == 0 ? 127.0f : 0.5f * static_cast<float>(halves(rng));
      }
      CheckInt8AgreesWithPortable(o, " (rounding ties)");
    }
  }
}

// Runs the tasks one at a time in a shuffled order, each under a random worker id: any
// schedule a thread pool could produce for `workers` threads.
class ShuffledRunner final : public Runner {
 public:
  ShuffledRunner(int workers, unsigned seed) : workers_(workers), rng_(seed) {}
  int max_workers() const override { return workers_; }
  void Parallel(int64_t num_tasks, TaskBody body) override {
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

// got == want element by element (NaN where want is NaN).
void SameResults(const std::vector<float>& want, const std::vector<float>& got,
                 const std::string& what) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
    if (!same) {
      Fail(what + " differs at " + std::to_string(i) + ": " + std::to_string(got[i]) + " vs " +
           std::to_string(want[i]));
      return;
    }
  }
}

// o's product with its scales stored another way (`stored` replaces Problem::scale) equals,
// bit for bit, the product with their float32 values (`expanded`), on every instruction set,
// precision and path.
void SameAsFloat32Scales(const Operands& o, const Operands& expanded,
                         const std::function<void(Problem&)>& stored, const std::string& what) {
  for (Isa isa : SupportedIsas()) {
    SetIsa(isa);
    for (Precision precision : {Precision::kFloat32, Precision::kInt8}) {
      for (Path path : {Path::kAuto, Path::kGemv, Path::kGemm}) {
        std::vector<float> want(o.m * o.n), got(o.m * o.n);
        ThreadRunner threads(3);
        Run(F32Problem(expanded, want.data(), precision), path, threads);
        Problem p = F32Problem(o, got.data(), precision);
        p.scale = nullptr;
        stored(p);
        if (std::string err = Validate(p); !err.empty()) Fail(what + ": rejected: " + err);
        Run(p, path, threads);
        SameResults(want, got, what + " " + IsaName(isa) + " " + PathName(path) + " " +
                                   FormatName(o.fmt) + " m=" + std::to_string(o.m));
      }
    }
  }
}

// Double-quantized scales (Problem::scale_codes) give exactly the result of the float32
// scales they expand to (the same expansion then the same kernels), on every path, ISA and
// precision, with groups of 256 straddling scale rows (N = 300), split-K tasks starting
// inside a scale block (K = 520 in blocks of 40), a NaN group and one that overflows.
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
    if (groups > 2) group_scale[2] = 1e38f;  // codes * 1e38 overflow: FLT_MAX, or -inf kept
    const float offset = 0.05f;
    Operands expanded = o;
    for (int64_t i = 0; i < count; ++i) {
      volatile float product = static_cast<float>(codes[i]) * group_scale[i / 256];
      const float v = product + offset;
      expanded.scale[i] = v > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max() : v;
    }
    SameAsFloat32Scales(
        o, expanded,
        [&](Problem& p) {
          p.scale_codes = codes.data();
          p.group_scale = group_scale.data();
          p.group_count = groups;
          p.scale_offset = offset;
        },
        "double-quant scales");
  }
  SetIsa(best);
}

// 16-bit scales (Problem::scale_half): every float16 and bfloat16 bit pattern converts
// exactly (against std::ldexp and a shift); a problem reading them equals, bit for bit, the
// same problem given their float32 values, on every instruction set, path and precision and
// for the transposed product, subnormal, infinite and NaN scales included.
void CheckHalfScales() {
  const Isa best = DetectIsa();
  std::vector<uint16_t> all(65536);
  for (int i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<std::pair<const char*, internal::ExpandHalf>> converters = {
      {"portable", internal::ExpandHalfPortable}};
#if defined(__x86_64__)
  if (DetectIsa() >= Isa::kAvx2) converters.push_back({"avx2", internal::ExpandHalfAvx2});
#endif
  for (const auto& [name, expand] : converters) {
    for (HalfType type : {HalfType::kF16, HalfType::kBF16}) {
      std::vector<float> got(all.size());
      expand(all.data(), static_cast<int64_t>(all.size()), type, got.data());
      for (int i = 0; i < 65536; ++i) {
        float want;
        if (type == HalfType::kBF16) {
          const uint32_t bits = static_cast<uint32_t>(i) << 16;
          std::memcpy(&want, &bits, sizeof(want));
        } else {
          const int e = (i >> 10) & 0x1F, mant = i & 0x3FF;
          want = e == 0x1F ? (mant ? std::nanf("") : std::numeric_limits<float>::infinity())
                 : e == 0  ? std::ldexp(static_cast<float>(mant), -24)
                           : std::ldexp(static_cast<float>(1024 + mant), e - 25);
          if (i & 0x8000) want = -want;
        }
        const bool same = std::isnan(want) ? std::isnan(got[i]) : got[i] == want &&
                                                                      std::signbit(got[i]) == std::signbit(want);
        if (!same) {
          Fail(std::string("16-bit scale conversion: ") + name + " bits " +
               std::to_string(i) + " gave " + std::to_string(got[i]) + ", want " +
               std::to_string(want));
          break;
        }
      }
    }
  }
  std::mt19937 rng(19);
  std::uniform_int_distribution<int> bits(0, 65535);
  for (const Case& c : {Case{1, 256, 300, false, 64, 64}, Case{16, 512, 300, false, 32, 32},
                        Case{70, 128, 33, false, 64, 64}, Case{2, 520, 40, false, 40, 40}}) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      const Operands o = MakeOperands(fmt, c, false, rng);
      const int64_t count = o.k / o.block * o.n;
      for (HalfType type : {HalfType::kF16, HalfType::kBF16}) {
        std::vector<uint16_t> half(count);
        for (auto& v : half) {  // scales near 0.01, a few special ones
          v = type == HalfType::kF16 ? static_cast<uint16_t>(0x2000 + bits(rng) % 0x0800)
                                     : static_cast<uint16_t>(0x3C00 + bits(rng) % 0x0100);
        }
        half[0] = type == HalfType::kF16 ? 0x0003 : 0x0001;  // subnormal
        if (count > 5) half[5] = type == HalfType::kF16 ? 0x7C00 : 0x7F80;  // +inf
        if (count > 9) half[9] = type == HalfType::kF16 ? 0x7E00 : 0x7FC0;  // NaN
        Operands expanded = o;
        internal::ExpandHalfPortable(half.data(), count, type, expanded.scale.data());
        SameAsFloat32Scales(
            o, expanded,
            [&](Problem& p) {
              p.scale_half = half.data();
              p.scale_half_type = type;
            },
            "16-bit scales");
        // The transposed product x(M, N) @ W^T, on its rows path and its GEMM.
        std::vector<float> xt(o.m * o.n);
        for (size_t i = 0; i < xt.size(); ++i) xt[i] = o.x[i % o.x.size()];
        for (Isa isa : SupportedIsas()) {
          SetIsa(isa);
          for (Path path : {Path::kGemv, Path::kGemm}) {
            std::vector<float> want(o.m * o.k), got(o.m * o.k);
            ThreadRunner threads(3);
            Problem a = F32Problem(expanded, want.data(), Precision::kFloat32);
            a.transposed = true;
            a.x = xt.data();
            Run(a, path, threads);
            Problem b = a;
            b.out = got.data();
            b.scale = nullptr;
            b.scale_half = half.data();
            b.scale_half_type = type;
            if (std::string err = Validate(b); !err.empty()) Fail("16-bit scales rejected: " + err);
            Run(b, path, threads);
            SameResults(want, got, std::string("16-bit scales, transposed: ") + IsaName(isa) +
                                       " " + PathName(path) + " " + FormatName(fmt));
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
    for (Isa sized : SupportedIsas()) {
      SetIsa(sized);
      const size_t bytes = WorkspaceBytes(p, Path::kAuto, threads.max_workers());
      for (Isa ran : SupportedIsas()) {
        SetIsa(ran);
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
  for (Isa isa : SupportedIsas()) {
    SetIsa(isa);
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
                                    IsaName(isa);
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
  for (Isa isa : SupportedIsas()) {
    SetIsa(isa);
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
                Fail(std::string("K = 0 did not give zeros: ") + IsaName(isa) +
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

// Precision::kInt8 with NaN or infinity in an activation row: every output of that row is
// NaN (no int8 code stands for them; the group's scale becomes NaN), the other rows are
// exactly what they are without the bad rows, on every ISA, path and plan (M = 3 narrow,
// M = 9 wide; K split or not).
void CheckNonFiniteActivations() {
  std::mt19937 rng(29);
  const Isa best = DetectIsa();
  for (const Case& c : {Case{3, 256, 130, false, 64, 64}, Case{9, 512, 300, true, 0, 0}}) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      const Operands o = MakeOperands(fmt, c, false, rng);
      Operands bad = o;
      bad.x[1 * o.k + 37] = std::nanf("");
      bad.x[2 * o.k + o.k - 1] = std::numeric_limits<float>::infinity();
      for (Isa isa : SupportedIsas()) {
        SetIsa(isa);
        ThreadRunner threads(3);
        std::vector<float> want(o.m * o.n), got(o.m * o.n);
        Run(F32Problem(o, want.data(), Precision::kInt8), Path::kAuto, threads);
        Run(F32Problem(bad, got.data(), Precision::kInt8), Path::kAuto, threads);
        for (int64_t i = 0; i < o.m * o.n; ++i) {
          const int64_t row = i / o.n;
          const bool ok = (row == 1 || row == 2) ? std::isnan(got[i]) : got[i] == want[i];
          if (!ok) {
            Fail(std::string("non-finite activations: ") + IsaName(isa) + " " +
                 FormatName(fmt) + " m=" + std::to_string(o.m) + " out[" + std::to_string(row) +
                 "," + std::to_string(i % o.n) + "] = " + std::to_string(got[i]) +
                 (row == 1 || row == 2 ? ", want NaN" : ", want " + std::to_string(want[i])));
            break;
          }
        }
      }
    }
  }
  SetIsa(best);
}

// Precision::kFloat32 with an infinity among the activations: as in float32 arithmetic, that
// row's outputs are infinite (with the sign of the products) or NaN (where a weight is zero)
// on every ISA, as on the portable kernels (AMX splits activations into bf16 parts: an
// infinity must not leave a NaN remainder), and the other rows are unchanged.
void CheckInfiniteActivationsFloat32() {
  std::mt19937 rng(31);
  const Isa best = DetectIsa();
  for (const Case& c : {Case{8, 256, 130, false, 64, 64}, Case{16, 512, 96, true, 0, 0}}) {
    for (Format fmt : {Format::kInt8, Format::kInt4, Format::kNf4}) {
      Operands o = MakeOperands(fmt, c, false, rng);
      o.x[2 * o.k + 33] = std::numeric_limits<float>::infinity();
      o.x[5 * o.k + 70] = -std::numeric_limits<float>::infinity();
      SetIsa(Isa::kPortable);
      SerialRunner serial;
      std::vector<float> want(o.m * o.n);
      Run(F32Problem(o, want.data(), Precision::kFloat32), Path::kAuto, serial);
      for (Isa isa : SupportedIsas()) {
        SetIsa(isa);
        ThreadRunner threads(2);
        std::vector<float> got(o.m * o.n);
        Run(F32Problem(o, got.data(), Precision::kFloat32), Path::kAuto, threads);
        for (int64_t i = 0; i < o.m * o.n; ++i) {
          const bool same =
              std::isfinite(want[i])
                  ? std::isfinite(got[i]) && std::fabs(got[i] - want[i]) <=
                                                 1e-4 * std::max(1.0f, std::fabs(want[i]))
                  : (std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i]);
          if (!same) {
            Fail(std::string("infinite activations, float32: ") + IsaName(isa) + " " +
                 FormatName(fmt) + " m=" + std::to_string(o.m) + " out[" +
                 std::to_string(i / o.n) + "," + std::to_string(i % o.n) + "] = " +
                 std::to_string(got[i]) + ", want " + std::to_string(want[i]));
            break;
          }
        }
      }
    }
  }
  SetIsa(best);
}

}  // namespace testing
}  // namespace jaxcore_cpu
