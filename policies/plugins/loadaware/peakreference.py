"""PeakReference: the node's highest hourly mean usage in its portrait
(the previous days, pods placed since included), plus the pod's request, stays within `ratio` × allocatable,
per configured resource. A node without a measured portrait for a resource passes on it."""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, node_rows
from policies.plugins.loadaware.common import Check, Rows, RowTable, passing, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, Snapshot
from policies.usage import PORTRAIT_METRICS, metric_scale, unknown_metric

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
        # The peak is `NodeUsage.peak`, kept per placement; the limits change only with the node or its
        # portrait.
        self._limits = RowTable(self._thresholds, NODES, MEASURED)
        self._plain: list[bool] = []
        """Per resource, whether every row has a measured portrait of it."""

    def _thresholds(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per resource, ratio × allocatable in the metric's units, and whether the row has a measured
        portrait of it (else it passes)."""
        usage = snapshot.usage
        result = []
        for name, metric in self.resources:
            column = snapshot.column.get(name)
            if column is None:
                zero = np.zeros(snapshot.rows)[rows]  # skipped; its arrival redoes every row
                result += [zero, zero > 0]
                continue
            allocatable = snapshot.allocatable[rows, column] / metric_scale(name)
            result += [self.ratio * allocatable, usage.portrait_has[rows, metric]]
        return tuple(result)

    def _over(self, ctx: CycleContext, nodes: Nodes) -> list[Check]:
        snapshot = ctx.snapshot
        if not snapshot.has_usage:
            return []
        usage = snapshot.usage
        if self._limits.refresh(snapshot):
            self._plain = [bool(has.all()) for has in self._limits.columns[1::2]]
        request = usage.amounts(ctx.pod, PORTRAIT_METRICS)
        result = []
        for i, (name, metric) in enumerate(self.resources):
            if name not in snapshot.column:
                continue
            limit, has = self._limits.columns[2 * i : 2 * i + 2]
            # `peak` is laid out metric by metric: over every row, a contiguous view.
            over = usage.peak[nodes, metric] + request[metric] > limit[nodes]
            if not self._plain[i]:
                over &= has[nodes]
            result.append((over_peak(name, self.ratio), over))
        return result

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        return passing(self._over(ctx, nodes))

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        return rejections(self._over(ctx, node_rows(nodes)), len(nodes))


def new(args: Args | None, handle: object) -> PeakReference:
    return PeakReference(args or Args())
