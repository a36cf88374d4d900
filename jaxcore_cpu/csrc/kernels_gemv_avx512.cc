// AVX-512 float32-activation GEMV (Precision::kFloat32, M <= kGemvAvx512MaxM), compiled with
// the AVX-512 flags and only called after the run-time cpuid check.
//
// The AVX2 GEMV decodes a 4-bit code to a float with a mask, a subtraction and a conversion
// (int4) or six byte shuffles per 32 codes (NF4), which leaves it bound by those operations
// rather than by memory at M = 1. Here one zmm register holds a format's whole 16-entry code
// table (v - 8 for int4, the NF4 code book), and vpermps looks a code up by the low four bits
// of its int32 lane. M <= 4 loads a stored row's 64 bytes whole and shifts each byte of the
// int32 lanes down in turn (DecodeChunkRow), leaving its sums four columns to a lane until
// the flush; M = 5..16 widens each 16 bytes to int32 lanes (vpmovzxbd). Low nibbles index the
// table directly, NF4's high nibbles after one more shift. Widening and lookups run on the
// shuffle ports, which bound the loop (Zen 4), so int4's high nibbles take the float ports
// instead (HighNibbleInt4: 10 % faster with the data in cache). int8 widens with sign and
// converts.
//
// M <= 4 (Bands) takes 64 columns at a time in bands of kBand stored rows, the sums in
// registers (two chains, even and odd logical rows, at M = 1), as the AVX2 bands do. M = 5..16
// (SliverBands) keeps all M rows of one 16-column sliver in registers instead, so each decode
// feeds M FMAs and the loop runs near the FMA rate: on Zen 4 it beat the GEMM path's decoded
// panels by 5-45 % for M = 5..16 (K = N = 4096, 2 threads). The columns past the last
// multiple of 64 go to the AVX2 kernel as segments of their own.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "gemv_bands.h"
#include "kernels.h"
#include "lanes_avx512.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int64_t kCols = 64;  // columns per chunk: one cache line of each stored row
constexpr int64_t kBand = 8;   // stored rows per pass over the segment's columns
// Bytes ahead along the band's rows that Bands prefetches, running on into the next band's
// rows (past the segment's too) at the end of the columns (BandAhead): 4-10 % faster at M = 1
// and 2 from memory (Zen 4, K = 4096, N = 4096 and 14336, 2 threads). Into L1 on Intel (a
// band's 8 rows x 1 KiB ahead is 8 KiB in flight): 2-4 % faster for every format at M = 1 and
// 2 on the Xeon with AVX-512 (level at M = 4; 512 to 2048 bytes ahead level; into L3 level with
// L2); into L2 elsewhere (L1 was up to 22 % slower on Zen 4: PrefetchRowsIntoL1).
constexpr int64_t kPrefetchAhead = 1024;

// The 16 decoded values of a 4-bit format, indexed by code.
inline __m512 CodeTable(Format fmt) {
  if (fmt == Format::kNf4) return _mm512_loadu_ps(kNf4Code);
  return _mm512_sub_ps(_mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                       _mm512_set1_ps(kInt4ZeroPoint));
}

// v - 8 for the high nibble v of each int32 lane (a zero-extended byte), without the shuffle
// ports the lookups use: the nibble, left in bits 4..7, becomes the mantissa bits of
// 2^19 + v (2^19's mantissa unit is 1/16), from which 2^19 + 8 is subtracted exactly.
inline __m512 HighNibbleInt4(__m512i u) {
  const __m512i bits = _mm512_ternarylogic_epi32(u, _mm512_set1_epi32(0xF0),
                                                 _mm512_set1_epi32(0x49000000), 0xEA);  // a&b|c
  return _mm512_sub_ps(_mm512_castsi512_ps(bits), _mm512_set1_ps(524288.0f + kInt4ZeroPoint));
}

inline __m512i Load16Bytes(const uint8_t* p, bool sign_extend) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return sign_extend ? _mm512_cvtepi8_epi32(raw) : _mm512_cvtepu8_epi32(raw);
}

// y[m][c] += scale[c] * acc[m][c] for the first `wide` columns (a multiple of kCols), whose
// sums the 4-bit bands leave four columns to a lane (BytesToColumnOrder's order).
template <Format kFmt>
inline void Flush(const GemvSegment& s, int m, int64_t wide) {
  for (int mi = 0; mi < m; ++mi) {
    const float* acc = s.acc + mi * s.ldacc;
    float* y = s.y + mi * s.ldy;
    for (int64_t c = 0; c < wide; c += kCols) {
      __m512 a[4];
      for (int j = 0; j < 4; ++j) a[j] = _mm512_loadu_ps(acc + c + 16 * j);
      if (kFmt != Format::kInt8) BytesToColumnOrder(a);
      for (int j = 0; j < 4; ++j) {
        float* out = y + c + 16 * j;
        const __m512 sc = _mm512_loadu_ps(s.scale + c + 16 * j);
        _mm512_storeu_ps(out, _mm512_fmadd_ps(sc, a[j], _mm512_loadu_ps(out)));
      }
    }
  }
}

// The 128 decoded values of the 64 columns of one stored 4-bit row at `row`, loaded whole:
// int32 lane i of lo[b] and hi[b] holds column 4 i + b (logical rows 2r and 2r + 1), the
// order BytesToColumnOrder undoes. Byte b of each lane is shifted down to the low bits and its
// nibbles looked up as DecodeSliverRow does: shifts where widening each 16 bytes (vpmovzxbd)
// took the shuffle ports the lookups need. ~25 % faster for int4 and NF4 with the weight in
// L2 (Zen 4, one thread, M = 1); from memory through JAX (2 threads) 3-9 % at M = 1, 2-5 %
// at M = 2.
template <Format kFmt>
inline void DecodeChunkRow(const uint8_t* row, __m512 table, __m512 lo[4], __m512 hi[4]) {
  const __m512i u = _mm512_loadu_si512(row);
  for (int b = 0; b < 4; ++b) {
    const __m512i v = b == 0 ? u : _mm512_srli_epi32(u, 8 * b);
    lo[b] = _mm512_permutexvar_ps(v, table);
    hi[b] = kFmt == Format::kInt4 ? HighNibbleInt4(v)
                                  : _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), table);
  }
}

// The 16 decoded values of columns [c, c + 16) of stored row `row` (int8: one logical row in
// lo; 4-bit: rows 2r in lo and 2r + 1 in hi).
template <Format kFmt>
inline void DecodeSliverRow(const uint8_t* row, __m512 table, __m512& lo, __m512& hi) {
  const __m512i u = Load16Bytes(row, kFmt == Format::kInt8);
  if (kFmt == Format::kInt8) {
    lo = _mm512_cvtepi32_ps(u);
    return;
  }
  lo = _mm512_permutexvar_ps(u, table);
  hi = kFmt == Format::kInt4 ? HighNibbleInt4(u)
                             : _mm512_permutexvar_ps(_mm512_srli_epi32(u, 4), table);
}

// acc[m][c + i] (i < 64) = (or +=, unless `first`) the sums over stored rows [sr0, sr1), the
// 4-bit formats' in DecodeChunkRow's order.
template <Format kFmt, int M>
inline void BandChunk(const GemvSegment& s, __m512 table, int64_t sr0, int64_t sr1, int64_t c,
                      bool first) {
  constexpr int kSets = M == 1 ? 2 : 1;  // M = 1: even and odd rows in separate FMA chains
  __m512 sum[kSets][M][4];
  for (int k = 0; k < kSets; ++k) {
    for (int mi = 0; mi < M; ++mi) {
      for (int j = 0; j < 4; ++j) sum[k][mi][j] = _mm512_setzero_ps();
    }
  }
  const uint8_t* q = s.q + sr0 * s.ldq + s.n0 + c;
  if (kFmt == Format::kInt8) {
    // Row r's products go to set (r - sr0) % kSets; rows come in pairs so the set is known
    // at compile time.
    auto row = [&](int64_t r, const uint8_t* p, int set) {
      __m512 w[4], unused;
      for (int j = 0; j < 4; ++j) DecodeSliverRow<kFmt>(p + 16 * j, table, w[j], unused);
      for (int mi = 0; mi < M; ++mi) {
        const __m512 xv = _mm512_set1_ps(s.x[mi * s.ldx + r]);
        for (int j = 0; j < 4; ++j) sum[set][mi][j] = _mm512_fmadd_ps(xv, w[j], sum[set][mi][j]);
      }
    };
    int64_t r = sr0;
    for (; r + 2 <= sr1; r += 2, q += 2 * s.ldq) {
      row(r, q, 0);
      row(r + 1, q + s.ldq, kSets - 1);
    }
    if (r < sr1) row(r, q, 0);
  } else {
    for (int64_t r = sr0; r < sr1; ++r, q += s.ldq) {
      __m512 even[4], odd[4];
      DecodeChunkRow<kFmt>(q, table, even, odd);
      for (int mi = 0; mi < M; ++mi) {
        const __m512 xe = _mm512_set1_ps(s.x[mi * s.ldx + 2 * r]);
        const __m512 xo = _mm512_set1_ps(s.x[mi * s.ldx + 2 * r + 1]);
        for (int j = 0; j < 4; ++j) {
          sum[0][mi][j] = _mm512_fmadd_ps(xe, even[j], sum[0][mi][j]);
          sum[kSets - 1][mi][j] = _mm512_fmadd_ps(xo, odd[j], sum[kSets - 1][mi][j]);
        }
      }
    }
  }
  for (int mi = 0; mi < M; ++mi) {
    float* a = s.acc + mi * s.ldacc + c;
    for (int j = 0; j < 4; ++j) {
      __m512 v = kSets == 2 ? _mm512_add_ps(sum[0][mi][j], sum[kSets - 1][mi][j]) : sum[0][mi][j];
      if (!first) v = _mm512_add_ps(v, _mm512_loadu_ps(a + 16 * j));
      _mm512_storeu_ps(a + 16 * j, v);
    }
  }
}

// Columns [0, wide) of the segment: acc from the bands, then y += scale * acc.
template <Format kFmt, int M>
void Bands(const GemvSegment& s, int64_t wide) {
  constexpr int64_t kPerRow = kFmt == Format::kInt8 ? 1 : 2;  // logical rows per stored row
  const __m512 table = CodeTable(kFmt);
  const int64_t seg0 = s.r0 / kPerRow, seg1 = s.r1 / kPerRow;  // stored rows
  if (seg0 >= seg1) return;  // no rows: y is unchanged
  const int64_t bands = (seg1 - seg0 + kBand - 1) / kBand;
  const bool l1 = PrefetchRowsIntoL1();
  for (int64_t sr0 = seg0; sr0 < seg1; sr0 += kBand) {
    const int64_t sr1 = std::min(seg1, sr0 + kBand);
    for (int64_t c = 0; c < wide; c += kCols) {
      const uintptr_t next = BandAhead(s, sr0, sr1, c + kPrefetchAhead, wide);
      for (int64_t r = 0; r < kBand; ++r) {
        PrefetchRow(reinterpret_cast<const void*>(next + r * s.ldq), l1);
      }
      // This band's share of the segment's scale lines for the chunk, which the flush reads
      // (on demand they cost ~10 % at M = 1: int4 in blocks of 64, Zen 4, 2 threads).
      PrefetchLines(s.scale + c, kCols / 16, (sr0 - seg0) / kBand, bands);
      BandChunk<kFmt, M>(s, table, sr0, sr1, c, sr0 == seg0);
    }
  }
  Flush<kFmt>(s, M, wide);
}

// M = 5..kSliverMaxM: each sliver (16 columns) of a 64-column chunk keeps all M rows' sums in
// registers over kSliverBand stored rows, one decode per 16 weights feeding M FMAs (their
// activations broadcast from memory), so the loop runs at the FMA rate; the chunk's other
// slivers find its lines in L1. The stored rows' next chunk is prefetched as the chunk runs.
// The sums go into y scaled straight from the registers: a pass over the scratch (Flush) per
// block read and wrote 2 x M x cols floats of L2 and took 15-18 % of the time at M = 16
// (int4 and NF4 in blocks of 64, K = N = 4096, 2 threads; Intel Xeon with AVX-512).
constexpr int kSliverMaxM = kGemvAvx512MaxM;
constexpr int64_t kSliverBand = 32;

template <Format kFmt, int M>
void SliverBands(const GemvSegment& s, int64_t wide) {
  constexpr int64_t kPerRow = kFmt == Format::kInt8 ? 1 : 2;
  const __m512 table = CodeTable(kFmt);
  const int64_t seg0 = s.r0 / kPerRow, seg1 = s.r1 / kPerRow;
  if (seg0 >= seg1) return;
  for (int64_t sr0 = seg0; sr0 < seg1; sr0 += kSliverBand) {
    const int64_t sr1 = std::min(seg1, sr0 + kSliverBand);
    alignas(64) float xb[kSliverBand * kPerRow][M];
    InterleaveRows<M>(s, sr0 * kPerRow, (sr1 - sr0) * kPerRow, xb);
    for (int64_t c = 0; c < wide; c += kCols) {
      const uint8_t* rows = s.q + sr0 * s.ldq + s.n0 + c;
      if (c + kCols < wide) {
        for (int64_t r = 0; r < sr1 - sr0; ++r) {
          _mm_prefetch(reinterpret_cast<const char*>(rows + r * s.ldq + kCols), _MM_HINT_T0);
        }
      }
      for (int64_t j = 0; j < kCols; j += 16) {
        __m512 sum[M];
        for (int mi = 0; mi < M; ++mi) sum[mi] = _mm512_setzero_ps();
        const uint8_t* q = rows + j;
        for (int64_t r = sr0; r < sr1; ++r, q += s.ldq) {
          __m512 lo, hi;
          DecodeSliverRow<kFmt>(q, table, lo, hi);
          const float* x = xb[(r - sr0) * kPerRow];
          for (int mi = 0; mi < M; ++mi) {
            sum[mi] = _mm512_fmadd_ps(_mm512_set1_ps(x[mi]), lo, sum[mi]);
          }
          if (kFmt != Format::kInt8) {
            for (int mi = 0; mi < M; ++mi) {
              sum[mi] = _mm512_fmadd_ps(_mm512_set1_ps(x[M + mi]), hi, sum[mi]);
            }
          }
        }
        const __m512 sc = _mm512_loadu_ps(s.scale + c + j);
        for (int mi = 0; mi < M; ++mi) {
          float* y = s.y + mi * s.ldy + c + j;
          _mm512_storeu_ps(y, _mm512_fmadd_ps(sc, sum[mi], _mm512_loadu_ps(y)));
        }
      }
    }
  }
}

template <Format kFmt>
void BandsOf(const GemvSegment& s, int64_t wide) {
  switch (s.m) {
    case 1: return Bands<kFmt, 1>(s, wide);
    case 2: return Bands<kFmt, 2>(s, wide);
    case 3: return Bands<kFmt, 3>(s, wide);
    case 4: return Bands<kFmt, 4>(s, wide);
    case 5: return SliverBands<kFmt, 5>(s, wide);
    case 6: return SliverBands<kFmt, 6>(s, wide);
    case 7: return SliverBands<kFmt, 7>(s, wide);
    case 8: return SliverBands<kFmt, 8>(s, wide);
    case 9: return SliverBands<kFmt, 9>(s, wide);
    case 10: return SliverBands<kFmt, 10>(s, wide);
    case 11: return SliverBands<kFmt, 11>(s, wide);
    case 12: return SliverBands<kFmt, 12>(s, wide);
    case 13: return SliverBands<kFmt, 13>(s, wide);
    case 14: return SliverBands<kFmt, 14>(s, wide);
    case 15: return SliverBands<kFmt, 15>(s, wide);
    default: return SliverBands<kFmt, kSliverMaxM>(s, wide);
  }
}

}  // namespace

void GemvSegmentAvx512(const GemvSegment& s) {
  const int64_t wide = s.cols / kCols * kCols;
  if (wide > 0) {
    WithFormat(s.fmt, [&](auto tag) { BandsOf<decltype(tag)::value>(s, wide); });
  }
  if (wide == s.cols) return;
  // The last columns, as segments of their own of at most the AVX2 kernel's rows.
  for (int m0 = 0; m0 < s.m; m0 += kGemvAvx2MaxM) {
    GemvSegment rest = s;
    rest.m = static_cast<int>(std::min<int64_t>(kGemvAvx2MaxM, s.m - m0));
    rest.x += m0 * s.ldx;
    rest.n0 += wide;
    rest.cols -= wide;
    rest.scale += wide;
    rest.acc += m0 * s.ldacc + wide;
    rest.y += m0 * s.ldy + wide;
    Avx2Kernels().gemv_segment(rest);
  }
}

}  // namespace internal
}  // namespace jaxcore_cpu
