// AMX float32-activation GEMV tasks (Precision::kFloat32, kAmxMinM <= M <= kGemvAvx512MaxM;
// NF4 from kAmxNf4MinM), compiled with the AVX-512 and AMX (tile, bf16) flags and only called where
// the CPU has AMX and Linux has granted this process the tile state (AmxUsable, isa.cc).
//
// The AVX-512 GEMV runs one 512-bit FMA per 16 products, so from M = 5 on it is bound by the
// FMA ports. AMX's TDPBF16PS multiplies a tile of M x 32 bf16 activations by one of 32 x 16
// bf16 weights into M x 16 float32 sums in one instruction. Without giving up float32
// precision:
// - int8 and int4 weights are small integers (codes, codes minus 8), exact in bf16; NF4's
//   code book values split into three bf16 parts as the activations do, and eight of the
//   nine products of parts are taken (lo x lo, 2^-28 of x * w, is not);
// - each float32 activation splits into three bf16 parts by truncation, x = hi + mid + lo
//   exactly (8 significant bits each), so every product of a part and a weight is exact in
//   float32 and the three tile products sum to x * w with float32 accumulation, as FMAs do.
// The block scales apply once per block and column, as in the other GEMV kernels.
//
// Tiles: 0-2 the activation parts (M rows x 32 rows of K), 3-4 the decoded weights (16 rows
// of K pairs x 16 columns: TDPBF16PS pairs K rows 2i and 2i + 1 in each 32-bit element, which
// is how a 4-bit byte already stores them; NF4: 3-5, its three parts), 5-7 (NF4: 6-7) a scale
// block's sums. Tasks whose K range or blocks are not whole 32-row steps run on the AVX-512
// GEMV (as NF4 with an infinite activation: see NoInfinities); the last columns past a
// multiple of 16 run as the caller's AVX-512 segments.
//
// Measured on a 2-vCPU Intel Xeon VM with AVX-512 and AMX (K = N = 4096, 2 threads, weights
// from memory; the AVX-512 GEMV's time / this one's): M = 5 1.2x, M = 8 1.5x, M = 16 int4
// 1.7x-1.9x, int8 1.6x-1.8x; NF4 M = 8 0.86x, M = 12 1.06x-1.18x, M = 16 1.25x.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined here (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace jaxcore_cpu {
namespace internal {
namespace {

constexpr int kStep = 32;       // logical rows of K per tile product
constexpr int kGroupCols = 16;  // columns per C tile
// NF4 takes eight tile products per step (int8 and int4 three): fewer rows than this ran
// faster on the AVX-512 GEMV.
constexpr int kAmxNf4MinM = 12;

// The tile configuration (palette 1): tiles 0-2 activations, 3-4 weights, 5-7 sums. The
// stack buffers here take unaligned loads and stores: AddressSanitizer's fake stack frames
// do not keep alignas(64).
struct TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The tile configuration for M rows of activations (a table, not a stack object: compilers
// zero a 64-byte local with aligned stores, which AddressSanitizer's fake stack breaks).
const TileConfig& ConfigFor(int m, bool nf4) {
  static const auto table = [] {
    std::array<TileConfig, 2 * (kGemvAvx512MaxM + 1)> configs{};
    for (int i = 0; i < 2 * (kGemvAvx512MaxM + 1); ++i) {
      const int rows = i % (kGemvAvx512MaxM + 1);
      const int weight_tiles = i > kGemvAvx512MaxM ? 3 : 2;  // NF4: three parts
      TileConfig& config = configs[i];
      for (int tile = 0; tile < 3; ++tile) {
        config.rows[tile] = static_cast<uint8_t>(rows);
        config.colsb[tile] = 2 * kStep;
      }
      for (int tile = 3; tile < 3 + weight_tiles; ++tile) {
        config.rows[tile] = 16;
        config.colsb[tile] = 2 * kStep;
      }
      for (int tile = 3 + weight_tiles; tile < 8; ++tile) {
        config.rows[tile] = static_cast<uint8_t>(rows);
        config.colsb[tile] = 4 * kGroupCols;
      }
    }
    return configs;
  }();
  return table[(nf4 ? kGemvAvx512MaxM + 1 : 0) + m];
}

// Rows [r, r + 32 * steps) of the task's activations as bf16 parts: a[step][part][mi][32].
void SplitActivations(const GemvTask& t, int64_t r, int64_t steps, uint16_t* a) {
  const __m512i keep = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t step = 0; step < steps; ++step) {
    for (int mi = 0; mi < t.m; ++mi) {
      const float* x = t.x + mi * t.ldx + r + step * kStep;
      for (int half = 0; half < 2; ++half) {
        __m512 rest = _mm512_loadu_ps(x + 16 * half);
        // An infinity is its own first part and leaves no remainder (not inf - inf = NaN).
        const __mmask16 finite = static_cast<__mmask16>(~_mm512_fpclass_ps_mask(rest, 0x18));
        for (int part = 0; part < 3; ++part) {
          const __m512i bits = _mm512_and_si512(_mm512_castps_si512(rest), keep);
          rest = _mm512_maskz_sub_ps(finite, rest, _mm512_castsi512_ps(bits));  // exact
          const __m256i bf = _mm512_cvtepi32_epi16(_mm512_srli_epi32(bits, 16));
          uint16_t* out = a + ((step * 3 + part) * t.m + mi) * kStep + 16 * half;
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), bf);
        }
      }
    }
  }
}

// The B tile of 16 columns from stored row `sr` on: b[i][2c + j] = bf16 of logical row
// 2i + j of the step, column c.
template <Format kFmt>
inline void DecodeB(const uint8_t* q, int64_t ldq, uint16_t* b) {
  if (kFmt == Format::kInt4) {
    // Word table: entry e holds bf16((e & 15) - 8). A byte v widened to 32 bits and or-ed
    // with itself shifted left by 12 indexes it by its low nibble (low word: bits 0-4, the
    // fifth ignored by the table) and its high nibble (high word: bits 16-19).
    alignas(64) static const uint16_t kTable[32] = {
        0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
        0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0,
        0xC100, 0xC0E0, 0xC0C0, 0xC0A0, 0xC080, 0xC040, 0xC000, 0xBF80,
        0x0000, 0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0, 0x40E0};
    const __m512i table = _mm512_load_si512(kTable);
    for (int i = 0; i < 16; ++i) {
      const __m512i u = _mm512_cvtepu8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i * ldq)));
      const __m512i idx = _mm512_or_si512(u, _mm512_slli_epi32(u, 12));
      _mm512_storeu_si512(b + 32 * i, _mm512_permutexvar_epi16(idx, table));
    }
  } else {
    // int8: rows 2i and 2i + 1 are stored rows of their own; a small integer's float32
    // truncates exactly to bf16 (its high 16 bits).
    const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
    for (int i = 0; i < 16; ++i) {
      const __m512 even = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 2 * i * ldq))));
      const __m512 odd = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + (2 * i + 1) * ldq))));
      const __m512i pair = _mm512_ternarylogic_epi32(
          high, _mm512_castps_si512(odd), _mm512_srli_epi32(_mm512_castps_si512(even), 16),
          0xEA);  // (high & odd) | even >> 16
      _mm512_storeu_si512(b + 32 * i, pair);
    }
  }
}

// NF4's three B tiles of 16 columns (as DecodeB): its code book's values split by truncation
// into three bf16 parts, v = hi + mid + lo exactly (a float32's 24 significant bits).
inline void DecodeNf4B(const uint8_t* q, int64_t ldq, uint16_t (*b)[16 * kStep]) {
  static const auto tables = [] {
    std::array<std::array<uint16_t, 32>, 3> t{};
    for (int e = 0; e < 32; ++e) {
      float rest = kNf4Code[e & 15];
      for (int part = 0; part < 3; ++part) {
        uint32_t bits;
        std::memcpy(&bits, &rest, sizeof(bits));
        bits &= 0xFFFF0000u;
        float head;
        std::memcpy(&head, &bits, sizeof(head));
        rest -= head;  // exact
        t[part][e] = static_cast<uint16_t>(bits >> 16);
      }
    }
    return t;
  }();
  const __m512i hi = _mm512_loadu_si512(tables[0].data());
  const __m512i mid = _mm512_loadu_si512(tables[1].data());
  const __m512i lo = _mm512_loadu_si512(tables[2].data());
  for (int i = 0; i < 16; ++i) {
    const __m512i u =
        _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i * ldq)));
    const __m512i idx = _mm512_or_si512(u, _mm512_slli_epi32(u, 12));  // as DecodeB's int4
    _mm512_storeu_si512(b[0] + 32 * i, _mm512_permutexvar_epi16(idx, hi));
    _mm512_storeu_si512(b[1] + 32 * i, _mm512_permutexvar_epi16(idx, mid));
    _mm512_storeu_si512(b[2] + 32 * i, _mm512_permutexvar_epi16(idx, lo));
  }
}

// GCC's tile intrinsics paste their tile numbers into the instruction text, so the numbers
// must be literal: macros, not template parameters.
//
// One NF4 step: the activation tiles of the step at `at`, the weights' three parts (decoded
// before) in tiles 3-5, then the eight products of an activation part and a weight part
// whose sizes reach float32's (all but lo x lo, 2^-28 of x * w) into the block's C tile kC.
// The next item's weights are decoded into the same buffers once their tile loads are
// issued.
#define JAXCORE_AMX_NF4_STEP(kC)                                     \
  do {                                                               \
    _tile_loadd(0, at, 2 * kStep);                                   \
    _tile_loadd(1, at + m * kStep, 2 * kStep);                       \
    _tile_loadd(2, at + 2 * m * kStep, 2 * kStep);                   \
    _tile_loadd(3, b[0], 2 * kStep);                                 \
    _tile_loadd(4, b[1], 2 * kStep);                                 \
    _tile_loadd(5, b[2], 2 * kStep);                                 \
    if (item + 1 < items) DecodeNf4B(rows_of(item + 1), t.ldq, b);    \
    _tile_dpbf16ps(kC, 0, 3);                                        \
    _tile_dpbf16ps(kC, 1, 3);                                        \
    _tile_dpbf16ps(kC, 2, 3);                                        \
    _tile_dpbf16ps(kC, 0, 4);                                        \
    _tile_dpbf16ps(kC, 1, 4);                                        \
    _tile_dpbf16ps(kC, 2, 4);                                        \
    _tile_dpbf16ps(kC, 0, 5);                                        \
    _tile_dpbf16ps(kC, 1, 5);                                        \
  } while (0)

// One int8 or int4 step: the activation tiles of the step at `at`, the B tile kB (decoded
// before), then the three parts' products into the block's C tile kC, after decoding the
// next item's weights into the other buffer (so that their stores reach the cache before
// their tile load).
#define JAXCORE_AMX_STEP(kC, kB)                                     \
  do {                                                               \
    _tile_loadd(0, at, 2 * kStep);                                   \
    _tile_loadd(1, at + m * kStep, 2 * kStep);                       \
    _tile_loadd(2, at + 2 * m * kStep, 2 * kStep);                   \
    _tile_loadd(kB, b[item & 1], 2 * kStep);                         \
    if (item + 1 < items) DecodeB<kFmt>(rows_of(item + 1), t.ldq, b[(item + 1) & 1]); \
    _tile_dpbf16ps(kC, 0, kB);                                       \
    _tile_dpbf16ps(kC, 1, kB);                                       \
    _tile_dpbf16ps(kC, 2, kB);                                       \
  } while (0)

// The task's columns [0, wide) (a multiple of 16) over its K range (whole steps), its sums
// in `sums` (sums[pass][mi][16], added to).
//
// The K range goes in bands of kGemvTaskBand rows, each band's activations split once. A
// pass takes one column group (16 columns) through the band's steps, its sums in registers;
// each scale block's products sum in a C tile, which is stored and scaled into them. A
// pass reads 16 bytes of each stored row of the band, rows a multiple of 4 KiB apart, so the
// band (not the whole K range) is what the next three passes find in L2 again; the next
// chunk's lines are prefetched as the passes go.
//
// The tile products are pipelined, so nothing waits on one's result until it must: blocks
// take C tiles 5, 6 and 7 (NF4: 6 and 7) in turn, a block's sums are read back only after
// the next block has been issued, and the weights of the next (pass, step) are decoded while
// the tiles multiply this one's.
template <Format kFmt, int M>
void TaskPasses(const GemvTask& t, int64_t wide, float* sums, uint16_t* a) {
  constexpr int64_t kRowsPerStored = kFmt == Format::kInt8 ? 1 : 2;
  constexpr int64_t kStoredPerStep = kStep / kRowsPerStored;
  constexpr int m = M;
  constexpr int kSumTiles = kFmt == Format::kNf4 ? 2 : 3;  // C tiles taken in turn
  // int8 / int4: by item parity; NF4: its three parts.
  alignas(64) uint16_t b[3][16 * kStep];
  alignas(64) float c[3][M * kGroupCols];  // by block, in turn
  const int64_t b0 = t.r0 / t.block_size;
  const int64_t passes = wide / kGroupCols;
  for (int64_t band0 = t.r0; band0 < t.r1; band0 += kGemvTaskBand) {
    const int64_t steps = (std::min(t.r1, band0 + kGemvTaskBand) - band0) / kStep;
    SplitActivations(t, band0, steps, a);
    const int64_t items = passes * steps;
    // Item i: pass i / steps, step i % steps of the band.
    const auto rows_of = [&](int64_t item) {
      const int64_t sr = (band0 + item % steps * kStep) / kRowsPerStored;
      return t.q + sr * t.ldq + t.n0 + item / steps * kGroupCols;
    };
    if constexpr (kFmt == Format::kNf4) {
      DecodeNf4B(rows_of(0), t.ldq, b);
    } else {
      DecodeB<kFmt>(rows_of(0), t.ldq, b[0]);
    }
    int64_t item = 0;
    for (int64_t pass = 0; pass < passes; ++pass) {
      const int64_t c0 = pass * kGroupCols;
      float* ps = sums + pass * M * kGroupCols;
      __m512 y[M];
      for (int mi = 0; mi < M; ++mi) y[mi] = _mm512_loadu_ps(ps + mi * kGroupCols);
      // y += scale * sums of the block whose sums wait in c[tile].
      const auto add = [&](int64_t block, int tile) {
        const __m512 sc = _mm512_loadu_ps(t.scale + (block - b0) * t.lds + c0);
        for (int mi = 0; mi < M; ++mi) {
          y[mi] = _mm512_fmadd_ps(sc, _mm512_loadu_ps(c[tile] + mi * kGroupCols), y[mi]);
        }
      };
      // A quarter of the next chunk's lines per pass (four passes per 64-column chunk).
      const int64_t stored = steps * kStoredPerStep;
      const int64_t quarter = (stored + 3) / 4;
      const uint8_t* next = t.q + band0 / kRowsPerStored * t.ldq + t.n0 + (c0 | 63) + 1;
      for (int64_t i = (pass & 3) * quarter; i < std::min(stored, (pass & 3) * quarter + quarter);
           ++i) {
        _mm_prefetch(reinterpret_cast<const char*>(next + i * t.ldq), _MM_HINT_T1);
      }
      int tile = 0;
      int64_t pending = -1;  // the block whose sums wait to be added, in c[pending_tile]
      int pending_tile = 0;
      for (int64_t st = 0; st < steps;) {
        const int64_t block = (band0 + st * kStep) / t.block_size;
        const int64_t end = std::min(steps, ((block + 1) * t.block_size - band0) / kStep);
        const int ctile = (kFmt == Format::kNf4 ? 6 : 5) + tile;
        if (ctile == 5) _tile_zero(5);
        if (ctile == 6) _tile_zero(6);
        if (ctile == 7) _tile_zero(7);
        for (; st < end; ++st, ++item) {
          const uint16_t* at = a + st * 3 * m * kStep;
          if constexpr (kFmt == Format::kNf4) {
            if (tile == 0) {
              JAXCORE_AMX_NF4_STEP(6);
            } else {
              JAXCORE_AMX_NF4_STEP(7);
            }
            continue;
          }
          const int which = tile * 2 + static_cast<int>(item & 1);
          switch (which) {
            case 0: JAXCORE_AMX_STEP(5, 3); break;
            case 1: JAXCORE_AMX_STEP(5, 4); break;
            case 2: JAXCORE_AMX_STEP(6, 3); break;
            case 3: JAXCORE_AMX_STEP(6, 4); break;
            case 4: JAXCORE_AMX_STEP(7, 3); break;
            default: JAXCORE_AMX_STEP(7, 4); break;
          }
        }
        // The previous block's sums first: loads after a tile store wait for it, and this
        // block's store waits for this block's products.
        if (pending >= 0) add(pending, pending_tile);
        if (ctile == 5) _tile_stored(5, c[tile], 4 * kGroupCols);
        if (ctile == 6) _tile_stored(6, c[tile], 4 * kGroupCols);
        if (ctile == 7) _tile_stored(7, c[tile], 4 * kGroupCols);
        pending = block;
        pending_tile = tile;
        tile = tile + 1 == kSumTiles ? 0 : tile + 1;
      }
      add(pending, pending_tile);
      for (int mi = 0; mi < M; ++mi) _mm512_storeu_ps(ps + mi * kGroupCols, y[mi]);
    }
  }
}

#undef JAXCORE_AMX_STEP
#undef JAXCORE_AMX_NF4_STEP

template <Format kFmt>
void TaskPassesOf(const GemvTask& t, int64_t wide, float* sums, uint16_t* a) {
  switch (t.m) {
    case 5: return TaskPasses<kFmt, 5>(t, wide, sums, a);
    case 6: return TaskPasses<kFmt, 6>(t, wide, sums, a);
    case 7: return TaskPasses<kFmt, 7>(t, wide, sums, a);
    case 8: return TaskPasses<kFmt, 8>(t, wide, sums, a);
    case 9: return TaskPasses<kFmt, 9>(t, wide, sums, a);
    case 10: return TaskPasses<kFmt, 10>(t, wide, sums, a);
    case 11: return TaskPasses<kFmt, 11>(t, wide, sums, a);
    case 12: return TaskPasses<kFmt, 12>(t, wide, sums, a);
    case 13: return TaskPasses<kFmt, 13>(t, wide, sums, a);
    case 14: return TaskPasses<kFmt, 14>(t, wide, sums, a);
    case 15: return TaskPasses<kFmt, 15>(t, wide, sums, a);
    default: return TaskPasses<kFmt, 16>(t, wide, sums, a);
  }
}

// Whether the task's activations hold no infinity. NF4's weights split into three bf16 parts,
// some of them zero, and infinity times a zero part is NaN where float32's x * w is infinite.
bool NoInfinities(const GemvTask& t) {
  __mmask16 any = 0;
  for (int mi = 0; mi < t.m; ++mi) {
    const float* x = t.x + mi * t.ldx;
    int64_t r = t.r0;
    for (; r + 16 <= t.r1; r += 16) any |= _mm512_fpclass_ps_mask(_mm512_loadu_ps(x + r), 0x18);
    for (; r < t.r1; ++r) any |= static_cast<__mmask16>(std::isinf(x[r]));
  }
  return any == 0;
}

}  // namespace

int64_t GemvTaskAmx(const GemvTask& t) {
  // Whole steps of whole blocks only: what the tiles do not fill runs as the AVX-512
  // segments (the caller's fallback).
  if (t.m < (t.fmt == Format::kNf4 ? kAmxNf4MinM : kAmxMinM) || t.m > kGemvAvx512MaxM ||
      t.block_size % kStep != 0 || t.r0 % kStep != 0 || (t.r1 - t.r0) % kStep != 0 ||
      t.r1 <= t.r0 || t.cols < kGroupCols) {
    return 0;
  }
  if (t.fmt == Format::kNf4 && !NoInfinities(t)) return 0;
  const int64_t wide = t.cols / kGroupCols * kGroupCols;
  // The sums pass by pass (sums[pass][mi][16]: a pass's rows in contiguous lines, where the
  // rows of y are a multiple of 4 KiB apart), then the bands' split activations.
  float* sums = t.scratch;
  uint16_t* a = reinterpret_cast<uint16_t*>(sums + t.m * wide);
  std::memset(sums, 0, sizeof(float) * t.m * wide);
  _tile_loadconfig(&ConfigFor(t.m, t.fmt == Format::kNf4));
  if (t.fmt == Format::kInt4) {
    TaskPassesOf<Format::kInt4>(t, wide, sums, a);
  } else if (t.fmt == Format::kNf4) {
    TaskPassesOf<Format::kNf4>(t, wide, sums, a);
  } else {
    TaskPassesOf<Format::kInt8>(t, wide, sums, a);
  }
  _tile_release();
  for (int64_t pass = 0; pass < wide / kGroupCols; ++pass) {
    for (int mi = 0; mi < t.m; ++mi) {
      float* y = t.y + mi * t.ldy + pass * kGroupCols;
      _mm512_storeu_ps(y, _mm512_add_ps(_mm512_loadu_ps(y),
                                        _mm512_loadu_ps(sums + (pass * t.m + mi) * kGroupCols)));
    }
  }
  return wide;
}

const KernelTable& AmxKernels() {
  static const KernelTable table = [] {
    KernelTable t = Avx512Kernels();
    t.gemv_task = GemvTaskAmx;
    t.gemv_row_step = kStep;
    // The AMX GEMV in passes of 16 rows beats the AVX-512 GEMM through M = 256, the largest
    // measured (harness, K = N = 4096, 2 threads, weights from memory, GEMV against GEMM,
    // int8 / int4 / NF4: M = 32 2.7 / 2.4 / 3.0 ms against 7.4 / 5.8 / 5.8; M = 256 24 / 19
    // / 25 against 32 / 31 / 31: Xeon VM with AMX). Each pass reads the whole weight, so
    // past that the GEMM, which reads it once, keeps large M.
    for (int64_t& m : t.gemv_auto_max_m) m = 256;
    return t;
  }();
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
