// The transposed product y(M, K) = x(M, N) @ W(K, N)^T (transposed.h), by one of two paths.
//
// The GEMM (many activation rows): gemm.h's cache-blocked GEMM, with depth N and columns K,
// over panels that the table's nt_decode_panel decodes from W's rows (16 x 16 blocks decoded
// along the rows, stored transposed).
//
// The rows path (few activation rows): each task takes a range of W's rows. For every chunk
// of columns and every scale block its rows touch, it multiplies the activations by that
// block's scales (xs, in the worker's scratch: at most kRowsPerPass rows times one chunk, so
// it stays in L1/L2) and hands the block's rows to the table's nt_rows, which streams them
// once per pass with the sums in registers. Activation rows past kRowsPerPass take further
// passes over the chunk's weight bytes, then in cache.
#include "transposed.h"

#include <algorithm>
#include <cstdint>

#include "bf16.h"
#include "gemm.h"
#include "plan.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int64_t kAlignFloats = 16;  // 64 bytes
// Activation rows one pass of nt_rows takes, and floats of scaled activations per worker
// (64 KiB): the chunk is as wide as fits (all of N for a few rows), at least kMinChunk.
constexpr int64_t kRowsPerPass = 16;
constexpr int64_t kXsFloats = 16384;
constexpr int64_t kMinChunk = 256;
// Rows of W per task: about 8 tasks per worker, whole tiles of four rows, at most 64 rows.
constexpr int64_t kMaxTaskRows = 64;

int64_t ChunkCols(const Problem& p) {
  const int64_t rows = std::max<int64_t>(1, std::min(p.m, kRowsPerPass));
  const int64_t fit = std::max(kMinChunk, kXsFloats / rows / kAlignFloats * kAlignFloats);
  return std::max<int64_t>(1, std::min(fit, RoundUp(p.n, kAlignFloats)));
}

int64_t TaskRows(const Problem& p, int workers) {
  return std::clamp<int64_t>(RoundUp(CeilDiv(p.k, 8 * int64_t{workers}), 4), 4, kMaxTaskRows);
}

// Floats from one row of scaled activations to the next: a line more than the chunk, so rows
// a multiple of 4 KiB long do not share L1 sets.
int64_t XsStride(const Problem& p) { return RoundUp(ChunkCols(p), kAlignFloats) + kAlignFloats; }

int64_t XsRows(const Problem& p) { return std::min(std::max<int64_t>(p.m, 1), kRowsPerPass); }

// Per worker: the scaled activations of one pass.
int64_t XsFloats(const Problem& p) { return XsRows(p) * XsStride(p); }

struct Scratch {
  float* scales = nullptr; // 16-bit scales as float32: GEMM, all of them; rows, per worker,
                           //   one chunk's (ScaleFloats())
  float* x32 = nullptr;    // rows: bf16 activations as float32
  float* y32 = nullptr;    // float32 result before its bf16 conversion
  float* xs = nullptr;     // rows: per worker, XsFloats() scaled activations
  float* apack = nullptr;  // GEMM: packed activations
  float* panels = nullptr; // GEMM: per worker, one decoded panel
};

// Per worker on the rows path: one scale row's chunk of 16-bit scales, converted.
int64_t ScaleFloats(const Problem& p) { return RoundUp(ChunkCols(p), kAlignFloats); }

Scratch Carve(const Problem& p, Path path, int workers, void* base, size_t* bytes) {
  char* at = static_cast<char*>(base);
  int64_t used = 0;
  auto take = [&](int64_t floats) {
    float* f = at ? reinterpret_cast<float*>(at + used) : nullptr;
    used += RoundUp(floats, kAlignFloats) * int64_t{sizeof(float)};
    return f;
  };
  Scratch s;
  if (p.out_dtype != DType::kF32) s.y32 = take(p.m * p.k);
  if (path == Path::kGemm) {
    s.apack = take(GemmPackFloats(p.m, p.n));
    s.panels = take(workers * GemmPanelFloats());
    if (p.scale_half) s.scales = take(p.k / p.block_size * p.n);
  } else {
    if (p.x_dtype != DType::kF32) s.x32 = take(p.m * p.n);
    s.xs = take(workers * XsFloats(p));
    if (p.scale_half) s.scales = take(workers * ScaleFloats(p));
  }
  if (bytes) *bytes = static_cast<size_t>(used);
  return s;
}

// The GEMM (gemm.h) over panels decoded from W's rows: depth N, columns K.
void RunTransposedGemm(const Problem& p, const Scratch& s, float* y, Runner& runner,
                       const KernelTable& kt) {
  Gemm g;
  g.m = p.m;
  g.depth = p.n;
  g.cols = p.k;
  g.x = p.x;
  g.x_dtype = p.x_dtype;
  g.out = y;
  g.apack = s.apack;
  g.panels = s.panels;
  g.decode = kt.nt_decode_panel;
  if (p.scale_half) {
    // Every panel reads its scale rows for M rows of products: converted once, up front.
    runner.Parallel(p.k / p.block_size, [&](int64_t blk, int) {
      kt.expand_half(p.scale_half + blk * p.n, p.n, p.scale_half_type, s.scales + blk * p.n);
    });
  }
  g.weight = StoredWeight(p, p.scale_half ? s.scales : p.scale);
  RunGemm(g, runner, kt);
}

// The rows path: nt_rows over each task's rows of W, a chunk of columns and a scale block at
// a time.
void RunTransposedRows(const Problem& p, const Scratch& s, float* y, int workers, Runner& runner,
                       const KernelTable& kt) {
  const float* x = static_cast<const float*>(p.x);
  if (p.x_dtype != DType::kF32) {
    Bf16RowsToF32(runner, static_cast<const uint16_t*>(p.x), p.m, p.n, s.x32);
    x = s.x32;
  }
  const int64_t task_rows = TaskRows(p, workers);
  const int64_t chunk = ChunkCols(p);
  const int64_t xs_floats = XsFloats(p);
  const int64_t ldxs = XsStride(p);
  const auto* q = static_cast<const uint8_t*>(p.qvalue);
  runner.Parallel(CeilDiv(p.k, task_rows), [&](int64_t task, int worker) {
    const int64_t r0 = task * task_rows, r1 = std::min(p.k, r0 + task_rows);
    for (int64_t mi = 0; mi < p.m; ++mi) std::fill(y + mi * p.k + r0, y + mi * p.k + r1, 0.0f);
    float* xs = s.xs + worker * xs_floats;
    float* own_scales = p.scale_half ? s.scales + worker * ScaleFloats(p) : nullptr;
    for (int64_t n0 = 0; n0 < p.n; n0 += chunk) {
      const int64_t cols = std::min(chunk, p.n - n0);
      for (int64_t ra = r0, rb; ra < r1; ra = rb) {
        const int64_t blk = ra / p.block_size;
        rb = std::min(r1, (blk + 1) * p.block_size);
        const float* srow = p.scale + blk * p.n + n0;
        if (p.scale_half) {
          kt.expand_half(p.scale_half + blk * p.n + n0, cols, p.scale_half_type, own_scales);
          srow = own_scales;
        }
        for (int64_t m0 = 0; m0 < p.m; m0 += kRowsPerPass) {
          const int64_t mr = std::min(kRowsPerPass, p.m - m0);
          for (int64_t i = 0; i < mr; ++i) {
            const float* xrow = x + (m0 + i) * p.n + n0;
            float* xsrow = xs + i * ldxs;
            for (int64_t c = 0; c < cols; ++c) xsrow[c] = xrow[c] * srow[c];
          }
          NtPiece piece;
          piece.fmt = p.fmt;
          piece.m = mr;
          piece.xs = xs;
          piece.ldxs = ldxs;
          piece.q = q;
          piece.ldq = p.n;
          piece.r0 = ra;
          piece.r1 = rb;
          piece.n0 = n0;
          piece.cols = cols;
          piece.y = y + m0 * p.k;
          piece.ldy = p.k;
          kt.nt_rows(piece);
        }
      }
    }
  });
}

}  // namespace

Path TransposedPath(const KernelTable& kt, const Problem& p, Path path) {
  if (path == Path::kAuto) return p.m > kt.nt_rows_max_m ? Path::kGemm : Path::kGemv;
  return path;
}

size_t TransposedWorkspaceBytes(const KernelTable& kt, const Problem& p, Path path,
                                int workers) {
  size_t bytes = 0;
  Carve(p, TransposedPath(kt, p, path), std::max(1, workers), nullptr, &bytes);
  return bytes;
}

void RunTransposed(const Problem& p, Path path, Runner& runner, void* workspace,
                   const KernelTable& kt) {
  if (p.m == 0 || p.k == 0) return;
  const int workers = std::max(1, runner.max_workers());
  path = TransposedPath(kt, p, path);
  const Scratch s = Carve(p, path, workers, workspace, nullptr);
  float* y = p.out_dtype == DType::kF32 ? static_cast<float*>(p.out) : s.y32;
  if (path == Path::kGemm) {
    RunTransposedGemm(p, s, y, runner, kt);
  } else {
    RunTransposedRows(p, s, y, workers, runner, kt);
  }
  if (y != p.out) F32RowsToBf16(runner, y, p.m, p.k, static_cast<uint16_t*>(p.out));
}

}  // namespace internal
}  // namespace jaxcore_cpu
