"""Event models: Kubernetes-derived fields (QoS, effective requests), shorthands, and one-line errors."""

import orjson
import pytest

from schemas.codec import decode, decode_topic_value, encode
from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest, Toleration

MI = 2**20


def pod(**fields):
    return PodRequest.model_validate({"uid": "p", **fields})


def container(requests=None, limits=None):
    return {"requests": requests or {}, "limits": limits or {}}


QOS = [
    ("a pod with no requests or limits is BestEffort", [container()], [], "BestEffort"),
    (
        "requests equal to limits for cpu and memory is Guaranteed",
        [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
        [],
        "Guaranteed",
    ),
    (
        "limits alone default the requests, so the pod is Guaranteed",
        [container(limits={"cpu": "1", "memory": "1Gi"})],
        [],
        "Guaranteed",
    ),
    ("requests below limits is Burstable", [container({"cpu": "500m"}, {"cpu": "1"})], [], "Burstable"),
    (
        "one Guaranteed container beside a BestEffort one makes the pod Burstable",
        [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"}), container()],
        [],
        "Burstable",
    ),
    (
        "an init container without limits spoils Guaranteed",
        [container({"cpu": "1", "memory": "1Gi"}, {"cpu": "1", "memory": "1Gi"})],
        [container({"cpu": "1"})],
        "Burstable",
    ),
    ("a GPU request alone does not change BestEffort", [container({"nvidia.com/gpu": 1})], [], "BestEffort"),
]


@pytest.mark.parametrize(("case", "containers", "init", "expected"), QOS, ids=[c[0] for c in QOS])
def test_qos_class_is_derived_as_kubernetes_does(case, containers, init, expected):
    assert pod(containers=containers, init_containers=init).qos_class == expected


def rl(cpu="", memory="", **extra):
    return {k: v for k, v in (("cpu", cpu), ("memory", memory), *extra.items()) if v != ""}


# k8s.io/kubernetes v1.36.3 pkg/apis/core/v1/helper/qos/qos_test.go TestComputePodQOS, named by the test's pod
# name (PodLevelResources is on by default in v1.36). Left out: "burstable-with-pod-and-container-level-
# resources-2", whose pod-level cpu request (10m) exceeds its limit (5m), which the API (and eyrie) rejects.
UPSTREAM_QOS = [
    ("guaranteed", [container(rl("100m", "100Mi"), rl("100m", "100Mi"))], [], None, "Guaranteed"),
    (
        "guaranteed-guaranteed",
        [
            container(rl("100m", "100Mi"), rl("100m", "100Mi")),
            container(rl("100m", "100Mi"), rl("100m", "100Mi")),
        ],
        [],
        None,
        "Guaranteed",
    ),
    ("best-effort-best-effort", [container(), container()], [], None, "BestEffort"),
    ("best-effort", [container()], [], None, "BestEffort"),
    ("best-effort-burstable", [container(), container(rl("1"), rl("2"))], [], None, "Burstable"),
    (
        "best-effort-guaranteed",
        [container(), container(rl("10m", "100Mi"), rl("10m", "100Mi"))],
        [],
        None,
        "Burstable",
    ),
    ("burstable-cpu-guaranteed-memory", [container(rl("", "100Mi"), rl("", "100Mi"))], [], None, "Burstable"),
    ("burstable-no-limits", [container(rl("100m", "100Mi"))], [], None, "Burstable"),
    (
        "burstable-guaranteed",
        [container(rl("1", "100Mi"), rl("2", "100Mi")), container(rl("100m", "100Mi"), rl("100m", "100Mi"))],
        [],
        None,
        "Burstable",
    ),
    (
        "burstable-unbounded-but-requests-match-limits",
        [container(rl("100m", "100Mi"), rl("200m", "200Mi")), container(rl("100m", "100Mi"))],
        [],
        None,
        "Burstable",
    ),
    ("burstable-1", [container(rl("10m", "100Mi"), rl("100m", "200Mi"))], [], None, "Burstable"),
    ("burstable-2", [container(rl("0", "0"), rl("100m", "200Mi"))], [], None, "Burstable"),
    (
        "best-effort-hugepages",
        [container(rl("0", "0", **{"hugepages-2Mi": "1Gi"}), rl("0", "0", **{"hugepages-2Mi": "1Gi"}))],
        [],
        None,
        "BestEffort",
    ),
    (
        "init-container",
        [container()],
        [container(rl("10m", "100Mi"), rl("100m", "200Mi"))],
        None,
        "Burstable",
    ),
    (
        "guaranteed-with-pod-level-resources",
        [container()],
        [],
        {"requests": rl("10m", "100Mi"), "limits": rl("10m", "100Mi")},
        "Guaranteed",
    ),
    (
        "guaranteed-with-pod-and-container-level-resources",
        [container(rl("3m", "10Mi"), rl("5m", "20Mi"))],
        [],
        {"requests": rl("10m", "100Mi"), "limits": rl("10m", "100Mi")},
        "Guaranteed",
    ),
    (
        "burstable-with-pod-level-resources",
        [container()],
        [],
        {"requests": rl("10m", "10Mi"), "limits": rl("20m", "50Mi")},
        "Burstable",
    ),
    (
        "burstable-with-pod-and-container-level-resources",
        [container(rl("5m", "10Mi"), rl("5m", "10Mi"))],
        [],
        {"requests": rl("10m", "10Mi"), "limits": rl("20m", "50Mi")},
        "Burstable",
    ),
    (
        "burstable-with-pod-and-container-level-requests",
        [container(rl("5m", "10Mi"))],
        [],
        {"requests": rl("10m", "10Mi")},
        "Burstable",
    ),
    (
        "pod-level resources set but empty: the containers do not count, so the pod is BestEffort",
        [container(rl("1", "1Gi"), rl("1", "1Gi"))],
        [],
        {},
        "BestEffort",
    ),
    (
        "pod-level limits of cpu only: not Guaranteed though requests equal limits",
        [container()],
        [],
        {"limits": rl("1")},
        "Burstable",
    ),
]


@pytest.mark.parametrize(
    ("case", "containers", "init", "resources", "expected"), UPSTREAM_QOS, ids=[c[0] for c in UPSTREAM_QOS]
)
def test_qos_class_follows_upstream_compute_pod_qos(case, containers, init, resources, expected):
    fields = {"containers": containers, "init_containers": init}
    if resources is not None:
        fields["resources"] = resources
    assert pod(**fields).qos_class == expected


EFFECTIVE = [
    ("app containers are summed", [container({"cpu": "1"}), container({"cpu": "2"})], [], {}, {"cpu": 3000}),
    (
        "the largest init container wins when it exceeds the sum",
        [container({"cpu": "1"})],
        [container({"cpu": "4"}), container({"cpu": "2"})],
        {},
        {"cpu": 4000},
    ),
    (
        "the sum wins when it exceeds every init container, per resource",
        [container({"cpu": "3", "memory": "1Mi"})],
        [container({"cpu": "1", "memory": "5Mi"})],
        {},
        {"cpu": 3000, "memory": 5 * MI},
    ),
    (
        "overhead is added on top",
        [container({"cpu": "1"})],
        [],
        {"cpu": "250m", "memory": "120Mi"},
        {"cpu": 1250, "memory": 120 * MI},
    ),
    (
        "a container without requests adds nothing",
        [container(), container({"memory": "1Mi"})],
        [],
        {},
        {"memory": MI},
    ),
]


@pytest.mark.parametrize(
    ("case", "containers", "init", "overhead", "expected"), EFFECTIVE, ids=[c[0] for c in EFFECTIVE]
)
def test_effective_request_is_max_of_sum_and_init_plus_overhead(case, containers, init, overhead, expected):
    assert pod(containers=containers, init_containers=init, overhead=overhead).effective_requests == expected


def test_the_single_container_shorthand_becomes_one_container():
    shorthand = pod(requests={"cpu": "2"}, limits={"cpu": "3"})
    assert len(shorthand.containers) == 1
    assert shorthand.containers[0].requests == {"cpu": 2000}
    assert shorthand.effective_limits == {"cpu": 3000}


def test_the_pod_group_is_read_from_the_coscheduling_labels():
    grouped = pod(
        labels={
            "pod-group.scheduling.sigs.k8s.io/name": "train",
            "pod-group.scheduling.sigs.k8s.io/min-available": "4",
        }
    )
    assert grouped.pod_group is not None
    assert (grouped.pod_group.name, grouped.pod_group.min_available, grouped.pod_group.timeout_s) == (
        "train",
        4,
        60,
    )


def test_an_explicit_pod_group_wins_over_the_labels():
    grouped = pod(
        pod_group={"name": "a", "min_available": 2}, labels={"pod-group.scheduling.sigs.k8s.io/name": "b"}
    )
    assert grouped.pod_group is not None and grouped.pod_group.name == "a"


def test_defaults_fill_name_scheduler_and_replicas():
    plain = pod()
    assert (plain.name, plain.namespace, plain.scheduler_name, plain.replicas, plain.priority) == (
        "p",
        "default",
        "default",
        1,
        0,
    )


def test_host_ports_accept_plain_integers():
    assert pod(host_ports=[8080]).host_ports[0].model_dump() == {
        "port": 8080,
        "protocol": "TCP",
        "host_ip": "0.0.0.0",
    }


@pytest.mark.parametrize(
    ("case", "toleration", "taint", "tolerated"),
    [
        (
            "Exists with an empty key tolerates every taint",
            {"operator": "Exists"},
            ("k", "v", "NoSchedule"),
            True,
        ),
        ("Equal needs the same value", {"key": "k", "value": "v"}, ("k", "w", "NoSchedule"), False),
        ("an empty effect matches every effect", {"key": "k", "value": "v"}, ("k", "v", "NoExecute"), True),
        (
            "a different effect does not match",
            {"key": "k", "operator": "Exists", "effect": "NoSchedule"},
            ("k", "", "NoExecute"),
            False,
        ),
    ],
)
def test_tolerations_match_taints_as_kubernetes_does(case, toleration, taint, tolerated):
    assert Toleration.model_validate(toleration).tolerates(*taint) is tolerated


INVALID = [
    ("a missing uid is named", {}, PodRequest, "uid", "field required"),
    (
        "an unknown field is named, so typos are caught",
        {"uid": "p", "reqeusts": {}},
        PodRequest,
        "reqeusts",
        "unknown field",
    ),
    (
        "a negative cpu request names the container and resource",
        {"uid": "p", "containers": [{"requests": {"cpu": "-1"}}]},
        PodRequest,
        "containers.0.requests.cpu",
        "negative",
    ),
    (
        "a request above its limit is rejected",
        {"uid": "p", "requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
        PodRequest,
        "containers.0",
        "less than or equal",
    ),
    (
        "containers and the shorthand together are ambiguous",
        {"uid": "p", "requests": {"cpu": 1}, "containers": [{}]},
        PodRequest,
        None,
        "either",
    ),
    (
        "a non-integer min-available label is rejected",
        {
            "uid": "p",
            "labels": {
                "pod-group.scheduling.sigs.k8s.io/name": "g",
                "pod-group.scheduling.sigs.k8s.io/min-available": "many",
            },
        },
        PodRequest,
        None,
        "integer",
    ),
    ("a uid longer than 253 characters is rejected", {"uid": "x" * 300}, PodRequest, "uid", "at most 253"),
    (
        "a NaN metric value is rejected",
        {"ts": 1, "node": "n", "values": {"cpu": "NaN"}},
        MetricSample,
        "values.cpu",
        "finite",
    ),
    (
        "a negative metric value is rejected",
        {"ts": 1, "node": "n", "values": {"cpu": -1}},
        MetricSample,
        "values.cpu",
        "greater than or equal",
    ),
    (
        "a sample with no values is rejected",
        {"ts": 1, "node": "n", "values": {}},
        MetricSample,
        "values",
        "at least 1",
    ),
    (
        "allocatable above capacity is rejected",
        {"name": "n", "capacity": {"cpu": "1"}, "allocatable": {"cpu": "2"}},
        NodeSpec,
        None,
        "exceeds capacity",
    ),
    (
        "an unknown node event type is named",
        {"type": "explode", "node": {"name": "n"}},
        NodeEvent,
        "type",
        "Input should be",
    ),
    (
        "an unknown binding status is named",
        {"uid": "p", "status": "maybe"},
        BindingResult,
        "status",
        "Input should be",
    ),
]


@pytest.mark.parametrize(("case", "data", "model", "field", "message"), INVALID, ids=[c[0] for c in INVALID])
def test_invalid_events_fail_with_one_line_naming_the_field(case, data, model, field, message):
    with pytest.raises(InvalidInput) as error:
        decode(model, orjson.dumps(data))
    assert error.value.field == field
    assert message in str(error.value)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("case", "raw", "message"),
    [
        ("garbage bytes are not JSON", b"\xff\xfe\x00garbage", "not valid JSON"),
        ("truncated JSON is not JSON", b'{"uid": "p", "requ', "not valid JSON"),
        ("a JSON array is not an event", b"[1, 2]", "expected a JSON object"),
        ("absurdly deep nesting is refused by the parser", b"[" * 300 + b"]" * 300, "not valid JSON"),
        ("invalid UTF-8 is not JSON", b'{"uid": "\xff"}', "not valid JSON"),
    ],
)
def test_undecodable_bytes_are_invalid_input(case, raw, message):
    with pytest.raises(InvalidInput, match=message):
        decode_topic_value("pod-requests", raw)


@pytest.mark.parametrize(
    ("case", "value", "kind"),
    [
        (
            "a record with kind PodDeleted is a deletion",
            {"kind": "PodDeleted", "uid": "p", "ts": 3},
            PodDeleted,
        ),
        ("a record with exactly uid and ts is a deletion", {"uid": "p", "ts": 3}, PodDeleted),
        ("a record with only a uid is a BestEffort pod request", {"uid": "p"}, PodRequest),
    ],
)
def test_the_pod_requests_topic_tells_requests_from_deletions(case, value, kind):
    assert isinstance(decode_topic_value("pod-requests", orjson.dumps(value)), kind)


def test_every_model_encodes_and_decodes_to_an_equal_model():
    models = [
        pod(
            requests={"cpu": "1.5", "memory": "1Gi"},
            tolerations=[{"operator": "Exists"}],
            node_affinity=[{"match_expressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}],
        ),
        NodeEvent(
            type="upsert",
            node=NodeSpec(
                name="n",
                capacity={"cpu": "64", "nvidia.com/gpu": 8},
                taints=[{"key": "gpu", "effect": "NoSchedule"}],
            ),
        ),
        MetricSample(ts=1.5, node="n", values={"cpu": 3.25, "memory": 1e9}),
        Binding(uid="p", node="n", requests={"cpu": "250m"}, plugin_scores={"NodeResourcesFit": 87}),
        BindingResult(uid="p", node="n", status="applied"),
        DeadLetter(topic="eyrie.metrics", raw="\\xff", error="not valid JSON"),
        PodDeleted(uid="p", ts=9),
    ]
    for model in models:
        assert decode(type(model), encode(model)) == model


def test_node_allocatable_defaults_to_capacity():
    node = NodeSpec(name="n", capacity={"cpu": "4", "memory": "8Gi"})
    assert node.allocatable == {"cpu": 4000, "memory": 8 * 2**30}


def test_a_model_built_from_another_models_resources_keeps_their_units():
    node = NodeSpec(name="n", capacity={"cpu": "4", "memory": "1Gi"})
    again = NodeSpec(name="n2", capacity=node.capacity, allocatable=node.allocatable)
    assert again.capacity == {"cpu": 4000, "memory": 2**30}
    pod = PodRequest(uid="p", requests={"cpu": 2})
    assert Binding(uid="p", node="n", requests=pod.effective_requests).requests == {"cpu": 2000}


def test_a_plain_dict_still_means_kubernetes_notation():
    assert NodeSpec(name="n", capacity={"cpu": 4}).capacity == {"cpu": 4000}
