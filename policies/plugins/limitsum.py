"""LimitSum: the limits of a node's pods, plus the pod's,
stay within `ratio` × allocatable. A pod without a limit counts its request."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes
from policies.plugins.noderesources.common import StrictArgs
from schemas.quantity import validate_resource_name

__all__ = ["NAME", "Args", "LimitSum", "new"]

NAME = "LimitSum"


class Args(StrictArgs):
    resource: str = "memory"
    ratio: Annotated[float, Field(gt=0.0, le=100.0)] = 0.9

    @field_validator("resource")
    @classmethod
    def _known(cls, name: str) -> str:
        return validate_resource_name(name, field="resource")


class LimitSum:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resource = args.resource
        self.ratio = args.ratio

    def _sums(self, ctx: CycleContext, nodes: Nodes) -> tuple[IntArray, IntArray]:
        column = ctx.snapshot.resource_column(self.resource)
        pod_limit = int(ctx.info.limits[column]) if column < len(ctx.info.limits) else 0
        return ctx.snapshot.limits[nodes, column] + pod_limit, ctx.snapshot.allocatable[nodes, column]

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        total, allocatable = self._sums(ctx, nodes)
        fits: BoolArray = total <= self.ratio * allocatable
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        reason = f"node(s) would exceed {self.ratio:g} x allocatable {self.resource} in pod limits"
        return [[reason] for _ in range(len(nodes))]


def new(args: Args | None, handle: object) -> LimitSum:
    return LimitSum(args or Args())
