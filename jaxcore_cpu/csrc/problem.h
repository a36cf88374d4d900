// The types of one weight-only quantized matmul on CPU: the problem (formats, dtypes,
// operands), the path and precision choices, the instruction sets, and the task runner the
// work is spread with. Plain C++, no code of its own: qmm.h declares the entry points; the
// kernels and the planners (kernels.h, plan.h, gemm.h, transposed.h) need only these types.
#ifndef JAXCORE_CPU_CSRC_PROBLEM_H_
#define JAXCORE_CPU_CSRC_PROBLEM_H_

#include <cstdint>
#include <memory>
#include <type_traits>

namespace jaxcore_cpu {

enum class Format : int32_t { kInt8 = 0, kInt4 = 1, kNf4 = 2 };
enum class DType : int32_t { kF32 = 0, kBF16 = 1 };
// The 16-bit floats block scales may be stored as (Problem::scale_half).
enum class HalfType : int32_t { kF16 = 0, kBF16 = 1 };
// kAuto picks GEMV for small M and the cache-blocked GEMM otherwise.
enum class Path : int32_t { kAuto = 0, kGemv = 1, kGemm = 2 };
// How activations enter the products. kFloat32 is exact (float32 products of the decoded
// weights, as the dequantize-then-dot reference). kInt8 quantizes each activation row to
// int8 with a scale per 32 values along K (per 64 for int4 and NF4 in blocks of a multiple
// of 64: internal::Q8ScaleSpan) and sums integer products, as llama.cpp does: about twice
// the arithmetic rate, at a relative error of a few 1e-3 (NF4 codes also round to int8).
// It applies where block_size is a multiple of 32 and, with the portable kernels,
// M <= kInt8MaxM (AVX2, AVX-VNNI and AVX-512 VNNI take every M); elsewhere kFloat32.
enum class Precision : int32_t { kFloat32 = 0, kInt8 = 1 };
constexpr int64_t kInt8MaxM = 64;
// Instruction sets the kernels are compiled for. x86-64's, best last: kAvxVnni is AVX2 with
// 256-bit vpdpbusd: AVX-VNNI, or AVX-512 VL + VNNI (which every kAvx512 CPU has); kAvx512
// needs AVX-512 F, BW, VL, DQ and VNNI. aarch64's: kDotProd, NEON with sdot (FEAT_DotProd).
// SupportedIsas() (qmm.h) lists the ones a CPU runs.
enum class Isa : int32_t {
  kPortable = 0,
  kAvx2 = 1,
  kAvxVnni = 2,
  kAvx512 = 3,
  kDotProd = 4,
  kAmx = 5,  // x86-64: kAvx512 and AMX tiles (bf16); after kDotProd to keep the values
};

// One quantized matmul. All arrays are dense row-major; the caller owns them.
struct Problem {
  Format fmt = Format::kInt8;
  int64_t m = 0, k = 0, n = 0;   // logical sizes
  int64_t block_size = 0;        // logical rows of K per scale row
  const void* x = nullptr;       // (m, k) of x_dtype
  DType x_dtype = DType::kF32;
  const void* qvalue = nullptr;  // (k, n) int8, or (k / 2, n) packed uint8
  const float* scale = nullptr;  // (k / block_size, n) float32
  void* out = nullptr;           // (m, n) of out_dtype
  DType out_dtype = DType::kF32;
  Precision precision = Precision::kFloat32;
  // The transposed product out(M, K) = x(M, N) @ W^T instead: x is (m, n) and out (m, k).
  // Its paths: kGemv streams W's rows along N with the activation rows in registers, kGemm
  // runs the GEMM over panels decoded from W's rows transposed, kAuto picks by M. One
  // precision (float32: `precision` is ignored); float32 or 16-bit scales (no scale_codes).
  bool transposed = false;
  // Double-quantized scales (NF4 with QLoRA's compressed absmax), read instead of `scale`
  // when scale_codes is set. With B = K / block_size and i = b * N + n the flat index:
  //   scale[b][n] = min(scale_codes[i] * group_scale[i / dq_group] + scale_offset, FLT_MAX)
  // (jaxcore/kernels/_dq_scales.py is the spec; NaN stays NaN). Run() expands them into its
  // workspace, so the kernels read plain float32 scales: on the split-K paths each task
  // expands just the blocks and columns it reads (they stay in cache, and the int8 codes are
  // the only scale bytes read from memory); the GEMM path expands all of them once per call.
  const int8_t* scale_codes = nullptr;  // (K / block_size, N)
  const float* group_scale = nullptr;   // (group_count,)
  int64_t group_count = 0;              // must be ceil(B * N / dq_group)
  int64_t dq_group = 256;
  float scale_offset = 0.0f;
  // 16-bit scales (float16, as llama.cpp stores them, or bfloat16), read instead of `scale`
  // when scale_half is set: (K / block_size, N) of scale_half_type, each converted exactly to
  // float32. Expanded as double-quantized scales are (above), so a weight's scales cost half
  // the bytes from memory and the kernels still read float32 (the transposed product's rows
  // path converts a chunk of a scale row at a time). Not with scale_codes.
  const uint16_t* scale_half = nullptr;
  HalfType scale_half_type = HalfType::kF16;
};

// A task body: a reference to a callable taking (int64_t task, int worker). Unlike
// std::function it never allocates (Run() makes no allocation per call); it refers to the
// callable, which must outlive it (a lambda passed straight to Parallel() does).
class TaskBody {
 public:
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, TaskBody>>>
  TaskBody(F&& f)  // NOLINT(google-explicit-constructor): lambdas convert, as to std::function
      : callable_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* callable, int64_t task, int worker) {
          (*static_cast<std::remove_reference_t<F>*>(callable))(task, worker);
        }) {}
  void operator()(int64_t task, int worker) const { call_(callable_, task, worker); }

 private:
  void* callable_;
  void (*call_)(void*, int64_t, int);
};

// Runs tasks 0..num_tasks-1, each exactly once, possibly in parallel, and returns when
// all have finished. `worker` passed to the body is in [0, max_workers()) and is unique
// among the bodies running at one time, so it can index per-worker scratch.
class Runner {
 public:
  virtual ~Runner() = default;
  virtual int max_workers() const = 0;
  virtual void Parallel(int64_t num_tasks, TaskBody body) = 0;
};

// Runs every task on the calling thread (tests, and the fallback without a thread pool).
class SerialRunner final : public Runner {
 public:
  int max_workers() const override { return 1; }
  void Parallel(int64_t num_tasks, TaskBody body) override {
    for (int64_t t = 0; t < num_tasks; ++t) body(t, 0);
  }
};

}  // namespace jaxcore_cpu

#endif  // JAXCORE_CPU_CSRC_PROBLEM_H_
