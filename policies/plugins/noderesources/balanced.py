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

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, CycleContext, IntArray, no_scores
from policies.framework.profile import kubernetes_version_of
from policies.plugins.noderesources.common import (
    CPU_MEMORY,
    CpuMemoryTable,
    FloatArray,
    Int32Array,
    ResourceSpec,
    Scratch,
    StrictArgs,
    picked_scores,
    requested_and_allocatable,
)
from policies.snapshot import PodInfo

__all__ = ["NAME", "Args", "BalancedAllocation", "balance_scores", "change_score", "new"]

NAME = "NodeResourcesBalancedAllocation"
_CHANGE_SINCE = (1, 36)
"""The first release that scores the change in balance rather than the balance with the pod."""
_SKIP_SINCE = (1, 34)
"""The first release whose PreScore skips pods that request none of the plugin's resources."""
_HALF = MAX_NODE_SCORE // 2


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
        self._pod: tuple[PodInfo | None, FloatArray] = (None, np.zeros((2, 1)))
        self._nothing: tuple[PodInfo | None, bool] = (None, False)
        self._scratch = Scratch()

    def _requests_nothing(self, ctx: CycleContext) -> bool:
        """Kept for the pod's retries, as its column (`_pod_column`)."""
        info = ctx.info
        if self._nothing[0] is not info:
            column, vector = ctx.snapshot.column, info.vector
            nothing = not any(
                (c := column.get(resource)) is not None and c < len(vector) and vector[c] != 0
                for resource in self.resources
            )
            self._nothing = (info, nothing)
        return self._nothing[1]

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        if self.skip_unrequested and self._requests_nothing(ctx):
            # PreScore's Skip: the plugin's score takes no part in any node's total.
            return no_scores(len(nodes))
        if self.cpu_memory:
            table = CpuMemoryTable.refreshed(ctx)
            if table.usable(nodes):
                return self._cpu_memory_score(ctx, table, nodes)
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

    def score_rows(self, ctx: CycleContext, passing: BoolArray | None) -> Int32Array | IntArray | None:
        """The default arguments over every row of `CpuMemoryTable` (`RowScorePlugin`); None for other
        resources, or while a live node lacks allocatable cpu or memory."""
        rows = ctx.snapshot.rows
        if self.skip_unrequested and self._requests_nothing(ctx):
            return no_scores(rows)
        if not self.cpu_memory:
            return None
        table = CpuMemoryTable.refreshed(ctx)
        if table.lacking_count:
            return None
        return self._cpu_memory_of(ctx, table.floats[:, :rows], table.change_base[:rows])

    def _cpu_memory_score(self, ctx: CycleContext, table: CpuMemoryTable, nodes: IntArray) -> IntArray:
        floats, change_base, pick = table.columns(ctx, nodes)
        return picked_scores(self._cpu_memory_of(ctx, floats, change_base), pick)

    def _cpu_memory_of(self, ctx: CycleContext, floats: FloatArray, change_base: Int32Array) -> Int32Array:
        """The default arguments on nodes that all have both resources: both at once over the table's
        (2 × rows) blocks, the same float operations in the same order as the general path (halving and
        multiplying by 0.5 are the same IEEE operation). The change then takes two integer passes, as the
        table keeps ``150 − without`` per row."""
        fractions = self._scratch.array("fractions", floats[4:6].shape, np.float64)
        np.add(floats[4:6], self._pod_column(ctx), out=fractions)
        np.divide(fractions, floats[0:2], out=fractions)
        np.minimum(fractions, 1.0, out=fractions)
        spread = np.subtract(fractions[0], fractions[1], out=fractions[0])
        spread *= 0.5
        np.abs(spread, out=spread)
        np.subtract(1.0, spread, out=spread)
        spread *= MAX_NODE_SCORE
        # (1 − std) × 100 lies in 50..100: conversion truncates, as upstream's int64() (to int32, which numpy
        # converts several times faster).
        scores: Int32Array = self._scratch.array("scores", spread.shape, np.int32)
        np.copyto(scores, spread, casting="unsafe")
        if self.change:
            scores += change_base
            scores >>= 1  # non-negative: the shift is Go's division by 2
        return scores

    def _pod_column(self, ctx: CycleContext) -> FloatArray:
        """The pod's cpu and memory requests as a (2 × 1) float column, kept for the pod's retries."""
        info = ctx.info
        cached, column = self._pod
        if cached is not info:
            snapshot, vector = ctx.snapshot, info.vector
            columns = (snapshot.column[resource] for resource in CPU_MEMORY)
            column = np.array([[float(vector[c]) if c < len(vector) else 0.0] for c in columns])
            self._pod = (info, column)
        return column

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


def new(args: Args | None, handle: object) -> BalancedAllocation:
    return BalancedAllocation(args or Args(), kubernetes_version_of(handle))
