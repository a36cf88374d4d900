// The 256-bit int8-activation kernel (Precision::kInt8) shared by the AVX2 and AVX-VNNI
// tables: one source, two ways to take products, chosen by the Products policy its
// including source supplies (and compiled with that source's ISA flags):
//
//   struct Products {
//     // false (AVX2): vpmaddubsw + vpmaddwd; int8 and NF4 codes are signed, so their
//     //   magnitudes multiply activations carrying their signs.
//     // true (AVX-VNNI): vpdpbusd sums four unsigned-by-signed byte products into each int32
//     //   lane; every format goes in as unsigned bytes u with a zero point z (int8 and NF4:
//     //   u = code + 128, z = 128; int4: the nibble, z = 8), removed through the activation
//     //   group's code sum, as the AVX-512 kernel does.
//     static constexpr bool kVnni = ...;
//     static __m256i Dot(__m256i acc, __m256i u, __m256i x);  // used only where kVnni
//   };
//
// Per group of 32 rows of K and 32 columns, the weight codes are re-laid in registers as
// eight "quads": 32-byte vectors holding 4 rows of 8 columns (int8: consecutive rows; the
// nibble-packed formats: rows 0 2 4 6 or 1 3 5 7 of eight, DecodeStep), so one product step
// sums 4 products per column into int32 lanes. int4 codes are unsigned nibbles, so without
// VNNI they multiply the signed activations directly (and 8 pairs still fit int16 before
// widening). The decoder's byte transpose leaves columns in the order {0-3,16-19},
// {4-7,20-23}, {8-11,24-27}, {12-15,28-31}; sums stay in that order until the task ends.
//
// A task (qmm.cc plans them) is a range of K for a range of columns, taken in column blocks
// whose float sums stay in cache (Q8TaskBlockCols) across the task's scale blocks: each
// group's weight scales enter its float work, or, where the task lies in one scale block
// (per-channel int8), the end. One or two activation rows (bound by memory) sweep 8 or 16
// stored rows across the block at a time (kNarrowRows), each chunk's decoded quads kept in
// registers from decode to products (Q8TaskRows); more rows decode whole groups into memory
// and run 2-row tiles over them (Q8TaskBlockT). There AVX2's int8 and NF4 leave the quads
// for int16 pairs (GroupPairs): the weights and activations widened once, vpmaddwd takes 16
// products per instruction where the signed quads need three instructions per 32. From
// kGroupPairMinM rows a step takes both groups of a pair that shares one activation scale
// (Q8ScaleSpan) and sums them as integers, so the float work comes once per pair. The
// activations come from Q8QuantizeAvx2 (the portable kernels' codes and order).
//
// Everything here has internal linkage: each including source compiles its own copy with its
// own ISA flags, so the linker never merges a VNNI-compiled function into the AVX2 table.
#ifndef JAXCORE_CPU_CSRC_KERNELS_Q8_YMM_H_
#define JAXCORE_CPU_CSRC_KERNELS_Q8_YMM_H_

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels.h"
#include "lanes_avx2.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int kQuads = kQ8Group / 4;
constexpr int64_t kPrefetchAhead = 512;
// Stored rows the one- and two-row kernel sweeps over the columns at a time: 8 for AVX2's
// int8, whose products are slow enough that memory must serve it well (8 concurrent row
// streams ran about twice as fast as the 32 of a whole int8 group on Zen 3: ~28 vs ~14 GB/s);
// a whole group of 16 for the nibble-packed formats and for VNNI's int8, which then keep
// their sums in registers for the group instead of carrying them from band to band (Zen 4,
// 2 threads, K = N = 4096, M = 1-2: AVX2 NF4 -8 to -10 %, int4 level; AVX-VNNI int4 -8 to
// -14 %, NF4 -4 %, int8 -9 to -11 %; AVX2 int8 +11 % at M = 1, so it keeps 8).
template <class P, Format kFmt>
constexpr int kNarrowRows = kFmt == Format::kInt8 && !P::kVnni ? 8 : 16;

inline __m256i Load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Bytewise transpose of four stored rows of 32 columns: out[j] int32 lane i of 128-bit lane
// L holds the four rows' bytes of column 16 L + 4 j + i (the decoder order of the file
// comment).
inline void Transpose4(const __m256i r[4], __m256i out[4]) {
  const __m256i t0 = _mm256_unpacklo_epi8(r[0], r[1]), t1 = _mm256_unpackhi_epi8(r[0], r[1]);
  const __m256i t2 = _mm256_unpacklo_epi8(r[2], r[3]), t3 = _mm256_unpackhi_epi8(r[2], r[3]);
  out[0] = _mm256_unpacklo_epi16(t0, t2);
  out[1] = _mm256_unpackhi_epi16(t0, t2);
  out[2] = _mm256_unpacklo_epi16(t1, t3);
  out[3] = _mm256_unpackhi_epi16(t1, t3);
}

// Quads of one group and 32 columns, in memory (registers cannot hold all 32 and GCC spills
// arrays of vectors badly): quad j of row-quad qd at [qd][j], as they multiply the
// activations (Unsigned()). Only for products without signs to split off: VNNI's, and
// AVX2's int4 (AVX2's int8 and NF4 take int16 pairs here, GroupPairs).
struct alignas(32) GroupQuads {
  uint8_t mag[kQuads][4][32];
};

// Four signed activation bytes broadcast to every int32 lane.
inline __m256i Broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

inline void Store32(uint8_t* p, __m256i v) { _mm256_store_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m256i LoadA32(const uint8_t* p) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p)); }

// Quad steps (four rows of K each) one decode step of four stored rows gives: int8 one, the
// nibble-packed formats two.
template <Format kFmt>
constexpr int kStepQuads = kFmt == Format::kInt8 ? 1 : 2;

// The low and high nibbles of v's bytes; NF4's through its code book (with VNNI, the book
// plus 128, so they come out unsigned).
template <class P, Format kFmt>
inline void SplitNibbles(__m256i v, __m256i& lo, __m256i& hi) {
  static_assert(kFmt != Format::kInt8, "int8 codes are whole bytes");
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  lo = _mm256_and_si256(v, nibble);
  hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nibble);
  if constexpr (kFmt == Format::kNf4) {
    __m256i nf4 = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kNf4Int8)));
    if (P::kVnni) nf4 = _mm256_xor_si256(nf4, _mm256_set1_epi8(static_cast<char>(0x80)));
    lo = _mm256_shuffle_epi8(nf4, lo);
    hi = _mm256_shuffle_epi8(nf4, hi);
  }
}

// Decodes four stored rows of 32 columns (r) into kStepQuads quad steps. int8: rows 0-3 of K.
// Nibble-packed: a byte holds rows 2 s and 2 s + 1 of stored row s, so the low nibbles give
// rows {0, 2, 4, 6} of the eight and the high ones {1, 3, 5, 7}; q8_quantize stores each eight
// activation codes of these formats in the order 0 2 4 6 1 3 5 7, so both steps meet their
// activations as one broadcast int32, and no unpack separates the nibbles. NF4 goes through
// its code book (with VNNI, the book plus 128: its quads come out unsigned).
template <class P, Format kFmt>
inline void DecodeStep(const __m256i r[4], __m256i quad[kStepQuads<kFmt>][4]) {
  __m256i t[4];
  Transpose4(r, t);
  for (int j = 0; j < 4; ++j) {
    if constexpr (kFmt == Format::kInt8) {
      quad[0][j] = t[j];
    } else {
      SplitNibbles<P, kFmt>(t[j], quad[0][j], quad[1][j]);
    }
  }
}


// What multiplies the activations of a decoded quad: int4's nibbles as they are; for int8
// and NF4 the code plus 128 (VNNI; DecodeStep() already added it to NF4's) or its magnitude
// (AVX2, the sign going to the activations).
template <class P, Format kFmt>
inline __m256i Unsigned(__m256i quad) {
  if (kFmt == Format::kInt4 || (P::kVnni && kFmt == Format::kNf4)) return quad;
  if (P::kVnni) return _mm256_xor_si256(quad, _mm256_set1_epi8(static_cast<char>(0x80)));
  return _mm256_abs_epi8(quad);
}

// The zero point Unsigned() adds to every code, removed once per group through the
// activation group's code sum.
template <class P, Format kFmt>
constexpr int32_t kZeroPoint = kFmt == Format::kInt4 ? 8 : P::kVnni ? 128 : 0;

// Whether products accumulate as int16 pair sums (widened once per group or band): AVX2's
// int4, whose 8 quads' pairs stay below 2^15 (|v * x| <= 15 * 127 per product).
template <class P, Format kFmt>
constexpr bool kInt16Sums = !P::kVnni && kFmt == Format::kInt4;

// a += the products of the unsigned quad u (and, for AVX2's int8 and NF4, the signs of the
// codes `sgn`) with the four activation bytes broadcast in x.
template <class P, Format kFmt>
inline __m256i Product(__m256i a, __m256i u, __m256i sgn, __m256i x) {
  if constexpr (P::kVnni) {
    return P::Dot(a, u, x);
  } else if constexpr (kInt16Sums<P, kFmt>) {
    return _mm256_add_epi16(a, _mm256_maddubs_epi16(u, x));
  } else {
    const __m256i pairs = _mm256_maddubs_epi16(u, _mm256_sign_epi8(x, sgn));
    return _mm256_add_epi32(a, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
  }
}

// Product()'s sums as int32 lanes.
template <class P, Format kFmt>
inline __m256i Widen(__m256i a) {
  return kInt16Sums<P, kFmt> ? _mm256_madd_epi16(a, _mm256_set1_epi16(1)) : a;
}

// The factor every scale carries: NF4's codes are its values times 127.
template <Format kFmt>
inline __m256 ScaleUnit() {
  return _mm256_set1_ps(kFmt == Format::kNf4 ? 1.0f / 127.0f : 1.0f);
}

// Decodes one group for kHalves 32-column halves (columns [n, n + 32 * kHalves)). Each stored
// row's halves are read back to back: rows a page apart share one L1 set, so a line must be
// used whole before the group's other rows evict it.
template <class P, Format kFmt, int kHalves>
inline void DecodeGroup(const Q8Task& t, int64_t g0, int64_t n, GroupQuads* out) {
  static_assert(P::kVnni || kFmt == Format::kInt4, "GroupQuads carry no signs");
  for (int set = 0; set < kQ8GroupRows<kFmt> / 4; ++set) {
    const uint8_t* row = t.q + (Q8StoredRow<kFmt>(g0) + 4 * set) * t.ldq + n;
    __m256i r[kHalves][4];
    for (int i = 0; i < 4; ++i) {
      for (int h = 0; h < kHalves; ++h) r[h][i] = Load32(row + i * t.ldq + 32 * h);
    }
    for (int h = 0; h < kHalves; ++h) {
      __m256i quad[kStepQuads<kFmt>][4];
      DecodeStep<P, kFmt>(r[h], quad);
      for (int step = 0; step < kStepQuads<kFmt>; ++step) {
        const int qd = set * kStepQuads<kFmt> + step;
        for (int j = 0; j < 4; ++j) Store32(out[h].mag[qd][j], Unsigned<P, kFmt>(quad[step][j]));
      }
    }
  }
}

// Integer dot products of kRows activation rows' group with the decoded quads (int32
// lanes, decoder order), zero point not yet removed; with kCarry (VNNI only, whose products
// land in int32 lanes) carried on from the sums in `dot` (the pair's first group's,
// Q8ScaleSpan). Each quad is loaded once for all the rows; the accumulators are named so
// they stay in registers (kRows <= 2 leaves room).
template <class P, Format kFmt, int kRows, bool kCarry = false>
inline void DotGroup(const int8_t* const xq[kRows], const GroupQuads& w, __m256i dot[kRows][4]) {
  static_assert(P::kVnni || kFmt == Format::kInt4, "GroupQuads carry no signs");
  static_assert(P::kVnni || !kCarry, "AVX2's int16 sums start from zero");
  __m256i a[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) a[r][j] = kCarry ? dot[r][j] : _mm256_setzero_si256();
  }
  // One row-quad's products.
  const auto quad = [&](int qd) {
    __m256i xb[kRows];
    for (int r = 0; r < kRows; ++r) xb[r] = Broadcast4(xq[r] + 4 * qd);
    for (int j = 0; j < 4; ++j) {
      const __m256i mag = LoadA32(w.mag[qd][j]);
      for (int r = 0; r < kRows; ++r) a[r][j] = Product<P, kFmt>(a[r][j], mag, mag, xb[r]);
    }
  };
  // Unrolled twice (AVX2 int4 at M = 16 and 64 on Zen 4: 7-9 % faster).
#pragma GCC unroll 2
  for (int qd = 0; qd < kQuads; ++qd) quad(qd);
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) dot[r][j] = Widen<P, kFmt>(a[r][j]);
  }
}

// acc[mi] += f * (dot - zero_point * xsum) for kRows rows starting at mi, one half, over
// kGroups groups from g (two: a pair sharing one activation scale, Q8ScaleSpan). f is the
// row's activation scale d, times the half's weight scales sc (decoder order) unless
// kScaleLater leaves those for the end of the task.
template <class P, Format kFmt, int kRows, bool kScaleLater, int kGroups = 1>
inline void AddDots(const Q8Task& t, int64_t g, int64_t mi, const __m256i dot[kRows][4],
                    const __m256 sc[4], float* acc, int64_t lda) {
  for (int r = 0; r < kRows; ++r) {
    const int64_t at = g * t.x.rows + mi + r;
    const __m256 d = _mm256_set1_ps(t.x.d[at]);
    float* row = acc + (mi + r) * lda;
    int32_t xsum = 0;
    for (int gi = 0; gi < kGroups; ++gi) xsum += t.x.sum[at + gi * t.x.rows];
    const __m256i shift = _mm256_set1_epi32(kZeroPoint<P, kFmt> * xsum);
    for (int j = 0; j < 4; ++j) {
      const __m256i v = kZeroPoint<P, kFmt> ? _mm256_sub_epi32(dot[r][j], shift) : dot[r][j];
      const __m256 f = kScaleLater ? d : _mm256_mul_ps(d, sc[j]);
      _mm256_storeu_ps(row + 8 * j,
                       _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), f, _mm256_loadu_ps(row + 8 * j)));
    }
  }
}

// AddDots() of the products of kRows rows from mi with one half's decoded quads of kGroups
// groups from g (two: a pair sharing one activation scale, Q8ScaleSpan), their products
// summed as integers, so the float work comes once.
template <class P, Format kFmt, int kRows, bool kScaleLater, int kGroups = 1>
inline void AccumulateRows(const Q8Task& t, int64_t g, int64_t mi,
                           const GroupQuads* const w[kGroups], const __m256 sc[4], float* acc,
                           int64_t lda) {
  static_assert(kGroups == 1 || kGroups == 2, "one group or a pair");
  const int8_t* xq[kGroups][kRows];
  for (int gi = 0; gi < kGroups; ++gi) {
    for (int r = 0; r < kRows; ++r) xq[gi][r] = t.x.q + ((g + gi) * t.x.rows + mi + r) * kQ8Group;
  }
  __m256i dot[kRows][4];
  DotGroup<P, kFmt, kRows>(xq[0], *w[0], dot);
  if constexpr (kGroups == 2 && P::kVnni) {
    DotGroup<P, kFmt, kRows, true>(xq[1], *w[1], dot);
  } else if constexpr (kGroups == 2) {
    // AVX2's int16 sums are widened per group; the first group's int32 sums wait in memory
    // (the asm makes GCC store and reload them): held in registers across the second
    // group's products, they spilled inside its loop (1.01-1.17x the time, Zen 4, M = 16).
    alignas(32) int32_t held[kRows][4][8];
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < 4; ++j) {
        _mm256_store_si256(reinterpret_cast<__m256i*>(held[r][j]), dot[r][j]);
      }
    }
    asm volatile("" : : "r"(held) : "memory");
    DotGroup<P, kFmt, kRows>(xq[1], *w[1], dot);
    for (int r = 0; r < kRows; ++r) {
      for (int j = 0; j < 4; ++j) {
        dot[r][j] = _mm256_add_epi32(
            dot[r][j], _mm256_load_si256(reinterpret_cast<const __m256i*>(held[r][j])));
      }
    }
  }
  AddDots<P, kFmt, kRows, kScaleLater, kGroups>(t, g, mi, dot, sc, acc, lda);
}

// AVX2's int8 and NF4 from M = 3 take their products as int16 pairs (vpmaddwd: 16 products
// per instruction) instead of signed quads (vpsignb, vpmaddubsw, vpmaddwd: 32 products per
// three instructions on the same two pipes): a group's weights are decoded to int16 once per
// column block and shared by every row, the activations widened once per group.
template <class P, Format kFmt>
constexpr bool kPairs = !P::kVnni && kFmt != Format::kInt4;

// One group's weights for 32 columns as int16 pairs: pair p holds the group's activation
// positions 2 p and 2 p + 1 (int8: rows 2 p and 2 p + 1 of K; the nibble-packed formats:
// q8_quantize's order, DecodeGroupPairs), column vector j at w[p][j], whose int32 lane i of
// 128-bit lane L holds the pair of column 16 L + 4 j + i (decoder order).
struct alignas(32) GroupPairs {
  int16_t w[kQ8Group / 2][4][16];
};

// Two rows' int8 values of 32 columns (a: the pair's first, b: its second) as pair vectors
// in decoder order: bytes interleaved, then moved to the high byte of each int16 and shifted
// back with their sign.
inline void PairUp(__m256i a, __m256i b, __m256i out[4]) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i lo = _mm256_unpacklo_epi8(a, b), hi = _mm256_unpackhi_epi8(a, b);
  out[0] = _mm256_srai_epi16(_mm256_unpacklo_epi8(zero, lo), 8);
  out[1] = _mm256_srai_epi16(_mm256_unpackhi_epi8(zero, lo), 8);
  out[2] = _mm256_srai_epi16(_mm256_unpacklo_epi8(zero, hi), 8);
  out[3] = _mm256_srai_epi16(_mm256_unpackhi_epi8(zero, hi), 8);
}

inline void StorePairs(const __m256i v[4], int16_t out[4][16]) {
  for (int j = 0; j < 4; ++j) _mm256_store_si256(reinterpret_cast<__m256i*>(out[j]), v[j]);
}

// Decodes one group for kHalves 32-column halves (columns [n, n + 32 * kHalves)) into pairs.
// int8: stored rows 2 p and 2 p + 1. Nibble-packed (NF4): each four stored rows s0-s3 hold
// eight rows of K, whose activations q8_quantize stores as 0 2 4 6 1 3 5 7, so the four
// pairs are the low nibbles of (s0, s1), (s2, s3), then the high ones; each through the book.
template <class P, Format kFmt, int kHalves>
inline void DecodeGroupPairs(const Q8Task& t, int64_t g0, int64_t n, GroupPairs* out) {
  static_assert(!P::kVnni, "pairs are AVX2's");
  const uint8_t* group = t.q + Q8StoredRow<kFmt>(g0) * t.ldq + n;
  for (int set = 0; set < kQ8GroupRows<kFmt> / 4; ++set) {
    const uint8_t* row = group + 4 * set * t.ldq;
    for (int h = 0; h < kHalves; ++h) {
      __m256i r[4];
      for (int i = 0; i < 4; ++i) r[i] = Load32(row + i * t.ldq + 32 * h);
      __m256i v[4];
      if constexpr (kFmt == Format::kInt8) {
        for (int i = 0; i < 2; ++i) {
          PairUp(r[2 * i], r[2 * i + 1], v);
          StorePairs(v, out[h].w[2 * set + i]);
        }
      } else {
        __m256i code[2][4];  // [low / high nibble][stored row]
        for (int i = 0; i < 4; ++i) SplitNibbles<P, kFmt>(r[i], code[0][i], code[1][i]);
        for (int half = 0; half < 2; ++half) {
          for (int i = 0; i < 2; ++i) {
            PairUp(code[half][2 * i], code[half][2 * i + 1], v);
            StorePairs(v, out[h].w[4 * set + 2 * half + i]);
          }
        }
      }
    }
  }
}

// The m rows of group g's activation codes as int16 (row mi at xw + 32 mi).
inline void WidenActivations(const Q8Task& t, int64_t g, int16_t* xw) {
  for (int64_t mi = 0; mi < t.m; ++mi) {
    const __m256i codes = Load32(reinterpret_cast<const uint8_t*>(t.x.q) +
                                 (g * t.x.rows + mi) * kQ8Group);
    __m256i* out = reinterpret_cast<__m256i*>(xw + kQ8Group * mi);
    _mm256_store_si256(out, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(codes)));
    _mm256_store_si256(out + 1, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(codes, 1)));
  }
}

// One pair of a 2-row tile: a[r][j] += vpmaddwd(w[j], the pair at x_r broadcast), j < 4. In
// assembly, because GCC 12 keeps the intrinsic form's eight accumulators in registers only
// with copies and spills between steps: in L1 on Zen 4 the tile took 1.35-1.8 cycles per 32
// products as intrinsics (by unrolling and tile shape), 1.18 so; the whole kernel at
// M = 16 / 64 (one thread, weights from memory) ran ~10 % faster. (int4's vpmaddubsw tile
// written so measured 7-9 % slower than GCC's.)
#define JAXCORE_PAIR_COLUMN(J)                  \
  "vmovdqa " #J "*32(%[w]), %[v]\n\t"          \
  "vpmaddwd %[x0], %[v], %[t0]\n\t"            \
  "vpmaddwd %[x1], %[v], %[t1]\n\t"            \
  "vpaddd %[t0], %[a0" #J "], %[a0" #J "]\n\t" \
  "vpaddd %[t1], %[a1" #J "], %[a1" #J "]\n\t"
[[gnu::always_inline]] inline void PairStep2(const int16_t* w, const int16_t* x0,
                                             const int16_t* x1, __m256i a[2][4]) {
  __m256i v, t0, t1, xb0, xb1;
  asm("vpbroadcastd %[p0], %[x0]\n\t"
      "vpbroadcastd %[p1], %[x1]\n\t"
      JAXCORE_PAIR_COLUMN(0) JAXCORE_PAIR_COLUMN(1) JAXCORE_PAIR_COLUMN(2) JAXCORE_PAIR_COLUMN(3)
      : [a00] "+x"(a[0][0]), [a01] "+x"(a[0][1]), [a02] "+x"(a[0][2]), [a03] "+x"(a[0][3]),
        [a10] "+x"(a[1][0]), [a11] "+x"(a[1][1]), [a12] "+x"(a[1][2]), [a13] "+x"(a[1][3]),
        [v] "=&x"(v), [t0] "=&x"(t0), [t1] "=&x"(t1), [x0] "=&x"(xb0), [x1] "=&x"(xb1)
      : [w] "r"(w), [p0] "m"(*reinterpret_cast<const int32_t*>(x0)),
        [p1] "m"(*reinterpret_cast<const int32_t*>(x1)),
        "m"(*reinterpret_cast<const int16_t(*)[64]>(w)));
}
#undef JAXCORE_PAIR_COLUMN

// AddDots() of the products of kRows rows from mi with one half's pairs of kGroups groups
// from g (two: a pair sharing one activation scale, Q8ScaleSpan), whose widened activations
// lie one after the other in xw (WidenActivations). vpmaddwd's products land in int32 lanes,
// so the second group carries on in the first's sums and the float work comes once.
template <class P, Format kFmt, int kRows, bool kScaleLater, int kGroups = 1>
inline void AccumulatePairRows(const Q8Task& t, int64_t g, int64_t mi, const int16_t* xw,
                               const GroupPairs* const w[kGroups], const __m256 sc[4],
                               float* acc, int64_t lda) {
  __m256i a[kRows][4];
  for (int r = 0; r < kRows; ++r) {
    for (int j = 0; j < 4; ++j) a[r][j] = _mm256_setzero_si256();
  }
  for (int gi = 0; gi < kGroups; ++gi) {
    const int16_t* x = xw + kQ8Group * (gi * t.m + mi);
    const GroupPairs& wg = *w[gi];
    for (int p = 0; p < kQ8Group / 2; ++p) {
      if constexpr (kRows == 2) {
        PairStep2(wg.w[p][0], x + 2 * p, x + kQ8Group + 2 * p, a);
      } else {
        int32_t pair;
        std::memcpy(&pair, x + 2 * p, sizeof(pair));
        const __m256i xb = _mm256_set1_epi32(pair);
        for (int j = 0; j < 4; ++j) {
          const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(wg.w[p][j]));
          a[0][j] = _mm256_add_epi32(a[0][j], _mm256_madd_epi16(v, xb));
        }
      }
    }
  }
  AddDots<P, kFmt, kRows, kScaleLater, kGroups>(t, g, mi, a, sc, acc, lda);
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

// Rows from which Q8TaskBlockT takes a pair's two groups in one step: a step then reads 32
// (4-bit) stored rows a page apart instead of 16, which costs more than the halved float
// work saves where there are few rows to share the decode. Zen 4, 2 threads, K = N = 4096
// from memory, int4 pairs against single groups: AVX2 M = 6 1.09x, 8 1.02-1.04x, 12
// 0.98-1.06x, 16 0.90-0.97x (NF4 M = 4-8 level, 12 0.98x, 16 0.94x); AVX-VNNI M = 6 1.03x, 8
// 0.98x, 12 0.97x, 16 0.95x. One thread from L2, AVX2: int4 0.95-0.96x at M = 6-64, NF4
// 0.96-0.97x at M = 16 and 64.
constexpr int64_t kGroupPairMinM = 12;

// One column block of a task of three or more rows (the whole of its K range): each group
// is decoded for 64 columns at a time into GroupQuads, which 2-row register tiles share. The
// sums stay in `acc` across the task's scale blocks, each group's weight scales folded into
// its float work (kScaleLater: one scale block, applied once at the end): a kernel per scale
// block re-read and re-wrote the result at every block boundary, ~20 % of int4 (64-row
// blocks) at M = 16 on Zen 4. Columns past the last whole 32 go element by element.
template <class P, Format kFmt, bool kScaleLater>
void Q8TaskBlockT(const Q8Task& t) {
  const int64_t wide = t.cols / 32 * 32;
  const int64_t lda = wide + 16;  // padded: rows 4 KiB apart would share L1 sets
  for (int64_t mi = 0; mi < t.m; ++mi) std::fill(t.acc + mi * lda, t.acc + mi * lda + wide, 0.0f);
  constexpr int kStoredRows = kQ8GroupRows<kFmt>;
  const __m256 unit = ScaleUnit<kFmt>();
  const uint8_t* end = t.q + Q8StoredRow<kFmt>(t.r1) * t.ldq;
  constexpr bool kPair = kPairs<P, kFmt>;
  // quads[gi][h]: half h of the step's group gi (one group, or a pair's two).
  std::conditional_t<kPair, GroupPairs, GroupQuads> quads[2][2];
  int16_t* xw = reinterpret_cast<int16_t*>(t.acc + t.m * lda);  // Q8TaskAccFloats' tail
  __m256 sc[2][4] = {};
  // Group g0's kHalves 32-column halves from column c, into quads[gi].
  const auto decode = [&](auto halves, int64_t g0, int64_t c, int gi) {
    if constexpr (kPair) {
      DecodeGroupPairs<P, kFmt, halves()>(t, g0, t.n0 + c, quads[gi]);
    } else {
      DecodeGroup<P, kFmt, halves()>(t, g0, t.n0 + c, quads[gi]);
    }
  };
  using One = std::integral_constant<int, 1>;
  using Two = std::integral_constant<int, 2>;
  // The products of kRows rows from mi with half h of the step's kg groups from g.
  const auto accumulate = [&](auto rows, int64_t g, int kg, int64_t mi, int h, float* acc) {
    if constexpr (kPair) {
      const GroupPairs* const w[2] = {&quads[0][h], &quads[1][h]};
      if (kg == 2) {
        AccumulatePairRows<P, kFmt, rows(), kScaleLater, 2>(t, g, mi, xw, w, sc[h], acc, lda);
      } else {
        AccumulatePairRows<P, kFmt, rows(), kScaleLater>(t, g, mi, xw, w, sc[h], acc, lda);
      }
    } else {
      const GroupQuads* const w[2] = {&quads[0][h], &quads[1][h]};
      if (kg == 2) {
        AccumulateRows<P, kFmt, rows(), kScaleLater, 2>(t, g, mi, w, sc[h], acc, lda);
      } else {
        AccumulateRows<P, kFmt, rows(), kScaleLater>(t, g, mi, w, sc[h], acc, lda);
      }
    }
  };
  const bool group_pairs = t.m >= kGroupPairMinM;
  for (int64_t g0 = t.r0; g0 < t.r1;) {
    const int64_t g = g0 / kQ8Group;
    const int kg =
        group_pairs && t.x.span == 2 && g % 2 == 0 && g0 + 2 * kQ8Group <= t.r1 ? 2 : 1;
    if constexpr (kPair) {
      for (int gi = 0; gi < kg; ++gi) WidenActivations(t, g + gi, xw + gi * kQ8Group * t.m);
    }
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + Q8StoredRow<kFmt>(g0) * t.ldq + t.n0;
    for (int64_t c = 0; c < wide;) {
      // Into L2, one group's products ahead: the next group's rows of these columns (in L1
      // the rows, a page apart, would evict each other from their shared set). A look-ahead
      // along the rows instead is too short for a task's width at larger M (int8 at M = 16,
      // Zen 4: -8 %).
      const uint8_t* ahead = group + kg * kStoredRows * t.ldq + c;
      for (int64_t r = 0; r < kg * kStoredRows; ++r) {
        const uint8_t* line = ahead + r * t.ldq;
        if (line + 63 >= end) break;
        _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(line + 63), _MM_HINT_T1);
      }
      // The next step's scales, where it starts a new block.
      if (!kScaleLater && (g0 + kg * kQ8Group) % t.block_size == 0) {
        PrefetchNextBlockScales(t, g0, srow, c, 4);
      }
      const int halves = c + 64 <= wide ? 2 : 1;
      for (int gi = 0; gi < kg; ++gi) {
        if (halves == 2) {
          decode(Two(), g0 + gi * kQ8Group, c, gi);
        } else {
          decode(One(), g0 + gi * kQ8Group, c, gi);
        }
      }
      for (int h = 0; h < halves; ++h) {
        if (!kScaleLater) HalfScales(srow + c + 32 * h, unit, sc[h]);
        float* acc = t.acc + c + 32 * h;
        int64_t mi = 0;
        for (; mi + 2 <= t.m; mi += 2) accumulate(Two(), g, kg, mi, h, acc);
        if (mi < t.m) accumulate(One(), g, kg, mi, h, acc);
      }
      c += 32 * halves;
    }
    g0 += kg * kQ8Group;
  }
  FinishBlock<kFmt, kScaleLater>(t, lda);
}

// A column block of a task of kR <= 2 rows (small M, bound by memory and decoding): each
// chunk's quads stay in registers from decode to products, where the kernel for more rows
// stores them for its row tiles to share. Bands of kNarrowRows stored rows are swept across
// the block (few concurrent row streams); where a group takes several bands (AVX2's int8),
// its int32 sums wait in the scratch (after the float sums) between them, so the float work
// comes once per group. Zen 4 pinned to AVX2, one thread, weights in cache, against storing
// the quads: M = 1 int8 104 -> 66 us, int4 67 -> 51, NF4 86 -> 69 per 512 columns of K = 4096;
// M = 2 int8 230 -> 96, int4 87 -> 74, NF4 130 -> 102.
template <class P, Format kFmt, int kR, bool kScaleLater>
void Q8TaskRows(const Q8Task& t) {
  static_assert(kR == 1 || kR == 2, "the accumulators of two rows fill the registers");
  const int64_t wide = t.cols / 32 * 32;
  const int64_t lda = wide + 16;
  for (int r = 0; r < kR; ++r) std::fill(t.acc + r * lda, t.acc + r * lda + wide, 0.0f);
  int32_t* carried = reinterpret_cast<int32_t*>(t.acc + kR * lda);
  constexpr int kStoredRows = kQ8GroupRows<kFmt>;
  constexpr int kBandRows = kNarrowRows<P, kFmt>;
  constexpr int kBands = kStoredRows / kBandRows;
  constexpr int kBandQuads = kQuads / kBands;
  const __m256 unit = ScaleUnit<kFmt>();
  const uint8_t* end = t.q + Q8StoredRow<kFmt>(t.r1) * t.ldq;
  const bool l1 = PrefetchRowsIntoL1();
  for (int64_t g0 = t.r0; g0 < t.r1; g0 += kQ8Group) {
    const int64_t g = g0 / kQ8Group;
    const float* srow = t.scale + (g0 / t.block_size - t.r0 / t.block_size) * t.lds;
    const uint8_t* group = t.q + Q8StoredRow<kFmt>(g0) * t.ldq + t.n0;
    const int8_t* xq[kR];
    __m256 d[kR];
    __m256i zero_point[kR];
    for (int r = 0; r < kR; ++r) {
      const int64_t at = g * t.x.rows + r;
      xq[r] = t.x.q + at * kQ8Group;
      d[r] = _mm256_set1_ps(t.x.d[at]);
      zero_point[r] = _mm256_set1_epi32(kZeroPoint<P, kFmt> * t.x.sum[at]);
    }
    for (int band = 0; band < kBands; ++band) {
      const uint8_t* rows = group + band * kBandRows * t.ldq;
      const bool first = band == 0, last = band == kBands - 1;
      const int64_t part = (g0 % t.block_size) / kQ8Group * kBands + band;
      const int64_t parts = t.block_size / kQ8Group * kBands;
      for (int64_t c = 0; c < wide; c += 32) {
        // This band's share of the next scale block's lines for the chunk.
        if (!kScaleLater) PrefetchNextBlockScales(t, g0, srow, c, 2, part, parts);
        // kPrefetchAhead along the band's rows, into L1 on Intel (1-2 % faster than into L2
        // at M = 1 and 2: Xeon, AVX-VNNI).
        if (c % 64 == 0) {
          for (int r = 0; r < kBandRows; ++r) {
            const uint8_t* line = rows + r * t.ldq + c + kPrefetchAhead;
            if (line >= end) break;
            PrefetchRow(line, l1);
          }
        }
        __m256i a[kR][4];
        for (int r = 0; r < kR; ++r) {
          for (int j = 0; j < 4; ++j) a[r][j] = _mm256_setzero_si256();
        }
        for (int set = 0; set < kBandRows / 4; ++set) {
          const uint8_t* row = rows + 4 * set * t.ldq + c;
          __m256i stored[4];
          for (int i = 0; i < 4; ++i) stored[i] = Load32(row + i * t.ldq);
          __m256i quad[kStepQuads<kFmt>][4];
          DecodeStep<P, kFmt>(stored, quad);
          for (int step = 0; step < kStepQuads<kFmt>; ++step) {
            const int bq = set * kStepQuads<kFmt> + step;
            __m256i xb[kR];
            for (int r = 0; r < kR; ++r) xb[r] = Broadcast4(xq[r] + 4 * (band * kBandQuads + bq));
            for (int j = 0; j < 4; ++j) {
              // int16 pair sums (AVX2 int4): a group's 8 quads stay below 2^15.
              const __m256i u = Unsigned<P, kFmt>(quad[step][j]);
              for (int r = 0; r < kR; ++r) {
                a[r][j] = Product<P, kFmt>(a[r][j], u, quad[step][j], xb[r]);
              }
            }
          }
        }
        __m256 sc[4];
        if (last && !kScaleLater) HalfScales(srow + c, unit, sc);
        for (int r = 0; r < kR; ++r) {
          for (int j = 0; j < 4; ++j) {
            __m256i v = Widen<P, kFmt>(a[r][j]);
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

template <class P, Format kFmt>
void Q8TaskBlockOf(const Q8Task& t) {
  const bool one_block = InOneScaleBlock(t);
  // Whole groups from M = 3: against 8-row sweeps (and, for int8, passes of two register
  // rows) at M = 3 / 4, Zen 4, 2 threads, K = N = 4096 from memory: AVX2 int8 1.24 -> 1.00 /
  // 1.36 -> 1.11 ms, int4 0.70 -> 0.55 / 0.77 -> 0.57, NF4 0.83 -> 0.76 / 0.94 -> 0.84; AVX-VNNI
  // (the EVEX build) int8 1.07 -> 0.74 / 1.09 -> 0.78, int4 0.67 -> 0.48 / 0.73 -> 0.53, NF4
  // 0.67 -> 0.54 / 0.81 -> 0.65. At M <= 2 the register rows stay ahead (int8 0.71 -> 0.63
  // AVX2, 0.62 -> 0.51 AVX-VNNI at M = 1).
  if (t.m == 1) {
    return one_block ? Q8TaskRows<P, kFmt, 1, true>(t) : Q8TaskRows<P, kFmt, 1, false>(t);
  }
  if (t.m == 2) {
    return one_block ? Q8TaskRows<P, kFmt, 2, true>(t) : Q8TaskRows<P, kFmt, 2, false>(t);
  }
  return one_block ? Q8TaskBlockT<P, kFmt, true>(t) : Q8TaskBlockT<P, kFmt, false>(t);
}

// A whole q8_task (KernelTable::q8_task) with products P.
template <class P>
void Q8TaskYmm(const Q8Task& t) {
  ForEachQ8TaskBlock(t, [](const Q8Task& b) {
    WithFormat(b.fmt, [&](auto tag) { Q8TaskBlockOf<P, decltype(tag)::value>(b); });
  });
}

}  // namespace
}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_KERNELS_Q8_YMM_H_
