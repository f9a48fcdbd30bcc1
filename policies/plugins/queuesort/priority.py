"""PrioritySort: higher priority first, then earlier arrival."""

from __future__ import annotations

from typing import Any

from schemas.pod import PodRequest

__all__ = ["NAME", "PrioritySort", "new"]

NAME = "PrioritySort"


class PrioritySort:
    name = NAME

    def sort_key(self, pod: PodRequest, arrival: int) -> tuple[Any, ...]:
        return (-pod.priority, arrival)


def new(args: None, handle: object) -> PrioritySort:
    return PrioritySort()
