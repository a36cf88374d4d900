// Portable int8-activation kernels (Precision::kInt8): the integer arithmetic every SIMD
// variant reproduces exactly (integer sums are exact, so only the float32 flush order can
// differ between instruction sets).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace jaxcore_cpu {
namespace internal {

// round(127 * kNf4Code): NF4's code book on the int8 grid.
const int8_t kNf4Int8[16] = {-127, -88, -67, -50, -36, -23, -12, 0,
                             10,   20,  31,  43,  56,  71,  92,  127};

namespace {

inline int32_t WeightCode(Format fmt, const uint8_t* q, int64_t ldq, int64_t r, int64_t n) {
  if (fmt == Format::kInt8) return static_cast<int8_t>(q[r * ldq + n]);
  const uint8_t v = Nibble(q, ldq, r, n);
  return fmt == Format::kNf4 ? kNf4Int8[v] : v;
}

}  // namespace

void Q8QuantizePortable(Format fmt, int span, const float* x, int64_t k, int64_t rows,
                        int8_t* q, float* d, int32_t* sum) {
  span = span < 1 ? 1 : span;
  const int64_t unit = int64_t{kQ8Group} * span;  // values sharing one scale
  for (int64_t u = 0; u < k / unit; ++u) {
    const float* xu = x + u * unit;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t i = 0; i < unit; ++i) {
      const float a = std::fabs(xu[i]);
      finite = finite && a <= std::numeric_limits<float>::max();  // false for NaN and inf
      amax = a > amax ? a : amax;
    }
    const float dg = amax / 127.0f;
    const float inv = dg > 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t g = u * span; g < (u + 1) * span; ++g) {
      const float* xg = x + g * kQ8Group;
      if (!finite) {
        // No int8 code stands for NaN or infinity: the group's scale is NaN instead, so every
        // product it enters is NaN (as float32 arithmetic would make it, or infinite).
        std::memset(q + g * rows * kQ8Group, 0, kQ8Group);
        d[g * rows] = std::numeric_limits<float>::quiet_NaN();
        sum[g * rows] = 0;
        continue;
      }
      int32_t s = 0;
      for (int i = 0; i < kQ8Group; ++i) {
        const int32_t v = static_cast<int32_t>(std::nearbyint(xg[i] * inv));
        q[g * rows * kQ8Group + Q8CodeAt(fmt, i)] = static_cast<int8_t>(v);
        s += v;
      }
      d[g * rows] = dg;
      sum[g * rows] = s;
    }
  }
}

// Columns [c0, c1) of one segment, element by element (also the SIMD kernels' tail).
void Q8SegmentColumns(const Q8Segment& s, int64_t c0, int64_t c1) {
  const int32_t zp = s.fmt == Format::kInt4 ? 8 : 0;
  const float unit = s.fmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f;
  for (int64_t mi = 0; mi < s.m; ++mi) {
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t n = s.n0 + c;
      float total = 0.0f;
      for (int64_t g0 = s.r0; g0 < s.r1; g0 += kQ8Group) {
        const int64_t g = g0 / kQ8Group;
        const int64_t at = g * s.x.rows + mi;
        const int8_t* xq = s.x.q + at * kQ8Group;
        int32_t dot = 0;
        for (int r = 0; r < kQ8Group; ++r) {
          dot += xq[Q8CodeAt(s.fmt, r)] * WeightCode(s.fmt, s.q, s.ldq, g0 + r, n);
        }
        dot -= zp * s.x.sum[at];
        total += s.x.d[at] * static_cast<float>(dot);
      }
      s.y[mi * s.ldy + c] += s.scale[c] * unit * total;
    }
  }
}

namespace {

// Columns one pass of Q8SegmentOf takes.
constexpr int64_t kQ8Piece = 64;

// The weight codes of logical row r (g0 + i of a group) for columns [0, cols): int8's code,
// int4's nibble (the zero point is removed through the activation sums) or NF4's int8 code.
template <Format kFmt>
inline void WeightRow(const uint8_t* q, int64_t ldq, int64_t r, int64_t cols, int16_t* w) {
  const uint8_t* row = q + (kFmt == Format::kInt8 ? r : r >> 1) * ldq;
  const int shift = kFmt != Format::kInt8 && (r & 1) ? 4 : 0;
  int64_t c = 0;
#if defined(__aarch64__)
  if constexpr (kFmt == Format::kNf4) {
    // NEON (every aarch64 CPU) looks 16 codes up in its code book with one tbl, where GCC
    // leaves the table read below scalar, one load per weight.
    const int8x16_t book = vld1q_s8(kNf4Int8);
    for (; c + 16 <= cols; c += 16) {
      const uint8x16_t bytes = vld1q_u8(row + c);
      const uint8x16_t v = shift ? vshrq_n_u8(bytes, 4) : vandq_u8(bytes, vdupq_n_u8(0x0F));
      const int8x16_t code = vqtbl1q_s8(book, v);
      vst1q_s16(w + c, vmovl_s8(vget_low_s8(code)));
      vst1q_s16(w + c + 8, vmovl_high_s8(code));
    }
  }
#endif
  for (; c < cols; ++c) {
    if constexpr (kFmt == Format::kInt8) {
      w[c] = static_cast<int8_t>(row[c]);
    } else if constexpr (kFmt == Format::kInt4) {
      w[c] = (row[c] >> shift) & 0x0F;
    } else {
      w[c] = kNf4Int8[(row[c] >> shift) & 0x0F];
    }
  }
}

// Q8SegmentColumns' arithmetic, vectorizable: per piece of columns and group, each weight row
// is decoded once for every activation row, and each row's int32 sums run over the piece's
// columns (exact, so in any order); the float sums per column follow Q8SegmentColumns' order
// (group by group, then scale times unit times the total).
template <Format kFmt>
void Q8SegmentOf(const Q8Segment& s) {
  static_assert(kInt8MaxM <= 64, "the totals of every activation row stay on the stack");
  const int32_t zp = kFmt == Format::kInt4 ? 8 : 0;
  const float unit = kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f;
  alignas(64) int16_t w[kQ8Group][kQ8Piece];
  alignas(64) int32_t dot[kQ8Piece];
  alignas(64) float total[kInt8MaxM][kQ8Piece];
  for (int64_t c0 = 0; c0 < s.cols; c0 += kQ8Piece) {
    const int64_t cols = std::min(kQ8Piece, s.cols - c0);
    for (int64_t mi = 0; mi < s.m; ++mi) std::fill(total[mi], total[mi] + cols, 0.0f);
    for (int64_t g0 = s.r0; g0 < s.r1; g0 += kQ8Group) {
      for (int i = 0; i < kQ8Group; ++i) WeightRow<kFmt>(s.q + s.n0 + c0, s.ldq, g0 + i, cols, w[i]);
      const int64_t g = g0 / kQ8Group;
      for (int64_t mi = 0; mi < s.m; ++mi) {
        const int64_t at = g * s.x.rows + mi;
        const int8_t* xq = s.x.q + at * kQ8Group;
        // The activations in row order first: with Q8CodeAt's permutation inside the loops,
        // GCC left the nibble formats' sums scalar (5x slower than int8's).
        int16_t xs[kQ8Group];
        for (int i = 0; i < kQ8Group; ++i) xs[i] = xq[Q8CodeAt(kFmt, i)];
        std::fill(dot, dot + cols, -zp * s.x.sum[at]);
        for (int i = 0; i < kQ8Group; ++i) {
          for (int64_t c = 0; c < cols; ++c) dot[c] += xs[i] * w[i][c];
        }
        const float dg = s.x.d[at];
        for (int64_t c = 0; c < cols; ++c) total[mi][c] += dg * static_cast<float>(dot[c]);
      }
    }
    for (int64_t mi = 0; mi < s.m; ++mi) {
      float* y = s.y + mi * s.ldy + c0;
      const float* sc = s.scale + c0;
      for (int64_t c = 0; c < cols; ++c) y[c] += sc[c] * unit * total[mi][c];
    }
  }
}

}  // namespace

void Q8SegmentPortable(const Q8Segment& s) {
  WithFormat(s.fmt, [&](auto tag) { Q8SegmentOf<decltype(tag)::value>(s); });
}

}  // namespace internal
}  // namespace jaxcore_cpu
