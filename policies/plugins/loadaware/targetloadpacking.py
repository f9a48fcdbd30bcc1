"""TargetLoadPacking (scheduler-plugins Trimaran): pack nodes up to a target cpu utilisation X, then spread.

U = 100 × (window mean cpu + pod cpu + cpu of pods placed since the window's newest sample) / cpu capacity,
each pod's cpu *predicted* as upstream's PredictUtilisation (per container: the limit, else the request ×
multiplier rounded, else the default request; plus overhead). Score: U ≤ X → round((100 − X)·U/X + X);
X < U ≤ 100 → round(X·(100 − U)/(100 − X)); U > 100 → 0; no window data → 0 (MinNodeScore).
"""

from __future__ import annotations

from typing import Annotated, Any

import numpy as np
from pydantic import Field, field_validator

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import (
    Rows,
    RowTable,
    pick,
    round_half_away,
    round_half_away_scalar,
)
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, Snapshot
from policies.usage import metric_scale
from schemas.pod import PodRequest
from schemas.quantity import ResourceList, Resources, parse_quantity

__all__ = ["NAME", "Args", "TargetLoadPacking", "new", "predict_cpu"]

NAME = "TargetLoadPacking"


def _default_requests() -> Resources:
    return Resources({"cpu": 1000})


class Args(StrictArgs):
    target_utilization: Annotated[int, Field(ge=1, le=100, alias="targetUtilization")] = 40
    default_requests: ResourceList = Field(default_factory=_default_requests, alias="defaultRequests")
    default_requests_multiplier: Annotated[
        float, Field(ge=0.0, le=1000.0, alias="defaultRequestsMultiplier")
    ] = 1.5

    @field_validator("default_requests_multiplier", mode="before")
    @classmethod
    def _multiplier(cls, value: object) -> object:
        # Upstream's field is a string ("1.5"); a number is accepted too.
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise ValueError(f"not a number: {value!r}") from None
        return value


def predict_cpu(pod: PodRequest, default_millis: int, multiplier: float) -> int:
    """Upstream's PredictUtilisation summed over containers, plus overhead (millicores)."""
    total = 0
    for container in pod.containers:
        if "cpu" in container.limits:
            total += container.limits["cpu"]
        elif "cpu" in container.requests:
            total += round_half_away_scalar(container.requests["cpu"] * multiplier)
        else:
            total += default_millis
    return total + pod.overhead.get("cpu", 0)


class TargetLoadPacking:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.target = float(args.target_utilization)
        self.default_millis = int(args.default_requests.get("cpu", parse_quantity("1", "cpu")))
        self.multiplier = args.default_requests_multiplier
        self._key = (NAME, self.default_millis, self.multiplier)
        self._last: tuple[PodRequest | None, float] = (None, 0.0)
        # The window's share changes only with the node or its window; pods placed since are
        # `NodeUsage.predicted_cpu`, kept per placement.
        self._rows = RowTable(self._derive, NODES, MEASURED)
        self._plain = False
        """Every row has window data and a cpu capacity."""

    def _predict(self, pod: PodRequest) -> float:
        # Asked for in the cycle and again when the pod is assumed.
        last, cpu = self._last
        if last is not pod:
            cpu = float(predict_cpu(pod, self.default_millis, self.multiplier))
            self._last = (pod, cpu)
        return cpu

    @staticmethod
    def _derive(snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """The window's mean cpu in millicores; cpu capacity (1 where there is none); whether the row has
        window data; and whether it has both window data and a capacity."""
        capacity = snapshot.capacity[rows, snapshot.column["cpu"]].astype(np.float64)
        has = snapshot.usage.window_has[rows, 0]
        measured = snapshot.usage.window_mean[rows, 0] * metric_scale("cpu")
        return measured, pick(capacity > 0, capacity, 1.0), has, has & (capacity > 0)

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot = ctx.snapshot
        if self._rows.refresh(snapshot):
            self._plain = bool(self._rows.columns[3].all())
        measured, capacity, has, _ = self._rows.columns
        used = measured[nodes]
        used += self._predict(ctx.pod)
        used += snapshot.usage.predicted_cpu(self._key, self._predict)[nodes]
        utilization = np.multiply(used, 100.0, out=used)
        utilization /= capacity[nodes]
        if not self._plain:
            # Upstream leaves U at 0 when the capacity is 0 (the node then scores X).
            positive = snapshot.capacity[nodes, snapshot.column["cpu"]] > 0
            utilization = np.where(positive, utilization, 0.0)
        x = self.target
        below = (MAX_NODE_SCORE - x) * utilization / x + x
        above = x * (MAX_NODE_SCORE - utilization) / max(MAX_NODE_SCORE - x, 1e-300)
        raw = np.where(utilization <= x, below, np.where(utilization > MAX_NODE_SCORE, 0.0, above))
        result = round_half_away(raw)
        if not self._plain:
            result = np.where(has[nodes], result, 0)
        return result


def new(args: Args | None, handle: object) -> TargetLoadPacking:
    return TargetLoadPacking(args or Args())
