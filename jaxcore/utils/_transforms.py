"""Type-preserving wrappers around ``jax.jit``, ``jnp.vectorize``, ``jax.linearize``
and ``jax.shard_map``.

JAX's own wrappers return loosely typed objects; these keep the wrapped
callable's type (``C -> C``) for static checkers and accept the decorator forms
``@jit`` and ``@jit(static_argnames=...)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypedDict, TypeVar, Unpack, cast, overload

import jax
import jax.numpy as jnp

from jaxcore import _jax_internals

C = TypeVar("C", bound=Callable[..., Any])


def _require_callable(api: str, fn: Any) -> None:
    if not callable(fn):
        raise TypeError(f"{api} expects a callable to transform, got {type(fn).__name__}: {fn!r}")


class _JitOptions(TypedDict, total=False):
    """The keyword arguments of :func:`jit` (documented there)."""

    in_shardings: Any
    out_shardings: Any
    static_argnums: int | Sequence[int] | None
    static_argnames: str | Iterable[str] | None
    donate_argnums: int | Sequence[int] | None
    donate_argnames: str | Iterable[str] | None
    keep_unused: bool
    device: Any
    backend: str | None
    inline: bool
    abstracted_axes: Any
    compiler_options: dict[str, Any] | None


@overload
def jit(fn: C, **kwargs: Unpack[_JitOptions]) -> C: ...


@overload
def jit(fn: None = None, **kwargs: Unpack[_JitOptions]) -> Callable[[C], C]: ...


def jit(
    fn: C | None = None,
    *,
    in_shardings: Any = None,
    out_shardings: Any = None,
    static_argnums: int | Sequence[int] | None = None,
    static_argnames: str | Iterable[str] | None = None,
    donate_argnums: int | Sequence[int] | None = None,
    donate_argnames: str | Iterable[str] | None = None,
    keep_unused: bool = False,
    device: Any = None,
    backend: str | None = None,
    inline: bool = False,
    abstracted_axes: Any = None,
    compiler_options: dict[str, Any] | None = None,
) -> C | Callable[[C], C]:
    """Just-in-time compiles ``fn`` with ``jax.jit``, keeping its type.

    Args:
        fn: pure function to compile, or ``None`` to get a decorator.
        in_shardings: input shardings; ``None`` leaves them unspecified (JAX
            chooses), anything else is forwarded to ``jax.jit``.
        out_shardings: output shardings; ``None`` leaves them unspecified.
        static_argnums: positional arguments treated as compile-time constants.
        static_argnames: keyword arguments treated as compile-time constants.
        donate_argnums: positional arguments whose buffers may be reused.
        donate_argnames: keyword arguments whose buffers may be reused.
        keep_unused: keep arguments that the computation does not use.
        device: device to run on (deprecated in JAX; prefer shardings).
        backend: XLA backend name, e.g. ``"cpu"``.
        inline: inline the function into enclosing jaxprs.
        abstracted_axes: accepted for API compatibility; jax 0.10.2 has no
            dynamic-shape ``jit``, so only ``None`` is allowed.
        compiler_options: XLA compiler options.

    Returns:
        The compiled function (same type as ``fn``), or a decorator if ``fn`` is
        ``None``.

    Raises:
        TypeError: if ``fn`` is not callable.
        NotImplementedError: if ``abstracted_axes`` is not ``None``.
    """
    if abstracted_axes is not None:
        raise NotImplementedError(
            f"jit(abstracted_axes={abstracted_axes!r}): jax {jax.__version__} has no "
            "dynamic-shape jit (jax.jit takes no abstracted_axes); pass None"
        )
    kwargs: dict[str, Any] = dict(
        static_argnums=static_argnums,
        static_argnames=static_argnames,
        donate_argnums=donate_argnums,
        donate_argnames=donate_argnames,
        keep_unused=keep_unused,
        device=device,
        backend=backend,
        inline=_jax_internals.jit_inline_option(inline),
        compiler_options=compiler_options,
    )
    # jax.jit's default for shardings is an "unspecified" sentinel, not None.
    if in_shardings is not None:
        kwargs["in_shardings"] = in_shardings
    if out_shardings is not None:
        kwargs["out_shardings"] = out_shardings

    def wrap(f: C) -> C:
        _require_callable("jit", f)
        return cast(C, jax.jit(f, **kwargs))

    return wrap if fn is None else wrap(fn)


def vectorize(
    pyfunc: C | None = None,
    *,
    excluded: frozenset[int] = frozenset(),
    signature: str | None = None,
) -> C | Callable[[C], C]:
    """Vectorizes ``pyfunc`` with broadcasting (``jax.numpy.vectorize``), keeping its type.

    Args:
        pyfunc: function to vectorize, or ``None`` to get a decorator.
        excluded: positional argument indices passed through unvectorized.
        signature: generalized-ufunc signature such as ``"(n),(n)->()"``; without
            it every argument is treated as scalar-core.

    Returns:
        The vectorized function (same type), or a decorator.

    Raises:
        TypeError: if ``pyfunc`` is not callable.
    """

    def wrap(f: C) -> C:
        _require_callable("vectorize", f)
        return cast(C, jnp.vectorize(f, excluded=excluded, signature=signature))

    return wrap if pyfunc is None else wrap(pyfunc)


def linearize(fn: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple[Any, ...]:
    """Linearizes ``fn`` at ``primals`` (``jax.linearize``).

    Args:
        fn: function to linearize.
        *primals: point at which to linearize (one argument per parameter).
        has_aux: if True, ``fn`` returns ``(output, aux)`` and ``aux`` is returned
            unchanged as a third element.

    Returns:
        ``(output, jvp_fn)`` or ``(output, jvp_fn, aux)``; ``jvp_fn(*tangents)``
        evaluates the Jacobian-vector product at ``primals``.

    Raises:
        TypeError: if ``fn`` is not callable.
    """
    _require_callable("linearize", fn)
    # Two calls: jax.linearize's overloads key its result's length on a literal has_aux.
    if has_aux:
        return jax.linearize(fn, *primals, has_aux=True)
    return jax.linearize(fn, *primals, has_aux=False)


def shard_map(
    f: C,
    /,
    *,
    out_specs: Any,
    in_specs: Any = None,
    mesh: Any = None,
    axis_names: frozenset = frozenset(),
    check_vma: bool = True,
) -> C:
    """Maps ``f`` over shards of its inputs on a device mesh (``jax.shard_map``).

    Args:
        f: per-shard function.
        out_specs: pytree of ``PartitionSpec`` describing how output shards are
            assembled.
        in_specs: pytree of ``PartitionSpec`` (a prefix of the argument tuple);
            ``None`` means "infer from the arguments' shardings" (JAX's default,
            which needs ``Explicit`` mesh axes).
        mesh: the ``Mesh``; ``None`` takes the one set by ``jax.set_mesh``.
        axis_names: mesh axes over which ``f`` is manual (empty: all).
        check_vma: enable JAX's varying-manual-axes checks.

    Returns:
        The sharded function, with ``f``'s type.

    Raises:
        TypeError: if ``f`` is not callable.
    """
    _require_callable("shard_map", f)
    kwargs: dict[str, Any] = dict(
        out_specs=out_specs, mesh=mesh, axis_names=frozenset(axis_names), check_vma=check_vma
    )
    # Omitting in_specs selects jax.shard_map's "infer from arguments" default
    # (its sentinel is not public API).
    if in_specs is not None:
        kwargs["in_specs"] = in_specs
    return jax.shard_map(f, **kwargs)
