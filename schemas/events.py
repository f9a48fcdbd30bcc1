"""Metric samples, placement decisions, their results, and dead letters."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from schemas.base import Event, Name, Timestamp
from schemas.gpu import MAX_CARDS, MILLI_PER_CARD, CardIndex
from schemas.quantity import ResourceList, Resources

__all__ = [
    "DEAD_LETTER_RAW_LIMIT",
    "MAX_METRIC_VALUE",
    "MAX_TALLY",
    "Binding",
    "BindingResult",
    "BindingStatus",
    "DeadLetter",
    "MetricSample",
]

MAX_METRIC_VALUE = 1e18
"""Larger than any real metric in base units (an exabyte, a billion cores): a unit error or garbage. The
portrait and window stores screen such values out too (`portraits.validation.ABSURD_VALUE`); refusing them
here makes the record a dead letter with the reason instead of a silent count."""

MetricValue = Annotated[float, Field(ge=0.0, le=MAX_METRIC_VALUE, allow_inf_nan=False)]

MAX_TALLY = 2**62
"""The largest attempt or version a record may carry: it fits int64 with headroom. Unbounded, an ``attempt``
of 2^70 from a hostile binding made the ledger's orjson encoding raise (orjson writes 64-bit integers only)
and stopped the applier. Placement's own attempts stop counting here (`Scheduler.requeue`)."""

Tally = Annotated[int, Field(ge=0, le=MAX_TALLY)]
"""Attempts and versions (`MAX_TALLY`)."""
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
    namespace: str | None = Field(default=None, max_length=63)
    name: str | None = Field(default=None, max_length=253)
    """The pod's namespace and name, carried so results can be read by people (`eyrie decisions`)."""
    cluster: Name = "default"
    profile: Name = "default"
    score: int = 0
    plugin_scores: dict[str, int] = Field(default_factory=dict)
    requests: ResourceList = Field(default_factory=Resources)
    node_version: Tally = 0
    batch_id: str | None = Field(default=None, max_length=253)
    decided_at: Timestamp = 0.0
    attempt: Tally = 0
    gpu_cards: list[CardIndex] = Field(default_factory=list, max_length=MAX_CARDS)
    """The GPU cards (indexes on the node) the pod holds; empty when it asks for none."""
    gpu_milli: int = Field(default=0, ge=0, le=MILLI_PER_CARD)
    """Milli the pod holds of each of `gpu_cards` (its `GpuRequest.milli`)."""


BindingStatus = Literal["applied", "conflict", "rejected", "unschedulable"]


class BindingResult(Event):
    uid: Name
    namespace: str | None = Field(default=None, max_length=63)
    name: str | None = Field(default=None, max_length=253)
    node: str | None = None
    cluster: str | None = None
    status: BindingStatus
    reasons: list[str] = Field(default_factory=list)
    at: Timestamp = 0.0
    attempt: Tally = 0


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
