"""PeakReference (seed 001, "昨天一天的最高点参考"): the node's highest hourly mean usage in its portrait
(the previous days, pods placed since included), plus the pod's request, stays within `ratio` × allocatable,
per configured resource. A node without a measured portrait for a resource passes on it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.loadaware.common import Check, passing, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import PORTRAIT_METRICS, metric_scale, pod_amounts, unknown_metric

__all__ = ["NAME", "Args", "PeakReference", "new", "over_peak"]

NAME = "PeakReference"


def over_peak(resource: str, ratio: float) -> str:
    return f"node(s) peak {resource} usage would exceed {ratio:g} of allocatable"


def _default_resources() -> list[str]:
    return ["cpu", "memory"]


class Args(StrictArgs):
    ratio: Annotated[float, Field(gt=0.0, le=10.0)] = 0.9
    resources: list[str] = Field(default_factory=_default_resources, min_length=1)

    @field_validator("resources")
    @classmethod
    def _known(cls, resources: list[str]) -> list[str]:
        problem = unknown_metric(resources, PORTRAIT_METRICS, "portrait")
        if problem:
            raise ValueError(problem)
        return resources


class PeakReference:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.ratio = args.ratio
        self.resources = [(name, PORTRAIT_METRICS.index(name)) for name in args.resources]

    def _over(self, ctx: CycleContext, nodes: Nodes) -> list[Check]:
        snapshot = ctx.snapshot
        if not snapshot.has_usage:
            return []
        usage = snapshot.usage
        request = pod_amounts(ctx.pod, PORTRAIT_METRICS)
        result = []
        for name, metric in self.resources:
            column = snapshot.column.get(name)
            if column is None:
                continue
            allocatable = snapshot.allocatable[nodes, column] / metric_scale(name)
            peak = usage.peak[nodes, metric] + request[metric]
            over = usage.portrait_has[nodes, metric] & (peak > self.ratio * allocatable)
            result.append((over_peak(name, self.ratio), over))
        return result

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        return passing(self._over(ctx, nodes))

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return rejections(self._over(ctx, node_rows(nodes)), len(nodes))


def new(args: Args | None, handle: object) -> PeakReference:
    return PeakReference(args or Args())
