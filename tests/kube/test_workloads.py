"""kube-scheduler's DefaultSelector (`streams.kube.workloads`): upstream's helper/spread_test.go tables, and
the cases around them that its code decides (controller references, group versions, nil and empty
selectors, namespaces, deletions)."""

from __future__ import annotations

from typing import Any

import pytest

from schemas.pod import LabelSelector
from streams.kube.workloads import Workloads, controller_of

# ------------------------------------------------------------------------------------------- builders

Requirement = tuple[str, str, tuple[str, ...]]


def service(name: str, selector: dict[str, str] | None, namespace: str = "test") -> dict[str, Any]:
    spec = {} if selector is None else {"selector": selector}
    return {"kind": "Service", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def rc(name: str, selector: dict[str, str], namespace: str = "test") -> dict[str, Any]:
    return {
        "kind": "ReplicationController",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": selector},
    }


def apps(kind: str, name: str, selector: dict[str, Any] | None, namespace: str = "test") -> dict[str, Any]:
    spec = {} if selector is None else {"selector": selector}
    return {"kind": kind, "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def owner(kind: str, name: str, api_version: str, controller: bool | None = True) -> dict[str, Any]:
    reference: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": "u"}
    if controller is not None:
        reference["controller"] = controller
    return reference


def pod(labels: dict[str, str], *owners: dict[str, Any], namespace: str = "test") -> dict[str, Any]:
    return {"namespace": namespace, "labels": labels, "ownerReferences": list(owners)}


def requirements(selector: LabelSelector | None) -> set[Requirement] | None:
    """What a selector requires, with ``key In [v]`` and ``key = v`` alike (as upstream's String shows
    both as ``key=v``)."""
    if selector is None:
        return None
    found: set[Requirement] = {(k, "=", (v,)) for k, v in selector.match_labels.items()}
    for e in selector.match_expressions:
        operator = "=" if e.operator == "In" and len(e.values) == 1 else e.operator
        found.add((e.key, operator, tuple(sorted(e.values))))
    return found


def labels_set(**labels: str) -> set[Requirement]:
    return {(k, "=", (v,)) for k, v in labels.items()}


# ------------------------------------------------- upstream: helper/spread_test.go, TestDefaultSelector

# Upstream adds each case's objects to one informer store, so later cases see the earlier ones' too.
UPSTREAM_SERVICE = service("test-service", {"podLabelKey": "podLabelVal"})
UPSTREAM_RS = apps(
    "ReplicaSet", "test-replicaset", {"matchLabels": {"replicaSetLabelKey": "replicaSetLabelVal"}}
)
UPSTREAM_RC = rc("test-replicationcontroller", {"replicationLabelKey": "replicationLabelVal"})
UPSTREAM_STS = apps(
    "StatefulSet", "test-statefulset", {"matchLabels": {"statefulSetLabelKey": "statefulSetLabelVal"}}
)
UPSTREAM_LABELS = {"podLabelKey": "podLabelVal"}

DEFAULT_SELECTOR_CASES = [
    pytest.param([], pod(UPSTREAM_LABELS), None, id="DefaultSelector for default case"),
    pytest.param(
        [UPSTREAM_SERVICE],
        pod(UPSTREAM_LABELS),
        labels_set(podLabelKey="podLabelVal"),
        id="DefaultSelector for no OwnerReference pod case",
    ),
    pytest.param(
        [UPSTREAM_SERVICE, UPSTREAM_RS],
        pod(UPSTREAM_LABELS, owner("ReplicaSet", "test-replicaset", "apps/v1")),
        labels_set(podLabelKey="podLabelVal", replicaSetLabelKey="replicaSetLabelVal"),
        id="DefaultSelector for ReplicaSet OwnerReference pod case",
    ),
    pytest.param(
        [UPSTREAM_SERVICE, UPSTREAM_RS, UPSTREAM_RC],
        pod(UPSTREAM_LABELS, owner("ReplicationController", "test-replicationcontroller", "v1")),
        labels_set(podLabelKey="podLabelVal", replicationLabelKey="replicationLabelVal"),
        id="DefaultSelector for ReplicationController OwnerReference pod case",
    ),
    pytest.param(
        [UPSTREAM_SERVICE, UPSTREAM_RS, UPSTREAM_RC, UPSTREAM_STS],
        pod(UPSTREAM_LABELS, owner("StatefulSet", "test-statefulset", "apps/v1")),
        labels_set(podLabelKey="podLabelVal", statefulSetLabelKey="statefulSetLabelVal"),
        id="DefaultSelector for StatefulSet OwnerReference pod case",
    ),
]


@pytest.mark.parametrize(("objects", "metadata", "expected"), DEFAULT_SELECTOR_CASES)
def test_upstream_default_selector(
    objects: list[dict[str, Any]], metadata: dict[str, Any], expected: set[Requirement] | None
) -> None:
    assert requirements(Workloads.of(objects).selector_for(metadata)) == expected


# ------------------------------------------------- upstream: helper/spread_test.go, TestGetPodServices

SERVICES = [service(f"service-{i}", {"app": f"test-{i}"}) for i in range(3)]


@pytest.mark.parametrize(
    ("index", "expected"),
    [
        pytest.param(0, labels_set(app="test-0"), id="GetPodServices for pod-0"),
        pytest.param(1, labels_set(app="test-1"), id="GetPodServices for pod-1"),
        pytest.param(2, labels_set(app="test-2"), id="GetPodServices for pod-2"),
        pytest.param(3, None, id="GetPodServices for pod-3"),
        pytest.param(4, None, id="GetPodServices for pod-4"),
    ],
)
def test_upstream_get_pod_services(index: int, expected: set[Requirement] | None) -> None:
    """Only the Service whose selector matches the pod's labels counts (seen through its selector)."""
    metadata = pod({"app": f"test-{index}", "label": f"label-{index}"})
    assert requirements(Workloads.of(SERVICES).selector_for(metadata)) == expected


# --------------------------------------------------------------------- what DefaultSelector's code decides

RS_WEB = apps(
    "ReplicaSet",
    "web",
    {
        "matchLabels": {"app": "web"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]}],
    },
)

CASES = [
    pytest.param(
        [
            service("a", {"app": "web"}),
            service("b", {"app": "web", "tier": "front"}),
            service("c", {"x": "y"}),
        ],
        pod({"app": "web", "tier": "front"}),
        labels_set(app="web", tier="front"),
        id="every Service whose selector matches the pod adds its labels, and one that does not adds nothing",
    ),
    pytest.param(
        [service("none", None), service("empty", {})],
        pod({"app": "web"}),
        None,
        id="a Service without a selector selects nothing and one with an empty selector adds nothing",
    ),
    pytest.param(
        [service("a", {"app": "web"}, namespace="other")],
        pod({"app": "web"}),
        None,
        id="a Service of another namespace does not select the pod",
    ),
    pytest.param(
        [service("a", {"app": "web"}), RS_WEB],
        pod({"app": "web", "tier": "front"}, owner("ReplicaSet", "web", "apps/v1")),
        labels_set(app="web") | {("tier", "In", ("edge", "front"))},
        id="a ReplicaSet's requirements are added to the Services' labels",
    ),
    pytest.param(
        [RS_WEB],
        pod({"app": "web"}, owner("ReplicaSet", "web", "apps/v1", controller=None)),
        None,
        id="an owner that is not the controller is not read",
    ),
    pytest.param(
        [RS_WEB],
        pod(
            {"app": "web"},
            owner("ReplicaSet", "other", "apps/v1", controller=False),
            owner("ReplicaSet", "web", "apps/v1"),
        ),
        labels_set(app="web") | {("tier", "In", ("edge", "front"))},
        id="the controller is the reference marked controller, wherever it is in the list",
    ),
    pytest.param(
        [RS_WEB],
        pod({"app": "web"}, owner("ReplicaSet", "web", "extensions/v1beta1")),
        None,
        id="a ReplicaSet of another group version is not read",
    ),
    pytest.param(
        [RS_WEB, service("a", {"app": "web"})],
        pod({"app": "web"}, owner("Deployment", "web", "apps/v1")),
        labels_set(app="web"),
        id="a controller of another kind adds nothing but the Services stay",
    ),
    pytest.param(
        [service("a", {"app": "web"})],
        pod({"app": "web"}, owner("ReplicaSet", "gone", "apps/v1")),
        labels_set(app="web"),
        id="a controller the cache does not hold adds nothing",
    ),
    pytest.param(
        [RS_WEB],
        pod({"app": "web"}, owner("ReplicaSet", "web", "apps/v1"), namespace="other"),
        None,
        id="a controller is looked up in the pod's namespace",
    ),
    pytest.param(
        [service("a", {"app": "web"}), rc("legacy", {"app": "old", "rc": "yes"})],
        pod({"app": "web"}, owner("ReplicationController", "legacy", "v1")),
        labels_set(app="old", rc="yes"),
        id="a ReplicationController's selector is merged into the labels and its values win",
    ),
    pytest.param(
        [apps("ReplicaSet", "nil", None), apps("StatefulSet", "empty", {})],
        pod({"app": "web"}, owner("ReplicaSet", "nil", "apps/v1")),
        None,
        id="a ReplicaSet without a selector adds nothing",
    ),
    pytest.param(
        [apps("StatefulSet", "empty", {})],
        pod({"app": "web"}, owner("StatefulSet", "empty", "apps/v1")),
        None,
        id="a StatefulSet with an empty selector adds nothing",
    ),
    pytest.param(
        [apps("ReplicaSet", "bad", {"matchExpressions": [{"key": "app", "operator": "In", "values": []}]})],
        pod({"app": "web"}, owner("ReplicaSet", "bad", "apps/v1")),
        None,
        id="a ReplicaSet whose selector does not convert adds nothing",
    ),
    pytest.param(
        [apps("ReplicaSet", "web", {"matchLabels": {"app": "other"}}), service("a", {"app": "web"})],
        pod({"app": "web"}, owner("ReplicaSet", "web", "apps/v1")),
        labels_set(app="web") | {("app", "=", ("other",))},
        id="a ReplicaSet's requirement on a key a Service also sets is kept beside it",
    ),
]


@pytest.mark.parametrize(("objects", "metadata", "expected"), CASES)
def test_default_selector(
    objects: list[dict[str, Any]], metadata: dict[str, Any], expected: set[Requirement] | None
) -> None:
    assert requirements(Workloads.of(objects).selector_for(metadata)) == expected


def test_a_replicaset_requirement_and_a_service_label_on_the_same_key_are_both_required() -> None:
    found = Workloads.of(CASES[-1].values[0]).selector_for(CASES[-1].values[1])
    assert found is not None
    assert not found.matches({"app": "web"}) and not found.matches({"app": "other"})


def test_deleted_and_relisted_objects_leave_the_cache() -> None:
    workloads = Workloads.of([service("a", {"app": "web"}), RS_WEB])
    metadata = pod({"app": "web", "tier": "front"}, owner("ReplicaSet", "web", "apps/v1"))
    workloads.apply(service("a", {"app": "web"}), deleted=True)
    assert requirements(workloads.selector_for(metadata)) == labels_set(app="web") | {
        ("tier", "In", ("edge", "front"))
    }
    workloads.replace("ReplicaSet", [])
    assert workloads.selector_for(metadata) is None
    assert len(workloads) == 0


@pytest.mark.parametrize(
    ("references", "expected"),
    [
        pytest.param([], None, id="a pod without owners has no controller"),
        pytest.param(
            [owner("ReplicaSet", "a", "apps/v1", controller=False)], None, id="an owner not marked is none"
        ),
        pytest.param(
            [owner("StatefulSet", "s", "apps/v1")],
            ("StatefulSet", "s"),
            id="a StatefulSet controller is read",
        ),
        pytest.param(
            [owner("ReplicationController", "r", "v1")],
            ("ReplicationController", "r"),
            id="a ReplicationController of the core group is read",
        ),
        pytest.param(
            [owner("ReplicaSet", "r", "apps/v1/extra")], None, id="an apiVersion that does not parse is none"
        ),
        pytest.param(
            [owner("Job", "j", "batch/v1")], None, id="a Job controller is none of DefaultSelector's"
        ),
    ],
)
def test_controller_of(references: list[dict[str, Any]], expected: tuple[str, str] | None) -> None:
    assert controller_of({"ownerReferences": references}) == expected
