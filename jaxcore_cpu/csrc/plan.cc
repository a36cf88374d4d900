// Planning of the split-K path: see plan.h. The constants are the measured choices.
#include "plan.h"

#include <algorithm>

namespace jaxcore_cpu {
namespace internal {
namespace {

// GEMV: columns per task (each activation row's partial sums stay in L1) and the
// granularity of its K split. At M <= kStreamingMaxM, where the float32 GEMV waits on
// memory, tasks take up to kGemvColsSmallM columns: longer runs of each row (whole rows at
// N = 4096) streamed 10-16 % faster for int8 and 0-6 % for 4-bit (Zen 4, AVX-512 and AVX2,
// K = 4096, N = 4096 and 14336, 2 threads).
constexpr int64_t kGemvCols = 2048;
constexpr int64_t kGemvColsSmallM = 8192;
constexpr int64_t kGemvRowStep = 4;
// Floats of padding per row of a split-K task's scratch sums (rows a multiple of 4 KiB
// apart would share L1 sets).
constexpr int64_t kAccPad = 16;
// Tasks per worker the planners aim for, so a busy core simply claims fewer of them.
constexpr int64_t kTasksPerWorker = 4;
// Plans for at most kStreamingMaxM rows stream the weight from memory, whole rows split along
// K. There each K range costs its task a plane of partial sums that starts cold (zeroed,
// added into per block, read back by the reduction) and a restart of its rows' streams:
// ~2.5 us per task at M = 1 (2-vCPU Xeon, K = N = 4096), ~1 % of the weight's time per range
// per worker. So they take kStreamingRangesPerWorker K ranges per worker, none cut short
// (SetKTail): at M = 1, 4-bit, float32 activations, 0.40-0.41 ms a product in XLA against
// 0.43 for 4 ranges per worker and a tail (int8 activations 0.38-0.39 against 0.40); the
// pool thread's late start (~10 us) costs less than the planes. With one core busy the
// products took no longer than with the 4 ranges (0.54 against 0.58 ms).
constexpr int64_t kStreamingMaxM = 2;
constexpr int64_t kStreamingRangesPerWorker = 2;
// Split-K partial sums (written, then read back by the reduction) stay under
// 1 / kPartialCapShare of the weight's bytes.
constexpr int64_t kPartialCapShare = 8;
// The whole-row int8 plan splits K while its partial sums stay under 1 / kPartialShare of
// the weight's bytes, and cuts the columns no narrower than kMinTaskCols8 (int8) or
// kMinTaskCols4 (4-bit) columns unless the cap forces it: narrower, each task's rows span
// more pages than the TLB holds (measured on Zen 4, M = 4..16).
constexpr int64_t kPartialShare = 32;
constexpr int64_t kMinTaskCols8 = 1024;
constexpr int64_t kMinTaskCols4 = 512;
// ... and keeps one column chunk's partial sums under this many bytes, splitting the
// columns rather than K beyond it (K = 4096, N = 14336, M = 1 and 2 on Zen 4, 2 threads:
// four K ranges in two column chunks 4-7 % faster than eight K ranges of whole rows).
constexpr int64_t kChunkPartialBytes = 256 << 10;
// Past kQ8TaskNarrowMaxM, a q8_task kernel is bound by arithmetic: its tasks take column
// chunks over the whole of K (no partial sums) about kWideTaskColsM / M columns wide, at
// least kWideTaskMinCols, and narrower only to give every worker kTasksPerWorker tasks.
// Measured on Zen 4, 2 threads, K = N = 4096, against the whole-row plans' K splits:
// M = 6..16, int8 -8 to -17 %, int4 -3 to -9 %.
constexpr int64_t kWideTaskColsM = 6144;
constexpr int64_t kWideTaskMinCols = 256;
// The last column chunks of a whole-K plan are this many times narrower (SetTail).
constexpr int64_t kTailSplit = 3;

// Columns per split-K task: each activation row's partial sums of a task stay in L1 (in
// L2 for the float32 GEMV's wider tasks at M <= kStreamingMaxM).
int64_t SplitCols(const KernelTable& kt, const Problem& p) {
  if (!UsesInt8(kt, p)) {
    return std::min(p.n, p.m <= kStreamingMaxM ? kGemvColsSmallM : kGemvCols);
  }
  return std::min(p.n, std::max<int64_t>(256, RoundUp(8192 / std::max<int64_t>(p.m, 1), 64)));
}

// Bytes of the stored weight's codes.
int64_t WeightBytes(const Problem& p) {
  return p.fmt == Format::kInt8 ? p.k * p.n : p.k / 2 * p.n;
}

// Most K ranges whose partial sums (`rows` x N floats each) stay under 1 / `share` of the
// weight's bytes.
int64_t KRangesUnder(const Problem& p, int64_t rows, int64_t share) {
  const int64_t plane_bytes = std::max<int64_t>(1, rows * p.n * int64_t{sizeof(float)});
  return std::max<int64_t>(1, WeightBytes(p) / (share * plane_bytes));
}

// Sets the K ranges of `s`: about `k_tasks` of them, each a multiple of `step` rows long.
void SetKRanges(const Problem& p, int64_t k_tasks, int64_t step, GemvSplit& s) {
  s.k_len = std::max(step, RoundUp(CeilDiv(p.k, std::max<int64_t>(1, k_tasks)), step));
  s.k_tasks = std::max<int64_t>(1, CeilDiv(p.k, s.k_len));
}

// Cuts the K ranges whose tasks the workers claim last (the last `workers` tasks) into
// ranges 1 / kTailSplit as long (multiples of `step`), while the plan keeps at most
// `max_ranges` K ranges (each adds a plane of partial sums).
void SetKTail(const Problem& p, int workers, int64_t step, int64_t max_ranges, GemvSplit& s) {
  const int64_t tail_ranges = CeilDiv(workers, std::max<int64_t>(1, s.col_tasks));
  const int64_t len = RoundUp(CeilDiv(s.k_len, kTailSplit), step);
  if (workers < 2 || tail_ranges >= s.k_tasks || len >= s.k_len) return;
  const int64_t head = s.k_tasks - tail_ranges;
  const int64_t count = head + CeilDiv(p.k - head * s.k_len, len);
  if (count > max_ranges) return;
  s.head_ranges = head;
  s.tail_len = len;
  s.k_tasks = count;
}

// Cuts the last `workers` column chunks' worth of columns of a whole-K plan into chunks
// 1 / kTailSplit as wide, so that whichever worker claims the last tasks (the late-starting
// pool thread, or the one that met a slower stretch of memory) finishes soon after the rest.
void SetTail(const Problem& p, int workers, GemvSplit& s) {
  const int64_t tail_cols = RoundUp(CeilDiv(s.ncols, kTailSplit), 64);
  if (workers < 2 || tail_cols >= s.ncols || p.n <= workers * s.ncols) return;
  s.head_chunks = CeilDiv(p.n - workers * s.ncols, s.ncols);
  s.tail_cols = tail_cols;
  s.col_tasks = s.head_chunks + CeilDiv(p.n - s.head_chunks * s.ncols, tail_cols);
}

// Rows of K an int8-activation task's K range is a multiple of: whole activation scale
// spans (Q8ScaleSpan), so a kernel always meets both groups of a pair.
int64_t Q8Step(const Problem& p) {
  return int64_t{internal::kQ8Group} * internal::Q8ScaleSpan(p.fmt, p.block_size);
}

}  // namespace

bool UsesInt8(const KernelTable& kt, const Problem& p) {
  return p.precision == Precision::kInt8 && p.m <= kt.q8_max_m &&
         p.block_size % internal::kQ8Group == 0;
}

Path Resolve(const KernelTable& kt, const Problem& p, Path path) {
  if (UsesInt8(kt, p)) return Path::kGemv;
  if (path != Path::kAuto) return path;
  const int64_t auto_max = kt.gemv_auto_max_m[static_cast<int>(p.fmt)];
  return p.m <= (auto_max > 0 ? auto_max : kt.gemv_max_m) ? Path::kGemv : Path::kGemm;
}

int64_t SplitRows(const KernelTable& kt, const Problem& p) {
  return UsesInt8(kt, p) ? p.m : std::min<int64_t>(p.m, kt.gemv_max_m);
}

int64_t AccFloats(const KernelTable& kt, const Problem& p) {
  const int64_t rows = SplitRows(kt, p);
  if (UsesInt8(kt, p) && kt.q8_task) return internal::Q8TaskAccFloats(rows, p.n);
  const int64_t segments = rows * (SplitCols(kt, p) + kAccPad);
  if (kt.gemv_task) return std::max(segments, internal::GemvTaskFloats(rows, SplitCols(kt, p)));
  return segments;
}

GemvSplit SplitOf(const KernelTable& kt, const Problem& p, int workers) {
  GemvSplit s;
  const bool streaming = p.m <= kStreamingMaxM;
  const int64_t wanted = (streaming ? kStreamingRangesPerWorker : kTasksPerWorker) * workers;
  const bool whole_tasks = UsesInt8(kt, p) && kt.q8_task;  // the kernel takes a whole task
  if (whole_tasks && p.m > internal::kQ8TaskNarrowMaxM) {
    // Bound by arithmetic: column chunks over the whole of K, where they can be wide enough
    // (many workers on a narrow weight fall through to the K splits below).
    const int64_t ncols =
        std::min(RoundUp(kWideTaskColsM / p.m, 64), RoundUp(CeilDiv(p.n, wanted), 64));
    if (ncols >= kWideTaskMinCols) {
      s.ncols = std::min(p.n, ncols);
      s.col_tasks = CeilDiv(p.n, s.ncols);
      SetKRanges(p, 1, Q8Step(p), s);
      SetTail(p, workers, s);
      return s;
    }
  }
  if (whole_tasks && p.m <= internal::kQ8TaskFullWidthMaxM) {
    // Rows of the weight, whole or in wide column chunks, split along K (the memory-bound
    // small M, or larger M where column chunks alone would be too narrow). Every K range
    // beyond the first adds M x N floats of partial sums that are written and read back
    // (from memory, when the call before evicted the scratch), so K is split only while
    // those stay under 1 / kPartialShare of the weight's bytes, or further where the
    // columns' minimum chunk width would leave workers without kTasksPerWorker tasks, but
    // never past 1 / kPartialCapShare (narrower chunks instead).
    const int64_t min_cols = p.fmt == Format::kInt8 ? kMinTaskCols8 : kMinTaskCols4;
    const int64_t forced = CeilDiv(wanted, CeilDiv(p.n, min_cols));
    const int64_t cap = KRangesUnder(p, p.m, kPartialCapShare);
    SetKRanges(p,
               std::min({std::max(forced, std::min(wanted, KRangesUnder(p, p.m, kPartialShare))),
                         cap,
                         CeilDiv(p.k, 4 * internal::kQ8Group)}),
               Q8Step(p), s);
    s.ncols = std::min(p.n, RoundUp(CeilDiv(p.n, CeilDiv(wanted, s.k_tasks)), 64));
    // Streaming tasks span no more columns than the float32 GEMV's: with their fewer K
    // ranges, N = 14336 at M = 1 was left one chunk of all its columns (int8 2.37-2.42 ms in
    // the native harness, against 2.12-2.16 in two chunks).
    if (streaming) s.ncols = std::min(s.ncols, kGemvColsSmallM);
    // Halve the K ranges into twice the column chunks while one chunk's partial sums (which
    // the task finishing its last K range adds up alone) pass kChunkPartialBytes.
    while (s.k_tasks > 1 && s.ncols / 2 >= min_cols &&
           s.k_tasks * p.m * s.ncols * int64_t{sizeof(float)} > kChunkPartialBytes) {
      SetKRanges(p, s.k_tasks / 2, Q8Step(p), s);
      s.ncols = RoundUp(CeilDiv(s.ncols, 2), 64);
    }
    s.col_tasks = CeilDiv(p.n, std::max<int64_t>(s.ncols, 1));
    if (!streaming) SetKTail(p, workers, Q8Step(p), cap, s);
    return s;
  }
  s.ncols = SplitCols(kt, p);
  s.col_tasks = CeilDiv(p.n, std::max<int64_t>(s.ncols, 1));
  const int64_t step = UsesInt8(kt, p) ? Q8Step(p) : std::max(kGemvRowStep, kt.gemv_row_step);
  const int64_t min_len = UsesInt8(kt, p) ? internal::kQ8Group : step;
  const int64_t cap = KRangesUnder(p, SplitRows(kt, p), kPartialCapShare);
  SetKRanges(p,
             std::min({CeilDiv(wanted, std::max<int64_t>(s.col_tasks, 1)),
                       CeilDiv(p.k, 4 * min_len), cap}),
             step, s);
  if (!streaming) SetKTail(p, workers, step, cap, s);
  return s;
}

bool WritesDirectly(const Problem& p, const GemvSplit& s) {
  return s.k_tasks == 1 && p.out_dtype == DType::kF32;
}

int64_t PartialFloats(const KernelTable& kt, const Problem& p, const GemvSplit& s) {
  return WritesDirectly(p, s) ? 0 : s.k_tasks * SplitRows(kt, p) * p.n;
}

}  // namespace internal
}  // namespace jaxcore_cpu
