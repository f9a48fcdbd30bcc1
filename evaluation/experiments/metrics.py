"""Cluster-state metrics for the evaluation report, on plain arrays so they can be checked by hand.

- Utilisation: requested (or used) over allocatable per node and resource; a node without the resource
  (a CPU-only node and GPUs) has none, not 0 %, so it neither flattens nor widens the spread.
- Spread: the standard deviation and max − min of per-node utilisation over the nodes that have the resource.
- GPU fragmentation: idle GPUs on partly used nodes, i.e. free GPUs on nodes with at least one GPU allocated.
  A whole-node GPU job can use none of them; they also appear as a share of all free GPUs.
- Over capacity: nodes (or node-hours) whose load exceeds what the node has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = [
    "GpuFragmentation",
    "Spread",
    "gpu_fragmentation",
    "over_capacity",
    "spread",
    "utilisation",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def utilisation(load: npt.ArrayLike, capacity: npt.ArrayLike) -> FloatArray:
    """load / capacity, element by element; NaN where the capacity is 0 (the node lacks the resource)."""
    load_array = np.asarray(load, dtype=np.float64)
    capacity_array = np.asarray(capacity, dtype=np.float64)
    out = np.full(np.broadcast(load_array, capacity_array).shape, np.nan)
    np.divide(load_array, capacity_array, out=out, where=capacity_array > 0)
    return out


@dataclass(frozen=True, slots=True)
class Spread:
    """Dispersion of per-node utilisation of one resource (fractions: 0.25 is 25 percentage points)."""

    nodes: int
    """Nodes that have the resource (the others are left out)."""
    mean: float
    std: float
    """Population standard deviation (numpy's default, ddof 0): the nodes are the whole cluster."""
    range: float
    """max − min."""


def spread(values: npt.ArrayLike) -> Spread:
    """Spread of one resource's per-node utilisation; NaN entries (nodes without it) are ignored."""
    array = np.asarray(values, dtype=np.float64).ravel()
    present = array[~np.isnan(array)]
    if present.size == 0:
        return Spread(0, 0.0, 0.0, 0.0)
    return Spread(
        nodes=int(present.size),
        mean=float(present.mean()),
        std=float(present.std()),
        range=float(present.max() - present.min()),
    )


@dataclass(frozen=True, slots=True)
class GpuFragmentation:
    idle_on_partly_used: int
    """Free GPUs on nodes that have at least one GPU allocated."""
    free: int
    """Free GPUs on every node."""
    allocated: int

    @property
    def share(self) -> float:
        """Idle GPUs on partly used nodes as a share of all free GPUs (0 when no GPU is free)."""
        return self.idle_on_partly_used / self.free if self.free else 0.0


def gpu_fragmentation(allocated: npt.ArrayLike, total: npt.ArrayLike) -> GpuFragmentation:
    """Per node: GPUs allocated and GPUs the node has. A node allocated beyond its GPUs (only a policy
    that ignores the GPU request could do that) has none free, not a negative number."""
    used = np.asarray(allocated, dtype=np.int64)
    have = np.asarray(total, dtype=np.int64)
    free = np.maximum(have - used, 0)
    partly = (used > 0) & (free > 0)
    return GpuFragmentation(
        idle_on_partly_used=int(free[partly].sum()),
        free=int(free.sum()),
        allocated=int(np.minimum(used, have).sum()),
    )


def over_capacity(load: npt.ArrayLike, capacity: npt.ArrayLike) -> BoolArray:
    """Per row (a node, or a node-hour): whether any resource's load exceeds its capacity. `load` and
    `capacity` are (..., resources) or broadcast to it; a resource the node lacks is over as soon as it is
    loaded at all."""
    load_array = np.asarray(load, dtype=np.float64)
    capacity_array = np.asarray(capacity, dtype=np.float64)
    over: BoolArray = np.asarray((load_array > capacity_array).any(axis=-1), dtype=np.bool_)
    return over
