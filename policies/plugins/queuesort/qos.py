"""QOSSort: at equal priority Guaranteed before Burstable before BestEffort, then earlier arrival."""

from __future__ import annotations

from typing import Any

from schemas.pod import PodRequest

__all__ = ["NAME", "QOSSort", "new"]

NAME = "QOSSort"
_RANK = {"Guaranteed": 0, "Burstable": 1, "BestEffort": 2}


class QOSSort:
    name = NAME

    def sort_key(self, pod: PodRequest, arrival: int) -> tuple[Any, ...]:
        return (-pod.priority, _RANK[pod.qos_class], arrival)


def new(args: None, handle: object) -> QOSSort:
    return QOSSort()
