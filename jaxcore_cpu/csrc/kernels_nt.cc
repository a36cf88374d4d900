// The transposed product's row kernel and transposing panel decoder (kernels_nt.h) compiled for portable (SSE2 on x86-64, NEON on aarch64).
#include "kernels_nt.h"

namespace jaxcore_cpu {
namespace internal {

void NtRowsPortable(const NtPiece& p) { NtRowsImpl(p); }

void NtDecodePanelPortable(const DecodePanel& d) { NtDecodePanelImpl(d); }

}  // namespace internal
}  // namespace jaxcore_cpu
