"""Choosing a GPU pod's cards on one node, and which nodes have cards that fit it.

A node's cards are a row of free milli per card (`Snapshot.gpu_free`; cards the node does not have are -1,
so nothing fits them). A pod asks for `count` cards with `milli` free on each: a share (milli < 1000) takes
one card that has `milli` left, never straddling two; a whole-card pod (milli 1000) takes `count` cards that
are entirely free, never one that a share uses. Both are the one test ``free >= milli`` per card, which is
what makes the fit a single comparison over nodes × cards.

The default rule is the FGD simulator's ``AllocateGpuId``: a one-card pod takes the fitting card with the
least free milli (ties: lowest index); a multi-card pod takes the lowest-indexed free cards.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from policies.framework.contract import BoolArray, IntArray
from schemas.gpu import GpuRequest

__all__ = ["CARDS_STATE", "DEFAULT_RULE", "RULES", "RULE_STATE", "card_fit", "choose_cards", "planned_cards"]

BEST_FIT = "best-fit"
WORST_FIT = "worst-fit"
FIRST_FIT = "first-fit"
RULES = (BEST_FIT, WORST_FIT, FIRST_FIT)
"""``best-fit``: least free milli first (the simulator's default); ``worst-fit``: most free first;
``first-fit``: lowest index first. Ties always go to the lower index."""
DEFAULT_RULE = BEST_FIT

CARDS_STATE = "gpu/cards"
"""`CycleContext.state` key: a mapping row → card indexes that a plugin (a scorer that weighed each card)
chose for the pod on that row. Placement assumes the pod on those cards when it picks the row."""
RULE_STATE = "gpu/rule"
"""`CycleContext.state` key: the `RULES` entry placement uses for rows that `CARDS_STATE` does not cover."""


def card_fit(free: IntArray, gpu: GpuRequest) -> BoolArray:
    """Per row of `free` (rows × cards), whether the pod's cards fit: at least `count` cards with `milli`
    free each."""
    fitting: BoolArray = free >= gpu.milli
    if gpu.count == 1:
        fits: BoolArray = np.any(fitting, axis=1)
    else:
        fits = np.count_nonzero(fitting, axis=1) >= gpu.count
    return fits


def choose_cards(free_row: IntArray, gpu: GpuRequest, rule: str = DEFAULT_RULE) -> tuple[int, ...] | None:
    """The card indexes (ascending) the pod takes on a node whose cards have `free_row` milli free, or None
    when fewer than `count` cards fit."""
    fitting = np.flatnonzero(free_row >= gpu.milli)
    if len(fitting) < gpu.count:
        return None
    if rule == FIRST_FIT:
        chosen = fitting[: gpu.count]
    elif rule == BEST_FIT:
        # A stable sort keeps index order among equal free amounts: ties go to the lower index.
        chosen = fitting[np.argsort(free_row[fitting], kind="stable")[: gpu.count]]
    elif rule == WORST_FIT:
        chosen = fitting[np.argsort(-free_row[fitting], kind="stable")[: gpu.count]]
    else:
        raise ValueError(f"unknown card rule {rule!r} (one of {', '.join(RULES)})")
    return tuple(sorted(int(card) for card in chosen))


def planned_cards(
    state: Mapping[str, object], row: int, free_row: IntArray, gpu: GpuRequest | None
) -> tuple[int, ...] | None:
    """The cards placement assumes the pod on at `row` with: those a plugin chose for the row in this cycle
    (`CARDS_STATE`), else those the cycle's rule (`RULE_STATE`) picks; None leaves the choice to
    `Snapshot.assume` (the default rule)."""
    if gpu is None:
        return None
    chosen = state.get(CARDS_STATE)
    if isinstance(chosen, Mapping):
        cards = chosen.get(row)
        if cards is not None:
            return tuple(int(card) for card in cards)
    rule = state.get(RULE_STATE)
    if isinstance(rule, str) and rule != DEFAULT_RULE:
        return choose_cards(free_row, gpu, rule)
    return None
