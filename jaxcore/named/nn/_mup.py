"""muP (maximal update) parametrization rules for ``Linear`` and ``Embedding`` (``hax.nn.mup``).

An abc-parametrization (Yang & Hu, arXiv:2011.14522) gives each layer three width-dependent
factors: ``init_scale`` multiplies the initial weights, ``active_scale`` multiplies the
layer's output in the forward pass, and ``lr_scale`` is the factor an optimizer should apply
to that layer's learning rate. A layer takes its rule as a class:
``Linear.init(In, Out, key=k, reparam_cls=HiddenLinearMup)``, and exposes it as
``layer.reparam``.

=================== ============================ ================== ==================
rule                init_scale                   active_scale       lr_scale
=================== ============================ ================== ==================
LinearStandardParam ``1 / sqrt(fan_in)``         1                  1
InputLinearMup      1                            1                  1
HiddenLinearMup     ``1 / sqrt(fan_in)``         1                  ``1 / fan_in``
OutputLinearMup     1                            ``1 / fan_in``     1
=================== ============================ ================== ==================

Embeddings: ``EmbeddingStandardParam`` initializes with ``1 / size(Embed)``;
``EmbeddingMup`` with 1, and scales the tied output layer (``unembed``) by
``1 / size(Embed)``.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod

from jaxcore.named._axis import AxisSpec, to_axes

__all__ = [
    "AbstractEmbeddingReparam",
    "AbstractLinearReparam",
    "AbstractReparam",
    "EmbeddingMup",
    "EmbeddingStandardParam",
    "HiddenLinearMup",
    "InputLinearMup",
    "LinearStandardParam",
    "OutputLinearMup",
    "ReparamEnabled",
]


def _size(spec: AxisSpec) -> int:
    return math.prod(a.size for a in to_axes(spec))


class AbstractReparam(ABC):
    """The three factors of an abc-parametrization."""

    @staticmethod
    @abstractmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        """Multiplies the initial weights of a layer mapping ``In`` to ``Out``."""

    @property
    @abstractmethod
    def active_scale(self) -> float:
        """Multiplies the layer's output in the forward pass."""

    @property
    @abstractmethod
    def lr_scale(self) -> float:
        """The factor for this layer's learning rate."""


@dataclasses.dataclass(frozen=True)
class AbstractLinearReparam(AbstractReparam):
    """A rule for a ``Linear`` from ``In`` to ``Out``."""

    In: AxisSpec  # noqa: N815 - Haliax's name
    Out: AxisSpec  # noqa: N815 - Haliax's name


class LinearStandardParam(AbstractLinearReparam):
    """The usual fan-in initialization; nothing else scaled."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1 / math.sqrt(max(_size(In), 1))

    @property
    def active_scale(self) -> float:
        return 1

    @property
    def lr_scale(self) -> float:
        return 1


class InputLinearMup(AbstractLinearReparam):
    """muP for the input layer: unit initialization, no scaling."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1

    @property
    def active_scale(self) -> float:
        return 1

    @property
    def lr_scale(self) -> float:
        return 1


class HiddenLinearMup(AbstractLinearReparam):
    """muP for hidden layers: fan-in initialization, learning rate ``1 / fan_in``."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1 / math.sqrt(max(_size(In), 1))

    @property
    def active_scale(self) -> float:
        return 1

    @property
    def lr_scale(self) -> float:
        return 1 / max(_size(self.In), 1)


class OutputLinearMup(AbstractLinearReparam):
    """muP for the output layer: unit initialization, output scaled by ``1 / fan_in``."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1

    @property
    def active_scale(self) -> float:
        return 1 / max(_size(self.In), 1)

    @property
    def lr_scale(self) -> float:
        return 1


@dataclasses.dataclass(frozen=True)
class AbstractEmbeddingReparam(AbstractReparam):
    """A rule for an ``Embedding`` of ``Vocab`` into ``Embed``."""

    Embed: AxisSpec  # noqa: N815 - Haliax's name
    Vocab: AxisSpec  # noqa: N815 - Haliax's name

    @property
    @abstractmethod
    def unembed_active_scale(self) -> float:
        """Multiplies the logits of ``unembed`` (the tied output layer)."""


class EmbeddingStandardParam(AbstractEmbeddingReparam):
    """Haliax's default: initialization ``1 / size(Embed)``, nothing else scaled."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1 / max(_size(Out), 1)

    @property
    def active_scale(self) -> float:
        return 1

    @property
    def lr_scale(self) -> float:
        return 1

    @property
    def unembed_active_scale(self) -> float:
        return 1


class EmbeddingMup(AbstractEmbeddingReparam):
    """muP for embeddings: unit initialization, tied logits scaled by ``1 / size(Embed)``."""

    @staticmethod
    def init_scale(In: AxisSpec, Out: AxisSpec) -> float:  # noqa: N803 - Haliax's name
        return 1

    @property
    def active_scale(self) -> float:
        return 1

    @property
    def lr_scale(self) -> float:
        return 1

    @property
    def unembed_active_scale(self) -> float:
        return 1 / max(_size(self.Embed), 1)


class ReparamEnabled(ABC):
    """Marks a layer that carries a parametrization rule as ``reparam``."""

    @property
    @abstractmethod
    def reparam(self) -> AbstractReparam:
        """The layer's rule, built from its axes."""
