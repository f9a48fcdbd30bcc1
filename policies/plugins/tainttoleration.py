"""TaintToleration: NoSchedule/NoExecute taints must be tolerated (filter); fewer untolerated
PreferNoSchedule taints score higher (score, reversed DefaultNormalizeScore)."""

from __future__ import annotations

import numpy as np

from policies.framework.contract import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleContext,
    IntArray,
    Nodes,
)
from policies.plugins.noderesources.common import default_normalize

__all__ = ["NAME", "TaintToleration", "new", "untolerated_taint"]

NAME = "TaintToleration"


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class TaintToleration:
    name = NAME

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        hard, _ = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
        fits: BoolArray | None = None
        for word, mask in zip(ctx.snapshot.taint_words, hard, strict=True):
            if mask:
                clear = (word[nodes] & np.uint64(mask)) == 0
                fits = clear if fits is None else fits & clear
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        result = []
        for row in nodes.tolist():
            spec = ctx.snapshot.specs[row]
            assert spec is not None
            # The first untolerated taint in the node's own order, as FindMatchingUntoleratedTaint reports.
            for taint in spec.taints:
                if taint.effect in ("NoSchedule", "NoExecute") and not any(
                    t.tolerates(taint.key, taint.value, taint.effect) for t in ctx.pod.tolerations
                ):
                    result.append([untolerated_taint(taint.key, taint.value)])
                    break
            else:
                result.append([])
        return result

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        _, soft = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
        if not any(soft):
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)  # what normalising all zeros gives
        counts = np.zeros(len(nodes), dtype=np.int64)
        for word, mask in zip(ctx.snapshot.taint_words, soft, strict=True):
            if mask:
                counts += np.bitwise_count(word[nodes] & np.uint64(mask))
        return default_normalize(counts, reverse=True)


def new(args: None, handle: object) -> TaintToleration:
    return TaintToleration()
