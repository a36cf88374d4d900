"""Named random numbers: ``jax.random`` samplers whose shapes are named axes (``hax.random``).

Every sampler takes the key first and a named ``shape`` (an ``Axis``, a sequence of
``Axis`` or a shape dict), draws with the ``jax.random`` function of the same name on the
positional shape, and names the result. So ``hax.random.normal(key, (B, H)).array`` equals
``jax.random.normal(key, (B.size, H.size))`` bit for bit: code ported from positional JAX
keeps its random streams.

Distribution parameters (``minval``, ``p``, ``a``, ...) may be scalars or ``NamedArray``
values; a named parameter is broadcast to ``shape`` by name (its axes must all be in
``shape``), which is what lets a per-row ``p`` line up with the right axis.

When an axis mapping is installed (``hax.axis_mapping``) and a mesh is set, results are
sharded by their axis names, as Haliax does.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable

import jax.random as jrandom

from jaxcore.named._array import NamedArray, NamedOrNumeric, describe_axes
from jaxcore.named._axis import Axis, AxisSelector, AxisSpec, axis_name, to_axes
from jaxcore.named._broadcast import broadcast_to
from jaxcore.named._partitioning import current_axis_mapping, physical_axis_name, shard
from jaxcore.named.hof import vmap

__all__ = [
    "ball",
    "bernoulli",
    "beta",
    "categorical",
    "cauchy",
    "choice",
    "dirichlet",
    "exponential",
    "gamma",
    "generate_sharded",
    "gumbel",
    "laplace",
    "logistic",
    "loggamma",
    "normal",
    "pareto",
    "permutation",
    "poisson",
    "rademacher",
    "randint",
    "t",
    "truncated_normal",
    "uniform",
    "weibull_min",
]


def _shape(fname: str, shape: AxisSpec) -> tuple[Axis, ...]:
    """The axes of a requested ``shape``, with errors that say which sampler was called."""
    try:
        return to_axes(shape)
    except (TypeError, ValueError) as e:
        raise type(e)(f"hax.random.{fname}: bad shape {shape!r}: {e}") from None


def _param(fname: str, pname: str, value: NamedOrNumeric, axes: tuple[Axis, ...]):
    """A distribution parameter laid out for ``axes`` (scalars and plain arrays pass through).

    A ``NamedArray`` is broadcast to ``axes`` by name; an axis it has that ``axes`` lacks
    (or a size clash) is an error naming both. A positional array is passed to
    ``jax.random`` as is, which broadcasts it positionally, as plain JAX would.
    """
    if isinstance(value, NamedArray):
        try:
            return broadcast_to(value, axes).array
        except ValueError as e:
            raise ValueError(
                f"hax.random.{fname}: parameter {pname!r} with axes {describe_axes(value.axes)} "
                f"does not broadcast to the shape {describe_axes(axes)}: {e}"
            ) from None
    return value


def _finish(array, axes: tuple[Axis, ...]) -> NamedArray:
    """Names ``array`` and, if an axis mapping is installed with a mesh, shards it."""
    out = NamedArray._new(array, axes)
    if current_axis_mapping():
        try:
            return shard(out)
        except ValueError as e:
            if "needs a mesh" in str(e):
                return out  # a mapping without a mesh: nothing to place on (Haliax: no-op)
            raise
    return out


def _sizes(axes: tuple[Axis, ...]) -> tuple[int, ...]:
    return tuple(a.size for a in axes)


def _index(fname: str, x: NamedArray, axis: AxisSelector, what: str) -> int:
    if not isinstance(x, NamedArray):
        raise TypeError(f"hax.random.{fname}: {what} must be a NamedArray, got {type(x).__name__}")
    name = axis_name(axis)
    if not isinstance(name, str):
        raise TypeError(
            f"hax.random.{fname}: axis must be one axis (an Axis or a name), got {axis!r}"
        )
    try:
        i = x._names.index(name)
    except ValueError:
        raise ValueError(
            f"hax.random.{fname}: axis {name!r} is not in {what} with axes {describe_axes(x.axes)}"
        ) from None
    if isinstance(axis, Axis) and axis.size != x.axes[i].size:
        raise ValueError(
            f"hax.random.{fname}: axis {name!r} has size {x.axes[i].size} in {what}, but {axis} was given"
        )
    return i


# ------------------------------------------------------------------------ continuous


def uniform(
    key, shape: AxisSpec, dtype=float, minval: NamedOrNumeric = 0.0, maxval: NamedOrNumeric = 1.0
) -> NamedArray:
    """Uniform samples in ``[minval, maxval)`` with the given named shape."""
    axes = _shape("uniform", shape)
    lo = _param("uniform", "minval", minval, axes)
    hi = _param("uniform", "maxval", maxval, axes)
    return _finish(jrandom.uniform(key, _sizes(axes), dtype=dtype, minval=lo, maxval=hi), axes)


def normal(key, shape: AxisSpec, dtype=float) -> NamedArray:
    """Standard normal samples with the given named shape."""
    axes = _shape("normal", shape)
    return _finish(jrandom.normal(key, _sizes(axes), dtype=dtype), axes)


def truncated_normal(
    key, shape: AxisSpec, lower: NamedOrNumeric, upper: NamedOrNumeric, dtype=float
) -> NamedArray:
    """Standard normal samples truncated to ``[lower, upper]``."""
    axes = _shape("truncated_normal", shape)
    lo = _param("truncated_normal", "lower", lower, axes)
    hi = _param("truncated_normal", "upper", upper, axes)
    return _finish(jrandom.truncated_normal(key, lo, hi, _sizes(axes), dtype=dtype), axes)


def _no_param(jax_fn: Callable, fname: str, doc: str):
    def sampler(key, shape: AxisSpec, dtype=float) -> NamedArray:
        axes = _shape(fname, shape)
        return _finish(jax_fn(key, _sizes(axes), dtype=dtype), axes)

    sampler.__name__ = sampler.__qualname__ = fname
    sampler.__doc__ = f"{doc} with the given named shape (``jax.random.{fname}`` on the same key)."
    return sampler


gumbel = _no_param(jrandom.gumbel, "gumbel", "Standard Gumbel samples")
laplace = _no_param(jrandom.laplace, "laplace", "Standard Laplace samples")
exponential = _no_param(jrandom.exponential, "exponential", "Standard exponential samples")
cauchy = _no_param(jrandom.cauchy, "cauchy", "Standard Cauchy samples")
logistic = _no_param(jrandom.logistic, "logistic", "Standard logistic samples")


def rademacher(key, shape: AxisSpec, dtype=float) -> NamedArray:
    """Random signs (+1 / -1 with equal probability) with the given named shape."""
    axes = _shape("rademacher", shape)
    return _finish(jrandom.rademacher(key, _sizes(axes), dtype=dtype), axes)


def _one_parameter(jax_fn, fname: str, key, shape, pname: str, value, dtype) -> NamedArray:
    """A sampler whose one distribution parameter (``pname``) is laid out for ``shape``."""
    axes = _shape(fname, shape)
    return _finish(jax_fn(key, _param(fname, pname, value, axes), _sizes(axes), dtype=dtype), axes)


def gamma(key, shape: AxisSpec, a: NamedOrNumeric, dtype=float) -> NamedArray:
    """Gamma samples with shape parameter ``a``."""
    return _one_parameter(jrandom.gamma, "gamma", key, shape, "a", a, dtype)


def loggamma(key, shape: AxisSpec, a: NamedOrNumeric, dtype=float) -> NamedArray:
    """Logs of gamma samples with shape parameter ``a`` (accurate for small ``a``)."""
    return _one_parameter(jrandom.loggamma, "loggamma", key, shape, "a", a, dtype)


def beta(key, shape: AxisSpec, a: NamedOrNumeric, b: NamedOrNumeric, dtype=float) -> NamedArray:
    """Beta samples with parameters ``a`` and ``b``."""
    axes = _shape("beta", shape)
    pa = _param("beta", "a", a, axes)
    pb = _param("beta", "b", b, axes)
    return _finish(jrandom.beta(key, pa, pb, _sizes(axes), dtype=dtype), axes)


def t(key, shape: AxisSpec, df: NamedOrNumeric, dtype=float) -> NamedArray:
    """Student's t samples with ``df`` degrees of freedom."""
    return _one_parameter(jrandom.t, "t", key, shape, "df", df, dtype)


def weibull_min(
    key, shape: AxisSpec, scale: NamedOrNumeric, concentration: NamedOrNumeric, dtype=float
) -> NamedArray:
    """Weibull samples with the given ``scale`` and ``concentration``."""
    axes = _shape("weibull_min", shape)
    s = _param("weibull_min", "scale", scale, axes)
    c = _param("weibull_min", "concentration", concentration, axes)
    return _finish(jrandom.weibull_min(key, s, c, _sizes(axes), dtype=dtype), axes)


def pareto(key, shape: AxisSpec, b: NamedOrNumeric, dtype=float) -> NamedArray:
    """Pareto samples with shape parameter ``b``."""
    return _one_parameter(jrandom.pareto, "pareto", key, shape, "b", b, dtype)


def ball(key, shape: AxisSpec, D: Axis, p: float = 2.0, dtype=float) -> NamedArray:  # noqa: N803 - Haliax's name
    """Points drawn uniformly from the unit ``p``-norm ball in ``D.size`` dimensions.

    The result has axes ``shape + (D,)``.
    """
    axes = _shape("ball", shape)
    if not isinstance(D, Axis):
        raise TypeError(
            f"hax.random.ball: D must be an Axis (its size is the dimension), got {D!r}"
        )
    out = _shape("ball", axes + (D,))
    return _finish(jrandom.ball(key, D.size, p, _sizes(axes), dtype=dtype), out)


# -------------------------------------------------------------------------- discrete


def bernoulli(key, shape: AxisSpec, p: NamedOrNumeric) -> NamedArray:
    """Boolean samples that are True with probability ``p``."""
    axes = _shape("bernoulli", shape)
    return _finish(jrandom.bernoulli(key, _param("bernoulli", "p", p, axes), _sizes(axes)), axes)


def randint(
    key, shape: AxisSpec, minval: NamedOrNumeric, maxval: NamedOrNumeric, dtype=int
) -> NamedArray:
    """Integers drawn uniformly from ``[minval, maxval)``."""
    axes = _shape("randint", shape)
    lo = _param("randint", "minval", minval, axes)
    hi = _param("randint", "maxval", maxval, axes)
    return _finish(jrandom.randint(key, _sizes(axes), lo, hi, dtype=dtype), axes)


def poisson(key, shape: AxisSpec, lam: NamedOrNumeric, dtype=int) -> NamedArray:
    """Poisson samples with rate ``lam``."""
    return _one_parameter(jrandom.poisson, "poisson", key, shape, "lam", lam, dtype)


def categorical(
    key, logits: NamedArray, axis: AxisSelector, shape: AxisSpec | None = None
) -> NamedArray:
    """Samples category indices along ``axis`` from unnormalized log-probabilities.

    Args:
      key: a PRNG key.
      logits: log-probabilities (up to a constant); ``softmax(logits, axis)`` are the
        probabilities.
      axis: the category axis of ``logits``.
      shape: the result's axes. ``None`` means ``logits``' axes without ``axis``.
        Otherwise it must hold every other axis of ``logits`` (and not ``axis``); axes it
        adds draw independent samples.

    Returns:
      Integer indices into ``axis``, with axes ``shape``.

    Raises:
      ValueError: if ``axis`` is not in ``logits``, is in ``shape``, or ``shape`` misses an
        axis of ``logits``.
    """
    i = _index("categorical", logits, axis, "logits")
    batch = logits.axes[:i] + logits.axes[i + 1 :]
    if shape is None:
        return _finish(jrandom.categorical(key, logits.array, axis=i), batch)
    axes = _shape("categorical", shape)
    names = [a.name for a in axes]
    cat = logits.axes[i]
    if cat.name in names:
        raise ValueError(
            f"hax.random.categorical: the category axis {cat.name!r} cannot be in shape {describe_axes(axes)}"
        )
    missing = [a.name for a in batch if a not in axes]
    if missing:
        raise ValueError(
            f"hax.random.categorical: shape {describe_axes(axes)} must contain the logits' other axes "
            f"{describe_axes(batch)}; missing or resized: {missing}"
        )
    # As Haliax: the logits get the new axes in front (so the category axis moves back by
    # their number) and are drawn with ``shape`` as the sample shape, which gives the same
    # numbers as ``jax.random.categorical`` on the same key and layout. The batch axes are
    # laid out in ``shape``'s order around the category axis, so any order of ``shape`` works.
    batch_names = {a.name for a in batch}
    ci = sum(1 for a in axes if a.name not in batch_names) + i
    layout = axes[:ci] + (cat,) + axes[ci:]
    full = broadcast_to(logits, layout, ensure_order=True, enforce_no_extra_axes=True)
    raw = jrandom.categorical(key, full.array, axis=ci, shape=_sizes(axes))
    return _finish(raw, axes)


def choice(
    key,
    shape: AxisSpec,
    a: NamedArray,
    axis: AxisSelector,
    replace: bool = True,
    p: NamedArray | None = None,
) -> NamedArray:
    """Picks entries of ``a`` along ``axis`` at random.

    Args:
      key: a PRNG key.
      shape: axes of the draws; must not share names with ``a`` (except ``axis``).
      a: the array to pick from.
      axis: the axis of ``a`` to pick along.
      replace: draw with replacement.
      p: optional probabilities, a 1-d ``NamedArray`` whose only axis is ``axis``.

    Returns:
      ``shape + (a.axes - axis)``.
    """
    i = _index("choice", a, axis, "a")
    axes = _shape("choice", shape)
    rest = a.axes[:i] + a.axes[i + 1 :]
    jp = None
    if p is not None:
        if not isinstance(p, NamedArray) or p._names != (a.axes[i].name,):
            got = describe_axes(p.axes) if isinstance(p, NamedArray) else type(p).__name__
            raise ValueError(
                f"hax.random.choice: p must be a NamedArray with the single axis {a.axes[i]}, got {got}"
            )
        jp = p.array
    out = _shape("choice", axes + rest)
    return _finish(jrandom.choice(key, a.array, _sizes(axes), replace=replace, p=jp, axis=i), out)


def permutation(key, x: NamedArray, axis: AxisSelector, independent: bool = False) -> NamedArray:
    """Shuffles ``x`` along ``axis`` (each slice separately if ``independent``)."""
    i = _index("permutation", x, axis, "x")
    return _finish(jrandom.permutation(key, x.array, i, independent=independent), x.axes)


def dirichlet(
    key, alpha: NamedArray, axis: AxisSelector, shape: AxisSpec | None = None, dtype=float
) -> NamedArray:
    """Dirichlet samples: probability vectors along ``axis`` with concentration ``alpha``.

    Args:
      key: a PRNG key.
      alpha: concentrations, with the category ``axis`` and optional batch axes.
      axis: the category axis.
      shape: batch axes of the result (``None``: ``alpha``'s axes without ``axis``); must
        contain ``alpha``'s batch axes and not ``axis``.
      dtype: float dtype of the result.

    Returns:
      Samples with axes ``shape + (axis,)``, summing to one along ``axis``. With
      ``alpha`` laid out as ``(..., axis)`` this is ``jax.random.dirichlet`` on the same key.
    """
    i = _index("dirichlet", alpha, axis, "alpha")
    cat = alpha.axes[i]
    batch = alpha.axes[:i] + alpha.axes[i + 1 :]
    axes = batch if shape is None else _shape("dirichlet", shape)
    if cat.name in {a.name for a in axes}:
        raise ValueError(
            f"hax.random.dirichlet: the category axis {cat.name!r} cannot be in shape {describe_axes(axes)}"
        )
    try:
        arr = broadcast_to(alpha, axes + (cat,)).array
    except ValueError as e:
        raise ValueError(
            f"hax.random.dirichlet: alpha with axes {describe_axes(alpha.axes)} does not broadcast to "
            f"{describe_axes(axes + (cat,))}: {e}"
        ) from None
    return _finish(jrandom.dirichlet(key, arr, _sizes(axes), dtype=dtype), axes + (cat,))


# ------------------------------------------------------------------ sharded generate


def generate_sharded(
    fn: Callable[..., NamedArray], axis: AxisSelector | None = None
) -> Callable[..., NamedArray]:
    """Wraps a sampler so that it draws one slice of ``axis`` per split key (Haliax's helper).

    Deprecated, as in Haliax: set ``jax.config.update("jax_threefry_partitionable", True)``
    and sample directly instead. The wrapper splits the key along ``axis`` (by default
    the axis of ``shape`` that maps to the largest mesh axis under the installed axis
    mapping) and maps ``fn`` over it with ``hax.vmap``, so each device need only draw its
    own shard. When no axis of ``shape`` is mapped it calls ``fn`` unchanged (and so
    matches ``jax.random`` on the same key).

    Args:
      fn: a sampler taking ``key`` and ``shape`` arguments (e.g. ``hax.random.normal``).
      axis: the axis to split along; ``None`` picks one as above.
    """
    warnings.warn(
        'generate_sharded is deprecated: use jax.config.update("jax_threefry_partitionable", True)',
        DeprecationWarning,
        stacklevel=2,
    )
    sig = inspect.signature(fn)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        axes = _shape(getattr(fn, "__name__", "generate_sharded"), bound.arguments["shape"])
        if not axes:
            return fn(*args, **kwargs)
        if axis is None:
            mapped = [a for a in axes if physical_axis_name(a) is not None]
            if not mapped:
                return fn(*args, **kwargs)
            target = max(mapped, key=lambda a: a.size)
        else:
            name = axis_name(axis)
            hits = [a for a in axes if a.name == name]
            if not hits:
                raise ValueError(
                    f"generate_sharded: axis {name!r} is not in the shape {describe_axes(axes)}"
                )
            target = hits[0]
        keys = jrandom.split(bound.arguments["key"], target.size)
        bound.arguments["shape"] = tuple(a for a in axes if a != target)
        bound.arguments["key"] = keys
        drawn = vmap(lambda k: fn(**{**bound.arguments, "key": k}), target, default=0)(keys)
        return drawn.rearrange(axes)

    return wrapped
