"""GpuDemandSort: at equal priority the larger GPU request first, then earlier arrival.

A queue sort for GPU-sharing profiles: first-fit-decreasing inside the scheduler's queue. Among the pods
queued at one moment, whole-card pods go first by card count (8, 4, 2, 1 cards), then shares by their milli
of one card (largest first), then pods without GPUs; equal requests keep their arrival order. Placing the
big requests before the shares that would break up their cards is what bin packing's first-fit-decreasing
does. Priority still comes first, as in kube-scheduler's PrioritySort, so a higher-priority pod is never
held behind a bigger one.

The order only matters when several pods are queued together: pods placed as they arrive are placed in
arrival order whatever the queue sort. With FGD scoring, this order alone over windows of queued pods did
not beat arrival order on the openb traces (docs/gpu-sharing.md); ``algorithm: orders`` (the
``gpu-share-batch`` profile) tries it as one of its candidate orders.
"""

from __future__ import annotations

from typing import Any

from schemas.pod import PodRequest

__all__ = ["NAME", "GpuDemandSort", "demand_key", "new"]

NAME = "GpuDemandSort"


def demand_key(pod: PodRequest) -> tuple[int, int]:
    """(−cards, −milli per card): smaller sorts first, so more whole cards first, then larger shares; a pod
    without GPUs sorts last (0, 0)."""
    gpu = pod.gpu
    if gpu is None:
        return (0, 0)
    return (-gpu.count, -gpu.milli)


class GpuDemandSort:
    name = NAME

    def sort_key(self, pod: PodRequest, arrival: int) -> tuple[Any, ...]:
        return (-pod.priority, *demand_key(pod), arrival)


def new(args: None, handle: object) -> GpuDemandSort:
    return GpuDemandSort()
