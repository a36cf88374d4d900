// Planning of one quantized matmul: validation, the choice of path, the split into tasks
// that threads claim dynamically, workspace layout and the final dtype conversion. The
// arithmetic lives in the per-ISA kernel tables (kernels.h).
#include "qmm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <optional>
#include <sstream>
#include <vector>

#include "bf16.h"
#include "gemm.h"
#include "kernels.h"
#include "plan.h"
#include "transposed.h"

namespace jaxcore_cpu {
namespace {

using internal::AccFloats;
using internal::CeilDiv;
using internal::F32ToBf16;
using internal::GemvSplit;
using internal::KernelTable;
using internal::PartialFloats;
using internal::Resolve;
using internal::RoundUp;
using internal::SplitOf;
using internal::SplitRows;
using internal::UsesInt8;
using internal::WritesDirectly;

constexpr int64_t kAlign = 64;
// Activations up to this many floats are quantized to int8 on the calling thread (16 x 4096
// take ~30 us on Zen 4, where handing half of them to a second thread cost ~60 us more).
constexpr int64_t kSerialQuantizeFloats = int64_t{1} << 16;

// The table SetIsa(isa) makes Kernels() return.
const KernelTable& KernelsFor([[maybe_unused]] Isa isa) {
#if defined(__x86_64__) || defined(_M_X64)
  if (isa == Isa::kAmx) return internal::AmxKernels();
  if (isa == Isa::kAvx512) return internal::Avx512Kernels();
  if (isa == Isa::kAvxVnni) {
    return CpuHasAvxVnni() ? internal::AvxVnniKernels() : internal::AvxVnniEvexKernels();
  }
  if (isa == Isa::kAvx2) return internal::Avx2Kernels();
#elif defined(__aarch64__)
  if (isa == Isa::kDotProd) return internal::DotProdKernels();
#endif
  return internal::PortableKernels();
}

const KernelTable& Kernels() { return KernelsFor(ActiveIsa()); }

// Carves the workspace into 64-byte aligned pieces; with a null base it only measures.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename T>
  T* Take(int64_t count) {
    char* at = base_ ? base_ + used_ : nullptr;
    used_ += RoundUp(count * static_cast<int64_t>(sizeof(T)), kAlign);
    return reinterpret_cast<T*>(at);
  }
  size_t used() const { return static_cast<size_t>(used_); }

 private:
  char* base_;
  int64_t used_ = 0;
};

// Everything Run() keeps in the workspace.
struct Buffers {
  float* x32 = nullptr;     // GEMV: activations as float32 (bf16 input only)
  float* apack = nullptr;   // GEMM: activations packed in micro-panels of kMr rows
  float* out32 = nullptr;   // float32 result (bf16 output, GEMM path)
  float* partial = nullptr; // GEMV: per K range, m x n partial sums
  std::atomic<int64_t>* pending = nullptr;  // GEMV: per column chunk, K ranges still running
  float* acc = nullptr;     // GEMV: per worker, AccFloats() of segment sums
  float* panel = nullptr;   // GEMM: per worker, one decoded panel
  int8_t* xq = nullptr;       // int8 precision: quantized activations and their groups'
  float* xd = nullptr;        //   scales and code sums
  int32_t* xsum = nullptr;
  float* scales = nullptr;  // expanded scales (ExpandsScales): GEMM, every scale; GEMV, per
                            //   worker, the scales of one task (TaskScaleFloats)
};

// The quantized activations (Run() writes them) from activation row m0 on, as the int8
// kernels read them.
internal::Q8Activations Q8ActivationsOf(const Problem& p, const Buffers& b, int64_t m0) {
  return {b.xq + m0 * internal::kQ8Group, b.xd + m0, b.xsum + m0, p.m,
          internal::Q8ScaleSpan(p.fmt, p.block_size)};
}

// Scale rows a split-K task's K range [k0, k0 + k_len) can touch, times its columns: the
// scratch each worker expands one task's scales into (ExpandsScales).
int64_t TaskScaleFloats(const Problem& p, const GemvSplit& s) {
  if (p.block_size <= 0) return 0;
  return (CeilDiv(s.k_len, p.block_size) + 1) * s.ncols;
}

// Whether Run() reads the scales through an expanded float32 copy (double-quantized or
// 16-bit scales) instead of Problem::scale.
bool ExpandsScales(const Problem& p) { return p.scale_codes || p.scale_half; }

// Expands the stored scales (Problem::scale_codes or scale_half) of scale blocks [b0, b1) and
// columns [n0, n0 + cols) into out[(b - b0) * ldo + c]: 16-bit ones converted, double-quantized
// ones as jaxcore/kernels/_dq_scales.py does, each run of codes that shares a group scale
// through the table's expand_dq.
void ExpandScales(const KernelTable& kt, const Problem& p, int64_t b0, int64_t b1, int64_t n0,
                  int64_t cols, float* out, int64_t ldo) {
  for (int64_t blk = b0; blk < b1; ++blk) {
    float* row = out + (blk - b0) * ldo;
    const int64_t base = blk * p.n + n0;  // flat index of the row's first scale
    if (p.scale_half) {
      kt.expand_half(p.scale_half + base, cols, p.scale_half_type, row);
      continue;
    }
    for (int64_t c = 0; c < cols;) {
      const int64_t g = (base + c) / p.dq_group;
      const int64_t end = std::min(cols, (g + 1) * p.dq_group - base);
      kt.expand_dq(p.scale_codes + base + c, end - c, p.group_scale[g], p.scale_offset, row + c);
      c = end;
    }
  }
}

Buffers Layout(const KernelTable& kt, const Problem& p, Path path, int workers, void* base,
               size_t* bytes) {
  Carver carve(base);
  Buffers b;
  if (path == Path::kGemv) {
    if (p.x_dtype != DType::kF32) b.x32 = carve.Take<float>(p.m * p.k);
    const GemvSplit split = SplitOf(kt, p, workers);
    if (!WritesDirectly(p, split)) {
      b.partial = carve.Take<float>(PartialFloats(kt, p, split));
      b.pending = carve.Take<std::atomic<int64_t>>(split.col_tasks);
    }
    b.acc = carve.Take<float>(workers * RoundUp(AccFloats(kt, p), kAlign / sizeof(float)));
    if (ExpandsScales(p)) {
      b.scales =
          carve.Take<float>(workers * RoundUp(TaskScaleFloats(p, split), kAlign / sizeof(float)));
    }
    if (UsesInt8(kt, p)) {
      b.xq = carve.Take<int8_t>(p.m * p.k);
      b.xd = carve.Take<float>(p.m * p.k / internal::kQ8Group);
      b.xsum = carve.Take<int32_t>(p.m * p.k / internal::kQ8Group);
    }
  } else {
    if (p.out_dtype != DType::kF32) b.out32 = carve.Take<float>(p.m * p.n);
    b.apack = carve.Take<float>(internal::GemmPackFloats(p.m, p.k));
    b.panel = carve.Take<float>(workers * internal::GemmPanelFloats());
    if (ExpandsScales(p) && p.block_size > 0) {
      b.scales = carve.Take<float>(p.k / p.block_size * p.n);
    }
  }
  if (bytes) *bytes = carve.used();
  return b;
}

void Store(DType dtype, void* out, int64_t index, float v) {
  if (dtype == DType::kF32) {
    static_cast<float*>(out)[index] = v;
  } else {
    static_cast<uint16_t*>(out)[index] = F32ToBf16(v);
  }
}

// A split-K task's scales: at[(blk - k0 / block_size) * ld + c] for scale block blk and
// column n0 + c, in the weight's own scale array or in a worker's expanded copy.
struct TaskScales {
  const float* at;
  int64_t ld;
};

// One split-K task through the per-segment kernels (no q8_task): rows [k0, k1) of K, one
// scale block at a time, summed into `partial` (rows x N, this task's columns zeroed first).
void RunSegments(const Problem& p, const float* x, int64_t m0, int64_t rows, const Buffers& b,
                 const KernelTable& kt, bool int8, float* partial, int64_t n0, int64_t cols,
                 int64_t ldacc, int64_t k0, int64_t k1, TaskScales scales, float* acc) {
  for (int64_t mi = 0; mi < rows; ++mi) {
    std::memset(partial + mi * p.n + n0, 0, sizeof(float) * cols);
  }
  internal::GemvTask t;
  t.fmt = p.fmt;
  t.m = static_cast<int>(rows);
  t.x = x + m0 * p.k;
  t.ldx = p.k;
  t.q = static_cast<const uint8_t*>(p.qvalue);
  t.ldq = p.n;
  t.r0 = k0;
  t.r1 = k1;
  t.n0 = n0;
  t.cols = cols;
  t.scale = scales.at;
  t.lds = scales.ld;
  t.block_size = p.block_size;
  t.scratch = acc;
  t.y = partial + n0;
  t.ldy = p.n;
  // A gemv_task kernel takes the columns it can; its segments take the rest.
  const int64_t done = !int8 && kt.gemv_task ? kt.gemv_task(t) : 0;
  if (done == cols) return;
  internal::GemvSegment s = internal::SegmentOf(t, done, acc, ldacc);
  internal::Q8Segment q;
  if (int8) {
    q.fmt = p.fmt;
    q.m = rows;
    q.x = Q8ActivationsOf(p, b, m0);
    q.q = s.q;
    q.ldq = p.n;
    q.n0 = s.n0;
    q.cols = s.cols;
    q.acc = s.acc;
    q.y = s.y;
    q.ldy = p.n;
  }
  for (int64_t r0 = k0; r0 < k1;) {
    const int64_t block = r0 / p.block_size;
    const int64_t r1 = std::min(k1, (block + 1) * p.block_size);
    const float* scale = scales.at + (block - k0 / p.block_size) * scales.ld + done;
    if (int8) {
      q.r0 = r0;
      q.r1 = r1;
      q.scale = scale;
      kt.q8_segment(q);
    } else {
      s.r0 = r0;
      s.r1 = r1;
      s.scale = scale;
      kt.gemv_segment(s);
    }
    r0 = r1;
  }
}

// Rows [m0, m0 + rows) of the product on the GEMV path: tasks are (column chunk, K range);
// each K range sums into its own partial buffer, and the task that finishes a column
// chunk's last K range adds the chunk's buffers in K order into the output (whichever
// thread that is, the sums are the same). With one K range and a float32 result the tasks
// write the output directly.
void RunGemv(const Problem& p, const float* x, int64_t m0, int64_t rows, const Buffers& b,
             Runner& runner, const KernelTable& kt) {
  const int workers = runner.max_workers();
  const bool int8 = UsesInt8(kt, p);
  const GemvSplit split = SplitOf(kt, p, workers);
  const int64_t ncols = split.ncols;
  const int64_t col_tasks = split.col_tasks;
  const int64_t plane = rows * p.n;
  const int64_t acc_floats = RoundUp(AccFloats(kt, p), kAlign / sizeof(float));
  const int64_t scale_floats = RoundUp(TaskScaleFloats(p, split), kAlign / sizeof(float));
  const bool direct = WritesDirectly(p, split);
  float* const planes = direct ? static_cast<float*>(p.out) + m0 * p.n : b.partial;
  if (!direct) {
    for (int64_t c = 0; c < col_tasks; ++c) new (&b.pending[c]) std::atomic<int64_t>(split.k_tasks);
  }

  // Sums the chunk's K ranges in K order into the output, in pieces of kReduceCols columns
  // (each plane's piece read contiguously, the adds vectorized).
  const auto reduce = [&](int64_t n0, int64_t cols) {
    constexpr int64_t kReduceCols = 512;
    alignas(64) float sum[kReduceCols];
    for (int64_t mi = 0; mi < rows; ++mi) {
      for (int64_t c0 = n0; c0 < n0 + cols; c0 += kReduceCols) {
        const int64_t width = std::min(kReduceCols, n0 + cols - c0);
        std::fill(sum, sum + width, 0.0f);
        for (int64_t t = 0; t < split.k_tasks; ++t) {
          const float* src = b.partial + t * plane + mi * p.n + c0;
          for (int64_t j = 0; j < width; ++j) sum[j] += src[j];
        }
        const int64_t at = (m0 + mi) * p.n + c0;
        if (p.out_dtype == DType::kF32) {
          std::memcpy(static_cast<float*>(p.out) + at, sum, sizeof(float) * width);
        } else {
          for (int64_t j = 0; j < width; ++j) Store(p.out_dtype, p.out, at + j, sum[j]);
        }
      }
    }
  };

  runner.Parallel(col_tasks * split.k_tasks, [&](int64_t task, int worker) {
    const int64_t chunk = task % col_tasks;
    int64_t n0 = 0, cols = 0;
    ChunkColumns(split, p.n, chunk, &n0, &cols);
    const int64_t kt_index = task / col_tasks;
    int64_t k0 = 0, k1 = 0;
    RangeRows(split, p.k, kt_index, &k0, &k1);
    float* partial = planes + kt_index * plane;
    // Double-quantized and 16-bit scales are expanded per task, just the blocks and columns
    // it reads: they stay in this worker's cache, and only their stored bytes come from
    // memory.
    TaskScales scales{nullptr, p.n};
    if (p.k > 0) {
      const int64_t b0 = k0 / p.block_size;
      if (ExpandsScales(p)) {
        float* own = b.scales + worker * scale_floats;
        ExpandScales(kt, p, b0, CeilDiv(k1, p.block_size), n0, cols, own, cols);
        scales = {own, cols};
      } else {
        scales.at = p.scale + b0 * p.n + n0;
      }
    }
    if (int8 && kt.q8_task) {
      internal::Q8Task t;
      t.fmt = p.fmt;
      t.m = rows;
      t.x = Q8ActivationsOf(p, b, m0);
      t.q = static_cast<const uint8_t*>(p.qvalue);
      t.ldq = p.n;
      t.r0 = k0;
      t.r1 = k1;
      t.n0 = n0;
      t.cols = cols;
      t.scale = scales.at;
      t.lds = scales.ld;
      t.block_size = p.block_size;
      t.acc = b.acc + worker * acc_floats;
      t.y = partial + n0;
      t.ldy = p.n;
      kt.q8_task(t);
    } else {
      RunSegments(p, x, m0, rows, b, kt, int8, partial, n0, cols, ncols, k0, k1, scales,
                  b.acc + worker * acc_floats);
    }
    // The last K range of the chunk to finish sees every other's sums (acquire-release).
    if (!direct && b.pending[chunk].fetch_sub(1, std::memory_order_acq_rel) == 1) {
      reduce(n0, cols);
    }
  });
}

// The GEMM path (gemm.h) over the weight as stored, its scales expanded (ExpandsScales) or not.
void RunGemm(const Problem& p, const Buffers& b, Runner& runner, const KernelTable& kt) {
  internal::Gemm g;
  g.m = p.m;
  g.depth = p.k;
  g.cols = p.n;
  g.x = p.x;
  g.x_dtype = p.x_dtype;
  g.out = p.out_dtype == DType::kF32 ? static_cast<float*>(p.out) : b.out32;
  g.apack = b.apack;
  g.panels = b.panel;
  g.decode = kt.decode_panel;
  g.weight = internal::StoredWeight(p, ExpandsScales(p) ? b.scales : p.scale);
  internal::RunGemm(g, runner, kt);
  if (g.out != p.out) {
    internal::F32RowsToBf16(runner, g.out, p.m, p.n, static_cast<uint16_t*>(p.out));
  }
}

// Sizes past these would overflow the int64 index arithmetic (and no machine holds them).
constexpr int64_t kMaxDim = int64_t{1} << 40;

bool Overflows(int64_t a, int64_t b) {
  int64_t product;
  return __builtin_mul_overflow(a, b, &product) || product > (int64_t{1} << 62);
}

}  // namespace

std::string Validate(const Problem& p) {
  // The stream only on failure: valid problems (every call) skip its construction.
  std::optional<std::ostringstream> err;
  const auto out = [&err]() -> std::ostringstream& { return err.emplace(); };
  const bool packed = p.fmt != Format::kInt8;
  if (p.fmt != Format::kInt8 && p.fmt != Format::kInt4 && p.fmt != Format::kNf4) {
    out() << "unknown format code " << static_cast<int>(p.fmt) << " (0=int8, 1=int4, 2=nf4)";
  } else if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) {
    out() << "x must be float32 or bfloat16";
  } else if (p.out_dtype != DType::kF32 && p.out_dtype != DType::kBF16) {
    out() << "the result must be float32 or bfloat16";
  } else if (p.precision != Precision::kFloat32 && p.precision != Precision::kInt8) {
    out() << "unknown precision code " << static_cast<int>(p.precision) << " (0=float32, 1=int8)";
  } else if (p.m < 0 || p.k < 0 || p.n < 0) {
    out() << "negative size: M=" << p.m << ", K=" << p.k << ", N=" << p.n;
  } else if (p.m > kMaxDim || p.k > kMaxDim || p.n > kMaxDim || Overflows(p.m, p.k) ||
             Overflows(p.k, p.n) || Overflows(p.m, p.n)) {
    out() << "sizes too large: M=" << p.m << ", K=" << p.k << ", N=" << p.n
          << " (each below 2^40, and their pairwise products below 2^62)";
  } else if (p.block_size <= 0) {
    out() << "block_size must be positive, got " << p.block_size;
  } else if (p.k % p.block_size) {
    out() << "block_size=" << p.block_size << " must divide K=" << p.k;
  } else if (packed && p.block_size % 2) {
    out() << "4-bit formats need an even block_size, got " << p.block_size;
  } else if (p.scale_codes && p.dq_group <= 0) {
    out() << "the double-quant group size must be positive, got " << p.dq_group;
  } else if (p.scale_codes &&
             p.group_count != CeilDiv(p.k / p.block_size * p.n, p.dq_group)) {
    out() << "double-quant group_scale must hold ceil(K / block_size * N / " << p.dq_group
          << ") = " << CeilDiv(p.k / p.block_size * p.n, p.dq_group) << " entries, got "
          << p.group_count;
  } else if (p.scale_codes && p.scale_half) {
    out() << "double-quantized and 16-bit scales are exclusive: set scale_codes or scale_half";
  } else if (p.scale_half && p.scale_half_type != HalfType::kF16 &&
             p.scale_half_type != HalfType::kBF16) {
    out() << "unknown 16-bit scale type code " << static_cast<int>(p.scale_half_type)
          << " (0=float16, 1=bfloat16)";
  } else if (p.transposed && p.scale_codes) {
    out() << "the transposed product reads float32 scales, not double-quantized ones";
  } else if (p.m * (p.transposed ? p.k : p.n) > 0 &&  // a non-empty result, from ...
             (!p.out || ((p.transposed ? p.n : p.k) > 0 &&  // ... non-empty sums
                         (!p.x || !p.qvalue ||
                          (p.scale_codes ? !p.group_scale : !p.scale && !p.scale_half))))) {
    out() << "null data pointer for a non-empty operand";
  }
  return err ? err->str() : std::string();
}

size_t WorkspaceBytes(const Problem& p, Path path, int max_workers) {
  size_t bytes = 0;
  for (int isa = 0; isa <= static_cast<int>(DetectIsa()); ++isa) {
    const KernelTable& kt = KernelsFor(static_cast<Isa>(isa));
    size_t table_bytes = 0;
    if (p.transposed) {
      table_bytes = internal::TransposedWorkspaceBytes(kt, p, path, std::max(1, max_workers));
    } else {
      Layout(kt, p, Resolve(kt, p, path), std::max(1, max_workers), nullptr, &table_bytes);
    }
    bytes = std::max(bytes, table_bytes);
  }
  return bytes;
}

SplitPlan PlanSplit(const Problem& p, Path path, int max_workers) {
  const KernelTable& kt = Kernels();
  SplitPlan plan;
  if (p.transposed || Resolve(kt, p, path) != Path::kGemv) return plan;
  const GemvSplit s = SplitOf(kt, p, std::max(1, max_workers));
  plan.col_chunks = s.col_tasks;
  plan.k_ranges = s.k_tasks;
  plan.partial_bytes = PartialFloats(kt, p, s) * int64_t{sizeof(float)};
  return plan;
}

void Run(const Problem& p, Path path, Runner& runner, void* workspace) {
  const KernelTable& kt = Kernels();
  if (p.transposed) {
    internal::RunTransposed(p, path, runner, workspace, kt);
    return;
  }
  if (p.m == 0 || p.n == 0) return;
  path = Resolve(kt, p, path);
  const Buffers b = Layout(kt, p, path, std::max(1, runner.max_workers()), workspace, nullptr);
  if (path == Path::kGemm) {
    if (ExpandsScales(p) && p.k > 0) {
      // Every panel reads its scale rows for M rows of products: expanded once, up front.
      runner.Parallel(p.k / p.block_size, [&](int64_t blk, int) {
        ExpandScales(kt, p, blk, blk + 1, 0, p.n, b.scales + blk * p.n, p.n);
      });
    }
    RunGemm(p, b, runner, kt);
    return;
  }
  const float* x = static_cast<const float*>(p.x);
  if (p.x_dtype == DType::kBF16) {
    internal::Bf16RowsToF32(runner, static_cast<const uint16_t*>(p.x), p.m, p.k, b.x32);
    x = b.x32;
  }
  if (UsesInt8(kt, p)) {
    const auto quantize = [&](int64_t mi, int) {
      kt.q8_quantize(p.fmt, internal::Q8ScaleSpan(p.fmt, p.block_size), x + mi * p.k, p.k, p.m,
                     b.xq + mi * internal::kQ8Group, b.xd + mi, b.xsum + mi);
    };
    // A few tens of microseconds of work: cheaper on this thread than waking the others.
    if (p.m * p.k <= kSerialQuantizeFloats) {
      for (int64_t mi = 0; mi < p.m; ++mi) quantize(mi, 0);
    } else {
      runner.Parallel(p.m, quantize);
    }
  }
  const int64_t rows = SplitRows(kt, p);
  for (int64_t m0 = 0; m0 < p.m; m0 += rows) {
    RunGemv(p, x, m0, std::min<int64_t>(rows, p.m - m0), b, runner, kt);
  }
}

void Run(const Problem& p, Path path, Runner& runner) {
  std::vector<char> storage(WorkspaceBytes(p, path, runner.max_workers()) + kAlign);
  void* base = storage.data();
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(base) % kAlign;
  if (misalign) base = storage.data() + (kAlign - misalign);
  Run(p, path, runner, base);
}

}  // namespace jaxcore_cpu
