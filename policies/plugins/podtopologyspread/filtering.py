"""PodTopologySpread's PreFilter and Filter (filtering.go), over all rows at once.

PreFilter counts, per DoNotSchedule constraint, the matching pods of every topology domain among the
nodes that carry *all* the constraints' keys and pass the constraint's inclusion policies (a domain counts
even with no pods); the global minimum is the least count, or 0 while fewer domains than ``minDomains``
exist. Filter then takes, per node and in constraint order, the first failure: the node lacks the key
(ErrReasonNodeLabelNotMatch, unresolvable), or domain count + (1 if the pod matches its own selector) −
minimum > maxSkew (ErrReasonConstraintsNotMatch).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.framework.contract import BoolArray, CycleContext, IntArray, Nodes
from policies.plugins.podtopologyspread.common import (
    Constraint,
    domain_codes,
    eligible_rows,
    row_counts,
)
from policies.plugins.podtopologyspread.nodekeys import NodeKeys
from policies.podlabels import PodLabelIndex

__all__ = [
    "REASON_CONSTRAINTS_NOT_MATCH",
    "REASON_NODE_LABEL_NOT_MATCH",
    "ConstraintCounts",
    "filter_failures",
    "filter_passing",
    "pre_filter_counts",
]

REASON_CONSTRAINTS_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
"""ErrReasonConstraintsNotMatch."""
REASON_NODE_LABEL_NOT_MATCH = REASON_CONSTRAINTS_NOT_MATCH + " (missing required label)"
"""ErrReasonNodeLabelNotMatch (UnschedulableAndUnresolvable upstream)."""

_STATE = "PodTopologySpread.preFilter"


@dataclass(frozen=True, slots=True)
class ConstraintCounts:
    """PreFilter's state for one constraint: TpValueToMatchNum as arrays by value id."""

    domains: BoolArray
    """Per value id: whether the value is a domain (some eligible node has it)."""
    matches: IntArray
    """Per value id: matching pods on the eligible nodes with that value."""
    min_match: int
    """minMatchNum: the global minimum the skew is measured from."""


def _count(ctx: CycleContext, constraint: Constraint, keys: tuple[str, ...]) -> ConstraintCounts:
    codes, size = domain_codes(ctx, constraint.topology_key)
    nodes = NodeKeys.of(ctx.snapshot)
    base = nodes.rows_with(ctx, keys)
    eligible = eligible_rows(ctx, constraint, base)
    if eligible is base:
        domains = nodes.domains(ctx, keys, constraint.topology_key)
    else:
        domains = np.bincount(codes[np.flatnonzero(eligible)], minlength=size) > 0
    # Only rows holding matching pods add to a count: a few among thousands, so sum over those alone.
    per_row = row_counts(ctx, constraint)
    occupied = np.flatnonzero(per_row)
    if len(occupied):
        occupied = occupied[eligible[occupied]]
    # Float sums of pod counts (far below 2^53) are exact.
    matches = np.bincount(codes[occupied], weights=per_row[occupied], minlength=size).astype(np.int64)
    count = int(np.count_nonzero(domains))
    min_match = int(matches[domains].min()) if count and count >= constraint.min_domains else 0
    return ConstraintCounts(domains, matches, min_match)


def pre_filter_counts(ctx: CycleContext, constraints: list[Constraint]) -> list[ConstraintCounts]:
    """calPreFilterState over every live row, kept for the cycle until a pod is assumed or forgotten
    (preemption's what-ifs do both within one cycle)."""
    generation = PodLabelIndex.of(ctx.snapshot).generation
    cached: tuple[int, int, list[ConstraintCounts]] | None = ctx.state.get(_STATE)
    if cached is not None and cached[0] == generation and cached[1] == ctx.snapshot.rows:
        return cached[2]
    keys = tuple(c.topology_key for c in constraints)
    counts = [_count(ctx, constraint, keys) for constraint in constraints]
    ctx.state[_STATE] = (generation, ctx.snapshot.rows, counts)
    return counts


def filter_failures(ctx: CycleContext, constraints: list[Constraint], nodes: Nodes) -> IntArray:
    """Per row of `nodes`: 0 where the pod may go, else the first failing constraint's index + 1, negated
    where the node lacks that constraint's key (the unresolvable reason)."""
    counts = pre_filter_counts(ctx, constraints)
    snapshot = ctx.snapshot
    failure = np.zeros(len(snapshot.live[nodes]), dtype=np.int64)
    # Last constraint first, so that the first failing one is what remains.
    for index in range(len(constraints) - 1, -1, -1):
        constraint, state = constraints[index], counts[index]
        column = snapshot.label_columns.get(constraint.topology_key)
        if column is None:
            failure[:] = -(index + 1)
            continue
        codes = column[nodes]
        self_match = 1 if constraint.matches(ctx.pod.labels) else 0
        # Per domain first (few), then per row only when some domain is too skewed; one slot more at the
        # end, False, which a missing key's -1 reads.
        too_skewed = state.matches > constraint.max_skew - self_match + state.min_match
        if too_skewed.any():
            failure[np.append(too_skewed, False).take(codes)] = index + 1
        missing = codes < 0
        if missing.any():
            failure[missing] = -(index + 1)
    return failure


def filter_passing(ctx: CycleContext, constraints: list[Constraint], nodes: Nodes) -> BoolArray:
    """``filter_failures(...) == 0`` (at least one constraint), read straight from per-domain answers:
    one gather of the rows per constraint."""
    counts = pre_filter_counts(ctx, constraints)
    snapshot = ctx.snapshot
    passing: BoolArray | None = None
    for constraint, state in zip(constraints, counts, strict=True):
        column = snapshot.label_columns.get(constraint.topology_key)
        if column is None:
            return np.zeros(len(snapshot.live[nodes]), dtype=np.bool_)
        self_match = 1 if constraint.matches(ctx.pod.labels) else 0
        # The extra last slot, False, is what a missing key's -1 reads: such a node fails.
        allowed = np.append(state.matches <= constraint.max_skew - self_match + state.min_match, False)
        ok = allowed.take(column[nodes])
        if passing is None:
            passing = ok
        else:
            passing &= ok
    assert passing is not None
    return passing
