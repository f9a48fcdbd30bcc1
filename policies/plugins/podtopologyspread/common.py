"""What filter and score share: constraints as kube-scheduler parses them, and the nodes they count.

A constraint's pods are counted per node row by `policies.podlabels.PodLabelIndex` (kept up to date on
every assume and forget); a topology domain is a value id of the constraint's key in the snapshot's label
columns. Summing the rows' counts per value id (`np.bincount`) gives upstream's TpValueToMatchNum without
reading a single pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray
from policies.plugins.nodeaffinity import term_matches
from policies.podlabels import CountKey, PodLabelIndex, PodMatcher, Selector, selector_matches
from schemas.pod import NodeSelectorTerm, PodRequest, TopologySpreadConstraint

__all__ = [
    "HOSTNAME",
    "INCLUSION_POLICIES_SINCE",
    "MATCH_LABEL_KEYS_SINCE",
    "SYSTEM_DEFAULT_CONSTRAINTS",
    "ZONE",
    "Constraint",
    "domain_codes",
    "eligible_rows",
    "filter_constraints",
    "has_all_keys",
    "row_counts",
    "with_selector",
]

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

INCLUSION_POLICIES_SINCE = (1, 26)
"""NodeInclusionPolicyInPodTopologySpread is on by default from this release (GA and locked from 1.33).
Before it, nodeAffinityPolicy and nodeTaintsPolicy are ignored: only nodes matching the pod's required node
affinity count, whatever their taints (the same as Honor / Ignore, the defaults)."""
MATCH_LABEL_KEYS_SINCE = (1, 27)
"""MatchLabelKeysInPodTopologySpread is on by default (beta) from this release; before it the keys are
ignored."""

SYSTEM_DEFAULT_CONSTRAINTS = (
    TopologySpreadConstraint(max_skew=3, topology_key=HOSTNAME, when_unsatisfiable="ScheduleAnyway"),
    TopologySpreadConstraint(max_skew=5, topology_key=ZONE, when_unsatisfiable="ScheduleAnyway"),
)
"""systemDefaultConstraints: what ``defaultingType: System`` applies to pods without constraints of their
own (and with a default selector)."""

Action = Literal["DoNotSchedule", "ScheduleAnyway"]


@dataclass(frozen=True, slots=True)
class Constraint:
    """topologySpreadConstraint: one constraint of the pod with its selector parsed and merged."""

    max_skew: int
    topology_key: str
    selector: Selector | None
    """None is a nil selector (matches no pod)."""
    min_domains: int
    honor_affinity: bool
    honor_taints: bool
    key: CountKey
    """The pods this constraint counts: its selector within the incoming pod's namespace."""

    @property
    def counts_nothing(self) -> bool:
        """countPodsMatchSelector answers 0 for an empty selector (labels.Everything is Empty) as for nil."""
        return self.selector is None or self.selector.empty

    def matches(self, labels: dict[str, str]) -> bool:
        return selector_matches(self.selector, labels)


def filter_constraints(
    constraints: tuple[TopologySpreadConstraint, ...] | list[TopologySpreadConstraint],
    pod: PodRequest,
    action: Action,
    version: tuple[int, int],
) -> list[Constraint]:
    """filterTopologySpreadConstraints: the constraints with `action`, in order, with ``matchLabelKeys``
    merged into the selector (key = the pod's own value, for the keys it has; a nil selector stays nil,
    as both the API server's merge and the scheduler's leave it) and nil policies defaulted (Honor,
    Ignore)."""
    result: list[Constraint] = []
    policies_on = version >= INCLUSION_POLICIES_SINCE
    for c in constraints:
        if c.when_unsatisfiable != action:
            continue
        selector: Selector | None = None
        if c.label_selector is not None:
            extra: list[tuple[str, str, tuple[str, ...]]] = []
            if version >= MATCH_LABEL_KEYS_SINCE:
                extra = [(k, "In", (pod.labels[k],)) for k in c.match_label_keys if k in pod.labels]
            selector = Selector.of(c.label_selector, extra)
        honor_affinity = not policies_on or c.node_affinity_policy in (None, "Honor")
        honor_taints = policies_on and c.node_taints_policy == "Honor"
        result.append(
            Constraint(
                max_skew=c.max_skew,
                topology_key=c.topology_key,
                selector=selector,
                min_domains=c.min_domains or 1,
                honor_affinity=honor_affinity,
                honor_taints=honor_taints,
                key=(PodMatcher(selector, frozenset((pod.namespace,))),),
            )
        )
    return result


def with_selector(constraints: list[Constraint], selector: Selector, namespace: str) -> list[Constraint]:
    """buildDefaultConstraints: the default constraints all take the pod's default selector."""
    key: CountKey = (PodMatcher(selector, frozenset((namespace,))),)
    return [
        Constraint(c.max_skew, c.topology_key, selector, c.min_domains, c.honor_affinity, c.honor_taints, key)
        for c in constraints
    ]


def row_counts(ctx: CycleContext, constraint: Constraint) -> IntArray:
    """Pods the constraint counts, per row (`snapshot.rows` long)."""
    rows = ctx.snapshot.rows
    if constraint.counts_nothing:
        return np.zeros(rows, dtype=np.int64)
    return PodLabelIndex.of(ctx.snapshot).counts(constraint.key)[:rows]


def has_all_keys(ctx: CycleContext, keys: list[str], nodes: IntArray | slice) -> BoolArray:
    """nodeLabelsMatchSpreadConstraints for the rows in `nodes`."""
    columns = ctx.snapshot.label_columns
    first = columns.get(keys[0]) if keys else None
    if keys and first is None:
        return np.zeros(len(ctx.snapshot.live[nodes]), dtype=np.bool_)
    has: BoolArray = (
        first[nodes] >= 0 if first is not None else np.ones(len(ctx.snapshot.live[nodes]), dtype=np.bool_)
    )
    for key in keys[1:]:
        column = columns.get(key)
        if column is None:
            return np.zeros(len(has), dtype=np.bool_)
        has &= column[nodes] >= 0
    return has


def _required_affinity(ctx: CycleContext) -> BoolArray | None:
    """GetRequiredNodeAffinity(pod).Match over all rows: the node selector and the required terms (not the
    profile's addedAffinity); None when the pod has neither. Kept for the cycle: it reads nodes only."""
    pod, snapshot = ctx.pod, ctx.snapshot
    if not pod.node_selector and not pod.node_affinity:
        return None
    cached: BoolArray | None = ctx.state.get(_AFFINITY)
    if cached is not None and len(cached) == snapshot.rows:
        return cached
    from policies.plugins.podtopologyspread.nodekeys import NodeKeys  # nodekeys imports this module

    # Replicas share their affinity: keep the mask across cycles, until a node changes.
    key = ("requiredNodeAffinity", tuple(sorted(pod.node_selector.items())), _terms_key(pod.node_affinity))
    fits = NodeKeys.of(snapshot).remember(snapshot, key, lambda: _match_required_affinity(ctx))
    ctx.state[_AFFINITY] = fits
    return fits


def _terms_key(terms: list[NodeSelectorTerm]) -> tuple[object, ...]:
    """The terms as a hashable value: equal terms, one key."""
    return tuple(
        tuple(
            tuple((r.key, r.operator, tuple(r.values)) for r in part)
            for part in (t.match_expressions, t.match_fields)
        )
        for t in terms
    )


def _match_required_affinity(ctx: CycleContext) -> BoolArray:
    pod, snapshot = ctx.pod, ctx.snapshot
    rows = slice(0, snapshot.rows)
    fits = np.ones(snapshot.rows, dtype=np.bool_)
    for key, value in pod.node_selector.items():
        column = snapshot.label_columns.get(key)
        if column is None:
            fits[:] = False
            break
        fits &= column[rows] == snapshot.label_value_id(key, value)
    if pod.node_affinity:
        any_term = np.zeros(snapshot.rows, dtype=np.bool_)
        for term in pod.node_affinity:
            any_term |= term_matches(snapshot, term, rows)
        fits &= any_term
    return fits


_AFFINITY = "PodTopologySpread.requiredNodeAffinity"


def eligible_rows(ctx: CycleContext, constraint: Constraint, base: BoolArray) -> BoolArray:
    """`base` (live rows with the keys required) narrowed by matchNodeInclusionPolicies: with Honor, nodes
    that fail the pod's required node affinity, or carry a NoSchedule/NoExecute taint it does not tolerate,
    hold no domain of the constraint and their pods are not counted."""
    eligible = base
    if constraint.honor_affinity:
        affinity = _required_affinity(ctx)
        if affinity is not None:
            eligible = eligible & affinity
    if constraint.honor_taints:
        snapshot = ctx.snapshot
        hard, _ = snapshot.untolerated_taints(ctx.pod.tolerations)
        if any(hard):
            eligible = eligible & (snapshot.taint_counts(hard)[: snapshot.rows] == 0)
    return eligible


def domain_codes(ctx: CycleContext, key: str) -> tuple[IntArray, int]:
    """The key's value id per row (`snapshot.rows` long; -1 where absent) and the number of value ids."""
    snapshot = ctx.snapshot
    column = snapshot.label_columns.get(key)
    if column is None:
        return np.full(snapshot.rows, -1, dtype=np.int64), 0
    return column[: snapshot.rows], len(snapshot.label_vocab.get(key, ()))
