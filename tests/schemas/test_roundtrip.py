"""Property: for every valid model, decode(encode(model)) == model, through bytes."""

import contextlib

from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import decode, decode_topic_value, encode
from schemas.events import Binding, BindingResult, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest

names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=20)
label_values = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-._", max_size=20)
amount = st.integers(min_value=0, max_value=2**40)
quantity_text = st.one_of(
    st.integers(0, 10**6).map(str),
    st.integers(0, 10**6).map(lambda v: f"{v}m"),
    st.integers(0, 4096).map(lambda v: f"{v}Mi"),
    st.decimals(min_value=0, max_value=1000, places=3, allow_nan=False).map(str),
)
resources = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "ephemeral-storage"]),
    st.integers(0, 10**6),
    max_size=4,
)
requests_text = st.dictionaries(st.sampled_from(["cpu", "memory", "bandwidth"]), quantity_text, max_size=3)
finite = st.floats(min_value=0, max_value=1e11, allow_nan=False, allow_infinity=False)


@st.composite
def containers(draw):
    requests = draw(requests_text)
    return {"name": draw(names), "requests": requests}


pods = st.builds(
    lambda uid, cs, init, prio, labels, selector, ports, replicas, created: PodRequest.model_validate(
        {
            "uid": uid,
            "containers": cs,
            "init_containers": init,
            "priority": prio,
            "labels": labels,
            "node_selector": selector,
            "host_ports": ports,
            "replicas": replicas,
            "created_at": created,
        }
    ),
    names,
    st.lists(containers(), max_size=3),
    st.lists(containers(), max_size=2),
    st.integers(-(2**31), 2**31 - 1),
    st.dictionaries(names, label_values, max_size=3),
    st.dictionaries(names, label_values, max_size=2),
    st.lists(st.integers(1, 65535), max_size=3),
    st.integers(1, 100),
    st.none() | finite,
)
samples = st.builds(
    MetricSample,
    ts=finite,
    node=names,
    pod=st.none() | names,
    values=st.dictionaries(
        st.sampled_from(["cpu", "memory", "llcmiss", "disk"]), finite, min_size=1, max_size=4
    ),
)
nodes = st.builds(
    lambda name, cap, labels: NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=cap, labels=labels)),
    names,
    resources,
    st.dictionaries(names, label_values, max_size=3),
)
bindings = st.builds(
    Binding,
    uid=names,
    node=names,
    score=st.integers(0, 10_000),
    requests=resources,
    node_version=st.integers(0, 2**40),
    attempt=st.integers(0, 10),
    decided_at=finite,
)
results = st.builds(
    BindingResult,
    uid=names,
    node=st.none() | names,
    status=st.sampled_from(["applied", "conflict", "rejected", "unschedulable"]),
    reasons=st.lists(st.text(max_size=30), max_size=3),
    at=finite,
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(pods, samples, nodes, bindings, results))
def test_any_model_survives_a_trip_through_bytes(model):
    assert decode(type(model), encode(model)) == model


@settings(max_examples=200, deadline=None)
@given(pods)
def test_a_pod_request_survives_the_topic_decoder_and_keeps_its_derived_fields(pod):
    again = decode_topic_value("pod-requests", encode(pod))
    assert again == pod
    assert again.effective_requests == pod.effective_requests
    assert again.qos_class == pod.qos_class


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_raise_anything_but_invalid_input(raw):
    for topic in ("pod-requests", "metrics", "node-events", "bindings"):
        with contextlib.suppress(InvalidInput):
            decode_topic_value(topic, raw)
