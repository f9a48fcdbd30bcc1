"""LoadThresholds (like Koordinator's LoadAwareScheduling filter): reject a node
whose measured load, plus the pods placed since it was measured and this pod's request, would exceed a
threshold share of its allocatable. A node without window data for a metric passes on that metric."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.loadaware.common import Check, Rows, RowTable, passing, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, PLACED, Snapshot
from policies.usage import WINDOW_METRICS, metric_scale, unknown_metric

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
        # The load changes on the row a pod is placed on; the limits only with the node or its window.
        self._load = RowTable(self._loads, MEASURED, PLACED)
        self._limits = RowTable(self._thresholds, NODES, MEASURED)
        self._plain: list[bool] = []
        """Per metric, whether every row is checked (has window data and allocatable)."""

    def _loads(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per metric, window mean plus the pods placed since."""
        usage = snapshot.usage
        return tuple(
            usage.window_mean[rows, window] + usage.window_assumed[rows, window]
            for _, window, _ in self.checks
        )

    def _thresholds(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per metric, threshold × allocatable in the metric's units, and whether the row is checked."""
        usage = snapshot.usage
        result = []
        for metric, window, threshold in self.checks:
            column = snapshot.column.get(metric)
            if column is None:
                zero = np.zeros(snapshot.rows)[rows]  # skipped; its arrival redoes every row
                result += [zero, zero > 0]
                continue
            allocatable = snapshot.allocatable[rows, column] / metric_scale(metric)
            result += [threshold * allocatable, usage.window_has[rows, window] & (allocatable > 0)]
        return tuple(result)

    def _over(self, ctx: CycleContext, nodes: Nodes) -> list[Check]:
        snapshot = ctx.snapshot
        if not snapshot.has_usage:
            return []
        self._load.refresh(snapshot)
        if self._limits.refresh(snapshot):
            self._plain = [bool(checked.all()) for checked in self._limits.columns[1::2]]
        request = snapshot.usage.amounts(ctx.pod, WINDOW_METRICS)
        result = []
        for i, (metric, window, threshold) in enumerate(self.checks):
            if metric not in snapshot.column:
                continue
            limit, checked = self._limits.columns[2 * i : 2 * i + 2]
            over = self._load.columns[i][nodes] + request[window] > limit[nodes]
            if not self._plain[i]:
                over &= checked[nodes]
            result.append((over_threshold(metric, threshold), over))
        return result

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        return passing(self._over(ctx, nodes))

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return rejections(self._over(ctx, node_rows(nodes)), len(nodes))


def new(args: Args | None, handle: object) -> LoadThresholds:
    return LoadThresholds(args or Args())
