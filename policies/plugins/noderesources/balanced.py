"""NodeResourcesBalancedAllocation: favour nodes whose resource fractions stay close to each other."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from pydantic import Field

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, IntArray
from policies.plugins.noderesources.common import (
    CPU_MEMORY,
    ResourceSpec,
    StrictArgs,
    cpu_memory_of,
    requested_and_allocatable,
)

__all__ = ["NAME", "Args", "BalancedAllocation", "new"]

NAME = "NodeResourcesBalancedAllocation"
FloatArray = npt.NDArray[np.float64]


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu"), ResourceSpec(name="memory")]


class Args(StrictArgs):
    resources: list[ResourceSpec] = Field(default_factory=_default_resources, min_length=1)
    """Weights are accepted for compatibility and ignored, as upstream ignores them."""


class BalancedAllocation:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.resources = [r.name for r in args.resources]
        self.cpu_memory = sorted(self.resources) == sorted(CPU_MEMORY)

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        if self.cpu_memory and (block := cpu_memory_of(ctx, nodes)) is not None:
            # The default arguments on nodes that all have both: the two-fraction formula below, both
            # resources in one pass over a (2 × nodes) block, the same float operations in the same order.
            snapshot, vector = ctx.snapshot, ctx.info.vector
            pod = [
                [float(vector[c]) if c < len(vector) else 0.0]
                for c in (snapshot.column[r] for r in CPU_MEMORY)
            ]
            both = block[4:6] + np.array(pod)
            both /= block[:2]
            np.minimum(both, 1.0, out=both)
            spread = np.subtract(both[0], both[1], out=both[0])
            spread /= 2
            np.abs(spread, out=spread)
            np.subtract(1, spread, out=spread)
            spread *= MAX_NODE_SCORE
            balanced: IntArray = np.trunc(spread, out=spread).astype(np.int64)
            return balanced
        count = len(nodes)
        pairs = [
            pair
            for resource in self.resources
            if (pair := requested_and_allocatable(ctx, nodes, resource, use_requested=True)) is not None
        ]
        if len(pairs) == 2 and all(bool((allocatable > 0).all()) for _, allocatable in pairs):
            # The common case (cpu and memory on every node): upstream's two-fraction formula directly.
            (q0, a0), (q1, a1) = pairs
            f0 = np.minimum(q0 / a0, 1.0)
            f1 = np.minimum(q1 / a1, 1.0)
            two: IntArray = np.trunc((1 - np.abs((f0 - f1) / 2)) * MAX_NODE_SCORE).astype(np.int64)
            return two
        fractions: list[FloatArray] = []
        present: list[npt.NDArray[np.bool_]] = []
        for requested, allocatable in pairs:
            has = allocatable > 0
            fraction = np.minimum(requested / np.where(has, allocatable, 1), 1.0)
            fractions.append(fraction)
            present.append(has)
        # Float arithmetic in upstream's order, so results match Go bit for bit: two resources use
        # |f1 - f2| / 2, more use the population standard deviation, fewer score a std of 0.
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


def new(args: Args | None, handle: object) -> BalancedAllocation:
    return BalancedAllocation(args or Args())
