// Planning of the split-K path (GEMV and int8 activations): which path a problem takes, and
// how one pass divides into tasks (column chunks times K ranges) for the threads to claim.
// Used by qmm.cc; plain C++ (no ISA-specific code).
#ifndef JAXCORE_CPU_CSRC_PLAN_H_
#define JAXCORE_CPU_CSRC_PLAN_H_

#include <algorithm>
#include <cstdint>

#include "kernels.h"
#include "problem.h"

namespace jaxcore_cpu {
namespace internal {

inline int64_t RoundUp(int64_t v, int64_t to) { return (v + to - 1) / to * to; }
inline int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Path::kGemv doubles as the int8-activation path: both split K into ranges that sum
// into per-range partial results.
// The planners take the kernel table they plan for: Run() reads the active one once, and
// WorkspaceBytes() sizes for every table the CPU could switch to (SetIsa) in between.
bool UsesInt8(const KernelTable& kt, const Problem& p);
Path Resolve(const KernelTable& kt, const Problem& p, Path path);

// Activation rows one pass of the split-K path handles.
int64_t SplitRows(const KernelTable& kt, const Problem& p);

// Floats of per-worker scratch the split-K path's kernels use. A q8_task kernel blocks its
// columns itself, so N bounds what any of its plans' tasks needs.
int64_t AccFloats(const KernelTable& kt, const Problem& p);

// How the split-K path divides one pass: column chunks times K ranges. Each K range sums
// into its own partial buffer and the buffers are added in K order, so the result does not
// depend on which thread ran which task (bitwise reproducible for a given thread count).
struct GemvSplit {
  int64_t ncols;      // columns per task (the first head_chunks column chunks)
  int64_t col_tasks;
  int64_t k_len;      // rows of K per task (the first head_ranges K ranges), a multiple
                      // of the kernel's step
  int64_t k_tasks;
  // The last tasks claimed are short, so the workers finish close together: column chunks
  // from head_chunks on are tail_cols wide (< ncols), K ranges from head_ranges on
  // tail_len long (< k_len). tail_cols = 0, tail_len = 0: no tail.
  int64_t head_chunks = 0;
  int64_t tail_cols = 0;
  int64_t head_ranges = 0;
  int64_t tail_len = 0;
};

// Rows [*k0, *k1) of the split's K range `range` (of K = k rows).
inline void RangeRows(const GemvSplit& s, int64_t k, int64_t range, int64_t* k0, int64_t* k1) {
  if (s.tail_len == 0 || range < s.head_ranges) {
    *k0 = range * s.k_len;
    *k1 = std::min(k, *k0 + s.k_len);
  } else {
    *k0 = s.head_ranges * s.k_len + (range - s.head_ranges) * s.tail_len;
    *k1 = std::min(k, *k0 + s.tail_len);
  }
}

// Columns [*n0, *n0 + *cols) of the split's column chunk `chunk` (of N = n columns).
inline void ChunkColumns(const GemvSplit& s, int64_t n, int64_t chunk, int64_t* n0,
                         int64_t* cols) {
  if (s.tail_cols == 0 || chunk < s.head_chunks) {
    *n0 = chunk * s.ncols;
    *cols = std::min(s.ncols, n - *n0);
  } else {
    *n0 = s.head_chunks * s.ncols + (chunk - s.head_chunks) * s.tail_cols;
    *cols = std::min(s.tail_cols, n - *n0);
  }
}

// The split of one pass for `workers` threads.
GemvSplit SplitOf(const KernelTable& kt, const Problem& p, int workers);

// Whether the split-K tasks write the output themselves: one K range and a float32 result
// leave nothing to add up or convert.
bool WritesDirectly(const Problem& p, const GemvSplit& s);

// Floats of partial sums one pass of the split keeps (0 when its tasks write directly).
int64_t PartialFloats(const KernelTable& kt, const Problem& p, const GemvSplit& s);

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_PLAN_H_
