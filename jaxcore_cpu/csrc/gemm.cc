// The cache-blocked GEMM over decoded weight panels (gemm.h).
#include "gemm.h"

#include <algorithm>
#include <cstdint>

#include "bf16.h"
#include "plan.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

// Columns per task and rows of depth per decoded panel (128 KiB, in L2). Narrow tiles give a
// many-core machine tasks to share; the deep panel halves how often the result tile is read
// and written back (measured on Zen 4, 2 threads: M = 16 -9 %, M = 256 -2 %).
constexpr int64_t kGemmCols = 64;
constexpr int64_t kGemmDepth = 512;
// Activation rows per pass of a tile's slivers, a multiple of the micro-tile's 12: their
// packed panel (192 KiB at the full depth) stays in L2 beside the decoded one, where all of M
// came from L3 (Zen 4, M = 1024, K = N = 4096: 1-2 % faster through JAX on 2 threads, ~4 % on
// one; M <= 96 unchanged).
constexpr int64_t kGemmRowBlock = 96;
static_assert(kGemmRowBlock % kMr == 0, "whole micro-tiles per row block");

}  // namespace

int64_t GemmPackFloats(int64_t m, int64_t depth) { return RoundUp(m, kMr) * depth; }

int64_t GemmPanelFloats() { return RoundUp(kGemmCols, kNr) * kGemmDepth; }

void RunGemm(const Gemm& g, Runner& runner, const KernelTable& kt) {
  // Micro-panel mb holds rows [mb * kMr, mb * kMr + kMr) as apack[mb][d][i], zero-padded,
  // so the micro-kernel streams its activations contiguously.
  runner.Parallel(CeilDiv(g.m, kMr), [&](int64_t mb, int) {
    float* panel = g.apack + mb * kMr * g.depth;
    for (int64_t i = 0; i < kMr; ++i) {
      const int64_t mi = mb * kMr + i;
      for (int64_t d = 0; d < g.depth; ++d) {
        panel[d * kMr + i] = mi >= g.m ? 0.0f
                             : g.x_dtype == DType::kF32
                                 ? static_cast<const float*>(g.x)[mi * g.depth + d]
                                 : Bf16ToF32(static_cast<const uint16_t*>(g.x)[mi * g.depth + d]);
      }
    }
  });
  const int64_t tiles = CeilDiv(g.cols, kGemmCols);
  runner.Parallel(tiles, [&](int64_t task, int worker) {
    float* panel = g.panels + worker * GemmPanelFloats();
    const int64_t n0 = task * kGemmCols;
    const int64_t cols = std::min(kGemmCols, g.cols - n0);
    if (g.depth == 0) {
      for (int64_t mi = 0; mi < g.m; ++mi) {
        std::fill(g.out + mi * g.cols + n0, g.out + mi * g.cols + n0 + cols, 0.0f);
      }
    }
    for (int64_t k0 = 0; k0 < g.depth; k0 += kGemmDepth) {
      const int64_t k1 = std::min(g.depth, k0 + kGemmDepth);
      DecodePanel d = g.weight;
      d.r0 = k0;
      d.r1 = k1;
      d.n0 = n0;
      d.cols = cols;
      d.panel = panel;
      g.decode(d);
      const int64_t depth = k1 - k0;
      // Rows of the activations in blocks whose packed panel (kGemmRowBlock x depth floats)
      // stays in L2 while every sliver of the tile passes over it.
      for (int64_t mb0 = 0; mb0 < g.m; mb0 += kGemmRowBlock) {
        const int64_t mb1 = std::min(g.m, mb0 + kGemmRowBlock);
        for (int64_t j = 0; j * kNr < cols;) {
          const float* sliver = panel + j * depth * kNr;
          const int64_t left = cols - j * kNr;
          const bool pair = kt.microkernel_pair != nullptr && left > kNr;
          const int width = static_cast<int>(std::min<int64_t>(pair ? 2 * kNr : kNr, left));
          for (int64_t m0 = mb0; m0 < mb1; m0 += kMr) {
            const int mr = static_cast<int>(std::min<int64_t>(kMr, g.m - m0));
            const float* a = g.apack + m0 * g.depth + k0 * kMr;
            float* c = g.out + m0 * g.cols + n0 + j * kNr;
            if (pair) {
              kt.microkernel_pair(mr, depth, a, sliver, sliver + depth * kNr, c, g.cols, k0 > 0,
                                  width);
            } else {
              kt.microkernel(mr, depth, a, sliver, c, g.cols, k0 > 0, width);
            }
          }
          j += pair ? 2 : 1;
        }
      }
    }
  });
}

}  // namespace internal
}  // namespace jaxcore_cpu
