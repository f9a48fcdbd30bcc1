"""Nodes and their lifecycle events (the compacted ``node-events`` topic)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from schemas.base import Event, LabelKey, LabelValue, Name, Timestamp
from schemas.gpu import GpuCards
from schemas.quantity import MAX_QUANTITY, ResourceList, Resources

__all__ = ["ContainerImage", "NodeEvent", "NodeEventType", "NodeSpec", "Taint"]

NodeEventType = Literal["upsert", "delete", "cordon", "uncordon"]


class Taint(Event):
    key: LabelKey
    value: LabelValue = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]


class ContainerImage(Event):
    """An image the node holds (``status.images[]``): all its names, and its size."""

    names: list[str] = Field(default_factory=list, max_length=64)
    size_bytes: int = Field(default=0, ge=0, le=MAX_QUANTITY)
    """At most the largest quantity eyrie takes: a shard's checkpoint writes the node as JSON, whose integers
    stop at 64 bits."""


class NodeSpec(Event):
    """A node as placement sees it. `allocatable` defaults to `capacity` and may not exceed it."""

    name: Name
    cluster: Name = "default"
    capacity: ResourceList = Field(default_factory=Resources)
    allocatable: ResourceList = Field(default_factory=Resources)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list, max_length=256)
    unschedulable: bool = False
    oversell_rate: float | None = Field(default=None, gt=0.0, le=100.0)
    images: list[ContainerImage] = Field(default_factory=list, max_length=4096)
    """Images present on the node, for ImageLocality (empty where the node reports none)."""
    gpus: GpuCards | None = None
    """The node's GPU cards, accounted per card (docs/gpu-sharing.md); None when it has none to share."""

    @model_validator(mode="after")
    def _allocatable_within_capacity(self) -> NodeSpec:
        if not self.allocatable and self.capacity:
            object.__setattr__(self, "allocatable", Resources(self.capacity))
        for resource, amount in self.allocatable.items():
            if resource in self.capacity and amount > self.capacity[resource]:
                raise ValueError(f"allocatable.{resource} exceeds capacity.{resource}")
        return self


class NodeEvent(Event):
    """``delete`` needs only the node's name; the others carry the whole spec."""

    type: NodeEventType
    node: NodeSpec
    ts: Timestamp | None = None
