"""PodTopologySpread's PreScore, Score and NormalizeScore (scoring.go), over the candidate nodes at once.

PreScore, per ScheduleAnyway constraint: candidates lacking any constraint's key are ignored (unless the
constraints are the system defaults, so that nodes without a zone still spread by hostname); the domains
are the values the other candidates have, and each counts the matching pods of every node (all nodes, not
only candidates) with that value that carries the keys and passes the constraint's inclusion policies.
The constraint's weight is ln(domains + 2) (for hostname, the candidates not ignored stand for the
domains, and a node's own pods are its count).

Score: Σ over the constraints whose key the node has of count × weight + (maxSkew − 1), in Go's float
order, rounded half away from zero. NormalizeScore: ignored nodes 0; all others 100 when the highest
score is 0, else 100 × (max + min − score) / max in integers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, CycleContext, IntArray
from policies.plugins.podtopologyspread.common import (
    HOSTNAME,
    Constraint,
    domain_codes,
    eligible_rows,
    row_counts,
)
from policies.plugins.podtopologyspread.nodekeys import NodeKeys

__all__ = [
    "PreScoreState",
    "final_scores",
    "go_log",
    "go_round",
    "normalize",
    "pre_score",
    "raw_scores",
    "topology_normalizing_weight",
]

FloatArray = npt.NDArray[np.float64]


# Go's math.Log (log.go; log_amd64.s computes the same, operation for operation), which is not always the
# correctly rounded logarithm the C library gives: ln 3 is one ulp below it. Weights must be Go's bit for
# bit, or a score sitting on .5 rounds the other way.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_L1 = 6.666666666666735130e-01
_L2 = 3.999999999940941908e-01
_L3 = 2.857142874366239149e-01
_L4 = 2.222219843214978396e-01
_L5 = 1.818357216161805012e-01
_L6 = 1.531383769920937332e-01
_L7 = 1.479819860511658591e-01
_HALF_SQRT2 = 7.07106781186547524401e-01


def go_log(x: float) -> float:
    """Go's math.Log for finite x > 0."""
    f1, ki = math.frexp(x)
    if f1 < _HALF_SQRT2:
        f1 *= 2
        ki -= 1
    f = f1 - 1
    k = float(ki)
    s = f / (2 + f)
    s2 = s * s
    s4 = s2 * s2
    t1 = s2 * (_L1 + s4 * (_L3 + s4 * (_L5 + s4 * _L7)))
    t2 = s4 * (_L2 + s4 * (_L4 + s4 * _L6))
    r = t1 + t2
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f)


def topology_normalizing_weight(size: int) -> float:
    """topologyNormalizingWeight: ln(size + 2), as Go computes it."""
    return go_log(float(size + 2))


def go_round(values: FloatArray) -> IntArray:
    """Go's math.Round (half away from zero) for non-negative values. ``x − floor(x)`` is exact in binary
    floating point, so the comparison with 0.5 decides as Go does (``floor(x + 0.5)`` would not, for the
    double just below 0.5)."""
    floor = np.floor(values)
    rounded: IntArray = (floor + (values - floor >= 0.5)).astype(np.int64)
    return rounded


@dataclass(frozen=True, slots=True)
class PreScoreState:
    """preScoreState for the candidate nodes, as arrays aligned with them."""

    ignored: BoolArray
    """IgnoredNodes: candidates lacking one of the keys (only when all keys are required)."""
    counts: list[IntArray]
    """Per constraint, the count each candidate's domain scores with (its own pods for hostname)."""
    has_key: list[BoolArray]
    """Per constraint, whether each candidate carries its key (Score skips the constraint otherwise)."""
    domains: list[dict[int, int]]
    """Per non-hostname constraint, TopologyValueToPodCounts by value id (-1 for nodes without the key,
    which only the system defaults keep); empty for hostname constraints."""
    weights: list[float]
    """TopologyNormalizingWeight per constraint."""


def pre_score(
    ctx: CycleContext, constraints: list[Constraint], nodes: IntArray, require_all: bool
) -> PreScoreState:
    snapshot = ctx.snapshot
    everything = slice(0, snapshot.rows)
    keys = [c.topology_key for c in constraints]
    if require_all:
        base = NodeKeys.of(snapshot).rows_with(ctx, tuple(keys))
        ignored = ~base[nodes]  # candidates are live rows: carrying the keys is all `base` adds for them
    else:
        ignored = np.zeros(len(nodes), dtype=np.bool_)
        base = snapshot.live[everything]
    scored = nodes[~ignored]
    counts: list[IntArray] = []
    has_key: list[BoolArray] = []
    domains: list[dict[int, int]] = []
    weights: list[float] = []
    for constraint in constraints:
        codes, size = domain_codes(ctx, constraint.topology_key)
        node_codes = codes[nodes]
        has_key.append(node_codes >= 0)
        per_row = row_counts(ctx, constraint)
        if constraint.topology_key == HOSTNAME:
            counts.append(per_row[nodes])
            domains.append({})
            weights.append(topology_normalizing_weight(len(scored)))
            continue
        # A node without the key reads the value "" (only reachable when not all keys are required): it
        # shares the domain of nodes labelled with the empty value, or has one of its own (the extra slot).
        empty = ctx.snapshot.label_vocab.get(constraint.topology_key, {}).get("", size)
        present = np.zeros(size + 1, dtype=np.bool_)
        present[_or_empty(codes[scored], empty)] = True
        # Only rows holding matching pods add to a count: a few among thousands, so sum over those alone.
        occupied = np.flatnonzero(per_row)
        occupied = occupied[eligible_rows(ctx, constraint, base)[occupied]]
        sums = np.bincount(
            _or_empty(codes[occupied], empty), weights=per_row[occupied], minlength=size + 1
        ).astype(np.int64)
        counts.append(sums[_or_empty(node_codes, empty)])
        values = np.flatnonzero(present)
        domains.append({(int(v) if v < size else -1): int(sums[v]) for v in values.tolist()})
        weights.append(topology_normalizing_weight(len(values)))
    return PreScoreState(ignored, counts, has_key, domains, weights)


def _or_empty(codes: IntArray, empty: int) -> IntArray:
    """Value ids with `empty` where the key is absent (-1)."""
    filled: IntArray = np.where(codes >= 0, codes, empty)
    return filled


def raw_scores(constraints: list[Constraint], state: PreScoreState) -> IntArray:
    """Score per candidate before normalizing (0 for ignored ones)."""
    total = np.zeros(len(state.ignored))
    for i, constraint in enumerate(constraints):
        term = state.counts[i] * state.weights[i] + float(constraint.max_skew - 1)
        has_key = state.has_key[i]
        # Go adds nothing for a key the node lacks; where every node has it, skip the select.
        total = total + (term if has_key.all() else np.where(has_key, term, 0.0))
    scores = go_round(total)
    scores[state.ignored] = 0
    return scores


def final_scores(constraints: list[Constraint], state: PreScoreState) -> IntArray:
    """``normalize(raw_scores(constraints, state), state.ignored)``. Where one constraint scores every
    candidate (the common case), a score depends on the node's count alone, and counts take a handful of
    values among thousands of nodes: the same float and integer operations run once per count, and each
    node reads its count's score."""
    if len(constraints) != 1 or len(state.ignored) == 0:
        return normalize(raw_scores(constraints, state), state.ignored)
    counts, weight = state.counts[0], state.weights[0]
    low_count, high_count = int(counts.min()), int(counts.max())
    if (
        weight <= 0
        or low_count < 0
        or high_count - low_count > len(counts)
        or state.ignored.any()
        or not state.has_key[0].all()
    ):
        return normalize(raw_scores(constraints, state), state.ignored)
    values = np.arange(low_count, high_count + 1, dtype=np.int64)
    # As raw_scores: 0 + (count × weight + (maxSkew − 1)), rounded; increasing with the count (weight > 0),
    # so the lowest and highest counts give the lowest and highest scores.
    raw = go_round(np.zeros(len(values)) + (values * weight + float(constraints[0].max_skew - 1)))
    low, high = int(raw[0]), int(raw[-1])
    if high == 0:
        return np.full(len(counts), MAX_NODE_SCORE, dtype=np.int64)
    table: IntArray = MAX_NODE_SCORE * (high + low - raw) // high
    return table.take(counts if low_count == 0 else counts - low_count)


def normalize(scores: IntArray, ignored: BoolArray) -> IntArray:
    """NormalizeScore."""
    result = np.zeros(len(scores), dtype=np.int64)
    kept = scores[~ignored]
    if len(kept) == 0:
        return result
    low, high = int(kept.min()), int(kept.max())
    if high == 0:
        result[~ignored] = MAX_NODE_SCORE
        return result
    result[~ignored] = MAX_NODE_SCORE * (high + low - kept) // high
    return result
