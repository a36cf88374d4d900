// aarch64 int8-activation kernel (Precision::kInt8) on NEON's sdot (Armv8.2's FEAT_DotProd,
// "asimddp" in /proc/cpuinfo: Neoverse N1 and later, Cortex-A55/A76 and later, Apple M1 and
// later), compiled with -march=armv8.2-a+dotprod and only called after the run-time HWCAP
// check (isa.cc). The rest of the table is the portable one.
//
// sdot multiplies four signed weight bytes by four signed activation bytes and adds the four
// products to an int32 lane, so no format needs a sign trick or a zero point in its bytes:
// int8 codes and NF4's int8 book values go in as they are, int4's nibbles as 0..15 with the
// zero point 8 removed through the activation group's code sum (Q8Activations::sum), as
// the portable kernel does. The by-element form (sdot v.4s, w.16b, x.4b[lane]) takes a
// group's four activation bytes from a lane of a 16-byte register, so a group's 32
// activation codes are two loads and no broadcasts.
//
// Decoding: four stored rows of 16 columns are transposed bytewise (two rounds of zips) into
// four vectors whose int32 lanes hold one column's four bytes, in column order. For the
// nibble-packed formats a byte holds rows 2i and 2i + 1, so the low nibbles give rows
// {0, 2, 4, 6} of eight and the high ones {1, 3, 5, 7}; q8_quantize stores each eight
// activation codes in that order (Q8CodeAt), so both meet their activations as one lane.
//
// A segment (one scale block's rows of K, a range of columns) is taken group by group, each
// group's stored rows read across the segment's columns 64 at a time (one cache line per
// row: a group's 16 or 32 rows, a page apart at N = 4096, all fall in few L1 sets, so each
// line is used whole when it arrives); the decoded codes of those 64 columns stay on the
// stack for 4-row register tiles, and the float sums for every row and column in the
// segment's scratch.
#include <arm_neon.h>

#include <algorithm>

#include "kernels.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int kStrip = 16;               // columns per decoded strip (4 int32x4 lanes)
constexpr int kSpan = 64;                // columns decoded per pass: one cache line of a row
constexpr int kStrips = kSpan / kStrip;
constexpr int kQuadSteps = kQ8Group / 4; // 4-row steps per group
constexpr int kTileRows = 4;             // activation rows per register tile

// A group's decoded codes for one span: strip s, step q, column vector j (columns 4 j..4 j + 3
// of the strip, each lane one column's four rows of K).
struct alignas(16) SpanQuads {
  int8_t v[kStrips][kQuadSteps][4][16];
};

// Bytewise transpose of four stored rows of 16 columns: out[j] int32 lane i holds the four
// rows' bytes of column 4 j + i.
inline void Transpose4(uint8x16_t r0, uint8x16_t r1, uint8x16_t r2, uint8x16_t r3,
                       uint8x16_t out[4]) {
  const uint16x8_t a = vreinterpretq_u16_u8(vzip1q_u8(r0, r1));  // columns 0-7, rows 0-1
  const uint16x8_t b = vreinterpretq_u16_u8(vzip2q_u8(r0, r1));  // columns 8-15
  const uint16x8_t c = vreinterpretq_u16_u8(vzip1q_u8(r2, r3));
  const uint16x8_t d = vreinterpretq_u16_u8(vzip2q_u8(r2, r3));
  out[0] = vreinterpretq_u8_u16(vzip1q_u16(a, c));
  out[1] = vreinterpretq_u8_u16(vzip2q_u16(a, c));
  out[2] = vreinterpretq_u8_u16(vzip1q_u16(b, d));
  out[3] = vreinterpretq_u8_u16(vzip2q_u16(b, d));
}

// Decodes group g0's `width` (<= kSpan, a multiple of kStrip) columns from n into `out`, set
// of four stored rows by set, each row's span read whole.
template <Format kFmt>
void DecodeSpan(const Q8Segment& s, int64_t g0, int64_t n, int64_t width, SpanQuads* out) {
  const int64_t first = Q8StoredRow<kFmt>(g0);
  const uint8x16_t nibble = vdupq_n_u8(0x0F);
  const int8x16_t book = vld1q_s8(kNf4Int8);
  for (int set = 0; set < kQ8GroupRows<kFmt> / 4; ++set) {
    const uint8_t* row = s.q + (first + 4 * set) * s.ldq + n;
    for (int64_t st = 0; st < width / kStrip; ++st) {
      const uint8_t* p = row + st * kStrip;
      uint8x16_t t[4];
      Transpose4(vld1q_u8(p), vld1q_u8(p + s.ldq), vld1q_u8(p + 2 * s.ldq),
                 vld1q_u8(p + 3 * s.ldq), t);
      for (int j = 0; j < 4; ++j) {
        if constexpr (kFmt == Format::kInt8) {
          vst1q_u8(reinterpret_cast<uint8_t*>(out->v[st][set][j]), t[j]);
        } else {
          uint8x16_t lo = vandq_u8(t[j], nibble), hi = vshrq_n_u8(t[j], 4);
          if constexpr (kFmt == Format::kNf4) {
            lo = vreinterpretq_u8_s8(vqtbl1q_s8(book, lo));
            hi = vreinterpretq_u8_s8(vqtbl1q_s8(book, hi));
          }
          vst1q_u8(reinterpret_cast<uint8_t*>(out->v[st][2 * set][j]), lo);
          vst1q_u8(reinterpret_cast<uint8_t*>(out->v[st][2 * set + 1][j]), hi);
        }
      }
    }
  }
}

// total[r] (columns of one strip) += d * (dot - zero_point * xsum) for kR activation rows
// from mi, over group g with the strip's decoded quads w.
template <Format kFmt, int kR>
inline void DotTile(const Q8Segment& s, int64_t g, int64_t mi, const int8_t (*w)[4][16],
                    float* total, int64_t lda) {
  int32x4_t acc[kR][4];
  int8x16_t x[kR][2];
  for (int r = 0; r < kR; ++r) {
    const int8_t* xq = s.x.q + (g * s.x.rows + mi + r) * kQ8Group;
    x[r][0] = vld1q_s8(xq);
    x[r][1] = vld1q_s8(xq + 16);
    for (int j = 0; j < 4; ++j) acc[r][j] = vdupq_n_s32(0);
  }
  // The lane index of the by-element sdot must be a constant: the eight steps unrolled.
#define JAXCORE_DOT_STEP(q)                                                          \
  do {                                                                               \
    int8x16_t wq[4];                                                                 \
    for (int j = 0; j < 4; ++j) wq[j] = vld1q_s8(w[q][j]);                           \
    for (int r = 0; r < kR; ++r) {                                                   \
      for (int j = 0; j < 4; ++j) {                                                  \
        acc[r][j] = vdotq_laneq_s32(acc[r][j], wq[j], x[r][(q) / 4], (q) % 4);       \
      }                                                                              \
    }                                                                                \
  } while (0)
  JAXCORE_DOT_STEP(0);
  JAXCORE_DOT_STEP(1);
  JAXCORE_DOT_STEP(2);
  JAXCORE_DOT_STEP(3);
  JAXCORE_DOT_STEP(4);
  JAXCORE_DOT_STEP(5);
  JAXCORE_DOT_STEP(6);
  JAXCORE_DOT_STEP(7);
#undef JAXCORE_DOT_STEP
  constexpr int32_t kZeroPoint = kFmt == Format::kInt4 ? 8 : 0;
  for (int r = 0; r < kR; ++r) {
    const int64_t at = g * s.x.rows + mi + r;
    const float32x4_t d = vdupq_n_f32(s.x.d[at]);
    const int32x4_t shift = vdupq_n_s32(kZeroPoint * s.x.sum[at]);
    float* row = total + (mi + r) * lda;
    for (int j = 0; j < 4; ++j) {
      const float32x4_t v = vcvtq_f32_s32(vsubq_s32(acc[r][j], shift));
      vst1q_f32(row + 4 * j, vfmaq_f32(vld1q_f32(row + 4 * j), v, d));
    }
  }
}

template <Format kFmt>
void Q8SegmentOf(const Q8Segment& s) {
  const int64_t wide = s.cols / kStrip * kStrip;
  const int64_t lda = s.cols + 16;  // Q8Segment::acc: m rows of cols + 16 floats
  float* total = s.acc;
  for (int64_t mi = 0; mi < s.m; ++mi) std::fill(total + mi * lda, total + mi * lda + wide, 0.0f);
  SpanQuads quads;
  for (int64_t g0 = s.r0; g0 < s.r1; g0 += kQ8Group) {
    const int64_t g = g0 / kQ8Group;
    for (int64_t c0 = 0; c0 < wide; c0 += kSpan) {
      const int64_t width = std::min<int64_t>(kSpan, wide - c0);
      DecodeSpan<kFmt>(s, g0, s.n0 + c0, width, &quads);
      for (int64_t st = 0; st < width / kStrip; ++st) {
        float* strip = total + c0 + st * kStrip;
        int64_t mi = 0;
        for (; mi + kTileRows <= s.m; mi += kTileRows) {
          DotTile<kFmt, kTileRows>(s, g, mi, quads.v[st], strip, lda);
        }
        switch (s.m - mi) {
          case 3:
            DotTile<kFmt, 3>(s, g, mi, quads.v[st], strip, lda);
            break;
          case 2:
            DotTile<kFmt, 2>(s, g, mi, quads.v[st], strip, lda);
            break;
          case 1:
            DotTile<kFmt, 1>(s, g, mi, quads.v[st], strip, lda);
            break;
          default:
            break;
        }
      }
    }
  }
  // Q8SegmentColumns' float order: the scale times the unit, times the total.
  const float unit = kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f;
  for (int64_t mi = 0; mi < s.m; ++mi) {
    float* y = s.y + mi * s.ldy;
    const float* row = total + mi * lda;
    for (int64_t c = 0; c < wide; ++c) y[c] += s.scale[c] * unit * row[c];
  }
  if (wide < s.cols) Q8SegmentColumns(s, wide, s.cols);
}

void Q8SegmentDotProd(const Q8Segment& s) {
  WithFormat(s.fmt, [&](auto tag) { Q8SegmentOf<decltype(tag)::value>(s); });
}

KernelTable DotProdTable() {
  KernelTable t = PortableKernels();
  t.q8_segment = Q8SegmentDotProd;
  return t;
}

}  // namespace

const KernelTable& DotProdKernels() {
  static const KernelTable table = DotProdTable();
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
