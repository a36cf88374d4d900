"""Small pytree classes the jaxcore.tree tests share: a dataclass with a static field, a
node that aligns itself in tree_map (``__tree_match__``) and a leaf that does too."""

import jax
import jax.numpy as jnp

from jaxcore import tree as jt


@jt.dataclass
class Point:
    x: jax.Array
    y: jax.Array
    tag: str = jt.field(default="p", static=True)


@jt.dataclass
class Labeled:
    """Values indexed by a static label vocabulary; aligns itself in tree_map."""

    values: jax.Array
    labels: tuple = jt.field(static=True)

    def __tree_match__(self, *others):
        union = tuple(sorted(set(self.labels).union(*(o.labels for o in others))))

        def reindex(node):
            pos = {label: i for i, label in enumerate(node.labels)}
            rows = [node.values[pos[label]] if label in pos else 0.0 for label in union]
            return Labeled(jnp.stack([jnp.asarray(r, jnp.float32) for r in rows]), union)

        return tuple(reindex(n) for n in (self, *others))


class Opaque:
    """A non-pytree (leaf) object that still implements __tree_match__."""

    def __init__(self, value):
        self.value = value

    def __tree_match__(self, *others):
        total = self.value + sum(o.value for o in others)
        return tuple(Opaque(total) for _ in range(1 + len(others)))
