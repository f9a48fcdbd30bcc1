"""NodePorts: a host port may be used once per (protocol, port) and host IP (0.0.0.0 clashes with all)."""

from __future__ import annotations

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray

__all__ = ["NAME", "REASON", "NodePorts", "new"]

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts:
    name = NAME

    def filter(self, ctx: CycleContext, nodes: IntArray) -> BoolArray:
        if not ctx.pod.host_ports:
            return np.ones(len(nodes), dtype=np.bool_)
        free: BoolArray = ~ctx.snapshot.port_conflicts(ctx.pod, nodes)
        return free

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return [[REASON] for _ in range(len(nodes))]


def new(args: None, handle: object) -> NodePorts:
    return NodePorts()
