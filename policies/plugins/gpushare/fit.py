"""GpuShareFit: a GPU pod fits a node whose cards are of an allowed model and hold its request per card.

A share (milli < 1000) needs one card with `milli` free; a whole-card pod needs `count` cards entirely
free (docs/gpu-sharing.md). One comparison over nodes × cards of `Snapshot.gpu_free` answers every node
(`policies.gpu.cards.card_fit`); the model check is one `isin` over the nodes' model ids. Pods without a
GPU request pass everywhere.
"""

from __future__ import annotations

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes
from policies.gpu.cards import card_fit
from schemas.gpu import GpuRequest

__all__ = [
    "NAME",
    "REASON_MODEL",
    "REASON_NO_CARDS",
    "REASON_SHARE",
    "REASON_WHOLE",
    "GpuShareFit",
    "new",
]

NAME = "GpuShareFit"
REASON_NO_CARDS = "node(s) had no GPU cards"
REASON_MODEL = "node(s) didn't have the requested GPU card model"
REASON_SHARE = "node(s) didn't have a GPU card with enough free share"
REASON_WHOLE = "node(s) didn't have enough whole free GPU cards"


class GpuShareFit:
    name = NAME

    def _model_ok(self, ctx: CycleContext, gpu: GpuRequest, nodes: Nodes) -> BoolArray | None:
        if not gpu.models:
            return None
        snapshot = ctx.snapshot
        ids = np.array([snapshot.gpu_model_id(model) for model in gpu.models], dtype=np.int64)
        allowed: BoolArray = np.isin(snapshot.gpu_model[nodes], ids)
        return allowed

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        gpu = ctx.pod.gpu
        if gpu is None:
            return None
        snapshot = ctx.snapshot
        fits = card_fit(snapshot.gpu_free[nodes], gpu)
        allowed = self._model_ok(ctx, gpu, nodes)
        return fits if allowed is None else fits & allowed

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        gpu = ctx.pod.gpu
        assert gpu is not None  # only rows this filter rejected are asked about
        snapshot = ctx.snapshot
        allowed = self._model_ok(ctx, gpu, nodes)
        has_cards = snapshot.gpu_cards[nodes] > 0
        short = REASON_SHARE if gpu.is_share else REASON_WHOLE
        found = []
        for i in range(len(nodes)):
            if not has_cards[i]:
                found.append([REASON_NO_CARDS])
            elif allowed is not None and not allowed[i]:
                found.append([REASON_MODEL])
            else:
                found.append([short])
        return found


def new(args: None, handle: object) -> GpuShareFit:
    return GpuShareFit()
