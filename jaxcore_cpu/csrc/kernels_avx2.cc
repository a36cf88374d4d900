// AVX2 + FMA kernels (compiled with -mavx2 -mfma; chosen at run time by cpuid).
//
// GEMV for M <= 2 walks the weight in bands of a few stored rows, 32 columns at a time, with
// the sums in registers: int8 widens eight stored bytes per vector (vpmovsxbd) and converts;
// int4 widens eight bytes (vpmovzxbd) and splits their two nibbles by mask and shift; NF4
// looks its nibbles up in its 16-entry float code book with in-lane byte shuffles
// (Nf4Decode32). M = 3..8 keeps all M rows of an 8- or 16-column sliver in registers over 32
// stored rows (SliverBands), so each decode feeds M FMAs. The ragged columns and the GEMM
// panels decode eight columns at a time: int4 converts each nibble, and NF4 looks it up with
// two vpermps and a blend on bit 3.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "gemv_bands.h"
#include "kernels.h"
#include "lanes_avx2.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

inline __m256i Load8Bytes(const uint8_t* p, bool sign_extend) {
  const __m128i raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return sign_extend ? _mm256_cvtepi8_epi32(raw) : _mm256_cvtepu8_epi32(raw);
}

// How far ahead along a row the GEMV kernel prefetches.
constexpr int64_t kPrefetchBytes = 1024;
// How many stored rows ahead the kernels prefetch the weights they will read.
constexpr int64_t kPrefetchRows = 8;

// Prefetches `bytes` bytes from `p` (one hint per cache line; never faults).
inline void Prefetch(const uint8_t* p, int64_t bytes) {
  for (int64_t off = 0; off < bytes; off += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
  }
}

struct Nf4Table {
  __m256 low, high;  // codes 0..7 and 8..15
};

inline Nf4Table LoadNf4() { return {_mm256_loadu_ps(kNf4Code), _mm256_loadu_ps(kNf4Code + 8)}; }

// Looks up the code of the nibble held in bits [shift, shift + 4) of each lane.
template <int kShift>
inline __m256 Nf4Lookup(const Nf4Table& t, __m256i u) {
  const __m256i idx = kShift ? _mm256_srli_epi32(u, kShift) : u;  // vpermps reads bits 0..2
  const __m256 low = _mm256_permutevar8x32_ps(t.low, idx);
  const __m256 high = _mm256_permutevar8x32_ps(t.high, idx);
  const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(u, 28 - kShift));
  return _mm256_blendv_ps(low, high, bit3);
}

// NF4 codes of 32 nibbles at once without lane-crossing permutes (vpermps is slow on
// several x86 cores): four in-lane byte shuffles give the four bytes of each code's
// float32 bits, and two rounds of unpacking interleave them back into floats, in column
// order once the 128-bit halves are exchanged.
struct Nf4Planes {
  __m256i byte[4];  // byte i of every code, replicated in both 128-bit lanes
};

// Byte planes of a 16-entry float code book (NF4's, or int4's v - 8).
inline Nf4Planes LoadCodePlanes(const float codes[16]) {
  const CodeBytePlanes planes = BytePlanesOf(codes);
  Nf4Planes p;
  for (int i = 0; i < 4; ++i) {
    p.byte[i] = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(planes.plane[i])));
  }
  return p;
}

inline Nf4Planes LoadNf4Planes() { return LoadCodePlanes(kNf4Code); }


// idx: 32 nibble indices (one per byte, columns 0..31). out[] holds their codes in the
// unpacking's order: out[0] = columns 0-3 | 16-19, out[1] = 4-7 | 20-23,
// out[2] = 8-11 | 24-27, out[3] = 12-15 | 28-31 (see ToColumnOrder / FromColumnOrder).
inline void Nf4Decode32(const Nf4Planes& p, __m256i idx, __m256 out[4]) {
  const __m256i b0 = _mm256_shuffle_epi8(p.byte[0], idx);
  const __m256i b1 = _mm256_shuffle_epi8(p.byte[1], idx);
  const __m256i b2 = _mm256_shuffle_epi8(p.byte[2], idx);
  const __m256i b3 = _mm256_shuffle_epi8(p.byte[3], idx);
  const __m256i lo01 = _mm256_unpacklo_epi8(b0, b1), hi01 = _mm256_unpackhi_epi8(b0, b1);
  const __m256i lo23 = _mm256_unpacklo_epi8(b2, b3), hi23 = _mm256_unpackhi_epi8(b2, b3);
  out[0] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(lo01, lo23));
  out[1] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(lo01, lo23));
  out[2] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(hi01, hi23));
  out[3] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(hi01, hi23));
}

// The NF4 codes of the low and high nibbles of 32 stored bytes (columns 0..31).
inline void Nf4DecodePairs32(const Nf4Planes& p, const uint8_t* q, __m256 even[4], __m256 odd[4]) {
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
  const __m256i mask = _mm256_set1_epi8(0x0F);
  Nf4Decode32(p, _mm256_and_si256(bytes, mask), even);
  Nf4Decode32(p, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask), odd);
}

// The unscaled values of the two logical rows packed in one stored row, eight columns.
template <Format kFmt>
inline void DecodePair(const Nf4Table& t, __m256i u, __m256* even, __m256* odd) {
  if (kFmt == Format::kNf4) {
    *even = Nf4Lookup<0>(t, u);
    *odd = Nf4Lookup<4>(t, u);
  } else {
    // v - 8 per element, exactly (subtracting 8 * sum(x) afterwards would cancel).
    // (integer subtraction: it issues on more ports than a float one)
    const __m256i zp = _mm256_set1_epi32(static_cast<int>(kInt4ZeroPoint));
    *even = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x0F)), zp));
    *odd = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_srli_epi32(u, 4), zp));
  }
}

// --- GEMV ----------------------------------------------------------------------------

// acc[m][c] += sum over kGroup stored rows starting at stored row `sr` (logical rows
// `lr`...) for M activation rows, eight columns at a time; `first` writes instead of adds.
template <Format kFmt, int M, int kGroup>
inline void GemvRows(const GemvSegment& s, int64_t sr, int64_t lr, int64_t c0,
                     int64_t vec_cols, bool first) {
  constexpr int kPerRow = kFmt == Format::kInt8 ? 1 : 2;  // logical rows per stored row
  __m256 xv[M][kGroup * kPerRow];
  for (int mi = 0; mi < M; ++mi) {
    for (int j = 0; j < kGroup * kPerRow; ++j) {
      xv[mi][j] = _mm256_broadcast_ss(s.x + mi * s.ldx + lr + j);
    }
  }
  const Nf4Table t = LoadNf4();
  const uint8_t* base = s.q + sr * s.ldq + s.n0;
  for (int64_t c = c0; c < vec_cols; c += 8) {
    if ((c & 63) == 0) {
      for (int g = 0; g < kGroup; ++g) {
        _mm_prefetch(reinterpret_cast<const char*>(base + g * s.ldq + c + kPrefetchBytes),
                     _MM_HINT_T0);
      }
    }
    __m256 w[kGroup * kPerRow];
    for (int g = 0; g < kGroup; ++g) {
      const __m256i u = Load8Bytes(base + g * s.ldq + c, kFmt == Format::kInt8);
      if (kFmt == Format::kInt8) {
        w[g] = _mm256_cvtepi32_ps(u);
      } else {
        DecodePair<kFmt>(t, u, &w[2 * g], &w[2 * g + 1]);
      }
    }
    for (int mi = 0; mi < M; ++mi) {
      float* a = s.acc + mi * s.ldacc + c;
      // Two independent chains halve the FMA latency on the path through acc.
      constexpr int kTerms = kGroup * kPerRow;
      __m256 even = _mm256_mul_ps(xv[mi][0], w[0]);
      __m256 odd = kTerms > 1 ? _mm256_mul_ps(xv[mi][1], w[1]) : _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int j = 2; j < kTerms; j += 2) {
        even = _mm256_fmadd_ps(xv[mi][j], w[j], even);
        if (j + 1 < kTerms) odd = _mm256_fmadd_ps(xv[mi][j + 1], w[j + 1], odd);
      }
      __m256 sum = _mm256_add_ps(even, odd);
      if (!first) sum = _mm256_add_ps(sum, _mm256_loadu_ps(a));
      _mm256_storeu_ps(a, sum);
    }
  }
}

// Stored rows [sr0, sr1) times columns [c, c + 32) for M <= 2 activation rows, summed in
// registers and written (`first`) or added to acc in column order. int4 multiplies the
// nibbles v as they are and subtracts zero_shift[mi] (8 times the band's activations of row
// mi) once: sum x (v - 8) = sum x v - 8 sum x.
template <Format kFmt, int M>
inline void GemvBandChunk(const GemvSegment& s, const Nf4Planes& planes, int64_t sr0,
                          int64_t sr1, int64_t c, bool first, const float* zero_shift) {
  static_assert(M <= 2, "accumulators for at most two activation rows");
  constexpr int kSets = M == 1 ? 2 : 1;  // M = 1: even/odd rows in separate FMA chains
  __m256 sum[kSets][M][4];
  for (int k = 0; k < kSets; ++k) {
    for (int mi = 0; mi < M; ++mi) {
      for (int j = 0; j < 4; ++j) sum[k][mi][j] = _mm256_setzero_ps();
    }
  }
  const uint8_t* q = s.q + sr0 * s.ldq + s.n0 + c;
  // int8: row r's products go to set (r - sr0) % kSets; the loop takes rows in pairs so the
  // set is known at compile time and the sums stay in registers.
  auto int8_row = [&](int64_t r, const uint8_t* row, int set) {
    __m256 w[4];
    for (int j = 0; j < 4; ++j) w[j] = _mm256_cvtepi32_ps(Load8Bytes(row + 8 * j, true));
    for (int mi = 0; mi < M; ++mi) {
      const __m256 xv = _mm256_broadcast_ss(s.x + mi * s.ldx + r);
      for (int j = 0; j < 4; ++j) sum[set][mi][j] = _mm256_fmadd_ps(xv, w[j], sum[set][mi][j]);
    }
  };
  if (kFmt == Format::kInt8) {
    int64_t r = sr0;
    for (; r + 2 <= sr1; r += 2, q += 2 * s.ldq) {
      int8_row(r, q, 0);
      int8_row(r + 1, q + s.ldq, kSets - 1);
    }
    if (r < sr1) int8_row(r, q, 0);
  }
  // int4: each 8 bytes widen straight from memory to int32 lanes in column order, both
  // nibbles of them (rows 2r and 2r + 1) split by mask and shift: one shuffle-port op per 16
  // weights, where the code-book decoder below needs six. The zero point waits for the end.
  for (int64_t r = sr0; kFmt == Format::kInt4 && r < sr1; ++r, q += s.ldq) {
    const __m256i nibble = _mm256_set1_epi32(0x0F);
    __m256 even[4], odd[4];
    for (int j = 0; j < 4; ++j) {
      const __m256i raw = Load8Bytes(q + 8 * j, false);
      even[j] = _mm256_cvtepi32_ps(_mm256_and_si256(raw, nibble));
      odd[j] = _mm256_cvtepi32_ps(_mm256_srli_epi32(raw, 4));
    }
    for (int mi = 0; mi < M; ++mi) {
      const __m256 xe = _mm256_broadcast_ss(s.x + mi * s.ldx + 2 * r);
      const __m256 xo = _mm256_broadcast_ss(s.x + mi * s.ldx + 2 * r + 1);
      for (int j = 0; j < 4; ++j) {
        sum[0][mi][j] = _mm256_fmadd_ps(xe, even[j], sum[0][mi][j]);
        sum[kSets - 1][mi][j] = _mm256_fmadd_ps(xo, odd[j], sum[kSets - 1][mi][j]);
      }
    }
  }
  for (int64_t r = sr0; kFmt == Format::kNf4 && r < sr1; ++r, q += s.ldq) {  // NF4
    const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q));
    const __m256i mask = _mm256_set1_epi8(0x0F);
    __m256 even[4], odd[4];
    Nf4Decode32(planes, _mm256_and_si256(bytes, mask), even);
    Nf4Decode32(planes, _mm256_and_si256(_mm256_srli_epi16(bytes, 4), mask), odd);
    for (int mi = 0; mi < M; ++mi) {
      const __m256 xe = _mm256_broadcast_ss(s.x + mi * s.ldx + 2 * r);
      const __m256 xo = _mm256_broadcast_ss(s.x + mi * s.ldx + 2 * r + 1);
      for (int j = 0; j < 4; ++j) {
        sum[0][mi][j] = _mm256_fmadd_ps(xe, even[j], sum[0][mi][j]);
        sum[kSets - 1][mi][j] = _mm256_fmadd_ps(xo, odd[j], sum[kSets - 1][mi][j]);
      }
    }
  }
  for (int mi = 0; mi < M; ++mi) {
    __m256 total[4], v[4];
    const __m256 shift = _mm256_set1_ps(zero_shift[mi]);
    for (int j = 0; j < 4; ++j) {
      total[j] = kSets == 2 ? _mm256_add_ps(sum[0][mi][j], sum[1][mi][j]) : sum[0][mi][j];
      if (kFmt == Format::kInt4) total[j] = _mm256_sub_ps(total[j], shift);
    }
    if (kFmt == Format::kNf4) {
      ToColumnOrder(total, v);  // the byte-plane decoder's order
    } else {
      for (int j = 0; j < 4; ++j) v[j] = total[j];
    }
    float* a = s.acc + mi * s.ldacc + c;
    for (int j = 0; j < 4; ++j) {
      _mm256_storeu_ps(a + 8 * j, first ? v[j] : _mm256_add_ps(v[j], _mm256_loadu_ps(a + 8 * j)));
    }
  }
}

// The segment's columns [0, 32 * floor(cols / 32)) for M <= 2 into acc, in bands of
// kGemvBand stored rows: each band walks the columns 32 at a time with its sums in registers,
// so the band's rows are read as concurrent streams and acc is touched once per band and
// chunk. int8 and int4 widen their codes to int32 and convert; NF4 decodes through the
// byte-plane code book. Returns the columns done.
constexpr int64_t kGemvBand = 8;

template <Format kFmt, int M>
int64_t GemvBands(const GemvSegment& s) {
  constexpr int kPerRow = kFmt == Format::kInt8 ? 1 : 2;
  const Nf4Planes planes = LoadNf4Planes();  // read by NF4 only
  const int64_t wide_cols = s.cols / 32 * 32;
  const int64_t seg0 = s.r0 / kPerRow, seg1 = s.r1 / kPerRow;  // stored rows
  if (seg0 >= seg1) {
    for (int mi = 0; mi < M; ++mi) std::memset(s.acc + mi * s.ldacc, 0, sizeof(float) * wide_cols);
    return wide_cols;
  }
  const int64_t bands = (seg1 - seg0 + kGemvBand - 1) / kGemvBand;
  const bool l1 = PrefetchRowsIntoL1();
  for (int64_t sr0 = seg0; sr0 < seg1; sr0 += kGemvBand) {
    const int64_t sr1 = std::min(seg1, sr0 + kGemvBand);
    float zero_shift[M] = {};
    for (int mi = 0; kFmt == Format::kInt4 && mi < M; ++mi) {
      for (int64_t r = 2 * sr0; r < 2 * sr1; ++r) zero_shift[mi] += s.x[mi * s.ldx + r];
      zero_shift[mi] *= kInt4ZeroPoint;
    }
    for (int64_t c = 0; c < wide_cols; c += 32) {
      // This band's share of the segment's scale lines for the chunk, which the flush reads.
      PrefetchLines(s.scale + c, 2, (sr0 - seg0) / kGemvBand, bands);
      // kPrefetchBytes along the band's rows and on into the next band's at the end of the
      // columns (M = 1 from memory: 4-15 %, Zen 4 pinned to AVX2); into L1 on Intel: int8
      // 4-7 %, int4 1-5 % faster than L2 at M = 1 and 2 (Xeon pinned to AVX2, harness).
      if (c % 64 == 0) {
        const uintptr_t next = BandAhead(s, sr0, sr1, c + kPrefetchBytes, wide_cols);
        for (int64_t r = 0; r < kGemvBand; ++r) {
          PrefetchRow(reinterpret_cast<const void*>(next + r * s.ldq), l1);
        }
      }
      GemvBandChunk<kFmt, M>(s, planes, sr0, sr1, c, sr0 == seg0, zero_shift);
    }
  }
  return wide_cols;
}

// M = 3..kGemvAvx2MaxM: all M rows of a kW x 8-column sliver (kW = 2 up to M = 4, else 1)
// in registers over kSliverBand stored rows, each decode feeding M x kW FMAs whose
// activations come from a row-interleaved copy of the band's (rows of x a multiple of 4 KiB
// apart would share one L1 set). Returns the columns done (a multiple of 8 * kW).
constexpr int64_t kSliverBand = 32;

template <Format kFmt, int M>
int64_t SliverBands(const GemvSegment& s) {
  constexpr int kW = M <= 4 ? 2 : 1;  // ymm per row: the sums and decodes fit 16 registers
  constexpr int64_t kPerRow = kFmt == Format::kInt8 ? 1 : 2;
  const int64_t wide = s.cols / (8 * kW) * (8 * kW);
  const int64_t seg0 = s.r0 / kPerRow, seg1 = s.r1 / kPerRow;
  if (seg0 >= seg1) {
    for (int mi = 0; mi < M; ++mi) std::memset(s.acc + mi * s.ldacc, 0, sizeof(float) * wide);
    return wide;
  }
  const Nf4Table t = LoadNf4();
  for (int64_t sr0 = seg0; sr0 < seg1; sr0 += kSliverBand) {
    const int64_t sr1 = std::min(seg1, sr0 + kSliverBand);
    const bool first = sr0 == seg0;
    alignas(32) float xb[kSliverBand * kPerRow][M];
    InterleaveRows<M>(s, sr0 * kPerRow, (sr1 - sr0) * kPerRow, xb);
    for (int64_t c = 0; c < wide; c += 8 * kW) {
      __m256 sum[M][kW];
      for (int mi = 0; mi < M; ++mi) {
        for (int w = 0; w < kW; ++w) {
          float* a = s.acc + mi * s.ldacc + c + 8 * w;
          sum[mi][w] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(a);
        }
      }
      const uint8_t* q = s.q + sr0 * s.ldq + s.n0 + c;
      for (int64_t r = sr0; r < sr1; ++r, q += s.ldq) {
        const float* x = xb[(r - sr0) * kPerRow];
        __m256 lo[kW], hi[kW];
        for (int w = 0; w < kW; ++w) {
          const __m256i u = Load8Bytes(q + 8 * w, kFmt == Format::kInt8);
          if (kFmt == Format::kInt8) {
            lo[w] = _mm256_cvtepi32_ps(u);
          } else {
            DecodePair<kFmt>(t, u, &lo[w], &hi[w]);
          }
        }
        for (int mi = 0; mi < M; ++mi) {
          const __m256 xv = _mm256_broadcast_ss(x + mi);
          for (int w = 0; w < kW; ++w) sum[mi][w] = _mm256_fmadd_ps(xv, lo[w], sum[mi][w]);
        }
        if (kFmt != Format::kInt8) {
          for (int mi = 0; mi < M; ++mi) {
            const __m256 xv = _mm256_broadcast_ss(x + M + mi);
            for (int w = 0; w < kW; ++w) sum[mi][w] = _mm256_fmadd_ps(xv, hi[w], sum[mi][w]);
          }
        }
      }
      for (int mi = 0; mi < M; ++mi) {
        for (int w = 0; w < kW; ++w) _mm256_storeu_ps(s.acc + mi * s.ldacc + c + 8 * w, sum[mi][w]);
      }
    }
  }
  return wide;
}

template <Format kFmt, int M>
void GemvSegmentT(const GemvSegment& s) {
  constexpr int kPerRow = kFmt == Format::kInt8 ? 1 : 2;
  constexpr int kGroup = (M == 1 ? 8 : M == 2 ? 4 : 2) / kPerRow;  // stored rows per pass over acc
  const int64_t vec_cols = s.cols / 8 * 8;
  int64_t lr = s.r0;
  bool first = true;
  int64_t c0 = 0;
  if constexpr (M <= 2) {
    c0 = GemvBands<kFmt, M>(s);
  } else {
    c0 = SliverBands<kFmt, M>(s);
  }
  if (vec_cols > c0) {
    for (; lr + kGroup * kPerRow <= s.r1; lr += kGroup * kPerRow, first = false) {
      GemvRows<kFmt, M, kGroup>(s, lr / kPerRow, lr, c0, vec_cols, first);
    }
    for (; lr < s.r1; lr += kPerRow, first = false) {
      GemvRows<kFmt, M, 1>(s, lr / kPerRow, lr, c0, vec_cols, first);
    }
    if (first) {
      for (int mi = 0; mi < M; ++mi) {
        std::memset(s.acc + mi * s.ldacc + c0, 0, sizeof(float) * (vec_cols - c0));
      }
    }
  }
  // Columns past the last multiple of eight, and the flush into y.
  for (int mi = 0; mi < M; ++mi) {
    const float* x = s.x + mi * s.ldx;
    float* acc = s.acc + mi * s.ldacc;
    for (int64_t c = vec_cols; c < s.cols; ++c) {
      float v = 0.0f;
      for (int64_t r = s.r0; r < s.r1; ++r) v += x[r] * Unscaled(kFmt, s.q, s.ldq, r, s.n0 + c);
      acc[c] = v;
    }
    float* y = s.y + mi * s.ldy;
    const float* scale = s.scale;
    int64_t c = 0;
    for (; c < vec_cols; c += 8) {
      _mm256_storeu_ps(y + c, _mm256_fmadd_ps(_mm256_loadu_ps(scale + c), _mm256_loadu_ps(acc + c),
                                              _mm256_loadu_ps(y + c)));
    }
    for (; c < s.cols; ++c) y[c] += scale[c] * acc[c];
  }
}

template <Format kFmt>
void GemvSegmentF(const GemvSegment& s) {
  static_assert(kGemvAvx2MaxM == 8, "one case per M");
  switch (s.m) {
    case 1: return GemvSegmentT<kFmt, 1>(s);
    case 2: return GemvSegmentT<kFmt, 2>(s);
    case 3: return GemvSegmentT<kFmt, 3>(s);
    case 4: return GemvSegmentT<kFmt, 4>(s);
    case 5: return GemvSegmentT<kFmt, 5>(s);
    case 6: return GemvSegmentT<kFmt, 6>(s);
    case 7: return GemvSegmentT<kFmt, 7>(s);
    default: return GemvSegmentT<kFmt, 8>(s);
  }
}

void GemvSegmentAvx2(const GemvSegment& s) {
  WithFormat(s.fmt, [&](auto tag) { GemvSegmentF<decltype(tag)::value>(s); });
}

// --- Panel decoding ------------------------------------------------------------------

// Decodes the full slivers of a panel, walking the stored rows in order (each row's
// columns are contiguous in memory) and writing every sliver's part of that row.
template <Format kFmt>
void DecodeFullSlivers(const DecodePanel& d, int64_t slivers) {
  const Nf4Table t = LoadNf4();
  const Nf4Planes planes = LoadNf4Planes();
  const int64_t rows = d.r1 - d.r0;
  constexpr int kStep = kFmt == Format::kInt8 ? 1 : 2;  // logical rows per stored row
  for (int64_t r = d.r0; r < d.r1; r += kStep) {
    const float* srow = d.scale + (r / d.block_size) * d.lds + d.n0;
    const uint8_t* q = d.q + (r / kStep) * d.ldq + d.n0;
    float* out = d.panel + (r - d.r0) * kNr;
    // Rows are a page apart, too far for the hardware prefetcher to follow.
    Prefetch(q + kPrefetchRows * d.ldq, slivers * kNr);
    int64_t j = 0;
    if constexpr (kFmt == Format::kNf4) {
      // Two slivers (32 columns) per step with the byte-plane decoder.
      for (; j + 2 <= slivers; j += 2, q += 2 * kNr, srow += 2 * kNr, out += 2 * rows * kNr) {
        __m256 fe[4], fo[4], even[4], odd[4];
        Nf4DecodePairs32(planes, q, fe, fo);
        ToColumnOrder(fe, even);
        ToColumnOrder(fo, odd);
        for (int h = 0; h < 2; ++h) {
          float* o = out + h * rows * kNr;
          const __m256 s0 = _mm256_loadu_ps(srow + h * kNr), s1 = _mm256_loadu_ps(srow + h * kNr + 8);
          _mm256_storeu_ps(o, _mm256_mul_ps(even[2 * h], s0));
          _mm256_storeu_ps(o + 8, _mm256_mul_ps(even[2 * h + 1], s1));
          _mm256_storeu_ps(o + kNr, _mm256_mul_ps(odd[2 * h], s0));
          _mm256_storeu_ps(o + kNr + 8, _mm256_mul_ps(odd[2 * h + 1], s1));
        }
      }
    }
    for (; j < slivers; ++j, q += kNr, srow += kNr, out += rows * kNr) {
      const __m256 s0 = _mm256_loadu_ps(srow), s1 = _mm256_loadu_ps(srow + 8);
      if (kFmt == Format::kInt8) {
        _mm256_storeu_ps(out, _mm256_mul_ps(_mm256_cvtepi32_ps(Load8Bytes(q, true)), s0));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(Load8Bytes(q + 8, true)), s1));
      } else {
        __m256 e0, o0, e1, o1;
        DecodePair<kFmt>(t, Load8Bytes(q, false), &e0, &o0);
        DecodePair<kFmt>(t, Load8Bytes(q + 8, false), &e1, &o1);
        _mm256_storeu_ps(out, _mm256_mul_ps(e0, s0));
        _mm256_storeu_ps(out + 8, _mm256_mul_ps(e1, s1));
        _mm256_storeu_ps(out + kNr, _mm256_mul_ps(o0, s0));
        _mm256_storeu_ps(out + kNr + 8, _mm256_mul_ps(o1, s1));
      }
    }
  }
}

void DecodePanelAvx2(const DecodePanel& d) {
  const int64_t rows = d.r1 - d.r0;
  const int64_t full = d.cols / kNr;
  WithFormat(d.fmt, [&](auto tag) { DecodeFullSlivers<decltype(tag)::value>(d, full); });
  if (full * kNr < d.cols) {
    // The ragged last sliver, element by element: vector loads could run past the row.
    DecodePanel ragged = d;
    ragged.n0 = d.n0 + full * kNr;
    ragged.cols = d.cols - full * kNr;
    ragged.panel = d.panel + full * rows * kNr;
    DecodePanelPortable(ragged);
  }
}

// --- GEMM micro-kernel ---------------------------------------------------------------

// Named accumulators rather than an array: GCC keeps arrays of vectors on the stack and
// stores them on every iteration, which halves the FMA rate.
#define JAXCORE_ROW(i)                                          \
  if constexpr (MR > i) {                                       \
    const __m256 av = _mm256_broadcast_ss(a + k * kMr + i);     \
    c##i##0 = _mm256_fmadd_ps(av, b0, c##i##0);                  \
    c##i##1 = _mm256_fmadd_ps(av, b1, c##i##1);                  \
  }

// Rows one call of the AVX2 micro-kernel holds in registers (two ymm per row); a kMr-row
// micro-panel takes two calls over the same sliver.
constexpr int kAvx2Mr = 6;

template <int MR>
void MicroKernelT(int64_t kc, const float* a, const float* b, float* c, int64_t ldc,
                  bool accumulate, int cols) {
  static_assert(MR >= 1 && MR <= kAvx2Mr, "micro-tile rows");
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00,
         c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNr);
    const __m256 b1 = _mm256_loadu_ps(b + k * kNr + 8);
    JAXCORE_ROW(0)
    JAXCORE_ROW(1)
    JAXCORE_ROW(2)
    JAXCORE_ROW(3)
    JAXCORE_ROW(4)
    JAXCORE_ROW(5)
  }
  const __m256 acc[kAvx2Mr][2] = {{c00, c01}, {c10, c11}, {c20, c21},
                                  {c30, c31}, {c40, c41}, {c50, c51}};
  for (int i = 0; i < MR; ++i) {
    float* ci = c + i * ldc;
    if (cols == kNr) {
      __m256 lo = acc[i][0], hi = acc[i][1];
      if (accumulate) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(ci));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(ci + 8));
      }
      _mm256_storeu_ps(ci, lo);
      _mm256_storeu_ps(ci + 8, hi);
    } else {
      alignas(32) float tile[kNr];
      _mm256_store_ps(tile, acc[i][0]);
      _mm256_store_ps(tile + 8, acc[i][1]);
      for (int j = 0; j < cols; ++j) ci[j] = accumulate ? ci[j] + tile[j] : tile[j];
    }
  }
}
#undef JAXCORE_ROW

void MicroKernelAvx2(int mr, int64_t kc, const float* a, const float* b, float* c,
                     int64_t ldc, bool accumulate, int cols) {
  static_assert(kMr <= 2 * kAvx2Mr, "two calls cover a micro-panel");
  if (mr > kAvx2Mr) {
    MicroKernelT<kAvx2Mr>(kc, a, b, c, ldc, accumulate, cols);
    a += kAvx2Mr;  // the panel's rows stay kMr apart along k
    c += kAvx2Mr * ldc;
    mr -= kAvx2Mr;
  }
  switch (mr) {
    case 1: return MicroKernelT<1>(kc, a, b, c, ldc, accumulate, cols);
    case 2: return MicroKernelT<2>(kc, a, b, c, ldc, accumulate, cols);
    case 3: return MicroKernelT<3>(kc, a, b, c, ldc, accumulate, cols);
    case 4: return MicroKernelT<4>(kc, a, b, c, ldc, accumulate, cols);
    case 5: return MicroKernelT<5>(kc, a, b, c, ldc, accumulate, cols);
    default: return MicroKernelT<6>(kc, a, b, c, ldc, accumulate, cols);
  }
}

}  // namespace

const KernelTable& Avx2Kernels() {
  static const KernelTable table = [] {
    KernelTable t = {GemvSegmentAvx2, DecodePanelAvx2, MicroKernelAvx2, Q8QuantizeAvx2,
                     Q8SegmentPortable};
    t.q8_task = Q8TaskAvx2;  // the planner then never calls q8_segment
    t.expand_half = ExpandHalfAvx2;
    t.expand_dq = ExpandDqAvx2;
    t.nt_rows = NtRowsAvx2;
    t.nt_decode_panel = NtDecodePanelAvx2;
    // Rows through M = 8 (M = 4: 0.31x-0.44x of dense against the GEMM's 0.78x-0.81x); at
    // M = 16 the GEMM is level for int8 and int4 and 0.87x against 1.20x for NF4 (Zen 4
    // pinned to AVX2, K = N = 4096, 2 threads).
    t.nt_rows_max_m = 12;
    t.gemv_max_m = kGemvAvx2MaxM;  // the GEMM path at M = 5..8 measured 12-35 % slower
    // On Intel, int8 and int4 run M = 9..12 as two passes of the GEMV, which beat the GEMM
    // there (benchmarks/quantized_matmul.py --isa avx2, M = 12, float32: int8 0.37x of dense
    // against 0.49x, int4 0.37x against 0.43x, int8 in blocks of 32 level). At M = 16 the
    // GEMM was level or ahead for all but per-channel int8, and for NF4 (two code-book
    // lookups per decode, paid once per pass) from M = 12 (Xeon VM pinned to AVX2, K = N =
    // 4096, 2 threads, weights from memory). On Zen 4 pinned to AVX2 the GEMM / the passes
    // through JAX (benchmarks/cpu_kernels_ab.py, three runs) took int8 0.98-1.14 at M = 9,
    // 0.96-1.06 at M = 10 and 0.92-1.00 at M = 11 and 12, int4 0.80-0.94 from M = 9, so
    // there int8 keeps the passes through M = 10 and int4 takes the GEMM past M = 8.
    const bool intel = IntelCpu();
    t.gemv_auto_max_m[static_cast<int>(Format::kInt8)] = intel ? 12 : 10;
    if (intel) t.gemv_auto_max_m[static_cast<int>(Format::kInt4)] = 12;
    // Every M: at M = 256 the int8 products take 0.53x (int4) to 0.80x (int8, NF4) of the
    // float32 GEMM's time (Zen 4 pinned to AVX2, 2 threads).
    t.q8_max_m = int64_t{1} << 40;
    return t;
  }();
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
