"""`ArrayInt8`, `ArrayInt4` and `ArrayNF4`: quantized weights as implicit arrays.

Each stores a logical 2-D weight in the packed layout of `jaxcore.kernels` (blocks of
``block_size`` rows along the blocked axis, one float scale per block and column) and
materializes to the dense weight on demand. Under `jaxcore.implicit.implicit`, matmuls
with them run `jaxcore.kernels.quantized_matmul` instead (see `jaxcore.quant._handlers`).

``axis`` says which logical axis the blocks run along. ``axis=0`` is the kernel layout
itself: for a (K, N) weight used as ``x @ W`` the blocks run along K. ``axis=1`` stores the
transpose in that layout, which is what a weight contracted along its second axis wants
(e.g. an embedding table used as ``h @ E.T``); transposing a quantized array just flips
``axis``, without touching the data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from jaxcore.implicit import ImplicitArray, aux_field
from jaxcore.kernels import dequantize, quantized_matmul
from jaxcore.kernels._formats import logical_rows
from jaxcore.quant import _checks, _double_quant, _per_tensor, _quantize, _sharding


def _both_axes(axis) -> bool:
    """Whether ``axis`` is a tuple naming both axes of a 2-D weight (e.g. ``(0, 1)``, ``(-1, 0)``)."""
    if not isinstance(axis, (tuple, list)) or len(axis) != 2:
        return False
    valid = all(not isinstance(a, bool) and a in (0, 1, -1, -2) for a in axis)
    return valid and {int(a) % 2 for a in axis} == {0, 1}


def _check_axis(axis, what: str) -> int:
    if isinstance(axis, (tuple, list)) and len(axis) == 1:
        axis = axis[0]  # eformer passes axes as tuples: (0,) is axis 0
    if _both_axes(axis):
        raise ValueError(
            f"{what}: axis={axis!r} reduces over both axes, but this format's blocks run "
            "along one axis (0 or 1); only ArrayInt8 takes axis=(0, 1) (one scale per matrix)"
        )
    if isinstance(axis, bool) or axis not in (0, 1, -1, -2):
        raise ValueError(f"{what}: axis must be 0 or 1 for a 2-D weight, got {axis!r}")
    return int(axis) % 2


def _prepare(x, block_size, axis: int, what: str, even: bool, check_finite: bool = False):
    """Checks ``x`` and returns it oriented so that the blocked axis is axis 0."""
    x = _checks.check_weight(x, what, check_finite)
    axis = _check_axis(axis, what)
    blocked = x if axis == 0 else x.T
    size = blocked.shape[0]
    # An empty axis is one (empty) block per column of any size; 1 keeps the layout valid.
    block_size = (size or 1) if block_size is None else block_size
    block_size = _checks.check_block_size(
        block_size, size, what=f"{what} (axis {axis} of {x.shape})", even=even
    )
    return x, blocked, block_size, axis


_scan_view: Callable[..., ImplicitArray | None] | None = None


def install_scan_view(fn: Callable[..., ImplicitArray | None]) -> None:
    """Sets what `QuantizedArray.scan_slice` returns (the package installs `_layer.layer_of`)."""
    global _scan_view
    _scan_view = fn


class QuantizedArray(ImplicitArray):
    """Behaviour shared by the quantized arrays (the dataclass fields live in each class).

    Every subclass has ``qvalue``, ``scale``, ``block_size`` and ``axis``, and a class-level
    ``fmt``; `block_scales` returns the float32 (blocks, N) scales the kernels take.
    """

    fmt: ClassVar[str]
    default_dtype: ClassVar = jnp.float32
    if TYPE_CHECKING:
        # Each subclass's dataclass fields, declared for the checker only: annotations here
        # would make them fields of this base class too.
        qvalue: jax.Array
        scale: jax.Array
        block_size: int
        axis: int
    # Makes ``numpy_array @ q`` defer to `__rmatmul__` instead of NumPy wrapping ``q``.
    __array_ufunc__: ClassVar = None

    def block_scales(self) -> jax.Array:
        """The per-block scales, shape (..., K // block_size, N) in the stored layout and dtype
        (float32 unless quantized with a 16-bit ``scale_dtype``)."""
        return self.scale

    def stored_shape(self) -> tuple[int, int]:
        """The shape (K, N) of one stored (blocked-along-axis-0) weight matrix."""
        return (logical_rows(self.fmt, self.qvalue.shape[-2]), self.qvalue.shape[-1])

    def compute_shape(self) -> tuple[int, ...]:
        """The logical shape, read off ``qvalue`` (so it is right under ``vmap`` too).

        Quantized arrays are 2-D; stacking several (``jax.tree_util.tree_map(jnp.stack, ...)``,
        e.g. the layers of a model for ``lax.scan``) adds leading dimensions.
        """
        k, n = self.stored_shape()
        return tuple(self.qvalue.shape[:-2]) + ((k, n) if self.axis == 0 else (n, k))

    def scan_slice(self, index):
        """A view of matrix ``index`` for a scan body, where a kernel reads it in place.

        See `jaxcore.implicit.ImplicitArray.scan_slice`: a `jaxcore.quant._layer.StackLayer`
        (installed by the package), or ``None`` (slice as usual).
        """
        return None if _scan_view is None else _scan_view(self, index)

    def _over_leading(self, fn):
        """``fn`` on one weight matrix, vmapped over the leading (stacking) dimensions."""
        for _ in range(self.qvalue.ndim - 2):
            fn = jax.vmap(fn)
        return fn

    def materialize(self) -> jax.Array:
        """Dequantizes the whole weight (the dense fallback; matmuls avoid it).

        Raises:
          TypeError: if this is a cotangent (its codes are ``float0``), i.e. a gradient
            taken with respect to the quantized array itself: it has slots for codes and
            scales, not for a dense weight. For quantization-aware training differentiate
            the float master weight instead, through `jaxcore.implicit.ste`
            (``ste(ArrayNF4.quantize)(w)`` keeps the quantized forward pass) or
            `jaxcore.quant.fake_quantize`.
        """
        if self.qvalue.dtype == jax.dtypes.float0:
            raise TypeError(
                f"cannot materialize a cotangent of {type(self).__name__} (its qvalue is float0): "
                "a gradient with respect to a quantized array has slots for its codes and scales, "
                "not for a dense weight; for quantization-aware training differentiate the float "
                "master weight w through jaxcore.implicit.ste(ArrayNF4.quantize)(w) (the forward "
                "pass keeps the quantized weight) or jaxcore.quant.fake_quantize(w, ...)"
            )
        fmt, block_size = self.fmt, self.block_size
        dense = self._over_leading(lambda qv, sc: dequantize(fmt, qv, sc, block_size))(
            self.qvalue, self.block_scales()
        )
        dense = dense if self.axis == 0 else jnp.swapaxes(dense, -1, -2)
        return dense.astype(self.dtype)

    @property
    def storage_nbytes(self) -> int:
        """Bytes held by the quantized representation (codes and scales)."""
        leaves = jax.tree_util.tree_leaves(self)
        return sum(int(np.prod(leaf.shape)) * np.dtype(leaf.dtype).itemsize for leaf in leaves)

    @property
    def T(self) -> QuantizedArray:  # noqa: N802 - mirrors jax.Array.T
        """The transpose: the same data, blocked along the other logical axis."""
        return self.with_axis(1 - self.axis)

    def with_axis(self, axis: int) -> QuantizedArray:
        """Returns the same stored data viewed with blocks along logical ``axis``.

        With ``axis`` different from ``self.axis`` this is the transpose of ``self``.
        """
        values = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("shape", "dtype")
        }
        values["axis"] = _check_axis(axis, type(self).__name__)
        return type(self)(**values, dtype=self.dtype)

    def dequantize(self) -> jax.Array:
        """The dense weight (eformer's name for `materialize`)."""
        return self.materialize()

    def with_sharding(self, sharding) -> QuantizedArray:
        """Returns the same weight with its stored arrays placed by ``sharding``.

        ``sharding`` describes the *logical* weight (shape ``self.shape``): a
        ``NamedSharding``, or a ``PartitionSpec`` (applied with
        ``jax.lax.with_sharding_constraint``, so under ``jit`` with a mesh in
        context), or ``None`` (returns ``self``). The codes and scales are split
        along the same logical axes (see `jaxcore.quant._sharding`).

        Raises:
          ValueError: if the spec has more entries than the weight has axes, or a
            sharded stored axis does not divide by its mesh axes.
        """
        return _sharding.shard_like_logical(self, sharding)

    def with_mesh_and_axis(self, mesh_and_axis) -> QuantizedArray:
        """eformer's sharding shorthand: ``(mesh, spec)`` -> `with_sharding` of a ``NamedSharding``.

        ``spec`` may be ``None`` (replicated), a ``PartitionSpec``, a tuple/list of
        per-axis entries, or one mesh axis name (sharding the first axis).
        """
        return self.with_sharding(_sharding.named_sharding(mesh_and_axis, type(self).__name__))

    def reshard(self, sharding) -> QuantizedArray:
        """Alias of `with_sharding` (eformer's name)."""
        return self.with_sharding(sharding)

    def _stored_partition(self, name: str, leaf, logical: tuple) -> tuple:
        """The spec of stored array ``name`` for the logical spec ``logical``.

        Codes and scales are (leading..., rows, N) with rows along the blocked axis, so
        they follow the logical axes (swapped when ``axis == 1``); other stored arrays
        (double-quantization group scales and offset) are replicated.
        """
        n_lead = len(self.shape) - 2
        if name not in ("qvalue", "scale") or leaf.ndim != n_lead + 2:
            return (None,) * leaf.ndim
        rows, cols = (logical[-2], logical[-1]) if self.axis == 0 else (logical[-1], logical[-2])
        return tuple(logical[:n_lead]) + (rows, cols)

    def __rmatmul__(self, other) -> jax.Array:
        """``dense @ q`` without `jaxcore.implicit.implicit`: runs the quantized kernel."""
        return quantized_matmul(other, self)

    def __matmul__(self, other) -> jax.Array:
        """``q @ dense`` without `jaxcore.implicit.implicit` (via ``(dense.T @ q.T).T``)."""
        other = jnp.asarray(other)
        if other.ndim == 1:
            return quantized_matmul(other, self.T)
        return jnp.swapaxes(quantized_matmul(jnp.swapaxes(other, -1, -2), self.T), -1, -2)


@dataclasses.dataclass
class ArrayInt8(QuantizedArray):
    """Symmetric int8 weight, one scale per column (per channel) or per block along an axis.

    Fields (stored layout, K = size of the blocked axis):
      qvalue: int8 (K, N), values in [-127, 127].
      scale: (K // block_size, N) block absmax / 127, float32 (or the quantizer's
        ``scale_dtype``: float16, bfloat16).
      block_size: rows per scale (== K for per-channel).
      axis: the logical axis the blocks run along (0: ``qvalue`` is the weight itself).
    """

    qvalue: jax.Array
    scale: jax.Array
    block_size: int = aux_field()
    axis: int = aux_field(default=0)
    fmt: ClassVar[str] = "int8"

    @property
    def weight(self) -> jax.Array:
        """The int8 codes under eformer's name (``Array8B.weight``): the same array as ``qvalue``."""
        return self.qvalue

    @classmethod
    def quantize(
        cls,
        x,
        *,
        axis: int = 0,
        block_size: int | None = None,
        check_finite: bool = False,
        scale_dtype="float32",
    ) -> ArrayInt8:
        """Quantizes a float 2-D weight to int8.

        Args:
          x: float32/bfloat16/float16/float64 (K, N) weight.
          axis: the axis each scale reduces over; the default 0 gives one scale per output
            column of ``x @ W``, 1 gives one scale per row. As in eformer it may be a tuple:
            ``(0,)`` is 0, and ``(0, 1)`` reduces over both axes, one scale for the whole
            matrix (stored repeated per column, so the kernels run unchanged; then
            ``block_size`` must be left out).
          block_size: rows of ``axis`` per scale; default: the whole axis (per channel).
          check_finite: raise a ValueError for NaN/Inf in ``x`` (eager only: inside ``jit``
            the values are unknown and it raises saying so). By default non-finite values
            are quantized: a block holding a NaN materializes as NaN, one holding an
            infinity keeps it (with its sign) and its other entries are NaN, in eager and
            jitted code alike.
          scale_dtype: the dtype the block scales are stored in: ``"float32"`` (default),
            ``"float16"`` (llama.cpp's; half the scale bytes; full precision from 6.1e-5 to
            65504) or ``"bfloat16"`` (float32's range, 8 bits); the codes are computed
            against the rounded scales (docs/guide/quant.md).

        Returns:
          The quantized array; it materializes to ``x.dtype``.

        Raises:
          TypeError: for an unsupported dtype, scale dtype or a non-integer block size.
          ValueError: for a non-2-D ``x``, a block size that does not divide the axis, a
            bad ``axis``, NaN/Inf in ``x`` with ``check_finite``, a weight beyond
            float16 scales' range with ``scale_dtype="float16"`` (eager only; inside ``jit``
            such blocks come back non-finite), or float64 values beyond float32's range.
        """
        scale_dtype = _checks.check_scale_dtype(scale_dtype, "ArrayInt8.quantize")
        if _both_axes(axis):
            x = _checks.check_weight(x, "ArrayInt8.quantize", check_finite)
            _checks.check_scale_range(x, 127, scale_dtype, "ArrayInt8.quantize")
            if block_size is not None:
                raise ValueError(
                    f"ArrayInt8.quantize: axis={axis!r} gives one scale for the whole "
                    f"{x.shape} matrix; block_size={block_size!r} would split it (leave it out)"
                )
            qvalue, scale = _per_tensor.quantize_int8_per_tensor(x, scale_dtype)
            return cls(qvalue, scale, x.shape[0], 0, dtype=x.dtype)
        x, blocked, block_size, axis = _prepare(
            x, block_size, axis, "ArrayInt8.quantize", even=False, check_finite=check_finite
        )
        _checks.check_scale_range(x, 127, scale_dtype, "ArrayInt8.quantize")
        qvalue, scale = _quantize.quantize_int8(blocked, block_size, scale_dtype)
        return cls(qvalue, scale, block_size, axis, dtype=x.dtype)


@dataclasses.dataclass
class ArrayInt4(QuantizedArray):
    """Symmetric int4 weight (two values per byte), one scale per block.

    Fields (stored layout, K = size of the blocked axis):
      qvalue: uint8 (K // 2, N); row 2i in the low nibble, row 2i + 1 in the high one; a
        nibble v means q = v - 8, with q in [-7, 7].
      scale: (K // block_size, N) block absmax / 7, float32 (or the quantizer's
        ``scale_dtype``: float16, bfloat16).
      block_size: rows per scale (even).
      axis: the logical axis the blocks run along.
    """

    qvalue: jax.Array
    scale: jax.Array
    block_size: int = aux_field()
    axis: int = aux_field(default=0)
    fmt: ClassVar[str] = "int4"

    @classmethod
    def quantize(
        cls,
        x,
        block_size: int = 64,
        *,
        axis: int = 0,
        check_finite: bool = False,
        scale_dtype="float32",
    ) -> ArrayInt4:
        """Quantizes a float 2-D weight to int4 with one scale per block of ``block_size`` rows.

        Args:
          x: float (K, N) weight.
          block_size: even number of rows per block; must divide the blocked axis.
          axis: the axis the blocks run along (default 0, the contracted axis of ``x @ W``).
          check_finite: raise a ValueError for NaN/Inf in ``x`` (eager only: inside ``jit``
            the values are unknown and it raises saying so). By default non-finite values
            are quantized: a block holding a NaN materializes as NaN, one holding an
            infinity keeps it (with its sign) and its other entries are NaN, in eager and
            jitted code alike.
          scale_dtype: the dtype the block scales are stored in: ``"float32"`` (default),
            ``"float16"`` (llama.cpp's; half the scale bytes; full precision from 6.1e-5 to
            65504) or ``"bfloat16"`` (float32's range, 8 bits); the codes are computed
            against the rounded scales (docs/guide/quant.md).

        Returns:
          The quantized array; it materializes to ``x.dtype``.

        Raises:
          TypeError: for an unsupported dtype, scale dtype or a non-integer block size.
          ValueError: for a non-2-D ``x``, an odd or non-dividing block size, a bad
            ``axis``, NaN/Inf in ``x`` with ``check_finite``, a weight beyond
            float16 scales' range with ``scale_dtype="float16"`` (eager only; inside ``jit``
            such blocks come back non-finite), or float64 values beyond float32's range.
        """
        scale_dtype = _checks.check_scale_dtype(scale_dtype, "ArrayInt4.quantize")
        x, blocked, block_size, axis = _prepare(
            x, block_size, axis, "ArrayInt4.quantize", even=True, check_finite=check_finite
        )
        _checks.check_scale_range(x, 7, scale_dtype, "ArrayInt4.quantize")
        qvalue, scale = _quantize.quantize_int4(blocked, block_size, scale_dtype)
        return cls(qvalue, scale, block_size, axis, dtype=x.dtype)


@dataclasses.dataclass
class ArrayNF4(QuantizedArray):
    """4-bit NormalFloat weight: code indices into `jaxcore.kernels.NF4_CODE` times block absmax.

    Fields (stored layout, K = size of the blocked axis):
      qvalue: uint8 (K // 2, N) packed code indices (same nibble order as `ArrayInt4`).
      scale: (K // block_size, N) block absmax, float32 (or the quantizer's ``scale_dtype``:
        float16, bfloat16), or with double quantization its int8 codes (see
        `jaxcore.quant._double_quant`).
      scale_group_scale: ``None``, or float32 per-group scales of the absmax codes.
      scale_offset: ``None``, or the float32 scalar offset of the absmax codes.
      block_size: rows per block (even; 64 by default).
      axis: the logical axis the blocks run along.
    """

    qvalue: jax.Array
    scale: jax.Array
    block_size: int = aux_field()
    scale_group_scale: jax.Array | None = None
    scale_offset: jax.Array | None = None
    axis: int = aux_field(default=0)
    fmt: ClassVar[str] = "nf4"

    @property
    def packed(self) -> jax.Array:
        """The packed 4-bit codes under eformer's name: the same array as ``qvalue``.

        The layout is jaxcore's kernel layout (two rows per byte along the blocked
        axis), not eformer's (two neighbours along the last axis per byte).
        """
        return self.qvalue

    @property
    def absmax(self) -> jax.Array:
        """The float32 per-block absolute maxima (eformer's name), shape (..., K // block_size, N).

        With double quantization ``scale`` holds int8 codes; this is always the
        dequantized float absmax (`block_scales`).
        """
        return self.block_scales()

    @property
    def double_quant(self) -> bool:
        """Whether the block absmax is itself stored quantized."""
        return self.scale_group_scale is not None

    def block_scales(self) -> jax.Array:
        """The float32 block absmax, dequantized first when double quantization is on."""
        if self.scale_group_scale is None:
            return self.scale
        expand = self._over_leading(_double_quant.expand_scales)
        return expand(self.scale, self.scale_group_scale, self.scale_offset)

    @classmethod
    def quantize(
        cls,
        x,
        block_size: int = 64,
        double_quant: bool = False,
        *,
        axis: int = 0,
        check_finite: bool = False,
        scale_dtype="float32",
    ) -> ArrayNF4:
        """Quantizes a float 2-D weight to NF4 with one absmax per block of ``block_size`` rows.

        Args:
          x: float (K, N) weight.
          block_size: even number of rows per block; must divide the blocked axis.
          double_quant: store the absmax as int8 codes with one float32 scale per group of
            256 blocks and a global offset (QLoRA's double quantization).
          axis: the axis the blocks run along (default 0, the contracted axis of ``x @ W``).
          check_finite: raise a ValueError for NaN/Inf in ``x`` (eager only: inside ``jit``
            the values are unknown and it raises saying so). By default non-finite values
            are quantized: a block holding a NaN materializes as NaN, one holding an
            infinity keeps it (with its sign) and its other entries are NaN, in eager and
            jitted code alike.
          scale_dtype: the dtype the block absmax are stored in: ``"float32"`` (default),
            ``"float16"`` (llama.cpp's; half the scale bytes; full precision from 6.1e-5 to
            65504) or ``"bfloat16"`` (float32's range, 8 bits); the codes are computed
            against the rounded scales (docs/guide/quant.md).
            Not with ``double_quant``, which stores the absmax as int8 codes.

        Returns:
          The quantized array; it materializes to ``x.dtype``.

        Raises:
          TypeError: for an unsupported dtype, scale dtype or a non-integer block size.
          ValueError: for a non-2-D ``x``, an odd or non-dividing block size, a bad
            ``axis``, NaN/Inf in ``x`` with ``check_finite``, ``scale_dtype`` other than
            float32 with ``double_quant``, a weight beyond
            float16 scales' range with ``scale_dtype="float16"`` (eager only; inside ``jit``
            such blocks come back non-finite), or float64 values beyond float32's range.
        """
        scale_dtype = _checks.check_scale_dtype(scale_dtype, "ArrayNF4.quantize")
        if double_quant and scale_dtype != "float32":
            raise ValueError(
                f"ArrayNF4.quantize: double_quant=True stores the absmax as int8 codes with "
                f"float32 group scales; scale_dtype={scale_dtype!r} applies only without it"
            )
        x, blocked, block_size, axis = _prepare(
            x, block_size, axis, "ArrayNF4.quantize", even=True, check_finite=check_finite
        )
        _checks.check_scale_range(x, 1, scale_dtype, "ArrayNF4.quantize")
        qvalue, absmax = _quantize.quantize_nf4(blocked, block_size, scale_dtype)
        if not double_quant:
            return cls(qvalue, absmax, block_size, axis=axis, dtype=x.dtype)
        codes, group_scale, offset = _double_quant.compress_scales(absmax)
        return cls(qvalue, codes, block_size, group_scale, offset, axis=axis, dtype=x.dtype)
