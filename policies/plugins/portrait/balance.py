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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator
from scipy.special import ndtr

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.loadaware.common import min_max, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.usage import PORTRAIT_METRICS, metric_scale, unknown_metric

if TYPE_CHECKING:
    from policies.usage import NodeUsage

__all__ = ["NAME", "Args", "ResourceBalanceOnPortrait", "gaussian_score", "new"]

NAME = "ResourceBalanceOnPortrait"
_UTILISATION_TARGETS = ("cpu", "memory")  # resources with an allocatable amount: targets are shares of it

FloatArray = npt.NDArray[np.float64]


class Target(StrictArgs):
    name: str
    weight: Annotated[float, Field(gt=0.0, le=100.0)] = 1.0
    target: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        problem = unknown_metric([name], PORTRAIT_METRICS, "portrait")
        if problem:
            raise ValueError(problem)
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


@dataclass(slots=True)
class _Scores:
    """One resource's per-row scores for one pod load, and the row stamps they were computed at."""

    values: FloatArray
    stamps: IntArray


_CACHE_BYTES = 64 * 2**20
"""Memory the per-load score caches may take: at 5,000 rows, some 800 (resource, load) pairs."""


class ResourceBalanceOnPortrait:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [
            (r.name, PORTRAIT_METRICS.index(r.name), r.weight, r.target) for r in args.resources
        ]
        self.weight_sum = sum(r.weight for r in args.resources)
        # A row's score depends only on its base, its allocatable and the pod's load in that metric: pods
        # of one workload (and the many without perf counter data, in those metrics) share scores, and
        # between two of them only the rows that changed need recomputing. Keyed by the usage they were
        # computed from.
        self._usage: NodeUsage | None = None
        self._cache: dict[tuple[int, bytes, bytes], _Scores] = {}

    def _raw(
        self, ctx: CycleContext, rows: IntArray, resource: int, pod_mean: FloatArray, pod_var: FloatArray
    ) -> FloatArray:
        """Per row, the score before normalisation."""
        snapshot = ctx.snapshot
        usage = snapshot.usage
        name, metric, _, target = self.resources[resource]
        mean = usage.base_mean[rows, :, metric] + pod_mean
        hour = mean.argmax(axis=1)
        picked = np.arange(len(rows))
        peak = np.maximum(mean[picked, hour], 0.0)
        std = np.sqrt(np.maximum(usage.base_var[rows, hour, metric] + pod_var[hour], 0.0))
        if name in _UTILISATION_TARGETS:
            allocatable = snapshot.allocatable[rows, snapshot.column[name]] / metric_scale(name)
            scale = np.where(allocatable > 0, allocatable, 1.0)
            peak, std = peak / scale, std / scale
        return gaussian_score(peak, std, target)

    def _scores(self, ctx: CycleContext, nodes: IntArray, resource: int, stamps: IntArray) -> FloatArray:
        usage = ctx.snapshot.usage
        pod = usage.cycle_pod_load(ctx.state, ctx.pod, ctx.now)
        metric = self.resources[resource][1]
        pod_mean = np.ascontiguousarray(pod.mean[:, metric])
        pod_var = np.ascontiguousarray(pod.var[:, metric])
        key = (resource, pod_mean.tobytes(), pod_var.tobytes())
        rows = len(stamps)
        entry = self._cache.pop(key, None)
        if entry is None or len(entry.stamps) != rows:
            entry = _Scores(np.zeros(rows), np.full(rows, -1, dtype=np.int64))
        else:
            stale = entry.stamps[nodes] != stamps[nodes]
            if not stale.any():
                self._cache[key] = entry  # most recently used last
                values: FloatArray = entry.values[nodes]
                return values
        stale_rows = nodes[entry.stamps[nodes] != stamps[nodes]]
        entry.values[stale_rows] = self._raw(ctx, stale_rows, resource, pod_mean, pod_var)
        entry.stamps[stale_rows] = stamps[stale_rows]
        if (len(self._cache) + 1) * rows * 16 > _CACHE_BYTES and self._cache:
            del self._cache[next(iter(self._cache))]  # least recently used
        self._cache[key] = entry
        result: FloatArray = entry.values[nodes]
        return result

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        if usage is not self._usage:
            self._usage, self._cache = usage, {}
        # Both versions only grow, so their sum changes whenever the row's base or allocatable does.
        stamps = snapshot.version + usage.version
        total = np.zeros(len(nodes))
        for resource, (_, _, weight, _) in enumerate(self.resources):
            total += weight * min_max(self._scores(ctx, nodes, resource, stamps))
        return round_half_away(MAX_NODE_SCORE * total / self.weight_sum)


def new(args: Args | None, handle: object) -> ResourceBalanceOnPortrait:
    return ResourceBalanceOnPortrait(args or Args())
