"""ResourceBalanceOnPortrait (seed 000): steer each resource's load towards a target.

For each resource r: with the pod assumed on the node, take the hour whose mean is highest, and that hour's
mean and std; X ~ N(mean, std²). The seed scores 0.5 − P(T < X < mean) above the target and
0.5 + P(mean < X < T) below it; both are Φ((T − mean)/std), which is what is computed (std = 0 takes the
limit: 1 under the target, 0 over it, ½ on it), so a node under target always beats one over it. Scores are
min-max normalised over the candidates per resource (all equal → 1) and combined as
round(100 × Σ ω_r·Norm(s_r) / Σ ω_r).

Targets of resources a node has an allocatable amount of (cpu, memory) are utilisation shares; the others
(llcmiss, crpki) are in the metric's own units. The defaults for llcmiss and crpki have no empirical
basis (the seed calls them empirical and gives none): set them for your hardware. Targets and weights are
plugin args, so replacing the profile (the `eyrie.config` topic) swaps them at run time.
"""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator
from scipy.special import ndtr

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import min_max, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import PORTRAIT_METRICS

__all__ = ["NAME", "Args", "ResourceBalanceOnPortrait", "gaussian_score", "new"]

NAME = "ResourceBalanceOnPortrait"
_UNITS = {"cpu": 1000.0, "memory": 1.0}  # allocatable units per metric unit, for resources with one

FloatArray = npt.NDArray[np.float64]


class Target(StrictArgs):
    name: str
    weight: Annotated[float, Field(gt=0.0, le=100.0)] = 1.0
    target: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        if name not in PORTRAIT_METRICS:
            raise ValueError(f"no portrait metric {name!r} (known: {', '.join(PORTRAIT_METRICS)})")
        return name


def _defaults() -> list[Target]:
    return [
        Target(name="cpu", target=0.6),
        Target(name="llcmiss", target=1.0),
        Target(name="crpki", target=1.0),
    ]


class Args(StrictArgs):
    resources: list[Target] = Field(default_factory=_defaults, min_length=1)


def gaussian_score(mean: FloatArray, std: FloatArray, target: float) -> FloatArray:
    """Φ((T − mean)/std), with the limits at std = 0."""
    positive = std > 0
    z = np.where(positive, (target - mean) / np.where(positive, std, 1.0), 0.0)
    limit = np.where(mean < target, 1.0, np.where(mean > target, 0.0, 0.5))
    result: FloatArray = np.where(positive, ndtr(z), limit)
    return result


class ResourceBalanceOnPortrait:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [
            (r.name, PORTRAIT_METRICS.index(r.name), r.weight, r.target) for r in args.resources
        ]
        self.weight_sum = sum(r.weight for r in args.resources)

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        pod = usage.pod_load(ctx.pod, ctx.now)
        total = np.zeros(len(nodes))
        for name, metric, weight, target in self.resources:
            mean = usage.base_mean[nodes, :, metric] + pod.mean[:, metric]
            hour = mean.argmax(axis=1)
            picked = np.arange(len(nodes))
            peak = np.maximum(mean[picked, hour], 0.0)
            std = np.sqrt(np.maximum(usage.base_var[nodes, hour, metric] + pod.var[hour, metric], 0.0))
            units = _UNITS.get(name)
            if units is not None:
                allocatable = snapshot.allocatable[nodes, snapshot.column[name]] / units
                scale = np.where(allocatable > 0, allocatable, 1.0)
                peak, std = peak / scale, std / scale
            total += weight * min_max(gaussian_score(peak, std, target))
        return round_half_away(MAX_NODE_SCORE * total / self.weight_sum)


def new(args: Args | None, handle: object) -> ResourceBalanceOnPortrait:
    return ResourceBalanceOnPortrait(args or Args())
