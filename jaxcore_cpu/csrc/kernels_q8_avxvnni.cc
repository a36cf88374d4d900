// AVX-VNNI int8-activation kernel (Precision::kInt8): the 256-bit task kernel of
// kernels_q8_ymm.h with its products on vpdpbusd, which takes in one instruction the 32
// products that cost AVX2 vpmaddubsw, vpmaddwd, vpaddd and, for int8 and NF4, vpsignb.
//
// Built twice (BUILD.bazel), only ever called after the run-time cpuid check:
//  * with -mavxvnni: the VEX encoding, for CPUs with AVX-VNNI (Intel Alder Lake and later
//    client cores, Sapphire Rapids and later servers): AvxVnniKernels();
//  * with the AVX-512 flags and only 16 vector registers: the EVEX encoding of the same
//    instructions, so that the "avxvnni" instruction set also runs on AVX-512 VNNI CPUs
//    without AVX-VNNI (AMD Zen 4, Intel Ice Lake), where the native and Python tests check it
//    against the portable kernels and the benchmark times it (--isa avxvnni):
//    AvxVnniEvexKernels().
#include <immintrin.h>

#include "kernels.h"
#include "kernels_q8_ymm.h"

namespace jaxcore_cpu {
namespace internal {
namespace {

struct VnniProducts {
  static constexpr bool kVnni = true;
  static __m256i Dot(__m256i acc, __m256i u, __m256i x) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    return _mm256_dpbusd_epi32(acc, u, x);
#else
    return _mm256_dpbusd_avx_epi32(acc, u, x);
#endif
  }
};

void Q8TaskAvxVnni(const Q8Task& t) { Q8TaskYmm<VnniProducts>(t); }

KernelTable AvxVnniTable() {
  KernelTable t = Avx2Kernels();
  t.q8_task = Q8TaskAvxVnni;
  return t;
}

}  // namespace

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
const KernelTable& AvxVnniEvexKernels() {
#else
const KernelTable& AvxVnniKernels() {
#endif
  static const KernelTable table = AvxVnniTable();
  return table;
}

}  // namespace internal
}  // namespace jaxcore_cpu
