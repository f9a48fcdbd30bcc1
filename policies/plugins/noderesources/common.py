"""What Fit's scoring strategies and BalancedAllocation share: which (requested, allocatable) pairs a
resource contributes, as kube-scheduler's resourceAllocationScorer computes them, and Go's integer math."""

from __future__ import annotations

from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.framework.contract import CycleContext, IntArray
from schemas.quantity import validate_resource_name

__all__ = [
    "CPU_MEMORY",
    "ResourceSpec",
    "StrictArgs",
    "cpu_memory_of",
    "default_normalize",
    "is_scalar_resource",
    "requested_and_allocatable",
]

_NATIVE = ("cpu", "memory", "ephemeral-storage")
CPU_MEMORY = ("cpu", "memory")
"""The resources of the default scoring arguments, in the column order of `Snapshot.nonzero`."""
_CPU_MEMORY = "noderesources.cpu_memory"
FloatArray = npt.NDArray[np.float64]


class StrictArgs(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class ResourceSpec(StrictArgs):
    name: str
    weight: Annotated[int, Field(ge=1, le=100)] = 1

    @field_validator("name")
    @classmethod
    def _known(cls, name: str) -> str:
        return validate_resource_name(name, field="name")


def is_scalar_resource(name: str) -> bool:
    """Extended resources (and anything not cpu/memory/ephemeral-storage) are skipped by the scorers when
    the pod does not request them."""
    return name not in _NATIVE


def requested_and_allocatable(
    ctx: CycleContext, nodes: IntArray, resource: str, *, use_requested: bool
) -> tuple[IntArray, IntArray] | None:
    """(node requested + pod request, allocatable) over `nodes` for one resource, or None when the
    resource is skipped for this pod. `use_requested` False applies the non-zero defaults to cpu and
    memory (LeastAllocated, MostAllocated, RequestedToCapacityRatio), True uses actual requests
    (BalancedAllocation)."""
    snapshot, info = ctx.snapshot, ctx.info
    column = snapshot.column.get(resource)
    pod_request = int(info.vector[column]) if column is not None and column < len(info.vector) else 0
    if not use_requested and resource in ("cpu", "memory"):
        which = 0 if resource == "cpu" else 1
        pod_request = info.score_cpu if which == 0 else info.score_memory
        return snapshot.nonzero[nodes, which] + pod_request, snapshot.allocatable[
            nodes, snapshot.column[resource]
        ]
    if column is None or (pod_request == 0 and is_scalar_resource(resource)):
        return None
    return snapshot.requested[nodes, column] + pod_request, snapshot.allocatable[nodes, column]


def cpu_memory_of(ctx: CycleContext, nodes: IntArray) -> FloatArray | None:
    """`Snapshot.cpu_memory` of `nodes`, a (6 × nodes) float block in the order of `CPU_MEMORY_ROWS`,
    gathered once per cycle with one `take` (Fit and BalancedAllocation both score from it; a take of rows
    is several times cheaper than fancy indexing, and the arithmetic after it runs on contiguous memory).
    None when a node lacks allocatable cpu or memory: the general paths handle those."""
    cached = ctx.state.get(_CPU_MEMORY)
    if cached is not None and cached[0] is nodes:
        found: FloatArray | None = cached[1]
        return found
    block: FloatArray = ctx.snapshot.cpu_memory.take(nodes, axis=1)
    usable = block if (block[:2] > 0).all() else None
    ctx.state[_CPU_MEMORY] = (nodes, usable)
    return usable


def default_normalize(scores: IntArray, *, reverse: bool, max_score: int = 100) -> IntArray:
    """kube-scheduler's DefaultNormalizeScore: scale to 0..max_score by the highest score (reversed for
    plugins where fewer is better); all zeros stay zeros, or become max_score when reversed."""
    highest = int(scores.max()) if len(scores) else 0
    if highest == 0:
        return np.full(len(scores), max_score if reverse else 0, dtype=np.int64)
    scaled: IntArray = max_score * scores // highest
    return max_score - scaled if reverse else scaled
