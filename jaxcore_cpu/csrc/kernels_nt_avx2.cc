// The transposed product's row kernel (kernels_nt.h) compiled for AVX2 + FMA.
#include "kernels_nt.h"

namespace jaxcore_cpu {
namespace internal {

void NtRowsAvx2(const NtPiece& p) { NtRowsImpl(p); }

}  // namespace internal
}  // namespace jaxcore_cpu
