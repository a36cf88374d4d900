// The transposed product's row kernel and transposing panel decoder (kernels_nt.h) compiled for AVX2 + FMA.
#include "kernels_nt.h"

namespace jaxcore_cpu {
namespace internal {

void NtRowsAvx2(const NtPiece& p) { NtRowsImpl(p); }

void NtDecodePanelAvx2(const DecodePanel& d) { NtDecodePanelImpl(d); }

}  // namespace internal
}  // namespace jaxcore_cpu
