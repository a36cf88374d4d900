// The XLA FFI handlers `JaxcoreCpuQuantizedMatmul` (float32, float16 or bfloat16 scales) and
// `JaxcoreCpuQuantizedMatmulDq` (double-quantized scales), their `...Stacked` forms (one
// matrix of a stack, by index) and the C entry points the Python
// package loads with ctypes. Operand checks here turn bad input into an FFI error (a
// Python exception naming the problem), never an out-of-bounds read.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sched.h>
#endif

#include "placement.h"
#include "qmm.h"
#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace jaxcore_cpu {
namespace {

// Cores this process may run on: the affinity mask where the OS has one (taskset, cgroup
// cpusets), which std::thread::hardware_concurrency() ignores.
int UsableCores() {
#if defined(__linux__)
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
#endif
  return static_cast<int>(std::thread::hardware_concurrency());
}

// What one Parallel() call shares with the pool tasks it schedules. A pool task may start
// after its call has returned (XLA's pool thread wakes late, or is busy), so the states live
// in a fixed set of process-lifetime slots rather than on the heap per call: a late task
// always touches valid memory, and the slot's generation keeps it out of a later call that
// reuses the slot. No allocation per call.
struct CallState {
  // generation << 32 | kClosed | pool tasks inside the call. A task enters only while the
  // generation is its call's and the call is open. Its caller, done, retires the generation
  // and frees the slot, or, with tasks still inside (about to leave), closes the call and
  // leaves that to the last of them: the caller never waits on a task that has no work.
  std::atomic<uint64_t> entry{0};
  int64_t num_tasks = 0;
  const TaskBody* body = nullptr;
  std::atomic<int64_t> next{0};
  std::atomic<int64_t> done{0};
  std::atomic<int> workers{0};
  CpuClaims cpus;  // where the call's workers run
  std::mutex mu;
  std::condition_variable finished;
};

// More concurrent calls than slots run on their calling thread alone.
constexpr int kCallSlots = 64;
CallState g_call_states[kCallSlots];
std::atomic<uint64_t> g_slots_in_use{0};

CallState* AcquireCallState() {
  uint64_t used = g_slots_in_use.load(std::memory_order_relaxed);
  while (~used != 0) {
    const int slot = __builtin_ctzll(~used);
    if (g_slots_in_use.compare_exchange_weak(used, used | (uint64_t{1} << slot),
                                             std::memory_order_acquire)) {
      return &g_call_states[slot];
    }
  }
  return nullptr;
}

constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kInside = kClosed - 1;

void FreeCallState(CallState* s) {
  g_slots_in_use.fetch_and(~(uint64_t{1} << (s - g_call_states)), std::memory_order_release);
}

// Spreads tasks over XLA's intra-op thread pool. Workers (the calling thread plus up to
// num_threads pool tasks) claim task indices from one atomic counter, so a core busy with
// other work just claims fewer; the caller returns once every task has finished. Pool
// tasks that start late find no work left (or their call gone) and leave at once.
class PoolRunner final : public Runner {
 public:
  explicit PoolRunner(ffi::ThreadPool* pool)
      : pool_(pool), helpers_(pool ? static_cast<int>(pool->num_threads()) : 0) {
    // The calling thread works too: more helpers than the other cores only preempt each
    // other, and a preempted worker holding a task delays the whole call by a time slice.
    static const int cores = UsableCores();  // one system call per process
    if (cores > 0) helpers_ = std::min(helpers_, cores - 1);
    if (helpers_ < 0) helpers_ = 0;
  }

  int max_workers() const override { return helpers_ + 1; }

  void Parallel(int64_t num_tasks, TaskBody body) override {
    if (num_tasks <= 0) return;
    const int helpers = static_cast<int>(std::min<int64_t>(helpers_, num_tasks - 1));
    CallState* s = helpers > 0 ? AcquireCallState() : nullptr;
    if (s == nullptr) {
      for (int64_t t = 0; t < num_tasks; ++t) body(t, 0);
      return;
    }
    const uint64_t generation = s->entry.load(std::memory_order_relaxed) >> 32;
    s->num_tasks = num_tasks;
    s->body = &body;
    s->next.store(0, std::memory_order_relaxed);
    s->done.store(0, std::memory_order_relaxed);
    s->workers.store(0, std::memory_order_relaxed);
    s->cpus.Reset();
    s->cpus.Claim();
    for (int h = 0; h < helpers; ++h) {
      pool_->Schedule([s, generation] {
        uint64_t e = s->entry.load(std::memory_order_acquire);
        do {
          if (e >> 32 != generation || (e & kClosed) != 0) return;  // its call has ended
        } while (!s->entry.compare_exchange_weak(e, e + 1, std::memory_order_acq_rel));
        WorkApart(*s);
        const uint64_t before = s->entry.fetch_sub(1, std::memory_order_acq_rel);
        if ((before & kClosed) != 0 && (before & kInside) == 1) {  // the last one out
          s->entry.store((generation + 1) << 32, std::memory_order_release);
          FreeCallState(s);
        }
      });
    }
    Work(*s);
    // The last tasks are in flight on other threads. Spin briefly (they usually end within
    // microseconds), then sleep: on an oversubscribed machine a spinning caller would take
    // the time slices the stragglers need.
    const auto give_up = std::chrono::steady_clock::now() + kSpin;
    while (s->done.load(std::memory_order_acquire) < num_tasks &&
           std::chrono::steady_clock::now() < give_up) {
      std::this_thread::yield();
    }
    if (s->done.load(std::memory_order_acquire) < num_tasks) {
      std::unique_lock<std::mutex> lock(s->mu);
      s->finished.wait(lock, [&] { return s->done.load(std::memory_order_acquire) >= num_tasks; });
    }
    // Every task is done. Retire the generation, or close the call for the last task inside
    // to retire (tasks that start later are turned away either way).
    uint64_t e = generation << 32;
    for (;;) {
      if ((e & kInside) == 0) {
        if (s->entry.compare_exchange_weak(e, (generation + 1) << 32,
                                           std::memory_order_acq_rel)) {
          return FreeCallState(s);
        }
      } else if (s->entry.compare_exchange_weak(e, e | kClosed, std::memory_order_acq_rel)) {
        return;
      }
    }
  }

 private:
  // How long a caller with no tasks left polls before it sleeps: long enough to cover the
  // usual imbalance of the last tasks, short against a time slice.
  static constexpr std::chrono::microseconds kSpin{200};

  // Work() for a pool task, on a CPU of its own: where another worker of the call runs on
  // this CPU (placement.h), the task moves to one that none does for as long as it works.
  static void WorkApart(CallState& s) {
    if (!s.cpus.Claim() || s.next.load(std::memory_order_relaxed) >= s.num_tasks) return Work(s);
    ScopedAvoidCpus apart(s.cpus.claimed());
    if (apart.moved()) s.cpus.Claim();
    Work(s);
  }

  static void Work(CallState& s) {
    int worker = -1;
    for (;;) {
      const int64_t t = s.next.fetch_add(1, std::memory_order_relaxed);
      if (t >= s.num_tasks) return;
      if (worker < 0) worker = s.workers.fetch_add(1, std::memory_order_relaxed);
      (*s.body)(t, worker);
      if (s.done.fetch_add(1, std::memory_order_acq_rel) + 1 == s.num_tasks) {
        std::lock_guard<std::mutex> lock(s.mu);  // so the caller cannot miss the wake-up
        s.finished.notify_all();
      }
    }
  }

  ffi::ThreadPool* pool_;
  int helpers_;
};

std::string Shape(ffi::AnyBuffer::Dimensions dims) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < dims.size(); ++i) os << (i ? ", " : "") << dims[i];
  os << (dims.size() == 1 ? ",)" : ")");
  return os.str();
}

ffi::Error Invalid(const std::string& msg) {
  return ffi::Error(ffi::ErrorCode::kInvalidArgument, "jaxcore_cpu quantized_matmul: " + msg);
}

// Reads attribute `name` as T; `fallback` when absent (nullptr: required).
template <typename T>
ffi::Error ReadAttr(const ffi::Dictionary& attrs, const char* name, const T* fallback, T* out) {
  if (!attrs.contains(name)) {
    if (fallback == nullptr) return Invalid(std::string("missing attribute '") + name + "'");
    *out = *fallback;
    return ffi::Error::Success();
  }
  auto value = attrs.get<T>(name);
  if (value.has_error()) {
    return Invalid(std::string("attribute '") + name + "' has the wrong type (" +
                   (std::is_same_v<T, int64_t> ? "want int64" : "want int32") + ")");
  }
  *out = *value;
  return ffi::Error::Success();
}

// Checks the operands both handlers share (x, qvalue, the result, the attributes) and fills
// every field of *p but the scales. The scales' expected shape is (K / block_size, N).
ffi::Error Common(ffi::AnyBuffer x, ffi::AnyBuffer qvalue, ffi::Result<ffi::AnyBuffer>& result,
                  const ffi::Dictionary& attrs, Problem* p, Path* path) {
  const auto out_dims = result->dimensions();
  const auto ot = result->element_type();
  // fmt and block_size are required; path (0 = auto) and precision (0 = float32) optional.
  int32_t fmt = 0, path_code = 0, precision = 0, transposed = 0;
  int64_t block_size = 0;
  const int32_t zero = 0;
  for (ffi::Error err : {ReadAttr<int32_t>(attrs, "fmt", nullptr, &fmt),
                         ReadAttr<int64_t>(attrs, "block_size", nullptr, &block_size),
                         ReadAttr<int32_t>(attrs, "path", &zero, &path_code),
                         ReadAttr<int32_t>(attrs, "precision", &zero, &precision),
                         ReadAttr<int32_t>(attrs, "transposed", &zero, &transposed)}) {
    if (err.failure()) return err;
  }
  if (transposed < 0 || transposed > 1) {
    return Invalid("transposed must be 0 (x @ W) or 1 (x @ W.T), got " +
                   std::to_string(transposed));
  }
  if (precision < 0 || precision > 1) {
    return Invalid("unknown precision " + std::to_string(precision) + " (0=float32, 1=int8)");
  }
  if (fmt < 0 || fmt > 2) {
    return Invalid("unknown fmt " + std::to_string(fmt) + " (0=int8, 1=int4, 2=nf4)");
  }
  if (path_code < 0 || path_code > 2) {
    return Invalid("unknown path " + std::to_string(path_code) + " (0=auto, 1=gemv, 2=gemm)");
  }
  const Format format = static_cast<Format>(fmt);
  const char* fmt_name = fmt == 0 ? "int8" : fmt == 1 ? "int4" : "nf4";
  if (x.dimensions().size() != 2 || qvalue.dimensions().size() != 2 || out_dims.size() != 2) {
    return Invalid("x, qvalue and the result must all be 2-D; got x " + Shape(x.dimensions()) +
                   ", qvalue " + Shape(qvalue.dimensions()) + ", result " + Shape(out_dims));
  }
  const auto xt = x.element_type();
  if (xt != ffi::DataType::F32 && xt != ffi::DataType::BF16) {
    return Invalid("x must be float32 or bfloat16");
  }
  if (ot != ffi::DataType::F32 && ot != ffi::DataType::BF16) {
    return Invalid("the result must be float32 or bfloat16");
  }
  const auto want_q = format == Format::kInt8 ? ffi::DataType::S8 : ffi::DataType::U8;
  if (qvalue.element_type() != want_q) {
    return Invalid(std::string(fmt_name) + " qvalue must be " +
                   (format == Format::kInt8 ? "int8" : "uint8 (two 4-bit codes per byte)"));
  }
  const int64_t m = x.dimensions()[0], contracted = x.dimensions()[1];
  const int64_t rows = qvalue.dimensions()[0], n = qvalue.dimensions()[1];
  const int64_t per_row = format == Format::kInt8 ? 1 : 2;
  const int64_t k = rows * per_row;
  if (transposed && contracted != n) {
    return Invalid("x @ W.T: x " + Shape(x.dimensions()) + " has " + std::to_string(contracted) +
                   " columns but " + fmt_name + " qvalue " + Shape(qvalue.dimensions()) +
                   " has N=" + std::to_string(n));
  }
  if (!transposed && contracted != k) {
    return Invalid("x " + Shape(x.dimensions()) + " has K=" + std::to_string(contracted) +
                   " but " + fmt_name + " qvalue " + Shape(qvalue.dimensions()) + " holds " +
                   std::to_string(k) + " rows of K");
  }
  if (block_size <= 0 || k % block_size) {
    return Invalid("block_size=" + std::to_string(block_size) +
                   " must be a positive divisor of K=" + std::to_string(k));
  }
  const int64_t columns = transposed ? k : n;
  if (out_dims[0] != m || out_dims[1] != columns) {
    return Invalid(std::string("the result must have shape ") + (transposed ? "(M, K)" : "(M, N)") +
                   " = (" + std::to_string(m) + ", " + std::to_string(columns) + "), got " +
                   Shape(out_dims));
  }
  p->fmt = format;
  p->m = m;
  p->k = k;
  p->n = n;
  p->block_size = block_size;
  p->x = x.untyped_data();
  p->x_dtype = xt == ffi::DataType::F32 ? DType::kF32 : DType::kBF16;
  p->qvalue = qvalue.untyped_data();
  p->out = result->untyped_data();
  p->out_dtype = ot == ffi::DataType::F32 ? DType::kF32 : DType::kBF16;
  p->precision = static_cast<Precision>(precision);
  p->transposed = transposed != 0;
  *path = static_cast<Path>(path_code);
  return ffi::Error::Success();
}

// `name`'s shape must be (K / block_size, N).
ffi::Error CheckScaleShape(const Problem& p, const char* name, ffi::AnyBuffer::Dimensions dims) {
  if (dims.size() != 2 || dims[0] != p.k / p.block_size || dims[1] != p.n) {
    return Invalid(std::string(name) + " must have shape (K // block_size, N) = (" +
                   std::to_string(p.k / p.block_size) + ", " + std::to_string(p.n) + "), got " +
                   Shape(dims));
  }
  return ffi::Error::Success();
}

ffi::Error Execute(ffi::ThreadPool& pool, const Problem& p, Path path) {
  if (std::string err = Validate(p); !err.empty()) return Invalid(err);
  if (p.m == 0 || (p.transposed ? p.k : p.n) == 0) return ffi::Error::Success();
  PoolRunner runner(&pool);
  // Grow-only per-thread workspace: after the first call of a shape, no allocation.
  thread_local std::vector<char> storage;
  const size_t bytes = WorkspaceBytes(p, path, runner.max_workers()) + 64;
  if (storage.size() < bytes) storage.resize(bytes);
  char* base = storage.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64;
  Run(p, path, runner, base);
  return ffi::Error::Success();
}

ffi::Error Impl(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer qvalue,
                ffi::AnyBuffer scale, ffi::Result<ffi::AnyBuffer> out, ffi::Dictionary attrs) {
  Problem p;
  Path path;
  if (ffi::Error err = Common(x, qvalue, out, attrs, &p, &path); err.failure()) return err;
  if (ffi::Error err = CheckScaleShape(p, "scale", scale.dimensions()); err.failure()) return err;
  switch (scale.element_type()) {
    case ffi::DataType::F32:
      p.scale = static_cast<const float*>(scale.untyped_data());
      break;
    case ffi::DataType::F16:
    case ffi::DataType::BF16:
      p.scale_half = static_cast<const uint16_t*>(scale.untyped_data());
      p.scale_half_type =
          scale.element_type() == ffi::DataType::F16 ? HalfType::kF16 : HalfType::kBF16;
      break;
    default:
      return Invalid("scale must be float32, float16 or bfloat16");
  }
  return Execute(pool, p, path);
}

// NF4 with double-quantized scales: int8 codes (K / block_size, N), float32 group scales
// (one per `dq_group` consecutive codes, row-major) and a float32 offset.
ffi::Error ImplDq(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer qvalue,
                  ffi::AnyBuffer codes, ffi::AnyBuffer group_scale, ffi::AnyBuffer offset,
                  ffi::Result<ffi::AnyBuffer> out, ffi::Dictionary attrs) {
  Problem p;
  Path path;
  if (ffi::Error err = Common(x, qvalue, out, attrs, &p, &path); err.failure()) return err;
  int64_t dq_group = 0;
  if (ffi::Error err = ReadAttr<int64_t>(attrs, "dq_group", nullptr, &dq_group); err.failure()) {
    return err;
  }
  if (ffi::Error err = CheckScaleShape(p, "scale codes", codes.dimensions()); err.failure()) {
    return err;
  }
  if (codes.element_type() != ffi::DataType::S8) return Invalid("scale codes must be int8");
  if (group_scale.element_type() != ffi::DataType::F32 || group_scale.dimensions().size() != 1) {
    return Invalid("group_scale must be a 1-D float32 array, got shape " +
                   Shape(group_scale.dimensions()));
  }
  if (offset.element_type() != ffi::DataType::F32 || offset.element_count() != 1) {
    return Invalid("the scale offset must be one float32, got shape " + Shape(offset.dimensions()));
  }
  p.scale_codes = static_cast<const int8_t*>(codes.untyped_data());
  p.group_scale = static_cast<const float*>(group_scale.untyped_data());
  p.group_count = group_scale.dimensions()[0];
  p.dq_group = dq_group;
  p.scale_offset = *static_cast<const float*>(offset.untyped_data());
  return Execute(pool, p, path);
}

// One matrix of a stack: a view of `stack`'s entry `index` along its first axis, as a
// buffer of one rank less sharing the stack's memory (no copy).
class LayerView {
 public:
  LayerView(ffi::AnyBuffer stack, int64_t index) {
    const auto dims = stack.dimensions();
    view_.struct_size = XLA_FFI_Buffer_STRUCT_SIZE;
    view_.extension_start = nullptr;
    view_.dtype = static_cast<XLA_FFI_DataType>(stack.element_type());
    view_.rank = static_cast<int64_t>(dims.size()) - 1;
    view_.dims = const_cast<int64_t*>(dims.begin() + 1);
    const size_t layer_bytes = dims[0] == 0 ? 0 : stack.size_bytes() / dims[0];
    view_.data = static_cast<char*>(stack.untyped_data()) + index * layer_bytes;
  }
  ffi::AnyBuffer buffer() const { return ffi::AnyBuffer(&view_); }

 private:
  XLA_FFI_Buffer view_;
};

// Checks that every weight operand stacks the same number of matrices and reads the layer
// index (an int32 scalar), clamped into range as XLA's dynamic-slice clamps its start.
ffi::Error StackedLayer(ffi::AnyBuffer index, std::initializer_list<ffi::AnyBuffer> stacks,
                        int64_t* layer) {
  if (index.element_type() != ffi::DataType::S32 || index.element_count() != 1) {
    return Invalid("the layer index must be one int32, got shape " + Shape(index.dimensions()));
  }
  int64_t layers = -1;
  for (const ffi::AnyBuffer& stack : stacks) {
    if (stack.dimensions().size() == 0) return Invalid("stacked weight operands need a leading axis");
    const int64_t count = stack.dimensions()[0];
    if (layers >= 0 && count != layers) {
      return Invalid("the stacked weight operands hold different numbers of matrices (" +
                     std::to_string(layers) + " and " + std::to_string(count) + ")");
    }
    layers = count;
  }
  if (layers <= 0) return Invalid("the stack holds no matrices");
  const int64_t i = *static_cast<const int32_t*>(index.untyped_data());
  *layer = std::clamp<int64_t>(i, 0, layers - 1);
  return ffi::Error::Success();
}

ffi::Error ImplStacked(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer index,
                       ffi::AnyBuffer qvalue, ffi::AnyBuffer scale,
                       ffi::Result<ffi::AnyBuffer> out, ffi::Dictionary attrs) {
  int64_t layer = 0;
  if (ffi::Error err = StackedLayer(index, {qvalue, scale}, &layer); err.failure()) return err;
  const LayerView q(qvalue, layer), s(scale, layer);
  return Impl(pool, x, q.buffer(), s.buffer(), out, attrs);
}

ffi::Error ImplDqStacked(ffi::ThreadPool pool, ffi::AnyBuffer x, ffi::AnyBuffer index,
                         ffi::AnyBuffer qvalue, ffi::AnyBuffer codes, ffi::AnyBuffer group_scale,
                         ffi::AnyBuffer offset, ffi::Result<ffi::AnyBuffer> out,
                         ffi::Dictionary attrs) {
  int64_t layer = 0;
  if (ffi::Error err = StackedLayer(index, {qvalue, codes, group_scale, offset}, &layer);
      err.failure()) {
    return err;
  }
  const LayerView q(qvalue, layer), c(codes, layer), g(group_scale, layer), o(offset, layer);
  return ImplDq(pool, x, q.buffer(), c.buffer(), g.buffer(), o.buffer(), out, attrs);
}

}  // namespace
}  // namespace jaxcore_cpu

// The library is built with hidden visibility; these are its exported symbols.
extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* JaxcoreCpuQuantizedMatmul(
    XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcoreCpuQuantizedMatmul, jaxcore_cpu::Impl,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x (M, K)
                                  .Arg<ffi::AnyBuffer>()  // qvalue
                                  .Arg<ffi::AnyBuffer>()  // scale (K / block_size, N)
                                  .Ret<ffi::AnyBuffer>()  // (M, N)
                                  .Attrs<ffi::Dictionary>());

extern "C" __attribute__((visibility("default"))) XLA_FFI_Error* JaxcoreCpuQuantizedMatmulDq(
    XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcoreCpuQuantizedMatmulDq, jaxcore_cpu::ImplDq,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x (M, K)
                                  .Arg<ffi::AnyBuffer>()  // qvalue
                                  .Arg<ffi::AnyBuffer>()  // scale codes (K / block_size, N)
                                  .Arg<ffi::AnyBuffer>()  // group scales
                                  .Arg<ffi::AnyBuffer>()  // offset ()
                                  .Ret<ffi::AnyBuffer>()  // (M, N)
                                  .Attrs<ffi::Dictionary>());

// The same products on one matrix of a stack (L, ...) of weights, chosen by an int32 index:
// a scan over stacked layers passes the whole stack, which XLA would otherwise copy layer by
// layer into a buffer of its own before each call.
extern "C" __attribute__((visibility("default"))) XLA_FFI_Error*
JaxcoreCpuQuantizedMatmulStacked(XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcoreCpuQuantizedMatmulStacked, jaxcore_cpu::ImplStacked,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x (M, K)
                                  .Arg<ffi::AnyBuffer>()  // index () int32
                                  .Arg<ffi::AnyBuffer>()  // qvalue (L, ...)
                                  .Arg<ffi::AnyBuffer>()  // scale (L, K / block_size, N)
                                  .Ret<ffi::AnyBuffer>()  // (M, N)
                                  .Attrs<ffi::Dictionary>());

extern "C" __attribute__((visibility("default"))) XLA_FFI_Error*
JaxcoreCpuQuantizedMatmulDqStacked(XLA_FFI_CallFrame* call_frame);

XLA_FFI_DEFINE_HANDLER_SYMBOL(JaxcoreCpuQuantizedMatmulDqStacked, jaxcore_cpu::ImplDqStacked,
                              ffi::Ffi::Bind()
                                  .Ctx<ffi::ThreadPool>()
                                  .Arg<ffi::AnyBuffer>()  // x (M, K)
                                  .Arg<ffi::AnyBuffer>()  // index () int32
                                  .Arg<ffi::AnyBuffer>()  // qvalue (L, ...)
                                  .Arg<ffi::AnyBuffer>()  // scale codes (L, K / block_size, N)
                                  .Arg<ffi::AnyBuffer>()  // group scales (L, groups)
                                  .Arg<ffi::AnyBuffer>()  // offset (L,)
                                  .Ret<ffi::AnyBuffer>()  // (M, N)
                                  .Attrs<ffi::Dictionary>());

extern "C" {

__attribute__((visibility("default"))) const char* JaxcoreCpuIsa(void) {
  return jaxcore_cpu::IsaName(jaxcore_cpu::ActiveIsa());
}

__attribute__((visibility("default"))) const char* JaxcoreCpuDetectedIsa(void) {
  return jaxcore_cpu::IsaName(jaxcore_cpu::DetectIsa());
}

// Returns 1 when `name` ("portable", "avx2", "avx512", "dotprod", ...) is now the active
// instruction set, 0 when the name is unknown or the CPU lacks it.
__attribute__((visibility("default"))) int JaxcoreCpuSetIsa(const char* name) {
  if (name == nullptr) return 0;
  for (auto isa : {jaxcore_cpu::Isa::kPortable, jaxcore_cpu::Isa::kAvx2,
                   jaxcore_cpu::Isa::kAvxVnni, jaxcore_cpu::Isa::kAvx512,
                   jaxcore_cpu::Isa::kAmx, jaxcore_cpu::Isa::kDotProd}) {
    if (std::strcmp(name, jaxcore_cpu::IsaName(isa)) == 0) {
      return jaxcore_cpu::SetIsa(isa) ? 1 : 0;
    }
  }
  return 0;
}

}  // extern "C"
