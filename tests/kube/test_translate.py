"""Kubernetes Nodes and Pods, as the API server serves them, become the records the pipeline reads: node
events, pod requests, occupants, deletions, or a rejection that names the offending field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest
from streams.kube.translate import Occupant, Rejected, node_record, pod_record

NOW = 1_700_000_000.0
SCHEDULERS = ("eyrie",)


def node(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {"name": "n1", "uid": "node-uid", "resourceVersion": "7", "labels": {"zone": "a"}},
        "spec": {"taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": "3800m", "memory": "7Gi", "pods": "110"},
        },
    }
    for path, value in changes.items():
        target = obj
        *parents, last = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return obj


def pod(**changes: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "pod-uid",
            "resourceVersion": "9",
            "creationTimestamp": "2026-01-02T03:04:05Z",
            "labels": {"app": "web"},
        },
        "spec": {
            "schedulerName": "eyrie",
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}}}
            ],
        },
        "status": {"phase": "Pending"},
    }
    for path, value in changes.items():
        target = obj
        *parents, last = path.split("__")
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = value
    return obj


def without_kind(obj: dict[str, Any]) -> dict[str, Any]:
    """As a list reply's items come: without kind and apiVersion."""
    trimmed = copy.deepcopy(obj)
    trimmed.pop("kind")
    trimmed.pop("apiVersion")
    return trimmed


# --------------------------------------------------------------------------------------------- nodes


def test_a_node_becomes_an_upsert_with_its_capacity_allocatable_labels_and_taints():
    record = node_record(node(), cluster="east", now=NOW)
    assert isinstance(record, NodeEvent) and record.type == "upsert" and record.ts == NOW
    spec = record.node
    assert (spec.name, spec.cluster, spec.unschedulable) == ("n1", "east", False)
    assert spec.capacity == {"cpu": 4000, "memory": 8 * 2**30, "pods": 110}
    assert spec.allocatable == {"cpu": 3800, "memory": 7 * 2**30, "pods": 110}
    assert spec.labels == {"zone": "a"}
    assert [(t.key, t.value, t.effect) for t in spec.taints] == [("gpu", "yes", "NoSchedule")]


@pytest.mark.parametrize(
    ("obj", "deleted", "expected"),
    [
        pytest.param(
            node(spec__unschedulable=True),
            False,
            ("upsert", True),
            id="a cordoned node is an upsert whose spec is unschedulable, whole for the compacted topic",
        ),
        pytest.param(node(), True, ("delete", False), id="a deleted node becomes a delete event naming it"),
        pytest.param(
            node(spec={}),
            False,
            ("upsert", False),
            id="a node without spec fields is schedulable and untainted",
        ),
    ],
)
def test_node_kinds(obj, deleted, expected):
    record = node_record(obj, deleted=deleted, now=NOW)
    assert isinstance(record, NodeEvent), record
    assert (record.type, record.node.unschedulable) == expected
    assert record.node.name == "n1"


@pytest.mark.parametrize(
    ("status", "expected_capacity"),
    [
        pytest.param(
            {"allocatable": {"cpu": "2", "memory": "1Gi"}},
            {"cpu": 2000, "memory": 2**30},
            id="a node reporting only allocatable takes it as its capacity too",
        ),
        pytest.param(
            {"capacity": {"cpu": "2", "attachable-volumes-aws-ebs": "39", "nvidia.com/gpu": "1"}},
            {"cpu": 2000, "nvidia.com/gpu": 1},
            id="resources no pod can ask eyrie for are left out, extended ones kept",
        ),
    ],
)
def test_node_resources(status, expected_capacity):
    record = node_record(node(status=status), now=NOW)
    assert isinstance(record, NodeEvent), record
    assert record.node.capacity == expected_capacity


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        pytest.param(
            node(status={"capacity": {"cpu": "four"}}),
            "status.capacity.cpu",
            "cannot parse quantity 'four'",
            id="an unparseable capacity is rejected naming status.capacity.cpu",
        ),
        pytest.param(
            node(spec={"taints": [{"key": "k", "effect": "Sometimes"}]}),
            "spec.taints[0].effect",
            "NoSchedule",
            id="a taint of an unknown effect is rejected naming spec.taints[0].effect",
        ),
        pytest.param(
            node(status={"capacity": {"cpu": "1"}, "allocatable": {"cpu": "2"}}),
            "status.allocatable",
            "exceeds capacity",
            id="an allocatable above the capacity is rejected naming status.allocatable",
        ),
        pytest.param(
            node(metadata={"uid": "u"}),
            "metadata.name",
            "needs a name",
            id="a node without a name is rejected naming metadata.name",
        ),
    ],
)
def test_bad_nodes_are_rejected_naming_the_field(obj, field, words):
    record = node_record(obj, now=NOW)
    assert isinstance(record, Rejected), record
    assert record.kind == "Node" and record.field == field and words in record.reason, record
    assert record.message.startswith(f"{field}: ")


# ---------------------------------------------------------------------------------------------- pods


def test_a_pending_pod_for_eyrie_becomes_a_pod_request_even_without_kind_as_list_items_come():
    record = pod_record(without_kind(pod()), schedulers=SCHEDULERS, now=NOW)
    assert isinstance(record, PodRequest), record
    assert (record.uid, record.namespace, record.name, record.scheduler_name) == (
        "pod-uid",
        "shop",
        "web-1",
        "eyrie",
    )
    assert record.effective_requests == {"cpu": 250, "memory": 64 * 2**20}
    assert record.workload == "web" and record.created_at is not None


BOUND = {"spec__nodeName": "n1"}


@pytest.mark.parametrize(
    ("obj", "schedulers", "deleted", "expected"),
    [
        pytest.param(
            pod(spec__schedulerName="default-scheduler"),
            SCHEDULERS,
            False,
            None,
            id="a pending pod of another scheduler is none of eyrie's business",
        ),
        pytest.param(
            pod(spec__schedulerName="default-scheduler"),
            ("eyrie", "default-scheduler"),
            False,
            PodRequest,
            id="a pending pod of default-scheduler is a request when eyrie is configured to serve that name",
        ),
        pytest.param(
            pod(spec__schedulerName="default-scheduler", **BOUND),
            SCHEDULERS,
            False,
            Occupant,
            id="a pod bound by another scheduler occupies its node",
        ),
        pytest.param(
            pod(**BOUND),
            SCHEDULERS,
            False,
            Occupant,
            id="a pod of eyrie's that is bound occupies its node too",
        ),
        pytest.param(
            pod(status={"phase": "Running"}, **BOUND),
            SCHEDULERS,
            False,
            Occupant,
            id="a running pod occupies its node",
        ),
        pytest.param(
            pod(status={"phase": "Succeeded"}, **BOUND),
            SCHEDULERS,
            False,
            PodDeleted,
            id="a pod that succeeded frees its node",
        ),
        pytest.param(
            pod(status={"phase": "Failed"}, spec__schedulerName="other", **BOUND),
            SCHEDULERS,
            False,
            PodDeleted,
            id="another scheduler's pod that failed frees its node",
        ),
        pytest.param(pod(), SCHEDULERS, True, PodDeleted, id="a deleted pod becomes a deletion"),
        pytest.param(
            pod(metadata__deletionTimestamp="2026-01-02T03:05:00Z"),
            SCHEDULERS,
            False,
            PodDeleted,
            id="a pending pod being deleted is withdrawn rather than placed",
        ),
        pytest.param(
            pod(metadata__deletionTimestamp="2026-01-02T03:05:00Z", **BOUND),
            SCHEDULERS,
            False,
            Occupant,
            id="a bound pod being deleted still occupies its node until it is gone",
        ),
        pytest.param(
            pod(spec__schedulingGates=[{"name": "wait"}]),
            SCHEDULERS,
            False,
            PodRequest,
            id="a pod held by a scheduling gate is published for placement to hold until the gate lifts",
        ),
        pytest.param(
            pod(spec__volumes=[{"name": "c", "configMap": {"name": "x"}}, {"name": "t", "emptyDir": {}}]),
            SCHEDULERS,
            False,
            PodRequest,
            id="volumes any node can provide do not stop a request",
        ),
        pytest.param(
            pod(
                spec__affinity={
                    "podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "zone"}
                        ],
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {"weight": 1, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname"}}
                        ],
                    }
                }
            ),
            SCHEDULERS,
            False,
            PodRequest,
            id="required and preferred anti-affinity are requests placement honours",
        ),
        pytest.param(
            pod(
                spec__topologySpreadConstraints=[
                    {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"},
                    {
                        "maxSkew": 2,
                        "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway",
                    },
                ]
            ),
            SCHEDULERS,
            False,
            PodRequest,
            id="hard and soft topology spread are requests placement honours",
        ),
        pytest.param(
            pod(spec__volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}], **BOUND),
            SCHEDULERS,
            False,
            Occupant,
            id="a bound pod with a claim still occupies its node: it is placed already",
        ),
    ],
)
def test_pod_outcomes(obj, schedulers, deleted, expected):
    record = pod_record(obj, schedulers=schedulers, deleted=deleted, now=NOW)
    if expected is None:
        assert record is None
        return
    assert isinstance(record, expected), record
    assert record.uid == "pod-uid"
    if isinstance(record, Occupant):
        assert record.node == "n1"
        assert record.requests == {"cpu": 250, "memory": 64 * 2**20}
        assert record.pod.namespace == "shop" and record.pod.name == "web-1"
    if isinstance(record, PodDeleted):
        assert record.ts == NOW
    if isinstance(record, PodRequest) and obj["spec"]["schedulerName"] == "default-scheduler":
        assert record.scheduler_name == "default"


@pytest.mark.parametrize(
    ("obj", "field", "words"),
    [
        pytest.param(
            pod(spec__containers=[{"name": "m", "resources": {"requests": {"cpu": "lots"}}}]),
            "spec.containers[0].resources.requests.cpu",
            "cannot parse quantity 'lots'",
            id="an unparseable cpu request is rejected naming the container's field",
        ),
        pytest.param(
            pod(
                spec__containers=[{"name": "m", "resources": {"requests": {"memory": "9223372036854775807"}}}]
            ),
            "spec.containers[0].resources.requests.memory",
            "exceeds the maximum",
            id="a memory request the server clamped to int64 is beyond what eyrie represents",
        ),
        pytest.param(
            pod(spec__initContainers=[{"name": "i", "resources": {"limits": {"memory": "1Qi"}}}]),
            "spec.initContainers[0].resources.limits.memory",
            "cannot parse quantity",
            id="an unparseable init container limit is rejected naming the init container's field",
        ),
        pytest.param(
            pod(spec__overhead={"cpu": "x"}),
            "spec.overhead.cpu",
            "cannot parse quantity",
            id="an unparseable overhead is rejected naming spec.overhead",
        ),
        pytest.param(
            pod(spec__containers=[{"name": "m", "resources": {"requests": {"cpu": "lots"}}}], **BOUND),
            "spec.containers[0].resources.requests.cpu",
            "cannot parse quantity",
            id="a bound pod whose requests cannot be read cannot be counted and is rejected",
        ),
        pytest.param(
            pod(spec__volumes=[{"name": "c", "secret": {}}, {"name": "d", "persistentVolumeClaim": {}}]),
            "spec.volumes[1].persistentVolumeClaim",
            "volume source persistentVolumeClaim is not supported",
            id="a persistent volume claim is rejected naming the volume",
        ),
        pytest.param(
            pod(spec__volumes=[{"name": "e", "ephemeral": {"volumeClaimTemplate": {}}}]),
            "spec.volumes[0].ephemeral",
            "not supported",
            id="a generic ephemeral volume is rejected naming the volume",
        ),
        pytest.param(
            pod(spec__affinity={"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}),
            "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey",
            "valid string",
            id="a required pod affinity term without a topology key is rejected naming it",
        ),
        pytest.param(
            pod(
                spec__affinity={
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name"}]}]
                        }
                    }
                }
            ),
            "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
            ".nodeSelectorTerms[0].matchFields[0].operator",
            "Input should be",
            id="a node selector on fields without an operator is rejected naming the requirement",
        ),
        pytest.param(
            pod(spec__topologySpreadConstraints=[{"maxSkew": 1, "topologyKey": "zone"}]),
            "spec.topologySpreadConstraints[0].whenUnsatisfiable",
            "field required",
            id="a topology spread constraint without whenUnsatisfiable is rejected naming it",
        ),
        pytest.param(
            pod(spec__resourceClaims=[{"name": "gpu"}]),
            "spec.resourceClaims",
            "resource claims",
            id="dynamic resource claims are rejected",
        ),
        pytest.param(
            pod(spec__containers=[]),
            "spec.containers",
            "at least one container",
            id="a pod without containers is rejected naming spec.containers",
        ),
    ],
)
def test_pods_eyrie_cannot_honour_are_rejected_naming_the_field(obj, field, words):
    record = pod_record(obj, schedulers=SCHEDULERS, now=NOW)
    assert isinstance(record, Rejected), record
    assert (record.kind, record.uid, record.namespace, record.name) == ("Pod", "pod-uid", "shop", "web-1")
    assert record.field == field, record
    assert words in record.reason, record
