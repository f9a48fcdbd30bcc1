"""NodeAffinity as kube-scheduler v1.36 runs it.

Filter: the pod's node selector and required node-affinity terms (terms ORed, a term's expressions and
fields ANDed; an empty term matches nothing), after the profile's ``addedAffinity`` required terms, which
every pod must also satisfy. PreFilter: required terms that each pin ``metadata.name`` to node names no
term shares leave no node at all. Score: the weights of the preferred terms a node matches, the pod's and
``addedAffinity``'s, summed and scaled by DefaultNormalizeScore to 0..100. Terms match labels through the
snapshot's label columns, ``matchFields`` (``metadata.name``) through its node index.

Parsing is upstream's (``labels.NewRequirement``, the field selector's): a label key must be a qualified
name, every value a label value, a ``Gt``/``Lt`` value a base-10 int64, and a ``matchFields`` In/NotIn
exactly one value. A required term that does not parse matches no node (upstream ignores the error there),
and ``Gt``/``Lt`` compare a node's label as Go's ``strconv.ParseInt`` reads it (no match when it cannot).
``addedAffinity`` that does not parse fails when the profile loads, as upstream's args validation does; its
preferred weights are any int32 (0 drops the term) except negative ones, which are refused: upstream would
pass negative scores on and fail every pod whose candidates match such a term.

One difference, on purpose: a pod's preferred term that does not parse makes upstream's PreScore return an
error, and the pod then fails its cycle whenever two or more nodes pass the filters (with one, scoring is
skipped). eyrie has no PreScore error path; such a term counts for no node and the pod is scored by the rest.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.framework.contract import (
    BoolArray,
    CycleContext,
    IntArray,
    Nodes,
    no_scores,
    node_count,
    node_rows,
)
from policies.framework.status import SUCCESS, Status
from policies.plugins.noderesources.common import default_normalize
from policies.snapshot import Snapshot
from schemas.pod import NodeSelectorRequirement, NodeSelectorTerm

__all__ = [
    "NAME",
    "REASON",
    "REASON_CONFLICT",
    "REASON_ENFORCED",
    "AddedAffinity",
    "Args",
    "NodeAffinity",
    "new",
    "term_matches",
]

NAME = "NodeAffinity"
REASON = "node(s) didn't match Pod's node affinity/selector"
REASON_ENFORCED = "node(s) didn't match scheduler-enforced node affinity"
REASON_CONFLICT = "pod affinity terms conflict"

_INT32_MAX = 2**31 - 1
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_GO_INT = re.compile(r"[+-]?[0-9]+")
_LABEL_NAME = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_PARSE_RULES = (
    "cannot be parsed (label keys must be qualified names, values label values, a Gt/Lt value an int64, "
    "a matchFields In/NotIn exactly one value)"
)


class _Camel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)


class _Requirement(_Camel):
    key: str
    operator: str
    values: list[str] = Field(default_factory=list)


class _Term(_Camel):
    match_expressions: list[_Requirement] = Field(default_factory=list, alias="matchExpressions")
    match_fields: list[_Requirement] = Field(default_factory=list, alias="matchFields")

    def to_term(self) -> NodeSelectorTerm:
        return NodeSelectorTerm.model_validate(
            {
                "match_expressions": [r.model_dump() for r in self.match_expressions],
                "match_fields": [r.model_dump() for r in self.match_fields],
            }
        )


class _Selector(_Camel):
    # No terms (or only empty ones) is valid upstream: such a selector matches no node.
    node_selector_terms: list[_Term] = Field(default_factory=list, alias="nodeSelectorTerms")


class _Preferred(_Camel):
    # Upstream validates no range here (the API server's 1..100 applies to pods only); the weight is int32.
    weight: int = Field(ge=0, le=_INT32_MAX)
    preference: _Term


class AddedAffinity(_Camel):
    """``addedAffinity``: node affinity every pod of the profile gets on top of its own."""

    required: _Selector | None = Field(default=None, alias="requiredDuringSchedulingIgnoredDuringExecution")
    preferred: list[_Preferred] = Field(
        default_factory=list, alias="preferredDuringSchedulingIgnoredDuringExecution"
    )

    @model_validator(mode="after")
    def _valid_terms(self) -> AddedAffinity:
        # The schema's checks (operators, value counts, metadata.name only in matchFields), then upstream's
        # parse, which fails the args where a pod's term would only match nothing.
        required = "requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms"
        bad = [
            f"{required}[{index}]"
            for index, term in enumerate(self.required.node_selector_terms if self.required else [])
            if not _parses(term.to_term())
        ]
        bad += [
            f"preferredDuringSchedulingIgnoredDuringExecution[{index}]"
            for index, preferred in enumerate(self.preferred)
            if not _parses(preferred.preference.to_term())
        ]
        if bad:
            raise ValueError(f"{', '.join(bad)}: {_PARSE_RULES}")
        return self


class Args(_Camel):
    added_affinity: AddedAffinity | None = Field(default=None, alias="addedAffinity")
    """Node affinity every pod of the profile gets on top of its own:
    ``requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms`` (ANDed with the pod's
    requirements; nodes failing it are "scheduler-enforced") and
    ``preferredDuringSchedulingIgnoredDuringExecution`` (weights added to the pod's preferred terms)."""


def _parse_int(text: str) -> int | None:
    """Go's ``strconv.ParseInt(text, 10, 64)``: an optional sign and ASCII digits, within int64 (Python's
    ``int`` would also take spaces, underscores, other scripts' digits and any size)."""
    if not _GO_INT.fullmatch(text):
        return None
    value = int(text)
    return value if _INT64_MIN <= value <= _INT64_MAX else None


def _numeric(snapshot: Snapshot, key: str) -> tuple[IntArray, BoolArray]:
    """Label values of `key` as int64 by value id, and which of them parse (exact: no float rounding)."""
    vocab = snapshot.label_vocab.get(key, {})
    values = np.zeros(len(vocab), dtype=np.int64)
    parsed = np.zeros(len(vocab), dtype=np.bool_)
    for text, value_id in vocab.items():
        number = _parse_int(text)
        if number is not None:
            values[value_id] = number
            parsed[value_id] = True
    return values, parsed


def _expression(snapshot: Snapshot, expr: NodeSelectorRequirement, nodes: Nodes) -> BoolArray:
    column = snapshot.label_columns.get(expr.key)
    if column is None:
        absent = expr.operator in ("NotIn", "DoesNotExist")
        return np.full(node_count(nodes), absent, dtype=np.bool_)
    ids = column[nodes]
    if expr.operator in ("In", "NotIn"):
        # Membership by value id through a table (one slot per id, and a last one, False, that an absent
        # label's -1 reads): a gather, where `np.isin` sorts.
        vocabulary = snapshot.label_vocab.get(expr.key, {})
        table = np.zeros(len(vocabulary) + 1, dtype=np.bool_)
        for value in expr.values:
            value_id = vocabulary.get(value)
            if value_id is not None:
                table[value_id] = True
        member: BoolArray = table.take(ids)
        return member if expr.operator == "In" else ~member
    if expr.operator == "Exists":
        exists: BoolArray = ids >= 0
        return exists
    if expr.operator == "DoesNotExist":
        missing: BoolArray = ids < 0
        return missing
    numbers, parsed = _numeric(snapshot, expr.key)
    if not len(numbers):
        return np.zeros(node_count(nodes), dtype=np.bool_)
    present = ids >= 0
    values = numbers[np.maximum(ids, 0)]
    bound = _parse_int(expr.values[0])  # parsed: `term_matches` checks the term first
    assert bound is not None
    compared: BoolArray = (values > bound) if expr.operator == "Gt" else (values < bound)
    return compared & present & parsed[np.maximum(ids, 0)]


def _field(snapshot: Snapshot, expr: NodeSelectorRequirement, nodes: Nodes) -> BoolArray:
    """``metadata.name`` In / NotIn over rows, through the node index."""
    rows = [row for name in expr.values if (row := snapshot.index.get(name)) is not None]
    member: BoolArray = np.isin(node_rows(nodes), rows)
    return member if expr.operator == "In" else ~member


_PARSES: dict[int, tuple[NodeSelectorTerm, bool]] = {}


def _label_key_valid(key: str) -> bool:
    """apimachinery's IsQualifiedName: ``[prefix/]name``, the prefix a non-empty DNS subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        return False
    return 0 < len(name) <= 63 and _LABEL_NAME.fullmatch(name) is not None


def _label_value_valid(value: str) -> bool:
    return len(value) <= 63 and _LABEL_NAME.fullmatch(value) is not None


def _requirement_parses(expr: NodeSelectorRequirement) -> bool:
    if not _label_key_valid(expr.key) or not all(_label_value_valid(v) for v in expr.values):
        return False
    return expr.operator not in ("Gt", "Lt") or all(_parse_int(v) is not None for v in expr.values)


def _parses(term: NodeSelectorTerm) -> bool:
    """Whether kube-scheduler can parse the term (labels.NewRequirement; a field selector takes exactly one
    value): one it cannot matches no node, however its other requirements read."""
    cached = _PARSES.get(id(term))
    if cached is not None and cached[0] is term:
        return cached[1]
    valid = all(_requirement_parses(expr) for expr in term.match_expressions) and all(
        len(expr.values) == 1 for expr in term.match_fields
    )
    if len(_PARSES) > 4096:
        _PARSES.clear()
    _PARSES[id(term)] = (term, valid)
    return valid


def term_matches(snapshot: Snapshot, term: NodeSelectorTerm, nodes: Nodes) -> BoolArray:
    """Rows matching every expression and field of one term (an empty term, or one kube-scheduler cannot
    parse, matches none)."""
    if (not term.match_expressions and not term.match_fields) or not _parses(term):
        return np.zeros(node_count(nodes), dtype=np.bool_)
    fits = np.ones(node_count(nodes), dtype=np.bool_)
    for expr in term.match_expressions:
        fits &= _expression(snapshot, expr, nodes)
    for expr in term.match_fields:
        fits &= _field(snapshot, expr, nodes)
    return fits


def _any_term(snapshot: Snapshot, terms: list[NodeSelectorTerm], nodes: Nodes) -> BoolArray:
    matched = np.zeros(node_count(nodes), dtype=np.bool_)
    for term in terms:
        matched |= term_matches(snapshot, term, nodes)
    return matched


_SKIPS = {
    (pre_filter, filter_, score): frozenset(
        stage
        for stage, skipped in (("preFilter", pre_filter), ("filter", filter_), ("score", score))
        if skipped
    )
    for pre_filter in (False, True)
    for filter_ in (False, True)
    for score in (False, True)
}


class NodeAffinity:
    name = NAME
    skip_fields = ("node_affinity", "node_selector", "preferred_node_affinity")

    def __init__(self, args: Args) -> None:
        added = args.added_affinity
        self.added_required: list[NodeSelectorTerm] | None = (
            [t.to_term() for t in added.required.node_selector_terms] if added and added.required else None
        )
        # (weight, term): addedAffinity's weights need not fit a pod's 1..100.
        self.added_preferred = [
            (p.weight, p.preference.to_term()) for p in (added.preferred if added else [])
        ]

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        pod = ctx.pod
        return _SKIPS[
            not pod.node_affinity,
            self.added_required is None and not pod.node_selector and not pod.node_affinity,
            not self.added_preferred and not pod.preferred_node_affinity,
        ]

    def pre_filter(self, ctx: CycleContext) -> Status:
        # Each term that pins metadata.name (In) allows only those names; the terms are ORed, so the pod
        # can run on their union. A term that pins nothing allows every node.
        names: set[str] | None = None
        for term in ctx.pod.node_affinity:
            pinned: set[str] | None = None
            for requirement in term.match_fields:
                if requirement.key == "metadata.name" and requirement.operator == "In":
                    values = set(requirement.values)
                    pinned = values if pinned is None else pinned & values
            if pinned is None:
                return SUCCESS
            names = pinned if names is None else names | pinned
        if names is not None and not names:
            return Status.unschedulable(REASON_CONFLICT, plugin=NAME, resolvable=False)
        return SUCCESS

    def _added_fits(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        if self.added_required is None:
            return None
        return _any_term(ctx.snapshot, self.added_required, nodes)

    def _pod_fits(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        snapshot, pod = ctx.snapshot, ctx.pod
        if not pod.node_selector and not pod.node_affinity:
            return None
        count = node_count(nodes)
        fits = np.ones(count, dtype=np.bool_)
        for key, value in pod.node_selector.items():
            column = snapshot.label_columns.get(key)
            if column is None:
                return np.zeros(count, dtype=np.bool_)
            fits &= column[nodes] == snapshot.label_value_id(key, value)
        if pod.node_affinity:
            fits &= _any_term(snapshot, pod.node_affinity, nodes)
        return fits

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        added = self._added_fits(ctx, nodes)
        own = self._pod_fits(ctx, nodes)
        if added is None:
            return own
        return added if own is None else added & own

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        # The scheduler-enforced affinity is checked first, so a node failing both is reported by it.
        added = self._added_fits(ctx, nodes)
        pod_reason, enforced = [REASON], [REASON_ENFORCED]  # read-only, like every reason list
        if added is None:
            return [pod_reason] * len(nodes)
        return [pod_reason if ok else enforced for ok in added.tolist()]

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        preferred = [
            *self.added_preferred,
            *((t.weight, t.preference) for t in ctx.pod.preferred_node_affinity),
        ]
        if not preferred:
            # PreScore's Skip: the plugin takes no part in any node's total.
            return no_scores(len(nodes))
        counts = np.zeros(len(nodes), dtype=np.int64)
        for weight, term in preferred:
            # Upstream drops terms with an empty preference (they would match every node otherwise) and
            # terms of weight 0 (addedAffinity may have them; a pod's weights are 1..100).
            if weight and (term.match_expressions or term.match_fields):
                counts += np.where(term_matches(ctx.snapshot, term, nodes), weight, 0)
        return default_normalize(counts, reverse=False)


def new(args: Args | None, handle: Any) -> NodeAffinity:
    return NodeAffinity(args or Args())
