"""TargetLoadPacking (scheduler-plugins Trimaran): pack nodes up to a target cpu utilisation X, then spread.

U = 100 × (window mean cpu + pod cpu + cpu of pods placed since the window's newest sample) / cpu capacity,
each pod's cpu *predicted* as upstream's PredictUtilisation (per container: the limit, else the request ×
multiplier rounded, else the default request; plus overhead). Score: U ≤ X → round((100 − X)·U/X + X);
X < U ≤ 100 → round(X·(100 − U)/(100 − X)); U > 100 → 0; no window data → 0 (MinNodeScore).
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
from pydantic import Field, field_validator

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import round_half_away
from policies.plugins.noderesources.common import StrictArgs
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
            total += int(round_half_away(container.requests["cpu"] * multiplier))
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

    def _predict(self, pod: PodRequest) -> float:
        return float(predict_cpu(pod, self.default_millis, self.multiplier))

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        usage = ctx.snapshot.usage
        cpu = ctx.snapshot.column["cpu"]
        has = usage.window_has[nodes, 0]
        capacity = ctx.snapshot.capacity[nodes, cpu].astype(np.float64)
        pod_cpu = self._predict(ctx.pod)
        assumed = usage.predicted_cpu(self._key, self._predict)[nodes]
        used = usage.window_mean[nodes, 0] * metric_scale("cpu") + pod_cpu + assumed
        with np.errstate(divide="ignore", invalid="ignore"):
            # Upstream leaves U at 0 when the capacity is 0 (the node then scores X).
            utilization = np.where(capacity > 0, 100.0 * used / np.where(capacity > 0, capacity, 1.0), 0.0)
        x = self.target
        below = (MAX_NODE_SCORE - x) * utilization / x + x
        above = x * (MAX_NODE_SCORE - utilization) / max(MAX_NODE_SCORE - x, 1e-300)
        raw = np.where(utilization <= x, below, np.where(utilization > MAX_NODE_SCORE, 0.0, above))
        result: IntArray = np.where(has, round_half_away(raw), 0)
        return result


def new(args: Args | None, handle: object) -> TargetLoadPacking:
    return TargetLoadPacking(args or Args())
