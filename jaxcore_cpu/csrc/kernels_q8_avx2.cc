// AVX2 int8-activation kernel (Precision::kInt8), compiled with -mavx2 -mfma.
//
// Per group of 32 rows of K and 32 columns, the weight codes are re-laid in registers as
// eight "quads": 32-byte vectors holding 4 consecutive rows of 8 columns, so vpmaddubsw
// (unsigned x signed bytes, adjacent pairs summed) followed by vpmaddwd against ones sums 4
// products per column into int32 lanes. int4 codes are unsigned nibbles, so they multiply
// the signed activations directly (and 8 pairs still fit int16 before widening); int8 and
// NF4 codes are signed, so their magnitudes multiply activations carrying their signs.
// The unpacking leaves columns in the order {0-3,16-19}, {4-7,20-23}, {8-11,24-27},
// {12-15,28-31}; sums stay in that order until the task ends.
//
// A task (qmm.cc plans them) is a range of K for a range of columns, taken in column blocks
// whose float sums stay in cache (Q8TaskBlockCols) across the task's scale blocks: each
// group's weight scales enter its float work, or, where the task lies in one scale block
// (per-channel int8), the end. Small M sweeps 8 stored rows across the block at a time (bound
// by memory): one or two activation rows keep each chunk's decoded quads in registers
// (Q8TaskRows), more rows store them for their tiles to share. Larger M decodes whole groups
// and runs 2-row tiles over them (bound by arithmetic). The activations are quantized here
// too (Q8QuantizeAvx2, the portable kernels' codes).
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels.h"
#include "lanes_avx2.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int kQuads = kQ8Group / 4;
constexpr int64_t kPrefetchAhead = 512;
// Stored rows one sweep over the columns reads at a time when M is small. Memory serves 8
// concurrent row streams about twice as fast as the 32 of a whole int8 group (measured on
// Zen 3: ~28 vs ~14 GB/s); at larger M the kernel is bound by arithmetic instead, and the
// per-sweep float conversion makes narrow sweeps cost more than they save.
constexpr int kNarrowRows = 8;
constexpr int64_t kNarrowMaxM = 4;

inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Interleaves two vectors of row pairs (16-bit units) into quads.
inline void PairsToQuads(__m256i lo_a, __m256i hi_a, __m256i lo_b, __m256i hi_b, __m256i* quad) {
  quad[0] = _mm256_unpacklo_epi16(lo_a, lo_b);
  quad[1] = _mm256_unpackhi_epi16(lo_a, lo_b);
  quad[2] = _mm256_unpacklo_epi16(hi_a, hi_b);
  quad[3] = _mm256_unpackhi_epi16(hi_a, hi_b);
}

// Quads of one group and 32 columns, in memory (registers cannot hold all 32 and GCC spills
// arrays of vectors badly): quad j of row-quad qd at [qd][j]. For int8 and NF4 `mag`
// holds |code| and `sgn` the codes (their signs); for int4 `mag` holds the codes.
struct alignas(32) GroupQuads {
  uint8_t mag[kQuads][4][32];
  uint8_t sgn[kQuads][4][32];
};

inline void Store32(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m256i LoadA32(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

// The four quads of 32 columns from their stored rows' bytes: four rows of int8 codes or two
// rows of nibble pairs (r[0], r[1]), NF4 through its code book.
template <Format kFmt>
inline void Quads(const __m256i* r, __m256i quad[4]) {
  if (kFmt == Format::kInt8) {
    PairsToQuads(_mm256_unpacklo_epi8(r[0], r[1]), _mm256_unpackhi_epi8(r[0], r[1]),
                 _mm256_unpacklo_epi8(r[2], r[3]), _mm256_unpackhi_epi8(r[2], r[3]), quad);
    return;
  }
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  __m256i lo0 = _mm256_and_si256(r[0], nibble);
  __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(r[0], 4), nibble);
  __m256i lo1 = _mm256_and_si256(r[1], nibble);
  __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(r[1], 4), nibble);
  if (kFmt == Format::kNf4) {
    const __m256i nf4 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kNf4Int8)));
    lo0 = _mm256_shuffle_epi8(nf4, lo0);
    hi0 = _mm256_shuffle_epi8(nf4, hi0);
    lo1 = _mm256_shuffle_epi8(nf4, lo1);
    hi1 = _mm256_shuffle_epi8(nf4, hi1);
  }
  PairsToQuads(_mm256_unpacklo_epi8(lo0, hi0), _mm256_unpackhi_epi8(lo0, hi0),
               _mm256_unpacklo_epi8(lo1, hi1), _mm256_unpackhi_epi8(lo1, hi1), quad);
}

// Stored rows per quad: four of int8, two of nibble pairs.
template <Format kFmt>
constexpr int kRowsPerQuad = kFmt == Format::kInt8 ? 4 : 2;

// Stored rows per group of kQ8Group rows of K.
template <Format kFmt>
constexpr int kGroupRows = kQuads * kRowsPerQuad<kFmt>;

// The stored row holding row k of K (nibble-packed formats keep two rows of K per byte).
template <Format kFmt>
constexpr int64_t StoredRow(int64_t k) {
  return kFmt == Format::kInt8 ? k : k >> 1;
}

// The factor every scale carries: NF4's codes are its values times 127.
template <Format kFmt>
inline __m256 ScaleUnit() {
  return _mm256_set1_ps(kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f);
}

// Decodes row-quads [q0, q1) of kHalves 32-column halves (columns [n, n + 32 * kHalves)) of
// one group. Each stored row's halves are read back to back: rows a page apart share one L1
// set, so a line must be used whole before the group's other rows evict it.
template <Format kFmt, int kHalves>
inline void DecodeGroup(const Q8Task& t, int64_t g0, int q0, int q1, int64_t n,
                        GroupQuads* out) {
  constexpr int kPer = kRowsPerQuad<kFmt>;
  for (int qd = q0; qd < q1; ++qd) {
    const uint8_t* row = t.q + (StoredRow<kFmt>(g0) + kPer * qd) * t.ldq + n;
    __m256i r[kHalves][kPer];
    for (int i = 0; i < kPer; ++i) {
      for (int h = 0; h < kHalves; ++h) r[h][i] = Load32(row + i * t.ldq + 32 * h);
    }
    for (int h = 0; h < kHalves; ++h) {
      __m256i quad[4];
      Quads<kFmt>(r[h], quad);
      for (int j = 0; j < 4; ++j) {
        if (kFmt == Format::kInt4) {
          Store32(out[h].mag[qd][j], quad[j]);
        } else {
          Store32(out[h].mag[qd][j], _mm256_abs_epi8(quad[j]));
          Store32(out[h].sgn[qd][j], quad[j]);
        }
      }
    }
  }
}

// Integer dot products of kRows activation rows' group with the decoded quads (int32
// lanes, decoder order), zero point not yet removed. Each quad is loaded once for all the
// rows; the accumulators are named so they stay in registers (kRows <= 2 leaves room).
template <Format kFmt, int kRows>
inline void DotGroup(const int8_t* const xq[kRows], const GroupQuads& w, int q0, int q1,
                     __m256i dot[kRows][4]) {
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i a[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) a[r][j] = _mm256_setzero_si256();
  }
  // One row-quad's products for the column vectors [j0, j1).
  const auto quad = [&](int qd, int j0, int j1) {
    __m256i xb[kRows];
    for (int r = 0; r < kRows; ++r) {
      int32_t four;
      std::memcpy(&four, xq[r] + 4 * qd, sizeof(four));
      xb[r] = _mm256_set1_epi32(four);
    }
    for (int j = j0; j < j1; ++j) {
      const __m256i mag = LoadA32(w.mag[qd][j]);
      if (kFmt == Format::kInt4) {
        // |v * x| <= 15 * 127 per product: the 8 quads' pairs stay below 2^15 in int16.
        for (int r = 0; r < kRows; ++r) {
          a[r][j] = _mm256_add_epi16(a[r][j], _mm256_maddubs_epi16(mag, xb[r]));
        }
      } else {
        const __m256i sgn = LoadA32(w.sgn[qd][j]);
        for (int r = 0; r < kRows; ++r) {
          a[r][j] = _mm256_add_epi32(
              a[r][j],
              _mm256_madd_epi16(_mm256_maddubs_epi16(mag, _mm256_sign_epi8(xb[r], sgn)), ones));
        }
      }
    }
  };
  if constexpr (kFmt == Format::kInt4) {
    // Unrolled twice (M = 16 and 64 on Zen 4, AVX2: 7-9 % faster).
#pragma GCC unroll 2
    for (int qd = q0; qd < q1; ++qd) quad(qd, 0, 4);
  } else {
    // The sign-and-widen steps of int8 and NF4 keep more registers live: two passes over the
    // quads, two column vectors each, leave GCC no accumulator to spill (int8 at M = 16, two
    // threads: -3 %), where all four at once, or unrolled, spill.
#pragma GCC unroll 1
    for (int qd = q0; qd < q1; ++qd) quad(qd, 0, 2);
#pragma GCC unroll 1
    for (int qd = q0; qd < q1; ++qd) quad(qd, 2, 4);
  }
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) {
      dot[r][j] = kFmt == Format::kInt4 ? _mm256_madd_epi16(a[r][j], ones) : a[r][j];
    }
  }
}

// acc[mi] += f * (dot - zero_point * xsum) for kRows rows starting at mi, one half, over
// row-quads [q0, q1) of group g; the part starting at quad 0 removes the zero point. f is the
// row's activation scale d, times the half's weight scales sc (decoder order) unless
// kScaleLater leaves those for the end of the task.
template <Format kFmt, int kRows, bool kScaleLater>
inline void AccumulateRows(const Q8Task& t, int64_t g, int64_t mi, const GroupQuads& w, int q0,
                           int q1, const __m256 sc[4], float* acc, int64_t lda) {
  const int8_t* xq[kRows];
  for (int r = 0; r < kRows; ++r) xq[r] = t.x.q + (g * t.x.rows + mi + r) * kQ8Group;
  __m256i dot[kRows][4];
  DotGroup<kFmt, kRows>(xq, w, q0, q1, dot);
  for (int r = 0; r < kRows; ++r) {
    const int64_t at = g * t.x.rows + mi + r;
    const __m256 d = _mm256_set1_ps(t.x.d[at]);
    float* row = acc + (mi + r) * lda;
    const __m256i shift =
        _mm256_set1_epi32(kFmt == Format::kInt4 && q0 == 0 ? 8 * t.x.sum[at] : 0);
    for (int j = 0; j < 4; ++j) {
      const __m256i v = kFmt == Format::kInt4 ? _mm256_sub_epi32(dot[r][j], shift) : dot[r][j];
      const __m256 f = kScaleLater ? d : _mm256_mul_ps(d, sc[j]);
      _mm256_storeu_ps(row + 8 * j,
                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), f, _mm256_loadu_ps(row + 8 * j)));
    }
  }
}

// The scales of 32 columns (from `scale`), times `unit`, in decoder order.
inline void HalfScales(const float* scale, __m256 unit, __m256 sc[4]) {
  __m256 f[4];
  for (int j = 0; j < 4; ++j) f[j] = _mm256_mul_ps(_mm256_loadu_ps(scale + 8 * j), unit);
  FromColumnOrder(f, sc);
}

// The end of a column block: its sums (rows lda floats apart, decoder order) back to column
// order into y (times the scales where they waited: kScaleLater); the columns past the last
// whole 32 element by element, a scale block at a time (Q8SegmentColumns adds into y).
template <Format kFmt, bool kScaleLater>
void FinishBlock(const Q8Task& t, int64_t lda) {
  const int64_t wide = t.cols / 32 * 32;
  const __m256 unit = ScaleUnit<kFmt>();
  for (int64_t mi = 0; mi < t.m; ++mi) {
    for (int64_t c = 0; c < wide; c += 32) {
      const float* acc = t.acc + mi * lda + c;
      const __m256 f[4] = {_mm256_loadu_ps(acc), _mm256_loadu_ps(acc + 8),
                           _mm256_loadu_ps(acc + 16), _mm256_loadu_ps(acc + 24)};
      __m256 v[4];
      ToColumnOrder(f, v);
      float* y = t.y + mi * t.ldy + c;
      for (int j = 0; j < 4; ++j) {
        if (kScaleLater) {
          v[j] = _mm256_mul_ps(v[j], _mm256_mul_ps(_mm256_loadu_ps(t.scale + c + 8 * j), unit));
        }
        _mm256_storeu_ps(y + 8 * j, v[j]);
      }
    }
  }
  if (wide == t.cols) return;
  for (int64_t mi = 0; mi < t.m; ++mi) {
    std::fill(t.y + mi * t.ldy + wide, t.y + mi * t.ldy + t.cols, 0.0f);
  }
  Q8Segment s;
  s.fmt = kFmt;
  s.m = t.m;
  s.x = t.x;
  s.q = t.q;
  s.ldq = t.ldq;
  s.n0 = t.n0;
  s.cols = t.cols;
  s.acc = nullptr;
  s.y = t.y;
  s.ldy = t.ldy;
  for (int64_t r0 = t.r0; r0 < t.r1;) {
    const int64_t block = r0 / t.block_size;
    s.r0 = r0;
    s.r1 = std::min(t.r1, (block + 1) * t.block_size);
    s.scale = t.scale + (block - t.r0 / t.block_size) * t.lds;
    Q8SegmentColumns(s, wide, t.cols);
    r0 = s.r1;
  }
}

// One column block of a task (the whole of its K range). kRows: stored rows per sweep (a
// divisor of the group's stored rows, a multiple of 4 for int8 and of 2 for the nibble-packed
// formats). The sums stay in `acc` across the task's scale blocks, each group's weight scales
// folded into its float work (kScaleLater: one scale block, applied once at the end): a
// kernel per scale block re-read and re-wrote the result at every block boundary, ~20 % of
// int4 (64-row blocks) at M = 16 on Zen 4. Columns past the last whole 32 go element by
// element.
template <Format kFmt, int kRows, bool kScaleLater>
void Q8TaskBlockT(const Q8Task& t) {
  const int64_t wide = t.cols / 32 * 32;
  const int64_t lda = wide + 16;  // padded: rows 4 KiB apart would share L1 sets
  for (int64_t mi = 0; mi < t.m; ++mi) std::fill(t.acc + mi * lda, t.acc + mi * lda + wide, 0.0f);
  // A group is swept over the columns in parts of kRows stored rows each.
  constexpr int kStoredRows = kGroupRows<kFmt>;
  static_assert(kStoredRows % kRows == 0, "a part is a whole number of row-quads");
  constexpr int kParts = kStoredRows / kRows;
  constexpr int kPartQuads = kQuads / kParts;
  const __m256 unit = ScaleUnit<kFmt>();
  const uint8_t* end = t.q + StoredRow<kFmt>(t.r1) * t.ldq;
  GroupQuads quads[2];
  __m256 sc[2][4] = {};
  for (int64_t g0 = t.r0; g0 < t.r1; g0 += kQ8Group) {
    const int64_t g = g0 / kQ8Group;
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + StoredRow<kFmt>(g0) * t.ldq + t.n0;
    for (int part = 0; part < kParts; ++part) {
      const int q0 = part * kPartQuads, q1 = q0 + kPartQuads;
      const uint8_t* rows = group + part * kRows * t.ldq;
      for (int64_t c = 0; c < wide;) {
        // Into L2: the rows would evict each other from their shared L1 set. Sweeps of a
        // few rows (small M, bound by memory) look kPrefetchAhead along their rows; whole
        // groups (larger M, bound by arithmetic) fetch the next group's rows of these
        // columns, one group's products ahead, as a task at larger M is too narrow for the
        // former (int8 at M = 16, Zen 4: -8 %).
        const uint8_t* ahead =
            kParts > 1 ? rows + c + kPrefetchAhead : group + kStoredRows * t.ldq + c;
        for (int64_t r = 0; r < kRows; ++r) {
          const uint8_t* line = ahead + r * t.ldq;
          if (line + 63 >= end) break;
          _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
          if (kParts == 1) _mm_prefetch(reinterpret_cast<const char*>(line + 63), _MM_HINT_T1);
        }
        int halves = 1;
        if (c + 64 <= wide) {
          DecodeGroup<kFmt, 2>(t, g0, q0, q1, t.n0 + c, quads);
          halves = 2;
        } else {
          DecodeGroup<kFmt, 1>(t, g0, q0, q1, t.n0 + c, quads);
        }
        for (int h = 0; h < halves; ++h) {
          if (!kScaleLater) HalfScales(srow + c + 32 * h, unit, sc[h]);
          float* acc = t.acc + c + 32 * h;
          int64_t mi = 0;
          for (; mi + 2 <= t.m; mi += 2) {
            AccumulateRows<kFmt, 2, kScaleLater>(t, g, mi, quads[h], q0, q1, sc[h], acc, lda);
          }
          if (mi < t.m) {
            AccumulateRows<kFmt, 1, kScaleLater>(t, g, mi, quads[h], q0, q1, sc[h], acc, lda);
          }
        }
        c += 32 * halves;
      }
    }
  }
  FinishBlock<kFmt, kScaleLater>(t, lda);
}

// A column block of a task of kR <= 2 rows (small M, bound by memory and decoding): each
// chunk's quads stay in registers from decode to products, where the kernel for more rows
// stores them for its row tiles to share. Bands of kNarrowRows stored rows are swept across
// the block (few concurrent row streams), the group's int32 sums waiting in the scratch
// (after the float sums) between bands, so the float work comes once per group. Zen 4 pinned
// to AVX2, one thread, weights in cache, against storing the quads: M = 1 int8 104 -> 66 us,
// int4 67 -> 51, NF4 86 -> 69 per 512 columns of K = 4096; M = 2 int8 230 -> 96, int4
// 87 -> 74, NF4 130 -> 102.
template <Format kFmt, int kR, bool kScaleLater>
void Q8TaskRows(const Q8Task& t) {
  static_assert(kR == 1 || kR == 2, "the accumulators of two rows fill the registers");
  const int64_t wide = t.cols / 32 * 32;
  const int64_t lda = wide + 16;
  for (int r = 0; r < kR; ++r) std::fill(t.acc + r * lda, t.acc + r * lda + wide, 0.0f);
  int32_t* carried = reinterpret_cast<int32_t*>(t.acc + kR * lda);
  constexpr int kStoredRows = kGroupRows<kFmt>;
  constexpr int kBands = kStoredRows / kNarrowRows;
  constexpr int kBandQuads = kQuads / kBands;
  constexpr int kPer = kRowsPerQuad<kFmt>;
  const __m256 unit = ScaleUnit<kFmt>();
  const __m256i ones = _mm256_set1_epi16(1);
  const uint8_t* end = t.q + StoredRow<kFmt>(t.r1) * t.ldq;
  for (int64_t g0 = t.r0; g0 < t.r1; g0 += kQ8Group) {
    const int64_t g = g0 / kQ8Group;
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + StoredRow<kFmt>(g0) * t.ldq + t.n0;
    const int8_t* xq[kR];
    __m256 d[kR];
    __m256i zero_point[kR];
    for (int r = 0; r < kR; ++r) {
      const int64_t at = g * t.x.rows + r;
      xq[r] = t.x.q + at * kQ8Group;
      d[r] = _mm256_set1_ps(t.x.d[at]);
      zero_point[r] = _mm256_set1_epi32(kFmt == Format::kInt4 ? 8 * t.x.sum[at] : 0);
    }
    for (int band = 0; band < kBands; ++band) {
      const uint8_t* rows = group + band * kNarrowRows * t.ldq;
      const bool first = band == 0, last = band == kBands - 1;
      for (int64_t c = 0; c < wide; c += 32) {
        if (c % 64 == 0) {  // into L2, kPrefetchAhead along the band's rows
          for (int r = 0; r < kNarrowRows; ++r) {
            const uint8_t* line = rows + r * t.ldq + c + kPrefetchAhead;
            if (line >= end) break;
            _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
          }
        }
        __m256i a[kR][4];
        for (int r = 0; r < kR; ++r) {
          for (int j = 0; j < 4; ++j) a[r][j] = _mm256_setzero_si256();
        }
        for (int bq = 0; bq < kBandQuads; ++bq) {
          const uint8_t* row = rows + kPer * bq * t.ldq + c;
          __m256i stored[kPer];
          for (int i = 0; i < kPer; ++i) stored[i] = Load32(row + i * t.ldq);
          __m256i quad[4];
          Quads<kFmt>(stored, quad);
          __m256i xb[kR];
          for (int r = 0; r < kR; ++r) {
            int32_t four;
            std::memcpy(&four, xq[r] + 4 * (band * kBandQuads + bq), sizeof(four));
            xb[r] = _mm256_set1_epi32(four);
          }
          for (int j = 0; j < 4; ++j) {
            const __m256i mag = kFmt == Format::kInt4 ? quad[j] : _mm256_abs_epi8(quad[j]);
            for (int r = 0; r < kR; ++r) {
              if (kFmt == Format::kInt4) {  // int16 pair sums: a band's 4 quads stay below 2^15
                a[r][j] = _mm256_add_epi16(a[r][j], _mm256_maddubs_epi16(mag, xb[r]));
              } else {
                const __m256i p = _mm256_maddubs_epi16(mag, _mm256_sign_epi8(xb[r], quad[j]));
                a[r][j] = _mm256_add_epi32(a[r][j], _mm256_madd_epi16(p, ones));
              }
            }
          }
        }
        __m256 sc[4];
        if (last && !kScaleLater) HalfScales(srow + c, unit, sc);
        for (int r = 0; r < kR; ++r) {
          for (int j = 0; j < 4; ++j) {
            __m256i v = kFmt == Format::kInt4 ? _mm256_madd_epi16(a[r][j], ones) : a[r][j];
            __m256i* carry = reinterpret_cast<__m256i*>(carried + r * lda + c + 8 * j);
            v = first ? _mm256_sub_epi32(v, zero_point[r])
                      : _mm256_add_epi32(v, _mm256_loadu_si256(carry));
            if (!last) {
              _mm256_storeu_si256(carry, v);
              continue;
            }
            float* acc = t.acc + r * lda + c + 8 * j;
            const __m256 f = kScaleLater ? d[r] : _mm256_mul_ps(d[r], sc[j]);
            _mm256_storeu_ps(acc, _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), f, _mm256_loadu_ps(acc)));
          }
        }
      }
    }
  }
  FinishBlock<kFmt, kScaleLater>(t, lda);
}

// A column block of a small-M task in passes of two rows (and one), each through Q8TaskRows.
template <Format kFmt, bool kScaleLater>
void Q8TaskRowPairs(const Q8Task& t) {
  for (int64_t r0 = 0; r0 < t.m; r0 += 2) {
    Q8Task pass = t;
    pass.m = std::min<int64_t>(2, t.m - r0);
    pass.x = {t.x.q + r0 * kQ8Group, t.x.d + r0, t.x.sum + r0, t.x.rows};
    pass.y = t.y + r0 * t.ldy;
    if (pass.m == 2) {
      Q8TaskRows<kFmt, 2, kScaleLater>(pass);
    } else {
      Q8TaskRows<kFmt, 1, kScaleLater>(pass);
    }
  }
}

template <Format kFmt>
void Q8TaskBlockOf(const Q8Task& t) {
  const bool narrow = t.m <= kNarrowMaxM;
  const bool one_block = t.r1 > t.r0 && t.r0 / t.block_size == (t.r1 - 1) / t.block_size;
  // Register row pairs up to M = 2, and for int8 (whose stored-quads kernel pays its float
  // work once per 8-row band) up to kNarrowMaxM: M = 3 / 4 int8 203 -> 165 / 235 -> 194 us
  // on one thread with the weights in cache (two threads from memory: -3 % / level), where
  // int4 and NF4 lose 7-12 % to decoding every pass.
  if (t.m <= 2 || (narrow && kFmt == Format::kInt8)) {
    return one_block ? Q8TaskRowPairs<kFmt, true>(t) : Q8TaskRowPairs<kFmt, false>(t);
  }
  if (narrow) {
    return one_block ? Q8TaskBlockT<kFmt, kNarrowRows, true>(t)
                     : Q8TaskBlockT<kFmt, kNarrowRows, false>(t);
  }
  return one_block ? Q8TaskBlockT<kFmt, kGroupRows<kFmt>, true>(t)
                   : Q8TaskBlockT<kFmt, kGroupRows<kFmt>, false>(t);
}

}  // namespace

// Q8QuantizePortable's arithmetic, eight values at a time: the same amax, the same 127 / amax
// and round-to-nearest-even (vcvtps2dq under the default rounding mode, as nearbyint), so
// the codes are identical, and the same NaN scale for a group holding NaN or infinity. The
// scalar loop cost ~0.25 ms per 16 x 4096 activations on Zen 4, serial before the kernels.
void Q8QuantizeAvx2(Format, const float* x, int64_t k, int64_t rows, int8_t* q, float* d,
                    int32_t* sum) {
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  const __m256 most = _mm256_set1_ps(std::numeric_limits<float>::max());
  // packs_epi32 then packs_epi16 leave the 4-code units as a0 b0 c0 d0 | a1 b1 c1 d1 (a..d:
  // the four input vectors, 0/1: their halves); this puts them back in order.
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t g = 0; g < k / kQ8Group; ++g) {
    const float* xg = x + g * kQ8Group;
    __m256 v[4], a[4];
    __m256 bad = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xg + 8 * i);
      a[i] = _mm256_and_ps(v[i], magnitude);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a[i], most, _CMP_NLE_UQ));  // NaN or infinity
    }
    int8_t* out = q + g * rows * kQ8Group;
    if (_mm256_movemask_ps(bad) != 0) {
      std::memset(out, 0, kQ8Group);
      d[g * rows] = std::numeric_limits<float>::quiet_NaN();
      sum[g * rows] = 0;
      continue;
    }
    const __m256 m8 = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float dg = amax / 127.0f;
    const __m256 s = _mm256_set1_ps(dg > 0.0f ? 127.0f / amax : 0.0f);
    __m256i c[4];
    for (int i = 0; i < 4; ++i) c[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], s));
    // |codes| <= 127: neither pack saturates.
    const __m256i bytes = _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]),
                                             _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out),
                        _mm256_permutevar8x32_epi32(bytes, order));
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    d[g * rows] = dg;
    sum[g * rows] = _mm_cvtsi128_si32(s4);
  }
}

void Q8TaskAvx2(const Q8Task& t) {
  ForEachQ8TaskBlock(t, [](const Q8Task& b) {
    switch (b.fmt) {
      case Format::kInt8:
        Q8TaskBlockOf<Format::kInt8>(b);
        break;
      case Format::kInt4:
        Q8TaskBlockOf<Format::kInt4>(b);
        break;
      case Format::kNf4:
        Q8TaskBlockOf<Format::kNf4>(b);
        break;
    }
  });
}

}  // namespace internal
}  // namespace jaxcore_cpu
