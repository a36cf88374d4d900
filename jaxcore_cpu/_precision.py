"""The activation precision of the kernel jaxcore.kernels runs on CPU.

``float32`` (exact) is the default; ``int8`` trades about 1e-3 relative error for integer
arithmetic (see :data:`jaxcore_cpu.PRECISIONS`). The choice is the implementation
registered with ``jaxcore.kernels``, so it applies to programs traced after it is made; a
function ``jax.jit`` already traced for the same shapes keeps the precision it was traced
with.
"""

from __future__ import annotations

import os

from jaxcore import kernels as _kernels

from ._matmul import DQ_IMPLS_BY_PRECISION, IMPLS_BY_PRECISION, PRECISIONS
from ._setting import Setting
from ._stacked import STACKED_IMPLS_BY_PRECISION

PRECISION_ENV_VAR = "JAXCORE_CPU_PRECISION"
"""Environment variable with the initial precision (``float32`` or ``int8``)."""

_KERNEL = "quantized_matmul"
_DQ_KERNEL = "quantized_matmul_dq"
_STACKED_KERNEL = "quantized_matmul_stacked"


def _initial() -> str:
    value = os.environ.get(PRECISION_ENV_VAR, "").strip() or "float32"
    if value not in PRECISIONS:
        raise ValueError(
            f"{PRECISION_ENV_VAR}={value!r} is not a precision; expected one of {tuple(PRECISIONS)}"
        )
    return value


_current = _initial()


def precision() -> str:
    """The precision the registered CPU kernel uses (``"float32"`` or ``"int8"``)."""
    return _current


class PrecisionSetting(Setting):
    """What :func:`set_precision` returns: as a context manager it restores the previous one."""


def _apply(name: str) -> None:
    global _current
    _current = name
    # Swap the registered implementations only where this plugin's are the ones registered.
    for kernel, impls in (
        (_KERNEL, IMPLS_BY_PRECISION),
        (_DQ_KERNEL, DQ_IMPLS_BY_PRECISION),
        (_STACKED_KERNEL, STACKED_IMPLS_BY_PRECISION),
    ):
        registered = _kernels.registered_kernels(kernel).get("cpu")
        if (
            registered is not None
            and registered in impls.values()
            and registered is not impls[name]
        ):
            _kernels.register_kernel(kernel, "cpu", impls[name])


def set_precision(name: str) -> PrecisionSetting:
    """Selects how activations enter the CPU kernel that ``jaxcore.kernels`` dispatches to.

    Plainly (``set_precision("int8")``) or as a context manager that restores the previous
    choice::

        with jaxcore_cpu.set_precision("int8"):
            y = jax.jit(model)(x, params)   # traced here: int8 activations

    Args:
      name: ``"float32"`` (exact, the default) or ``"int8"``.

    Returns:
      A :class:`PrecisionSetting`.

    Raises:
      ValueError: an unknown name.
    """
    if name not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; expected one of {tuple(PRECISIONS)}")
    previous = _current
    _apply(name)
    return PrecisionSetting(previous, name, _apply)
