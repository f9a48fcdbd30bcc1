"""The scheduler core: filters with their reasons, the queue order, retries, idempotence, determinism."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.scheduler import Placed, Unschedulable
from tests.policies.builders import node, place, pod, scheduler

TAINT = {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("case", "nodes", "incoming", "feasible", "filtered"),
    [
        (
            "a NoSchedule taint keeps an intolerant pod away",
            [node("a", taints=[TAINT]), node("b")],
            pod("p"),
            ["b"],
            {"a": ["node(s) had untolerated taint {dedicated: gpu}"]},
        ),
        (
            "a matching toleration lets the pod on",
            [node("a", taints=[TAINT])],
            pod("p", tolerations=[{"key": "dedicated", "value": "gpu"}]),
            ["a"],
            {},
        ),
        (
            "a PreferNoSchedule taint filters nothing",
            [node("a", taints=[{**TAINT, "effect": "PreferNoSchedule"}])],
            pod("p"),
            ["a"],
            {},
        ),
        (
            "the node selector must match a label",
            [node("a", labels={"zone": "x"}), node("b", labels={"zone": "y"})],
            pod("p", node_selector={"zone": "y"}),
            ["b"],
            {"a": ["node(s) didn't match Pod's node affinity/selector"]},
        ),
        (
            "a selector on a label no node has matches nothing",
            [node("a")],
            pod("p", node_selector={"gpu": "a100"}),
            [],
            {"a": ["node(s) didn't match Pod's node affinity/selector"]},
        ),
        (
            "required affinity terms are ORed and their expressions ANDed",
            [
                node("a", labels={"zone": "x", "size": "8"}),
                node("b", labels={"zone": "y", "size": "2"}),
                node("c", labels={"zone": "z"}),
            ],
            pod(
                "p",
                node_affinity=[
                    {
                        "match_expressions": [
                            {"key": "zone", "operator": "In", "values": ["x"]},
                            {"key": "size", "operator": "Gt", "values": ["4"]},
                        ]
                    },
                    {"match_expressions": [{"key": "zone", "operator": "NotIn", "values": ["x", "z"]}]},
                ],
            ),
            ["a", "b"],
            {"c": ["node(s) didn't match Pod's node affinity/selector"]},
        ),
        (
            "a cordoned node takes no pods",
            [node("a", unschedulable=True), node("b")],
            pod("p"),
            ["b"],
            {"a": ["node(s) were unschedulable"]},
        ),
        (
            "a host port in use rules the node out",
            [node("a", pod_requests=[pod("x", host_ports=[8080])]), node("b")],
            pod("p", host_ports=[8080]),
            ["b"],
            {"a": ["node(s) didn't have free ports for the requested pod ports"]},
        ),
        (
            "a port on another protocol does not clash",
            [node("a", pod_requests=[pod("x", host_ports=[{"port": 53, "protocol": "UDP"}])])],
            pod("p", host_ports=[53]),
            ["a"],
            {},
        ),
        (
            "the first filter to reject a node names the reason",
            [node("a", unschedulable=True, taints=[TAINT], cpu=1)],
            pod("p", cpu=8),
            [],
            {"a": ["node(s) were unschedulable"]},
        ),
    ],
)
def test_filters_drop_nodes_with_upstream_reasons(case, nodes, incoming, feasible, filtered):
    explanation = scheduler(nodes).explain(incoming)
    assert explanation.feasible == feasible
    assert explanation.filtered == filtered


def test_a_pod_that_fits_nowhere_gets_kubernetes_fit_error():
    s = scheduler([node("a", cpu=1), node("b", cpu=1), node("c", taints=[TAINT])])
    s.add_pod(pod("big", cpu=2), 0)
    [outcome] = s.schedule(0)
    assert isinstance(outcome, Unschedulable)
    # The taint is no reason preemption could lift; the other two nodes have no lower-priority pods.
    assert outcome.message == (
        "0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: gpu}, 2 Insufficient cpu. "
        "preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )
    assert outcome.reasons == ("1 node(s) had untolerated taint {dedicated: gpu}", "2 Insufficient cpu")


@settings(max_examples=60, deadline=None)
@given(
    shapes=st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(0, 2), st.booleans()),
        min_size=1,
        max_size=9,
    ),
    wanted=st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 3)),
)
def test_the_fit_error_counts_the_reasons_each_node_gives(shapes, wanted):
    # The fit error is counted without a list of reasons per node; the explanation still lists them.
    nodes = [
        node(f"n{i}", cpu=cpu, memory=f"{memory}Gi", pods=pods, taints=[TAINT] if tainted else [])
        for i, (cpu, memory, pods, tainted) in enumerate(shapes)
    ]
    cpu, memory, gpus = wanted
    incoming = pod("p", cpu=cpu, memory=f"{memory}Gi", requests={"nvidia.com/gpu": gpus} if gpus else {})
    s = scheduler(nodes)
    explanation = s.explain(incoming)
    s.add_pod(incoming, 0)
    [outcome] = s.schedule(0)
    if not isinstance(outcome, Unschedulable):
        assert explanation.selected == outcome.node
        return
    given_by_nodes = Counter(reason for reasons in explanation.filtered.values() for reason in reasons)
    assert outcome.reasons == tuple(sorted(f"{count} {reason}" for reason, count in given_by_nodes.items()))


def test_higher_priority_pods_are_placed_first():
    s = scheduler([node("a", cpu=1)])
    result = place(s, pod("low", cpu=1, priority=1), pod("high", cpu=1, priority=10))
    assert result == {"high": "a", "low": None}


def test_qos_sort_prefers_guaranteed_pods_at_equal_priority():
    qos = {
        "schedulerName": "qos",
        "plugins": {"queueSort": {"disabled": [{"name": "*"}], "enabled": [{"name": "QOSSort"}]}},
    }
    s = scheduler([node("a", cpu=1, memory="1Gi")], qos)
    burstable = pod("burstable", cpu=1, scheduler_name="qos")
    guaranteed = pod(
        "guaranteed",
        scheduler_name="qos",
        requests={"cpu": 1, "memory": "1Gi"},
        limits={"cpu": 1, "memory": "1Gi"},
    )
    assert place(s, burstable, guaranteed) == {"guaranteed": "a", "burstable": None}


def test_equal_scores_break_ties_the_same_way_on_every_replay():
    def run():
        s = scheduler([node(f"n{i}") for i in range(8)])
        return place(s, *(pod(f"p{j}", cpu="100m") for j in range(20)))

    first, second = run(), run()
    assert first == second
    assert len(set(first.values())) > 1, "ties should not all go to one node"


def test_an_unschedulable_pod_is_retried_when_the_cluster_changes_after_its_backoff():
    s = scheduler([node("a", cpu=1)])
    assert place(s, pod("p", cpu=2)) == {"p": None}
    s.upsert_node(node("b", cpu=4).spec())
    assert s.schedule(0.5) == []  # still backing off (1 s after the first failure)
    [outcome] = s.schedule(1.0)
    assert isinstance(outcome, Placed) and outcome.node == "b" and outcome.attempt == 1


def test_a_pod_is_not_retried_without_a_change_until_the_flush_interval():
    s = scheduler([node("a", cpu=1)])
    place(s, pod("p", cpu=2))
    assert s.schedule(100.0) == []
    assert [type(o) for o in s.schedule(301.0)] == [Unschedulable]


def test_a_pod_request_seen_twice_is_placed_once():
    s = scheduler([node("a"), node("b")])
    p = pod("p", cpu=1)
    s.add_pod(p, 0)
    s.add_pod(p, 0)
    assert len(s.schedule(0)) == 1
    s.add_pod(p, 1)
    assert s.schedule(1) == []


def test_deleting_a_pod_releases_its_resources():
    s = scheduler([node("a", cpu=1)])
    assert place(s, pod("first", cpu=1)) == {"first": "a"}
    assert place(s, pod("second", cpu=1)) == {"second": None}
    s.delete_pod("first", 1.0)
    [outcome] = s.schedule(2.0)
    assert isinstance(outcome, Placed) and outcome.uid == "second"


def test_a_conflict_returns_the_pod_to_the_queue_with_the_next_attempt():
    s = scheduler([node("a"), node("b")])
    p = pod("p", cpu=1)
    [placed] = [o for o in (s.add_pod(p, 0) or s.schedule(0))]
    assert s.snapshot.pods["p"]
    s.requeue(p, 1.0, attempt=placed.attempt)
    [again] = s.schedule(1.0)
    assert isinstance(again, Placed) and again.attempt == 1


def test_a_pod_naming_an_unknown_profile_is_unschedulable_at_once():
    s = scheduler([node("a")])
    [outcome] = s.add_pod(pod("p", scheduler_name="nope"), 0)
    assert isinstance(outcome, Unschedulable) and "no profile named 'nope'" in outcome.message


def test_the_assume_cache_makes_the_next_pod_see_the_last():
    s = scheduler([node("a", cpu=2), node("b", cpu=2)])
    result = place(s, pod("p1", cpu="1500m"), pod("p2", cpu="1500m"))
    assert sorted(result.values()) == ["a", "b"]


def test_removing_a_node_requeues_nothing_and_frees_its_row_for_the_next_node():
    s = scheduler([node("a"), node("b")])
    place(s, pod("p", cpu=1, node_selector={}))
    s.remove_node("a", 1.0)
    s.upsert_node(node("c").spec())
    assert sorted(n for n in s.snapshot.names if n) == ["b", "c"]


_taint = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["dedicated", "gpu", "zone"]),
        "value": st.sampled_from(["a", "b"]),
        "effect": st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
    }
)


@settings(max_examples=80, deadline=None)
@given(
    taints=st.lists(st.lists(_taint, max_size=4), min_size=1, max_size=6),
    tolerations=st.lists(_taint, max_size=2),
)
def test_each_node_reports_its_first_untolerated_taint_in_its_own_order(taints, tolerations):
    """The plugin names a node's single untolerated taint from the snapshot's bits and reads the node only
    when it has several; either way the reason is the first in the node's order, as upstream reports."""
    s = scheduler([node(f"n{i}", taints=list(node_taints)) for i, node_taints in enumerate(taints)])
    explanation = s.explain(pod("p", tolerations=[{**t, "operator": "Equal"} for t in tolerations]))
    for i, node_taints in enumerate(taints):
        first = next(
            (
                t
                for t in node_taints
                if t["effect"] != "PreferNoSchedule"
                and not any(
                    (o["key"], o["value"], o["effect"]) == (t["key"], t["value"], t["effect"])
                    for o in tolerations
                )
            ),
            None,
        )
        expected = [f"node(s) had untolerated taint {{{first['key']}: {first['value']}}}"] if first else None
        assert explanation.filtered.get(f"n{i}") == expected
