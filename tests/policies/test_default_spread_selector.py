"""PodTopologySpread's system default constraints with the pod's default selector
(``PodRequest.default_spread_selector``, kube-scheduler's DefaultSelector): applied only to a pod without
constraints of its own, counting the pods that match every part of the selector; none or an empty one
applies no default."""

from __future__ import annotations

from typing import Any

import pytest

from policies.plugins.podtopologyspread import NAME
from schemas.manifest import pod_from_manifest
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, profile, scheduler

# ------------------------------------------------------------------------------------------- builders

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def cluster_node(name: str, zone: str, *existing: PodRequest) -> Any:
    return node(name, labels={HOSTNAME: name, ZONE: zone}, pod_requests=list(existing))


def web(uid: str, **labels: str) -> PodRequest:
    return pod(uid, "100m", labels={"app": "web", **labels})


def nodes() -> list[Any]:
    """Zone z1: a (three web pods), b (none); zone z2: c (one web pod, tier x), d (none)."""
    return [
        cluster_node("a", "z1", web("a1"), web("a2"), web("a3")),
        cluster_node("b", "z1"),
        cluster_node("c", "z2", web("c1", tier="x")),
        cluster_node("d", "z2"),
    ]


def scores(incoming: PodRequest) -> dict[str, int]:
    """PodTopologySpread's final scores of the incoming pod with the system defaults (the default args)."""
    document = profile("spread", score=[(NAME, 1)])
    out = scheduler(nodes(), document).explain(incoming, profile_name="spread")
    return dict(out.scores[NAME])


OWN_CONSTRAINT = [
    {
        "max_skew": 1,
        "topology_key": ZONE,
        "when_unsatisfiable": "ScheduleAnyway",
        "label_selector": {"match_labels": {"app": "nobody"}},
    }
]

# Upstream's arithmetic, by hand: hostname weight ln(4 + 2), zone weight ln(2 + 2); a node scores
# round(Σ count × weight + maxSkew − 1), then 100 × (max + min − score) / max in integers.
CASES = [
    pytest.param(
        {"match_labels": {"app": "web"}},
        None,
        {"a": 43, "b": 81, "c": 87, "d": 100},
        id="a pod its Service selects is spread by hostname and zone over the pods the selector matches",
    ),
    pytest.param(
        {
            "match_labels": {"app": "web"},
            "match_expressions": [{"key": "tier", "operator": "In", "values": ["x"]}],
        },
        None,
        {"a": 100, "b": 100, "c": 66, "d": 88},
        id="every part of the selector must match: the ReplicaSet's requirement narrows the Service's labels",
    ),
    pytest.param(None, None, None, id="a pod nothing selects or owns gets no default constraints"),
    pytest.param({}, None, None, id="an empty default selector applies no default constraints"),
    pytest.param(
        {"match_labels": {"app": "web"}},
        OWN_CONSTRAINT,
        {"a": 100, "b": 100, "c": 100, "d": 100},
        id="a pod with constraints of its own is spread by those only, whatever its default selector",
    ),
]


@pytest.mark.parametrize(("selector", "constraints", "expected"), CASES)
def test_system_defaults_follow_the_default_selector(
    selector: dict[str, Any] | None, constraints: list[dict[str, Any]] | None, expected: dict[str, int] | None
) -> None:
    fields: dict[str, Any] = {"labels": {"app": "web", "tier": "x"}}
    if selector is not None:
        fields["default_spread_selector"] = selector
    if constraints is not None:
        fields["topology_spread_constraints"] = constraints
    got = scores(pod("incoming", "100m", **fields))
    if expected is None:
        # PreScore's Skip: the plugin adds nothing to any node.
        assert set(got.values()) <= {0}, got
    else:
        assert got == expected


def test_a_manifest_carries_no_default_selector() -> None:
    """A Pod manifest names its controller, not the controller's selector: only the bridge or a cluster dump
    can fill the field in."""
    manifest = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p",
            "labels": {"app": "web"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": "u", "controller": True}
            ],
        },
        "spec": {"containers": [{"name": "c"}]},
    }
    assert pod_from_manifest(manifest).default_spread_selector is None
