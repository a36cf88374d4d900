// Weight-only quantized matmul on CPU: out(M, N) = x(M, K) @ W(K, N), with W stored in
// jaxcore's (K, N) quantized layout (jaxcore/kernels/_formats.py is the spec):
//
//   int8: qvalue int8 (K, N);  W[k, n] = qvalue[k, n] * scale[k / block_size, n]
//   int4: qvalue uint8 (K/2, N); row 2i in the low nibble, 2i+1 in the high; W = (v - 8) * s
//   nf4:  same packing; W = kNf4Code[v] * s
//
// Arithmetic is float32 throughout (decoded weights times float32 activations, float32
// accumulation), so results match the dequantize-then-dot reference up to float32 rounding.
#ifndef JAXCORE_CPU_CSRC_QMM_H_
#define JAXCORE_CPU_CSRC_QMM_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "problem.h"

namespace jaxcore_cpu {

// Checks sizes and the block layout; returns "" when valid, else a message naming the
// problem. Run() requires a valid problem.
std::string Validate(const Problem& p);

// Best instruction set this CPU supports (cpuid + OS support of the register state).
Isa DetectIsa();
// Whether the CPU has AVX-VNNI (the VEX-encoded vpdpbusd); kAvxVnni runs the EVEX encoding
// of the same kernels on AVX-512 VNNI CPUs without it.
bool CpuHasAvxVnni();
// The instruction set Run() uses: DetectIsa(), lowered by SetIsa().
Isa ActiveIsa();
// The instruction sets this CPU runs, portable first and DetectIsa() last: on x86-64
// kPortable up to DetectIsa(), on aarch64 kPortable and, with sdot, kDotProd.
std::vector<Isa> SupportedIsas();
// Restricts the kernels to `isa` (one of SupportedIsas()); returns false otherwise.
bool SetIsa(Isa isa);
const char* IsaName(Isa isa);

// Bytes of scratch Run() needs for this problem, path and worker count, whichever instruction
// set is active when it runs (SetIsa() may change it in between).
size_t WorkspaceBytes(const Problem& p, Path path, int max_workers);

// How Run() would divide a problem on the split-K path (the GEMV and int8-activation
// kernels) under the active instruction set: for tests and tuning.
struct SplitPlan {
  int64_t col_chunks = 0;     // column chunks per pass
  int64_t k_ranges = 0;       // K ranges per pass, each summing into its own partial sums
  int64_t partial_bytes = 0;  // the partial sums of one pass, written and read back (0 when
                              // the tasks write the output directly)
};
// A zero plan where `path` resolves to the GEMM path.
SplitPlan PlanSplit(const Problem& p, Path path, int max_workers);

// Computes the product. `path` kAuto chooses by M. `workspace` must hold
// WorkspaceBytes(p, path, runner.max_workers()) bytes, 64-byte aligned.
void Run(const Problem& p, Path path, Runner& runner, void* workspace);
// The same with a workspace Run allocates itself.
void Run(const Problem& p, Path path, Runner& runner);

}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_QMM_H_
