"""``key_chain``: an endless, reproducible stream of PRNG keys."""

from __future__ import annotations

import functools
import itertools
import math
import operator
from collections.abc import Iterator, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def _check_key(rng: Any) -> None:
    if not isinstance(rng, jax.Array):
        raise TypeError(f"key_chain: rng must be a JAX PRNG key array, got {type(rng).__name__}")
    if jnp.issubdtype(rng.dtype, jax.dtypes.prng_key):
        if rng.ndim != 0:
            raise ValueError(
                f"key_chain: rng must be a single key, got key array of shape {rng.shape}"
            )
    elif rng.dtype != jnp.uint32 or rng.ndim != 1:
        raise ValueError(
            "key_chain: rng must be a typed key (jax.random.key) or a raw uint32 "
            f"key (jax.random.PRNGKey); got dtype {rng.dtype} and shape {rng.shape}"
        )


def key_chain(rng: jax.Array, shape: Sequence[int] = ()) -> Iterator[jax.Array]:
    """Returns an infinite iterator of PRNG keys derived from ``rng``.

    The stream is derived as kUPS derives it, so a seeded program gives the same
    numbers with either library: ``rng`` is first split into ``prod(shape)`` base
    keys (one for ``shape=()``), and the ``i``-th item is every base key folded
    with ``i`` (``jax.random.fold_in(base, uint32(i mod 2**32))``), reshaped to
    ``shape``. The stream is deterministic, independent of how many items are
    consumed, and never yields ``rng`` itself.

    Args:
        rng: a single PRNG key (typed ``jax.random.key`` or raw ``PRNGKey``).
        shape: batch shape of each item; ``()`` yields single keys.

    Returns:
        An iterator yielding keys of batch shape ``shape``.

    Raises:
        TypeError: if ``rng`` is not a key array or ``shape`` has non-integers.
        ValueError: if ``rng`` is a batch of keys or ``shape`` has negative sizes.
    """
    _check_key(rng)
    try:
        batch = tuple(operator.index(d) for d in shape)
    except TypeError:
        raise TypeError(f"key_chain: shape must be a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in batch):
        raise ValueError(f"key_chain: shape must be non-negative, got {batch}")
    return _chain(rng, batch)


@functools.partial(jax.jit, static_argnums=2)
def _fold_all(base: jax.Array, step: jax.Array, batch: tuple[int, ...]) -> jax.Array:
    folded = jax.vmap(jax.random.fold_in, in_axes=(0, None))(base, step)
    # Raw uint32 keys keep their trailing key-data axis.
    return folded.reshape(batch + folded.shape[1:])


def _chain(rng: jax.Array, batch: tuple[int, ...]) -> Iterator[jax.Array]:
    base = jax.random.split(rng, math.prod(batch))
    for step in itertools.count():
        # fold_in takes 32 bits; wrap on the host.
        yield _fold_all(base, np.uint32(step % 2**32), batch)
