// The transposed product's row kernel (kernels_nt.h) compiled for AVX-512.

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels_nt.h"

namespace jaxcore_cpu {
namespace internal {

void NtRowsAvx512(const NtPiece& p) { NtRowsImpl(p); }

}  // namespace internal
}  // namespace jaxcore_cpu
