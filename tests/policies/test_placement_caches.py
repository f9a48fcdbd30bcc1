"""What the default profile keeps across cycles for speed: preemption's per-priority ledger and the rows it
skips, and PodTopologySpread's node-key cache. Each must give exactly what recomputing would."""

from __future__ import annotations

import random

import numpy as np
import pytest

from policies import scheduler as scheduler_module
from policies.framework.contract import CycleContext
from policies.plugins import preemption
from policies.plugins.podtopologyspread.common import Constraint
from policies.plugins.podtopologyspread.scoring import (
    PreScoreState,
    final_scores,
    normalize,
    raw_scores,
    topology_normalizing_weight,
)
from policies.plugins.preemption import PriorityLedger
from policies.scheduler import Evicted, Placed, Scheduler, Unschedulable
from schemas.node import NodeSpec
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, scheduler

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"


def zoned(name: str, zone: str, cpu: int = 4, **fields: object) -> object:
    return node(name, cpu=cpu, labels={ZONE: zone, HOST: name}, **fields)


def spread_by_zone(uid: str, cpu: float = 0.5, priority: int = 0) -> object:
    constraint = {
        "max_skew": 1,
        "topology_key": ZONE,
        "when_unsatisfiable": "DoNotSchedule",
        "label_selector": {"match_labels": {"app": "web"}},
    }
    return pod(
        uid, cpu=cpu, priority=priority, labels={"app": "web"}, topology_spread_constraints=[constraint]
    )


def random_cluster(seed: int) -> tuple[list[object], list[object]]:
    """Nodes full of pods of mixed priorities, and a stream of pods of higher priorities that must preempt."""
    rng = random.Random(seed)
    nodes = []
    for i in range(12):
        residents = [
            pod(f"n{i}-p{j}", cpu=rng.choice((0.5, 1, 2)), priority=rng.randint(0, 4))
            for j in range(rng.randint(1, 4))
        ]
        nodes.append(
            zoned(f"node-{i:02d}", f"z{i % 3}", cpu=rng.choice((2, 4, 6)), pods=5, pod_requests=residents)
        )
    stream = [
        pod(f"vip-{k}", cpu=rng.choice((1, 2, 3, 5)), priority=rng.randint(1, 6), labels={"app": "vip"})
        for k in range(25)
    ]
    return nodes, stream


def outcomes(s: Scheduler, pods: list[object]) -> list[tuple[str, str, str]]:
    seen = []
    for p in pods:
        s.add_pod(p, 0.0)
        for o in s.schedule(0.0):
            if isinstance(o, Evicted):
                seen.append(("evicted", o.uid, o.node))
            elif isinstance(o, Placed):
                seen.append(("placed", o.uid, o.node))
            elif isinstance(o, Unschedulable):
                seen.append(("unschedulable", o.uid, o.message))
    return seen


# ------------------------------------------------------------------------------------------ the ledger


def test_the_priority_ledger_follows_assume_and_forget_per_priority():
    s = scheduler(
        [
            node("a", cpu=8, pod_requests=[pod("a1", cpu=1, priority=0), pod("a2", cpu=2, priority=5)]),
            node("b", cpu=8, pod_requests=[pod("b1", cpu=3, priority=0)]),
        ]
    )
    snapshot = s.snapshot
    ledger = PriorityLedger.of(snapshot)
    rows = np.array([snapshot.index["a"], snapshot.index["b"]])
    cpu = snapshot.column["cpu"]
    pods, freed = ledger.below(5, rows, [cpu])
    assert pods.tolist() == [1, 1] and freed[:, 0].tolist() == [1000, 3000]
    pods, freed = ledger.below(6, rows, [cpu])
    assert pods.tolist() == [2, 1] and freed[:, 0].tolist() == [3000, 3000]
    snapshot.forget("b1")
    snapshot.assume(snapshot.pod_info(pod("b2", cpu=1, priority=3)), int(rows[1]))
    pods, freed = ledger.below(5, rows, [cpu])
    assert pods.tolist() == [1, 1] and freed[:, 0].tolist() == [1000, 1000]
    assert ledger.any_below(1) and not ledger.any_below(0)
    snapshot.forget("a1")
    assert sorted(ledger.levels) == [3, 5]  # a priority no pod has any more holds nothing


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6], ids=lambda seed: f"random cluster {seed}")
def test_preemption_with_rows_skipped_decides_as_trying_every_row(seed, monkeypatch):
    nodes, stream = random_cluster(seed)
    fast = outcomes(scheduler(nodes), stream)
    monkeypatch.setattr(
        preemption.DefaultPreemption, "_hopeful", lambda self, ctx, rows: np.ones(len(rows), dtype=np.bool_)
    )
    every_row = outcomes(scheduler(nodes), stream)
    assert fast == every_row
    assert any(kind == "evicted" for kind, _, _ in fast)


def test_preemption_costs_no_what_if_when_no_pod_has_lower_priority(monkeypatch):
    s = scheduler([node("a", cpu=2, pod_requests=[pod("high", cpu=2, priority=100)])])
    tried: list[int] = []
    victims = preemption.DefaultPreemption._victims
    monkeypatch.setattr(
        preemption.DefaultPreemption,
        "_victims",
        lambda self, ctx, row: tried.append(row) or victims(self, ctx, row),
    )
    s.add_pod(pod("vip", cpu=2, priority=50), 0.0)
    [outcome] = s.schedule(0.0)
    assert isinstance(outcome, Unschedulable)
    assert outcome.message.endswith(
        "preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod."
    )
    assert tried == []


# ------------------------------------------------------------------------------------ node-key cache


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param(None, ["c"], id="only the empty zone passes before any node changes"),
        pytest.param({ZONE: "z1"}, ["a", "b", "c"], id="a node moved into a crowded zone ends the empty one"),
        pytest.param({ZONE: "z4"}, ["c"], id="a node moved into a zone of its own is an empty domain"),
        pytest.param({}, ["a", "b"], id="a node that loses the zone label fails and holds no domain"),
    ],
)
def test_spread_reads_node_labels_changed_after_they_were_cached(labels, expected):
    web = [pod("old-a", cpu=0.5, labels={"app": "web"})], [pod("old-b", cpu=0.5, labels={"app": "web"})]
    s = scheduler(
        [zoned("a", "z1", pod_requests=web[0]), zoned("b", "z2", pod_requests=web[1]), zoned("c", "z3")]
    )
    assert passing(s, spread_by_zone("first")) == ["c"]  # fills the cache
    if labels is not None:
        s.upsert_node(NodeSpec(name="c", allocatable={"cpu": 4000, "memory": 8 * 2**30}, labels=labels))
    assert passing(s, spread_by_zone("second")) == expected


def passing(s: Scheduler, incoming: PodRequest) -> list[str]:
    snapshot = s.snapshot
    profile = s.profiles.get("default")
    assert profile is not None
    ctx = CycleContext(incoming, snapshot.pod_info(incoming), snapshot, 0.0)
    keep = profile.plugin("PodTopologySpread").filter(ctx, slice(0, snapshot.rows))
    return sorted(snapshot.names[row] or "" for row in np.flatnonzero(keep & snapshot.live[: snapshot.rows]))


def test_spread_reads_node_affinity_changed_after_it_was_cached():
    web = [pod("old-a", cpu=0.5, labels={"app": "web"})], [pod("old-b", cpu=0.5, labels={"app": "web"})]
    tier = {"tier": "web"}
    s = scheduler(
        [
            node("a", labels={ZONE: "z1", HOST: "a", **tier}, pod_requests=web[0]),
            node("b", labels={ZONE: "z2", HOST: "b", **tier}, pod_requests=web[1]),
            zoned("c", "z3"),
        ]
    )

    def incoming(uid: str) -> PodRequest:
        return spread_by_zone(uid).model_copy(update={"node_selector": tier})

    # c fails the pod's node selector, so its empty zone is no domain: the minimum is 1 and all pass.
    assert passing(s, incoming("first")) == ["a", "b", "c"]
    s.upsert_node(
        NodeSpec(name="c", allocatable={"cpu": 4000, "memory": 8 * 2**30}, labels={ZONE: "z3", **tier})
    )
    assert passing(s, incoming("second")) == ["c"]


# --------------------------------------------------------------------------------- spread scores per count


def one_constraint(max_skew: int) -> Constraint:
    return Constraint(max_skew, HOST, None, 1, True, False, ())


@pytest.mark.parametrize(
    ("counts", "max_skew", "domains"),
    [
        pytest.param([0] * 50 + [1, 2, 1, 3], 1, 54, id="mostly empty hosts and a few with replicas"),
        pytest.param([4, 4, 4, 4], 1, 4, id="every host with the same count scores 100"),
        pytest.param([0, 0, 0], 1, 3, id="no replica anywhere scores 100"),
        pytest.param([2, 5, 3, 9, 2], 3, 5, id="counts from two upward with a larger skew"),
        pytest.param([0, 7, 1], 2, 1, id="three hosts weighted by one domain"),
        pytest.param(list(range(40)), 1, 1000, id="as many counts as hosts"),
    ],
)
def test_spread_scores_per_count_equal_scores_per_node(counts, max_skew, domains):
    array = np.array(counts, dtype=np.int64)
    state = PreScoreState(
        ignored=np.zeros(len(array), dtype=np.bool_),
        counts=[array],
        has_key=[np.ones(len(array), dtype=np.bool_)],
        domains=[{}],
        weights=[topology_normalizing_weight(domains)],
    )
    constraints = [one_constraint(max_skew)]
    expected = normalize(raw_scores(constraints, state), state.ignored)
    assert final_scores(constraints, state).tolist() == expected.tolist()


@pytest.mark.parametrize("seed", [7, 8, 9], ids=lambda seed: f"random cluster {seed}")
def test_preemption_given_a_plain_dict_of_rejected_rows_decides_the_same(seed, monkeypatch):
    nodes, stream = random_cluster(seed)
    grouped = outcomes(scheduler(nodes), stream)
    by_row = scheduler_module._Rejection.by_row
    monkeypatch.setattr(scheduler_module._Rejection, "by_row", lambda self: dict(by_row(self)))
    assert outcomes(scheduler(nodes), stream) == grouped
