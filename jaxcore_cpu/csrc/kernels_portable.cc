// Portable kernels: plain C++ the compiler may auto-vectorize for the baseline ISA. They
// define the arithmetic every SIMD variant must reproduce, and run on any CPU.
#include <algorithm>
#include <cstring>
#include <limits>

#include "bf16.h"
#include "kernels.h"

#if defined(__aarch64__)
#include <arm_neon.h>
#endif

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

// Column pieces the float32 GEMV decodes one stored row at a time (on the stack, in L1).
constexpr int64_t kGemvPiece = 256;

// Whether NF4's code book is looked up 16 codes at a time (NEON's tbl, on every aarch64 CPU),
// rather than one scalar table read per weight.
#if defined(__aarch64__)
constexpr bool kNf4Vector = true;

// NF4's code book as byte planes (BytePlanesOf), in registers: book[i] lane c is byte i of
// code c. The planes are split once per process.
struct Nf4BytePlanes {
  uint8x16_t book[4];
};

inline Nf4BytePlanes LoadNf4BytePlanes() {
  static const CodeBytePlanes bytes = BytePlanesOf(kNf4Code);
  Nf4BytePlanes p;
  for (int i = 0; i < 4; ++i) p.book[i] = vld1q_u8(bytes.plane[i]);
  return p;
}

// NF4's float32 codes of 16 nibbles (one per byte of v), in column order: the four byte
// planes looked up with tbl, then interleaved back into floats.
inline void Nf4Codes16(const Nf4BytePlanes& p, uint8x16_t v, float* out) {
  uint8x16_t plane[4];
  for (int i = 0; i < 4; ++i) plane[i] = vqtbl1q_u8(p.book[i], v);
  const uint8x16_t lo01 = vzip1q_u8(plane[0], plane[1]), hi01 = vzip2q_u8(plane[0], plane[1]);
  const uint8x16_t lo23 = vzip1q_u8(plane[2], plane[3]), hi23 = vzip2q_u8(plane[2], plane[3]);
  const uint16x8_t parts[4] = {
      vzip1q_u16(vreinterpretq_u16_u8(lo01), vreinterpretq_u16_u8(lo23)),
      vzip2q_u16(vreinterpretq_u16_u8(lo01), vreinterpretq_u16_u8(lo23)),
      vzip1q_u16(vreinterpretq_u16_u8(hi01), vreinterpretq_u16_u8(hi23)),
      vzip2q_u16(vreinterpretq_u16_u8(hi01), vreinterpretq_u16_u8(hi23))};
  for (int j = 0; j < 4; ++j) vst1q_f32(out + 4 * j, vreinterpretq_f32_u16(parts[j]));
}
#else
constexpr bool kNf4Vector = false;
#endif

// The unscaled decoded weights of columns [0, cols) of one stored row q: int8 gives its one
// logical row in lo; the 4-bit formats give row 2 s in lo and 2 s + 1 in hi. One loop per
// format without branches, which compilers vectorize (NF4's table lookups stay scalar, but
// for kNf4Vector).
template <Format kFmt>
inline void DecodeStoredRow(const uint8_t* q, int64_t cols, float* lo, float* hi) {
  int64_t c = 0;
#if defined(__aarch64__)
  if constexpr (kFmt == Format::kNf4) {
    const Nf4BytePlanes planes = LoadNf4BytePlanes();
    for (; c + 16 <= cols; c += 16) {
      const uint8x16_t bytes = vld1q_u8(q + c);
      Nf4Codes16(planes, vandq_u8(bytes, vdupq_n_u8(0x0F)), lo + c);
      Nf4Codes16(planes, vshrq_n_u8(bytes, 4), hi + c);
    }
  }
#endif
  for (; c < cols; ++c) {
    if constexpr (kFmt == Format::kInt8) {
      lo[c] = static_cast<float>(static_cast<int8_t>(q[c]));
    } else if constexpr (kFmt == Format::kInt4) {
      lo[c] = static_cast<float>(q[c] & 0x0F) - kInt4ZeroPoint;
      hi[c] = static_cast<float>(q[c] >> 4) - kInt4ZeroPoint;
    } else {
      lo[c] = kNf4Code[q[c] & 0x0F];
      hi[c] = kNf4Code[q[c] >> 4];
    }
  }
}

// acc[m][c] = sum over the segment's rows r (in order) of x[m][r] * u[r][c]. Each stored row
// is read whole (the memory streams it), decoded and summed in one pass per activation row,
// or a piece of columns at a time decoded once for all of them.
template <Format kFmt>
void GemvSegmentOf(const GemvSegment& s) {
  constexpr int64_t kPerRow = kFmt == Format::kInt8 ? 1 : 2;
  // Decoding a row again per activation row beats storing it where decoding is cheap: int8
  // always, int4 up to two rows (x86-64 SSE2 build, K = N = 4096, 2 threads).
  // NF4 decoded 16 at a time (kNf4Vector) always takes the pieces.
  const bool nf4_pieces = kFmt == Format::kNf4 && kNf4Vector;
  const bool fused = kFmt == Format::kInt8 || (s.m == 1 && !nf4_pieces) ||
                     (kFmt == Format::kInt4 && s.m <= 2);
  alignas(64) float lo[kGemvPiece], hi[kGemvPiece];
  for (int mi = 0; mi < s.m; ++mi) std::memset(s.acc + mi * s.ldacc, 0, sizeof(float) * s.cols);
  for (int64_t r = s.r0; r < s.r1; r += kPerRow) {
    const uint8_t* q = s.q + (r / kPerRow) * s.ldq + s.n0;
    if (fused) {
      for (int mi = 0; mi < s.m; ++mi) {
        float* acc = s.acc + mi * s.ldacc;
        const float x0 = s.x[mi * s.ldx + r];
        const float x1 = kPerRow == 2 ? s.x[mi * s.ldx + r + 1] : 0.0f;
        for (int64_t c = 0; c < s.cols; ++c) {
          float u0, u1 = 0.0f;
          DecodeStoredRow<kFmt>(q + c, 1, &u0, &u1);
          acc[c] += x0 * u0;
          if (kPerRow == 2) acc[c] += x1 * u1;
        }
      }
      continue;
    }
    for (int64_t c0 = 0; c0 < s.cols; c0 += kGemvPiece) {
      const int64_t cols = std::min(kGemvPiece, s.cols - c0);
      DecodeStoredRow<kFmt>(q + c0, cols, lo, hi);
      for (int mi = 0; mi < s.m; ++mi) {
        float* acc = s.acc + mi * s.ldacc + c0;
        const float x0 = s.x[mi * s.ldx + r];
        for (int64_t c = 0; c < cols; ++c) acc[c] += x0 * lo[c];
        if (kPerRow == 2) {
          const float x1 = s.x[mi * s.ldx + r + 1];
          for (int64_t c = 0; c < cols; ++c) acc[c] += x1 * hi[c];
        }
      }
    }
  }
  for (int mi = 0; mi < s.m; ++mi) {
    const float* acc = s.acc + mi * s.ldacc;
    float* y = s.y + mi * s.ldy;
    for (int64_t c = 0; c < s.cols; ++c) y[c] += s.scale[c] * acc[c];
  }
}

void GemvSegmentPortable(const GemvSegment& s) {
  WithFormat(s.fmt, [&](auto tag) { GemvSegmentOf<decltype(tag)::value>(s); });
}

// Rows [i0, i0 + R) of a micro-tile: R x kNr sums in an array the compiler keeps in vector
// registers (R = 4: 16 accumulators, within aarch64's 32 NEON registers).
template <int R>
inline void MicroRows(int i0, int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                      bool accumulate, int cols) {
  float tile[R][kNr] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const float* bk = b + k * kNr;
    for (int i = 0; i < R; ++i) {
      const float av = a[k * kMr + i0 + i];
      for (int j = 0; j < kNr; ++j) tile[i][j] += av * bk[j];
    }
  }
  for (int i = 0; i < R; ++i) {
    float* row = c + (i0 + i) * ldc;
    for (int j = 0; j < cols; ++j) row[j] = accumulate ? row[j] + tile[i][j] : tile[i][j];
  }
}

void MicroKernelPortable(int mr, int64_t kc, const float* a, const float* b, float* c,
                         int64_t ldc, bool accumulate, int cols) {
  int i0 = 0;
  for (; i0 + 4 <= mr; i0 += 4) MicroRows<4>(i0, kc, a, b, c, ldc, accumulate, cols);
  for (; i0 < mr; ++i0) MicroRows<1>(i0, kc, a, b, c, ldc, accumulate, cols);
}

// DecodePanelPortable for one format: each logical row's kNr-wide pieces, branch-free.
template <Format kFmt>
void DecodePanelOf(const DecodePanel& d) {
  const int64_t rows = d.r1 - d.r0;
  const int64_t whole = d.cols / kNr;  // slivers with every column
  for (int64_t r = d.r0; r < d.r1; ++r) {
    const float* srow = d.scale + (r / d.block_size) * d.lds + d.n0;
    const uint8_t* q = d.q + (kFmt == Format::kInt8 ? r : r >> 1) * d.ldq + d.n0;
    const int shift = kFmt != Format::kInt8 && (r & 1) ? 4 : 0;
    for (int64_t j = 0; j < whole; ++j) {
      float* out = d.panel + j * rows * kNr + (r - d.r0) * kNr;
      const uint8_t* qj = q + j * kNr;
      const float* sj = srow + j * kNr;
      for (int i = 0; i < kNr; ++i) {
        float u;
        if constexpr (kFmt == Format::kInt8) {
          u = static_cast<float>(static_cast<int8_t>(qj[i]));
        } else if constexpr (kFmt == Format::kInt4) {
          u = static_cast<float>((qj[i] >> shift) & 0x0F) - kInt4ZeroPoint;
        } else {
          u = kNf4Code[(qj[i] >> shift) & 0x0F];
        }
        out[i] = u * sj[i];
      }
    }
  }
  if (whole * kNr == d.cols) return;
  // The last, partial sliver element by element, zero past the columns.
  float* out = d.panel + whole * rows * kNr;
  for (int64_t r = d.r0; r < d.r1; ++r) {
    const float* srow = d.scale + (r / d.block_size) * d.lds;
    for (int i = 0; i < kNr; ++i) {
      const int64_t c = whole * kNr + i;
      out[(r - d.r0) * kNr + i] =
          c < d.cols ? Unscaled(kFmt, d.q, d.ldq, r, d.n0 + c) * srow[d.n0 + c] : 0.0f;
    }
  }
}

}  // namespace

void DecodePanelPortable(const DecodePanel& d) {
  WithFormat(d.fmt, [&](auto tag) { DecodePanelOf<decltype(tag)::value>(d); });
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

void ExpandHalfPortable(const uint16_t* in, int64_t count, HalfType type, float* out) {
  for (int64_t i = 0; i < count; ++i) {
    out[i] = type == HalfType::kBF16 ? Bf16ToF32(in[i]) : F16ToF32(in[i]);
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
