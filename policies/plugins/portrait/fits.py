"""PodFitsResourceOnPortrait (seed 000): NodeResourcesFit's filter for oversold nodes.

Hard limits (requests): cpu requested with the pod ≤ allocatable cpu × OverSellRate (the node's
`oversell_rate`, else this plugin's arg), memory requested ≤ allocatable memory; pod count and every other
requested resource as NodeResourcesFit checks them (an oversold GPU is not a thing). Soft limit (portrait):
with the pod assumed on the node, every hour's cap = μ + z·σ stays within allocatable, for cpu and memory.

Most nodes are cleared without touching their 24 hours: max_h cap_N(h) + max_h cap_P(h) bounds the
combined cap from above (√(a + b) ≤ √a + √b), so only nodes near the limit get the exact hourly check.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes
from policies.plugins.loadaware.common import passing, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.plugins.noderesources.fit import REASON_TOO_MANY_PODS, insufficient
from policies.usage import PORTRAIT_METRICS, metric_scale

__all__ = ["NAME", "REASON_OVERSOLD", "Args", "PodFitsResourceOnPortrait", "new", "portrait_over"]

NAME = "PodFitsResourceOnPortrait"
REASON_OVERSOLD = "Insufficient cpu (oversell limit)"
_CHECKED = ("cpu", "memory")

FloatArray = npt.NDArray[np.float64]


def portrait_over(resource: str) -> str:
    return f"node(s) {resource} portrait cap would exceed allocatable"


class Args(StrictArgs):
    oversell_rate: Annotated[float, Field(gt=0.0, le=100.0, alias="overSellRate")] = 1.5


class PodFitsResourceOnPortrait:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.oversell_rate = args.oversell_rate

    def _rate(self, ctx: CycleContext, nodes: Nodes) -> FloatArray:
        own = ctx.snapshot.oversell[nodes]
        rate: FloatArray = np.where(np.isnan(own), self.oversell_rate, own)
        return rate

    def _hard(self, ctx: CycleContext, nodes: Nodes) -> list[tuple[str, BoolArray]]:
        snapshot, info = ctx.snapshot, ctx.info
        checks: list[tuple[str, BoolArray]] = [
            (REASON_TOO_MANY_PODS, snapshot.pod_count[nodes] >= snapshot.max_pods[nodes])
        ]
        cpu = snapshot.column["cpu"]
        for column in info.requested_columns.tolist():
            if column == cpu:
                limit = snapshot.allocatable[nodes, cpu] * self._rate(ctx, nodes)
                checks.append((REASON_OVERSOLD, snapshot.requested[nodes, cpu] + info.vector[cpu] > limit))
            else:
                short = snapshot.free[nodes, column] < info.vector[column]
                checks.append((insufficient(snapshot.resources[column]), short))
        return checks

    def _soft(self, ctx: CycleContext, nodes: Nodes) -> list[tuple[str, BoolArray]]:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        pod = usage.cycle_pod_load(ctx.state, ctx.pod, ctx.now)
        pod_cap = (pod.mean + usage.z * np.sqrt(pod.var)).max(axis=0)
        checks = []
        for resource in _CHECKED:
            metric = PORTRAIT_METRICS.index(resource)
            # Over a slice these are views: only the rows near the limit are gathered.
            allocatable = snapshot.allocatable[nodes, snapshot.column[resource]] / metric_scale(resource)
            over = np.zeros(len(allocatable), dtype=np.bool_)
            unsure = np.flatnonzero(usage.cap_max[nodes, metric] + pod_cap[metric] > allocatable)
            if len(unsure):
                if isinstance(nodes, slice):
                    start, _, step = nodes.indices(len(usage.cap_max))
                    near = start + step * unsure
                else:
                    near = nodes[unsure]
                mean = usage.base_mean[near, :, metric] + pod.mean[:, metric]
                var = usage.base_var[near, :, metric] + pod.var[:, metric]
                cap = mean + usage.z * np.sqrt(np.maximum(var, 0.0))
                over[unsure] = (cap > allocatable[unsure, None]).any(axis=1)
            checks.append((portrait_over(resource), over))
        return checks

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        return passing([*self._hard(ctx, nodes), *self._soft(ctx, nodes)])

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return rejections([*self._hard(ctx, nodes), *self._soft(ctx, nodes)], len(nodes))


def new(args: Args | None, handle: object) -> PodFitsResourceOnPortrait:
    return PodFitsResourceOnPortrait(args or Args())
