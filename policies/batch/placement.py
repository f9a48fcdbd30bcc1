"""A batch of queued pods on a scheduler snapshot → a `BatchProblem`, and the optimiser's answer → rows.

- Candidates: each pod's PreFilter and Filter plugins, run as in a one-by-one cycle (all rows at once); a
  pod PreFilter rejects, or that no node passes, is not part of the batch (one-by-one placement reports it).
- Resources: the configured ones (default the paper's four) that some live node has, plus every other
  resource a pod of the batch requests (GPUs, ephemeral storage), so the batch cannot overfill it. A
  configured resource no node has is skipped (the Alibaba GPU trace has no bandwidth or disk).
- Capacity is the node's allocatable, requested its requests; S_r (used) is the node's peak-period usage
  from its portrait (the hour with the highest mean, pods placed since included) for the portrait metrics
  it has one for, else its requests.
- Seed: the profile's seed mixed with the batch's pod uids, so the same batch gives the same assignment.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from policies.batch.bes import BatchResult, optimise
from policies.batch.config import BatchConfig
from policies.batch.greedy import local_search_z
from policies.batch.model import BatchProblem, make_problem, pod_scores
from policies.framework.contract import BoolArray, CycleContext, IntArray
from policies.snapshot import PodInfo, Snapshot
from policies.usage import PORTRAIT_METRICS, metric_scale

if TYPE_CHECKING:
    from policies.framework.profile import Profile

__all__ = ["BatchPlan", "batch_seed", "candidate_mask", "plan_batch", "problem_from_snapshot"]

FloatArray = npt.NDArray[np.float64]


def batch_seed(base: int, uids: Sequence[str]) -> int:
    """A seed from the profile's seed and the batch's pods (in order)."""
    digest = zlib.crc32("\n".join(uids).encode())
    return (base * 0x9E3779B1 + digest) % 2**63


def candidate_mask(profile: Profile, ctx: CycleContext) -> BoolArray | None:
    """The rows (all `ctx.snapshot.rows`, live ones only) that pass the profile's Filter plugins for the
    pod, as in a one-by-one cycle; None when a PreFilter plugin rejects the pod."""
    if not all(pre_filter.pre_filter(ctx).ok for pre_filter in profile.pre_filter):
        return None
    snapshot = ctx.snapshot
    every_row = slice(0, snapshot.rows)
    passing: BoolArray = snapshot.live[every_row].copy()
    for node_filter in profile.filter:
        keep = node_filter.filter(ctx, every_row)
        if keep is not None:
            passing &= keep
    return passing


def _resources(
    snapshot: Snapshot, rows: IntArray, infos: Sequence[PodInfo], wanted: Sequence[str]
) -> list[str]:
    names = []
    for name in wanted:
        column = snapshot.column.get(name)
        if column is not None and (snapshot.allocatable[rows, column] > 0).any():
            names.append(name)
    for name, column in snapshot.column.items():
        if name not in names and any(len(info.vector) > column and info.vector[column] > 0 for info in infos):
            names.append(name)
    return names


def problem_from_snapshot(
    snapshot: Snapshot,
    rows: IntArray,
    infos: Sequence[PodInfo],
    candidates: BoolArray,
    config: BatchConfig,
) -> BatchProblem:
    """The batch over the snapshot's `rows` (live nodes); `candidates` is (pods, len(rows))."""
    names = _resources(snapshot, rows, infos, config.args.resources)
    columns = np.array([snapshot.column[name] for name in names], dtype=np.int64)
    capacity = snapshot.allocatable[np.ix_(rows, columns)].astype(np.float64)
    requested = np.maximum(snapshot.requested[np.ix_(rows, columns)].astype(np.float64), 0.0)
    used = requested.copy()
    if snapshot.has_usage:
        usage = snapshot.usage
        for j, name in enumerate(names):
            if name in PORTRAIT_METRICS:
                metric = PORTRAIT_METRICS.index(name)
                known = usage.portrait_has[rows, metric]
                peak = np.maximum(usage.peak[rows, metric] * metric_scale(name), 0.0)
                used[:, j] = np.where(known, peak, requested[:, j])
    requests = np.zeros((len(infos), len(names)))
    for i, info in enumerate(infos):
        for j, column in enumerate(columns.tolist()):
            if column < len(info.vector):
                requests[i, j] = info.vector[column]
    names_tuple = tuple(names)
    return make_problem(
        capacity,
        requests,
        resources=names_tuple,
        requested=requested,
        used=used,
        candidates=candidates,
        weights=config.args.class_weights(names_tuple),
        critical=config.args.critical(names_tuple),
    )


@dataclass(frozen=True, slots=True)
class BatchPlan:
    """Per pod: the snapshot row (-1: left to one-by-one placement) and its node score S_N × 100."""

    rows: IntArray
    scores: IntArray
    result: BatchResult | None
    """The optimiser's run (None for ``algorithm: orders``, which runs no optimiser)."""


def plan_batch(
    snapshot: Snapshot,
    contexts: Sequence[CycleContext],
    candidates: BoolArray,
    config: BatchConfig,
    profile: Profile | None = None,
) -> BatchPlan:
    """Run the profile's optimiser on the batch; `candidates` is (pods, snapshot.rows) from the filters.
    ``algorithm: orders`` places the batch with the `profile`'s own plugins instead
    (`policies.batch.orders`)."""
    if config.algorithm == "orders":
        from policies.batch.orders import plan_orders  # it imports this module's candidate_mask

        if profile is None:
            raise ValueError("algorithm orders needs the profile")
        ordered = plan_orders(profile, snapshot, contexts)
        return BatchPlan(ordered.rows, ordered.scores, None)
    rows = snapshot.live_rows()
    infos = [ctx.info for ctx in contexts]
    problem = problem_from_snapshot(snapshot, rows, infos, candidates[:, rows], config)
    seed = batch_seed(config.args.seed, [ctx.pod.uid for ctx in contexts])
    result = optimise(
        problem, config.algorithm, config.args.params(), seed=seed, objective=config.args.objective
    )
    assignment = result.assignment
    if config.args.local_search:
        assignment = local_search_z(problem, assignment)
    chosen = np.where(assignment >= 0, rows[np.maximum(assignment, 0)], -1)
    # Each pod's S_N at its node with the whole batch there (the batch fitness's terms), × 100.
    scores = np.zeros(len(infos), dtype=np.int64)
    placed = np.flatnonzero(assignment >= 0)
    if len(placed):
        loads = problem.used.copy()
        np.add.at(loads, assignment[placed], problem.requests[placed])
        per_pod = pod_scores(problem, assignment[placed][None, :], loads[None], placed)[0]
        scores[placed] = np.floor(per_pod * 100 + 0.5).astype(np.int64)
    return BatchPlan(chosen.astype(np.int64), scores, result)
