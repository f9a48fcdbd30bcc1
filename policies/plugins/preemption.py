"""DefaultPreemption (PostFilter): when a pod fits nowhere, find the node where evicting the
fewest pods of lower priority makes it fit, and evict them.

For each node rejected only by filters that evictions can satisfy (`RESOLVABLE_BY_EVICTION`, or a plugin whose
``unresolvable(ctx, rows)`` says, row by row, where they cannot: kube-scheduler's
UnschedulableAndUnresolvable, such as a missing topology label or an unmet pod affinity), all lower-priority
pods are removed
(in the snapshot, temporarily); if the pod then passes the profile's whole filter chain, pods are given
back one at a time, highest priority first, and whoever does not fit back is a victim. Among candidate
nodes the winner has the fewest victims, then the lowest highest-victim priority, then the lowest sum of
victim priorities, then the first name. The snapshot is restored before returning.

A what-if costs an assume or forget per pod of the row, so rows that cannot come out of it are left out
first, for all candidates at once: rows without a pod of lower priority, and rows where even evicting
every lower-priority pod leaves too little room for NodeResourcesFit (its filter at the what-if's state,
computed from `PriorityLedger`, which keeps per priority the pods and requests of each row on every assume
and forget). Both only skip rows whose what-if would find no victims, so the choice is the same.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray, PostFilterResult
from policies.framework.profile import Handle
from policies.framework.status import Code, Status
from policies.plugins.noderesources.fit import NodeResourcesFit
from policies.snapshot import PodRecord, Snapshot

__all__ = [
    "NAME",
    "NOT_HELPFUL",
    "NO_VICTIMS",
    "RESOLVABLE_BY_EVICTION",
    "DefaultPreemption",
    "PriorityLedger",
    "new",
]

NAME = "DefaultPreemption"
NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
RESOLVABLE_BY_EVICTION = frozenset({"NodeResourcesFit", "NodePorts", "LimitSum", "RoleSpread"})
_PENDING = 4096
"""Queued assumes and forgets the ledger applies at the latest (it applies them when read, too)."""


class _Level:
    """The pods of one priority: how many per row, and their requests per row and resource column."""

    __slots__ = ("pods", "requested", "total")

    def __init__(self, rows: int, width: int) -> None:
        self.pods: IntArray = np.zeros(rows, dtype=np.int64)
        self.requested: IntArray = np.zeros((rows, width), dtype=np.int64, order="F")
        self.total = 0


class PriorityLedger:
    """Per priority of the snapshot's pods, their count and summed requests per row, kept on every assume
    and forget (the snapshot's pod listeners); one per snapshot (`of`). What evicting every pod below a
    priority would free on a set of rows is then a sum over the few priorities in use.

    Assumes and forgets are queued and applied in one batch when the ledger is read: placements far
    outnumber preemptions, and a few numpy calls per batch cost less than a few per placement."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self._levels: dict[int, _Level] = {}
        # Built on the first preemption, inside a cycle: the pods already there, as one batch.
        self._records: list[PodRecord] = list(snapshot.pods.values())
        self._signs: list[int] = [1] * len(self._records)
        self._apply()
        snapshot.pod_listeners.append(self.on_pod)

    @classmethod
    def of(cls, snapshot: Snapshot) -> PriorityLedger:
        ledger = snapshot.extensions.get(cls.__name__)
        if ledger is None:
            ledger = snapshot.extensions[cls.__name__] = cls(snapshot)
        assert isinstance(ledger, PriorityLedger)
        return ledger

    @property
    def levels(self) -> dict[int, _Level]:
        """The priorities some pod has, each with its per-row counts and requests."""
        if self._records:
            self._apply()
        return self._levels

    def on_pod(self, record: PodRecord, sign: int) -> None:
        self._records.append(record)
        self._signs.append(sign)
        if len(self._records) >= _PENDING:
            self._apply()

    def _apply(self) -> None:
        """Apply the queued assumes (+1) and forgets (−1): gathered into arrays once, then summed per
        priority (the first batch is every pod of the snapshot)."""
        records, self._records = self._records, []
        signs = np.array(self._signs, dtype=np.int64)
        self._signs = []
        if not records:
            return
        count = len(records)
        priorities = np.fromiter((r.info.pod.priority for r in records), dtype=np.int64, count=count)
        rows = np.fromiter((r.row for r in records), dtype=np.int64, count=count)
        vectors_of = [r.info.vector for r in records]
        width = max(map(len, vectors_of))
        if all(len(vector) == width for vector in vectors_of):
            vectors = np.concatenate(vectors_of).reshape(count, width)
        else:  # pods from before a resource column appeared have shorter vectors
            vectors = np.zeros((count, width), dtype=np.int64)
            for i, vector in enumerate(vectors_of):
                vectors[i, : len(vector)] = vector
        vectors *= signs[:, np.newaxis]
        live = len(self.snapshot.live)
        distinct = np.unique(priorities)
        for priority in distinct.tolist():
            if len(distinct) == 1:
                at, by, amounts = rows, signs, vectors
            else:
                chosen = priorities == priority
                at, by, amounts = rows[chosen], signs[chosen], vectors[chosen]
            level = self._levels.get(priority)
            if level is None:
                level = self._levels[priority] = _Level(live, len(self.snapshot.resources))
            have_rows, have_width = level.requested.shape
            highest_row = int(at.max())
            if highest_row >= have_rows or width > have_width:
                level.pods = _grown(level.pods, max(live, highest_row + 1))
                grown = np.zeros((len(level.pods), max(have_width, width)), dtype=np.int64, order="F")
                grown[:have_rows, :have_width] = level.requested
                level.requested = grown
            np.add.at(level.pods, at, by)
            np.add.at(level.requested[:, :width], at, amounts)
            level.total += int(by.sum())
            if level.total == 0:
                del self._levels[priority]  # priorities come and go; an empty one holds no memory

    def below(self, priority: int, rows: IntArray, columns: list[int]) -> tuple[IntArray, IntArray]:
        """For `rows`: the pods of lower priority than `priority` on each, and their summed requests of
        each of `columns` (rows × columns)."""
        pods = np.zeros(len(rows), dtype=np.int64)
        requested = np.zeros((len(rows), len(columns)), dtype=np.int64)
        for level_priority, level in self.levels.items():
            if level_priority >= priority:
                continue
            present = rows < len(level.pods)
            inside = rows if present.all() else rows[present]
            pods[present] += level.pods[inside]
            width = level.requested.shape[1]
            for i, column in enumerate(columns):
                if column < width:
                    requested[present, i] += level.requested[inside, column]
        return pods, requested

    def any_below(self, priority: int) -> bool:
        return any(level_priority < priority for level_priority in self.levels)


def _grown(array: IntArray, rows: int) -> IntArray:
    grown = np.zeros(rows, dtype=np.int64)
    grown[: len(array)] = array
    return grown


class DefaultPreemption:
    name = NAME

    def __init__(self, handle: Handle) -> None:
        self.handle = handle

    def _fits(self, ctx: CycleContext, row: int) -> bool:
        profile = self.handle.profile
        assert profile is not None
        nodes = np.array([row], dtype=np.int64)
        for plugin in profile.filter:
            keep = plugin.filter(ctx, nodes)
            if keep is not None and not keep[0]:
                return False
        return True

    def _victims(self, ctx: CycleContext, row: int) -> list[PodRecord] | None:
        snapshot = ctx.snapshot
        lower = [
            snapshot.pods[uid]
            for uid in sorted(snapshot.pods_on_row[row])
            if snapshot.pods[uid].info.pod.priority < ctx.pod.priority
        ]
        if not lower:
            return None
        version = int(snapshot.version[row])
        for record in lower:
            snapshot.forget(record.info.pod.uid)
        try:
            if not self._fits(ctx, row):
                return None
            victims = []
            for record in sorted(lower, key=lambda r: (-r.info.pod.priority, r.info.pod.uid)):
                snapshot.assume(
                    record.info,
                    row,
                    bound=record.bound,
                    at=record.at,
                    attempt=record.attempt,
                    gpu_cards=record.gpu_cards or None,  # the same cards, not a fresh choice
                )
                if not self._fits(ctx, row):
                    snapshot.forget(record.info.pod.uid)
                    victims.append(record)
            return victims
        finally:
            for record in lower:
                if record.info.pod.uid not in snapshot.pods:
                    snapshot.assume(
                        record.info,
                        row,
                        bound=record.bound,
                        at=record.at,
                        attempt=record.attempt,
                        gpu_cards=record.gpu_cards or None,
                    )
            snapshot.version[row] = version  # a what-if is not a change of the node

    def _candidates(self, ctx: CycleContext, rejected: Mapping[int, str]) -> IntArray:
        """The rejected rows that evicting pods could open, grouped by the plugin that rejected them."""
        profile = self.handle.profile
        assert profile is not None
        by_name = {plugin.name: plugin for plugin in profile.filter}
        # The scheduler hands each plugin's rows over as arrays too; any other caller, a plain dict.
        groups: list[tuple[str, IntArray]] | None = getattr(rejected, "groups", None)
        if groups is None:
            grouped: dict[str, list[int]] = {}
            for row, name in rejected.items():
                grouped.setdefault(name, []).append(row)
            groups = [(name, np.array(rows, dtype=np.int64)) for name, rows in grouped.items()]
        openable: list[IntArray] = []
        for name, rows in groups:
            if name in RESOLVABLE_BY_EVICTION:
                openable.append(rows)
                continue
            unresolvable = getattr(by_name.get(name), "unresolvable", None)
            if unresolvable is not None:
                openable.append(rows[~unresolvable(ctx, rows)])
        if not openable:
            return np.zeros(0, dtype=np.int64)
        candidates: IntArray = np.concatenate(openable)
        return candidates

    def _hopeful(self, ctx: CycleContext, rows: IntArray) -> BoolArray:
        """Of the candidate `rows`, those where a what-if may find victims: rows with pods of lower
        priority where, with all of them evicted, NodeResourcesFit (when the profile filters with it, on
        requests) would pass."""
        snapshot, priority = ctx.snapshot, ctx.pod.priority
        profile = self.handle.profile
        assert profile is not None
        fit = next((p for p in profile.filter if isinstance(p, NodeResourcesFit)), None)
        if fit is not None and fit.args.requests_from != "requests":
            fit = None  # measured usage decides there, which evictions do not change at once
        columns = fit._checked_columns(ctx) if fit is not None else []
        vector = ctx.info.vector
        if fit is not None:
            # Evictions free at most what the row's pods request: rows too small for the pod even with
            # every pod gone are out before the ledger (built from every pod, the first time) is needed.
            room: BoolArray = (snapshot.pod_count[rows] > 0) & (snapshot.max_pods[rows] > 0)
            for column in columns:
                room &= snapshot.allocatable[rows, column] >= vector[column]
            if not room.any():
                return room
        ledger = PriorityLedger.of(snapshot)
        if not ledger.any_below(priority):
            return np.zeros(len(rows), dtype=np.bool_)
        pods, freed = ledger.below(priority, rows, columns)
        hopeful: BoolArray = pods > 0
        if fit is not None:
            hopeful &= snapshot.pod_count[rows] - pods < snapshot.max_pods[rows]
            for i, column in enumerate(columns):
                hopeful &= snapshot.free[rows, column] + freed[:, i] >= vector[column]
        return hopeful

    def post_filter(self, ctx: CycleContext, rejected: Mapping[int, str]) -> PostFilterResult:
        best: tuple[tuple[int, int, int, str], int, list[PodRecord]] | None = None
        candidates = self._candidates(ctx, rejected)
        for row in candidates[self._hopeful(ctx, candidates)].tolist():
            victims = self._victims(ctx, row)
            if not victims:
                continue
            priorities = [v.info.pod.priority for v in victims]
            key = (len(victims), max(priorities), sum(priorities), ctx.snapshot.names[row] or "")
            if best is None or key < best[0]:
                best = (key, row, victims)
        if best is None:
            # Upstream's words: every node is either one no eviction helps or one without victims.
            counts = {NO_VICTIMS: len(candidates), NOT_HELPFUL: len(rejected) - len(candidates)}
            detail = ", ".join(sorted(f"{count} {reason}" for reason, count in counts.items() if count))
            message = f"preemption: 0/{len(rejected)} nodes are available: {detail}."
            return PostFilterResult(Status.unschedulable(message, plugin=NAME))
        _, row, victims = best
        return PostFilterResult(
            Status(Code.UNSCHEDULABLE, ("preempting",), NAME), row, [v.info.pod.uid for v in victims]
        )


def new(args: None, handle: Handle) -> DefaultPreemption:
    return DefaultPreemption(handle)
