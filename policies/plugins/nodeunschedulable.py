"""NodeUnschedulable: cordoned nodes take only pods that tolerate the unschedulable taint."""

from __future__ import annotations

from collections import Counter

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes

__all__ = ["NAME", "REASON", "TAINT_KEY", "NodeUnschedulable", "new"]

NAME = "NodeUnschedulable"
REASON = "node(s) were unschedulable"
TAINT_KEY = "node.kubernetes.io/unschedulable"


class NodeUnschedulable:
    name = NAME

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        if any(t.tolerates(TAINT_KEY, "", "NoSchedule") for t in ctx.pod.tolerations):
            return None
        schedulable: BoolArray = ~ctx.snapshot.unschedulable[nodes]
        return schedulable

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return [[REASON] for _ in range(len(nodes))]

    def reason_counts(self, ctx: CycleContext, nodes: IntArray) -> Counter[str]:
        return Counter({REASON: len(nodes)})


def new(args: None, handle: object) -> NodeUnschedulable:
    return NodeUnschedulable()
