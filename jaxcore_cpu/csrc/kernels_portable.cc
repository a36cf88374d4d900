// Portable kernels: plain C++ the compiler may auto-vectorize for the baseline ISA. They
// define the arithmetic every SIMD variant must reproduce, and run on any CPU.
#include <cstring>
#include <limits>

#include "kernels.h"

namespace jaxcore_cpu {
namespace internal {

const float kNf4Code[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

namespace {

void GemvSegmentPortable(const GemvSegment& s) {
  for (int mi = 0; mi < s.m; ++mi) {
    std::memset(s.acc + mi * s.ldacc, 0, sizeof(float) * s.cols);
  }
  for (int64_t r = s.r0; r < s.r1; ++r) {
    for (int mi = 0; mi < s.m; ++mi) {
      const float xv = s.x[mi * s.ldx + r];
      float* acc = s.acc + mi * s.ldacc;
      for (int64_t c = 0; c < s.cols; ++c) {
        acc[c] += xv * Unscaled(s.fmt, s.q, s.ldq, r, s.n0 + c);
      }
    }
  }
  for (int mi = 0; mi < s.m; ++mi) {
    const float* acc = s.acc + mi * s.ldacc;
    float* y = s.y + mi * s.ldy;
    for (int64_t c = 0; c < s.cols; ++c) y[c] += s.scale[c] * acc[c];
  }
}

void MicroKernelPortable(int mr, int64_t kc, const float* a, const float* b, float* c,
                         int64_t ldc, bool accumulate, int cols) {
  float tile[kMr][kNr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int i = 0; i < mr; ++i) {
      const float av = a[k * kMr + i];
      for (int j = 0; j < kNr; ++j) tile[i][j] += av * b[k * kNr + j];
    }
  }
  for (int i = 0; i < mr; ++i) {
    for (int j = 0; j < cols; ++j) {
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + tile[i][j] : tile[i][j];
    }
  }
}

}  // namespace

void DecodePanelPortable(const DecodePanel& d) {
  const int64_t rows = d.r1 - d.r0;
  const int64_t slivers = (d.cols + kNr - 1) / kNr;
  for (int64_t j = 0; j < slivers; ++j) {
    float* out = d.panel + j * rows * kNr;
    for (int64_t r = d.r0; r < d.r1; ++r) {
      const float* srow = d.scale + (r / d.block_size) * d.lds;
      for (int i = 0; i < kNr; ++i) {
        const int64_t c = j * kNr + i;
        float w = 0.0f;
        if (c < d.cols) {
          const int64_t n = d.n0 + c;
          w = Unscaled(d.fmt, d.q, d.ldq, r, n) * srow[n];
        }
        out[(r - d.r0) * kNr + i] = w;
      }
    }
  }
}

void ExpandDqPortable(const int8_t* codes, int64_t count, float gs, float offset, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    // Two roundings, on every target: the product is exact in double and rounds to the float
    // product once, and no compiler fuses that conversion with the add (where the target
    // has fused multiply-adds, as aarch64 always does, it would fuse a float multiply).
    const float product = static_cast<float>(static_cast<double>(codes[i]) * gs);
    const float v = product + offset;
    out[i] = v > std::numeric_limits<float>::max() ? std::numeric_limits<float>::max() : v;
  }
}

const KernelTable& PortableKernels() {
  static const KernelTable table = {GemvSegmentPortable, DecodePanelPortable,
                                    MicroKernelPortable, Q8QuantizePortable,
                                    Q8SegmentPortable};
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
