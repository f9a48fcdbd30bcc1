"""PeakReference (seed 001, "昨天一天的最高点参考"): the node's highest hourly mean usage in its portrait
(the previous days, pods placed since included), plus the pod's request, stays within `ratio` × allocatable,
per configured resource. A node without a measured portrait for a resource passes on it."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import PORTRAIT_METRICS, pod_amounts

__all__ = ["NAME", "Args", "PeakReference", "new", "over_peak"]

NAME = "PeakReference"
_UNITS = {"cpu": 1000.0}


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
        for name in resources:
            if name not in PORTRAIT_METRICS:
                raise ValueError(f"no portrait metric {name!r} (known: {', '.join(PORTRAIT_METRICS)})")
        return resources


class PeakReference:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.ratio = args.ratio
        self.resources = [(name, PORTRAIT_METRICS.index(name)) for name in args.resources]

    def _over(self, ctx: CycleContext, nodes: Nodes) -> list[tuple[str, BoolArray]]:
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
            allocatable = snapshot.allocatable[nodes, column] / _UNITS.get(name, 1.0)
            peak = usage.peak[nodes, metric] + request[metric]
            over = usage.portrait_has[nodes, metric] & (peak > self.ratio * allocatable)
            result.append((name, over))
        return result

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        checks = self._over(ctx, nodes)
        if not checks:
            return None
        over = checks[0][1].copy()
        for _, more in checks[1:]:
            over |= more
        fits: BoolArray = ~over
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        checks = self._over(ctx, node_rows(nodes))
        return [[over_peak(name, self.ratio) for name, over in checks if over[i]] for i in range(len(nodes))]


def new(args: Args | None, handle: object) -> PeakReference:
    return PeakReference(args or Args())
