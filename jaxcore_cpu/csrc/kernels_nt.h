// The kernels of the transposed product y = x @ W^T (qmm.h, Problem::transposed; transposed.cc
// runs them), written once with GCC vector extensions and compiled per instruction set:
// kernels_nt.cc (portable: SSE2 on x86-64, NEON on aarch64, 4 floats per vector),
// kernels_nt_avx2.cc (8) and kernels_nt_avx512.cc (16). Include only from those three sources.
// Two kernels: the row kernel (nt_rows, few activation rows, below) and the transposing panel
// decoder (nt_decode_panel, TransposedPanel) that the GEMM runs over for many.
//
// W is stored (K, N) with its rows contiguous along N, the axis this product sums over, so
// each output y[m][r] is a dot product of activations with stored row r. The caller folds
// the row's scale block into the activations (xs[m][c] = x[m][c] * scale[r / block][c]), so
// the kernel multiplies them by the unscaled codes (q, v - 8 or the NF4 code), decoded in
// registers: a tile of kMaxMr activation rows times four weight rows keeps its sums in
// vector registers across the columns and adds them across lanes once at the end.
#ifndef JAXCORE_CPU_CSRC_KERNELS_NT_H_
#define JAXCORE_CPU_CSRC_KERNELS_NT_H_

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

namespace jaxcore_cpu {
namespace internal {
// Internal linkage: each instruction set's source compiles its own copy.
namespace {
namespace nt {

#if defined(__AVX512F__)
constexpr int kW = 16;
constexpr int kMaxMr = 4;  // 16 sums + 4 decoded rows + 1 activation of 32 registers
#elif defined(__AVX2__)
constexpr int kW = 8;
constexpr int kMaxMr = 2;  // 8 sums + 4 decoded rows + 1 activation of 16 registers
#else
constexpr int kW = 4;
constexpr int kMaxMr = 2;
#endif
constexpr int kRows = 4;  // weight rows per tile (two stored rows of a 4-bit format)

typedef float Vf __attribute__((vector_size(4 * kW)));
typedef int32_t Vi __attribute__((vector_size(4 * kW)));

inline Vf LoadF(const float* p) {
  Vf v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// kW bytes from p widened to int32 lanes, with sign or with zeros. The instructions are
// spelled out: GCC 12 turns __builtin_convertvector of byte vectors into scalar code.
template <bool kSigned>
inline Vi Widen(const uint8_t* p) {
#if defined(__AVX512F__)
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return reinterpret_cast<Vi>(kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
#elif defined(__AVX2__)
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return reinterpret_cast<Vi>(kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
#elif defined(__x86_64__)
  int32_t word;
  std::memcpy(&word, p, sizeof(word));
  const __m128i b = _mm_cvtsi32_si128(word);
  if constexpr (kSigned) {
    const __m128i b16 = _mm_unpacklo_epi8(b, b);  // each byte twice: its sign lands on top
    return reinterpret_cast<Vi>(_mm_srai_epi32(_mm_unpacklo_epi16(b16, b16), 24));
  } else {
    const __m128i zero = _mm_setzero_si128();
    return reinterpret_cast<Vi>(_mm_unpacklo_epi16(_mm_unpacklo_epi8(b, zero), zero));
  }
#elif defined(__aarch64__)
  uint32_t word;
  std::memcpy(&word, p, sizeof(word));
  const uint8x8_t b = vreinterpret_u8_u32(vdup_n_u32(word));
  if constexpr (kSigned) {
    return reinterpret_cast<Vi>(vmovl_s16(vget_low_s16(vmovl_s8(vreinterpret_s8_u8(b)))));
  } else {
    return reinterpret_cast<Vi>(vmovl_u16(vget_low_u16(vmovl_u8(b))));
  }
#else
  Vi v;
  for (int i = 0; i < kW; ++i) {
    v[i] = kSigned ? static_cast<int32_t>(static_cast<int8_t>(p[i])) : static_cast<int32_t>(p[i]);
  }
  return v;
#endif
}

inline Vf Fma(Vf a, Vf b, Vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__FMA__)
  return _mm256_fmadd_ps(a, b, c);
#elif defined(__aarch64__)
  return vfmaq_f32(c, a, b);
#else
  return a * b + c;
#endif
}

inline float Sum(Vf v) {
  float s = 0.0f;
  for (int i = 0; i < kW; ++i) s += v[i];
  return s;
}

// The 16 unscaled values of a 4-bit format's codes, looked up by the int32 lanes of idx
// (each 0..15).
struct CodeBook {
  float value[16];
  Vf Lookup(Vi idx) const {
#if defined(__AVX512F__)
    return __builtin_shuffle(LoadF(value), idx);
#elif defined(__AVX2__)
    // Codes 0-7 from the first half, 8-15 from the second: bit 3 becomes the blend's sign bit.
    const __m256i i = reinterpret_cast<__m256i>(idx);
    const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(value), i);
    const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(value + 8), i);
    return reinterpret_cast<Vf>(_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i, 28))));
#elif defined(__aarch64__)
    // One 64-byte table lookup: byte b of lane i is byte 4 * idx[i] + b of the table.
    const uint8x16x4_t table = vld1q_u8_x4(reinterpret_cast<const uint8_t*>(value));
    const uint32x4_t at = vmlaq_n_u32(vdupq_n_u32(0x03020100u), reinterpret_cast<uint32x4_t>(idx),
                                      0x04040404u);
    return reinterpret_cast<Vf>(vqtbl4q_u8(table, vreinterpretq_u8_u32(at)));
#else
    Vf out;  // SSE2 has no variable shuffle: the lookups go one by one
    for (int i = 0; i < kW; ++i) out[i] = value[idx[i] & 15];
    return out;
#endif
  }
};

inline CodeBook BookOf(Format fmt) {
  CodeBook b;
  for (int v = 0; v < 16; ++v) {
    b.value[v] = fmt == Format::kNf4 ? kNf4Code[v] : static_cast<float>(v) - kInt4ZeroPoint;
  }
  return b;
}

// The unscaled values of a 4-bit format's codes v (each 0..15): v - 8, or the NF4 code.
template <Format kFmt>
inline Vf Codes(Vi v, const CodeBook& book) {
  if constexpr (kFmt == Format::kInt4) return __builtin_convertvector(v - 8, Vf);
  return book.Lookup(v);
}

// Decoded columns [c, c + kW) of logical rows r .. r + kR - 1 (r even for 4-bit formats).
template <Format kFmt, int kR>
inline void Decode(const NtPiece& p, const CodeBook& book, int64_t r, int64_t c, Vf w[kR]) {
  const uint8_t* q = p.q + p.n0 + c;
  if constexpr (kFmt == Format::kInt8) {
    for (int j = 0; j < kR; ++j) {
      w[j] = __builtin_convertvector(Widen<true>(q + (r + j) * p.ldq), Vf);
    }
  } else {
    static_assert(kR % 2 == 0, "4-bit rows come in stored pairs");
    for (int j = 0; j < kR; j += 2) {
      const Vi u = Widen<false>(q + ((r + j) >> 1) * p.ldq);
      w[j] = Codes<kFmt>(u & 15, book);
      w[j + 1] = Codes<kFmt>(u >> 4, book);
    }
  }
}

// Stored rows of a tile of kR logical rows.
template <Format kFmt, int kR>
constexpr int kStoredRows = kFmt == Format::kInt8 ? kR : kR / 2;

// y[m0 + i][r + j] += sum_c xs[m0 + i][c] * u[r + j][n0 + c] for i < kMr, j < kR. With
// `ahead` nonzero, it prefetches the next tile's kStoredRows stored rows (from address `ahead`
// on, one line per row per 64 bytes walked) into L2: each stored row starts a new stream, which
// the hardware prefetchers would only pick up after its first misses. An integer: rows past the
// weight's last are never read, and a prefetch does not fault.
template <Format kFmt, int kMr, int kR>
inline void Tile(const NtPiece& p, const CodeBook& book, int64_t m0, int64_t r,
                 uintptr_t ahead) {
  Vf acc[kMr][kR];
  for (int i = 0; i < kMr; ++i) {
    for (int j = 0; j < kR; ++j) acc[i][j] = Vf{};
  }
  const int64_t full = p.cols / kW * kW;
  for (int64_t c = 0; c < full; c += kW) {
    if (ahead != 0 && c % 64 == 0) {  // a stored row holds one byte per column
      for (int j = 0; j < kStoredRows<kFmt, kR>; ++j) {
        __builtin_prefetch(reinterpret_cast<const void*>(ahead + j * p.ldq + c), 0, 2);
      }
    }
    Vf w[kR];
    Decode<kFmt, kR>(p, book, r, c, w);
    for (int i = 0; i < kMr; ++i) {
      const Vf xv = LoadF(p.xs + (m0 + i) * p.ldxs + c);
      for (int j = 0; j < kR; ++j) acc[i][j] = Fma(xv, w[j], acc[i][j]);
    }
  }
  for (int i = 0; i < kMr; ++i) {
    const float* xs = p.xs + (m0 + i) * p.ldxs;
    for (int j = 0; j < kR; ++j) {
      float s = Sum(acc[i][j]);
      for (int64_t c = full; c < p.cols; ++c) {
        s += xs[c] * Unscaled(kFmt, p.q, p.ldq, r + j, p.n0 + c);
      }
      p.y[(m0 + i) * p.ldy + r + j] += s;
    }
  }
}

// Every activation row's tiles over logical rows r .. r + kR - 1; the first prefetches the
// next tile's rows (those from `next` on, if any are left in the piece). Each tile of
// activation rows decodes the weight rows again: decoding them once into a buffer that the
// tiles share ran 10-20 % slower with AVX-512 at M = 16 and up to 2x with AVX2 at M = 4 (Zen 4,
// K = N = 4096; the buffer then lives in L2 beside the activations).
template <Format kFmt, int kR>
inline void RowTiles(const NtPiece& p, const CodeBook& book, int64_t r, int64_t next) {
  uintptr_t ahead = 0;
  if (next < p.r1) {
    ahead = reinterpret_cast<uintptr_t>(p.q) +
            ((kFmt == Format::kInt8 ? next : next / 2) * p.ldq + p.n0);
  }
  int64_t m0 = 0;
  for (; m0 + kMaxMr <= p.m; m0 += kMaxMr, ahead = 0) {
    Tile<kFmt, kMaxMr, kR>(p, book, m0, r, ahead);
  }
  switch (p.m - m0) {
    case 0:
      break;
    case 1:
      Tile<kFmt, 1, kR>(p, book, m0, r, ahead);
      break;
    case 2:
      if constexpr (kMaxMr > 2) Tile<kFmt, 2, kR>(p, book, m0, r, ahead);
      break;
    default:
      if constexpr (kMaxMr > 3) Tile<kFmt, 3, kR>(p, book, m0, r, ahead);
      break;
  }
}

template <Format kFmt>
inline void Rows(const NtPiece& p) {
  const CodeBook book = BookOf(kFmt);
  int64_t r = p.r0;
  for (; r + kRows <= p.r1; r += kRows) RowTiles<kFmt, kRows>(p, book, r, r + kRows);
  if constexpr (kFmt == Format::kInt8) {
    for (; r < p.r1; ++r) RowTiles<kFmt, 1>(p, book, r, p.r1);
  } else {
    for (; r < p.r1; r += 2) RowTiles<kFmt, 2>(p, book, r, p.r1);
  }
}

// Scaled weights of logical row k, reduction columns [col, col + 16): out[t] =
// u[k][col + t] * srow[col + t].
template <Format kFmt>
inline void DecodeRow16(const DecodePanel& d, const CodeBook& book, int64_t k, int64_t col,
                        const float* srow, float out[16]) {
  const uint8_t* q = d.q + (kFmt == Format::kInt8 ? k : k >> 1) * d.ldq + col;
  for (int h = 0; h < 16; h += kW) {
    Vf w;
    if constexpr (kFmt == Format::kInt8) {
      w = __builtin_convertvector(Widen<true>(q + h), Vf);
    } else {
      const Vi u = Widen<false>(q + h);
      w = Codes<kFmt>((k & 1) ? (u >> 4) : (u & 15), book);
    }
    w *= LoadF(srow + col + h);
    std::memcpy(out + h, &w, sizeof(w));
  }
}

// The transposing panel decoder (KernelTable::nt_decode_panel): rows [r0, r1) of d are
// columns of N (the product's depth), its columns [n0, n0 + cols) rows of W:
//   panel[j][r - r0][i] = W[n0 + j * kNr + i][r] * scale[(n0 + j * kNr + i) / block][r]
// (zero past cols). Each weight row's 16 columns are decoded as vectors, then the 16 x 16
// block goes into the sliver transposed.
template <Format kFmt>
inline void TransposedPanel(const DecodePanel& d) {
  const CodeBook book = BookOf(kFmt);
  const int64_t depth = d.r1 - d.r0;
  for (int64_t j = 0; j * kNr < d.cols; ++j) {
    float* sliver = d.panel + j * depth * kNr;
    const int64_t rows = std::min<int64_t>(kNr, d.cols - j * kNr);
    for (int64_t r = d.r0; r < d.r1; r += 16) {
      const int64_t len = std::min<int64_t>(16, d.r1 - r);
      alignas(64) float block[kNr][16];
      for (int64_t i = 0; i < kNr; ++i) {
        const int64_t k = d.n0 + j * kNr + i;
        const float* srow = d.scale + (i < rows ? k / d.block_size : 0) * d.lds;
        if (i >= rows) {
          std::fill(block[i], block[i] + 16, 0.0f);
        } else if (len == 16) {
          DecodeRow16<kFmt>(d, book, k, r, srow, block[i]);
        } else {
          for (int64_t t = 0; t < len; ++t) {
            block[i][t] = Unscaled(kFmt, d.q, d.ldq, k, r + t) * srow[r + t];
          }
        }
      }
      float* to = sliver + (r - d.r0) * kNr;
      for (int64_t t = 0; t < len; ++t) {
        for (int i = 0; i < kNr; ++i) to[t * kNr + i] = block[i][t];
      }
    }
  }
}

}  // namespace nt

inline void NtRowsImpl(const NtPiece& p) {
  WithFormat(p.fmt, [&](auto tag) { nt::Rows<decltype(tag)::value>(p); });
}

inline void NtDecodePanelImpl(const DecodePanel& d) {
  WithFormat(d.fmt, [&](auto tag) { nt::TransposedPanel<decltype(tag)::value>(d); });
}

}  // namespace
}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_KERNELS_NT_H_
