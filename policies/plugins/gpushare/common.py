"""What the GPU-sharing scorers share: the simulator's constants, a node's free GPU milli and cpu left as the
simulator's ``NodeResource`` has them, Go's integer division, and the card choice handed to placement."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping

import numpy as np

from policies.framework.contract import CycleContext, IntArray
from policies.gpu.cards import CARDS_STATE

__all__ = [
    "MAX_SPEC_CPU",
    "MAX_SPEC_GPU",
    "RowCards",
    "cpu_left",
    "go_div",
    "gpu_left",
    "offer_cards",
    "uid_seed",
]

MAX_SPEC_CPU = 128_000
"""The simulator's ``MaxSpecCpu`` (millicores): the normaliser of the cpu dimension."""
MAX_SPEC_GPU = 8_000
"""The simulator's ``MaxSpecGpu`` (milli): eight whole cards."""


def gpu_left(ctx: CycleContext, nodes: IntArray) -> IntArray:
    """``GetTotalMilliGpuLeft``: free milli summed over each node's cards."""
    snapshot = ctx.snapshot
    free = snapshot.gpu_free[nodes]
    valid = np.arange(free.shape[1], dtype=np.int64)[None, :] < snapshot.gpu_cards[nodes][:, None]
    total: IntArray = np.where(valid, free, 0).sum(axis=1)
    return total


def cpu_left(ctx: CycleContext, nodes: IntArray) -> IntArray:
    """``MilliCpuLeft``: allocatable minus the pods' actual cpu requests."""
    snapshot = ctx.snapshot
    left: IntArray = snapshot.free[nodes, snapshot.column["cpu"]]
    return left


def go_div(a: IntArray, b: int) -> IntArray:
    """Go's int64 division (truncates toward zero) of an array by a positive constant."""
    quotient: IntArray = np.sign(a) * (np.abs(a) // b)
    return quotient


def uid_seed(uid: str, salt: str) -> int:
    """A seed from the pod's uid: the same pod draws the same numbers in every run and replica."""
    return int.from_bytes(hashlib.blake2b(f"{salt}\0{uid}".encode(), digest_size=8).digest(), "big")


class RowCards(Mapping[int, tuple[int, ...]]):
    """Row → the one card a plugin chose for a share pod there (`CARDS_STATE`), read from an array over
    rows (-1: no choice) without building a dict per cycle."""

    __slots__ = ("_cards",)

    def __init__(self, cards: IntArray) -> None:
        self._cards = cards

    def __getitem__(self, row: int) -> tuple[int, ...]:
        if 0 <= row < len(self._cards) and self._cards[row] >= 0:
            return (int(self._cards[row]),)
        raise KeyError(row)

    def __iter__(self) -> Iterator[int]:
        return iter(int(row) for row in np.flatnonzero(self._cards >= 0))

    def __len__(self) -> int:
        return int(np.count_nonzero(self._cards >= 0))


def offer_cards(ctx: CycleContext, cards: Mapping[int, tuple[int, ...]]) -> None:
    """Hand placement the cards chosen per row; the first scorer of the profile to offer wins (profiles
    name the scorer that decides cards first, as the simulator lets the heaviest scorer choose)."""
    ctx.state.setdefault(CARDS_STATE, cards)
