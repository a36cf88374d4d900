// The cache-blocked GEMM over decoded weight panels: out(M, C) = x(M, D) @ B(D, C), where the
// table's micro-kernel multiplies packed activations by panels that a decoder fills from the
// stored weight. x @ W decodes W's (K, N) panels as stored (D = K, C = N); x @ W^T decodes them
// transposed (D = N, C = K). Used by qmm.cc and transposed.cc; plain C++.
#ifndef JAXCORE_CPU_CSRC_GEMM_H_
#define JAXCORE_CPU_CSRC_GEMM_H_

#include <cstdint>

#include "kernels.h"
#include "problem.h"

namespace jaxcore_cpu {
namespace internal {

struct Gemm {
  int64_t m = 0, depth = 0, cols = 0;
  const void* x = nullptr;  // (m, depth) of x_dtype
  DType x_dtype = DType::kF32;
  float* out = nullptr;     // (m, cols) float32, overwritten
  float* apack = nullptr;   // GemmPackFloats(m, depth) floats
  float* panels = nullptr;  // per worker, GemmPanelFloats() floats
  // Fills a panel: the GEMM sets r0, r1 (rows of depth), n0, cols (of the columns) and panel;
  // `weight` holds the rest (format, codes, scales).
  void (*decode)(const DecodePanel&) = nullptr;
  DecodePanel weight{};
};

// The fixed fields of the DecodePanel for problem p's weight (format, codes, scales), with
// `scale` standing in for p.scale (a double-quant problem's expanded scales).
inline DecodePanel StoredWeight(const Problem& p, const float* scale) {
  DecodePanel d{};
  d.fmt = p.fmt;
  d.q = static_cast<const uint8_t*>(p.qvalue);
  d.ldq = p.n;
  d.scale = scale;
  d.lds = p.n;
  d.block_size = p.block_size;
  return d;
}

// Floats of packed activations for m rows of `depth`.
int64_t GemmPackFloats(int64_t m, int64_t depth);
// Floats of one worker's decoded panel.
int64_t GemmPanelFloats();

// Runs the GEMM: tasks are column tiles, which the threads claim; each decodes its tile's
// panels once per depth slice and runs the micro-kernel over every activation row.
void RunGemm(const Gemm& g, Runner& runner, const KernelTable& kt);

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_GEMM_H_
