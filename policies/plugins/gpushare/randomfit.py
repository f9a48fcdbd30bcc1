"""GpuRandomFit: the FGD simulator's ``RandomScore`` — one feasible node at random scores 100, the rest 0.

The node is drawn uniformly among the nodes that passed the filters, and a share's card uniformly among the
node's cards with room (the simulator's ``gpuSelMethod: random``; whole cards: the lowest-indexed free ones).
Both draws are seeded by the pod's uid, so a replay places every pod the same way.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.gpushare.common import offer_cards, uid_seed

__all__ = ["NAME", "GpuRandomFit", "new"]

NAME = "GpuRandomFit"


class GpuRandomFit:
    name = NAME

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        result = np.zeros(len(nodes), dtype=np.int64)
        if len(nodes) == 0:
            return result
        rng = np.random.default_rng(uid_seed(ctx.pod.uid, NAME))
        pick = int(rng.integers(len(nodes)))
        result[pick] = MAX_NODE_SCORE
        gpu = ctx.pod.gpu
        if gpu is not None and gpu.is_share:
            row = int(nodes[pick])
            snapshot = ctx.snapshot
            free = snapshot.gpu_free[row, : int(snapshot.gpu_cards[row])]
            room = np.flatnonzero(free >= gpu.milli)
            if len(room):
                offer_cards(ctx, {row: (int(room[int(rng.integers(len(room)))]),)})
        return result


def new(args: None, handle: object) -> GpuRandomFit:
    return GpuRandomFit()
