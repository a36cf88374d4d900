"""The forced interpret-mode switch, ``JAXCORE_PALLAS_INTERPRET``.

Fused plugin kernels (Pallas) can run on CPU in interpret mode. Setting the variable makes a
plugin kernel serve the CPU branch of the platform dispatch, so its code path can be tested
end to end on a machine without the accelerator. It is read at trace time: functions traced
(and cached by ``jax.jit``) before it changes keep their old choice.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping

ENV_VAR = "JAXCORE_PALLAS_INTERPRET"
_ACCELERATOR_PLATFORMS = ("cuda", "rocm", "tpu")


def interpret_platform(kernel: str, impls: Mapping[str, Callable]) -> str | None:
    """Returns the platform whose impl should serve the CPU branch in interpret mode.

    Args:
      kernel: kernel name, for messages.
      impls: the registered ``{platform: impl}`` of that kernel, in registration order.

    Returns:
      ``None`` when interpret mode is off (variable unset or ``"0"``); otherwise a
      non-CPU platform: the first registered one for ``"1"``, or the one named.

    Raises:
      ValueError: for a value other than unset, "0", "1", "cuda", "rocm", "tpu".
      RuntimeError: when the named platform has no registered impl of ``kernel``.
    """
    value = os.environ.get(ENV_VAR, "").strip().lower()
    if value in ("", "0"):
        return None
    if value == "1":
        for platform in impls:
            if platform != "cpu":
                return platform
        warnings.warn(
            f"{ENV_VAR}=1 but no non-CPU {kernel!r} kernel is registered (registered: "
            f"{sorted(impls)}); the CPU branch keeps its own implementation",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    if value in _ACCELERATOR_PLATFORMS:
        if value not in impls:
            raise RuntimeError(
                f"{ENV_VAR}={value} asks the {value} {kernel!r} kernel to run in interpret mode, "
                f"but none is registered for {value!r} (registered: {sorted(impls)}); "
                f"is the jaxcore plugin for {value} installed and loaded?"
            )
        return value
    raise ValueError(
        f"{ENV_VAR}={value!r} is not understood; use unset or '0' (off), '1' (first registered "
        f"accelerator kernel), or one of {_ACCELERATOR_PLATFORMS}"
    )
