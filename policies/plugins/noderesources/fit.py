"""NodeResourcesFit: the resources filter, and scoring by LeastAllocated, MostAllocated or
RequestedToCapacityRatio, exactly as kube-scheduler v1.23+ computes them."""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any, Literal

import numpy as np
import numpy.typing as npt
from pydantic import Field, model_validator

from policies.framework.contract import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleContext,
    IntArray,
    Nodes,
)
from policies.plugins.noderesources.common import (
    CPU_MEMORY,
    CpuMemoryTable,
    FloatArray,
    Int32Array,
    IntT,
    ResourceSpec,
    Scratch,
    StrictArgs,
    cpu_memory_of,
    picked_scores,
    requested_and_allocatable,
)
from policies.snapshot import PodInfo
from policies.usage import metric_scale

__all__ = ["NAME", "REASON_TOO_MANY_PODS", "Args", "NodeResourcesFit", "broken_linear", "insufficient", "new"]

NAME = "NodeResourcesFit"
REASON_TOO_MANY_PODS = "Too many pods"
MAX_CUSTOM_PRIORITY_SCORE = 10
MAX_UTILIZATION = 100
EXACT_FLOAT_LIMIT = 2**46
# requestsFrom usage: resource, its column among window and portrait metrics alike, quantity units per
# metric unit (cpu load is in cores, requests in millicores).
_USAGE_RESOURCES = (("cpu", 0, metric_scale("cpu")), ("memory", 1, metric_scale("memory")))
_USAGE_STATE = f"{NAME}/usage"


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
    requests_from: Literal["requests", "usage"] = Field(default="requests", alias="requestsFrom")
    """``usage`` (for pods that declare no requests, e.g. Redis instances): a node's cpu and memory
    "requested" is its measured load (window mean + pods placed since) where it has window data, and a pod
    that declares no request counts its workload portrait's peak hourly mean."""


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
        weights = dict(self.resources)
        # Weights of cpu and memory when they are the only resources scored (the default arguments).
        self.cpu_memory_weights: tuple[int, int] | None = (
            (weights["cpu"], weights["memory"]) if sorted(weights) == sorted(CPU_MEMORY) else None
        )
        self._pod: tuple[PodInfo | None, npt.NDArray[np.float64]] = (None, np.zeros((2, 1)))
        self._scratch = Scratch()

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

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        snapshot, info = ctx.snapshot, ctx.info
        fits: BoolArray = snapshot.pod_count[nodes] < snapshot.max_pods[nodes]
        by_usage = self._by_usage(ctx)
        for column in self._checked_columns(ctx):
            if column not in by_usage:
                fits &= snapshot.free[nodes, column] >= info.vector[column]
        for column, pod_amount in by_usage.items():
            fits &= (
                self._usage_requested(ctx, nodes, column) + pod_amount <= snapshot.allocatable[nodes, column]
            )
        return fits

    # ----------------------------------------------------------------------------- requestsFrom

    def _by_usage(self, ctx: CycleContext) -> dict[int, float]:
        """Columns judged by measured usage, with the pod's amount for each ({} unless requestsFrom is
        usage)."""
        if self.args.requests_from != "usage":
            return {}
        cached: dict[int, float] | None = ctx.state.get(_USAGE_STATE)
        if cached is not None:
            return cached
        snapshot, info = ctx.snapshot, ctx.info
        estimate = snapshot.usage.cycle_pod_load(ctx.state, ctx.pod, ctx.now).mean.max(axis=0)
        result = {}
        for resource, metric, units in _USAGE_RESOURCES:
            column = snapshot.column[resource]
            declared = float(info.vector[column]) if column < len(info.vector) else 0.0
            result[column] = declared if declared > 0 else float(estimate[metric]) * units
        ctx.state[_USAGE_STATE] = result
        return result

    def _usage_requested(self, ctx: CycleContext, nodes: Nodes, column: int) -> npt.NDArray[np.float64]:
        snapshot = ctx.snapshot
        usage = snapshot.usage
        resource = snapshot.resources[column]
        window, units = next((w, u) for r, w, u in _USAGE_RESOURCES if r == resource)
        measured = (usage.window_mean[nodes, window] + usage.window_assumed[nodes, window]) * units
        result: npt.NDArray[np.float64] = np.where(
            usage.window_has[nodes, window], measured, snapshot.requested[nodes, column]
        )
        return result

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        # One mask per check over all rows, then one list per distinct pattern of failed checks: an
        # unschedulable pod is judged against every node, and a loop per node cost more than placing it.
        return _lists_by_pattern(self._failed_checks(ctx, nodes), len(nodes))

    def reason_counts(self, ctx: CycleContext, nodes: IntArray) -> Counter[str]:
        """How many of `nodes` give each reason (the fit error's figures, without a list per node)."""
        return Counter(
            {reason: int(np.count_nonzero(failed)) for reason, failed in self._failed_checks(ctx, nodes)}
        )

    def _failed_checks(self, ctx: CycleContext, nodes: IntArray) -> list[tuple[str, npt.NDArray[np.bool_]]]:
        """Each check with its reason and where it fails, in upstream's order."""
        snapshot, info = ctx.snapshot, ctx.info
        # Upstream order: pods, cpu, memory, ephemeral-storage, then extended resources (sorted here, as
        # Go's map order is random).
        columns = sorted(self._checked_columns(ctx), key=lambda c: (c >= 3, snapshot.resources[c]))
        by_usage = self._by_usage(ctx)
        checks: list[tuple[str, npt.NDArray[np.bool_]]] = [
            (REASON_TOO_MANY_PODS, snapshot.pod_count[nodes] + 1 > snapshot.max_pods[nodes])
        ]
        for column in columns:
            if column not in by_usage:
                checks.append(
                    (
                        insufficient(snapshot.resources[column]),
                        info.vector[column] > snapshot.free[nodes, column],
                    )
                )
        for column, pod_amount in by_usage.items():
            used = self._usage_requested(ctx, nodes, column)
            checks.append(
                (
                    insufficient(snapshot.resources[column]),
                    used + pod_amount > snapshot.allocatable[nodes, column],
                )
            )
        return checks

    # ----------------------------------------------------------------------------------- score

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        # Integer arithmetic as upstream, carried out in float64 where that is exact: every quotient here is
        # floor(x·100 / a) with x ≤ a, which float64 gets right while a < 2^46 (an error would need
        # 1/a < 100·2^-53). numpy's int64 division is several times slower than float division.
        exact_float = ctx.snapshot.max_allocatable < EXACT_FLOAT_LIMIT
        by_usage = self._by_usage(ctx)
        weights = self._cpu_memory_by_requests(ctx)
        if weights is not None:
            fast = self._cpu_memory_score(ctx, nodes, weights)
            if fast is not None:
                return fast
        node_score = np.zeros(len(nodes))
        weight_sum = np.zeros(len(nodes))
        for resource, weight in self.resources:
            pair = requested_and_allocatable(ctx, nodes, resource, use_requested=False)
            if pair is None:
                continue
            requested, allocatable = pair
            column = ctx.snapshot.column.get(resource, -1)
            if column in by_usage:
                # Whole units: the scoring math below is Go's integer math.
                measured = self._usage_requested(ctx, nodes, column) + by_usage[column]
                requested = np.ceil(measured).astype(np.int64)
            present = allocatable > 0
            score = self._resource_score(requested, allocatable, present, exact_float)
            counted = present & (score > 0) if self.strategy == "RequestedToCapacityRatio" else present
            node_score += np.where(counted, score * weight, 0.0)
            weight_sum += np.where(counted, float(weight), 0.0)
        # Sums of at most 100 × weight per resource: small integers, exact in float64.
        divisor = np.maximum(weight_sum, 1.0)
        if self.strategy == "RequestedToCapacityRatio":
            result = np.floor((2 * node_score + divisor) / (2 * divisor))  # math.Round: half away from zero
        else:
            result = np.floor(node_score / divisor)
        final: IntArray = np.where(weight_sum > 0, result, 0.0).astype(np.int64)
        return final

    def score_rows(self, ctx: CycleContext, passing: BoolArray | None) -> Int32Array | None:
        """LeastAllocated by requests with the default resources, over every row of `CpuMemoryTable`
        (`RowScorePlugin`); None for the other strategies and arguments, or while a live node lacks
        allocatable cpu or memory."""
        weights = self._cpu_memory_by_requests(ctx)
        if weights is None or self.strategy != "LeastAllocated":
            return None
        table = CpuMemoryTable.refreshed(ctx)
        if table.lacking_count:
            return None
        return self._least_allocated_of(ctx.info, table.floats[:, : ctx.snapshot.rows], weights)

    def _cpu_memory_by_requests(self, ctx: CycleContext) -> tuple[int, int] | None:
        """The cpu and memory weights when the default resources are scored by requests (Least- or
        MostAllocated) in exact float math, which the cpu/memory paths and `score_rows` compute; None when
        the general path must."""
        weights = self.cpu_memory_weights
        if (
            not weights
            or self.strategy == "RequestedToCapacityRatio"
            or ctx.snapshot.max_allocatable >= EXACT_FLOAT_LIMIT
            or self._by_usage(ctx)
        ):
            return None
        return weights

    def _cpu_memory_score(
        self, ctx: CycleContext, nodes: IntArray, weights: tuple[int, int]
    ) -> IntArray | None:
        """The general path below for the default arguments (cpu and memory, by requests, Least- or
        MostAllocated) when every node has both: both resources at once over a (2 × nodes) block, the same
        integers, so the same scores. None when a node lacks either."""
        if self.strategy == "LeastAllocated":
            return self._least_allocated(ctx, nodes, weights)
        block = cpu_memory_of(ctx, nodes)
        if block is None:
            return None
        info, allocatable = ctx.info, block[:2]
        score = block[2:4] + np.array([[float(info.score_cpu)], [float(info.score_memory)]])
        np.minimum(score, allocatable, out=score)
        score *= float(MAX_NODE_SCORE)
        score /= allocatable
        np.floor(score, out=score)
        return _weighted(score.astype(np.int64), weights)

    def _least_allocated(
        self, ctx: CycleContext, nodes: IntArray, weights: tuple[int, int]
    ) -> IntArray | None:
        """LeastAllocated over `CpuMemoryTable`; None when a node lacks cpu or memory."""
        table = CpuMemoryTable.refreshed(ctx)
        if not table.usable(nodes):
            return None
        floats, _, pick = table.columns(ctx, nodes)
        return picked_scores(self._least_allocated_of(ctx.info, floats, weights), pick)

    def _least_allocated_of(self, info: PodInfo, floats: FloatArray, weights: tuple[int, int]) -> Int32Array:
        """LeastAllocated over the columns of `CpuMemoryTable.columns`, which keeps 100 × (allocatable −
        non-zero requested) per row: upstream's numerator ((allocatable − requested) × 100, requested
        counting the pod) is then one subtraction, exact (integers below 2^53), and one division by
        allocatable gives the quotient."""
        if self._pod[0] is not info:
            pod = [[float(info.score_cpu * MAX_NODE_SCORE)], [float(info.score_memory * MAX_NODE_SCORE)]]
            self._pod = (info, np.array(pod))
        score = self._scratch.array("score", floats[2:4].shape, np.float64)
        np.subtract(floats[2:4], self._pod[1], out=score)
        # Where requests exceed allocatable the numerator is negative, and upstream scores 0.
        np.maximum(score, 0.0, out=score)
        np.divide(score, floats[0:2], out=score)
        # Non-negative quotients: conversion truncates, which is the floor of Go's integer division (to
        # int32, which numpy converts several times faster than to int64; the scores are 0..100).
        per_resource: Int32Array = self._scratch.array("per resource", score.shape, np.int32)
        np.copyto(per_resource, score, casting="unsafe")
        return _weighted(per_resource, weights)

    def _resource_score(
        self, requested: IntArray, allocatable: IntArray, present: BoolArray, exact_float: bool
    ) -> npt.NDArray[np.float64]:
        safe = np.where(present, allocatable, 1)

        def percent(amount: IntArray) -> npt.NDArray[np.float64]:
            if exact_float:
                return np.floor(amount * float(MAX_NODE_SCORE) / safe)
            quotient: IntArray = amount * MAX_NODE_SCORE // safe
            return quotient.astype(np.float64)

        over = requested > allocatable
        if self.strategy == "LeastAllocated":
            return np.where(over, 0.0, percent(allocatable - requested))
        if self.strategy == "MostAllocated":
            return percent(np.minimum(requested, allocatable))
        utilization = np.where(over, float(MAX_UTILIZATION), percent(requested))
        return broken_linear(self.shape_u, self.shape_s, utilization)


def broken_linear(
    utilizations: list[int], scores: list[int], utilization: npt.ArrayLike
) -> npt.NDArray[np.float64]:
    """helper.BuildBrokenLinearFunction over integer utilizations 0..100: the first point with p ≤ its
    utilization decides, interpolating from the point before it with Go's truncating division (exact in
    float64: every operand is a small integer)."""
    points = np.asarray(utilization, dtype=np.float64)
    result = np.full(len(points), float(scores[-1]))
    for i in range(len(utilizations) - 1, -1, -1):
        at_or_below = points <= utilizations[i]
        if i == 0:
            value: Any = float(scores[0])
        else:
            rise = (scores[i] - scores[i - 1]) * (points - utilizations[i - 1])
            value = scores[i - 1] + np.trunc(rise / (utilizations[i] - utilizations[i - 1]))
        result = np.where(at_or_below, value, result)
    return result


def _weighted(per_resource: npt.NDArray[IntT], weights: tuple[int, int]) -> npt.NDArray[IntT]:
    """Upstream's (s0·w0 + s1·w1) / (w0 + w1) in integers over a (2 × nodes) block of scores 0..100."""
    if weights[0] == weights[1]:
        # (s0·w + s1·w) / 2w = (s0 + s1) / 2: non-negative, so the shift is Go's division.
        both: npt.NDArray[IntT] = np.add(per_resource[0], per_resource[1], out=per_resource[0])
        both >>= 1
        return both
    node_score: npt.NDArray[IntT] = per_resource[0] * weights[0]
    node_score += per_resource[1] * weights[1]
    node_score //= weights[0] + weights[1]
    return node_score


def new(args: Args | None, handle: object) -> NodeResourcesFit:
    return NodeResourcesFit(args or Args())


def _lists_by_pattern(checks: list[tuple[str, npt.NDArray[np.bool_]]], count: int) -> list[list[str]]:
    """Per row, the reasons whose mask is set, in check order. Rows with the same failures share one list
    (callers read reasons, never change them)."""
    if count == 0:
        return []
    if len(checks) > 62:  # more than an int64 of patterns: row by row
        return [[reason for reason, mask in checks if mask[i]] for i in range(count)]
    codes = np.zeros(count, dtype=np.int64)
    for bit, (_, mask) in enumerate(checks):
        codes |= mask.astype(np.int64) << bit
    patterns, inverse = np.unique(codes, return_inverse=True)
    lists = [[reason for bit, (reason, _) in enumerate(checks) if int(code) >> bit & 1] for code in patterns]
    return [lists[i] for i in inverse.tolist()]
