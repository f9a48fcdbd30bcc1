"""GlobalVarianceMin: place the pod where the cluster's load ends
up most even: for each candidate node j, the variance over *all* nodes of each resource's utilisation after
adding the pod to j, weighted over resources; lower is better, min-max normalised to 0..100.

Utilisation is measured load (window mean + pods placed since) over allocatable where a node has window data,
and requested over allocatable where it has none. The closed form for a one-element change gives every
candidate's variance in O(nodes): with u the utilisations, n nodes and δ_j the pod's share of node j,
Var_j − Var = (2·δ_j·(u_j − ū) + δ_j²·(1 − 1/n)) / n, so nothing is recomputed per candidate.
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import Rows, RowTable, min_max, pick, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, PLACED, PODS, Snapshot
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


def _increase_into(mean: float, n: int, mine: FloatArray, delta: FloatArray) -> FloatArray:
    """`variance_increase` in the same order of operations, reusing `mine` and `delta` for the result."""
    mine -= mean
    square = delta * delta
    square *= 1.0 - 1.0 / n
    delta *= 2.0
    delta *= mine
    delta += square
    delta /= n
    return delta


class GlobalVarianceMin:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [(r.name, WINDOW_METRICS.index(r.name), r.weight) for r in args.resources]
        # Utilisation changes on the row a pod is placed on, allocatable only with the node.
        self._load = RowTable(self._utilization, NODES, PODS, MEASURED, PLACED)
        self._nodes = RowTable(self._allocatable, NODES)
        self._plain: list[bool] = []
        """Per resource, whether every row has an allocatable amount of it."""

    def _utilization(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per resource, each row's utilisation: measured load (window mean + pods placed since) where the
        row has window data, else requested, over allocatable."""
        result = []
        for name, window, _ in self.resources:
            column = snapshot.column.get(name)
            if column is None:
                result.append(np.zeros(snapshot.rows)[rows])  # scored as absent; its arrival redoes every row
                continue
            allocatable = snapshot.allocatable[rows, column] / metric_scale(name)
            requested = snapshot.requested[rows, column] / metric_scale(name)
            if snapshot.has_usage:
                usage = snapshot.usage
                measured = usage.window_mean[rows, window] + usage.window_assumed[rows, window]
                load = pick(usage.window_has[rows, window], measured, requested)
            else:
                load = requested
            positive = allocatable > 0
            result.append(pick(positive, load / pick(positive, allocatable, 1.0), 0.0))
        return tuple(result)

    def _allocatable(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per resource, each row's allocatable in the metric's units (1 where there is none)."""
        result = []
        for name, _, _ in self.resources:
            column = snapshot.column.get(name)
            allocatable = (
                np.zeros(snapshot.rows)[rows]
                if column is None
                else snapshot.allocatable[rows, column] / metric_scale(name)
            )
            result.append(pick(allocatable > 0, allocatable, 1.0))
        return tuple(result)

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot, info = ctx.snapshot, ctx.info
        self._load.refresh(snapshot)
        if self._nodes.refresh(snapshot):
            every_row = slice(0, snapshot.rows)
            self._plain = [
                name in snapshot.column
                and bool((snapshot.allocatable[every_row, snapshot.column[name]] > 0).all())
                for name, _, _ in self.resources
            ]
        # Rows of removed nodes stay out of the variance.
        live = None if snapshot.size == snapshot.rows else snapshot.live_rows()
        total = np.zeros(len(nodes))
        for i, (name, _, weight) in enumerate(self.resources):
            column = snapshot.column.get(name)
            if column is None:
                continue
            utilization, allocatable = self._load.columns[i], self._nodes.columns[i]
            everyone = utilization if live is None else utilization[live]
            if len(everyone) == 0:
                continue
            request = {"cpu": info.nonzero_cpu, "memory": info.nonzero_memory}.get(
                name, int(info.vector[column]) if column < len(info.vector) else 0
            )
            delta = request / metric_scale(name) / allocatable[nodes]
            if not self._plain[i]:
                positive = snapshot.allocatable[nodes, column] > 0
                delta = np.where(positive, delta, 0.0)
            mean = float(everyone.mean())
            total += weight * _increase_into(mean, len(everyone), utilization[nodes], delta)
        return round_half_away(MAX_NODE_SCORE * (1.0 - min_max(total)))


def new(args: Args | None, handle: object) -> GlobalVarianceMin:
    return GlobalVarianceMin(args or Args())
