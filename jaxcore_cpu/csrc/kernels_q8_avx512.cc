// AVX-512 VNNI int8-activation kernel (Precision::kInt8), compiled with -mavx512{f,bw,vl,dq}
// -mavx512vnni and only called after the run-time cpuid check.
//
// vpdpbusd multiplies four unsigned weight bytes by four signed activation bytes and adds
// the four products to an int32 lane in one instruction (AVX2 needs vpmaddubsw, vpmaddwd
// and vpaddd for the same work, and must split the signs off int8 weights). Every format is
// fed as unsigned bytes u with a zero point z, so W = s * (u - z) and
//   sum_k x[k] * W[k, n] = d * s[n] * (sum_k xq[k] * u[k, n] - z * sum_k xq[k]),
// where the last term is known per activation group (Q8Activations::sum) and starts the
// group's int32 sums:
//   int8: u = q + 128 (q ^ 0x80), z = 128;  int4: u = v, z = 8;
//   nf4:  u = kNf4Int8[v] + 128 (one in-lane byte shuffle), z = 128, and a further 1/127.
//
// Decoding: four stored rows of 64 columns (one cache line each) are transposed bytewise
// with two rounds of in-lane unpacks into four vectors whose int32 lanes hold a column's four
// bytes: vector j holds columns {16 L + 4 j + i} (L = 128-bit lane, i = int32 lane in it).
// For int8 those are four consecutive rows of K. For the nibble-packed formats a byte holds
// rows 2i and 2i + 1, so the low nibbles give rows {0, 2, 4, 6} of eight and the high ones
// rows {1, 3, 5, 7}: q8_quantize writes each group's activation codes in that order (per
// eight rows: 0 2 4 6 1 3 5 7), so both halves meet their activations as one broadcast
// int32. Sums stay in the decoder's column order; the scales are transposed to it per group
// and the result back to column order once per column block (a 4 x 4 transpose of 128-bit
// lanes).
//
// A task (qmm.cc plans them) is a range of K for a range of columns, taken in column blocks
// whose float sums stay in L1 (Q8TaskBlockCols). Small M reads 8 stored rows (a band) across
// a block at a time, decoding each chunk just before its products; a group's int32 sums wait
// in the scratch between its bands, so the float work and the scales come once per group.
// Larger M decodes one or two whole groups for the block first (set by set) and then runs
// 3-row register tiles over them; two groups that share one activation scale (the 4-bit
// formats' pairs, Q8ScaleSpan) are summed in int32 and meet the float work once.
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "kernels.h"
#include "lanes_avx512.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int kChunk = 64;  // columns per decoded chunk: one cache line of each stored row
// Stored rows one sweep over the columns reads at a time for small M: memory serves a few
// concurrent row streams faster than the 16 or 32 of a whole group, and small M leaves the
// kernel bound by memory, not by arithmetic.
constexpr int kNarrowRows = 8;
constexpr int64_t kNarrowMaxM = kQ8TaskNarrowMaxM;
static_assert(kNarrowMaxM <= 12, "the narrow kernel's int32 carry must fit the decode scratch");
// Bytes ahead along its rows that the small-M kernel prefetches into L2: at M = 1 on Zen 4,
// 2 KiB measured 5-10 % faster than 512 B (K = 4096, N = 4096 and 14336, 2 threads).
constexpr int64_t kPrefetchAhead = 2048;

// The first `cols` (<= 64) bytes of a row; the rest read as zero and are never touched.
inline __m512i LoadRow(const uint8_t* p, __mmask64 mask) { return _mm512_maskz_loadu_epi8(mask, p); }

inline __mmask16 LaneMask(int64_t valid) {
  return valid >= 16 ? static_cast<__mmask16>(0xFFFF)
         : valid <= 0 ? static_cast<__mmask16>(0)
                      : static_cast<__mmask16>((1u << valid) - 1u);
}

// Bytewise transpose of four stored rows: out[j] int32 lane (L, i) = the four rows' bytes of
// column 16 L + 4 j + i.
inline void Transpose4(__m512i r0, __m512i r1, __m512i r2, __m512i r3, __m512i out[4]) {
  const __m512i t0 = _mm512_unpacklo_epi8(r0, r1), t1 = _mm512_unpackhi_epi8(r0, r1);
  const __m512i t2 = _mm512_unpacklo_epi8(r2, r3), t3 = _mm512_unpackhi_epi8(r2, r3);
  out[0] = _mm512_unpacklo_epi16(t0, t2);
  out[1] = _mm512_unpackhi_epi16(t0, t2);
  out[2] = _mm512_unpacklo_epi16(t1, t3);
  out[3] = _mm512_unpackhi_epi16(t1, t3);
}

// Decodes one set of four stored rows of one 64-column chunk into unsigned codes: int8
// gives one quad per column subset (w[0][j]), the nibble-packed formats two (w[0][j]: low
// nibbles, w[1][j]: high).
template <Format kFmt>
inline void DecodeSet(const uint8_t* p, int64_t ldq, __mmask64 mask, __m512i (*w)[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  __m512i t[4];
  Transpose4(LoadRow(p, mask), LoadRow(p + ldq, mask), LoadRow(p + 2 * ldq, mask),
             LoadRow(p + 3 * ldq, mask), t);
  for (int j = 0; j < 4; ++j) {
    if (kFmt == Format::kInt8) {
      w[0][j] = _mm512_xor_si512(t[j], flip);
    } else {
      __m512i lo = _mm512_and_si512(t[j], nibble);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), nibble);
      if (kFmt == Format::kNf4) {
        // kNf4Int8[v] + 128 (the native test checks every ISA against the portable kernels,
        // which read kNf4Int8 itself).
        alignas(16) static const uint8_t kBook[16] = {
            1,   40,  61,  78,  92,  105, 116, 128,
            138, 148, 159, 171, 184, 199, 220, 255};
        const __m512i nf4 =
            _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(kBook)));
        lo = _mm512_shuffle_epi8(nf4, lo);
        hi = _mm512_shuffle_epi8(nf4, hi);
      }
      w[0][j] = lo;
      w[1][j] = hi;
    }
  }
}

inline __mmask64 ChunkMask(int64_t valid) {
  return valid >= kChunk ? ~__mmask64{0} : (__mmask64{1} << valid) - 1;
}

// The scales of a chunk's `valid` columns in the decoder's order (NF4's 1/127 folded in).
template <Format kFmt>
inline void ChunkScales(const float* scale, int64_t valid, __m512 sc[4]) {
  const __m512 unit = _mm512_set1_ps(kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f);
  for (int j = 0; j < 4; ++j) {
    sc[j] = _mm512_mul_ps(_mm512_maskz_loadu_ps(LaneMask(valid - 16 * j), scale + 16 * j), unit);
  }
  TransposeLanes(sc);
}

// The block's sums (decoder order, rows lda floats apart) back to column order, into y;
// times `scale` (the block's scales of its columns, times `unit`) where that is not null.
inline void StoreColumns(const Q8Task& t, int64_t lda, const float* scale = nullptr,
                         float unit = 1.0f) {
  for (int64_t mi = 0; mi < t.m; ++mi) {
    for (int64_t c = 0; c < t.cols; c += kChunk) {
      const float* acc = t.acc + mi * lda + c;
      __m512 v[4] = {_mm512_load_ps(acc), _mm512_load_ps(acc + 16), _mm512_load_ps(acc + 32),
                     _mm512_load_ps(acc + 48)};
      TransposeLanes(v);
      float* y = t.y + mi * t.ldy + c;
      for (int j = 0; j < 4; ++j) {
        const __mmask16 mask = LaneMask(t.cols - c - 16 * j);
        if (scale) {
          const __m512 sj = _mm512_mul_ps(_mm512_maskz_loadu_ps(mask, scale + c + 16 * j),
                                          _mm512_set1_ps(unit));
          v[j] = _mm512_mul_ps(v[j], sj);
        }
        _mm512_mask_storeu_ps(y + 16 * j, mask, v[j]);
      }
    }
  }
}

// Four signed activation bytes broadcast to every int32 lane.
inline __m512i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm512_set1_epi32(v);
}

// The int32 dot of kR activation rows with kQuads decoded quads, for one band of a group:
// it starts at -zero * xsum in the group's first band and at the sums `carry` holds (the
// earlier bands') in the others. All but the last band leave their sums in `carry`; the last
// adds scale'[j] * d[r] * dot to acc[r][j], so the float work and the scales come once per
// group, not once per band.
template <Format kFmt, int kR, int kQuads>
inline void DotRows(const Q8Task& t, int64_t g, int64_t mi, int xoff, bool first, bool last,
                    const __m512i (*w)[4], const __m512 sc[4], int32_t* carry, float* acc,
                    int64_t lda) {
  constexpr int32_t kZero = kFmt == Format::kInt4 ? 8 : 128;
  __m512i dot[kR][4];
  for (int r = 0; r < kR; ++r) {
    const int64_t at = g * t.x.rows + mi + r;
    const __m512i start = _mm512_set1_epi32(-kZero * t.x.sum[at]);
    for (int j = 0; j < 4; ++j) {
      dot[r][j] = first ? start : _mm512_load_si512(carry + (mi + r) * lda + 16 * j);
    }
  }
  const int8_t* xq[kR];
  for (int r = 0; r < kR; ++r) xq[r] = t.x.q + (g * t.x.rows + mi + r) * kQ8Group + xoff;
#pragma GCC unroll 8
  for (int qd = 0; qd < kQuads; ++qd) {
    __m512i xb[kR];
    for (int r = 0; r < kR; ++r) xb[r] = Broadcast4(xq[r] + 4 * qd);
    for (int j = 0; j < 4; ++j) {
      const __m512i wv = _mm512_load_si512(&w[qd][j]);
      for (int r = 0; r < kR; ++r) dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], wv, xb[r]);
    }
  }
  if (!last) {
    for (int r = 0; r < kR; ++r) {
      for (int j = 0; j < 4; ++j) _mm512_store_si512(carry + (mi + r) * lda + 16 * j, dot[r][j]);
    }
    return;
  }
  for (int r = 0; r < kR; ++r) {
    const __m512 d = _mm512_set1_ps(t.x.d[g * t.x.rows + mi + r]);
    float* row = acc + (mi + r) * lda;
    for (int j = 0; j < 4; ++j) {
      const __m512 a = _mm512_load_ps(row + 16 * j);
      _mm512_store_ps(row + 16 * j,
                      _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][j]), _mm512_mul_ps(sc[j], d), a));
    }
  }
}

// Rows of a small-M block: kRows stored rows (a divisor of the group's stored rows) are read
// across the columns at a time, each chunk decoded just before its products.
template <Format kFmt, int kRows>
void Q8TaskNarrow(const Q8Task& t) {
  constexpr int kStoredRows = kQ8GroupRows<kFmt>;
  static_assert(kStoredRows % kRows == 0 && kRows % 4 == 0, "bands of whole 4-row sets");
  constexpr int kBands = kStoredRows / kRows;
  constexpr int kPerSet = kFmt == Format::kInt8 ? 1 : 2;  // quads per set of four rows
  constexpr int kQuads = kRows / 4 * kPerSet;
  const int64_t chunks = (t.cols + kChunk - 1) / kChunk;
  const int64_t span = chunks * kChunk;
  const int64_t lda = span + 16;  // padded: rows 4 KiB apart would share L1 sets
  for (int64_t mi = 0; mi < t.m; ++mi) std::fill(t.acc + mi * lda, t.acc + mi * lda + span, 0.0f);
  // A group's int32 sums between its bands, rows lda apart, after the float sums in the
  // scratch (where the wide kernel keeps its decoded groups: Q8TaskAccFloats leaves span * 16
  // floats there, more than kNarrowMaxM rows need).
  int32_t* carried = reinterpret_cast<int32_t*>(t.acc + t.m * lda);
  alignas(64) __m512i w[kQuads][4];
  const uint8_t* end = t.q + Q8StoredRow<kFmt>(t.r1) * t.ldq;
  const bool l1 = PrefetchRowsIntoL1();
  for (int64_t g0 = t.r0; g0 < t.r1; g0 += kQ8Group) {
    const int64_t g = g0 / kQ8Group;
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + Q8StoredRow<kFmt>(g0) * t.ldq + t.n0;
    for (int band = 0; band < kBands; ++band) {
      const uint8_t* rows = group + band * kRows * t.ldq;
      const int64_t part = (g0 % t.block_size) / kQ8Group * kBands + band;
      const int64_t parts = t.block_size / kQ8Group * kBands;
      for (int64_t ci = 0; ci < chunks; ++ci) {
        const int64_t c = ci * kChunk;
        const int64_t valid = std::min<int64_t>(kChunk, t.cols - c);
        // kPrefetchAhead bytes further along the order the block reads its rows in (columns,
        // then the next band), into L1 on Intel (1-3 % faster than into L2 at M = 1 and 2,
        // Xeon; 8-28 % slower on Zen 4 through JAX).
        const int64_t ahead = c + kPrefetchAhead;
        const uint8_t* next = rows + (ahead / span) * kRows * t.ldq + ahead % span;
        if (next < end) {
          for (int r = 0; r < kRows; ++r) PrefetchRow(next + r * t.ldq, l1);
        }
        for (int set = 0; set < kRows / 4; ++set) {
          DecodeSet<kFmt>(rows + 4 * set * t.ldq + c, t.ldq, ChunkMask(valid), &w[kPerSet * set]);
        }
        const bool first = band == 0, last = band == kBands - 1;
        // This band's share of the next scale block's lines for the chunk.
        PrefetchNextBlockScales(t, g0, srow, c, kChunk / 16, part, parts);
        __m512 sc[4];
        if (last) ChunkScales<kFmt>(srow + c, valid, sc);
        float* acc = t.acc + c;
        int32_t* carry = carried + c;
        const int xoff = 4 * kQuads * band;
        int64_t mi = 0;
        for (; mi + 4 <= t.m; mi += 4) {
          DotRows<kFmt, 4, kQuads>(t, g, mi, xoff, first, last, w, sc, carry, acc, lda);
        }
        for (; mi < t.m; ++mi) {
          DotRows<kFmt, 1, kQuads>(t, g, mi, xoff, first, last, w, sc, carry, acc, lda);
        }
      }
    }
  }
  StoreColumns(t, lda);
}

// acc[r] += scale' * sum over kG consecutive groups (from g) of d[r][group] * (the group's
// int32 dot of row r with its decoded quads w[gi]): the groups' float sums stay in registers
// and meet the accumulators once, which halves the float work per group when kG = 2. With
// kScaleLater the scales are left out (sc unused) for StoreColumns to apply once.
template <Format kFmt, int kR, int kG, bool kScaleLater>
inline void DotRowsGroups(const Q8Task& t, int64_t g, int64_t mi,
                          const __m512i (*const w[kG])[4], const __m512 sc[4], float* acc,
                          int64_t lda) {
  constexpr int32_t kZero = kFmt == Format::kInt4 ? 8 : 128;
  constexpr int kQuads = 8;
  __m512 f[kR][4];
  for (int gi = 0; gi < kG; ++gi) {
    const int64_t at = (g + gi) * t.x.rows + mi;
    __m512i dot[kR][4];
    const int8_t* xq[kR];
    for (int r = 0; r < kR; ++r) {
      const __m512i start = _mm512_set1_epi32(-kZero * t.x.sum[at + r]);
      for (int j = 0; j < 4; ++j) dot[r][j] = start;
      xq[r] = t.x.q + (at + r) * kQ8Group;
    }
#pragma GCC unroll 8
    for (int qd = 0; qd < kQuads; ++qd) {
      __m512i xb[kR];
      for (int r = 0; r < kR; ++r) xb[r] = Broadcast4(xq[r] + 4 * qd);
      for (int j = 0; j < 4; ++j) {
        const __m512i wv = _mm512_load_si512(&w[gi][qd][j]);
        for (int r = 0; r < kR; ++r) dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], wv, xb[r]);
      }
    }
    for (int r = 0; r < kR; ++r) {
      const __m512 d = _mm512_set1_ps(t.x.d[at + r]);
      float* row = acc + (mi + r) * lda;
      for (int j = 0; j < 4; ++j) {
        const __m512 v = _mm512_cvtepi32_ps(dot[r][j]);
        if (kScaleLater && kG == 1) {  // one multiply-add per vector and group
          _mm512_store_ps(row + 16 * j, _mm512_fmadd_ps(v, d, _mm512_load_ps(row + 16 * j)));
        } else {
          f[r][j] = gi == 0 ? _mm512_mul_ps(v, d) : _mm512_fmadd_ps(v, d, f[r][j]);
        }
      }
    }
  }
  if (kScaleLater && kG == 1) return;
  for (int r = 0; r < kR; ++r) {
    float* row = acc + (mi + r) * lda;
    for (int j = 0; j < 4; ++j) {
      const __m512 a = _mm512_load_ps(row + 16 * j);
      _mm512_store_ps(row + 16 * j, kScaleLater ? _mm512_add_ps(f[r][j], a)
                                                : _mm512_fmadd_ps(f[r][j], sc[j], a));
    }
  }
}

// acc[r] += scale' * d[r] * (the int32 dot of row r with two consecutive groups' decoded
// quads, from g) for groups that share one activation scale (Q8Activations::span): the 64
// rows' products are summed in int32 and the float work comes once, where DotRowsGroups
// converts, scales and adds each group's sum. The tile is bound by the multiply pipes, which
// vpdpbusd shares with the float multiplies. kScaleLater as for DotRowsGroups.
template <Format kFmt, int kR, bool kScaleLater>
inline void DotRowsPair(const Q8Task& t, int64_t g, int64_t mi, const __m512i (*const w[2])[4],
                        const __m512 sc[4], float* acc, int64_t lda) {
  constexpr int32_t kZero = kFmt == Format::kInt4 ? 8 : 128;
  constexpr int kQuads = 8;
  const int64_t at = g * t.x.rows + mi, next = (g + 1) * t.x.rows + mi;
  __m512i dot[kR][4];
  const int8_t* xq[kR];
  const int8_t* xq_next[kR];
  for (int r = 0; r < kR; ++r) {
    const __m512i start = _mm512_set1_epi32(-kZero * (t.x.sum[at + r] + t.x.sum[next + r]));
    for (int j = 0; j < 4; ++j) dot[r][j] = start;
    xq[r] = t.x.q + (at + r) * kQ8Group;
    xq_next[r] = t.x.q + (next + r) * kQ8Group;
  }
#pragma GCC unroll 16
  for (int qd = 0; qd < 2 * kQuads; ++qd) {
    __m512i xb[kR];
    for (int r = 0; r < kR; ++r) {
      xb[r] = Broadcast4((qd < kQuads ? xq[r] : xq_next[r]) + 4 * (qd % kQuads));
    }
    for (int j = 0; j < 4; ++j) {
      const __m512i wv = _mm512_load_si512(&w[qd / kQuads][qd % kQuads][j]);
      for (int r = 0; r < kR; ++r) dot[r][j] = _mm512_dpbusd_epi32(dot[r][j], wv, xb[r]);
    }
  }
  for (int r = 0; r < kR; ++r) {
    const __m512 d = _mm512_set1_ps(t.x.d[at + r]);
    float* row = acc + (mi + r) * lda;
    for (int j = 0; j < 4; ++j) {
      const __m512 scale = kScaleLater ? d : _mm512_mul_ps(sc[j], d);
      _mm512_store_ps(row + 16 * j, _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[r][j]), scale,
                                                    _mm512_load_ps(row + 16 * j)));
    }
  }
}

template <Format kFmt, bool kScaleLater>
inline void DotAllRowsPair(const Q8Task& t, int64_t g, const __m512i (*const w[2])[4],
                           const __m512 sc[4], float* acc, int64_t lda) {
  int64_t mi = 0;
  for (; mi + 3 <= t.m; mi += 3) DotRowsPair<kFmt, 3, kScaleLater>(t, g, mi, w, sc, acc, lda);
  for (; mi < t.m; ++mi) DotRowsPair<kFmt, 1, kScaleLater>(t, g, mi, w, sc, acc, lda);
}

template <Format kFmt, int kG, bool kScaleLater>
inline void DotAllRows(const Q8Task& t, int64_t g, const __m512i (*const w[kG])[4],
                       const __m512 sc[4], float* acc, int64_t lda) {
  int64_t mi = 0;
  for (; mi + 3 <= t.m; mi += 3) DotRowsGroups<kFmt, 3, kG, kScaleLater>(t, g, mi, w, sc, acc, lda);
  for (; mi < t.m; ++mi) DotRowsGroups<kFmt, 1, kG, kScaleLater>(t, g, mi, w, sc, acc, lda);
}

// A larger-M block: one or two whole groups (two where they share a scale block) are decoded
// for all the block's columns into the scratch, set of four rows by set, then their products
// are taken chunk by chunk. Reading one set of four rows across the columns keeps only four
// lines of an L1 set in flight, where a chunk-by-chunk decode of a whole group would pull 16
// or 32 lines of one set (rows a page apart) through L1 at once. Where the task's rows lie in
// one scale block (kScaleLater: per-channel int8), the scales wait for StoreColumns.
template <Format kFmt, bool kScaleLater>
void Q8TaskWide(const Q8Task& t) {
  constexpr int kStoredRows = kQ8GroupRows<kFmt>;
  constexpr int kPerSet = kFmt == Format::kInt8 ? 1 : 2;
  const int64_t chunks = (t.cols + kChunk - 1) / kChunk;
  const int64_t span = chunks * kChunk;
  const int64_t lda = span + 16;
  for (int64_t mi = 0; mi < t.m; ++mi) std::fill(t.acc + mi * lda, t.acc + mi * lda + span, 0.0f);
  // decoded[gi][ci][quad][subset], after the sums in the scratch.
  __m512i(*decoded)[8][4] = reinterpret_cast<__m512i(*)[8][4]>(t.acc + t.m * lda);
  const uint8_t* end = t.q + Q8StoredRow<kFmt>(t.r1) * t.ldq;
  for (int64_t g0 = t.r0; g0 < t.r1;) {
    // Pairs for the nibble-packed formats only: an int8 pair decodes 64 stored rows (each a
    // page apart at N = 4096) before its products, and measured 10-15 % slower than single
    // groups at M = 16 (Zen 4), where a 4-bit pair (32 rows) is a little faster.
    const int kg = kFmt != Format::kInt8 && g0 + 2 * kQ8Group <= t.r1 &&
                           g0 / t.block_size == (g0 + kQ8Group) / t.block_size ? 2 : 1;
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + Q8StoredRow<kFmt>(g0) * t.ldq + t.n0;
    for (int gi = 0; gi < kg; ++gi) {
      for (int set = 0; set < kStoredRows / 4; ++set) {
        const uint8_t* p = group + (gi * kStoredRows + 4 * set) * t.ldq;
        for (int64_t ci = 0; ci < chunks; ++ci) {
          const int64_t c = ci * kChunk;
          DecodeSet<kFmt>(p + c, t.ldq, ChunkMask(std::min<int64_t>(kChunk, t.cols - c)),
                          &decoded[gi * chunks + ci][kPerSet * set]);
        }
      }
    }
    // The stored rows read next, prefetched into L2 over this step's chunks a few whole rows
    // at a time: each row's lines arrive together, from one DRAM page, where one line of
    // every row per chunk measured 12-17 % slower for int8 at M = 16 (Zen 4, 2 threads).
    const uint8_t* next = group + kg * kStoredRows * t.ldq;
    const int64_t rows_per_chunk = (kg * kStoredRows + chunks - 1) / chunks;
    for (int64_t ci = 0; ci < chunks; ++ci) {
      const int64_t c = ci * kChunk;
      for (int64_t r = ci * rows_per_chunk;
           r < std::min<int64_t>(kg * kStoredRows, (ci + 1) * rows_per_chunk); ++r) {
        const uint8_t* row = next + r * t.ldq;
        if (row >= end) break;
        for (int64_t at = 0; at < t.cols; at += kChunk) {
          _mm_prefetch(reinterpret_cast<const char*>(row + at), _MM_HINT_T1);
        }
      }
      // The next step's scales, where it starts a new block (a step is one block at most).
      if (!kScaleLater && (g0 + kg * kQ8Group) % t.block_size == 0) {
        PrefetchNextBlockScales(t, g0, srow, c, kChunk / 16);
      }
      __m512 sc[4];
      if (!kScaleLater) ChunkScales<kFmt>(srow + c, std::min<int64_t>(kChunk, t.cols - c), sc);
      float* acc = t.acc + c;
      const int64_t g = g0 / kQ8Group;
      if (kg == 2) {
        const __m512i(*const w[2])[4] = {decoded[ci], decoded[chunks + ci]};
        if (t.x.span == 2 && g % 2 == 0) {
          DotAllRowsPair<kFmt, kScaleLater>(t, g, w, sc, acc, lda);
        } else {
          DotAllRows<kFmt, 2, kScaleLater>(t, g, w, sc, acc, lda);
        }
      } else {
        const __m512i(*const w[1])[4] = {decoded[ci]};
        DotAllRows<kFmt, 1, kScaleLater>(t, g, w, sc, acc, lda);
      }
    }
    g0 += kg * kQ8Group;
  }
  if (kScaleLater) {
    StoreColumns(t, lda, t.scale, kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f);
  } else {
    StoreColumns(t, lda);
  }
}

template <Format kFmt>
void Q8TaskBlockOf(const Q8Task& t) {
  if (t.m <= kNarrowMaxM) return Q8TaskNarrow<kFmt, kNarrowRows>(t);
  return InOneScaleBlock(t) ? Q8TaskWide<kFmt, true>(t) : Q8TaskWide<kFmt, false>(t);
}

void Q8TaskBlock(const Q8Task& t) {
  WithFormat(t.fmt, [&](auto tag) { Q8TaskBlockOf<decltype(tag)::value>(t); });
}

void Q8TaskAvx512(const Q8Task& t) { ForEachQ8TaskBlock(t, Q8TaskBlock); }

// Q8QuantizePortable's arithmetic, 32 values at a time: the same amax, the same 127 / amax
// and round-to-nearest-even, so the codes are identical, and the same NaN scale for a unit
// holding NaN or infinity. For the nibble-packed formats each eight codes are stored in the
// order 0 2 4 6 1 3 5 7 (see the file comment).
void Q8QuantizeAvx512(Format fmt, int span, const float* x, int64_t k, int64_t rows, int8_t* q,
                      float* d, int32_t* sum) {
  constexpr int kMaxSpan = 2;  // Q8ScaleSpan's largest
  if (span < 1 || span > kMaxSpan) return Q8QuantizePortable(fmt, span, x, k, rows, q, d, sum);
  const __m256i order = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                         0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  const bool permute = fmt != Format::kInt8;
  const __m512 most = _mm512_set1_ps(std::numeric_limits<float>::max());
  for (int64_t g0 = 0; g0 + span <= k / kQ8Group; g0 += span) {
    __m512 v[kMaxSpan][2];
    __m512 amax16 = _mm512_setzero_ps();
    __mmask16 bad = 0;
    for (int gi = 0; gi < span; ++gi) {
      for (int h = 0; h < 2; ++h) {
        v[gi][h] = _mm512_loadu_ps(x + (g0 + gi) * kQ8Group + 16 * h);
        const __m512 a = _mm512_abs_ps(v[gi][h]);
        bad |= _mm512_cmp_ps_mask(a, most, _CMP_NLE_UQ);  // NaN or infinity
        amax16 = _mm512_max_ps(amax16, a);
      }
    }
    if (bad) {
      for (int64_t g = g0; g < g0 + span; ++g) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g * rows * kQ8Group),
                            _mm256_setzero_si256());
        d[g * rows] = std::numeric_limits<float>::quiet_NaN();
        sum[g * rows] = 0;
      }
      continue;
    }
    const float amax = _mm512_reduce_max_ps(amax16);
    const float dg = amax / 127.0f;
    const float inv = dg > 0.0f ? 127.0f / amax : 0.0f;
    const __m512 s = _mm512_set1_ps(inv);
    for (int gi = 0; gi < span; ++gi) {
      const int64_t g = g0 + gi;
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v[gi][0], s));
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v[gi][1], s));
      __m256i codes = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm512_cvtepi32_epi8(i0)),
                                              _mm512_cvtepi32_epi8(i1), 1);
      if (permute) codes = _mm256_shuffle_epi8(codes, order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g * rows * kQ8Group), codes);
      d[g * rows] = dg;
      sum[g * rows] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
    }
  }
}

}  // namespace

const KernelTable& Avx512Kernels() {
  static const KernelTable table = [] {
    KernelTable t = Avx2Kernels();
    t.gemv_segment = GemvSegmentAvx512;
    t.gemv_max_m = kGemvAvx512MaxM;
    // On Intel, passes of 16 rows of the GEMV beat the GEMM's decoded panels past M = 16
    // (harness, K = N = 4096, 2 threads, weights from memory, GEMV against GEMM, int8 / int4
    // / NF4: M = 24 4.0 / 3.1 / 3.1 ms against 6.5 / 4.6 / 5.5; M = 64 9.4 / 7.9 / 7.7 against
    // 10.8 / 8.9 / 10.6); through JAX they are level at M = 64 and behind from M = 96 for
    // every format (benchmarks/quantized_matmul.py --isa avx512: Xeon VM). On Zen 4 the
    // passes are level with the GEMM through M = 24 and behind from M = 28 (GEMM / passes
    // through JAX, benchmarks/cpu_kernels_ab.py, int8 / int4 / NF4: M = 28 0.89-0.95, M = 48
    // 0.74-0.90, M = 64 0.69-0.86).
    for (int64_t& m : t.gemv_auto_max_m) m = IntelCpu() ? 64 : 24;
    t.microkernel = MicroKernelAvx512;
    t.microkernel_pair = MicroKernelPairAvx512;
    t.expand_dq = ExpandDqAvx512;
    t.q8_quantize = Q8QuantizeAvx512;
    t.q8_task = Q8TaskAvx512;
    t.nt_rows = NtRowsAvx512;
    t.nt_decode_panel = NtDecodePanelAvx512;
    // Rows through M = 16 (0.59x-0.77x of dense against the GEMM's 0.80x-0.87x); at M = 32
    // they are level for 4-bit and 1.00x against 0.85x for int8 in 32-row blocks (Zen 4,
    // K = N = 4096, 2 threads).
    t.nt_rows_max_m = 24;
    t.q8_max_m = int64_t{1} << 40;  // every M: integer products outrun float32 FMAs
    return t;
  }();
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
