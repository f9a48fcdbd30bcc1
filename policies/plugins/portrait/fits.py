"""PodFitsResourceOnPortrait: NodeResourcesFit's filter for oversold nodes.

Hard limits (requests): cpu requested with the pod ≤ allocatable cpu × OverSellRate (the node's
`oversell_rate`, else this plugin's arg), memory requested ≤ allocatable memory; pod count and every other
requested resource as NodeResourcesFit checks them (an oversold GPU is not a thing). Soft limit (portrait):
with the pod assumed on the node, every hour's cap = μ + z·σ stays within allocatable, for cpu and memory.

Most nodes are cleared without touching their 24 hours: max_h cap_N(h) + max_h cap_P(h) bounds the
combined cap from above (√(a + b) ≤ √a + √b), so only nodes near the limit get the exact hourly check. The
verdicts are kept per pod load: pods of one workload share theirs, and only rows that changed since are
judged again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes
from policies.plugins.loadaware.common import PerLoad, Rows, RowTable, passing, pick, rejections
from policies.plugins.noderesources.common import StrictArgs
from policies.plugins.noderesources.fit import REASON_TOO_MANY_PODS, insufficient
from policies.snapshot import MEASURED, NODES, PLACED, RowCursor, Snapshot
from policies.usage import PORTRAIT_METRICS, by_metric, metric_scale

if TYPE_CHECKING:
    from policies.usage import NodeUsage
    from portraits.assume import PodLoad

__all__ = ["NAME", "REASON_OVERSOLD", "Args", "PodFitsResourceOnPortrait", "new", "portrait_over"]

NAME = "PodFitsResourceOnPortrait"
REASON_OVERSOLD = "Insufficient cpu (oversell limit)"
_CHECKED = ("cpu", "memory")

FloatArray = npt.NDArray[np.float64]


def portrait_over(resource: str) -> str:
    return f"node(s) {resource} portrait cap would exceed allocatable"


class Args(StrictArgs):
    oversell_rate: Annotated[float, Field(gt=0.0, le=100.0, alias="overSellRate")] = 1.5


@dataclass(slots=True)
class _PodSide:
    """What the check takes from one pod load, per checked resource."""

    cap: FloatArray
    """The load's highest cap over the hours."""
    means: FloatArray
    """(resources, HOURS)."""
    variances: FloatArray
    """(resources, HOURS)."""
    keys: list[tuple[int, bytes, bytes]]
    """Per resource, the verdict cache's key."""


@dataclass(slots=True)
class _Verdicts:
    """Per row, whether one pod load would take a checked resource's cap over allocatable, and where the
    verdicts stand in the snapshot's change journal."""

    over: BoolArray
    cursor: RowCursor


_CACHE_BYTES = 16 * 2**20
"""Memory the per-load verdicts may take: at 5,000 rows, some 3,000 (resource, load) pairs."""


class PodFitsResourceOnPortrait:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.oversell_rate = args.oversell_rate
        self._limits = RowTable(self._derive, NODES)
        self._pods = PerLoad(self._pod_side)
        self._z = 0.0
        self._usage: NodeUsage | None = None
        self._cache: dict[tuple[int, bytes, bytes], _Verdicts] = {}

    def _derive(self, snapshot: Snapshot, rows: Rows) -> tuple[Any, ...]:
        """Per row, what changes with the node, not with the pod: allocatable cpu × the oversell rate
        (millicores), and per checked resource allocatable in the portrait's units (cpu in cores)."""
        own = snapshot.oversell[rows]
        oversold = snapshot.allocatable[rows, snapshot.column["cpu"]] * pick(
            np.isnan(own), self.oversell_rate, own
        )
        allocatable = [snapshot.allocatable[rows, snapshot.column[r]] / metric_scale(r) for r in _CHECKED]
        return oversold, *allocatable

    def _pod_side(self, pod: PodLoad) -> _PodSide:
        """The pod load's side of the check, per checked resource."""
        metrics = [PORTRAIT_METRICS.index(resource) for resource in _CHECKED]
        means = np.ascontiguousarray(pod.mean[:, metrics].T)
        variances = np.ascontiguousarray(pod.var[:, metrics].T)
        keys = [(i, means[i].tobytes(), variances[i].tobytes()) for i in range(len(_CHECKED))]
        return _PodSide((pod.mean + self._z * np.sqrt(pod.var)).max(axis=0)[metrics], means, variances, keys)

    def _hard(self, ctx: CycleContext, nodes: Nodes) -> list[tuple[str, BoolArray]]:
        snapshot, info = ctx.snapshot, ctx.info
        checks: list[tuple[str, BoolArray]] = [
            (REASON_TOO_MANY_PODS, snapshot.pod_count[nodes] >= snapshot.max_pods[nodes])
        ]
        cpu = snapshot.column["cpu"]
        for column in info.requested_columns.tolist():
            if column == cpu:
                over = snapshot.requested[nodes, cpu] + info.vector[cpu] > self._limits.columns[0][nodes]
                checks.append((REASON_OVERSOLD, over))
            else:
                short = snapshot.free[nodes, column] < info.vector[column]
                checks.append((insufficient(snapshot.resources[column]), short))
        return checks

    def _verdict(self, usage: NodeUsage, side: _PodSide, i: int, rows: Nodes) -> BoolArray:
        """Per row, whether the checked resource `i`'s cap with the pod would exceed allocatable in some hour.
        The bound clears most rows; only those near the limit get the hourly check."""
        metric = PORTRAIT_METRICS.index(_CHECKED[i])
        # Over a slice these are views: only the rows near the limit are gathered.
        allocatable = self._limits.columns[1 + i][rows]
        over = np.zeros(len(allocatable), dtype=np.bool_)
        unsure = np.flatnonzero(usage.cap_max[rows, metric] + side.cap[i] > allocatable)
        if len(unsure):
            if isinstance(rows, slice):
                start, _, step = rows.indices(len(usage.cap_max))
                near = start + step * unsure
            else:
                near = rows[unsure]
            mean = by_metric(usage.base_mean)[metric].take(near, axis=0)
            mean += side.means[i]
            cap = by_metric(usage.base_var)[metric].take(near, axis=0)
            cap += side.variances[i]
            np.maximum(cap, 0.0, out=cap)
            np.sqrt(cap, out=cap)
            cap *= usage.z
            cap += mean
            over[unsure] = (cap > allocatable[unsure, None]).any(axis=1)
        return over

    def _soft(self, ctx: CycleContext, nodes: Nodes) -> list[tuple[str, BoolArray]]:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        if usage is not self._usage:
            self._usage, self._cache = usage, {}
            self._pods, self._z = PerLoad(self._pod_side), usage.z
        side = self._pods.get(usage.cycle_pod_load(ctx.state, ctx.pod, ctx.now))
        every_row = isinstance(nodes, slice) and nodes.indices(snapshot.rows) == (0, snapshot.rows, 1)
        checks = []
        for i, resource in enumerate(_CHECKED):
            if every_row:
                over = self._cached_verdict(snapshot, side, i)
            else:
                over = self._verdict(usage, side, i, nodes)
            checks.append((portrait_over(resource), over))
        return checks

    def _cached_verdict(self, snapshot: Snapshot, side: _PodSide, i: int) -> BoolArray:
        """`_verdict` on every row, kept per pod load: pods of one workload share a load, and between two of
        them only the rows that changed need a verdict again (read-only: the caller must not write to it)."""
        key = side.keys[i]
        entry = self._cache.pop(key, None)
        rows = snapshot.rows
        if entry is None:
            entry = _Verdicts(np.zeros(0, dtype=np.bool_), RowCursor(NODES, MEASURED, PLACED))
            if (len(self._cache) + 1) * rows > _CACHE_BYTES and self._cache:
                del self._cache[next(iter(self._cache))]  # least recently used
        self._cache[key] = entry  # most recently used last
        changed = entry.cursor.stale(snapshot)
        if changed is None:
            entry.over = self._verdict(snapshot.usage, side, i, slice(0, rows))
        elif len(changed):
            entry.over[changed] = self._verdict(snapshot.usage, side, i, changed)
        return entry.over

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        self._limits.refresh(ctx.snapshot)
        return passing([*self._hard(ctx, nodes), *self._soft(ctx, nodes)])

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        self._limits.refresh(ctx.snapshot)
        return rejections([*self._hard(ctx, nodes), *self._soft(ctx, nodes)], len(nodes))


def new(args: Args | None, handle: object) -> PodFitsResourceOnPortrait:
    return PodFitsResourceOnPortrait(args or Args())
