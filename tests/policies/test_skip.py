"""PreFilter/PreScore Skip in the cycle: a plugin stage with nothing to do for a pod is not called, and every
decision (node, total, each plugin's score) stays what running every stage gives, also once the cluster
state a skip reads changes (an existing pod with anti-affinity, a node reporting images)."""

from __future__ import annotations

from typing import Any

import pytest

from policies.explain import NodeState
from policies.plugins.imagelocality import NAME as IMAGE_LOCALITY
from policies.plugins.interpodaffinity import NAME as INTER_POD_AFFINITY
from policies.plugins.nodename import NAME as NODE_NAME
from policies.plugins.podtopologyspread import NAME as POD_TOPOLOGY_SPREAD
from policies.scheduler import Placed, Scheduler, Unschedulable
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, scheduler

HOST = "kubernetes.io/hostname"
MB = 1024 * 1024


def labelled(name: str, host: str | None = None, **fields: Any) -> NodeState:
    return node(name, labels={HOST: host or name}, **fields)


def anti(uid: str, app: str, **fields: Any) -> PodRequest:
    term = {"label_selector": {"match_labels": {"app": app}}, "topology_key": HOST}
    return pod(uid, "100m", labels={"app": "anti"}, pod_anti_affinity={"required": [term]}, **fields)


def spread(uid: str) -> PodRequest:
    constraint = {
        "max_skew": 1,
        "topology_key": HOST,
        "when_unsatisfiable": "DoNotSchedule",
        "label_selector": {"match_labels": {"app": "web"}},
    }
    return pod(uid, "100m", labels={"app": "web"}, topology_spread_constraints=[constraint])


def decide(s: Scheduler, incoming: PodRequest) -> tuple[str | None, dict[str, int]]:
    """Place one pod, checking it against a cycle that runs every plugin (`explain`, on the same state):
    the same node, and each plugin's score there, skipped ones 0."""
    full = s.explain(incoming)
    s.add_pod(incoming, 0.0)
    outcomes = [o for o in s.schedule(0.0) if isinstance(o, Placed | Unschedulable)]
    assert len(outcomes) == 1
    outcome = outcomes[0]
    if isinstance(outcome, Unschedulable):
        assert full.selected is None
        return None, {}
    assert outcome.node == full.selected
    expected = {plugin: scores[outcome.node] for plugin, scores in full.scores.items()}
    assert outcome.plugin_scores == expected
    assert list(outcome.plugin_scores) == list(expected)  # in the profile's order
    return outcome.node, outcome.plugin_scores


@pytest.mark.parametrize(
    ("case", "nodes", "steps", "expected"),
    [
        (
            "a plain pod after one with required anti-affinity keeps away from it, though plain pods "
            "before it skipped InterPodAffinity's filter",
            [labelled("a"), labelled("b", cpu="8")],
            [
                pod("first", "100m", labels={"app": "other"}),
                anti("guard", "web"),
                pod("web", "100m", labels={"app": "web"}),
            ],
            {"first": "b", "guard": "a", "web": "b"},
        ),
        (
            "a pod of the guarded app has no node left when the guard's term covers every node",
            [labelled("a", "same"), labelled("b", "same")],
            [
                pod("first", "100m", labels={"app": "other"}),
                anti("guard", "web"),
                pod("web", "100m", labels={"app": "web"}),
            ],
            {"first": "b", "guard": "a", "web": None},
        ),
        (
            "a pod with spread constraints of its own is filtered by PodTopologySpread after pods without",
            [labelled("a", cpu="8"), labelled("b")],
            [pod("plain", "100m"), spread("web-1"), spread("web-2")],
            {"plain": "b", "web-1": "a", "web-2": "b"},
        ),
        (
            "a pod naming its node goes there after pods that skipped NodeName",
            [labelled("a", cpu="8"), labelled("b")],
            [pod("plain", "100m"), pod("pinned", "100m", node_name="a")],
            {"plain": "b", "pinned": "a"},
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_skipped_stages_decide_as_running_every_stage(
    case: str, nodes: list[NodeState], steps: list[PodRequest], expected: dict[str, str | None]
) -> None:
    s = scheduler(nodes)
    assert {p.uid: decide(s, p)[0] for p in steps} == expected


def test_skipped_scorers_score_zero_and_their_stages_are_not_called() -> None:
    s = scheduler([labelled("a"), labelled("b")])
    profile = s.profiles.get("default")
    assert profile is not None
    called: list[str] = []
    for name, stage in (
        (NODE_NAME, "filter"),
        (INTER_POD_AFFINITY, "filter"),
        (INTER_POD_AFFINITY, "score"),
        (POD_TOPOLOGY_SPREAD, "score"),
        (IMAGE_LOCALITY, "score"),
    ):
        plugin = profile.plugins[name]
        method = getattr(plugin, stage)

        def spy(*args: Any, _method: Any = method, _label: str = f"{name}.{stage}") -> Any:
            called.append(_label)
            return _method(*args)

        setattr(plugin, stage, spy)
    _, scores = decide(s, pod("plain", "100m"))
    called.clear()  # `decide` explains first, which runs every plugin
    s.add_pod(pod("again", "100m"), 0.0)
    s.schedule(0.0)
    assert called == []
    assert scores[INTER_POD_AFFINITY] == scores[IMAGE_LOCALITY] == scores[POD_TOPOLOGY_SPREAD] == 0


def test_a_node_reporting_images_makes_image_locality_score_again() -> None:
    s = scheduler([labelled("a"), labelled("b")])
    image = {"names": ["big:latest"], "size_bytes": 900 * MB}
    with_image = pod("with-image", containers=[{"name": "app", "image": "big"}])
    assert decide(s, pod("plain", "100m"))[1][IMAGE_LOCALITY] == 0
    s.upsert_node(labelled("b", images=[image]).spec())
    node_name, scores = decide(s, with_image)
    assert (node_name, scores[IMAGE_LOCALITY] > 0) == ("b", True)
