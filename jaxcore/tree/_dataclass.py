"""Frozen dataclasses registered as keyed pytrees, and their ``field`` helper.

Registration uses a hand-written flatten (one ``operator.attrgetter`` call) and an
unflatten that builds the instance with ``object.__new__`` and fills its
``__dict__`` directly. That is faster than ``jax.tree_util.register_dataclass``
(whose unflatten calls the class, i.e. ``__init__``) and, importantly, means
unflattening never re-runs ``__init__``/``__post_init__`` validation.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, overload

import jax

from jaxcore._getters import tuple_getter
from jaxcore.tree._static_check import StaticData, check_static_value, keyed

T = TypeVar("T")

# Same metadata key that ``jax.tree_util.register_dataclass`` reads, so JAX tools
# that inspect dataclass fields agree with us about which fields are static.
STATIC_KEY = "static"
# Marks fields created by ``lens_field`` (for ``jaxcore.lens.HasLensFields``).
LENS_KEY = "jaxcore_lens"
# Class attribute set on every registered dataclass; kUPS (and JAX's own tooling,
# jax-ml/jax#24664) check it to recognize pytree dataclasses, and ``dataclass``
# returns a class that already carries it unchanged.
MARKER = "_jax_dataclass"


def field(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - mirrors dataclasses.field
    hash: bool | None = None,  # noqa: A002 - mirrors dataclasses.field
    compare: bool = True,
    metadata: Mapping[Any, Any] | None = None,
    kw_only: Any = dataclasses.MISSING,
    static: bool = False,
) -> Any:
    """Creates a dataclass field that knows whether it is static for JAX.

    Args:
        default: default value; cannot be combined with ``default_factory``.
        default_factory: zero-argument callable producing the default.
        init: include the field in the generated ``__init__``.
        repr: include the field in the generated ``__repr__``.
        hash: include the field in ``__hash__`` (``None``: follow ``compare``).
        compare: include the field in equality and ordering.
        metadata: extra metadata mapping, copied into the field.
        kw_only: make the field keyword-only in ``__init__``.
        static: if True the value goes into the treedef (auxiliary data) instead
            of the leaves, so ``jit``/``grad``/``vmap`` treat it as a compile-time
            constant. Hashable values are compared with their own ``==``;
            unhashable ones (dicts, lists, NumPy arrays, dataclasses holding
            arrays) are accepted and compared by content (see
            ``jaxcore/tree/_static_check.py``). Tracers are rejected.

    Returns:
        A ``dataclasses.Field`` (typed as ``Any`` so it can default an annotated
        attribute).

    Raises:
        ValueError: if both ``default`` and ``default_factory`` are given.
        TypeError: if ``metadata`` already uses the reserved ``"static"`` key with
            a value that disagrees with ``static``, or a static field's default is
            a JAX tracer.
    """
    if default is not dataclasses.MISSING and default_factory is not dataclasses.MISSING:
        raise ValueError("field(): cannot specify both default and default_factory")
    meta = dict(metadata or {})
    if STATIC_KEY in meta and bool(meta[STATIC_KEY]) != bool(static):
        raise TypeError(
            f"field(): metadata[{STATIC_KEY!r}]={meta[STATIC_KEY]!r} contradicts "
            f"static={static!r}; pass static=... only"
        )
    meta[STATIC_KEY] = bool(static)
    if static and default is not dataclasses.MISSING:
        check_static_value("the default of this field(static=True)", default)
    return dataclasses.field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        hash=hash,
        compare=compare,
        metadata=types.MappingProxyType(meta),
        kw_only=kw_only,
    )


def lens_field(
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - dataclasses.field's name
    hash: bool | None = None,  # noqa: A002 - dataclasses.field's name
    compare: bool = True,
    metadata: Mapping[Any, Any] | None = None,
    kw_only: Any = dataclasses.MISSING,
    static: bool = False,
) -> Any:
    """Creates a :func:`field` for an attribute annotated ``LensField[T]``.

    At runtime this is :func:`field` plus a metadata marker that
    ``jaxcore.lens.HasLensFields.lens`` uses to accept the field as a lens target;
    the ``Any`` return type lets type checkers see the declared ``LensField[T]``.

    Args:
        default: see :func:`field`.
        default_factory: see :func:`field`.
        init: see :func:`field`.
        repr: see :func:`field`.
        hash: see :func:`field`.
        compare: see :func:`field`.
        metadata: see :func:`field`.
        kw_only: see :func:`field`.
        static: see :func:`field`.

    Returns:
        A ``dataclasses.Field`` marked as a lens field.
    """
    meta = dict(metadata or {})
    meta[LENS_KEY] = True
    return field(
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        hash=hash,
        compare=compare,
        metadata=meta,
        kw_only=kw_only,
        static=static,
    )


def is_static_field(f: dataclasses.Field) -> bool:
    """Returns whether a dataclass field was declared ``static=True``."""
    return bool(f.metadata.get(STATIC_KEY, False))


def _uses_slots(cls: type, names: tuple[str, ...]) -> bool:
    """Returns whether any of the fields is stored in a ``__slots__`` slot."""
    return any(
        isinstance(inspect.getattr_static(cls, name, None), types.MemberDescriptorType)
        for name in names
    )


def _make_unflatten(
    cls: type, data_names: tuple[str, ...], static_names: tuple[str, ...]
) -> Callable[[Any, Any], Any]:
    """Builds an unflatten that creates ``cls`` without calling ``__init__``.

    ``static`` is the tuple of static values, or a :class:`StaticData` holding it
    when some of them are unhashable.
    """
    new = object.__new__
    if not _uses_slots(cls, data_names + static_names):

        def unflatten(static: Any, children: Any) -> Any:
            obj: Any = new(cls)
            state = obj.__dict__
            state.update(zip(data_names, children))
            if static_names:
                if type(static) is StaticData:
                    static = static.values
                state.update(zip(static_names, static))
            return obj

        return unflatten

    setattr_ = object.__setattr__

    def unflatten_slots(static: Any, children: Any) -> Any:
        if type(static) is StaticData:
            static = static.values
        obj: Any = new(cls)
        for name, value in zip(data_names, children):
            setattr_(obj, name, value)
        for name, value in zip(static_names, static):
            setattr_(obj, name, value)
        return obj

    return unflatten_slots


def _wrap_init_with_static_checks(cls: type[Any], static_names: tuple[str, ...]) -> None:
    """Makes ``cls.__init__`` reject tracers in static fields."""
    original_init = cls.__init__
    owner = cls.__qualname__
    missing = object()

    @functools.wraps(original_init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        for name in static_names:
            value = getattr(self, name, missing)
            if value is not missing:
                check_static_value(f"{owner}.{name}", value)

    cls.__init__ = __init__


def register_pytree_dataclass(cls: type[T]) -> type[T]:
    """Registers an existing dataclass as a keyed pytree (``GetAttrKey`` paths).

    Fields declared with ``field(static=True)`` become auxiliary data; all other
    fields (including ``init=False`` ones) are children. Static values that are
    unhashable are compared by content in the treedef (see ``field``). The class
    gets the ``_jax_dataclass = True`` marker.

    Args:
        cls: a class already processed by ``dataclasses.dataclass``.

    Returns:
        ``cls`` itself, registered with JAX.

    Raises:
        TypeError: if ``cls`` is not a dataclass, or a static field's default is
            a JAX tracer.
    """
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        raise TypeError(f"register_pytree_dataclass expects a dataclass type, got {cls!r}")
    fields = dataclasses.fields(cls)
    data_names = tuple(f.name for f in fields if not is_static_field(f))
    static_names = tuple(f.name for f in fields if is_static_field(f))
    for f in fields:
        if is_static_field(f) and f.default is not dataclasses.MISSING:
            check_static_value(f"{cls.__qualname__}.{f.name}", f.default)

    get_children = tuple_getter(data_names)
    keys = tuple(jax.tree_util.GetAttrKey(name) for name in data_names)

    if static_names:
        get_values = tuple_getter(static_names)
        owner = cls.__qualname__

        def get_static(obj: Any) -> Any:
            values = get_values(obj)
            try:
                hash(values)  # one C-level call: fails iff some static value is unhashable
            except TypeError:
                return keyed(values, static_names, owner)
            return values

    else:

        def get_static(obj: Any) -> Any:
            return ()

    def flatten(obj: Any) -> tuple[tuple[Any, ...], Any]:
        return get_children(obj), get_static(obj)

    def flatten_with_keys(obj: Any) -> tuple[tuple[Any, ...], Any]:
        return tuple(zip(keys, get_children(obj))), get_static(obj)

    jax.tree_util.register_pytree_with_keys(
        cls, flatten_with_keys, _make_unflatten(cls, data_names, static_names), flatten
    )
    if static_names:
        _wrap_init_with_static_checks(cls, static_names)
    setattr(cls, MARKER, True)
    return cls


@overload
def dataclass(cls: type[T], /) -> type[T]: ...


@overload
def dataclass(
    cls: None = None,
    /,
    *,
    init: bool = ...,
    repr: bool = ...,
    eq: bool = ...,
    order: bool = ...,
    unsafe_hash: bool = ...,
    frozen: bool = ...,
    match_args: bool = ...,
    kw_only: bool = ...,
    slots: bool = ...,
    weakref_slot: bool = ...,
) -> Callable[[type[T]], type[T]]: ...


def dataclass(
    cls: type[T] | None = None,
    /,
    *,
    init: bool = True,
    repr: bool = True,  # noqa: A002 - dataclasses.field's name
    eq: bool = True,
    order: bool = False,
    unsafe_hash: bool = False,
    frozen: bool = True,
    match_args: bool = True,
    kw_only: bool = False,
    slots: bool = False,
    weakref_slot: bool = False,
) -> type[T] | Callable[[type[T]], type[T]]:
    """Turns a class into a (frozen by default) dataclass registered as a pytree.

    Usable bare (``@dataclass``) or with arguments (``@dataclass(order=True)``).
    Children are the non-static fields, with ``GetAttrKey`` paths; static fields
    (``field(static=True)``) go into the treedef. Unflattening builds the object
    without calling ``__init__``, so ``__post_init__`` validation does not run on
    every ``jit``/``tree_map`` round trip. Static fields may hold unhashable
    values (compared by content, see ``field``); construction rejects tracers
    there. The class gets the ``_jax_dataclass = True`` marker, and a class that
    already has it in its own ``__dict__`` is returned unchanged (so applying the
    decorator twice is harmless).

    Args:
        cls: the class to convert, or ``None`` when called with arguments.
        init: generate ``__init__``.
        repr: generate ``__repr__``.
        eq: generate ``__eq__``.
        order: generate ordering methods.
        unsafe_hash: force a ``__hash__``.
        frozen: forbid attribute assignment (default True, unlike
            ``dataclasses.dataclass``), because JAX transformations assume
            immutable values.
        match_args: generate ``__match_args__``.
        kw_only: make every field keyword-only.
        slots: generate ``__slots__`` (creates a new class).
        weakref_slot: add a ``__weakref__`` slot (requires ``slots=True``).

    Returns:
        The registered dataclass, or a decorator when ``cls`` is ``None``.
    """

    def wrap(klass: type[T]) -> type[T]:
        if not isinstance(klass, type):
            raise TypeError(f"jaxcore.tree.dataclass expects a class, got {klass!r}")
        if MARKER in klass.__dict__:
            return klass
        dc = dataclasses.dataclass(
            klass,
            init=init,
            repr=repr,
            eq=eq,
            order=order,
            unsafe_hash=unsafe_hash,
            frozen=frozen,
            match_args=match_args,
            kw_only=kw_only,
            slots=slots,
            weakref_slot=weakref_slot,
        )
        return register_pytree_dataclass(dc)

    if cls is None:
        return wrap
    return wrap(cls)
