"""The names ``jaxcore.named._core`` used to define, for modules written against it.

``NamedArray`` now lives in `_array`, name-based broadcasting in `_broadcast` and indexing
in `_indexing` (and the methods are bound in `_methods`); new code imports from those.
"""

from jaxcore.named._array import (  # noqa: F401 - re-exports
    AxesSpec,
    NamedArray,
    NamedOrNumeric,
    _check_named,
    _describe,
    _is_scalar_like,
    _Tracer,
)
from jaxcore.named._broadcast import (  # noqa: F401 - re-exports
    EAGER_KERNEL_FNS,
    _wrap_result,
    broadcast_arrays,
    broadcast_axis,
    broadcast_to,
    elementwise_binary,
    elementwise_nary,
    named,
)
from jaxcore.named._indexing import (  # noqa: F401 - re-exports
    dblock,
    ds,
    dslice,
    index,
    slice,
    take,
    updated_slice,
)
