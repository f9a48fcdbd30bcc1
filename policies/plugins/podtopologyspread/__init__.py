"""PodTopologySpread: kube-scheduler's pod topology spread constraints, filter and score (v1.36).

A pod's ``DoNotSchedule`` constraints filter (`filtering`), its ``ScheduleAnyway`` ones score
(`scoring`), both exactly as upstream: domains are the values of the topology key on the nodes that carry
every key of the pod's constraints and pass each constraint's inclusion policies (``nodeAffinityPolicy``
Honor by default: nodes failing the pod's node selector / required node affinity hold no domain;
``nodeTaintsPolicy`` Ignore by default: with Honor, nodes with a NoSchedule/NoExecute taint the pod does
not tolerate hold none), ``minDomains`` makes the global minimum 0 while fewer domains exist, and
``matchLabelKeys`` add ``key = <the pod's own value>`` to the selector for the keys the pod has (what the
API server's merge at creation gives since 1.34, and the scheduler's own before). Only pods in the
incoming pod's namespace count; an empty selector counts none (upstream skips Empty selectors) though the
pod matches it itself; a nil one counts none and matches nothing.

Default constraints (``defaultConstraints`` with ``defaultingType: List``, or the system defaults —
hostname maxSkew 3 and zone maxSkew 5, both ScheduleAnyway — with ``System``, the default) apply upstream
only to pods without constraints of their own, with the selector of the Services, ReplicationControllers,
ReplicaSets and StatefulSets that own or select them, ANDed (helper.DefaultSelector). The pod carries that
selector in ``default_spread_selector``: the watch bridge and ``eyrie explain`` with a cluster dump compute
it from those objects (`streams.kube.workloads`); a pod without one (or with an empty one) gets no default
constraints, as upstream a bare pod nothing selects. eyrie does not invent a selector from the pod's
``workload`` or labels, which would spread pods upstream leaves alone.

Counting is incremental: `policies.podlabels.PodLabelIndex` keeps, per constraint selector and namespace,
the matching pods per node row on every assume and forget; a decision is a few ``np.bincount`` over the
rows per constraint, never a loop over pods.

The profile's ``kubernetesVersion`` selects older behaviour where it changed: before 1.26 inclusion
policies are ignored (nodes failing the required node affinity never count, taints never matter), before
1.27 ``matchLabelKeys`` are ignored.
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes, no_scores
from policies.framework.profile import kubernetes_version_of
from policies.framework.status import SKIP, SUCCESS, Status
from policies.plugins.podtopologyspread.common import (
    SYSTEM_DEFAULT_CONSTRAINTS,
    Constraint,
    filter_constraints,
    with_selector,
)
from policies.plugins.podtopologyspread.filtering import (
    REASON_CONSTRAINTS_NOT_MATCH,
    REASON_NODE_LABEL_NOT_MATCH,
    ConstraintCounts,
    filter_failures,
    filter_passing,
    pre_filter_counts,
)
from policies.plugins.podtopologyspread.scoring import PreScoreState, final_scores, pre_score
from policies.podlabels import Selector
from schemas.base import LabelKey
from schemas.pod import PodRequest, TopologySpreadConstraint

__all__ = [
    "NAME",
    "REASON_CONSTRAINTS_NOT_MATCH",
    "REASON_NODE_LABEL_NOT_MATCH",
    "Args",
    "DefaultConstraint",
    "PodTopologySpread",
    "new",
]

NAME = "PodTopologySpread"


class DefaultConstraint(BaseModel):
    """One of ``defaultConstraints``: a TopologySpreadConstraint without a selector (each pod's default
    selector takes its place)."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    max_skew: int = Field(alias="maxSkew", ge=1, le=2**31 - 1)
    topology_key: LabelKey = Field(alias="topologyKey")
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = Field(alias="whenUnsatisfiable")
    min_domains: int | None = Field(default=None, alias="minDomains", ge=1, le=2**31 - 1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = Field(default=None, alias="nodeAffinityPolicy")
    node_taints_policy: Literal["Honor", "Ignore"] | None = Field(default=None, alias="nodeTaintsPolicy")
    match_label_keys: list[LabelKey] = Field(default_factory=list, alias="matchLabelKeys")
    label_selector: dict[str, Any] | None = Field(default=None, alias="labelSelector")

    @model_validator(mode="after")
    def _no_selector(self) -> DefaultConstraint:
        if self.label_selector is not None:
            raise ValueError(
                "labelSelector: constraint must not define a selector, as they deduced for each pod"
            )
        return self

    def to_constraint(self) -> TopologySpreadConstraint:
        return TopologySpreadConstraint(
            max_skew=self.max_skew,
            topology_key=self.topology_key,
            when_unsatisfiable=self.when_unsatisfiable,
            min_domains=self.min_domains,
            node_affinity_policy=self.node_affinity_policy,
            node_taints_policy=self.node_taints_policy,
            match_label_keys=self.match_label_keys,
        )


class Args(BaseModel):
    """PodTopologySpreadArgs, with upstream's defaults and validation."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    default_constraints: list[DefaultConstraint] = Field(default_factory=list, alias="defaultConstraints")
    """Constraints for pods without their own (with ``defaultingType: List``); each pod's default selector
    completes them (``default_spread_selector``; see the plugin's docstring)."""
    defaulting_type: Literal["System", "List"] = Field(default="System", alias="defaultingType")
    """``System``: the built-in defaults (hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) and
    ``defaultConstraints`` must be empty; ``List``: ``defaultConstraints``."""

    @model_validator(mode="after")
    def _check(self) -> Args:
        if self.defaulting_type == "System" and self.default_constraints:
            raise ValueError("defaultingType: System is invalid when .defaultConstraints are not empty")
        seen: set[tuple[str, str]] = set()
        for index, c in enumerate(self.default_constraints):
            pair = (c.topology_key, c.when_unsatisfiable)
            if pair in seen:
                raise ValueError(
                    f"defaultConstraints[{index}]: Duplicate value: "
                    f"{{{c.topology_key}, {c.when_unsatisfiable}}}"
                )
            seen.add(pair)
        return self


_HARD = "PodTopologySpread.hard"
_SOFT = "PodTopologySpread.soft"
_SKIPS = {
    (hard, soft): frozenset([*(("preFilter", "filter") if hard else ()), *(("score",) if soft else ())])
    for hard in (False, True)
    for soft in (False, True)
}


class PodTopologySpread:
    name = NAME
    skip_fields = ("topology_spread_constraints", "default_spread_selector")

    def __init__(self, args: Args, version: tuple[int, int]) -> None:
        self.args = args
        self.version = version
        self.system_defaulted = args.defaulting_type == "System"
        self.default_constraints: tuple[TopologySpreadConstraint, ...] = (
            SYSTEM_DEFAULT_CONSTRAINTS
            if self.system_defaulted
            else tuple(c.to_constraint() for c in args.default_constraints)
        )
        self._default_actions = {c.when_unsatisfiable for c in self.default_constraints}

    def default_selector(self, pod: PodRequest) -> Selector | None:
        """helper.DefaultSelector: the merged selectors of the Services, ReplicationControllers,
        ReplicaSets and StatefulSets of the pod, as the pod carries them (``default_spread_selector``);
        None when it carries none."""
        found = pod.default_spread_selector
        return None if found is None else Selector.of(found)

    def constraints(self, ctx: CycleContext, hard: bool) -> list[Constraint]:
        """getConstraints (DoNotSchedule) or initPreScoreState's (ScheduleAnyway), once per cycle."""
        slot = _HARD if hard else _SOFT
        found: list[Constraint] | None = ctx.state.get(slot)
        if found is not None:
            return found
        pod = ctx.pod
        action: Literal["DoNotSchedule", "ScheduleAnyway"] = "DoNotSchedule" if hard else "ScheduleAnyway"
        if pod.topology_spread_constraints:
            found = filter_constraints(pod.topology_spread_constraints, pod, action, self.version)
        else:
            # Without a default selector no default constraint applies: skip parsing them (most pods).
            selector = self.default_selector(pod) if self.default_constraints else None
            if selector is None or selector.empty:
                found = []
            else:
                found = filter_constraints(self.default_constraints, pod, action, self.version)
                found = with_selector(found, selector, pod.namespace) if found else []
        ctx.state[slot] = found
        return found

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        """Without DoNotSchedule constraints (the pod's own or defaults) PreFilter skips, and Filter with
        it; without ScheduleAnyway ones PreScore skips, and Score with it. A pod with constraints of its
        own is never skipped here (whether they include either kind is left to the stages)."""
        pod = ctx.pod
        if pod.topology_spread_constraints:
            return _SKIPS[False, False]
        defaulted = pod.default_spread_selector is not None
        return _SKIPS[
            not defaulted or "DoNotSchedule" not in self._default_actions,
            not defaulted or "ScheduleAnyway" not in self._default_actions,
        ]

    # ------------------------------------------------------------------------------------- filter

    def pre_filter(self, ctx: CycleContext) -> Status:
        constraints = self.constraints(ctx, hard=True)
        if not constraints:
            return SKIP
        pre_filter_counts(ctx, constraints)
        return SUCCESS

    def filter_counts(self, ctx: CycleContext) -> list[ConstraintCounts]:
        """PreFilter's per-domain counts of the pod's DoNotSchedule constraints (for tests and explain)."""
        return pre_filter_counts(ctx, self.constraints(ctx, hard=True))

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        constraints = self.constraints(ctx, hard=True)
        if not constraints:
            return None
        return filter_passing(ctx, constraints, nodes)

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        constraints = self.constraints(ctx, hard=True)
        if not constraints:
            return [[] for _ in range(len(nodes))]
        label, skew = [REASON_NODE_LABEL_NOT_MATCH], [REASON_CONSTRAINTS_NOT_MATCH]  # shared, read-only
        failures = filter_failures(ctx, constraints, nodes).tolist()
        return [label if f < 0 else skew if f > 0 else [] for f in failures]

    def unresolvable(self, ctx: CycleContext, nodes: IntArray) -> BoolArray:
        """Rows no eviction can open: those lacking a constraint's topology label (upstream's
        UnschedulableAndUnresolvable); a skew that is too large is resolvable (preemption may try)."""
        constraints = self.constraints(ctx, hard=True)
        if not constraints:
            return np.zeros(len(nodes), dtype=np.bool_)
        missing: BoolArray = filter_failures(ctx, constraints, nodes) < 0
        return missing

    # -------------------------------------------------------------------------------------- score

    def score_state(self, ctx: CycleContext, nodes: IntArray) -> PreScoreState | None:
        """PreScore's state for the candidates `nodes`; None when the pod has no ScheduleAnyway
        constraints (PreScore's Skip)."""
        constraints = self.constraints(ctx, hard=False)
        if not constraints or ctx.snapshot.size == 0:
            return None
        require_all = bool(ctx.pod.topology_spread_constraints) or not self.system_defaulted
        return pre_score(ctx, constraints, nodes, require_all)

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        state = self.score_state(ctx, nodes)
        if state is None:
            # PreScore's Skip: the plugin takes no part in any node's total.
            return no_scores(len(nodes))
        return final_scores(self.constraints(ctx, hard=False), state)


def new(args: Args | None, handle: object) -> PodTopologySpread:
    return PodTopologySpread(args or Args(), kubernetes_version_of(handle))
