// The transposed product y = x @ W^T (Problem::transposed): its workspace and its run. Used by
// qmm.cc; plain C++ (the arithmetic is the kernel table's nt_rows).
#ifndef JAXCORE_CPU_CSRC_TRANSPOSED_H_
#define JAXCORE_CPU_CSRC_TRANSPOSED_H_

#include <cstddef>

#include "kernels.h"
#include "problem.h"

namespace jaxcore_cpu {
namespace internal {

// The path a transposed problem takes with table kt: kGemv (rows of W streamed along N,
// activation rows in registers) or kGemm (the cache-blocked GEMM over transposed panels);
// kAuto picks by M (KernelTable::nt_rows_max_m).
Path TransposedPath(const KernelTable& kt, const Problem& p, Path path);

// Bytes of scratch RunTransposed needs with table kt for `path` and `workers` workers.
size_t TransposedWorkspaceBytes(const KernelTable& kt, const Problem& p, Path path,
                                int workers);

// Computes y = x @ W^T for a valid transposed problem. Tasks are ranges of W's rows (the
// result's columns), claimed by the threads as they come free; each writes its own columns
// of every result row, so the result does not depend on which thread ran which task.
void RunTransposed(const Problem& p, Path path, Runner& runner, void* workspace,
                   const KernelTable& kt);

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_TRANSPOSED_H_
