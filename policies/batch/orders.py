"""``algorithm: orders``: a batch placed one pod at a time by the profile's own plugins, in the best of a few
queue orders.

A one-by-one profile places each pod as it comes, in arrival order. Given a window of queued pods, the same
plugins can place them in another order, and which order is best depends on the cluster: bin packing places
large items first (first-fit-decreasing), but a fragmentation-aware scorer such as FGD already keeps room
for what usually comes. So the batch is tried in each candidate order, each pod by the profile's PreFilter,
Filter, PreScore, Score and Select exactly as in a cycle and assumed in the snapshot (on the cards a scorer
chose), and undone; the order kept is the one that places the most GPU milli, then the most pods, then
leaves the cluster least fragmented (the sum of a fragmentation scorer's F over the nodes, FGD's own
objective), then the earliest candidate. The first candidate is the batch's own order (the queue sort's), so
a batch where no order does better is placed as the one-by-one profile would have placed it.

Candidate orders: the queue's order; whole-card pods first (more cards first), the rest in queue order; and
every GPU pod by decreasing size (`policies.plugins.queuesort.gpudemand.demand_key`: whole cards by count,
then shares by milli). Orders equal to an earlier one are not tried again.

What the plan returns is each pod's row (-1: it fitted nowhere in that order, so the scheduler's one-by-one
cycle after the batch reports it) and its total score; the chosen cards go in each pod's cycle state
(`CARDS_STATE`), so Reserve assumes the pod on exactly the cards it had in the trial. Reserve and Permit
plugins run only then, not in the trials: a profile whose placement depends on them is not for this
algorithm. The trials cost one cycle per pod and candidate, plus the fragmentation sum per candidate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

import numpy as np

from policies.batch.placement import candidate_mask
from policies.framework.contract import CycleContext, IntArray, skipped
from policies.framework.select import select
from policies.gpu import CARDS_STATE
from policies.gpu.cards import planned_cards
from policies.plugins.queuesort.gpudemand import demand_key
from policies.snapshot import Snapshot
from schemas.pod import PodRequest

if TYPE_CHECKING:
    from policies.framework.profile import Profile

__all__ = ["ORDERS", "FragmentationScorer", "OrdersPlan", "candidate_orders", "plan_orders"]

ORDERS: Final = "orders"
"""The ``algorithm`` name in a profile's batch settings."""


@runtime_checkable
class FragmentationScorer(Protocol):
    """A scorer that can say how fragmented the cluster is for its target workload (FGD)."""

    def fragmentation(self, snapshot: Snapshot) -> float: ...


def _queue_order(pods: Sequence[PodRequest]) -> list[int]:
    return list(range(len(pods)))


def _whole_first(pods: Sequence[PodRequest]) -> list[int]:
    def key(i: int) -> tuple[int, int]:
        gpu = pods[i].gpu
        return (0 if gpu is None or gpu.is_share else -gpu.count, i)

    return sorted(range(len(pods)), key=key)


def _decreasing(pods: Sequence[PodRequest]) -> list[int]:
    return sorted(range(len(pods)), key=lambda i: (*demand_key(pods[i]), i))


_CANDIDATES: Final[tuple[Callable[[Sequence[PodRequest]], list[int]], ...]] = (
    _queue_order,
    _whole_first,
    _decreasing,
)


def candidate_orders(pods: Sequence[PodRequest]) -> list[list[int]]:
    """The orders tried, as positions in `pods` (the batch in queue order), without repeats."""
    orders: list[list[int]] = []
    for make in _CANDIDATES:
        order = make(pods)
        if order not in orders:
            orders.append(order)
    return orders


@dataclass(frozen=True, slots=True)
class OrdersPlan:
    """Per pod (in the batch's order): its row (-1: none) and total score; the order chosen (positions)."""

    rows: IntArray
    scores: IntArray
    order: list[int]
    tried: int


@dataclass(slots=True)
class _Trial:
    rows: list[int]
    scores: list[int]
    cards: list[tuple[int, ...] | None]
    objective: tuple[float, ...]


def _select(profile: Profile, ctx: CycleContext) -> tuple[int, int] | None:
    """A cycle's Filter, PreScore, Score and Select for `ctx.pod`: (row, total score), or None when no node
    passes (or a PreFilter rejects the pod)."""
    passing = candidate_mask(profile, ctx)
    if passing is None:
        return None
    nodes = np.flatnonzero(passing)
    if len(nodes) == 0:
        return None
    for pre_score in profile.pre_score:
        pre_score.pre_score(ctx, nodes)
    total = np.zeros(len(nodes), dtype=np.int64)
    for scorer, weight in profile.score:
        scores = scorer.score(ctx, nodes)
        if not skipped(scores):
            total += np.multiply(scores, weight, dtype=np.int64)
    position = select(ctx.snapshot, nodes, total, ctx.pod.uid, profile.tie_break)
    return int(nodes[position]), total.item(position)


def _trial(
    profile: Profile,
    snapshot: Snapshot,
    contexts: Sequence[CycleContext],
    order: Sequence[int],
    fragmentation: FragmentationScorer | None,
) -> _Trial:
    """The batch placed in `order` on the snapshot, then undone; the snapshot is left as it was."""
    size = len(contexts)
    trial = _Trial([-1] * size, [0] * size, [None] * size, ())
    assumed: list[str] = []
    placed_milli = 0
    try:
        for i in order:
            given = contexts[i]
            ctx = CycleContext(given.pod, given.info, snapshot, given.now)
            chosen = _select(profile, ctx)
            if chosen is None:
                continue
            row, score = chosen
            cards = planned_cards(ctx.state, row, snapshot.gpu_free[row], given.pod.gpu)
            snapshot.assume(given.info, row, at=given.now, gpu_cards=cards)
            assumed.append(given.pod.uid)
            record = snapshot.pods.get(given.pod.uid)
            held = tuple(getattr(record, "gpu_cards", ())) if record is not None else ()
            trial.rows[i], trial.scores[i], trial.cards[i] = row, score, held or cards
            gpu = given.pod.gpu
            placed_milli += 0 if gpu is None else gpu.total_milli
        frag = fragmentation.fragmentation(snapshot) if fragmentation is not None else 0.0
        placed = sum(row >= 0 for row in trial.rows)
        trial.objective = (-float(placed_milli), -float(placed), frag)
    finally:
        for uid in reversed(assumed):
            snapshot.forget(uid)
    return trial


def plan_orders(profile: Profile, snapshot: Snapshot, contexts: Sequence[CycleContext]) -> OrdersPlan:
    """The batch (`contexts`, in queue order) in its best candidate order (see the module docstring); each
    placed pod's cards are left in its context's state for Reserve."""
    fragmentation: FragmentationScorer | None = next(
        (scorer for scorer, _ in profile.score if isinstance(scorer, FragmentationScorer)), None
    )
    orders = candidate_orders([ctx.pod for ctx in contexts])
    best: tuple[_Trial, list[int]] | None = None
    for order in orders:
        trial = _trial(profile, snapshot, contexts, order, fragmentation)
        if best is None or trial.objective < best[0].objective:
            best = (trial, order)
    assert best is not None
    trial, order = best
    for ctx, row, cards in zip(contexts, trial.rows, trial.cards, strict=True):
        if row >= 0 and cards is not None:
            chosen: dict[int, Any] = {row: cards}
            ctx.state[CARDS_STATE] = chosen
    return OrdersPlan(
        np.array(trial.rows, dtype=np.int64), np.array(trial.scores, dtype=np.int64), order, len(orders)
    )
