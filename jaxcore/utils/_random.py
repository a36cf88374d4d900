"""``key_chain``: an endless, reproducible stream of PRNG keys."""

from __future__ import annotations

import itertools
import operator
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp


def _check_key(rng: Any) -> None:
    if not isinstance(rng, jax.Array):
        raise TypeError(
            f"key_chain: rng must be a JAX PRNG key array, got {type(rng).__name__}"
        )
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

    The ``i``-th item is ``jax.random.fold_in(rng, i)`` (split into a batch of
    ``shape`` keys when ``shape`` is non-empty), so the stream is deterministic,
    independent of how many items are consumed, and never reuses ``rng`` itself.

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


def _chain(rng: jax.Array, batch: tuple[int, ...]) -> Iterator[jax.Array]:
    for step in itertools.count():
        key = jax.random.fold_in(rng, step)
        yield jax.random.split(key, batch) if batch else key
