"""DefaultPreemption: a high-priority pod that fits nowhere evicts the fewest, lowest-priority pods."""

import pytest

from policies.scheduler import Evicted, Placed, Unschedulable
from tests.policies.builders import node, pod, scheduler

PREEMPTING = {
    "schedulerName": "preempt",
    "plugins": {"postFilter": {"enabled": [{"name": "DefaultPreemption"}]}},
}


def resident(uid, cpu, priority):
    return pod(uid, cpu=cpu, priority=priority, scheduler_name="preempt")


def test_a_high_priority_pod_evicts_the_fewest_lowest_priority_pods_on_one_node():
    nodes = [
        # a: freeing 3 cores needs two evictions
        node("a", cpu=4, pod_requests=[resident("a1", 2, 1), resident("a2", 2, 1)]),
        # b: one eviction of a 3-core pod is enough
        node("b", cpu=4, pod_requests=[resident("b1", 3, 1), resident("b2", 1, 5)]),
        # c: its pods outrank the preemptor
        node("c", cpu=4, pod_requests=[resident("c1", 4, 100)]),
    ]
    s = scheduler(nodes, PREEMPTING)
    s.add_pod(resident("vip", 3, 50), 0)
    outcomes = s.schedule(0)
    evicted = [o for o in outcomes if isinstance(o, Evicted)]
    assert [(e.uid, e.node, e.preemptor) for e in evicted] == [("b1", "b", "vip")]
    placed = [o for o in outcomes if isinstance(o, Placed)]
    assert [(p.uid, p.node) for p in placed] == [("vip", "b")]
    assert "b2" in s.snapshot.pods and "b1" not in s.snapshot.pods


def test_preemption_prefers_lower_priority_victims_at_equal_count():
    nodes = [
        node("a", cpu=2, pod_requests=[resident("a1", 2, 10)]),
        node("b", cpu=2, pod_requests=[resident("b1", 2, 3)]),
    ]
    s = scheduler(nodes, PREEMPTING)
    s.add_pod(resident("vip", 2, 50), 0)
    assert [o.uid for o in s.schedule(0) if isinstance(o, Evicted)] == ["b1"]


def test_no_pod_is_evicted_when_eviction_cannot_help():
    nodes = [
        node("a", cpu=2, pod_requests=[resident("a1", 1, 100)]),
        node("b", cpu=2, unschedulable=True, pod_requests=[resident("b1", 2, 0)]),
    ]
    s = scheduler(nodes, PREEMPTING)
    s.add_pod(resident("vip", 2, 50), 0)
    outcomes = s.schedule(0)
    assert [type(o) for o in outcomes] == [Unschedulable]
    assert sorted(s.snapshot.pods) == ["a1", "b1"]
    assert s.snapshot.version[s.snapshot.index["a"]] == s.snapshot.version[s.snapshot.index["a"]]


def test_the_default_profile_preempts_as_kube_schedulers_does():
    s = scheduler([node("a", cpu=2, pod_requests=[pod("low", cpu=2)])])
    s.add_pod(pod("vip", cpu=2, priority=100), 0)
    outcomes = s.schedule(0)
    assert [(type(o), o.uid) for o in outcomes] == [(Evicted, "low"), (Placed, "vip")]


def test_a_profile_without_default_preemption_does_not_preempt():
    no_preemption = {
        "schedulerName": "calm",
        "plugins": {"postFilter": {"disabled": [{"name": "DefaultPreemption"}]}},
    }
    s = scheduler([node("a", cpu=2, pod_requests=[pod("low", cpu=2)])], no_preemption)
    s.add_pod(pod("vip", cpu=2, priority=100, scheduler_name="calm"), 0)
    [outcome] = s.schedule(0)
    assert isinstance(outcome, Unschedulable)
    assert outcome.message == "0/1 nodes are available: 1 Insufficient cpu."


def anti(app):
    term = {"topology_key": "kubernetes.io/hostname", "label_selector": {"match_labels": {"app": app}}}
    return {"required": [term]}


@pytest.mark.parametrize(
    ("incoming", "evicted"),
    [
        pytest.param(
            pod("vip", cpu=1, priority=100, pod_anti_affinity=anti("web")),
            ["low"],
            id="a pod whose anti-affinity a lower-priority pod blocks evicts that pod",
        ),
        pytest.param(
            pod(
                "vip",
                cpu=1,
                priority=100,
                pod_affinity={
                    "required": [
                        {
                            "topology_key": "kubernetes.io/hostname",
                            "label_selector": {"match_labels": {"app": "db"}},
                        }
                    ]
                },
            ),
            [],
            id="a pod whose required affinity no node meets evicts nobody",
        ),
    ],
)
def test_inter_pod_affinity_failures_are_resolvable_only_for_anti_affinity(incoming, evicted):
    low = pod("low", cpu=1, labels={"app": "web"})
    s = scheduler([node("a", cpu=4, labels={"kubernetes.io/hostname": "a"}, pod_requests=[low])])
    s.add_pod(incoming, 0)
    assert [o.uid for o in s.schedule(0) if isinstance(o, Evicted)] == evicted
