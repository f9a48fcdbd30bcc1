"""SchedulingGates: gated pods wait outside the queue; the version without gates is queued and placed."""

from __future__ import annotations

import pytest

from policies.framework.profile import ProfileSet, parse_profile
from policies.scheduler import Placed, Scheduler, Unschedulable
from schemas.node import NodeSpec
from schemas.pod import PodRequest


def node(name: str = "n1") -> NodeSpec:
    return NodeSpec(name=name, capacity={"cpu": "4", "memory": "8Gi", "pods": 110})


def pod(uid: str = "p", *gates: str, cpu: str = "1", scheduler: str = "default") -> PodRequest:
    return PodRequest.model_validate(
        {"uid": uid, "requests": {"cpu": cpu}, "scheduling_gates": list(gates), "scheduler_name": scheduler}
    )


def scheduler(*nodes: NodeSpec) -> Scheduler:
    s = Scheduler()
    for spec in nodes or (node(),):
        s.upsert_node(spec)
    return s


def placed(outcomes: list[object]) -> dict[str, str]:
    return {o.uid: o.node for o in outcomes if isinstance(o, Placed)}


def test_a_gated_pod_is_neither_tried_nor_answered_and_counts_as_pending() -> None:
    s = scheduler()
    assert s.add_pod(pod("p", "example.com/quota"), 0.0) == []
    assert s.schedule(1.0) == []
    assert s.pending == 1
    assert "p" in s.gated()
    assert "p" not in s.snapshot.pods


def test_the_version_without_gates_is_queued_and_placed() -> None:
    s = scheduler()
    s.add_pod(pod("p", "a", "b"), 0.0)
    s.add_pod(pod("p", "b"), 1.0)
    assert s.schedule(1.0) == []
    s.add_pod(pod("p"), 2.0)
    assert placed(s.schedule(2.0)) == {"p": "n1"}
    assert s.gated() == {}


def test_a_gated_pod_that_is_deleted_is_forgotten() -> None:
    s = scheduler()
    s.add_pod(pod("p", "a"), 0.0)
    s.delete_pod("p", 1.0)
    assert s.pending == 0
    s.add_pod(pod("p"), 2.0)
    assert placed(s.schedule(2.0)) == {"p": "n1"}


def test_ungated_pods_keep_their_queue_order_among_themselves() -> None:
    s = scheduler()
    s.add_pod(pod("gated", "a"), 0.0)
    s.add_pod(pod("free"), 0.0)
    assert placed(s.schedule(0.0)) == {"free": "n1"}
    s.add_pod(pod("gated"), 1.0)
    assert placed(s.schedule(1.0)) == {"gated": "n1"}


def test_explain_says_a_gated_pod_waits_for_its_gates() -> None:
    explanation = scheduler().explain(pod("p", "example.com/a", "example.com/b"))
    assert explanation.selected is None
    assert explanation.message == "waiting for scheduling gates: [example.com/a example.com/b]"


@pytest.mark.parametrize(
    ("document", "gated"),
    [
        pytest.param({"schedulerName": "default"}, True, id="the default profile holds gated pods"),
        pytest.param(
            {
                "schedulerName": "default",
                "plugins": {"preEnqueue": {"disabled": [{"name": "SchedulingGates"}]}},
            },
            False,
            id="a profile without SchedulingGates places gated pods as any other",
        ),
    ],
)
def test_the_gate_is_a_plugin_of_the_profile(document: dict[str, object], gated: bool) -> None:
    s = Scheduler(ProfileSet([parse_profile(document)]))
    s.upsert_node(node())
    s.add_pod(pod("p", "a"), 0.0)
    outcomes = s.schedule(0.0)
    assert (placed(outcomes) == {}) is gated
    assert not [o for o in outcomes if isinstance(o, Unschedulable)]
