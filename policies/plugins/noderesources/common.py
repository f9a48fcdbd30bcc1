"""What Fit's scoring strategies and BalancedAllocation share: which (requested, allocatable) pairs a
resource contributes, as kube-scheduler's resourceAllocationScorer computes them, and Go's integer math."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from policies.framework.contract import MAX_NODE_SCORE, CycleContext, Int32Array, IntArray
from policies.snapshot import NODES, PODS, RowCursor, Snapshot
from schemas.quantity import validate_resource_name

__all__ = [
    "CPU_MEMORY",
    "CpuMemoryTable",
    "FloatArray",
    "Int32Array",
    "IntT",
    "ResourceSpec",
    "Scratch",
    "StrictArgs",
    "cpu_memory_of",
    "default_normalize",
    "is_scalar_resource",
    "picked_scores",
    "requested_and_allocatable",
]

_NATIVE = ("cpu", "memory", "ephemeral-storage")
CPU_MEMORY = ("cpu", "memory")
"""The resources of the default scoring arguments, in the column order of `Snapshot.nonzero`."""
_CPU_MEMORY = "noderesources.cpu_memory"
_TABLE = "noderesources.table"
_COLUMNS = "noderesources.columns"
FloatArray = npt.NDArray[np.float64]
IntT = TypeVar("IntT", np.int32, np.int64)
_FEW_ROWS = 8
"""Changed rows up to which `CpuMemoryTable` refreshes row by row in plain floats."""
_CHANGE_BASE = 3 * MAX_NODE_SCORE // 2
"""v1.36's BalancedAllocation score is ``50 + (50 + with − without) / 2``, which (all non-negative) is
``(150 + with − without) / 2``: the table keeps ``150 − without`` per row."""


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


def picked_scores(scores: npt.NDArray[IntT], pick: IntArray | None) -> IntArray:
    """Scores computed over every row (`CpuMemoryTable.columns`) for the `pick`ed nodes, or over the nodes
    already, as the int64 a score plugin returns."""
    picked = scores if pick is None else scores.take(pick)
    result: IntArray = picked.astype(np.int64)
    return result


class Scratch:
    """Arrays a plugin reuses from cycle to cycle, for what it computes over every row. A fresh array of
    tens of kilobytes per operation costs more in page faults than the arithmetic on it (the allocator
    gives such blocks back to the system and takes them again), so the row-wide paths write into these
    with ``out=``; each name's array is overwritten by the next cycle."""

    __slots__ = ("_arrays",)

    def __init__(self) -> None:
        self._arrays: dict[str, npt.NDArray[Any]] = {}

    def array(self, name: str, shape: tuple[int, ...], dtype: type[np.generic]) -> npt.NDArray[Any]:
        """A (…, n) view for `shape`, of an array kept under `name` with room for at least n columns."""
        kept = self._arrays.get(name)
        columns = shape[-1]
        if kept is None or kept.shape[-1] < columns or kept.shape[:-1] != shape[:-1] or kept.dtype != dtype:
            kept = self._arrays[name] = np.zeros((*shape[:-1], max(columns, 64)), dtype=dtype)
        return kept[..., :columns]


def default_normalize(scores: IntArray, *, reverse: bool, max_score: int = 100) -> IntArray:
    """kube-scheduler's DefaultNormalizeScore: scale to 0..max_score by the highest score (reversed for
    plugins where fewer is better); all zeros stay zeros, or become max_score when reversed."""
    highest = int(scores.max()) if len(scores) else 0
    if highest == 0:
        return np.full(len(scores), max_score if reverse else 0, dtype=np.int64)
    scaled: IntArray = max_score * scores // highest
    return max_score - scaled if reverse else scaled


class CpuMemoryTable:
    """Per snapshot (`refreshed`), per row, what the default cpu and memory scorers (LeastAllocated and
    BalancedAllocation) need of a node that does not depend on the pod, so that a cycle costs a few passes
    over contiguous rows: ``floats`` (rows of `FLOAT_ROWS`, float64; integers below 2^53, exact) and
    ``change_base`` (``150 −`` the node's balance score without the pod, v1.36's change score's constant).

    Kept row by row as nodes and their pods change (`RowCursor`): a placement refreshes one row. A row
    without allocatable cpu or memory (or not a live node) keeps an allocatable of 1 here, so whole-row
    arithmetic never divides by 0; such live rows are `lacking`, and the scorers take their general paths
    when a cycle's nodes include one."""

    FLOAT_ROWS = (
        "allocatable cpu",
        "allocatable memory",
        "100 × (allocatable − non-zero requested) cpu",
        "100 × (allocatable − non-zero requested) memory",
        "requested cpu",
        "requested memory",
    )

    def __init__(self) -> None:
        self._cursor = RowCursor(NODES, PODS)
        self.floats: FloatArray = np.ones((len(self.FLOAT_ROWS), 0))
        self.change_base: Int32Array = np.zeros(0, dtype=np.int32)
        self.lacking: npt.NDArray[np.bool_] = np.zeros(0, dtype=np.bool_)
        """Live rows without allocatable cpu or memory."""
        self.lacking_count = 0

    @classmethod
    def refreshed(cls, ctx: CycleContext) -> CpuMemoryTable:
        """The snapshot's table, brought up to date once per cycle."""
        table: CpuMemoryTable | None = ctx.state.get(_TABLE)
        if table is None:
            snapshot = ctx.snapshot
            table = snapshot.extensions.get(cls.__name__)
            if table is None:
                table = snapshot.extensions[cls.__name__] = cls()
            table.refresh(snapshot)
            ctx.state[_TABLE] = table
        return table

    def usable(self, nodes: IntArray) -> bool:
        """Whether every one of `nodes` has allocatable cpu and memory (the table's scores hold there)."""
        return self.lacking_count == 0 or not self.lacking[nodes].any()

    def refresh(self, snapshot: Snapshot) -> None:
        stale = self._cursor.stale(snapshot)
        if stale is None or self.floats.shape[1] < snapshot.rows:
            self._rebuild(snapshot)
            return
        if len(stale) == 0:
            return
        if len(stale) > _FEW_ROWS:
            self._rebuild(snapshot, np.unique(stale))
            return
        # A placement changes a row or two: plain floats, with the same IEEE operations as the whole-row
        # path, cost far less than numpy's overhead per call on arrays that small.
        mirror, floats, change_base = snapshot.cpu_memory, self.floats, self.change_base
        rows = stale.tolist()
        for row in rows if len(rows) == 1 else set(rows):
            values = mirror[:, row].tolist()
            cpu, memory, nonzero_cpu, nonzero_memory, cpu_requested, memory_requested = values
            usable = cpu > 0 and memory > 0
            if usable:
                spread = abs((min(cpu_requested / cpu, 1.0) - min(memory_requested / memory, 1.0)) / 2)
                change_base[row] = _CHANGE_BASE - int((1 - spread) * MAX_NODE_SCORE)
            else:
                cpu = memory = 1.0
            floats[:, row] = (
                cpu,
                memory,
                (cpu - nonzero_cpu) * MAX_NODE_SCORE,
                (memory - nonzero_memory) * MAX_NODE_SCORE,
                cpu_requested,
                memory_requested,
            )
            if not usable or self.lacking_count:  # else no row lacks, this one included
                short = not usable and bool(snapshot.live[row])
                if short != self.lacking[row]:
                    self.lacking[row] = short
                    self.lacking_count += 1 if short else -1

    def _rebuild(self, snapshot: Snapshot, rows: IntArray | None = None) -> None:
        """Recompute `rows` (every row when None) from the snapshot's float mirror."""
        if rows is None:
            size = len(snapshot.live)
            self.floats = np.ones((len(self.FLOAT_ROWS), size))
            self.change_base = np.zeros(size, dtype=np.int32)
            self.lacking = np.zeros(size, dtype=np.bool_)
            rows = np.arange(snapshot.rows, dtype=np.int64)
        mirror = snapshot.cpu_memory[:, rows]
        usable = (mirror[0] > 0) & (mirror[1] > 0)
        allocatable = np.where(usable, mirror[0:2], 1.0)
        floats = self.floats
        floats[0:2, rows] = allocatable
        floats[2:4, rows] = (mirror[0:2] - mirror[2:4]) * MAX_NODE_SCORE
        floats[4:6, rows] = mirror[4:6]
        # The balance without the pod, in upstream's float order (as BalancedAllocation's with the pod).
        fractions = np.minimum(mirror[4:6] / allocatable, 1.0)
        spread = np.abs((fractions[0] - fractions[1]) / 2)
        self.change_base[rows] = _CHANGE_BASE - ((1 - spread) * MAX_NODE_SCORE).astype(np.int32)
        self.lacking[rows] = snapshot.live[rows] & ~usable
        self.lacking_count = int(np.count_nonzero(self.lacking[: snapshot.rows]))

    def columns(self, ctx: CycleContext, nodes: IntArray) -> tuple[FloatArray, Int32Array, IntArray | None]:
        """(floats, change_base, pick) for a cycle's `nodes`, once per cycle: when the nodes are most of the
        rows, every row as it stands (views, nothing gathered; `pick` is `nodes`, which selects the
        results); otherwise the nodes' columns gathered (`pick` None). Elementwise arithmetic over
        contiguous rows and one gather of each result costs less than gathering six inputs."""
        cached = ctx.state.get(_COLUMNS)
        if cached is not None and cached[0] is nodes:
            found: tuple[FloatArray, Int32Array, IntArray | None] = cached[1]
            return found
        rows = ctx.snapshot.rows
        if 2 * len(nodes) > rows:
            found = (self.floats[:, :rows], self.change_base[:rows], nodes)
        else:
            found = (self.floats.take(nodes, axis=1), self.change_base.take(nodes), None)
        ctx.state[_COLUMNS] = (nodes, found)
        return found
