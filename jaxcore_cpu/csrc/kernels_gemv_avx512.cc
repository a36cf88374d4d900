// AVX-512 float32-activation GEMV (Precision::kFloat32, M <= kGemvMaxM), compiled with the
// AVX-512 flags and only called after the run-time cpuid check.
//
// The AVX2 GEMV decodes a 4-bit code to a float with a mask, a subtraction and a conversion
// (int4) or six byte shuffles per 32 codes (NF4), which leaves it bound by those operations
// rather than by memory at M = 1. Here one zmm register holds a format's whole 16-entry code
// table (v - 8 for int4, the NF4 code book), and vpermps looks a code up by the low four bits
// of its int32 lane: each 16 bytes widen to int32 lanes once (vpmovzxbd), their low nibbles
// index the table directly and NF4's high nibbles after one shift. Widening, shifts and
// lookups all run on the two shuffle ports, which bound the loop (Zen 4), so int4's high
// nibbles take the float ports instead (HighNibbleInt4: 10 % faster with the data in cache).
// int8 widens with sign and converts.
//
// The segment's columns are taken 64 at a time in bands of kBand stored rows, the sums in
// registers (two chains, even and odd logical rows, at M = 1), as the AVX2 bands; the
// columns past the last multiple of 64 go to the AVX2 kernel as a segment of their own.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "kernels.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int64_t kCols = 64;  // columns per chunk: one cache line of each stored row
constexpr int64_t kBand = 8;   // stored rows per pass over the segment's columns

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

// acc[m][c + i] (i < 64) = (or +=, unless `first`) the sums over stored rows [sr0, sr1).
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
      __m512 w[4];
      for (int j = 0; j < 4; ++j) w[j] = _mm512_cvtepi32_ps(Load16Bytes(p + 16 * j, true));
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
      for (int j = 0; j < 4; ++j) {
        const __m512i u = Load16Bytes(q + 16 * j, false);
        even[j] = _mm512_permutexvar_ps(u, table);  // low nibble: row 2r
        odd[j] = kFmt == Format::kInt4 ? HighNibbleInt4(u)
                                       : _mm512_permutexvar_ps(_mm512_srli_epi32(u, 4), table);
      }
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
  for (int64_t sr0 = seg0; sr0 < seg1; sr0 += kBand) {
    const int64_t sr1 = std::min(seg1, sr0 + kBand);
    for (int64_t c = 0; c < wide; c += kCols) {
      BandChunk<kFmt, M>(s, table, sr0, sr1, c, sr0 == seg0);
    }
  }
  for (int mi = 0; mi < M; ++mi) {
    const float* acc = s.acc + mi * s.ldacc;
    float* y = s.y + mi * s.ldy;
    for (int64_t c = 0; c < wide; c += 16) {
      const __m512 sc = _mm512_loadu_ps(s.scale + c), a = _mm512_loadu_ps(acc + c);
      _mm512_storeu_ps(y + c, _mm512_fmadd_ps(sc, a, _mm512_loadu_ps(y + c)));
    }
  }
}

template <Format kFmt>
void BandsOf(const GemvSegment& s, int64_t wide) {
  switch (s.m) {
    case 1: return Bands<kFmt, 1>(s, wide);
    case 2: return Bands<kFmt, 2>(s, wide);
    case 3: return Bands<kFmt, 3>(s, wide);
    default: return Bands<kFmt, 4>(s, wide);
  }
}

}  // namespace

void GemvSegmentAvx512(const GemvSegment& s) {
  static_assert(kGemvMaxM <= 4, "Bands has accumulators for at most four activation rows");
  const int64_t wide = s.cols / kCols * kCols;
  if (wide > 0) {
    switch (s.fmt) {
      case Format::kInt8:
        BandsOf<Format::kInt8>(s, wide);
        break;
      case Format::kInt4:
        BandsOf<Format::kInt4>(s, wide);
        break;
      case Format::kNf4:
        BandsOf<Format::kNf4>(s, wide);
        break;
    }
  }
  if (wide == s.cols) return;
  GemvSegment rest = s;  // the last columns, as a segment of their own
  rest.n0 += wide;
  rest.cols -= wide;
  rest.scale += wide;
  rest.acc += wide;
  rest.y += wide;
  Avx2Kernels().gemv_segment(rest);
}

}  // namespace internal
}  // namespace jaxcore_cpu
