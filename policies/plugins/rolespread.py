"""RoleSpread: a node may hold at
most ⌈`ratio` × size⌉ of a group's masters, where the size is the masters known so far (this pod included), or
its pod group's ``min_available`` when larger. Rounding up lets a group that arrives one master at a time
grow (with floor, the third of four masters on two nodes would fit nowhere), and the first master always
fits."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import Field

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.noderesources.common import StrictArgs

__all__ = ["NAME", "Args", "RoleSpread", "new"]

NAME = "RoleSpread"


class Args(StrictArgs):
    group_label: str = Field(default="group", alias="groupLabel", min_length=1)
    role_label: str = Field(default="role", alias="roleLabel", min_length=1)
    role: str = Field(default="master", min_length=1)
    ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5


class RoleSpread:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.args = args

    def _limit(self, ctx: CycleContext, nodes: Nodes) -> tuple[IntArray, int] | None:
        labels = ctx.pod.labels
        group = labels.get(self.args.group_label)
        if group is None or labels.get(self.args.role_label) != self.args.role:
            return None
        counter = ctx.snapshot.label_counter((self.args.group_label, self.args.role_label))
        values = (group, self.args.role)
        size = counter.total(values) + 1
        if ctx.pod.pod_group is not None:
            size = max(size, ctx.pod.pod_group.min_available)
        limit = max(1, math.ceil(self.args.ratio * size))
        return counter.on_rows(values, node_rows(nodes)), limit

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        found = self._limit(ctx, nodes)
        if found is None:
            return None
        on_node, limit = found
        fits: BoolArray = on_node + 1 <= limit
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        found = self._limit(ctx, nodes)
        limit = found[1] if found else 0
        group = ctx.pod.labels.get(self.args.group_label)
        reason = f"node(s) already hold {limit} {self.args.role}(s) of group {group}"
        return [[reason] for _ in range(len(nodes))]


def new(args: Args | None, handle: object) -> RoleSpread:
    return RoleSpread(args or Args())
