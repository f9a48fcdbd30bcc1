"""NodePorts: a host port may be used once per (protocol, port) and host IP (0.0.0.0 clashes with all)."""

from __future__ import annotations

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes

__all__ = ["NAME", "REASON", "NodePorts", "new"]

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"


_SKIP_FILTER = frozenset({"filter"})
_SKIP_NONE: frozenset[str] = frozenset()


class NodePorts:
    name = NAME
    skip_fields = ("host_ports",)

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        return _SKIP_NONE if ctx.pod.host_ports else _SKIP_FILTER

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        if not ctx.pod.host_ports:
            return None
        free: BoolArray = ~ctx.snapshot.port_conflicts(ctx.pod, nodes)
        return free

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return [[REASON] for _ in range(len(nodes))]


def new(args: None, handle: object) -> NodePorts:
    return NodePorts()
