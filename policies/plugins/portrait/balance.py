"""ResourceBalanceOnPortrait: steer each resource's load towards a target.

For each resource r: with the pod assumed on the node, take the hour whose mean is highest, and that hour's
mean and std; X ~ N(mean, std²). The rule scores 0.5 − P(T < X < mean) above the target and
0.5 + P(mean < X < T) below it; both are Φ((T − mean)/std), which is what is computed (std = 0 takes the
limit: 1 under the target, 0 over it, ½ on it), so a node under target always beats one over it. Scores are
min-max normalised over the candidates per resource (all equal → 1) and combined as
round(100 × Σ ω_r·Norm(s_r) / Σ ω_r).

Targets of resources a node has an allocatable amount of (cpu, memory) are utilisation shares; the others
(llcmiss, crpki) are in the metric's own units. The defaults for llcmiss and crpki have no empirical
basis: set them for your hardware. Targets and weights are
plugin args, so replacing the profile (the `eyrie.config` topic) swaps them at run time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field, field_validator
from scipy.special import ndtr

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, CycleContext, IntArray
from policies.plugins.loadaware.common import PerLoad, Rows, RowTable, min_max, pick, round_half_away
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import MEASURED, NODES, PLACED, RowCursor
from policies.usage import PORTRAIT_METRICS, by_metric, metric_scale, unknown_metric
from portraits.hourly import HOURS

if TYPE_CHECKING:
    from policies.snapshot import Snapshot
    from policies.usage import NodeUsage
    from portraits.assume import PodLoad

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


def gaussian_score(mean: FloatArray, std: FloatArray, target: float | FloatArray) -> FloatArray:
    """Φ((T − mean)/std), with the limits at std = 0."""
    positive = std > 0
    if positive.all():
        plain: FloatArray = ndtr((target - mean) / std)
        return plain
    z = np.where(positive, (target - mean) / np.where(positive, std, 1.0), 0.0)
    limit = np.where(mean < target, 1.0, np.where(mean > target, 0.0, 0.5))
    result: FloatArray = np.where(positive, ndtr(z), limit)
    return result


@dataclass(slots=True)
class _Scores:
    """One resource's score before normalisation for one pod load, per row (NaN where it has none: the row
    changed since, or was never a candidate), and where it stands in the snapshot's change journal."""

    values: FloatArray
    cursor: RowCursor


@dataclass(slots=True)
class _Load:
    """What the plugin takes from one pod load: its cache keys and its hours per resource."""

    keys: list[tuple[int, bytes, bytes]]
    means: FloatArray
    """(resources, HOURS)."""
    variances: FloatArray
    """(resources × HOURS), flat."""
    constant: BoolArray
    """Per resource, whether the load is the same every hour."""


_CACHE_BYTES = 64 * 2**20
"""Memory the per-load score caches may take: at 5,000 rows, some 1,600 (resource, load) pairs."""


class ResourceBalanceOnPortrait:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [
            (r.name, PORTRAIT_METRICS.index(r.name), r.weight, r.target) for r in args.resources
        ]
        self.weight_sum = sum(r.weight for r in args.resources)
        self._metrics = np.array([metric for _, metric, _, _ in self.resources], dtype=np.int64)
        self._targets = np.array([target for _, _, _, target in self.resources])
        # A row's score depends only on its base, its allocatable and the pod's load in that metric: pods
        # of one workload (and the many without perf counter data, in those metrics) share scores, and
        # between two of them only the rows that changed (the snapshot's change journal) need recomputing,
        # and only once a pod has them as candidates. Keyed by the usage they were computed from.
        self._usage: NodeUsage | None = None
        self._cache: dict[tuple[int, bytes, bytes], _Scores] = {}
        self._loads = PerLoad(self._pod_load)
        self._scales = RowTable(self._derive_scales, NODES)
        self._scale_table = np.ones((len(self.resources), 0))
        """`_scales` as one (resources, rows) array, for gathering (resource, row) pairs at once."""

    def _pod_load(self, pod: PodLoad) -> _Load:
        """The pod load's cache keys and hours, per resource."""
        means = np.ascontiguousarray(pod.mean.T[self._metrics])
        variances = np.ascontiguousarray(pod.var.T[self._metrics])
        keys = [
            (resource, means[resource].tobytes(), variances[resource].tobytes())
            for resource in range(len(self.resources))
        ]
        constant = (means == means[:, :1]).all(axis=1) & (variances == variances[:, :1]).all(axis=1)
        return _Load(keys, means, variances.reshape(-1), constant)

    def _derive_scales(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per resource and row, what its peak and std are divided by: allocatable in the metric's units for
        utilisation targets (1 where there is none), else 1 (÷ 1 is exact)."""
        result = []
        for name, _, _, _ in self.resources:
            if name in _UTILISATION_TARGETS:
                allocatable = snapshot.allocatable[rows, snapshot.column[name]] / metric_scale(name)
                result.append(pick(allocatable > 0, allocatable, 1.0))
            else:
                result.append(np.ones(snapshot.rows)[rows])
        return tuple(result)

    def _raw(self, snapshot: Snapshot, load: _Load, pairs: list[tuple[int, IntArray]]) -> list[FloatArray]:
        """The score before normalisation of every (resource, rows) pair, in one pass over them all: at the
        few rows a placement changes, numpy's cost per call, not per element, is what counts."""
        counts = [len(rows) for _, rows in pairs]
        if len(pairs) == 1:
            rows = pairs[0][1]
            resources = np.full(len(rows), pairs[0][0], dtype=np.int64)
        else:
            rows = np.concatenate([rows for _, rows in pairs])
            resources = np.repeat(np.array([resource for resource, _ in pairs], dtype=np.int64), counts)
        flat = load.constant.take(resources)
        if flat.all():
            peak, var = self._flat_load(snapshot, load, rows, resources)
        elif not flat.any():
            peak, var = self._hourly(snapshot, load, rows, resources)
        else:
            peak, var = np.empty(len(rows)), np.empty(len(rows))
            peak[flat], var[flat] = self._flat_load(snapshot, load, rows[flat], resources[flat])
            hourly = ~flat
            peak[hourly], var[hourly] = self._hourly(snapshot, load, rows[hourly], resources[hourly])
        values = self._gaussian(snapshot, rows, resources, peak, var)
        parts, end = [], 0
        for count in counts:
            parts.append(values[end : end + count])
            end += count
        return parts

    def _hourly(
        self, snapshot: Snapshot, load: _Load, rows: IntArray, resources: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """Each (row, resource) pair's peak hour with the pod: its mean and its variance, from every hour."""
        usage = snapshot.usage
        # One flat index per (metric, row) into the metric-major base.
        flat = self._metrics.take(resources) * len(usage.cap_max) + rows
        mean = by_metric(usage.base_mean).reshape(-1, HOURS).take(flat, axis=0)
        mean += load.means.take(resources, axis=0)
        hour = mean.argmax(axis=1)
        peak = mean.reshape(-1).take(np.arange(len(rows)) * HOURS + hour)
        var = by_metric(usage.base_var).reshape(-1).take(flat * HOURS + hour)
        var += load.variances.take(resources * HOURS + hour)
        return peak, var

    def _flat_load(
        self, snapshot: Snapshot, load: _Load, rows: IntArray, resources: IntArray
    ) -> tuple[FloatArray, FloatArray]:
        """`_hourly` for pairs whose pod load is the same every hour (a cold start's request, or nothing),
        from the base's peak alone. Adding the same c to every hour keeps the first peak hour first: rounding
        is monotonic, so fl(peak + c) is the highest and no later hour can beat it, and an earlier hour can
        only tie it if fl(below_peak + c) does; those rows take `_hourly`."""
        usage = snapshot.usage
        flat = self._metrics.take(resources) * len(usage.cap_max) + rows
        level = load.means[:, 0].take(resources)
        peak = usage.peak.T.reshape(-1).take(flat)
        peak += level
        below = usage.below_peak.T.reshape(-1).take(flat)
        below += level
        var = usage.peak_var.T.reshape(-1).take(flat)
        var += load.variances.take(resources * HOURS)
        tied = np.flatnonzero(below == peak)
        if len(tied):
            peak[tied], var[tied] = self._hourly(snapshot, load, rows[tied], resources[tied])
        return peak, var

    def _gaussian(
        self, snapshot: Snapshot, rows: IntArray, resources: IntArray, peak: FloatArray, var: FloatArray
    ) -> FloatArray:
        """The score from the peak hour's mean and variance (both the pod's and the node's)."""
        np.maximum(peak, 0.0, out=peak)
        std = np.sqrt(np.maximum(var, 0.0, out=var), out=var)
        # Utilisation targets are shares of allocatable; the others are in the metric's units (÷ 1 is exact).
        scale = self._scale_table.reshape(-1).take(resources * snapshot.rows + rows)
        peak /= scale
        std /= scale
        return gaussian_score(peak, std, self._targets.take(resources))

    def _entries(
        self, snapshot: Snapshot, load: _Load, nodes: IntArray
    ) -> tuple[list[FloatArray], list[float]]:
        """Each resource's scores for the pod's load on the nodes, and their minimum. A load's scores are
        kept per row; rows that changed since are forgotten (NaN), and rows the nodes need that the load has
        no score for are computed, all resources in one pass."""
        if self._scales.refresh(snapshot):
            self._scale_table = np.array(self._scales.columns)
        entries = []
        rows = snapshot.rows
        for key in load.keys:
            entry = self._cache.pop(key, None)
            if entry is None:
                entry = _Scores(np.zeros(0), RowCursor(NODES, MEASURED, PLACED))
                if (len(self._cache) + 1) * rows * 8 > _CACHE_BYTES and self._cache:
                    del self._cache[next(iter(self._cache))]  # least recently used
            self._cache[key] = entry  # most recently used last
            changed = entry.cursor.stale(snapshot)
            if changed is None:
                entry.values = np.full(rows, np.nan)
            elif len(changed):
                # Only candidates get a score again: the others may never be one for this load.
                entry.values[changed] = np.nan
            entries.append(entry)
        scores = [entry.values[nodes] for entry in entries]
        lows = [float(values.min()) for values in scores]
        # NaN propagates through min: candidates without a score.
        missing: list[tuple[int, IntArray]] = []
        unknown: list[BoolArray] = []
        for resource, low in enumerate(lows):
            if math.isnan(low):
                unknown.append(np.isnan(scores[resource]))
                missing.append((resource, nodes[unknown[-1]]))
        if missing:
            parts = self._raw(snapshot, load, missing)
            for (resource, changed), mask, values in zip(missing, unknown, parts, strict=True):
                entries[resource].values[changed] = values
                scores[resource][mask] = values
                lows[resource] = float(scores[resource].min())
        return scores, lows

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        if usage is not self._usage:
            self._usage, self._cache = usage, {}
        load = self._loads.get(usage.cycle_pod_load(ctx.state, ctx.pod, ctx.now))
        total = np.zeros(len(nodes))
        scores, lows = self._entries(snapshot, load, nodes)
        for values, low, (_, _, weight, _) in zip(scores, lows, self.resources, strict=True):
            normalised = min_max(values, low)
            total += normalised if weight == 1.0 else weight * normalised  # × 1 is exact
        return round_half_away(MAX_NODE_SCORE * total / self.weight_sum)


def new(args: Args | None, handle: object) -> ResourceBalanceOnPortrait:
    return ResourceBalanceOnPortrait(args or Args())
