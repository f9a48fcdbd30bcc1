"""FGD (Fragmentation Gradient Descent, Weng et al. ATC'23): place where the node's expected GPU fragmentation
grows least.

F(node) is the free GPU milli that the target workload's pod types cannot use there, weighed by their shares
(`policies.gpu.fragmentation`); the score is int(sigmoid((F before − F after) / 1000) × 100), as the FGD
simulator's ``FGDScore``. A share pod is tried on every card with room and takes the best one (ties: the
lowest index), which placement assumes (the simulator's ``gpuSelMethod: FGDScore``); whole cards are the
lowest-indexed free ones. The target workload is the ``workload`` arg when given, else learned from the pods
this plugin scores (``policies.gpu.workload.WorkloadLearner``: decaying counts per pod type, the most popular
types covering ``popularityThreshold`` percent). Scores are kept per pod type and node and recomputed only for
the nodes changed since the type was last scored; the learned counts are checkpointed.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import Field

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.gpu.fragmentation import FragTable, RowFrag, fgd_cpu_scores, fgd_scores
from policies.gpu.workload import (
    DEFAULT_THRESHOLD,
    PodType,
    TargetWorkload,
    WorkloadLearner,
    pod_type,
)
from policies.plugins.gpushare.common import RowCards, offer_cards
from policies.plugins.noderesources.common import StrictArgs
from policies.snapshot import NODES, PODS, RowCursor, Snapshot

__all__ = ["FGD", "NAME", "Args", "WorkloadEntry", "new"]

NAME = "FGD"
_CACHED_TYPES = 64
"""Pod types whose scores over every node are kept (least recently used ones are dropped)."""
_SEEN_UIDS = 4096
"""Recent pods already counted: a pod scored again (a retry) is not counted twice."""


class WorkloadEntry(StrictArgs):
    """One pod type of a configured target workload."""

    cpu: Annotated[int, Field(ge=0)] = 0
    """Cpu of the pod type, millicores."""
    gpu_milli: Annotated[int, Field(ge=0, le=1000, alias="gpuMilli")] = 0
    """Milli of each card (0: no GPU)."""
    gpu_count: Annotated[int, Field(ge=0, le=64, alias="gpuCount")] = 0
    """Cards (0: no GPU)."""
    models: list[str] = Field(default_factory=list)
    """Card models the type accepts (empty: any)."""
    weight: Annotated[float, Field(gt=0)] = 1.0
    """Its share, relative to the other entries."""

    def pod_type(self) -> PodType:
        if self.gpu_milli == 0 or self.gpu_count == 0:
            return PodType(self.cpu, 0, 0, "")
        return PodType(self.cpu, self.gpu_milli, self.gpu_count, "|".join(self.models))


class Args(StrictArgs):
    workload: list[WorkloadEntry] = Field(default_factory=list)
    """The target workload; empty: learned from the pods scored."""
    half_life: Annotated[float, Field(ge=0, alias="halfLife")] = 20_000.0
    """Learned workload: pods after which a pod counts half (0: never decays)."""
    refresh: Annotated[int, Field(ge=1)] = 500
    """Learned workload: pods between recomputations of the typical types."""
    popularity_threshold: Annotated[float, Field(gt=0, le=100, alias="popularityThreshold")] = (
        DEFAULT_THRESHOLD
    )
    """Learned workload: percent of pods the typical types cover (the simulator's podPopularityThreshold)."""
    include_cpu_pods: Annotated[bool, Field(alias="includeCpuPods")] = True
    """Learned workload: count pods without GPUs as types too (the simulator's isInvolvedCpuPods)."""


@dataclass(slots=True)
class _Scores:
    cursor: RowCursor
    scores: IntArray
    cards: IntArray


class FGD:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.args = args
        self.learner: WorkloadLearner | None = None
        if args.workload:
            self.workload = TargetWorkload.from_entries((e.pod_type(), e.weight) for e in args.workload)
        else:
            self.learner = WorkloadLearner(
                half_life=args.half_life,
                refresh=args.refresh,
                threshold=args.popularity_threshold,
                include_cpu=args.include_cpu_pods,
            )
            self.workload = self.learner.workload
        self._table: FragTable | None = None
        self._rows: RowFrag | None = None
        self._cursor = RowCursor(PODS, NODES)
        self._scores: OrderedDict[PodType, _Scores] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()

    # ------------------------------------------------------------------------------ the workload

    def observe(self, uid: str, kind: PodType) -> None:
        """Count a pod towards the learned workload (once per pod)."""
        if self.learner is None or uid in self._seen:
            return
        self._seen[uid] = None
        if len(self._seen) > _SEEN_UIDS:
            self._seen.popitem(last=False)
        if self.learner.observe(kind):
            self._set_workload(self.learner.workload)

    def _set_workload(self, workload: TargetWorkload) -> None:
        self.workload = workload
        self._scores.clear()
        old = self._table
        if old is None:
            return
        table = FragTable.build(workload, old.vocab)
        self._table = table
        rows = self._rows
        if rows is not None and np.array_equal(table.milli, old.milli):
            # Same card columns: the rows' parts still hold, only F is weighed anew (one pass, no per-card
            # work), so a refreshed workload costs little however many nodes there are.
            rows.reweigh(table)
        else:
            self._rows = None

    def checkpoint_state(self) -> dict[str, Any]:
        return {"learner": None if self.learner is None else self.learner.state()}

    def restore_state(self, state: dict[str, Any]) -> None:
        learned = state.get("learner")
        if self.learner is not None and learned is not None:
            self.learner.restore(learned)
            self._set_workload(self.learner.workload)

    # ---------------------------------------------------------------------------- row state

    def _refresh_rows(self, snapshot: Snapshot) -> tuple[FragTable, RowFrag]:
        table = self._table
        if table is None:
            table = self._table = FragTable.build(self.workload, snapshot.gpu_model_vocab)
            self._rows = None
        else:
            table.sync_models(snapshot.gpu_model_vocab)
        stale = self._cursor.stale(snapshot)
        rows = self._rows
        if rows is None or stale is None or len(rows.cpu) != snapshot.rows:
            # Rows without cards have no fragmentation and are never scored from these columns: zeros.
            rows = self._rows = RowFrag.empty(table, snapshot.rows)
            with_cards = np.flatnonzero(snapshot.gpu_cards[: snapshot.rows] > 0)
            rows.update(with_cards, self._compute_rows(table, snapshot, with_cards))
        elif len(stale):
            changed = _with_cards(snapshot, stale)
            if len(changed):
                rows.update(changed, self._compute_rows(table, snapshot, changed))
        return table, rows

    @staticmethod
    def _compute_rows(table: FragTable, snapshot: Snapshot, rows: IntArray) -> RowFrag:
        return RowFrag.compute(
            table,
            snapshot.free[rows, snapshot.column["cpu"]],
            snapshot.gpu_free[rows],
            snapshot.gpu_cards[rows],
            snapshot.gpu_model[rows],
        )

    def fragmentation(self, snapshot: Snapshot) -> float:
        """The cluster's fragmentation for the target workload: F summed over the nodes, what FGD's scores
        descend (a batch of placements compares its candidates by it, `policies.batch.orders`)."""
        _, rows = self._refresh_rows(snapshot)
        return float(rows.frag[: snapshot.rows].sum())

    def scores_on(self, snapshot: Snapshot, kind: PodType, nodes: IntArray) -> IntArray:
        """FGD's score on `nodes` for a pod without GPUs, computed afresh: their cpu varies too much for
        scores kept per type to be met again (it is one pass over the nodes, no per-card work). Nodes
        without cards score 50 (no free GPU milli, before or after, so no change in fragmentation)."""
        table, rows = self._refresh_rows(snapshot)
        result = np.full(len(nodes), MAX_NODE_SCORE // 2, dtype=np.int64)
        with_cards = np.flatnonzero(snapshot.gpu_cards[nodes] > 0)
        if len(with_cards):
            result[with_cards] = fgd_cpu_scores(table, rows, nodes[with_cards], kind.cpu)
        return result

    def scores_for(self, snapshot: Snapshot, kind: PodType) -> tuple[IntArray, IntArray]:
        """FGD's score and card (-1: the default rule's) for a pod of `kind` on every row of `snapshot`."""
        table, rows = self._refresh_rows(snapshot)
        entry = self._scores.get(kind)
        if entry is None:
            entry = _Scores(RowCursor(PODS, NODES), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            self._scores[kind] = entry
            if len(self._scores) > _CACHED_TYPES:
                self._scores.popitem(last=False)
        else:
            self._scores.move_to_end(kind)
        stale = entry.cursor.stale(snapshot)
        if stale is None or len(entry.scores) != snapshot.rows:
            # Rows without cards fit no GPU pod: their score is never read.
            entry.scores = np.zeros(snapshot.rows, dtype=np.int64)
            entry.cards = np.full(snapshot.rows, -1, dtype=np.int64)
            changed = np.flatnonzero(snapshot.gpu_cards[: snapshot.rows] > 0)
        else:
            changed = _with_cards(snapshot, stale) if len(stale) else stale
        if len(changed):
            scores, cards = self._compute_scores(table, rows, snapshot, changed, kind)
            entry.scores[changed] = scores
            entry.cards[changed] = cards
        return entry.scores, entry.cards

    @staticmethod
    def _compute_scores(
        table: FragTable, rows: RowFrag, snapshot: Snapshot, which: IntArray, kind: PodType
    ) -> tuple[IntArray, IntArray]:
        return fgd_scores(
            table,
            rows.take(which),
            snapshot.gpu_free[which],
            snapshot.gpu_cards[which],
            kind.cpu,
            kind.milli,
            kind.count,
        )

    # ---------------------------------------------------------------------------------- score

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        pod = ctx.pod
        if pod.gpu is None and not ctx.info.requests:
            # The simulator: a pod that requests nothing scores MaxNodeScore everywhere.
            return np.full(len(nodes), MAX_NODE_SCORE, dtype=np.int64)
        kind = pod_type(pod, ctx.info.nonzero_cpu)
        self.observe(pod.uid, kind)
        if pod.gpu is None:
            return self.scores_on(ctx.snapshot, kind, nodes)
        scores, cards = self.scores_for(ctx.snapshot, kind)
        if pod.gpu is not None and pod.gpu.is_share:
            offer_cards(ctx, RowCards(cards))
        result: IntArray = scores[nodes]
        return result


def _with_cards(snapshot: Snapshot, rows: IntArray) -> IntArray:
    """The distinct rows among `rows` that have cards (the others have no fragmentation)."""
    unique = np.unique(rows)
    found: IntArray = unique[snapshot.gpu_cards[unique] > 0]
    return found


def new(args: Args | None, handle: object) -> FGD:
    return FGD(args or Args())
