"""The affinity terms that existing pods carry, indexed for the symmetric direction of InterPodAffinity.

An existing pod's required anti-affinity term that matches an incoming pod forbids the incoming pod the
term's topology domain around the existing pod (Filter); its required affinity terms (times
``hardPodAffinityWeight``) and preferred terms (plus or minus their weight) that match the incoming pod
score that domain (Score). Upstream walks every pod with affinity for each decision; here each distinct
(matcher, topology key) carried by existing pods keeps a per-row amount, updated on assume and forget
through the snapshot's pod listeners, and a decision checks the incoming pod against the distinct terms only
(through an anchor index, only those that could match its labels), then reads rows with numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from policies.framework.contract import IntArray
from policies.podlabels import AnchorIndex, PodMatcher, term_matcher
from policies.snapshot import PodRecord, Snapshot
from schemas.pod import PodRequest

__all__ = [
    "PREFERRED",
    "REQUIRED_AFFINITY",
    "REQUIRED_ANTI_AFFINITY",
    "ExistingTerms",
    "TermKey",
    "carried_terms",
]

TermKey = tuple[PodMatcher, str]
"""A term's matcher and its topology key."""

REQUIRED_ANTI_AFFINITY = 0
"""Amount: pods on the row carrying the term."""
REQUIRED_AFFINITY = 1
"""Amount: pods on the row carrying the term (scored times ``hardPodAffinityWeight``)."""
PREFERRED = 2
"""Amount: the sum of the weights on the row, positive for affinity and negative for anti-affinity."""
_KINDS = 3


def carried_terms(pod: PodRequest, merge_label_keys: bool) -> list[tuple[int, TermKey, int]]:
    """(kind, term, amount) for every affinity term the pod carries, in the pod's own terms."""
    entries: list[tuple[int, TermKey, int]] = []
    for affinity, sign in ((pod.pod_affinity, 1), (pod.pod_anti_affinity, -1)):
        if affinity is None:
            continue
        kind = REQUIRED_AFFINITY if sign > 0 else REQUIRED_ANTI_AFFINITY
        for term in affinity.required:
            key = (term_matcher(term, pod, merge_label_keys=merge_label_keys), term.topology_key)
            entries.append((kind, key, 1))
        for weighted in affinity.preferred:
            term = weighted.pod_affinity_term
            key = (term_matcher(term, pod, merge_label_keys=merge_label_keys), term.topology_key)
            entries.append((PREFERRED, key, sign * weighted.weight))
    return entries


@dataclass(slots=True)
class _Kind:
    amounts: dict[TermKey, IntArray] = field(default_factory=dict)
    carriers: dict[TermKey, int] = field(default_factory=dict)
    """Pods carrying the term, anywhere: at 0 the term leaves the index."""
    index: AnchorIndex[TermKey] = field(default_factory=AnchorIndex)


class ExistingTerms:
    """Per snapshot (`of`), for one way of reading terms (`merge_label_keys`, which releases differ on)."""

    def __init__(self, snapshot: Snapshot, merge_label_keys: bool) -> None:
        self.snapshot = snapshot
        self.merge_label_keys = merge_label_keys
        self._kinds = [_Kind() for _ in range(_KINDS)]
        self._carried: dict[str, list[tuple[int, TermKey, int]]] = {}
        self.kinds = 0
        """A bit per kind that some existing pod carries (1 << kind id): what decides whether a pod without
        terms of its own has anything to filter or score (InterPodAffinity's Skip)."""
        for record in snapshot.pods.values():
            pod = record.info.pod
            # Built inside a cycle over every pod there: the few that carry terms are looked at further.
            if pod.pod_affinity is not None or pod.pod_anti_affinity is not None:
                self.on_pod(record, +1)
        snapshot.pod_listeners.append(self.on_pod)

    @classmethod
    def of(cls, snapshot: Snapshot, merge_label_keys: bool) -> ExistingTerms:
        name = f"{cls.__name__}:{merge_label_keys}"
        index = snapshot.extensions.get(name)
        if index is None:
            index = snapshot.extensions[name] = cls(snapshot, merge_label_keys)
        assert isinstance(index, ExistingTerms)
        return index

    def __len__(self) -> int:
        return sum(len(kind.carriers) for kind in self._kinds)

    def on_pod(self, record: PodRecord, sign: int) -> None:
        pod = record.info.pod
        if sign > 0:
            if pod.pod_affinity is None and pod.pod_anti_affinity is None:
                return
            entries = carried_terms(pod, self.merge_label_keys)
            if not entries:
                return
            self._carried[pod.uid] = entries
        else:
            popped = self._carried.pop(pod.uid, None)
            if popped is None:
                return
            entries = popped
        row = record.row
        for kind_id, key, amount in entries:
            kind = self._kinds[kind_id]
            amounts = kind.amounts.get(key)
            if amounts is None:
                amounts = kind.amounts[key] = np.zeros(max(len(self.snapshot.live), row + 1), dtype=np.int64)
                kind.index.add(key, key[0])
            elif row >= len(amounts):
                grown = np.zeros(max(len(self.snapshot.live), row + 1), dtype=np.int64)
                grown[: len(amounts)] = amounts
                kind.amounts[key] = amounts = grown
            amounts[row] += sign * amount
            carriers = kind.carriers.get(key, 0) + sign
            if carriers:
                kind.carriers[key] = carriers
            else:
                del kind.carriers[key], kind.amounts[key]
                kind.index.remove(key)
        self.kinds = sum(1 << kind_id for kind_id, kind in enumerate(self._kinds) if kind.carriers)

    def carries(self, kind_id: int) -> bool:
        """Whether any existing pod carries a term of `kind_id`."""
        return bool(self._kinds[kind_id].carriers)

    def matching(
        self, kind_id: int, pod: PodRequest, namespace_labels: dict[str, str] | None
    ) -> list[tuple[str, IntArray]]:
        """(topology key, per-row amounts) of every carried term of `kind_id` that matches `pod`, whose
        namespace has `namespace_labels` (Kubernetes' AffinityTerm.Matches with the incoming pod's namespace
        labels)."""
        kind = self._kinds[kind_id]
        if not kind.carriers:
            return []
        labels = namespace_labels or {}
        found = []
        for key in kind.index.candidates(pod.labels):
            if key[0].matches(pod.labels, pod.namespace, labels):
                found.append((key[1], kind.amounts[key]))
        return found
