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
    priority would free on a set of rows is then a sum over the few priorities in use."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.levels: dict[int, _Level] = {}
        # Built on the first preemption, inside a cycle: the pods already there in one pass per priority.
        by_priority: dict[int, list[PodRecord]] = {}
        for record in snapshot.pods.values():
            by_priority.setdefault(record.info.pod.priority, []).append(record)
        for priority, records in by_priority.items():
            width = max(len(snapshot.resources), *(len(r.info.vector) for r in records))
            level = self.levels[priority] = _Level(len(snapshot.live), width)
            rows = np.fromiter((r.row for r in records), dtype=np.int64, count=len(records))
            vectors = np.zeros((len(records), width), dtype=np.int64)
            for i, record in enumerate(records):
                vectors[i, : len(record.info.vector)] = record.info.vector
            np.add.at(level.pods, rows, 1)
            np.add.at(level.requested, rows, vectors)
            level.total = len(records)
        snapshot.pod_listeners.append(self.on_pod)

    @classmethod
    def of(cls, snapshot: Snapshot) -> PriorityLedger:
        ledger = snapshot.extensions.get(cls.__name__)
        if ledger is None:
            ledger = snapshot.extensions[cls.__name__] = cls(snapshot)
        assert isinstance(ledger, PriorityLedger)
        return ledger

    def on_pod(self, record: PodRecord, sign: int) -> None:
        priority, row, vector = record.info.pod.priority, record.row, record.info.vector
        level = self.levels.get(priority)
        if level is None:
            level = self.levels[priority] = _Level(len(self.snapshot.live), len(self.snapshot.resources))
        rows, width = level.requested.shape
        if row >= rows or len(vector) > width:
            level.pods = _grown(level.pods, max(len(self.snapshot.live), row + 1))
            grown = np.zeros((len(level.pods), max(width, len(vector))), dtype=np.int64, order="F")
            grown[:rows, :width] = level.requested
            level.requested = grown
        level.pods[row] += sign
        level.requested[row, : len(vector)] += sign * vector
        level.total += sign
        if level.total == 0:
            del self.levels[priority]  # priorities come and go; an empty one holds no memory

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

    def _candidates(self, ctx: CycleContext, rejected: dict[int, str]) -> IntArray:
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
        ledger = PriorityLedger.of(snapshot)
        if not ledger.any_below(priority):
            return np.zeros(len(rows), dtype=np.bool_)
        profile = self.handle.profile
        assert profile is not None
        fit = next((p for p in profile.filter if isinstance(p, NodeResourcesFit)), None)
        if fit is not None and fit.args.requests_from != "requests":
            fit = None  # measured usage decides there, which evictions do not change at once
        columns = fit._checked_columns(ctx) if fit is not None else []
        pods, freed = ledger.below(priority, rows, columns)
        hopeful: BoolArray = pods > 0
        if fit is not None:
            hopeful &= snapshot.pod_count[rows] - pods < snapshot.max_pods[rows]
            vector = ctx.info.vector
            for i, column in enumerate(columns):
                hopeful &= snapshot.free[rows, column] + freed[:, i] >= vector[column]
        return hopeful

    def post_filter(self, ctx: CycleContext, rejected: dict[int, str]) -> PostFilterResult:
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
