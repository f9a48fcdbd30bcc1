"""NodeName: a pod that names its node (``spec.nodeName``, `PodRequest.node_name`) fits that node only."""

from __future__ import annotations

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_count

__all__ = ["NAME", "REASON", "NodeName", "new"]

NAME = "NodeName"
REASON = "node(s) didn't match the requested node name"


_SKIP_FILTER = frozenset({"filter"})
_SKIP_NONE: frozenset[str] = frozenset()


class NodeName:
    name = NAME
    skip_fields = ("node_name",)

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        return _SKIP_NONE if ctx.pod.node_name else _SKIP_FILTER

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        wanted = ctx.pod.node_name
        if not wanted:
            return None
        row = ctx.snapshot.index.get(wanted)
        if row is None:
            return np.zeros(node_count(nodes), dtype=np.bool_)
        if isinstance(nodes, slice):
            start, stop, _ = nodes.indices(nodes.stop)
            fits = np.zeros(stop - start, dtype=np.bool_)
            if start <= row < stop:
                fits[row - start] = True
            return fits
        match: BoolArray = nodes == row
        return match

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        shared = [REASON]  # read-only, like every reason list
        return [shared] * len(nodes)


def new(args: None, handle: object) -> NodeName:
    return NodeName()
