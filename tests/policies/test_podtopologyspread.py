"""PodTopologySpread: behaviour cases, args, incremental counts, and a brute-force reference.

The reference below is upstream's filtering.go and scoring.go written out over the snapshot's pods (a loop
over every pod of every node per decision), so random clusters, changed pod by pod, compare the vectorised
plugin with upstream's algorithm.
"""

from __future__ import annotations

import math
import random
import struct
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

import numpy as np
import pytest
from pydantic import ValidationError

from policies.framework.contract import CycleContext
from policies.framework.profile import Handle
from policies.plugins.podtopologyspread import (
    NAME,
    REASON_CONSTRAINTS_NOT_MATCH,
    REASON_NODE_LABEL_NOT_MATCH,
    Args,
    PodTopologySpread,
    new,
)
from policies.plugins.podtopologyspread.scoring import go_log, go_round
from policies.snapshot import Snapshot
from schemas.node import NodeSpec, Taint
from schemas.pod import LabelSelector, PodRequest, TopologySpreadConstraint
from tests.policies.builders import node, place, pod, profile, scheduler

# ------------------------------------------------------------------------------------------- builders

HOST = "kubernetes.io/hostname"
ZONE = "zone"


def spec(name: str, taints: list[Taint] | None = None, **labels: str) -> NodeSpec:
    return NodeSpec(
        name=name,
        allocatable={"cpu": 4000, "memory": 8 * 2**30, "pods": 110},
        labels=labels,
        taints=taints or [],
    )


def spread(
    skew: int, key: str, hard: bool = True, labels: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    selector = fields.pop("selector", {"match_labels": labels if labels is not None else {"app": "a"}})
    return {
        "max_skew": skew,
        "topology_key": key,
        "when_unsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "label_selector": selector,
        **fields,
    }


def incoming(*constraints: dict[str, Any], **fields: Any) -> PodRequest:
    fields.setdefault("labels", {"app": "a"})
    return PodRequest(uid="incoming", topology_spread_constraints=list(constraints), **fields)


def cluster(nodes: list[NodeSpec], placed: dict[str, list[PodRequest]] | None = None) -> Snapshot:
    snapshot = Snapshot()
    for n in nodes:
        snapshot.upsert_node(n)
    for name, pods in (placed or {}).items():
        for p in pods:
            snapshot.assume(snapshot.pod_info(p), snapshot.index[name], bound=True)
    return snapshot


def app(uid: str, value: str = "a", namespace: str = "default", **labels: str) -> PodRequest:
    return PodRequest(uid=uid, namespace=namespace, labels={"app": value, **labels})


def ctx_of(snapshot: Snapshot, p: PodRequest) -> CycleContext:
    return CycleContext(p, snapshot.pod_info(p), snapshot, 0.0)


def verdicts(plugin: PodTopologySpread, snapshot: Snapshot, p: PodRequest) -> dict[str, str]:
    """Node name → "" (fits) or its reason."""
    ctx = ctx_of(snapshot, p)
    rows = snapshot.live_rows()
    fits = plugin.filter(ctx, rows)
    reasons = plugin.reasons(ctx, rows)
    names = [snapshot.names[r] or "" for r in rows.tolist()]
    if fits is None:
        return dict.fromkeys(names, "")
    return {n: "" if ok else why[0] for n, ok, why in zip(names, fits.tolist(), reasons, strict=True)}


def scores(plugin: PodTopologySpread, snapshot: Snapshot, p: PodRequest) -> dict[str, int]:
    rows = snapshot.live_rows()
    got = plugin.score(ctx_of(snapshot, p), rows)
    return {snapshot.names[r] or "": int(s) for r, s in zip(rows.tolist(), got.tolist(), strict=True)}


ZONES = [spec("a1", zone="z1"), spec("a2", zone="z1"), spec("b1", zone="z2"), spec("b2", zone="z2")]
LABEL_MISSING = REASON_NODE_LABEL_NOT_MATCH
SKEWED = REASON_CONSTRAINTS_NOT_MATCH

# ------------------------------------------------------------------------------------ behaviour cases

FILTER_CASES: list[tuple[str, list[NodeSpec], dict[str, list[PodRequest]], PodRequest, dict[str, str]]] = [
    (
        "With no matching pods anywhere every node with the key fits",
        ZONES,
        {},
        incoming(spread(1, ZONE)),
        {"a1": "", "a2": "", "b1": "", "b2": ""},
    ),
    (
        "A zone one pod ahead with maxSkew 1 is refused while the other zone is at the minimum",
        ZONES,
        {"a1": [app("p1")]},
        incoming(spread(1, ZONE)),
        {"a1": SKEWED, "a2": SKEWED, "b1": "", "b2": ""},
    ),
    (
        "A pod that does not match its own selector adds nothing to the skew",
        ZONES,
        {"a1": [app("p1")]},
        incoming(spread(1, ZONE), labels={"app": "other"}),
        {"a1": "", "a2": "", "b1": "", "b2": ""},
    ),
    (
        "Pods of another namespace are not counted",
        ZONES,
        {"a1": [app("p1", namespace="other"), app("p2", namespace="other")]},
        incoming(spread(1, ZONE)),
        {"a1": "", "a2": "", "b1": "", "b2": ""},
    ),
    (
        "A node without the topology key is refused as missing the required label",
        [*ZONES, spec("bare")],
        {},
        incoming(spread(1, ZONE)),
        {"a1": "", "a2": "", "b1": "", "b2": "", "bare": LABEL_MISSING},
    ),
    (
        "minDomains above the number of zones makes the global minimum zero",
        ZONES,
        {"a1": [app("p1")], "b1": [app("p2")]},
        incoming(spread(1, ZONE, min_domains=3)),
        {"a1": SKEWED, "a2": SKEWED, "b1": SKEWED, "b2": SKEWED},
    ),
    (
        "An empty selector counts no pod but the incoming pod matches it itself",
        ZONES,
        {"a1": [app("p1"), app("p2"), app("p3")]},
        incoming(spread(1, ZONE, selector={})),
        {"a1": "", "a2": "", "b1": "", "b2": ""},
    ),
    (
        "matchLabelKeys narrow the selector to pods with the incoming pod's own value",
        ZONES,
        {"a1": [app("p1", rev="1"), app("p2", rev="1")]},
        incoming(spread(1, ZONE, match_label_keys=["rev"]), labels={"app": "a", "rev": "2"}),
        {"a1": "", "a2": "", "b1": "", "b2": ""},
    ),
    (
        "Nodes failing the pod's node selector hold no domain under the default Honor policy",
        [*ZONES, spec("c1", zone="z3", disk="hdd")],
        {"a1": [app("p1")], "b1": [app("p2")]},
        incoming(spread(1, ZONE), node_selector={"disk": "ssd"}),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": ""},
    ),
    (
        "With nodeAffinityPolicy Ignore the unselected empty zone is the minimum",
        [*ZONES, spec("c1", zone="z3", disk="hdd")],
        {"a1": [app("p1")], "b1": [app("p2")]},
        incoming(spread(1, ZONE, node_affinity_policy="Ignore"), node_selector={"disk": "ssd"}),
        {"a1": SKEWED, "a2": SKEWED, "b1": SKEWED, "b2": SKEWED, "c1": ""},
    ),
    (
        "With nodeTaintsPolicy Honor a tainted empty zone is no domain",
        [*ZONES, spec("c1", taints=[Taint(key="k", value="v", effect="NoSchedule")], zone="z3")],
        {"a1": [app("p1")], "b1": [app("p2")]},
        incoming(spread(1, ZONE, node_taints_policy="Honor")),
        {"a1": "", "a2": "", "b1": "", "b2": "", "c1": ""},
    ),
    (
        "With the default nodeTaintsPolicy a tainted empty zone is the minimum",
        [*ZONES, spec("c1", taints=[Taint(key="k", value="v", effect="NoSchedule")], zone="z3")],
        {"a1": [app("p1")], "b1": [app("p2")]},
        incoming(spread(1, ZONE)),
        {"a1": SKEWED, "a2": SKEWED, "b1": SKEWED, "b2": SKEWED, "c1": ""},
    ),
    (
        "A skewed first constraint names the reason though the node lacks the second one's key",
        [spec("a", zone="z1", host="a"), spec("b", zone="z2", host="b"), spec("x", zone="z1")],
        {"a": [app("p1"), app("p2")]},
        incoming(spread(1, ZONE), spread(1, "host")),
        {"a": SKEWED, "b": "", "x": SKEWED},
    ),
    (
        "A missing key of the first constraint names the reason though the second one is skewed",
        [spec("a", zone="z1", host="a"), spec("b", zone="z2", host="b"), spec("x", zone="z1")],
        {"a": [app("p1"), app("p2")]},
        incoming(spread(1, "host"), spread(1, ZONE)),
        {"a": SKEWED, "b": "", "x": LABEL_MISSING},
    ),
]


@pytest.mark.parametrize(
    ("nodes", "placed", "p", "expected"), [c[1:] for c in FILTER_CASES], ids=[c[0] for c in FILTER_CASES]
)
def test_filter(
    nodes: list[NodeSpec], placed: dict[str, list[PodRequest]], p: PodRequest, expected: dict[str, str]
) -> None:
    assert verdicts(PodTopologySpread(Args(), (1, 36)), cluster(nodes, placed), p) == expected


def test_a_pod_without_constraints_is_skipped_and_passes_everywhere() -> None:
    plugin, snapshot = PodTopologySpread(Args(), (1, 36)), cluster(ZONES)
    p = PodRequest(uid="bare", labels={"app": "a"})
    assert plugin.pre_filter(ctx_of(snapshot, p)).code.value == "skip"
    assert plugin.filter(ctx_of(snapshot, p), snapshot.live_rows()) is None
    assert scores(plugin, snapshot, p) == dict.fromkeys(["a1", "a2", "b1", "b2"], 0)


def test_before_1_26_inclusion_policies_are_ignored() -> None:
    nodes = [*ZONES, spec("c1", zone="z3", disk="hdd")]
    placed = {"a1": [app("p1")], "b1": [app("p2")]}
    p = incoming(spread(1, ZONE, node_affinity_policy="Ignore"), node_selector={"disk": "ssd"})
    assert set(verdicts(PodTopologySpread(Args(), (1, 25)), cluster(nodes, placed), p).values()) == {""}


def test_before_1_27_match_label_keys_are_ignored() -> None:
    placed = {"a1": [app("p1", rev="1"), app("p2", rev="1")]}
    p = incoming(spread(1, ZONE, match_label_keys=["rev"]), labels={"app": "a", "rev": "2"})
    got = verdicts(PodTopologySpread(Args(), (1, 26)), cluster(ZONES, placed), p)
    assert got == {"a1": SKEWED, "a2": SKEWED, "b1": "", "b2": ""}


SCORE_CASES: list[tuple[str, list[NodeSpec], dict[str, list[PodRequest]], PodRequest, dict[str, int]]] = [
    (
        "Hostname spreading prefers the node with fewer matching pods",
        [spec("n1", **{HOST: "n1"}), spec("n2", **{HOST: "n2"})],
        {"n1": [app("p1"), app("p2")], "n2": [app("p3")]},
        incoming(spread(1, HOST, hard=False)),
        # raw round(2·ln 4) = 3 and round(ln 4) = 1: 100·(3+1−s)/3.
        {"n1": 33, "n2": 100},
    ),
    (
        "A candidate without the key is ignored and scores 0",
        [spec("n1", zone="z1"), spec("n2")],
        {},
        incoming(spread(1, ZONE, hard=False)),
        {"n1": 100, "n2": 0},
    ),
    (
        "maxSkew minus one is added to every scored domain",
        [spec("n1", zone="z1"), spec("n2", zone="z2")],
        {"n1": [app("p1")]},
        incoming(spread(3, ZONE, hard=False)),
        # raw round(ln 4 + 2) = 3 and round(0 + 2) = 2: 100·(3+2−s)/3.
        {"n1": 66, "n2": 100},
    ),
    (
        "A hostname constraint's weight counts only the candidates that carry every constraint's key",
        [
            spec("n1", zone="z1", **{HOST: "n1"}),
            spec("n2", zone="z1", **{HOST: "n2"}),
            spec("n3", **{HOST: "n3"}),
        ],
        {"n1": [app("p1")]},
        incoming(spread(1, HOST, hard=False), spread(1, ZONE, hard=False)),
        # n3 is ignored: hostname weight ln(2 + 2), zone ln(1 + 2). Raw round(ln 4 + ln 3) = 2 and
        # round(ln 3) = 1: 100·(2+1−s)/2 (with ln 5 for the hostname weight n1 would get 33).
        {"n1": 50, "n2": 100, "n3": 0},
    ),
    (
        "nodeTaintsPolicy Honor leaves a hostname constraint's own count of each candidate's pods alone",
        [
            spec("n1", taints=[Taint(key="k", value="v", effect="NoSchedule")], **{HOST: "n1"}),
            spec("n2", **{HOST: "n2"}),
        ],
        {"n1": [app("p1")]},
        incoming(spread(1, HOST, hard=False, node_taints_policy="Honor")),
        # Raw round(ln 4) = 1 and 0: 100·(1+0−s)/1.
        {"n1": 0, "n2": 100},
    ),
]


@pytest.mark.parametrize(
    ("nodes", "placed", "p", "expected"), [c[1:] for c in SCORE_CASES], ids=[c[0] for c in SCORE_CASES]
)
def test_score(
    nodes: list[NodeSpec], placed: dict[str, list[PodRequest]], p: PodRequest, expected: dict[str, int]
) -> None:
    assert scores(PodTopologySpread(Args(), (1, 36)), cluster(nodes, placed), p) == expected


# ------------------------------------------------------------------------------------------ math


@pytest.mark.parametrize(
    ("x", "bits"),
    [
        (3, 0x3FF193EA7AAD030A),
        (14, 0x40051CCA16D7BBA8),
        (48, 0x400EF8383C50BB74),
        (19995, 0x4023CE7525FCD7E2),
    ],
    ids=["ln 3", "ln 14", "ln 48", "ln 19995"],
)
def test_go_log_is_go_math_log_bit_for_bit_where_the_c_library_differs(x: int, bits: int) -> None:
    assert struct.unpack("<Q", struct.pack("<d", go_log(float(x))))[0] == bits
    assert math.log(x) != go_log(float(x))


def test_go_round_rounds_half_away_from_zero_and_not_the_double_below_half() -> None:
    values = np.array([0.0, 0.49999999999999994, 0.5, 1.5, 2.5, 2.4999999999999996])
    assert go_round(values).tolist() == [0, 0, 1, 2, 3, 2]


# ------------------------------------------------------------------------------------------- args


def test_args_default_to_system_defaulting() -> None:
    assert Args().defaulting_type == "System"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"}
                ]
            },
            "defaultingType: System is invalid",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"},
                    {"maxSkew": 2, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway"},
                ],
            },
            "Duplicate value",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {
                        "maxSkew": 1,
                        "topologyKey": ZONE,
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {},
                    }
                ],
            },
            "must not define a selector",
        ),
        (
            {
                "defaultingType": "List",
                "defaultConstraints": [
                    {"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}
                ],
            },
            "maxSkew",
        ),
        ({"defaultingType": "Other"}, "defaultingType"),
    ],
    ids=[
        "System defaulting with constraints of its own is refused",
        "Two default constraints on one key and action are refused",
        "A default constraint with a selector is refused",
        "A maxSkew of zero is refused",
        "An unknown defaulting type is refused",
    ],
)
def test_args_validation(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        Args.model_validate(raw)


def test_default_constraints_apply_to_no_pod_without_a_default_selector() -> None:
    args = Args.model_validate(
        {
            "defaultingType": "List",
            "defaultConstraints": [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"}],
        }
    )
    plugin, snapshot = PodTopologySpread(args, (1, 36)), cluster(ZONES, {"a1": [app("p1"), app("p2")]})
    p = PodRequest(uid="bare", labels={"app": "a"})
    assert plugin.constraints(ctx_of(snapshot, p), hard=True) == []


def test_the_plugin_runs_in_a_profile_with_its_args() -> None:
    s = scheduler(
        [node("n1", labels={ZONE: "z1"}), node("n2", labels={ZONE: "z2"})],
        profile(
            filters=[NAME],
            config={NAME: {"defaultingType": "List"}},
            preFilter={"enabled": [{"name": NAME}]},
        ),
    )
    first = pod(
        "p1",
        cpu="100m",
        scheduler_name="test",
        labels={"app": "a"},
        topology_spread_constraints=[spread(1, ZONE)],
    )
    second = pod(
        "p2",
        cpu="100m",
        scheduler_name="test",
        labels={"app": "a"},
        topology_spread_constraints=[spread(1, ZONE)],
    )
    placed = place(s, first, second)
    assert {placed["p1"], placed["p2"]} == {"n1", "n2"}
    assert isinstance(new(None, Handle()), PodTopologySpread)


# -------------------------------------------------------------------------- brute-force reference


def _matches(selector: LabelSelector | None, labels: dict[str, str]) -> bool:
    return selector is not None and selector.matches(labels)


def _selector(c: TopologySpreadConstraint, p: PodRequest) -> LabelSelector | None:
    if c.label_selector is None:
        return None
    extra = {k: p.labels[k] for k in c.match_label_keys if k in p.labels}
    return (
        LabelSelector(
            match_labels={**c.label_selector.match_labels, **extra},
            match_expressions=c.label_selector.match_expressions,
        )
        if not extra or all(c.label_selector.match_labels.get(k, v) == v for k, v in extra.items())
        else LabelSelector(match_labels={"__never__": "x"})
    )


def _count(snapshot: Snapshot, row: int, c: TopologySpreadConstraint, p: PodRequest) -> int:
    selector = _selector(c, p)
    if selector is None or (not selector.match_labels and not selector.match_expressions):
        return 0
    return sum(
        1
        for uid in snapshot.pods_on_row[row]
        if snapshot.pods[uid].info.pod.namespace == p.namespace
        and _matches(selector, snapshot.pods[uid].info.pod.labels)
    )


def _affinity(n: NodeSpec, p: PodRequest) -> bool:
    return all(n.labels.get(k) == v for k, v in p.node_selector.items())


def _included(n: NodeSpec, c: TopologySpreadConstraint, p: PodRequest) -> bool:
    if c.node_affinity_policy != "Ignore" and not _affinity(n, p):
        return False
    if c.node_taints_policy == "Honor":
        for t in n.taints:
            if t.effect in ("NoSchedule", "NoExecute") and not any(
                tol.tolerates(t.key, t.value, t.effect) for tol in p.tolerations
            ):
                return False
    return True


def reference_filter(snapshot: Snapshot, p: PodRequest) -> dict[str, str]:
    hard = [c for c in p.topology_spread_constraints if c.when_unsatisfiable == "DoNotSchedule"]
    rows = snapshot.live_rows().tolist()
    specs = {r: snapshot.specs[r] for r in rows}
    names = {r: snapshot.names[r] or "" for r in rows}
    if not hard:
        return dict.fromkeys(names.values(), "")
    tallies: list[dict[str, int]] = [{} for _ in hard]
    for r in rows:
        n = specs[r]
        assert n is not None
        if not all(c.topology_key in n.labels for c in hard):
            continue
        for i, c in enumerate(hard):
            if _included(n, c, p):
                value = n.labels[c.topology_key]
                tallies[i][value] = tallies[i].get(value, 0) + _count(snapshot, r, c, p)
    out = {}
    for r in rows:
        n = specs[r]
        assert n is not None
        verdict = ""
        for i, c in enumerate(hard):
            if c.topology_key not in n.labels:
                verdict = LABEL_MISSING
                break
            low = min(tallies[i].values()) if len(tallies[i]) >= (c.min_domains or 1) else 0
            own = 1 if _matches(_selector(c, p), p.labels) else 0
            if tallies[i].get(n.labels[c.topology_key], 0) + own - low > c.max_skew:
                verdict = SKEWED
                break
        out[names[r]] = verdict
    return out


def reference_score(snapshot: Snapshot, p: PodRequest) -> dict[str, int]:
    soft = [c for c in p.topology_spread_constraints if c.when_unsatisfiable == "ScheduleAnyway"]
    rows = snapshot.live_rows().tolist()
    names = [snapshot.names[r] or "" for r in rows]
    if not soft:
        return dict.fromkeys(names, 0)
    specs = {r: snapshot.specs[r] for r in rows}
    ignored = {r for r in rows if not all(c.topology_key in specs[r].labels for c in soft)}  # type: ignore[union-attr]
    tallies: list[dict[str, int] | None] = []
    weights = []
    for c in soft:
        if c.topology_key == HOST:
            tallies.append(None)
            weights.append(go_log(float(len(rows) - len(ignored) + 2)))
            continue
        domains = {specs[r].labels[c.topology_key] for r in rows if r not in ignored}  # type: ignore[union-attr]
        tally = dict.fromkeys(domains, 0)
        for r in rows:
            n = specs[r]
            assert n is not None
            if all(k.topology_key in n.labels for k in soft) and _included(n, c, p):
                value = n.labels[c.topology_key]
                if value in tally:
                    tally[value] += _count(snapshot, r, c, p)
        tallies.append(tally)
        weights.append(go_log(float(len(domains) + 2)))
    raw = {}
    for r in rows:
        if r in ignored:
            continue
        total = 0.0
        for c, tally, weight in zip(soft, tallies, weights, strict=True):
            n = specs[r]
            assert n is not None
            count = _count(snapshot, r, c, p) if tally is None else tally[n.labels[c.topology_key]]
            total += float(count) * weight + float(c.max_skew - 1)
        # Go's math.Round on the exact binary value: half away from zero.
        raw[r] = int(Decimal(total).quantize(Decimal(1), rounding=ROUND_HALF_UP))
    low, high = min(raw.values(), default=0), max(raw.values(), default=0)
    out = {}
    for r, name in zip(rows, names, strict=True):
        if r in ignored:
            out[name] = 0
        elif high == 0:
            out[name] = 100
        else:
            out[name] = 100 * (high + low - raw[r]) // high
    return out


def random_node(rng: random.Random, i: int) -> NodeSpec:
    labels = {HOST: f"n{i}"}
    if rng.random() < 0.85:
        labels[ZONE] = rng.choice(["z1", "z2", "z3"])
    if rng.random() < 0.85:
        labels["rack"] = rng.choice(["r1", "r2", "r3", "r4", "r5"])
    if rng.random() < 0.5:
        labels["disk"] = "ssd"
    taints = [Taint(key="k", value="v", effect="NoSchedule")] if rng.random() < 0.2 else []
    return spec(f"n{i}", taints=taints, **labels)


def random_pod(rng: random.Random, uid: str) -> PodRequest:
    labels = {"app": rng.choice(["a", "b"])}
    if rng.random() < 0.5:
        labels["rev"] = rng.choice(["1", "2"])
    return PodRequest(uid=uid, namespace=rng.choice(["default", "default", "other"]), labels=labels)


def random_constraint(rng: random.Random) -> dict[str, Any]:
    hard = rng.random() < 0.5
    fields: dict[str, Any] = {}
    selector = rng.choice(
        [
            {"match_labels": {"app": "a"}},
            {"match_expressions": [{"key": "app", "operator": "Exists"}]},
            None,
            {},
        ]
    )
    if rng.random() < 0.3:
        fields["match_label_keys"] = ["rev"]
    if hard and rng.random() < 0.3:
        fields["min_domains"] = rng.randint(1, 5)
    if rng.random() < 0.3:
        fields["node_affinity_policy"] = rng.choice(["Honor", "Ignore"])
    if rng.random() < 0.3:
        fields["node_taints_policy"] = rng.choice(["Honor", "Ignore"])
    return spread(rng.randint(1, 3), rng.choice([ZONE, HOST, "rack"]), hard, selector=selector, **fields)


@pytest.mark.parametrize("seed", range(12), ids=[f"random cluster {s}" for s in range(12)])
def test_matches_the_brute_force_reference_as_pods_come_and_go(seed: int) -> None:
    rng = random.Random(seed)
    snapshot = Snapshot()
    for i in range(rng.randint(3, 14)):
        snapshot.upsert_node(random_node(rng, i))
    plugin = PodTopologySpread(Args(), (1, 36))
    uid = 0
    for _ in range(12):
        # Change the cluster pod by pod (assume, forget, a node gone and back) between decisions, so the
        # incremental counts must keep up.
        for _ in range(rng.randint(0, 6)):
            action = rng.random()
            rows = snapshot.live_rows().tolist()
            if action < 0.65 and rows:
                uid += 1
                p = random_pod(rng, f"p{uid}")
                snapshot.assume(snapshot.pod_info(p), rng.choice(rows), bound=rng.random() < 0.5)
            elif action < 0.9 and snapshot.pods:
                snapshot.forget(rng.choice(sorted(snapshot.pods)))
            elif rows:
                name = snapshot.names[rng.choice(rows)] or ""
                snapshot.remove_node(name)
                snapshot.upsert_node(random_node(rng, int(name[1:])))
        p = random_pod(rng, "incoming")
        constraints = [random_constraint(rng) for _ in range(rng.randint(1, 3))]
        selector = {"disk": "ssd"} if rng.random() < 0.3 else {}
        p = p.model_copy(
            update={
                "topology_spread_constraints": [
                    TopologySpreadConstraint.model_validate(c) for c in constraints
                ],
                "node_selector": selector,
            }
        )
        assert verdicts(plugin, snapshot, p) == reference_filter(snapshot, p)
        assert scores(plugin, snapshot, p) == reference_score(snapshot, p)
