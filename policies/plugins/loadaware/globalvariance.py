"""GlobalVarianceMin (seed 001's final choice, "全局方差最小"): place the pod where the cluster's load ends
up most even: for each candidate node j, the variance over *all* nodes of each resource's utilisation after
adding the pod to j, weighted over resources; lower is better, min-max normalised to 0..100.

Utilisation is measured load (window mean + pods placed since) over allocatable where a node has window data,
and requested over allocatable where it has none. The closed form for a one-element change gives every
candidate's variance in O(nodes): with u the utilisations, n nodes and δ_j the pod's share of node j,
Var_j − Var = (2·δ_j·(u_j − ū) + δ_j²·(1 − 1/n)) / n, so nothing is recomputed per candidate.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray, Nodes
from policies.plugins.loadaware.common import min_max, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import WINDOW_METRICS, metric_scale, unknown_metric

__all__ = ["NAME", "Args", "GlobalVarianceMin", "new", "variance_increase"]

NAME = "GlobalVarianceMin"

FloatArray = npt.NDArray[np.float64]


class WeightedResource(StrictArgs):
    name: str
    weight: Annotated[float, Field(gt=0.0, le=100.0)] = 1.0

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        problem = unknown_metric([name], WINDOW_METRICS, "window")
        if problem:
            raise ValueError(problem)
        return name


def _default_resources() -> list[WeightedResource]:
    return [WeightedResource(name="cpu"), WeightedResource(name="memory")]


class Args(StrictArgs):
    resources: list[WeightedResource] = Field(default_factory=_default_resources, min_length=1)


def variance_increase(all_utilization: FloatArray, utilization: FloatArray, delta: FloatArray) -> FloatArray:
    """Var after adding δ_j to element j, minus Var before, for every candidate j (closed form)."""
    n = len(all_utilization)
    if n == 0:
        return np.zeros_like(utilization)
    mean = float(all_utilization.mean())
    increase: FloatArray = (2.0 * delta * (utilization - mean) + delta * delta * (1.0 - 1.0 / n)) / n
    return increase


class GlobalVarianceMin:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [(r.name, WINDOW_METRICS.index(r.name), r.weight) for r in args.resources]

    def utilization(self, ctx: CycleContext, rows: Nodes, name: str, window: int) -> FloatArray:
        snapshot = ctx.snapshot
        column = snapshot.column[name]
        allocatable = snapshot.allocatable[rows, column] / metric_scale(name)
        requested = snapshot.requested[rows, column] / metric_scale(name)
        if snapshot.has_usage:
            usage = snapshot.usage
            measured = usage.window_mean[rows, window] + usage.window_assumed[rows, window]
            load = np.where(usage.window_has[rows, window], measured, requested)
        else:
            load = requested
        result: FloatArray = np.where(
            allocatable > 0, load / np.where(allocatable > 0, allocatable, 1.0), 0.0
        )
        return result

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot, info = ctx.snapshot, ctx.info
        live = snapshot.live_rows()
        total = np.zeros(len(nodes))
        for name, window, weight in self.resources:
            column = snapshot.column.get(name)
            if column is None:
                continue
            # Once over every row (views, nothing gathered), then the live rows and the candidates: the same
            # per-row values as computing each set on its own.
            every_row = self.utilization(ctx, slice(0, snapshot.rows), name, window)
            everyone, mine = every_row[live], every_row[nodes]
            request = {"cpu": info.nonzero_cpu, "memory": info.nonzero_memory}.get(
                name, int(info.vector[column]) if column < len(info.vector) else 0
            )
            allocatable = snapshot.allocatable[nodes, column] / metric_scale(name)
            delta = np.where(
                allocatable > 0,
                request / metric_scale(name) / np.where(allocatable > 0, allocatable, 1.0),
                0.0,
            )
            total += weight * variance_increase(everyone, mine, delta)
        return round_half_away(MAX_NODE_SCORE * (1.0 - min_max(total)))


def new(args: Args | None, handle: object) -> GlobalVarianceMin:
    return GlobalVarianceMin(args or Args())
