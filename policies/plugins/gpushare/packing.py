"""GpuPacking: the FGD simulator's ``GpuPackingScore`` — shared cards first, then free cards of used nodes,
then idle nodes.

``getPackingScore``: on a node whose cards are all free, max(33 − free cards, free cards); else the pod's
cards are taken least-free first among those with room: when some of them are entirely free,
max(50 − those cards, 33); else (only shared cards) max(100 − (Σ free milli × 100 / 1000) / 10, 50), integer
math throughout. Pods without GPUs score 0. Cards: the default best-fit rule.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from schemas.gpu import MILLI_PER_CARD

__all__ = ["NAME", "GpuPacking", "new"]

NAME = "GpuPacking"


class GpuPacking:
    name = NAME

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        gpu = ctx.pod.gpu
        if gpu is None:
            return np.zeros(len(nodes), dtype=np.int64)
        snapshot = ctx.snapshot
        free = snapshot.gpu_free[nodes]
        cards = snapshot.gpu_cards[nodes]
        valid = np.arange(free.shape[1], dtype=np.int64)[None, :] < cards[:, None]
        fully_free = np.count_nonzero(valid & (free == MILLI_PER_CARD), axis=1)
        idle = fully_free == cards
        idle_score = np.maximum(MAX_NODE_SCORE // 3 - fully_free, fully_free)
        room = valid & (free >= gpu.milli)
        if gpu.is_share:
            # The share's card: the least free card with room (ties: the lowest index, as a stable sort).
            least = np.where(room, free, np.iinfo(np.int64).max).min(axis=1)
            found = room.any(axis=1)
            uses_free = least == MILLI_PER_CARD
            shared = np.maximum(MAX_NODE_SCORE - (least * 100 // MILLI_PER_CARD) // 10, MAX_NODE_SCORE // 2)
            used_score = np.where(uses_free, np.maximum(MAX_NODE_SCORE // 2 - 1, MAX_NODE_SCORE // 3), shared)
            used_score = np.where(found, used_score, 0)
        else:
            # Whole cards: only entirely free cards have room, so the pod takes `count` of them.
            enough = np.count_nonzero(room, axis=1) >= gpu.count
            used_score = np.where(
                enough, max(MAX_NODE_SCORE // 2 - gpu.count, MAX_NODE_SCORE // 3), 0
            ).astype(np.int64)
        result: IntArray = np.where(idle, idle_score, used_score).astype(np.int64)
        return result


def new(args: None, handle: object) -> GpuPacking:
    return GpuPacking()
