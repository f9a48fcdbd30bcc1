"""TaintToleration: NoSchedule/NoExecute taints must be tolerated (filter); fewer untolerated
PreferNoSchedule taints score higher (score, reversed DefaultNormalizeScore)."""

from __future__ import annotations

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray
from policies.plugins.noderesources.common import default_normalize

__all__ = ["NAME", "TaintToleration", "new", "untolerated_taint"]

NAME = "TaintToleration"


def untolerated_taint(key: str, value: str) -> str:
    return f"node(s) had untolerated taint {{{key}: {value}}}"


class TaintToleration:
    name = NAME

    def filter(self, ctx: CycleContext, nodes: IntArray) -> BoolArray:
        hard, _ = ctx.snapshot.untolerated_taints(ctx.pod.tolerations)
        if len(hard) == 0:
            return np.ones(len(nodes), dtype=np.bool_)
        blocked = np.asarray(ctx.snapshot.taint_matrix[np.ix_(nodes, hard)].any(axis=1), dtype=np.bool_)
        fits: BoolArray = ~blocked
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
        if len(soft) == 0:
            counts = np.zeros(len(nodes), dtype=np.int64)
        else:
            counts = ctx.snapshot.taint_matrix[np.ix_(nodes, soft)].sum(axis=1).astype(np.int64)
        return default_normalize(counts, reverse=True)


def new(args: None, handle: object) -> TaintToleration:
    return TaintToleration()
