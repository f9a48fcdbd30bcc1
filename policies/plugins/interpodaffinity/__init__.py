"""InterPodAffinity: kube-scheduler's inter-pod affinity and anti-affinity, filter and score (v1.36).

Filter, per node, in upstream's order (the first failure is the reason):

- the incoming pod's required affinity: every term's topology key is on the node, and the node's domain of
   each holds a pod matching *all* the terms; unless no such pod sits in any domain at all and the pod
   matches its own terms (the first pod of a group may go anywhere that has the keys);
- its required anti-affinity: no term's domain around the node holds a pod matching that term;
- existing pods' required anti-affinity (symmetry): no existing pod whose term matches the incoming pod
   shares the term's domain with the node.

Score: per topology domain, the weights of the incoming pod's preferred terms (plus for affinity, minus for
anti-affinity) times the pods matching them there, plus existing pods' required affinity terms that match
the incoming pod (times ``hardPodAffinityWeight``) and their preferred terms (plus or minus their weight);
a node scores the sum over its domains, and NormalizeScore maps the candidates min..max to 0..100 (all
equal: 0). ``ignorePreferredTermsOfExistingPods`` skips scoring for pods without preferred terms.

Terms read namespaces as upstream: none given and no namespace selector means the pod's own namespace; a
namespace selector matches the labels of the namespace (`PodLabelIndex.namespace_labels`, from the pods
seen). ``matchLabelKeys`` and ``mismatchLabelKeys`` add the pod's own label values to the selector (In,
NotIn), as the API server does from Kubernetes 1.31 (the profile's ``kubernetesVersion``).

Counting is incremental (`policies.podlabels`, `.existing`): a decision costs numpy work over the nodes for
each term involved and a check of the incoming pod against the distinct terms existing pods carry.
"""

from __future__ import annotations

import weakref

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.framework.contract import (
    MAX_NODE_SCORE,
    BoolArray,
    CycleContext,
    IntArray,
    Nodes,
    no_scores,
    node_count,
)
from policies.framework.profile import kubernetes_version_of
from policies.plugins.interpodaffinity.existing import (
    PREFERRED,
    REQUIRED_AFFINITY,
    REQUIRED_ANTI_AFFINITY,
    ExistingTerms,
)
from policies.podlabels import PodLabelIndex, PodMatcher, term_matcher
from policies.snapshot import Snapshot
from schemas.pod import PodAffinityTerm, PodRequest

__all__ = [
    "NAME",
    "REASON_AFFINITY",
    "REASON_ANTI_AFFINITY",
    "REASON_EXISTING_ANTI_AFFINITY",
    "Args",
    "InterPodAffinity",
    "min_max_normalize",
    "new",
]

NAME = "InterPodAffinity"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
"""ErrReasonExistingAntiAffinityRulesNotMatch."""
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
"""ErrReasonAffinityRulesNotMatch (UnschedulableAndUnresolvable upstream)."""
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
"""ErrReasonAntiAffinityRulesNotMatch."""

_MATCH_LABEL_KEYS_SINCE = (1, 31)
"""MatchLabelKeysInPodAffinity is on by default (beta) from this release; before it the keys are ignored."""
_STATE = "InterPodAffinity.filter"
_SKIPS = {
    (filter_, score): frozenset([*(("filter",) if filter_ else ()), *(("score",) if score else ())])
    for filter_ in (False, True)
    for score in (False, True)
}


class Args(BaseModel):
    """InterPodAffinityArgs, with upstream's defaults and validation."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    hard_pod_affinity_weight: int = Field(default=1, ge=0, le=100, alias="hardPodAffinityWeight")
    """The score an existing pod's required affinity term that matches the incoming pod gives its domain."""
    ignore_preferred_terms_of_existing_pods: bool = Field(
        default=False, alias="ignorePreferredTermsOfExistingPods"
    )
    """Skip scoring altogether for incoming pods without preferred terms of their own."""


def _domain_flags(snapshot: Snapshot, key: str, per_row: IntArray) -> BoolArray:
    """Per value id of label `key` (one extra False slot last, which absent labels' -1 reads): whether a
    row with that value has a positive amount."""
    flags = np.zeros(len(snapshot.label_vocab.get(key, ())) + 1, dtype=np.bool_)
    column = snapshot.label_columns.get(key)
    if column is None:
        return flags
    rows = np.flatnonzero(per_row[: snapshot.rows] > 0)
    codes = column[rows]
    flags[codes[codes >= 0]] = True
    return flags


def _domain_sums(snapshot: Snapshot, key: str, per_row: IntArray) -> IntArray:
    """Per value id of label `key` (plus the extra zero slot last): the sum of `per_row` over its rows."""
    size = len(snapshot.label_vocab.get(key, ())) + 1
    column = snapshot.label_columns.get(key)
    if column is None:
        return np.zeros(size, dtype=np.int64)
    rows = np.flatnonzero(per_row[: snapshot.rows])
    codes = column[rows]
    present = codes >= 0
    # Float sums of integers far below 2^53 are exact.
    sums = np.bincount(codes[present], weights=per_row[rows[present]], minlength=size)
    return sums.astype(np.int64)


def min_max_normalize(raw: IntArray) -> IntArray:
    """InterPodAffinity's NormalizeScore: 100 × (s − min) / (max − min) in Go's float order, truncated;
    0 everywhere when all are equal."""
    if len(raw) == 0:
        return raw
    low, high = int(raw.min()), int(raw.max())
    if high == low:
        return np.zeros(len(raw), dtype=np.int64)
    fraction = (raw - low).astype(np.float64) / float(high - low)
    scores: IntArray = (float(MAX_NODE_SCORE) * fraction).astype(np.int64)
    return scores


class _FilterState:
    """PreFilter's result: per topology key, which domains pass or fail each check."""

    __slots__ = ("affinity", "affinity_keys", "anti", "existing", "first_of_group")

    def __init__(self) -> None:
        self.affinity_keys: list[str] = []
        self.affinity: list[tuple[str, BoolArray]] = []
        """Per required affinity term: its key and the domains holding a pod that matches all terms."""
        self.first_of_group = False
        """No domain holds such a pod and the pod matches its own terms: only the keys are required."""
        self.anti: dict[str, BoolArray] = {}
        """Per key of the pod's anti-affinity terms: domains holding a pod that matches one of them."""
        self.existing: dict[str, BoolArray] = {}
        """Per key: domains an existing pod's anti-affinity term matching the incoming pod forbids."""


class InterPodAffinity:
    name = NAME
    skip_fields = ("pod_affinity", "pod_anti_affinity")

    def __init__(self, args: Args, merge_label_keys: bool) -> None:
        self.args = args
        self.merge_label_keys = merge_label_keys
        self._existing: tuple[weakref.ref[Snapshot], ExistingTerms] | None = None

    def _existing_terms(self, snapshot: Snapshot) -> ExistingTerms:
        """`ExistingTerms.of` the snapshot, kept at hand: filter and score ask for it in every cycle."""
        kept = self._existing
        if kept is not None and kept[0]() is snapshot:
            return kept[1]
        existing = ExistingTerms.of(snapshot, self.merge_label_keys)
        self._existing = (weakref.ref(snapshot), existing)
        return existing

    # ------------------------------------------------------------------------------------- skip

    def skip_key(self, snapshot: Snapshot) -> int:
        """`skips` reads only the pod and which kinds of terms existing pods carry."""
        return self._existing_terms(snapshot).kinds

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        """For a pod without (anti-)affinity: PreFilter's Skip (Filter is not called) while no existing
        pod carries required anti-affinity, PreScore's while `raw_scores` would skip it outright."""
        pod = ctx.pod
        if pod.pod_affinity is not None or pod.pod_anti_affinity is not None:
            return _SKIPS[False, False]
        existing = self._existing_terms(ctx.snapshot)
        filter_ = not existing.carries(REQUIRED_ANTI_AFFINITY)
        score = self.args.ignore_preferred_terms_of_existing_pods or (
            not existing.carries(PREFERRED)
            and not (self.args.hard_pod_affinity_weight > 0 and existing.carries(REQUIRED_AFFINITY))
        )
        return _SKIPS[filter_, score]

    # ------------------------------------------------------------------------------------ terms

    def _matchers(self, pod: PodRequest, terms: list[PodAffinityTerm]) -> list[tuple[PodMatcher, str]]:
        return [(term_matcher(t, pod, merge_label_keys=self.merge_label_keys), t.topology_key) for t in terms]

    # ----------------------------------------------------------------------------------- filter

    def _filter_state(self, ctx: CycleContext) -> _FilterState | None:
        """Computed once per cycle; None when the plugin has nothing to check (PreFilter's Skip)."""
        snapshot, pod = ctx.snapshot, ctx.pod
        existing = self._existing_terms(snapshot)
        if (
            (pod.pod_affinity is None or not pod.pod_affinity.required)
            and (pod.pod_anti_affinity is None or not pod.pod_anti_affinity.required)
            and not existing.carries(REQUIRED_ANTI_AFFINITY)
        ):
            return None  # the common case, decided without a look at any pod
        pods = PodLabelIndex.of(snapshot)
        cached: tuple[int, _FilterState | None] | None = ctx.state.get(_STATE)
        if cached is not None and cached[0] == pods.generation:
            return cached[1]
        pods.see_namespace(pod)
        state = _FilterState()
        namespace_labels = dict(pods.labels_of_namespace(pod.namespace))
        blocked: dict[str, IntArray] = {}
        for key, amounts in existing.matching(REQUIRED_ANTI_AFFINITY, pod, namespace_labels):
            blocked[key] = amounts if key not in blocked else blocked[key] + amounts
        for key, amounts in blocked.items():
            flags = _domain_flags(snapshot, key, amounts)
            if flags.any():  # upstream's counts have no entry for pods on nodes without the key
                state.existing[key] = flags
        affinity = self._matchers(pod, pod.pod_affinity.required) if pod.pod_affinity else []
        anti = self._matchers(pod, pod.pod_anti_affinity.required) if pod.pod_anti_affinity else []
        if not state.existing and not affinity and not anti:
            ctx.state[_STATE] = (pods.generation, None)
            return None
        if affinity:
            together = tuple(matcher for matcher, _ in affinity)
            counts = pods.counts(together)
            state.affinity_keys = [key for _, key in affinity]
            state.affinity = [(key, _domain_flags(snapshot, key, counts)) for key in state.affinity_keys]
            # Upstream's affinityCounts is empty when no matching pod sits on a node with any of the keys.
            anywhere = any(flags.any() for _, flags in state.affinity)
            state.first_of_group = not anywhere and pods.matches(together, pod)
        for matcher, key in anti:
            flags = _domain_flags(snapshot, key, pods.counts((matcher,)))
            state.anti[key] = flags if key not in state.anti else state.anti[key] | flags
        ctx.state[_STATE] = (pods.generation, state)
        return state

    @staticmethod
    def _column(snapshot: Snapshot, key: str, nodes: Nodes) -> IntArray:
        column = snapshot.label_columns.get(key)
        if column is None:
            return np.full(node_count(nodes), -1, dtype=np.int64)
        return column[nodes]

    def _checks(self, ctx: CycleContext, nodes: Nodes) -> tuple[BoolArray, BoolArray, BoolArray] | None:
        """(affinity, anti-affinity, existing pods' anti-affinity) pass per node; None: all pass."""
        state = self._filter_state(ctx)
        if state is None:
            return None
        snapshot = ctx.snapshot
        count = node_count(nodes)
        columns: dict[str, IntArray] = {}

        def column(key: str) -> IntArray:
            found = columns.get(key)
            if found is None:
                found = columns[key] = self._column(snapshot, key, nodes)
            return found

        affinity_ok = np.ones(count, dtype=np.bool_)
        if state.affinity:
            pods_exist = np.ones(count, dtype=np.bool_)
            for key, flags in state.affinity:
                values = column(key)
                affinity_ok &= values >= 0
                pods_exist &= flags[values]
            if not state.first_of_group:
                affinity_ok &= pods_exist
        anti_ok = np.ones(count, dtype=np.bool_)
        for key, flags in state.anti.items():
            anti_ok &= ~flags[column(key)]
        existing_ok = np.ones(count, dtype=np.bool_)
        for key, flags in state.existing.items():
            existing_ok &= ~flags[column(key)]
        return affinity_ok, anti_ok, existing_ok

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        state = self._filter_state(ctx)
        if state is None:
            return None
        if state.affinity:
            checks = self._checks(ctx, nodes)
            assert checks is not None
            affinity_ok, anti_ok, existing_ok = checks
            passing: BoolArray = affinity_ok & anti_ok & existing_ok
            return passing
        # Anti-affinity alone (the common case): the domains barred by the pod's terms and by existing
        # pods' terms, merged per key, then one read of the rows per key (the extra last slot, False,
        # is what a missing key's -1 reads).
        barred: dict[str, BoolArray] = {}
        for key, flags in (*state.anti.items(), *state.existing.items()):
            barred[key] = flags if key not in barred else barred[key] | flags
        passing = np.ones(node_count(nodes), dtype=np.bool_)
        for key, flags in barred.items():
            passing &= ~flags.take(self._column(ctx.snapshot, key, nodes))
        return passing

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        checks = self._checks(ctx, nodes)
        if checks is None:
            return [[] for _ in range(len(nodes))]
        affinity_ok, anti_ok, _ = checks
        affinity, anti, existing = [REASON_AFFINITY], [REASON_ANTI_AFFINITY], [REASON_EXISTING_ANTI_AFFINITY]
        return [
            affinity if not a else anti if not b else existing
            for a, b in zip(affinity_ok.tolist(), anti_ok.tolist(), strict=True)
        ]

    def unresolvable(self, ctx: CycleContext, nodes: IntArray) -> BoolArray:
        """Rows no eviction can open: where the pod's required affinity is unmet (upstream's
        UnschedulableAndUnresolvable); anti-affinity, the pod's or existing pods', evictions may lift."""
        checks = self._checks(ctx, nodes)
        if checks is None:
            return np.zeros(len(nodes), dtype=np.bool_)
        affinity_ok, _, _ = checks
        blocked: BoolArray = ~affinity_ok
        return blocked

    # ------------------------------------------------------------------------------------ score

    def raw_scores(self, ctx: CycleContext, nodes: IntArray) -> IntArray | None:
        """Upstream's Score before NormalizeScore; None when PreScore would skip (every node then 0)."""
        snapshot, pod = ctx.snapshot, ctx.pod
        preferred = pod.pod_affinity.preferred if pod.pod_affinity else []
        preferred_anti = pod.pod_anti_affinity.preferred if pod.pod_anti_affinity else []
        if self.args.ignore_preferred_terms_of_existing_pods and not preferred and not preferred_anti:
            return None
        existing = self._existing_terms(snapshot)
        hard = self.args.hard_pod_affinity_weight
        if (
            not preferred
            and not preferred_anti
            and not existing.carries(PREFERRED)
            and not (hard > 0 and existing.carries(REQUIRED_AFFINITY))
        ):
            return None
        pods = PodLabelIndex.of(snapshot)
        pods.see_namespace(pod)
        per_key: dict[str, IntArray] = {}

        def add(key: str, per_row: IntArray, weight: int) -> None:
            sums = _domain_sums(snapshot, key, per_row)
            if weight != 1:
                sums *= weight
            if key in per_key:
                per_key[key] += sums
            else:
                per_key[key] = sums

        for terms, sign in ((preferred, 1), (preferred_anti, -1)):
            for weighted in terms:
                term = weighted.pod_affinity_term
                matcher = term_matcher(term, pod, merge_label_keys=self.merge_label_keys)
                add(term.topology_key, pods.counts((matcher,)), sign * weighted.weight)
        namespace_labels = dict(pods.labels_of_namespace(pod.namespace))
        if hard > 0:
            for key, amounts in existing.matching(REQUIRED_AFFINITY, pod, namespace_labels):
                add(key, amounts, hard)
        for key, amounts in existing.matching(PREFERRED, pod, namespace_labels):
            add(key, amounts, 1)
        if not per_key:
            return None
        raw = np.zeros(len(nodes), dtype=np.int64)
        for key, sums in per_key.items():
            raw += sums[self._column(snapshot, key, nodes)]
        return raw

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        raw = self.raw_scores(ctx, nodes)
        if raw is None:
            return no_scores(len(nodes))
        return min_max_normalize(raw)


def new(args: Args | None, handle: object) -> InterPodAffinity:
    merge = kubernetes_version_of(handle) >= _MATCH_LABEL_KEYS_SINCE
    return InterPodAffinity(args or Args(), merge_label_keys=merge)
