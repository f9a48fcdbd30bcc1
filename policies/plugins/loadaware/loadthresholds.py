"""LoadThresholds (seed 001, "机器cpu/内存/网卡阈值"; Koordinator's LoadAwareScheduling filter): reject a node
whose measured load, plus the pods placed since it was measured and this pod's request, would exceed a
threshold share of its allocatable. A node without window data for a metric passes on that metric."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.loadaware.common import Check, passing, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import WINDOW_METRICS, metric_scale, pod_amounts, unknown_metric

__all__ = ["NAME", "Args", "LoadThresholds", "new", "over_threshold"]

NAME = "LoadThresholds"


def over_threshold(metric: str, threshold: float) -> str:
    return f"node(s) {metric} load would exceed {threshold:g} of allocatable"


def _defaults() -> dict[str, float]:
    return {"cpu": 0.65, "memory": 0.95, "bandwidth": 0.80}


class Args(StrictArgs):
    thresholds: dict[str, Annotated[float, Field(gt=0.0, le=10.0)]] = Field(default_factory=_defaults)

    @field_validator("thresholds")
    @classmethod
    def _known(cls, thresholds: dict[str, float]) -> dict[str, float]:
        problem = unknown_metric(sorted(thresholds), WINDOW_METRICS, "window")
        if problem:
            raise ValueError(problem)
        return thresholds


class LoadThresholds:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.checks = [
            (metric, WINDOW_METRICS.index(metric), threshold) for metric, threshold in args.thresholds.items()
        ]

    def _over(self, ctx: CycleContext, nodes: Nodes) -> list[Check]:
        snapshot = ctx.snapshot
        if not snapshot.has_usage:
            return []
        usage = snapshot.usage
        request = pod_amounts(ctx.pod, WINDOW_METRICS)
        result = []
        for metric, window, threshold in self.checks:
            column = snapshot.column.get(metric)
            if column is None:
                continue
            allocatable = snapshot.allocatable[nodes, column] / metric_scale(metric)
            load = usage.window_mean[nodes, window] + usage.window_assumed[nodes, window] + request[window]
            over = usage.window_has[nodes, window] & (allocatable > 0) & (load > threshold * allocatable)
            result.append((over_threshold(metric, threshold), over))
        return result

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        return passing(self._over(ctx, nodes))

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return rejections(self._over(ctx, node_rows(nodes)), len(nodes))


def new(args: Args | None, handle: object) -> LoadThresholds:
    return LoadThresholds(args or Args())
