"""LoadVariationRiskBalancing (scheduler-plugins Trimaran): prefer nodes whose load is low *and* steady.

Per resource r in {cpu, memory} with window data: μ = clamp((mean + pod request)/allocatable, 0, 1),
σ = clamp(std/allocatable, 0, 1), σ' = clamp(margin·σ^(1/sensitivity), 0, 1), risk = (μ + σ')/2,
score_r = (1 − risk)·100; node score = round(min over resources with data) (upstream takes the max when only
one has data, the other scoring 0). ``variant: kep`` scores the Trimaran KEP's (and seed 001's) older form:
S = min(μ + σ', 1) with μ = (mean + request)/allocatable, U = (1 − S)·100.
"""

from __future__ import annotations

from typing import Annotated, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import metric_scale

__all__ = ["NAME", "Args", "LoadVariationRiskBalancing", "new"]

NAME = "LoadVariationRiskBalancing"
_RESOURCES = (
    ("cpu", 0, metric_scale("cpu")),
    ("memory", 1, metric_scale("memory")),
)  # name, window column, scale

FloatArray = npt.NDArray[np.float64]


class Args(StrictArgs):
    safe_variance_margin: Annotated[float, Field(ge=0.0, le=1e6, alias="safeVarianceMargin")] = 1.0
    safe_variance_sensitivity: Annotated[float, Field(ge=0.0, le=1e6, alias="safeVarianceSensitivity")] = 1.0
    variant: Literal["upstream", "kep"] = "upstream"


class LoadVariationRiskBalancing:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.margin = args.safe_variance_margin
        self.sensitivity = args.safe_variance_sensitivity
        self.variant = args.variant

    def _resource_score(
        self, ctx: CycleContext, nodes: IntArray, resource: str, window: int, scale: float
    ) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
        snapshot, usage = ctx.snapshot, ctx.snapshot.usage
        column = snapshot.column[resource]
        capacity = snapshot.allocatable[nodes, column].astype(np.float64)
        request = float(ctx.info.vector[column]) if column < len(ctx.info.vector) else 0.0
        has = usage.window_has[nodes, window]
        positive = capacity > 0
        safe = np.where(positive, capacity, 1.0)
        used = np.clip(usage.window_mean[nodes, window] * scale, 0.0, capacity)
        deviation = np.clip(usage.window_std[nodes, window] * scale, 0.0, capacity)
        mu = (used + max(request, 0.0)) / safe
        sigma = np.clip(deviation / safe, 0.0, 1.0)
        with np.errstate(divide="ignore"):
            exponent = 1.0 / self.sensitivity if self.sensitivity > 0 else np.inf
        sigma = np.clip(np.power(sigma, exponent) * self.margin, 0.0, 1.0)
        if self.variant == "kep":
            score = (1.0 - np.minimum(mu + sigma, 1.0)) * MAX_NODE_SCORE
        else:
            risk = (np.clip(mu, 0.0, 1.0) + sigma) / 2.0
            score = (1.0 - risk) * MAX_NODE_SCORE
        return np.where(positive, score, 0.0), has

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        cpu, cpu_ok = self._resource_score(ctx, nodes, *_RESOURCES[0])
        memory, memory_ok = self._resource_score(ctx, nodes, *_RESOURCES[1])
        cpu = np.where(cpu_ok, cpu, 0.0)
        memory = np.where(memory_ok, memory, 0.0)
        total = np.where(cpu_ok & memory_ok, np.minimum(cpu, memory), np.maximum(cpu, memory))
        return round_half_away(total)


def new(args: Args | None, handle: object) -> LoadVariationRiskBalancing:
    return LoadVariationRiskBalancing(args or Args())
