// The per-instruction-set pieces of the quantized matmul, behind one table of function
// pointers. qmm.cc plans the work (tasks, threads, scale blocks, workspace) and calls these;
// each kernels_<isa>.cc fills a table with code compiled for that instruction set.
#ifndef JAXCORE_CPU_CSRC_KERNELS_H_
#define JAXCORE_CPU_CSRC_KERNELS_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "problem.h"

namespace jaxcore_cpu {
namespace internal {

// The NF4 code book (jaxcore/kernels/_nf4.py), index = stored nibble.
extern const float kNf4Code[16];
constexpr float kInt4ZeroPoint = 8.0f;

// Calls f(FormatTag<fmt>{}) with the format as a compile-time constant: the kernels are
// templates on it (`decltype(tag)::value` inside a generic lambda), chosen once per call.
template <Format kFmt>
using FormatTag = std::integral_constant<Format, kFmt>;

template <typename F>
inline void WithFormat(Format fmt, F&& f) {
  switch (fmt) {
    case Format::kInt8:
      return f(FormatTag<Format::kInt8>{});
    case Format::kInt4:
      return f(FormatTag<Format::kInt4>{});
    case Format::kNf4:
      return f(FormatTag<Format::kNf4>{});
  }
}

// A 16-entry float32 code book as byte planes: plane[i][c] is byte i of codes[c]. Byte
// shuffles (AVX2's vpshufb, NEON's tbl) look 16 codes up per plane, and interleaving the four
// planes' results gives the codes back as floats.
struct CodeBytePlanes {
  uint8_t plane[4][16];
};

inline CodeBytePlanes BytePlanesOf(const float codes[16]) {
  CodeBytePlanes p;
  for (int c = 0; c < 16; ++c) {
    uint32_t bits;
    std::memcpy(&bits, &codes[c], sizeof(bits));
    for (int i = 0; i < 4; ++i) p.plane[i][c] = static_cast<uint8_t>(bits >> (8 * i));
  }
  return p;
}

// The stored 4-bit code of logical row r, column n of a nibble-packed weight.
inline uint8_t Nibble(const uint8_t* q, int64_t ldq, int64_t r, int64_t n) {
  const uint8_t byte = q[(r >> 1) * ldq + n];
  return (r & 1) ? (byte >> 4) : (byte & 0x0F);
}

// Unscaled decoded weight of logical row r, column n: q, v - 8 or the NF4 code. Every
// kernel's element-by-element edge uses it, so the edges agree with the portable kernels.
inline float Unscaled(Format fmt, const uint8_t* q, int64_t ldq, int64_t r, int64_t n) {
  if (fmt == Format::kInt8) return static_cast<float>(static_cast<int8_t>(q[r * ldq + n]));
  const uint8_t v = Nibble(q, ldq, r, n);
  return fmt == Format::kNf4 ? kNf4Code[v] : static_cast<float>(v) - kInt4ZeroPoint;
}

// Columns of one GEMM micro-tile; decoded weight panels are laid out in slivers this wide.
constexpr int kNr = 16;
// Largest row count of one GEMM micro-tile: activations are packed in micro-panels of
// this many rows. The AVX-512 kernel takes them whole; the AVX2 one in two halves.
constexpr int kMr = 12;
// Largest M the portable GEMV kernel takes (KernelTable::gemv_max_m; the SIMD tables take
// more); larger M runs the GEMM path (decoded panels and the micro-kernel).
constexpr int kGemvMaxM = 4;

// One GEMV segment: rows [r0, r1) of K, all inside one scale block, and columns
// [n0, n0 + cols) of N. With u = the unscaled decoded weights (q for int8, v - 8 for int4,
// the NF4 code for nf4):
//   acc[m][c] = sum_{r0 <= r < r1} x[m][r] * u[r][n0 + c]
//   y[m][c]  += scale[c] * acc[m][c]
// acc is the kernel's scratch; y holds the running (scaled) sums.
struct GemvSegment {
  Format fmt;
  int m;              // 1..KernelTable::gemv_max_m
  const float* x;     // x[m][r] = x[m * ldx + r], r logical
  int64_t ldx;
  const uint8_t* q;   // stored row 0 of the weight
  int64_t ldq;        // bytes per stored row (= N)
  int64_t r0, r1;     // logical rows; even for 4-bit formats
  int64_t n0, cols;
  const float* scale; // the block's scales of the segment's columns: scale[c] for n0 + c
  float* acc;         // m rows of at least `cols` floats, stride ldacc
  int64_t ldacc;
  float* y;           // y[m][c] at y[m * ldy + c]
  int64_t ldy;
};

// A whole float32 GEMV task (Precision::kFloat32): rows [r0, r1) of K for columns
// [n0, n0 + cols), added into y, for tables whose kernel takes a task at once (gemv_task).
struct GemvTask {
  Format fmt;
  int m;
  const float* x;  // x[mi][r] = x[mi * ldx + r], r logical
  int64_t ldx;
  const uint8_t* q;
  int64_t ldq;
  int64_t r0, r1;
  int64_t n0, cols;
  // The task's scales: scale[(b - r0 / block_size) * lds + c] for block b and column n0 + c.
  const float* scale;
  int64_t lds;
  int64_t block_size;
  float* scratch;  // GemvTaskFloats(m, cols) floats, 64-byte aligned
  float* y;        // y[mi][c] at y[mi * ldy + c]
  int64_t ldy;
};

// The task's columns from `done` on as one segment (its r0, r1 and scale to be narrowed to one
// scale block), with `acc` as the segment kernel's scratch.
inline GemvSegment SegmentOf(const GemvTask& t, int64_t done, float* acc, int64_t ldacc) {
  GemvSegment s;
  s.fmt = t.fmt;
  s.m = t.m;
  s.x = t.x;
  s.ldx = t.ldx;
  s.q = t.q;
  s.ldq = t.ldq;
  s.r0 = t.r0;
  s.r1 = t.r1;
  s.n0 = t.n0 + done;
  s.cols = t.cols - done;
  s.scale = t.scale + done;
  s.acc = acc;
  s.ldacc = ldacc;
  s.y = t.y + done;
  s.ldy = t.ldy;
  return s;
}

// Floats of scratch a gemv_task kernel needs for m rows and `cols` columns: the sums, and a
// band of kGemvTaskBand rows of K of the activations split into three bf16 parts
// (kernels_gemv_amx.cc).
constexpr int64_t kGemvTaskBand = 64;
inline int64_t GemvTaskFloats(int64_t m, int64_t cols) {
  return m * ((cols + 15) / 16 * 16) + m * kGemvTaskBand * 3 / 2;
}

// Decodes rows [r0, r1) and columns [n0, n0 + cols) of the weight, scaled, into
// ceil(cols / kNr) slivers: panel[j][r - r0][i] = W[r][n0 + j * kNr + i] (zero past cols).
// r0 and r1 are even for 4-bit formats; block_size gives each row's scale row.
struct DecodePanel {
  Format fmt;
  const uint8_t* q;
  int64_t ldq;
  const float* scale;  // (K / block_size, N)
  int64_t lds;         // = N
  int64_t block_size;
  int64_t r0, r1, n0, cols;
  float* panel;
};

// C[i][j] (+)= sum_k A[i][k] * B[k][j] for i < mr (1..kMr), j < kNr, k < kc, where A is a
// packed micro-panel (A[i][k] = a[k * kMr + i]), B is one decoded sliver (kc x kNr) and
// C[i][j] = c[i * ldc + j]. Only the first `cols` (<= kNr) columns of C are written.
using MicroKernel = void (*)(int mr, int64_t kc, const float* a, const float* b, float* c,
                             int64_t ldc, bool accumulate, int cols);
// The same for two adjacent slivers at once: C's columns j < kNr from b0, the next kNr from
// b1, and only the first `cols` (kNr < cols <= 2 * kNr) written. Each activation loaded
// feeds two FMAs, where one sliver at a time issues a load per FMA (Intel's two 512-bit FMA
// units then wait on the load ports).
using MicroKernelPair = void (*)(int mr, int64_t kc, const float* a, const float* b0,
                                 const float* b1, float* c, int64_t ldc, bool accumulate,
                                 int cols);

// One piece of the transposed product (Problem::transposed): logical rows [r0, r1) of the
// weight (even bounds for 4-bit formats), all in one scale block b, and columns
// [n0, n0 + cols) of N, for m activation rows already multiplied by the block's scales,
// xs[i * ldxs + c] = x[i][n0 + c] * scale[b][n0 + c]. With u the unscaled decoded weights:
//   y[i * ldy + r] += sum_{c < cols} xs[i * ldxs + c] * u[r][n0 + c]
struct NtPiece {
  Format fmt;
  int64_t m;
  const float* xs;
  int64_t ldxs;
  const uint8_t* q;   // stored row 0 of the weight
  int64_t ldq;        // bytes per stored row (= N)
  int64_t r0, r1;
  int64_t n0, cols;
  float* y;
  int64_t ldy;
};

// --- int8 activations (Precision::kInt8) ---------------------------------------------
//
// Each activation row is quantized in groups of kQ8Group along K: d = max|x| / 127 and
// xq = round(x / d), so x ~ d * xq. Products are then sums of int8 x int8 (int4: uint4 x
// int8) products in int32, one group at a time, scaled into float32 once per group:
//   y[m][n] += d[m][g] * wscale[n] * (sum_k xq[m][k] * wq[k][n] - zero_point * sum_k xq[m][k])
// where wq is the weight's integer code (int8: q; int4: v; nf4: kNf4Int8[v], whose scale
// carries the extra 1/127). The max may be taken over a span of several groups (Q8ScaleSpan),
// which then share one d, so a kernel may sum their int32 products before the float work.
constexpr int kQ8Group = 32;
extern const int8_t kNf4Int8[16];

// Groups (of kQ8Group rows of K) per activation scale: two for the nibble-packed formats when
// the weight's scale blocks hold whole pairs, one otherwise. A pair then lies in one weight
// scale block, so all its products share one factor: the AVX-512 and AVX-VNNI kernels sum its
// 64 rows in int32 and do the float work once, which made int4 at M = 16 8-13 % faster (Zen 4,
// K = N = 4096), at a relative error still ~1e-3 (the 4-bit weight's own rounding is ~1e-1).
// int8 weights, whose own rounding is far smaller, keep a scale per group. The span depends
// on the format and block size only, so every instruction set and every M quantize a row
// alike.
inline int Q8ScaleSpan(Format fmt, int64_t block_size) {
  return fmt != Format::kInt8 && block_size % (2 * kQ8Group) == 0 ? 2 : 1;
}

// Stored weight rows per group of kQ8Group rows of K, and the stored row holding row k of K
// (the nibble-packed formats keep two rows of K per byte).
template <Format kFmt>
constexpr int kQ8GroupRows = kFmt == Format::kInt8 ? kQ8Group : kQ8Group / 2;
template <Format kFmt>
constexpr int64_t Q8StoredRow(int64_t k) {
  return kFmt == Format::kInt8 ? k : k >> 1;
}

// Where row r (0 <= r < kQ8Group) of a group sits among its stored activation codes.
inline int Q8CodeAt(Format fmt, int r) {
  if (fmt == Format::kInt8) return r;
  return (r & ~7) | ((r & 1) << 2) | ((r & 7) >> 1);
}

// Group-major, so a group's codes for every activation row are adjacent (rows a page apart
// would share one L1 set): row mi's codes of group g are q[(g * rows + mi) * kQ8Group ...],
// its scale d[g * rows + mi] and its code sum sum[g * rows + mi]. For the nibble-packed
// formats (int4, NF4) each eight codes are stored in the order of rows 0 2 4 6 1 3 5 7 (see
// Q8CodeAt): a stored byte holds two rows of K, so a SIMD decoder's low nibbles of four
// stored rows meet their activations as one int32, and its high nibbles the next.
struct Q8Activations {
  const int8_t* q;
  const float* d;
  const int32_t* sum;
  int64_t rows;
  int span = 1;  // groups per scale (Q8ScaleSpan): groups g and g + 1 share d when g % span == 0
};

// One segment of the int8-activation product: rows [r0, r1) of K (multiples of kQ8Group,
// inside one scale block) and columns [n0, n0 + cols), for rows [0, m) of `x`.
//   y[mi][c] += sum over the segment's groups of the group's scaled integer dot product.
struct Q8Segment {
  Format fmt;
  int64_t m;
  Q8Activations x;
  const uint8_t* q;
  int64_t ldq;
  int64_t r0, r1;
  int64_t n0, cols;
  const float* scale;   // the block's scales of the segment's columns: scale[c] for n0 + c
  float* acc;           // scratch: m rows of `cols + 16` floats
  float* y;             // y[mi][c] at y[mi * ldy + c]
  int64_t ldy;
};

// One whole split-K task of the int8-activation product, for the kernels that keep their
// sums across scale blocks (q8_task): rows [r0, r1) of K (multiples of kQ8Group, any number
// of scale blocks) and columns [n0, n0 + cols), for rows [0, m) of `x`.
//   y[mi][c] = sum over the task's groups of the group's scaled integer dot product
// (y is overwritten, not accumulated).
struct Q8Task {
  Format fmt;
  int64_t m;
  Q8Activations x;      // as q8_quantize writes them
  const uint8_t* q;
  int64_t ldq;
  int64_t r0, r1;
  int64_t n0, cols;
  // The task's scales: scale[(b - r0 / block_size) * lds + c] for block b and column
  // n0 + c (the caller may hand over a compact copy of just these).
  const float* scale;
  int64_t lds;
  int64_t block_size;
  float* acc;           // scratch: Q8TaskAccFloats(m, cols) floats, 64-byte aligned
  float* y;             // y[mi][c] at y[mi * ldy + c]
  int64_t ldy;
};

// A q8_task kernel takes its columns in blocks this wide (a multiple of 64), each over the
// task's whole K range: m rows of a block's float sums stay within ~32 KiB (L1), while the
// task's rows of K stay in the TLB from one block to the next.
inline int64_t Q8TaskBlockCols(int64_t m, int64_t cols) {
  const int64_t fit = (8192 / (m > 0 ? m : 1) + 63) / 64 * 64;
  return std::min((cols + 63) / 64 * 64, std::max<int64_t>(64, fit));
}

// Whether the task's rows of K lie in one scale block (then its kernels apply the scales once,
// at the end).
inline bool InOneScaleBlock(const Q8Task& t) {
  return t.r1 > t.r0 && t.r0 / t.block_size == (t.r1 - 1) / t.block_size;
}

// Runs `kernel` on each column block of `t` (Q8TaskBlockCols wide), each over t's whole K
// range.
template <typename Kernel>
inline void ForEachQ8TaskBlock(const Q8Task& t, Kernel kernel) {
  const int64_t block = Q8TaskBlockCols(t.m, t.cols);
  for (int64_t c = 0; c < t.cols; c += block) {
    Q8Task b = t;
    b.n0 = t.n0 + c;
    b.cols = std::min(block, t.cols - c);
    b.scale = t.scale + c;
    b.y = t.y + c;
    kernel(b);
  }
}

// Prefetches into L2 share `part` of `parts` of the `lines` cache lines (16 floats each) from
// p: lines part, part + parts, ... A kernel that passes over the same columns `parts` times
// (bands) asks for each line once; one pass (parts = 1) takes them all. The kernels use it for
// scales, which otherwise arrive on demand (a block's row of scales lies N floats after the
// last: a new page per block). Always inlined, as must be any function that only wraps it:
// GCC takes a function that only prefetches for one without side effects and deletes its
// calls (the prefetches then never run).
[[gnu::always_inline]] inline void PrefetchLines(const float* p, int lines, int64_t part = 0,
                                                 int64_t parts = 1) {
  for (int64_t l = part; l < lines; l += parts) __builtin_prefetch(p + 16 * l, 0, 2);
}

// Whether the CPU is Intel's (the CPUID vendor). Where Intel and AMD cores measured
// differently, the tables choose by it: GEMV passes or the GEMM for float32 past the GEMV's
// rows (kernels_avx2.cc, kernels_q8_avx512.cc), and the row prefetch hint below.
bool IntelCpu();

// Whether the band kernels prefetch the stored rows they read next into L1 (Intel) or into L2
// (elsewhere), the hint that measured faster per vendor. Through JAX, the two hints' builds
// alternating in one process (benchmarks/cpu_kernels_ab.py, 2 threads, weights from memory,
// M = 1 and 2): on an Intel Xeon (AVX-512 with AMX, and pinned to AVX2) L1 was 2-11 % faster;
// on AMD Zen 4 it took 0.98-1.22 of L2's time in float32 and 1.08-1.28 with int8 activations,
// so L2 stays the hint there and on CPUs not measured.
inline bool PrefetchRowsIntoL1() { return IntelCpu(); }

// Prefetches the cache line at p into L1 when `l1`, else into L2 (the hint must be a constant,
// so the choice is a branch, once per line). Always inlined, for PrefetchLines' reason.
[[gnu::always_inline]] inline void PrefetchRow(const void* p, bool l1) {
  if (l1) {
    __builtin_prefetch(p, 0, 3);
  } else {
    __builtin_prefetch(p, 0, 2);
  }
}

// PrefetchLines of the next scale block's row of a q8_task's scales, from column c, where
// `srow` is this block's row (if the task has a next block): int4 with 64-row blocks at M = 1,
// each call reading its own weight's scales, ran ~7 % slower without (Zen 4, 2 threads).
[[gnu::always_inline]] inline void PrefetchNextBlockScales(const Q8Task& t, int64_t g0,
                                                           const float* srow, int64_t c, int lines,
                                                           int64_t part = 0, int64_t parts = 1) {
  if (g0 - g0 % t.block_size + t.block_size >= t.r1) return;  // no next block in this task
  PrefetchLines(srow + t.lds + c, lines, part, parts);
}

// Floats of scratch a q8_task call needs: m rows of a column block, padded, then two groups'
// decoded codes for the block (512 floats' worth per group and 64 columns) or two groups'
// activation codes widened to int16 (m rows of 32 each: AVX2's int16 pairs).
inline int64_t Q8TaskAccFloats(int64_t m, int64_t cols) {
  const int64_t span = Q8TaskBlockCols(m, cols);
  return m * (span + 16) + std::max(span, 2 * m) * 16;
}

// Largest M for which the planner gives a q8_task kernel whole rows of the weight (tasks
// split K only); larger M splits the columns too, so the per-task partial sums stay small.
constexpr int64_t kQ8TaskFullWidthMaxM = 16;
// Largest M a q8_task kernel takes a few stored rows at a time, bound by memory; larger M
// is bound by arithmetic, and the planner prefers column chunks over K splits for it.
constexpr int64_t kQ8TaskNarrowMaxM = 4;

// Expands `count` double-quantized scale codes that share the group scale `gs` (qmm.h,
// Problem::scale_codes): out[i] = min(codes[i] * gs + offset, FLT_MAX) with two roundings (no
// fused multiply-add, as jaxcore/kernels/_dq_scales.py), NaN kept.
using ExpandDq = void (*)(const int8_t* codes, int64_t count, float gs, float offset, float* out);
void ExpandDqPortable(const int8_t* codes, int64_t count, float gs, float offset, float* out);

// Converts `count` 16-bit scales of `type` (Problem::scale_half) to float32, exactly
// (subnormals, infinities and NaNs included).
using ExpandHalf = void (*)(const uint16_t* in, int64_t count, HalfType type, float* out);
void ExpandHalfPortable(const uint16_t* in, int64_t count, HalfType type, float* out);

void NtRowsPortable(const NtPiece& p);
void NtDecodePanelPortable(const DecodePanel& d);

struct KernelTable {
  void (*gemv_segment)(const GemvSegment&);
  void (*decode_panel)(const DecodePanel&);
  MicroKernel microkernel;
  // Quantizes one activation row of length k (a multiple of kQ8Group * span) into the
  // group-major layout of Q8Activations with `rows` rows (q, d, sum point at its row), the
  // codes in Q8CodeAt's order for `fmt`, one scale per `span` groups (Q8ScaleSpan).
  void (*q8_quantize)(Format fmt, int span, const float* x, int64_t k, int64_t rows, int8_t* q,
                      float* d, int32_t* sum);
  void (*q8_segment)(const Q8Segment&);
  // Optional: the whole task at once (then q8_segment is not used by the planner).
  void (*q8_task)(const Q8Task&) = nullptr;
  // Largest M the int8-activation path takes with this table; larger M runs in float32.
  int64_t q8_max_m = kInt8MaxM;
  // Largest M the float32 GEMV path takes with this table (gemv_segment's m).
  int64_t gemv_max_m = kGemvMaxM;
  // Largest M that Path::kAuto runs on the float32 GEMV, per Format (int8, int4, NF4): past
  // gemv_max_m in passes of gemv_max_m rows, each pass reading the whole weight. 0: gemv_max_m.
  int64_t gemv_auto_max_m[3] = {0, 0, 0};
  // Optional: a whole float32 GEMV task at once. Returns how many of its first columns it
  // took (0: none, having done nothing); the rest run as gemv_segment's segments. Its tables
  // split K in multiples of gemv_row_step rows.
  int64_t (*gemv_task)(const GemvTask&) = nullptr;
  int64_t gemv_row_step = 4;
  ExpandDq expand_dq = ExpandDqPortable;
  ExpandHalf expand_half = ExpandHalfPortable;
  // Optional: two slivers per call (then the GEMM takes its slivers in pairs where it can).
  MicroKernelPair microkernel_pair = nullptr;
  // The transposed product's row kernel and transposing panel decoder (kernels_nt.h).
  void (*nt_rows)(const NtPiece&) = NtRowsPortable;
  void (*nt_decode_panel)(const DecodePanel&) = NtDecodePanelPortable;
  // Largest M whose transposed product takes nt_rows under Path::kAuto; larger M runs the
  // GEMM over nt_decode_panel's panels. The portable GEMM loses to the rows up to M = 64
  // (Zen 4, K = N = 4096: 2.7x-3.6x their time at M = 1..16).
  int64_t nt_rows_max_m = 64;
};

// The portable int8-activation pieces; the SIMD tables reuse them for ragged edges.
void Q8QuantizePortable(Format fmt, int span, const float* x, int64_t k, int64_t rows,
                        int8_t* q, float* d, int32_t* sum);
void Q8SegmentPortable(const Q8Segment& s);
// Columns [c0, c1) of a segment, element by element.
void Q8SegmentColumns(const Q8Segment& s, int64_t c0, int64_t c1);
// The portable panel decoder; the SIMD ones reuse it for a ragged last sliver.
void DecodePanelPortable(const DecodePanel& d);

const KernelTable& PortableKernels();
#if defined(__x86_64__) || defined(_M_X64)
const KernelTable& Avx2Kernels();
constexpr int64_t kGemvAvx2MaxM = 8;  // rows the AVX2 GEMV takes
void Q8QuantizeAvx2(Format fmt, int span, const float* x, int64_t k, int64_t rows, int8_t* q,
                    float* d, int32_t* sum);
void Q8TaskAvx2(const Q8Task& t);
void ExpandHalfAvx2(const uint16_t* in, int64_t count, HalfType type, float* out);
void ExpandDqAvx2(const int8_t* codes, int64_t count, float gs, float offset, float* out);
// AVX-VNNI: the AVX2 table with the 256-bit int8-activation kernel on vpdpbusd, built twice
// from one source: VEX-encoded (AvxVnniKernels, CPUs with AVX-VNNI) and EVEX-encoded
// (AvxVnniEvexKernels, for AVX-512 VNNI CPUs without AVX-VNNI, where tests check it).
const KernelTable& AvxVnniKernels();
const KernelTable& AvxVnniEvexKernels();
// AVX-512 (F, BW, VL, DQ) with VNNI: the AVX2 panel decoders, a 512-bit float32 GEMV
// (4-bit codes looked up with vpermps) and GEMM micro-kernel, and int8-activation kernels
// built on vpdpbusd, taking every M.
const KernelTable& Avx512Kernels();
void GemvSegmentAvx512(const GemvSegment& s);
constexpr int64_t kGemvAvx512MaxM = 16;  // rows GemvSegmentAvx512 takes
void MicroKernelAvx512(int mr, int64_t kc, const float* a, const float* b, float* c,
                       int64_t ldc, bool accumulate, int cols);
void MicroKernelPairAvx512(int mr, int64_t kc, const float* a, const float* b0,
                           const float* b1, float* c, int64_t ldc, bool accumulate, int cols);
void ExpandDqAvx512(const int8_t* codes, int64_t count, float gs, float offset, float* out);
// AMX (tiles and bf16, Sapphire Rapids and later Intel server cores): the AVX-512 table whose
// float32 GEMV takes int8 and int4 tasks of kAmxMinM rows or more (NF4 from 12) as bf16 tile
// products (kernels_gemv_amx.cc), K split in its 32-row steps.
const KernelTable& AmxKernels();
int64_t GemvTaskAmx(const GemvTask& t);
constexpr int kAmxMinM = 5;
void NtRowsAvx2(const NtPiece& p);
void NtRowsAvx512(const NtPiece& p);
void NtDecodePanelAvx2(const DecodePanel& d);
void NtDecodePanelAvx512(const DecodePanel& d);
#elif defined(__aarch64__)
// NEON with sdot (FEAT_DotProd): the portable table with its int8-activation segments on sdot.
const KernelTable& DotProdKernels();
#endif

}  // namespace internal
}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_KERNELS_H_
