"""The target workload of fragmentation: a distribution over pod types, as the FGD simulator computes it.

A pod type is what fragmentation looks at: (cpu millicores, GPU milli per card, cards, allowed card models).
FGD measures a node's fragmentation *against* the pods expected to arrive, so it needs their distribution:
the simulator's ``utils.GetTypicalPods`` counts each type in the whole pod list, keeps the most popular ones
until they cover `threshold` percent of the pods (adding `step` types at a time), and renormalises their
shares to sum to 1. `typical_pods` is that function.

A streaming scheduler does not know the pod list in advance, so `WorkloadLearner` learns it from the pods it
sees: counts per type with exponential decay (a pod seen `half_life` pods ago counts half), turned into the
typical list every `refresh` pods (more often at the start, while the counts are few). Plugins may instead
be given the distribution (`TargetWorkload.from_entries`). The learner's counts are plain data, so they
survive a failover (`state` / `from_state`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from policies.framework.contract import IntArray
from schemas.gpu import MILLI_PER_CARD
from schemas.pod import PodRequest

__all__ = [
    "DEFAULT_THRESHOLD",
    "PodType",
    "TargetWorkload",
    "WorkloadLearner",
    "pod_type",
    "typical_pods",
]

DEFAULT_THRESHOLD = 95.0
"""Percent of pods the typical types cover: the simulator's experiments use 95 (podPopularityThreshold)."""

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True, order=True)
class PodType:
    """The simulator's ``PodResource``: cpu (millicores, non-zero requests), milli per card (0 without
    GPUs), cards, and allowed card models joined by ``|`` ("" = any). Ordered as ``PodResource.Less``."""

    cpu: int
    milli: int
    count: int
    models: str = ""

    @property
    def model_list(self) -> tuple[str, ...]:
        return tuple(model for model in self.models.split("|") if model)


def pod_type(pod: PodRequest, nonzero_cpu: int) -> PodType:
    """The pod's type; `nonzero_cpu` is its cpu with Kubernetes' non-zero defaults (``GetPodResource``)."""
    gpu = pod.gpu
    if gpu is None:
        return PodType(nonzero_cpu, 0, 0, "")
    return PodType(nonzero_cpu, gpu.milli, gpu.count, "|".join(gpu.models))


@dataclass(frozen=True, slots=True)
class TargetWorkload:
    """Pod types with their shares (summing to 1), in the simulator's order (most popular first), as arrays
    over the types for the vectorised fragmentation."""

    types: tuple[PodType, ...]
    freq: tuple[float, ...]

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[PodType, float]]) -> TargetWorkload:
        """A configured distribution: weights normalised to sum to 1, order kept."""
        pairs = [(kind, float(weight)) for kind, weight in entries if weight > 0]
        total = sum(weight for _, weight in pairs)
        if not pairs or total <= 0:
            return cls((), ())
        return cls(tuple(kind for kind, _ in pairs), tuple(weight / total for _, weight in pairs))

    @property
    def empty(self) -> bool:
        return not self.types

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
        """(cpu, milli, count, freq) per type."""
        return (
            np.array([t.cpu for t in self.types], dtype=np.int64),
            np.array([t.milli for t in self.types], dtype=np.int64),
            np.array([t.count for t in self.types], dtype=np.int64),
            np.array(self.freq, dtype=np.float64),
        )


def _sort_key(item: tuple[PodType, float]) -> tuple[float, PodType]:
    kind, count = item
    return (count, kind)


def typical_pods(
    counts: Mapping[PodType, float],
    *,
    threshold: float = DEFAULT_THRESHOLD,
    step: int = 1,
    include_cpu: bool = True,
    gpu_weight: float = 0.0,
) -> TargetWorkload:
    """``utils.GetTypicalPods``: types by decreasing count (ties: the larger type first, as Go's
    ``sort.Reverse`` of ``TargetPodList.Less``), the first ones covering `threshold` percent of the pods
    (`step` types at a time), shares renormalised over those. `include_cpu` False leaves out pods without
    GPUs (IsInvolvedCpuPods); `gpu_weight` > 0 counts a whole-card pod as 1 + cards × weight
    (GpuResWeight)."""
    weighted: dict[PodType, float] = {}
    total = 0.0
    for kind, seen in counts.items():
        if seen <= 0 or (not include_cpu and kind.count == 0):
            continue
        count = (
            seen * (1 + kind.count * gpu_weight) if gpu_weight > 0 and kind.milli == MILLI_PER_CARD else seen
        )
        weighted[kind] = weighted.get(kind, 0.0) + count
        total += count
    if total <= 0:
        return TargetWorkload((), ())
    ordered = sorted(weighted.items(), key=_sort_key, reverse=True)
    expected = threshold * total / 100.0
    chosen: list[tuple[PodType, float]] = []
    cumulative = 0.0
    i = 0
    wanted = 0
    while cumulative < expected and i < len(ordered):
        wanted += max(step, 1)
        while i < wanted and i < len(ordered):
            cumulative += ordered[i][1]
            chosen.append((ordered[i][0], ordered[i][1] / total))
            i += 1
    if i >= len(ordered):
        return TargetWorkload(tuple(k for k, _ in chosen), tuple(f for _, f in chosen))
    scale = cumulative / total
    return TargetWorkload(tuple(k for k, _ in chosen), tuple(f / scale for _, f in chosen))


class WorkloadLearner:
    """Pod-type counts learned from the pods seen, with exponential decay, and the typical list from them.

    Each pod adds 1 to its type; every count decays by 2^(-1/half_life) per pod seen (kept lazily: new pods
    add a growing weight instead, rescaled before it overflows). The typical list is recomputed after
    `refresh` pods, or after max(1, seen / 8) pods while fewer than 8 × `refresh` have been seen, so a
    fresh scheduler converges fast; `version` changes only when the list does."""

    def __init__(
        self,
        *,
        half_life: float = 20_000.0,
        refresh: int = 500,
        threshold: float = DEFAULT_THRESHOLD,
        step: int = 1,
        include_cpu: bool = True,
    ) -> None:
        self.half_life = half_life
        self.refresh = refresh
        self.threshold = threshold
        self.step = step
        self.include_cpu = include_cpu
        self.counts: dict[PodType, float] = {}
        self.seen = 0
        self._weight = 1.0
        self._since = 0
        self.workload = TargetWorkload((), ())
        self.version = 0

    def observe(self, kind: PodType) -> bool:
        """Count one pod; True when the typical list changed."""
        self.counts[kind] = self.counts.get(kind, 0.0) + self._weight
        self.seen += 1
        self._since += 1
        if self.half_life > 0:
            self._weight *= 2.0 ** (1.0 / self.half_life)
            if self._weight > 1e12:
                self._rescale()
        due = self.refresh if self.seen >= 8 * self.refresh else max(1, self.seen // 8)
        if self._since < due:
            return False
        self._since = 0
        return self._recompute()

    def _rescale(self) -> None:
        weight = self._weight
        self.counts = {kind: count / weight for kind, count in self.counts.items() if count / weight > 1e-9}
        self._weight = 1.0

    def _recompute(self) -> bool:
        workload = typical_pods(
            self.counts, threshold=self.threshold, step=self.step, include_cpu=self.include_cpu
        )
        if workload == self.workload:
            return False
        self.workload = workload
        self.version += 1
        return True

    def state(self) -> dict[str, Any]:
        """The counts as plain data (types as ``[cpu, milli, count, models]``), normalised to weight 1."""
        weight = self._weight
        return {
            "counts": [[k.cpu, k.milli, k.count, k.models, c / weight] for k, c in self.counts.items()],
            "seen": self.seen,
        }

    def restore(self, state: Mapping[str, Any]) -> None:
        counts: Sequence[Sequence[Any]] = state.get("counts", [])
        self.counts = {
            PodType(int(cpu), int(milli), int(count), str(models)): float(value)
            for cpu, milli, count, models, value in counts
            if math.isfinite(float(value)) and float(value) > 0
        }
        self.seen = int(state.get("seen", 0))
        self._weight = 1.0
        self._since = 0
        self._recompute()
