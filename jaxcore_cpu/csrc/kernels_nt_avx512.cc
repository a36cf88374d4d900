// The transposed product's row kernel and transposing panel decoder (kernels_nt.h) compiled for AVX-512.

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (a self-initialized variable),
// which -Wmaybe-uninitialized reports once they are inlined (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include "kernels_nt.h"

namespace jaxcore_cpu {
namespace internal {

void NtRowsAvx512(const NtPiece& p) { NtRowsImpl(p); }

void NtDecodePanelAvx512(const DecodePanel& d) { NtDecodePanelImpl(d); }

}  // namespace internal
}  // namespace jaxcore_cpu
