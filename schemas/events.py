"""Metric samples, placement decisions, their results, and dead letters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.base import Event, Name, Timestamp
from schemas.quantity import ResourceList, Resources

__all__ = [
    "DEAD_LETTER_RAW_LIMIT",
    "Binding",
    "BindingResult",
    "BindingStatus",
    "DeadLetter",
    "MetricSample",
]

MetricValue = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
MetricName = Annotated[str, Field(min_length=1, max_length=64)]


class MetricSample(Event):
    """One observation. Without `pod` it describes the node (windows, node portraits); with `pod` it
    describes a workload's pod (workload portraits). cpu in cores, memory and disk in bytes."""

    ts: Timestamp
    node: Name
    pod: str | None = Field(default=None, max_length=253)
    workload: str | None = Field(default=None, max_length=253)
    values: dict[MetricName, MetricValue] = Field(min_length=1, max_length=64)


class Binding(Event):
    """Placement's decision for one pod. `node_version` is the version of the node's allocation that the
    decision was made against; the applier commits only if it still holds (optimistic concurrency)."""

    uid: Name
    node: Name
    cluster: Name = "default"
    profile: Name = "default"
    score: int = 0
    plugin_scores: dict[str, int] = Field(default_factory=dict)
    requests: ResourceList = Field(default_factory=Resources)
    node_version: int = Field(default=0, ge=0)
    batch_id: str | None = Field(default=None, max_length=253)
    decided_at: Timestamp = 0.0
    attempt: int = Field(default=0, ge=0)


BindingStatus = Literal["applied", "conflict", "rejected", "unschedulable"]


class BindingResult(Event):
    uid: Name
    node: str | None = None
    cluster: str | None = None
    status: BindingStatus
    reasons: list[str] = Field(default_factory=list)
    at: Timestamp = 0.0
    attempt: int = Field(default=0, ge=0)


DEAD_LETTER_RAW_LIMIT = 4096
"""Bytes of the offending record kept in a dead letter: enough to diagnose, bounded for hostile input."""


class DeadLetter(Event):
    """A record that failed to decode or validate; `raw` is its first 4 KiB, undecodable bytes escaped."""

    topic: str
    partition: int | None = None
    offset: int | None = None
    key: str | None = None
    raw: str
    error: str
    at: Timestamp = 0.0
