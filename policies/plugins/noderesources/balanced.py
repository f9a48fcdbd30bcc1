"""NodeResourcesBalancedAllocation: favour nodes whose resource fractions stay close to each other.

Which release's rules apply is the profile's ``kubernetesVersion``:

- 1.36 on: the score is the *change* in balance the pod causes, ``50 + (50 + with − without) / 2`` in Go's
  integer arithmetic, where ``with`` and ``without`` are the balance scores (``(1 − std) × 100``, truncated)
  of the node with and without the pod. No change scores 75; a pod that evens the node out scores towards
  100, one that skews it towards 50.
- before 1.36: the balance with the pod, ``(1 − std) × 100``.
- 1.34 on: a pod that requests none of the plugin's resources is skipped (PreScore's Skip): the plugin adds
  nothing to any node's total, where before every node scored its balance.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray, no_scores
from policies.framework.profile import kubernetes_version_of
from policies.plugins.noderesources.common import (
    CPU_MEMORY,
    ResourceSpec,
    StrictArgs,
    cpu_memory_of,
    requested_and_allocatable,
)
from policies.snapshot import NODES, PODS, RowCursor, Snapshot

__all__ = ["NAME", "Args", "BalancedAllocation", "balance_scores", "change_score", "new"]

NAME = "NodeResourcesBalancedAllocation"
FloatArray = npt.NDArray[np.float64]
_CHANGE_SINCE = (1, 36)
"""The first release that scores the change in balance rather than the balance with the pod."""
_SKIP_SINCE = (1, 34)
"""The first release whose PreScore skips pods that request none of the plugin's resources."""
_HALF = MAX_NODE_SCORE // 2
_FEW_ROWS = 8
"""Changed rows up to which the balance without the pod is refreshed row by row in plain floats."""


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu"), ResourceSpec(name="memory")]


class Args(StrictArgs):
    resources: list[ResourceSpec] = Field(default_factory=_default_resources, min_length=1)
    """Weights are accepted for compatibility and ignored, as upstream ignores them."""


def change_score(with_pod: IntArray, without_pod: IntArray) -> IntArray:
    """v1.36's balancedResourceScorer from the two balance scores. Both lie in 50..100, so ``50 + with −
    without`` is never negative and Go's truncating division is a floor."""
    changed: IntArray = _HALF + (_HALF + with_pod - without_pod) // 2
    return changed


def _two_fractions(requested: FloatArray, allocatable: FloatArray) -> IntArray:
    """balancedResourceScore for two resources present on every node, over a (2 × nodes) block, in Go's
    float order: min(r / a, 1), |f0 − f1| / 2, (1 − std) × 100, truncated."""
    both = requested / allocatable
    np.minimum(both, 1.0, out=both)
    spread = np.subtract(both[0], both[1], out=both[0])
    spread /= 2
    np.abs(spread, out=spread)
    np.subtract(1, spread, out=spread)
    spread *= MAX_NODE_SCORE
    scores: IntArray = np.trunc(spread, out=spread).astype(np.int64)
    return scores


def balance_scores(
    amounts: list[IntArray | FloatArray], allocatables: list[IntArray | FloatArray]
) -> IntArray:
    """balancedResourceScore per node: the resources with allocatable > 0 give fractions min(r / a, 1);
    two of them score |f1 − f2| / 2 as the std, more the population standard deviation, fewer a std of 0.
    Float arithmetic in upstream's order, so results match Go bit for bit."""
    count = len(amounts[0]) if amounts else 0
    fractions: list[FloatArray] = []
    present: list[npt.NDArray[np.bool_]] = []
    for amount, allocatable in zip(amounts, allocatables, strict=True):
        has = allocatable > 0
        fractions.append(np.minimum(amount / np.where(has, allocatable, 1), 1.0))
        present.append(has)
    n = np.zeros(count, dtype=np.int64)
    total = np.zeros(count)
    first = np.full(count, np.nan)
    second = np.full(count, np.nan)
    for fraction, has in zip(fractions, present, strict=True):
        n += has
        total = total + np.where(has, fraction, 0.0)
        second = np.where(has & ~np.isnan(first) & np.isnan(second), fraction, second)
        first = np.where(has & np.isnan(first), fraction, first)
    mean = total / np.maximum(n, 1)
    squares = np.zeros(count)
    for fraction, has in zip(fractions, present, strict=True):
        squares = squares + np.where(has, (fraction - mean) * (fraction - mean), 0.0)
    std = np.where(
        n == 2,
        np.abs((first - second) / 2),
        np.where(n > 2, np.sqrt(squares / np.maximum(n, 1)), 0.0),
    )
    result: IntArray = np.trunc((1 - std) * MAX_NODE_SCORE).astype(np.int64)
    return result


class BalancedAllocation:
    name = NAME

    def __init__(self, args: Args, version: tuple[int, int]) -> None:
        self.resources = [r.name for r in args.resources]
        self.cpu_memory = sorted(self.resources) == sorted(CPU_MEMORY)
        self.change = version >= _CHANGE_SINCE
        self.skip_unrequested = version >= _SKIP_SINCE
        # The balance of each row without the pod depends on the row alone: kept per row and recomputed
        # only for rows whose pods or node changed, so scoring the change costs one gather per cycle.
        self._cursor = RowCursor(NODES, PODS)
        self._without = np.zeros(0, dtype=np.int64)

    def _requests_nothing(self, ctx: CycleContext) -> bool:
        column, vector = ctx.snapshot.column, ctx.info.vector
        return not any(
            (c := column.get(resource)) is not None and c < len(vector) and vector[c] != 0
            for resource in self.resources
        )

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        if self.skip_unrequested and self._requests_nothing(ctx):
            # PreScore's Skip: the plugin's score takes no part in any node's total.
            return no_scores(len(nodes))
        if self.cpu_memory and (block := cpu_memory_of(ctx, nodes)) is not None:
            # The default arguments on nodes that all have both: both resources in one pass over a
            # (2 × nodes) block, the same float operations in the same order as the general path.
            snapshot, vector = ctx.snapshot, ctx.info.vector
            pod = [
                [float(vector[c]) if c < len(vector) else 0.0]
                for c in (snapshot.column[r] for r in CPU_MEMORY)
            ]
            with_pod = _two_fractions(block[4:6] + np.array(pod), block[:2])
            if not self.change:
                return with_pod
            return change_score(with_pod, self._cached_without(snapshot).take(nodes))
        pairs = [
            pair
            for resource in self.resources
            if (pair := requested_and_allocatable(ctx, nodes, resource, use_requested=True)) is not None
        ]
        with_pod = balance_scores([q for q, _ in pairs], [a for _, a in pairs])
        if not self.change:
            return with_pod
        pod_amounts = self._pod_amounts(ctx)
        without = balance_scores(
            [q - pod_amounts[i] for i, (q, _) in enumerate(pairs)], [a for _, a in pairs]
        )
        return change_score(with_pod, without)

    def _pod_amounts(self, ctx: CycleContext) -> list[int]:
        """The pod's request of each resource `requested_and_allocatable` gave a pair for, in order."""
        snapshot, vector = ctx.snapshot, ctx.info.vector
        amounts = []
        for resource in self.resources:
            column = snapshot.column.get(resource)
            amount = int(vector[column]) if column is not None and column < len(vector) else 0
            if column is None or (amount == 0 and resource not in ("cpu", "memory", "ephemeral-storage")):
                continue
            amounts.append(amount)
        return amounts

    def _cached_without(self, snapshot: Snapshot) -> IntArray:
        """The cpu/memory balance score of every row as it stands (without the pod being scheduled)."""
        stale = self._cursor.stale(snapshot)
        if stale is None or len(self._without) < snapshot.rows:
            rows = np.arange(snapshot.rows, dtype=np.int64)
            self._without = np.full(snapshot.rows, MAX_NODE_SCORE, dtype=np.int64)
        elif len(stale) == 0:
            return self._without
        elif len(stale) <= _FEW_ROWS:
            # A placement changes a row or two: the same IEEE operations as `_two_fractions` on plain
            # floats cost far less than numpy's overhead per call on arrays that small.
            without, table = self._without, snapshot.cpu_memory
            for row in set(stale.tolist()):
                cpu, memory, _, _, cpu_requested, memory_requested = table[:, row].tolist()
                if cpu > 0 and memory > 0:  # rows without cpu or memory: never read here
                    spread = abs((min(cpu_requested / cpu, 1.0) - min(memory_requested / memory, 1.0)) / 2)
                    without[row] = int((1 - spread) * MAX_NODE_SCORE)
            return without
        else:
            rows = np.unique(stale)
        block = snapshot.cpu_memory[:, rows]
        usable = (block[:2] > 0).all(axis=0)
        if not usable.all():
            rows, block = rows[usable], block[:, usable]  # rows without cpu or memory: never read here
        self._without[rows] = _two_fractions(block[4:6], block[:2])
        return self._without


def new(args: Args | None, handle: object) -> BalancedAllocation:
    return BalancedAllocation(args or Args(), kubernetes_version_of(handle))
