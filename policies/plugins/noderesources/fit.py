"""NodeResourcesFit: the resources filter, and scoring by LeastAllocated, MostAllocated or
RequestedToCapacityRatio, exactly as kube-scheduler v1.23+ computes them."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field, model_validator

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, CycleContext, IntArray
from policies.plugins.noderesources.common import (
    ResourceSpec,
    StrictArgs,
    requested_and_allocatable,
    round_half_away,
    trunc_div,
)

__all__ = ["NAME", "REASON_TOO_MANY_PODS", "Args", "NodeResourcesFit", "broken_linear", "insufficient", "new"]

NAME = "NodeResourcesFit"
REASON_TOO_MANY_PODS = "Too many pods"
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100


def insufficient(resource: str) -> str:
    return f"Insufficient {resource}"


class ShapePoint(StrictArgs):
    utilization: Annotated[int, Field(ge=0, le=MAX_UTILIZATION)]
    score: Annotated[int, Field(ge=0, le=MAX_CUSTOM_PRIORITY_SCORE)]


class RequestedToCapacityRatio(StrictArgs):
    shape: list[ShapePoint] = Field(min_length=1)

    @model_validator(mode="after")
    def _increasing(self) -> RequestedToCapacityRatio:
        for before, after in zip(self.shape, self.shape[1:], strict=False):
            if after.utilization <= before.utilization:
                raise ValueError("shape: utilization values must be sorted in increasing order")
        return self


def _default_resources() -> list[ResourceSpec]:
    return [ResourceSpec(name="cpu"), ResourceSpec(name="memory")]


class ScoringStrategy(StrictArgs):
    type: Literal["LeastAllocated", "MostAllocated", "RequestedToCapacityRatio"] = "LeastAllocated"
    resources: list[ResourceSpec] = Field(default_factory=_default_resources, min_length=1)
    requested_to_capacity_ratio: RequestedToCapacityRatio | None = Field(
        default=None, alias="requestedToCapacityRatio"
    )

    @model_validator(mode="after")
    def _shape_when_needed(self) -> ScoringStrategy:
        if self.type == "RequestedToCapacityRatio" and self.requested_to_capacity_ratio is None:
            raise ValueError("requestedToCapacityRatio.shape is required for type RequestedToCapacityRatio")
        names = [r.name for r in self.resources]
        if len(set(names)) != len(names):
            raise ValueError("resources: a resource is listed twice")
        return self


class Args(StrictArgs):
    scoring_strategy: ScoringStrategy = Field(default_factory=ScoringStrategy, alias="scoringStrategy")
    ignored_resources: list[str] = Field(default_factory=list, alias="ignoredResources")
    """Extended resources the filter does not check (e.g. ones a device plugin admits itself)."""
    ignored_resource_groups: list[str] = Field(default_factory=list, alias="ignoredResourceGroups")
    """Extended resources whose domain (``example.com`` of ``example.com/aaa``) the filter does not check."""


class NodeResourcesFit:
    name = NAME

    def __init__(self, args: Args) -> None:
        self.args = args
        strategy = args.scoring_strategy
        self.strategy = strategy.type
        self.resources = [(r.name, r.weight) for r in strategy.resources]
        if strategy.requested_to_capacity_ratio is not None:
            points = strategy.requested_to_capacity_ratio.shape
            self.shape_u = [p.utilization for p in points]
            # Shape scores are 0..10 in the API and scaled to 0..MaxNodeScore, as upstream does.
            self.shape_s = [p.score * (MAX_NODE_SCORE // MAX_CUSTOM_PRIORITY_SCORE) for p in points]

    # ---------------------------------------------------------------------------------- filter

    def _checked_columns(self, ctx: CycleContext) -> list[int]:
        columns: list[int] = ctx.info.requested_columns.tolist()
        if not (self.args.ignored_resources or self.args.ignored_resource_groups):
            return columns
        names = ctx.snapshot.resources
        return [c for c in columns if not self._ignored(names[c])]

    def _ignored(self, resource: str) -> bool:
        # Only extended resources can be ignored, as upstream's ignoredExtendedResources.
        if "/" not in resource:
            return False
        return (
            resource in self.args.ignored_resources
            or resource.split("/", 1)[0] in self.args.ignored_resource_groups
        )

    def filter(self, ctx: CycleContext, nodes: IntArray) -> BoolArray:
        snapshot, info = ctx.snapshot, ctx.info
        fits: BoolArray = snapshot.pod_count[nodes] < snapshot.max_pods[nodes]
        for column in self._checked_columns(ctx):
            free = snapshot.allocatable[nodes, column] - snapshot.requested[nodes, column]
            fits &= free >= info.vector[column]
        return fits

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        snapshot, info = ctx.snapshot, ctx.info
        # Upstream order: pods, cpu, memory, ephemeral-storage, then extended resources (sorted here, as
        # Go's map order is random).
        columns = sorted(self._checked_columns(ctx), key=lambda c: (c >= 3, snapshot.resources[c]))
        result = []
        for row in nodes.tolist():
            found = []
            if snapshot.pod_count[row] + 1 > snapshot.max_pods[row]:
                found.append(REASON_TOO_MANY_PODS)
            for column in columns:
                if info.vector[column] > snapshot.allocatable[row, column] - snapshot.requested[row, column]:
                    found.append(insufficient(snapshot.resources[column]))
            result.append(found)
        return result

    # ----------------------------------------------------------------------------------- score

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        node_score = np.zeros(len(nodes), dtype=np.int64)
        weight_sum = np.zeros(len(nodes), dtype=np.int64)
        for resource, weight in self.resources:
            pair = requested_and_allocatable(ctx, nodes, resource, use_requested=False)
            if pair is None:
                continue
            requested, allocatable = pair
            present = allocatable > 0
            safe = np.where(present, allocatable, 1)
            if self.strategy == "LeastAllocated":
                score = np.where(
                    requested > allocatable, 0, (allocatable - requested) * MAX_NODE_SCORE // safe
                )
                counted = present
            elif self.strategy == "MostAllocated":
                score = np.minimum(requested, allocatable) * MAX_NODE_SCORE // safe
                counted = present
            else:
                utilization = np.where(
                    requested > allocatable, MAX_UTILIZATION, requested * MAX_UTILIZATION // safe
                )
                score = broken_linear(self.shape_u, self.shape_s, utilization)
                counted = present & (score > 0)  # resources scoring 0 drop out of the weight sum
            node_score += np.where(counted, score * weight, 0)
            weight_sum += np.where(counted, weight, 0)
        has_weight = weight_sum > 0
        divisor = np.where(has_weight, weight_sum, 1)
        if self.strategy == "RequestedToCapacityRatio":
            result = round_half_away(node_score, divisor)
        else:
            result = node_score // divisor
        final: IntArray = np.where(has_weight, result, 0)
        return final


def broken_linear(utilizations: list[int], scores: list[int], utilization: IntArray) -> IntArray:
    """helper.BuildBrokenLinearFunction: the first point with p ≤ its utilization decides, interpolating
    from the point before it with Go's truncating division."""
    result = np.full(len(utilization), scores[-1], dtype=np.int64)
    for i in range(len(utilizations) - 1, -1, -1):
        at_or_below = utilization <= utilizations[i]
        if i == 0:
            value: Any = scores[0]
        else:
            rise = (scores[i] - scores[i - 1]) * (utilization - utilizations[i - 1])
            value = scores[i - 1] + trunc_div(rise, utilizations[i] - utilizations[i - 1])
        result = np.where(at_or_below, value, result)
    return result


def new(args: Args | None, handle: object) -> NodeResourcesFit:
    return NodeResourcesFit(args or Args())
