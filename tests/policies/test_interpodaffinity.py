"""InterPodAffinity: behaviour cases, the incremental indexes, and a brute-force reference.

The reference below is upstream's filtering.go and scoring.go written out over the snapshot's pods (a loop
over every pod per decision), so random clusters compare the vectorised plugin with upstream's algorithm.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from policies.framework.contract import CycleContext
from policies.framework.profile import Handle
from policies.plugins.interpodaffinity import (
    NAME,
    REASON_AFFINITY,
    REASON_ANTI_AFFINITY,
    REASON_EXISTING_ANTI_AFFINITY,
    Args,
    InterPodAffinity,
    min_max_normalize,
    new,
)
from policies.podlabels import PodLabelIndex
from policies.snapshot import Snapshot
from schemas.node import NodeSpec
from schemas.pod import PodAffinityTerm, PodRequest
from tests.policies.builders import node, place, pod, profile, scheduler

# ------------------------------------------------------------------------------------------- builders

HOST = "kubernetes.io/hostname"


def term(topology: str, labels: dict[str, str] | None = None, **fields: Any) -> dict[str, Any]:
    selector = fields.pop("selector", {"match_labels": labels or {}})
    return {"label_selector": selector, "topology_key": topology, **fields}


def weighted(weight: int, topology: str, labels: dict[str, str], **fields: Any) -> dict[str, Any]:
    return {"weight": weight, "pod_affinity_term": term(topology, labels, **fields)}


def spec(name: str, **labels: str) -> NodeSpec:
    return NodeSpec(name=name, allocatable={"cpu": 4000, "memory": 8 * 2**30, "pods": 110}, labels=labels)


def cluster(nodes: list[NodeSpec], placed: Mapping[str, list[PodRequest]] | None = None) -> Snapshot:
    snapshot = Snapshot()
    for n in nodes:
        snapshot.upsert_node(n)
    for name, pods in (placed or {}).items():
        for p in pods:
            snapshot.assume(snapshot.pod_info(p), snapshot.index[name], bound=True)
    return snapshot


def plugin(version: tuple[int, int] = (1, 36), **args: Any) -> InterPodAffinity:
    return new(Args.model_validate(args), Handle(kubernetes_version=version))


def verdicts(snapshot: Snapshot, incoming: PodRequest, ipa: InterPodAffinity | None = None) -> dict[str, str]:
    """Node → "" when it passes, else the reason."""
    ipa = ipa or plugin()
    ctx = CycleContext(incoming, snapshot.pod_info(incoming), snapshot, 0.0)
    rows = snapshot.live_rows()
    keep = ipa.filter(ctx, rows)
    result = {snapshot.names[int(r)] or "": "" for r in rows}
    if keep is not None:
        failed = rows[~keep]
        for row, reasons in zip(failed.tolist(), ipa.reasons(ctx, failed), strict=True):
            result[snapshot.names[row] or ""] = reasons[0]
    return result


def scores(snapshot: Snapshot, incoming: PodRequest, ipa: InterPodAffinity | None = None) -> dict[str, int]:
    ipa = ipa or plugin()
    ctx = CycleContext(incoming, snapshot.pod_info(incoming), snapshot, 0.0)
    rows = snapshot.live_rows()
    return {snapshot.names[int(r)] or "": int(s) for r, s in zip(rows, ipa.score(ctx, rows), strict=True)}


ZONES = [spec("a1", zone="a", **{HOST: "a1"}), spec("a2", zone="a", **{HOST: "a2"}), spec("b1", zone="b")]

# ------------------------------------------------------------------------------------ behaviour cases

FILTER_CASES: list[tuple[str, dict[str, list[PodRequest]], PodRequest, dict[str, str]]] = [
    (
        "A pod with required affinity goes only to the zone that holds a matching pod.",
        {"a1": [pod("web", labels={"app": "web"})]},
        pod("in", pod_affinity={"required": [term("zone", {"app": "web"})]}),
        {"a1": "", "a2": "", "b1": REASON_AFFINITY},
    ),
    (
        "The first pod of a group that matches its own affinity term may go to any node with the key.",
        {},
        pod("in", labels={"app": "web"}, pod_affinity={"required": [term(HOST, {"app": "web"})]}),
        {"a1": "", "a2": "", "b1": REASON_AFFINITY},
    ),
    (
        "A first pod that does not match its own affinity term goes nowhere.",
        {},
        pod("in", labels={"app": "db"}, pod_affinity={"required": [term("zone", {"app": "web"})]}),
        {"a1": REASON_AFFINITY, "a2": REASON_AFFINITY, "b1": REASON_AFFINITY},
    ),
    (
        "Affinity counts only pods that match all the terms, not some pod per term.",
        {"a1": [pod("x", labels={"app": "web"})], "b1": [pod("y", labels={"tier": "front"})]},
        pod(
            "in",
            labels={"app": "web"},
            pod_affinity={"required": [term("zone", {"app": "web"}), term("zone", {"tier": "front"})]},
        ),
        {"a1": REASON_AFFINITY, "a2": REASON_AFFINITY, "b1": REASON_AFFINITY},
    ),
    (
        "Required anti-affinity on the hostname keeps the pod off the node that has a matching pod.",
        {"a1": [pod("web", labels={"app": "web"})]},
        pod("in", pod_anti_affinity={"required": [term(HOST, {"app": "web"})]}),
        {"a1": REASON_ANTI_AFFINITY, "a2": "", "b1": ""},
    ),
    (
        "An existing pod's anti-affinity that matches the incoming pod forbids its whole zone.",
        {"a2": [pod("old", pod_anti_affinity={"required": [term("zone", {"app": "web"})]})]},
        pod("in", labels={"app": "web"}),
        {"a1": REASON_EXISTING_ANTI_AFFINITY, "a2": REASON_EXISTING_ANTI_AFFINITY, "b1": ""},
    ),
    (
        "Pods in another namespace do not count for a term without namespaces.",
        {"a1": [pod("web", namespace="other", labels={"app": "web"})]},
        pod("in", pod_anti_affinity={"required": [term("zone", {"app": "web"})]}),
        {"a1": "", "a2": "", "b1": ""},
    ),
    (
        "A namespace selector matches pods by their namespace's labels.",
        {"a1": [pod("web", namespace="other", namespace_labels={"team": "x"}, labels={"app": "web"})]},
        pod(
            "in",
            pod_anti_affinity={
                "required": [term("zone", {"app": "web"}, namespace_selector={"match_labels": {"team": "x"}})]
            },
        ),
        {"a1": REASON_ANTI_AFFINITY, "a2": REASON_ANTI_AFFINITY, "b1": ""},
    ),
    (
        "An empty namespace selector matches pods of every namespace.",
        {"b1": [pod("web", namespace="other", labels={"app": "web"})]},
        pod("in", pod_anti_affinity={"required": [term("zone", {"app": "web"}, namespace_selector={})]}),
        {"a1": "", "a2": "", "b1": REASON_ANTI_AFFINITY},
    ),
    (
        "matchLabelKeys adds the pod's own value, so pods of another version do not repel it.",
        {"a1": [pod("v1", labels={"app": "web", "v": "1"})]},
        pod(
            "in",
            labels={"app": "web", "v": "2"},
            pod_anti_affinity={"required": [term(HOST, {"app": "web"}, match_label_keys=["v"])]},
        ),
        {"a1": "", "a2": "", "b1": ""},
    ),
    (
        "mismatchLabelKeys keeps the pod away from pods of other tenants only.",
        {"a1": [pod("t1", labels={"tenant": "t1"})], "a2": [pod("t2", labels={"tenant": "t2"})]},
        pod(
            "in",
            labels={"tenant": "t1"},
            pod_anti_affinity={
                "required": [
                    term(
                        HOST,
                        selector={"match_expressions": [{"key": "tenant", "operator": "Exists"}]},
                        mismatch_label_keys=["tenant"],
                    )
                ]
            },
        ),
        {"a1": "", "a2": REASON_ANTI_AFFINITY, "b1": ""},
    ),
    (
        "A nil label selector matches no pod, so anti-affinity with it blocks nothing.",
        {"a1": [pod("web", labels={"app": "web"})]},
        pod("in", pod_anti_affinity={"required": [{"topology_key": "zone"}]}),
        {"a1": "", "a2": "", "b1": ""},
    ),
]


@pytest.mark.parametrize(
    ("placed", "incoming", "expected"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(placed: dict[str, list[PodRequest]], incoming: PodRequest, expected: dict[str, str]) -> None:
    snapshot = cluster(ZONES, placed)
    assert verdicts(snapshot, incoming) == expected
    assert verdicts(snapshot, incoming) == reference_filter(snapshot, incoming)


def test_match_label_keys_are_ignored_before_kubernetes_1_31() -> None:
    snapshot = cluster(ZONES, {"a1": [pod("v1", labels={"app": "web", "v": "1"})]})
    incoming = pod(
        "in",
        labels={"app": "web", "v": "2"},
        pod_anti_affinity={"required": [term(HOST, {"app": "web"}, match_label_keys=["v"])]},
    )
    assert verdicts(snapshot, incoming, plugin((1, 30)))["a1"] == REASON_ANTI_AFFINITY
    assert verdicts(snapshot, incoming, plugin((1, 31)))["a1"] == ""


SCORE_CASES: list[tuple[str, dict[str, Any], dict[str, list[PodRequest]], PodRequest, dict[str, int]]] = [
    (
        "Preferred affinity scores the zone with matching pods highest.",
        {},
        {"a1": [pod("web", labels={"app": "web"})]},
        pod("in", pod_affinity={"preferred": [weighted(5, "zone", {"app": "web"})]}),
        {"a1": 100, "a2": 100, "b1": 0},
    ),
    (
        "Preferred anti-affinity scores the zone with matching pods lowest.",
        {},
        {"a1": [pod("web", labels={"app": "web"})]},
        pod("in", pod_anti_affinity={"preferred": [weighted(5, "zone", {"app": "web"})]}),
        {"a1": 0, "a2": 0, "b1": 100},
    ),
    (
        "An existing pod's required affinity for the incoming pod adds hardPodAffinityWeight to its zone.",
        {},
        {"b1": [pod("old", pod_affinity={"required": [term("zone", {"app": "web"})]})]},
        pod("in", labels={"app": "web"}),
        {"a1": 0, "a2": 0, "b1": 100},
    ),
    (
        "hardPodAffinityWeight 0 ignores existing pods' required affinity.",
        {"hardPodAffinityWeight": 0},
        {"b1": [pod("old", pod_affinity={"required": [term("zone", {"app": "web"})]})]},
        pod("in", labels={"app": "web"}),
        {"a1": 0, "a2": 0, "b1": 0},
    ),
    (
        "Existing pods' preferred anti-affinity for the incoming pod lowers their zone.",
        {},
        {"a1": [pod("old", pod_anti_affinity={"preferred": [weighted(3, "zone", {"app": "web"})]})]},
        pod("in", labels={"app": "web"}),
        {"a1": 0, "a2": 0, "b1": 100},
    ),
    (
        "ignorePreferredTermsOfExistingPods skips pods without preferred terms of their own.",
        {"ignorePreferredTermsOfExistingPods": True},
        {"a1": [pod("old", pod_anti_affinity={"preferred": [weighted(3, "zone", {"app": "web"})]})]},
        pod("in", labels={"app": "web"}),
        {"a1": 0, "a2": 0, "b1": 0},
    ),
    (
        "Weights scale by the number of matching pods and normalise min to max, truncated.",
        {},
        {
            "a1": [pod("w1", labels={"app": "web"}), pod("w2", labels={"app": "web"})],
            "b1": [pod("w3", labels={"app": "web"})],
        },
        pod(
            "in",
            pod_affinity={"preferred": [weighted(3, "zone", {"app": "web"})]},
            pod_anti_affinity={"preferred": [weighted(2, HOST, {"app": "web"})]},
        ),
        # a1: 3*2 - 2*2 = 2, a2: 6, b1: 3 (b1 has no hostname label): min 2, max 6.
        {"a1": 0, "a2": 100, "b1": 25},
    ),
]


@pytest.mark.parametrize(
    ("args", "placed", "incoming", "expected"), [c[1:] for c in SCORE_CASES], ids=[c[0] for c in SCORE_CASES]
)
def test_score(
    args: dict[str, Any], placed: dict[str, list[PodRequest]], incoming: PodRequest, expected: dict[str, int]
) -> None:
    snapshot = cluster(ZONES, placed)
    ipa = plugin(**args)
    assert scores(snapshot, incoming, ipa) == expected
    assert expected == reference_scores(snapshot, incoming, Args.model_validate(args))


NORMALIZE_CASES = [
    ("All equal scores normalise to zero.", [4, 4, 4], [0, 0, 0]),
    ("Negative raw scores map min to 0 and max to 100.", [-6, 0, -3], [0, 100, 50]),
    ("Fractions truncate as Go's int64 conversion does.", [0, 1, 3], [0, 33, 100]),
]


@pytest.mark.parametrize(
    ("raw", "expected"), [c[1:] for c in NORMALIZE_CASES], ids=[c[0] for c in NORMALIZE_CASES]
)
def test_min_max_normalize(raw: list[int], expected: list[int]) -> None:
    assert min_max_normalize(np.array(raw, dtype=np.int64)).tolist() == expected


ARG_ERRORS = [
    ("A hardPodAffinityWeight above 100 is refused.", {"hardPodAffinityWeight": 101}),
    ("A negative hardPodAffinityWeight is refused.", {"hardPodAffinityWeight": -1}),
    ("Unknown args are refused.", {"hardPodAffinity": 1}),
]


@pytest.mark.parametrize("raw", [c[1] for c in ARG_ERRORS], ids=[c[0] for c in ARG_ERRORS])
def test_args_are_validated(raw: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        Args.model_validate(raw)


def test_args_default_as_upstream() -> None:
    args = Args()
    assert (args.hard_pod_affinity_weight, args.ignore_preferred_terms_of_existing_pods) == (1, False)


def test_the_scheduler_spreads_a_deployment_with_hostname_anti_affinity_and_stops_when_full() -> None:
    nodes = [node(f"n{i}", labels={HOST: f"n{i}", "zone": f"z{i % 2}"}) for i in range(3)]
    s = scheduler(nodes, profile("default", filters=[NAME], score=[(NAME, 2)]))
    anti = {"required": [term(HOST, {"app": "web"})]}
    result = place(s, *(pod(f"w{i}", labels={"app": "web"}, pod_anti_affinity=anti) for i in range(4)))
    assert sorted(v for v in result.values() if v) == ["n0", "n1", "n2"]
    assert list(result.values()).count(None) == 1


# ----------------------------------------------------------------------------- incremental state


def test_counts_follow_assume_forget_and_node_removal() -> None:
    snapshot = cluster(ZONES)
    anti = pod("in", pod_anti_affinity={"required": [term("zone", {"app": "web"})]})
    assert verdicts(snapshot, anti)["a1"] == ""
    web = pod("web", labels={"app": "web"})
    snapshot.assume(snapshot.pod_info(web), snapshot.index["a2"])
    assert verdicts(snapshot, anti) == {"a1": REASON_ANTI_AFFINITY, "a2": REASON_ANTI_AFFINITY, "b1": ""}
    snapshot.bind("web")
    assert verdicts(snapshot, anti)["a1"] == REASON_ANTI_AFFINITY
    snapshot.forget("web")
    assert verdicts(snapshot, anti)["a1"] == ""
    snapshot.assume(snapshot.pod_info(web), snapshot.index["a2"])
    snapshot.remove_node("a2")
    assert verdicts(snapshot, anti) == {"a1": "", "b1": ""}


def test_existing_terms_leave_the_index_with_their_last_pod() -> None:
    snapshot = cluster(ZONES)
    incoming = pod("in", labels={"app": "web"})
    assert verdicts(snapshot, incoming)["a1"] == ""
    old = pod("old", pod_anti_affinity={"required": [term("zone", {"app": "web"})]})
    snapshot.assume(snapshot.pod_info(old), snapshot.index["b1"])
    assert verdicts(snapshot, incoming)["b1"] == REASON_EXISTING_ANTI_AFFINITY
    snapshot.forget("old")
    assert verdicts(snapshot, incoming)["b1"] == ""
    assert all(len(v) == 0 for k, v in snapshot.extensions.items() if k.startswith("ExistingTerms"))  # type: ignore[arg-type]


def test_a_relabelled_node_moves_its_pods_to_the_new_domain() -> None:
    snapshot = cluster(ZONES, {"b1": [pod("web", labels={"app": "web"})]})
    anti = pod("in", pod_anti_affinity={"required": [term("zone", {"app": "web"})]})
    assert verdicts(snapshot, anti) == {"a1": "", "a2": "", "b1": REASON_ANTI_AFFINITY}
    snapshot.upsert_node(spec("b1", zone="a"))
    assert verdicts(snapshot, anti) == {
        "a1": REASON_ANTI_AFFINITY,
        "a2": REASON_ANTI_AFFINITY,
        "b1": REASON_ANTI_AFFINITY,
    }


def test_namespace_labels_learnt_later_rebuild_the_counts() -> None:
    snapshot = cluster(ZONES, {"a1": [pod("web", namespace="other", labels={"app": "web"})]})
    incoming = pod(
        "in",
        pod_anti_affinity={
            "required": [term("zone", {"app": "web"}, namespace_selector={"match_labels": {"team": "x"}})]
        },
    )
    assert verdicts(snapshot, incoming)["a1"] == ""
    # A pod of namespace "other" arrives telling its labels: the earlier pod now counts too.
    snapshot.assume(
        snapshot.pod_info(pod("late", namespace="other", namespace_labels={"team": "x"})),
        snapshot.index["b1"],
    )
    assert PodLabelIndex.of(snapshot).labels_of_namespace("other") == {"team": "x"}
    assert verdicts(snapshot, incoming)["a1"] == REASON_ANTI_AFFINITY


# ------------------------------------------------------------------------------ brute-force reference


def _own_matches(
    t: PodAffinityTerm, owner: PodRequest, target: PodRequest, target_ns_labels: Mapping[str, str]
) -> bool:
    """AffinityTerm.Matches for one of `owner`'s terms against `target`, written from the API's rules."""
    if t.namespace_selector is None:
        namespaces = set(t.namespaces) if t.namespaces else {owner.namespace}
        in_namespace = target.namespace in namespaces
    else:
        in_namespace = target.namespace in t.namespaces or t.namespace_selector.matches(target_ns_labels)
    if not in_namespace or t.label_selector is None:
        return False
    if not t.label_selector.matches(target.labels):
        return False
    for key in t.match_label_keys:
        if key in owner.labels and target.labels.get(key) != owner.labels[key]:
            return False
    return all(
        key not in owner.labels or target.labels.get(key) != owner.labels[key]
        for key in t.mismatch_label_keys
    )


def _namespace_labels(snapshot: Snapshot, incoming: PodRequest) -> dict[str, dict[str, str]]:
    known: dict[str, dict[str, str]] = {}
    for record in snapshot.pods.values():
        if record.info.pod.namespace_labels:
            known[record.info.pod.namespace] = record.info.pod.namespace_labels
    if incoming.namespace_labels:
        known[incoming.namespace] = incoming.namespace_labels
    return known


def _existing(snapshot: Snapshot) -> list[tuple[PodRequest, dict[str, str]]]:
    result = []
    for record in snapshot.pods.values():
        node_spec = snapshot.specs[record.row]
        assert node_spec is not None
        result.append((record.info.pod, dict(node_spec.labels)))
    return result


def reference_filter(snapshot: Snapshot, incoming: PodRequest) -> dict[str, str]:
    ns = _namespace_labels(snapshot, incoming)
    own_ns = ns.get(incoming.namespace, {})
    affinity = incoming.pod_affinity.required if incoming.pod_affinity else []
    anti = incoming.pod_anti_affinity.required if incoming.pod_anti_affinity else []
    existing_anti: Counter[tuple[str, str]] = Counter()
    affinity_counts: Counter[tuple[str, str]] = Counter()
    anti_counts: Counter[tuple[str, str]] = Counter()
    for other, labels in _existing(snapshot):
        if other.pod_anti_affinity:
            for t in other.pod_anti_affinity.required:
                if _own_matches(t, other, incoming, own_ns) and t.topology_key in labels:
                    existing_anti[(t.topology_key, labels[t.topology_key])] += 1
        other_ns = ns.get(other.namespace, {})
        if affinity and all(_own_matches(t, incoming, other, other_ns) for t in affinity):
            for t in affinity:
                if t.topology_key in labels:
                    affinity_counts[(t.topology_key, labels[t.topology_key])] += 1
        for t in anti:
            if _own_matches(t, incoming, other, other_ns) and t.topology_key in labels:
                anti_counts[(t.topology_key, labels[t.topology_key])] += 1
    result: dict[str, str] = {}
    self_match = bool(affinity) and all(_own_matches(t, incoming, incoming, own_ns) for t in affinity)
    for row in snapshot.live_rows().tolist():
        node_spec = snapshot.specs[row]
        assert node_spec is not None
        labels = node_spec.labels
        verdict = ""
        if not existing_anti and not affinity and not anti:
            result[node_spec.name] = verdict
            continue
        pods_exist, has_keys = True, True
        for t in affinity:
            if t.topology_key not in labels:
                has_keys = False
                break
            if affinity_counts[(t.topology_key, labels[t.topology_key])] <= 0:
                pods_exist = False
        if not has_keys or (not pods_exist and not (not affinity_counts and self_match)):
            verdict = REASON_AFFINITY
        elif any(
            t.topology_key in labels and anti_counts[(t.topology_key, labels[t.topology_key])] > 0
            for t in anti
        ):
            verdict = REASON_ANTI_AFFINITY
        elif any(existing_anti[(k, v)] > 0 for k, v in labels.items()):
            verdict = REASON_EXISTING_ANTI_AFFINITY
        result[node_spec.name] = verdict
    return result


def reference_scores(snapshot: Snapshot, incoming: PodRequest, args: Args) -> dict[str, int]:
    ns = _namespace_labels(snapshot, incoming)
    own_ns = ns.get(incoming.namespace, {})
    preferred = incoming.pod_affinity.preferred if incoming.pod_affinity else []
    preferred_anti = incoming.pod_anti_affinity.preferred if incoming.pod_anti_affinity else []
    rows = snapshot.live_rows().tolist()
    names = [snapshot.names[r] or "" for r in rows]
    if args.ignore_preferred_terms_of_existing_pods and not preferred and not preferred_anti:
        return dict.fromkeys(names, 0)
    topology: dict[str, Counter[str]] = {}

    def add(t: PodAffinityTerm, weight: int, labels: Mapping[str, str]) -> None:
        if t.topology_key in labels:
            topology.setdefault(t.topology_key, Counter())[labels[t.topology_key]] += weight

    for other, labels in _existing(snapshot):
        other_ns = ns.get(other.namespace, {})
        for w in preferred:
            if _own_matches(w.pod_affinity_term, incoming, other, other_ns):
                add(w.pod_affinity_term, w.weight, labels)
        for w in preferred_anti:
            if _own_matches(w.pod_affinity_term, incoming, other, other_ns):
                add(w.pod_affinity_term, -w.weight, labels)
        if other.pod_affinity:
            if args.hard_pod_affinity_weight > 0:
                for t in other.pod_affinity.required:
                    if _own_matches(t, other, incoming, own_ns):
                        add(t, args.hard_pod_affinity_weight, labels)
            for w in other.pod_affinity.preferred:
                if _own_matches(w.pod_affinity_term, other, incoming, own_ns):
                    add(w.pod_affinity_term, w.weight, labels)
        if other.pod_anti_affinity:
            for w in other.pod_anti_affinity.preferred:
                if _own_matches(w.pod_affinity_term, other, incoming, own_ns):
                    add(w.pod_affinity_term, -w.weight, labels)
    raw = []
    for row in rows:
        node_spec = snapshot.specs[row]
        assert node_spec is not None
        raw.append(
            sum(values[node_spec.labels[k]] for k, values in topology.items() if k in node_spec.labels)
        )
    if not raw:
        return {}
    low, high = min(raw), max(raw)
    out = [0 if high == low else int(100.0 * ((r - low) / (high - low))) for r in raw]
    return dict(zip(names, out, strict=True))


# ---------------------------------------------------------------------------- random clusters


_KEYS = ("app", "tier", "v")
_VALUES = ("a", "b", "c")
_NAMESPACES = {"default": {"team": "x"}, "other": {"team": "y"}, "third": {"team": "x", "env": "prod"}}
_TOPOLOGY = ("zone", "region", HOST)


def _random_selector(rng: random.Random) -> dict[str, Any] | None:
    roll = rng.random()
    if roll < 0.05:
        return None
    if roll < 0.1:
        return {}
    if roll < 0.6:
        return {"match_labels": {rng.choice(_KEYS): rng.choice(_VALUES)}}
    operator = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
    values = rng.sample(_VALUES, rng.randint(1, 2)) if operator in ("In", "NotIn") else []
    return {"match_expressions": [{"key": rng.choice(_KEYS), "operator": operator, "values": values}]}


def _random_term(rng: random.Random) -> dict[str, Any]:
    found: dict[str, Any] = {"topology_key": rng.choice(_TOPOLOGY)}
    selector = _random_selector(rng)
    if selector is not None:
        found["label_selector"] = selector
    roll = rng.random()
    if roll < 0.15:
        found["namespaces"] = rng.sample(sorted(_NAMESPACES), rng.randint(1, 2))
    elif roll < 0.3:
        found["namespace_selector"] = rng.choice(
            [{}, {"match_labels": {"team": "x"}}, {"match_labels": {"env": "prod"}}]
        )
    if rng.random() < 0.15:
        found["match_label_keys"] = [rng.choice(_KEYS)]
    if rng.random() < 0.1:
        found["mismatch_label_keys"] = [rng.choice(_KEYS)]
    return found


def _random_affinity(rng: random.Random, chance: float) -> dict[str, Any] | None:
    if rng.random() >= chance:
        return None
    return {
        "required": [_random_term(rng) for _ in range(rng.choice([0, 0, 1, 1, 2]))],
        "preferred": [
            {"weight": rng.randint(1, 100), "pod_affinity_term": _random_term(rng)}
            for _ in range(rng.choice([0, 1, 2]))
        ],
    }


def _random_pod(rng: random.Random, uid: str, chance: float) -> PodRequest:
    namespace = rng.choice(sorted(_NAMESPACES))
    return PodRequest.model_validate(
        {
            "uid": uid,
            "namespace": namespace,
            "namespace_labels": _NAMESPACES[namespace],
            "labels": {k: rng.choice(_VALUES) for k in _KEYS if rng.random() < 0.6},
            "pod_affinity": _random_affinity(rng, chance),
            "pod_anti_affinity": _random_affinity(rng, chance),
        }
    )


def _random_node(rng: random.Random, name: str) -> NodeSpec:
    labels = {}
    if rng.random() < 0.9:
        labels["zone"] = rng.choice(["z1", "z2", "z3"])
    if rng.random() < 0.7:
        labels["region"] = rng.choice(["r1", "r2"])
    if rng.random() < 0.8:
        labels[HOST] = name
    return spec(name, **labels)


@pytest.mark.parametrize(
    "seed", range(40), ids=[f"Random cluster {seed} matches the reference." for seed in range(40)]
)
def test_random_clusters_match_the_brute_force_reference(seed: int) -> None:
    rng = random.Random(seed)
    snapshot = Snapshot()
    names = [f"n{i}" for i in range(rng.randint(2, 9))]
    for name in names:
        snapshot.upsert_node(_random_node(rng, name))
    args = Args(
        hard_pod_affinity_weight=rng.choice([0, 1, 5]),
        ignore_preferred_terms_of_existing_pods=rng.random() < 0.2,
    )
    ipa = new(args, Handle())
    counter = 0
    # Steps of assume, forget, node churn, each followed by a decision checked against the reference, so
    # the indexes built early are then kept up incrementally.
    for _ in range(25):
        action = rng.random()
        live = [n for n in names if n in snapshot.index]
        if action < 0.55 and live:
            counter += 1
            p = _random_pod(rng, f"p{counter}", 0.4)
            snapshot.assume(snapshot.pod_info(p), snapshot.index[rng.choice(live)], bound=rng.random() < 0.5)
        elif action < 0.75 and snapshot.pods:
            snapshot.forget(rng.choice(sorted(snapshot.pods)))
        elif action < 0.82 and len(live) > 1:
            snapshot.remove_node(rng.choice(live))
        elif action < 0.9:
            name = rng.choice(names)
            snapshot.upsert_node(_random_node(rng, name))
        incoming = _random_pod(rng, "incoming", 0.8)
        assert verdicts(snapshot, incoming, ipa) == reference_filter(snapshot, incoming)
        assert scores(snapshot, incoming, ipa) == reference_scores(snapshot, incoming, args)
