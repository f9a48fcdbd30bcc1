"""GPU cards of a node and a pod's GPU request, counted per card in thousandths ("milli") of a card.

The convention is the GPU-sharing one of Alibaba's gpushare device plugin and the FGD scheduler simulator:
a pod asks either for a share of ONE card (``count`` 1, ``milli`` < 1000) or for whole cards (``milli``
1000, ``count`` >= 1), optionally of some card models. The annotation and label names below are theirs, so
manifests written for that stack read the same here (docs/gpu-sharing.md).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints, model_validator

from schemas.base import Event
from schemas.exceptions import InvalidInput

__all__ = [
    "GPU_CARD_MODEL",
    "GPU_COUNT",
    "GPU_INDEX",
    "GPU_INDEX_SEPARATOR",
    "GPU_MILLI",
    "GPU_RESOURCE",
    "MAX_CARDS",
    "MILLI_PER_CARD",
    "CardIndex",
    "GpuCards",
    "GpuModel",
    "GpuRequest",
    "format_gpu_index",
    "parse_gpu_index",
]

MILLI_PER_CARD = 1000
"""A whole card, in milli."""
MAX_CARDS = 64
"""Cards a node or a pod may have: more than any machine has (the openb trace's largest has 8), and a bound
on the per-card arrays' width."""

GPU_MILLI = "alibabacloud.com/gpu-milli"
"""Pod annotation: milli of each card the pod uses (1..1000)."""
GPU_COUNT = "alibabacloud.com/gpu-count"
"""Pod annotation: cards the pod uses; node capacity: cards the node has."""
GPU_CARD_MODEL = "alibabacloud.com/gpu-card-model"
"""Pod annotation: allowed card models (``|``-separated); node label: the node's card model."""
GPU_INDEX = "alibabacloud.com/gpu-index"
"""Pod annotation written at binding: the card indexes the pod holds, ``-``-separated (``"1"``,
``"0-1-2-3"``)."""
GPU_INDEX_SEPARATOR = "-"
GPU_RESOURCE = "nvidia.com/gpu"
"""The whole-card extended resource: a node's card count when it gives no `GPU_COUNT`."""

GpuModel = Annotated[str, StringConstraints(min_length=1, max_length=63)]
CardIndex = Annotated[int, Field(ge=0, lt=MAX_CARDS)]


class GpuCards(Event):
    """A node's GPU cards: `count` identical cards of `model`, each `milli_per_card` milli."""

    count: int = Field(ge=0, le=MAX_CARDS)
    model: str = Field(default="", max_length=63)
    """The card model (``V100M16``, ``T4``); empty when unknown (then only pods that allow any model fit)."""
    milli_per_card: int = Field(default=MILLI_PER_CARD, ge=1, le=MILLI_PER_CARD)


class GpuRequest(Event):
    """A pod's GPU request: `count` cards with `milli` of each. A share (`milli` < 1000) is of one card."""

    milli: int = Field(default=MILLI_PER_CARD, ge=1, le=MILLI_PER_CARD)
    count: int = Field(default=1, ge=1, le=MAX_CARDS)
    models: list[GpuModel] = Field(default_factory=list, max_length=64)
    """Card models the pod accepts; empty = any."""

    @model_validator(mode="after")
    def _share_of_one_card(self) -> GpuRequest:
        if self.milli < MILLI_PER_CARD and self.count != 1:
            raise InvalidInput(
                f"must be 1 for a share of a card (milli {self.milli} < {MILLI_PER_CARD}), got {self.count}",
                field="count",
            )
        return self

    @property
    def is_share(self) -> bool:
        return self.milli < MILLI_PER_CARD

    @property
    def total_milli(self) -> int:
        return self.milli * self.count


def format_gpu_index(cards: tuple[int, ...] | list[int]) -> str:
    """Card indexes as the `GPU_INDEX` annotation writes them."""
    return GPU_INDEX_SEPARATOR.join(str(card) for card in cards)


def parse_gpu_index(text: str) -> tuple[int, ...]:
    """The `GPU_INDEX` annotation's card indexes; ``""`` is none."""
    if not text:
        return ()
    try:
        cards = tuple(int(part) for part in text.split(GPU_INDEX_SEPARATOR))
    except ValueError:
        raise InvalidInput(
            f"not card indexes joined by {GPU_INDEX_SEPARATOR!r}: {text!r}", field=GPU_INDEX
        ) from None
    if any(card < 0 or card >= MAX_CARDS for card in cards) or len(set(cards)) != len(cards):
        raise InvalidInput(f"card indexes must be distinct, 0..{MAX_CARDS - 1}: {text!r}", field=GPU_INDEX)
    return cards
