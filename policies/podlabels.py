"""Which existing pods a label selector picks, counted per node row and kept up to date pod by pod.

Inter-pod affinity and topology spread both ask "how many pods matching this selector (in these
namespaces) run on each node?". `PodLabelIndex` answers with a dense count per row for any key (one
`PodMatcher`, or several that a pod must all match), built once from the snapshot's pods the first time a key
is asked for and then updated on every assume and forget through the snapshot's pod listeners, so a
scheduling cycle reads an array instead of looping over pods. Domains (zone, hostname, ...) are not kept
here: they are the snapshot's label columns, read when the counts are used, so a node relabelled under its
pods needs no bookkeeping.

Keys are found for a pod through an inverted index on one label each key requires (its "anchor"), so a pod
is checked against the few keys that could match it, not all of them.

The namespaces' labels (for ``namespaceSelector``) are what pods report in ``namespace_labels``: the latest
non-empty set seen for a namespace wins. An empty set says nothing (every real namespace carries at least
``kubernetes.io/metadata.name``), so it never erases what is known.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Generic, TypeVar

import numpy as np

from policies.framework.contract import IntArray

if TYPE_CHECKING:
    from policies.snapshot import PodRecord, Snapshot
    from schemas.pod import LabelSelector, PodAffinityTerm, PodRequest

__all__ = [
    "EVERYTHING",
    "AnchorIndex",
    "CountKey",
    "PodLabelIndex",
    "PodMatcher",
    "Selector",
    "merged_selector",
    "selector_matches",
    "term_matcher",
]

Requirement = tuple[str, str, tuple[str, ...]]
"""(key, operator, values) of a selector expression; values sorted."""


@dataclass(frozen=True, slots=True)
class Selector:
    """A metav1.LabelSelector in canonical form (sorted), hashable: equal selectors are one key."""

    labels: tuple[tuple[str, str], ...] = ()
    expressions: tuple[Requirement, ...] = ()
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Keys are hashed on every lookup of a decision; tuples do not keep their hash, so keep it here.
        object.__setattr__(self, "_hash", hash((self.labels, self.expressions)))

    def __hash__(self) -> int:
        return self._hash

    @classmethod
    def of(cls, selector: LabelSelector, extra: Iterable[Requirement] = ()) -> Selector:
        expressions: list[Requirement] = [
            (e.key, e.operator, tuple(sorted(e.values))) for e in selector.match_expressions
        ]
        expressions.extend(extra)
        return cls(tuple(sorted(selector.match_labels.items())), tuple(sorted(set(expressions))))

    @property
    def empty(self) -> bool:
        return not self.labels and not self.expressions


EVERYTHING = Selector()
"""The empty selector, which matches every set of labels."""


def selector_matches(selector: Selector | None, labels: Mapping[str, str]) -> bool:
    """Kubernetes' selector semantics: None (a nil selector) matches nothing, the empty one everything."""
    if selector is None:
        return False
    for key, value in selector.labels:
        if labels.get(key) != value:
            return False
    for key, operator, values in selector.expressions:
        found = labels.get(key)
        if operator == "In":
            if found is None or found not in values:
                return False
        elif operator == "NotIn":
            if found is not None and found in values:
                return False
        elif operator == "Exists":
            if found is None:
                return False
        elif found is not None:  # DoesNotExist
            return False
    return True


@dataclass(frozen=True, slots=True)
class PodMatcher:
    """Kubernetes' AffinityTerm without its topology key: a pod matches when its namespace is one of
    `namespaces` or its namespace's labels match `namespace_selector` (None: no selector), and its labels
    match `selector` (None: a nil selector, which matches no pod)."""

    selector: Selector | None
    namespaces: frozenset[str]
    namespace_selector: Selector | None = None
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.selector, self.namespaces, self.namespace_selector)))

    def __hash__(self) -> int:
        return self._hash

    def matches(self, labels: Mapping[str, str], namespace: str, namespace_labels: Mapping[str, str]) -> bool:
        if namespace not in self.namespaces and not selector_matches(
            self.namespace_selector, namespace_labels
        ):
            return False
        return selector_matches(self.selector, labels)

    @property
    def reads_namespace_labels(self) -> bool:
        """Whether the answer depends on namespace labels beyond the empty selector (which takes all)."""
        return self.namespace_selector is not None and not self.namespace_selector.empty


CountKey = tuple[PodMatcher, ...]
"""Pods matching every matcher of the tuple are counted (inter-pod affinity counts a pod for a group of
required affinity terms only when it matches all of them)."""


def merged_selector(
    term: PodAffinityTerm, labels: Mapping[str, str], merge_label_keys: bool
) -> Selector | None:
    """The term's selector with ``matchLabelKeys`` (key In [own value]) and ``mismatchLabelKeys`` (key NotIn
    [own value]) of the pod's own labels added, as the API server merges them on creation (features
    MatchLabelKeysInPodAffinity); keys the pod lacks add nothing, and a nil selector stays nil. Merging a
    selector the API server already merged adds the same requirements again, which changes nothing."""
    if term.label_selector is None:
        return None
    extra: list[Requirement] = []
    if merge_label_keys:
        extra.extend((key, "In", (labels[key],)) for key in term.match_label_keys if key in labels)
        extra.extend((key, "NotIn", (labels[key],)) for key in term.mismatch_label_keys if key in labels)
    return Selector.of(term.label_selector, extra)


def term_matcher(term: PodAffinityTerm, pod: PodRequest, *, merge_label_keys: bool = True) -> PodMatcher:
    """The matcher of one of `pod`'s affinity terms (newAffinityTerm): no namespaces and no namespace
    selector mean the pod's own namespace."""
    selector = merged_selector(term, pod.labels, merge_label_keys)
    namespace_selector = None if term.namespace_selector is None else Selector.of(term.namespace_selector)
    if not term.namespaces and term.namespace_selector is None:
        namespaces = frozenset((pod.namespace,))
    else:
        namespaces = frozenset(term.namespaces)
    return PodMatcher(selector, namespaces, namespace_selector)


T = TypeVar("T")

Anchor = tuple[str, str | None]
"""(label key, value): a label a matcher requires; value None when any value will do (Exists)."""


def _anchors(matcher: PodMatcher) -> list[Anchor] | None:
    """Labels one of which every pod the matcher matches carries; None when there is no such label."""
    selector = matcher.selector
    if selector is None:
        return []  # matches nothing: never a candidate
    if selector.labels:
        key, value = selector.labels[0]
        return [(key, value)]
    for key, operator, values in selector.expressions:
        if operator == "In":
            return [(key, value) for value in values]
    for key, operator, _ in selector.expressions:
        if operator == "Exists":
            return [(key, None)]
    return None


class AnchorIndex(Generic[T]):
    """Items (count keys, affinity terms) by the matcher that decides whether a pod is theirs: `candidates`
    gives, for a pod's labels, every item that may match it (a superset; check each)."""

    def __init__(self) -> None:
        self._by_anchor: dict[Anchor, set[T]] = {}
        self._general: set[T] = set()
        self._anchors: dict[T, list[Anchor] | None] = {}

    def __len__(self) -> int:
        return len(self._anchors)

    def add(self, item: T, matcher: PodMatcher) -> None:
        anchors = _anchors(matcher)
        self._anchors[item] = anchors
        if anchors is None:
            self._general.add(item)
        else:
            for anchor in anchors:
                self._by_anchor.setdefault(anchor, set()).add(item)

    def remove(self, item: T) -> None:
        anchors = self._anchors.pop(item, [])
        if anchors is None:
            self._general.discard(item)
            return
        for anchor in anchors:
            bucket = self._by_anchor.get(anchor)
            if bucket is not None:
                bucket.discard(item)
                if not bucket:
                    del self._by_anchor[anchor]

    def candidates(self, labels: Mapping[str, str]) -> Iterator[T]:
        yield from self._general
        by_anchor = self._by_anchor
        if not by_anchor:
            return
        seen: set[T] = set()
        for key, value in labels.items():
            for anchor in ((key, value), (key, None)):
                bucket = by_anchor.get(anchor)
                if bucket:
                    for item in bucket:
                        if item not in seen:
                            seen.add(item)
                            yield item


_MAX_KEYS = 512
"""Count keys kept at once; the least recently read beyond this are dropped (and rebuilt if asked again), so
a stream of one-off selectors cannot grow memory without bound."""


class PodLabelIndex:
    """Per-row counts of the snapshot's pods matching each key asked for; one per snapshot (`of`)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.namespace_labels: dict[str, dict[str, str]] = {}
        """Namespace → its labels, from the pods seen."""
        self._counts: OrderedDict[CountKey, IntArray] = OrderedDict()
        self._index: AnchorIndex[CountKey] = AnchorIndex()
        self._by_label: dict[Anchor, set[str]] = {}
        """Uids of the snapshot's pods by label (key, value) and by key (key, None): a new key is built from
        the pods carrying its anchor label, not from every pod."""
        self.generation = 0
        """Pods accounted or released so far: what a cycle derived from the counts is stale once it moves
        (preemption's what-ifs forget and assume pods within one cycle)."""
        for record in snapshot.pods.values():
            self.see_namespace(record.info.pod)
            self._file(record.info.pod, +1)
        snapshot.pod_listeners.append(self.on_pod)

    @classmethod
    def of(cls, snapshot: Snapshot) -> PodLabelIndex:
        index = snapshot.extensions.get(cls.__name__)
        if index is None:
            index = snapshot.extensions[cls.__name__] = cls(snapshot)
        assert isinstance(index, PodLabelIndex)
        return index

    def labels_of_namespace(self, namespace: str) -> Mapping[str, str]:
        return self.namespace_labels.get(namespace, _NO_LABELS)

    def see_namespace(self, pod: PodRequest) -> None:
        """Learn the pod's namespace labels; counts that read changed labels are rebuilt when next asked."""
        labels = pod.namespace_labels
        if not labels or self.namespace_labels.get(pod.namespace) == labels:
            return
        self.namespace_labels[pod.namespace] = dict(labels)
        for key in [key for key in self._counts if any(m.reads_namespace_labels for m in key)]:
            self._drop(key)

    def matches(self, key: CountKey, pod: PodRequest) -> bool:
        namespace_labels = self.labels_of_namespace(pod.namespace)
        return all(m.matches(pod.labels, pod.namespace, namespace_labels) for m in key)

    def counts(self, key: CountKey) -> IntArray:
        """Pods matching every matcher of `key`, per row (at least `snapshot.rows` long). Read it, never
        write it; it stays valid (and is updated in place) until the snapshot grows."""
        counts = self._counts.get(key)
        snapshot = self.snapshot
        if counts is not None and len(counts) >= snapshot.rows:
            self._counts.move_to_end(key)
            return counts
        if counts is None:
            counts = np.zeros(max(len(snapshot.live), 1), dtype=np.int64)
            for record in self._candidates(key[0]):
                if self.matches(key, record.info.pod):
                    counts[record.row] += 1
            self._index.add(key, key[0])
        else:
            grown = np.zeros(len(snapshot.live), dtype=np.int64)
            grown[: len(counts)] = counts
            counts = grown
        self._counts[key] = counts
        while len(self._counts) > _MAX_KEYS:
            self._drop(next(iter(self._counts)))
        return counts

    def _candidates(self, matcher: PodMatcher) -> Iterable[PodRecord]:
        anchors = _anchors(matcher)
        pods = self.snapshot.pods
        if anchors is None:
            return list(pods.values())
        uids: set[str] = set()
        for anchor in anchors:
            uids.update(self._by_label.get(anchor, ()))
        return [pods[uid] for uid in uids if uid in pods]

    def _file(self, pod: PodRequest, sign: int) -> None:
        by_label = self._by_label
        uid = pod.uid
        for key, value in pod.labels.items():
            for anchor in ((key, value), (key, None)):
                if sign > 0:
                    by_label.setdefault(anchor, set()).add(uid)
                else:
                    bucket = by_label.get(anchor)
                    if bucket is not None:
                        bucket.discard(uid)
                        if not bucket:
                            del by_label[anchor]

    def _drop(self, key: CountKey) -> None:
        del self._counts[key]
        self._index.remove(key)

    def on_pod(self, record: PodRecord, sign: int) -> None:
        pod = record.info.pod
        self.generation += 1
        self._file(pod, sign)
        if sign > 0:
            self.see_namespace(pod)
        if not self._counts:
            return
        row = record.row
        for key in list(self._index.candidates(pod.labels)):
            if self.matches(key, pod):
                counts = self._counts[key]
                if row >= len(counts):
                    grown = np.zeros(max(len(self.snapshot.live), row + 1), dtype=np.int64)
                    grown[: len(counts)] = counts
                    self._counts[key] = counts = grown
                counts[row] += sign


_NO_LABELS: Mapping[str, str] = {}
