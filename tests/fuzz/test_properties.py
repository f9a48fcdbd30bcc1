"""Properties of the cores under hostile input, checked by hypothesis: the decoders never raise, the placement
shard never books a node past allocatable, the ledger never over-commits and stays idempotent, and the metrics
core only ever produces finite summaries."""

from __future__ import annotations

import json
import math
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from schemas.quantity import Resources
from streams.core.checkpoint import decode_checkpoint, encode_checkpoint
from streams.core.decoders import Decoded, decode_record, decode_records
from streams.core.ingress import CONTROL_HEADER, SEQ_HEADER, TS_HEADER, envelope_from_record, pack_envelopes
from streams.core.ledger import Ledger
from streams.core.metrics import MetricsCore, NodeSummary, Summary, WorkloadSummary
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Shard
from tests.streams.test_ledger import Model, check_invariants, run_step

NOW = 1_750_000_000.0
TOPICS = ("metrics", "node-events", "pod-requests", "bindings", "config", "binding-results", "dead-letters")
LIMIT = 1_048_576

# ------------------------------------------------------------------------------------------- builders

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=12)
    | st.sampled_from(["NaNm", "1e999", "-1", "1Ei", "500m", "4", ""]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
"""Any JSON value, NaN, infinities and integers of any size included (written by the standard library)."""

VALID: dict[str, tuple[bytes, dict[str, Any]]] = {
    "pod-requests": (
        b"p1",
        {
            "uid": "p1",
            "containers": [
                {"name": "c", "requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "1"}}
            ],
            "labels": {"app": "web"},
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "host_ports": [80],
            "pod_group": {"name": "g", "min_available": 2},
            "created_at": NOW,
        },
    ),
    "node-events": (
        b"n1",
        {
            "type": "upsert",
            "node": {
                "name": "n1",
                "allocatable": {"cpu": "4", "memory": "8Gi", "pods": 110},
                "labels": {"z": "a"},
            },
            "ts": NOW,
        },
    ),
    "metrics": (b"n1", {"ts": NOW, "node": "n1", "pod": "p1", "values": {"cpu": 0.5, "memory": 1e9}}),
    "bindings": (b"p1", {"uid": "p1", "node": "n1", "requests": {"cpu": "500m"}, "attempt": 1}),
    "config": (
        b"fz",
        {"schedulerName": "fz", "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit"}]}}},
    ),
}
"""A valid record of each topic that hypothesis mutates, key and value."""


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON document (dict keys and list indices), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths(inner, (*prefix, index))
    return found


def mutate(document: Any, where: tuple[Any, ...], how: str, new: Any) -> Any:
    """`document` with the value at `where` replaced, removed, or given an extra key (a copy)."""
    copy = json.loads(json.dumps(document))
    if not where:
        return new if how == "replace" else copy
    parent = copy
    for step in where[:-1]:
        parent = parent[step]
    last = where[-1]
    if how == "replace":
        parent[last] = new
    elif how == "remove":
        del parent[last]
    elif isinstance(parent[last], dict):
        parent[last]["unexpected"] = new
    return copy


@st.composite
def mutated_records(draw: st.DrawFn) -> tuple[str, bytes | None, bytes]:
    topic = draw(st.sampled_from(sorted(VALID)))
    key, document = VALID[topic]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(document)))
        document = mutate(
            document, where, draw(st.sampled_from(["replace", "remove", "extend"])), draw(json_values)
        )
    raw = json.dumps(document).encode()
    if draw(st.booleans()):
        raw = raw[: draw(st.integers(0, len(raw)))]
    if draw(st.integers(0, 4)) == 0:
        raw = b"[" + raw + b"," + raw + b"]"
    chosen_key = draw(st.sampled_from([key, None, b"\xff" + key, b"other"]))
    return topic, chosen_key, raw


def assert_one_line(letter: DeadLetter) -> None:
    assert letter.error and "\n" not in letter.error, letter.error
    assert len(letter.raw.encode("utf-8", "surrogatepass")) <= 4 * 4096


def check_decoded(decoded: list[Decoded]) -> None:
    assert decoded, "every record comes out as a model or a dead letter"
    for item in decoded:
        assert (item.value is None) != (item.dead_letter is None)
        if item.dead_letter is not None:
            assert_one_line(item.dead_letter)


def check_everything(topic: str, key: bytes | None, value: bytes | None, headers: Any = None) -> None:
    """Every decoder on one record: a model, an envelope, None or a one-line dead letter, never raising."""
    check_decoded([decode_record(topic, 0, 7, key, value)])
    check_decoded(decode_records(topic, 0, 7, key, value))
    result = envelope_from_record(topic, 0, 7, key, value, headers, now=NOW)
    if isinstance(result, DeadLetter):
        assert_one_line(result)
    else:
        assert result is None or isinstance(result, Envelope)
        if isinstance(result, Envelope):
            assert math.isfinite(result.ts) and result.ts <= NOW
            pack_envelopes([result], LIMIT)  # never raises: what cannot travel comes back refused
    try:
        envelopes = decode_envelopes(value)  # type: ignore[arg-type]  # placement reads tombstones too
    except InvalidInput as exc:
        assert "\n" not in str(exc)
    else:
        assert all(isinstance(e, Envelope | InvalidInput) for e in envelopes)


# -------------------------------------------------------------------------------------------- decoders

headers = st.none() | st.lists(
    st.tuples(
        st.sampled_from([TS_HEADER, SEQ_HEADER, CONTROL_HEADER, "other"]),
        st.binary(max_size=12) | st.sampled_from([b"watermark", b"nan", b"inf", b"-1", b"1e400", b"12.5"]),
    ),
    max_size=3,
)


@settings(max_examples=300, deadline=None)
@given(
    topic=st.sampled_from(TOPICS),
    key=st.none() | st.binary(max_size=16),
    value=st.none() | st.binary(max_size=300),
    extra=headers,
)
def test_arbitrary_bytes_become_a_model_an_envelope_or_a_one_line_dead_letter(
    topic: str, key: bytes | None, value: bytes | None, extra: Any
) -> None:
    check_everything(topic, key, value, extra)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_records())
def test_valid_records_mutated_at_random_never_make_a_decoder_raise(
    record: tuple[str, bytes | None, bytes],
) -> None:
    topic, key, value = record
    check_everything(topic, key, value)


# ------------------------------------------------------------------------------------------- the shard

NODE_NAMES = ("n0", "n1", "n" * 253)
UIDS = ("p0", "p1", "p2", "p" * 241)  # the longest uid a workload may have (its replicas add -<index>)
TIMES = (0.0, 1.0, 2.0, 5.0, NOW, 4_102_444_800.0, 1e11)

quantities = st.sampled_from([0, 1, 1000, 2**30, 2**62])
node_steps = st.builds(
    lambda kind, name, cpu, memory, pods, gpu, cluster, cordoned: NodeEvent(
        type=kind,
        node=NodeSpec(
            name=name,
            cluster=cluster,
            allocatable=Resources(
                {"cpu": cpu, "memory": memory}
                | ({} if pods is None else {"pods": pods})
                | ({} if gpu is None else {"nvidia.com/gpu": gpu})
            ),
            unschedulable=cordoned,
        ),
    ),
    st.sampled_from(["upsert", "upsert", "upsert", "delete", "cordon", "uncordon"]),
    st.sampled_from(NODE_NAMES),
    quantities,
    quantities,
    st.sampled_from([None, 0, 1, 110]),
    st.sampled_from([None, 0, 2]),
    st.sampled_from(["default", "default", "other"]),
    st.booleans(),
)
pod_steps = st.builds(
    lambda uid, cpu, memory, gpu, priority, replicas: PodRequest(
        uid=uid,
        containers=[
            {
                "requests": Resources(
                    {"cpu": cpu, "memory": memory} | ({} if gpu is None else {"nvidia.com/gpu": gpu})
                )
            }
        ],
        priority=priority,
        replicas=replicas,
    ),
    st.sampled_from(UIDS),
    quantities,
    quantities,
    st.sampled_from([None, 0, 1, 2]),
    st.sampled_from([-(2**31), 0, 2**31 - 1]),
    st.sampled_from([1, 1, 1, 2, 3]),
)
result_steps = st.builds(
    lambda uid, node, status, attempt: BindingResult(uid=uid, node=node, status=status, attempt=attempt),
    st.sampled_from(UIDS),
    st.sampled_from((*NODE_NAMES, "ghost")),
    st.sampled_from(["applied", "conflict", "rejected", "unschedulable"]),
    st.sampled_from([0, 1, 2**62]),
)
summary_steps = st.builds(
    lambda node, mean, std: NodeSummary(
        node, 0.0, {"cpu": (mean, std), "memory": (mean, std)}, 0.0, None, None
    ),
    st.sampled_from((*NODE_NAMES, "ghost")),
    st.sampled_from([0.0, 5e-324, 1.0, 1e18]),
    st.sampled_from([0.0, 1e18]),
)
shard_steps = st.lists(
    st.tuples(
        st.one_of(
            node_steps.map(lambda v: (Kind.NODE, v)),
            node_steps.map(lambda v: (Kind.NODE, v)),
            pod_steps.map(lambda v: (Kind.POD, v)),
            pod_steps.map(lambda v: (Kind.POD, v)),
            st.sampled_from(UIDS).map(lambda uid: (Kind.DELETE, PodDeleted(uid=uid, ts=0.0))),
            result_steps.map(lambda v: (Kind.RESULT, v)),
            summary_steps.map(lambda v: (Kind.SUMMARY, v)),
            st.just((Kind.TICK, None)),
            st.just((Kind.CONFIG, {"name": "default", "document": None})),
        ),
        st.sampled_from(TIMES),
    ),
    min_size=5,
    max_size=40,
)


def assert_within_allocatable(shard: Shard, binding: Binding) -> None:
    snapshot = shard.scheduler.snapshot
    row = snapshot.index[binding.node]
    for resource, amount in binding.requests.items():
        if amount > 0 and resource != "pods":
            column = snapshot.column[resource]
            held, limit = int(snapshot.requested[row, column]), int(snapshot.allocatable[row, column])
            assert held <= limit, f"{binding.node} holds {held} {resource} of {limit}"
    assert int(snapshot.pod_count[row]) <= int(snapshot.max_pods[row])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shard_steps)
def test_a_shard_fed_hostile_envelopes_never_raises_nor_books_a_node_past_allocatable_and_checkpoints(
    steps: list[tuple[tuple[Kind, Any], float]],
) -> None:
    shard = Shard()
    for (kind, value), ts in steps:
        for output in shard.feed(Envelope(kind, ts, value, "fuzz/0")):
            if isinstance(output, Binding):
                assert_within_allocatable(shard, output)
    # A state the shard reached must be one its checkpoint can write, or every later checkpoint fails and
    # the tail a takeover replays grows without end.
    written = encode_checkpoint(shard, len(steps))
    restored, _ = decode_checkpoint(written)
    assert encode_checkpoint(restored, len(steps)) == written


# ------------------------------------------------------------------------------------------ the ledger

HOSTILE_NODES = ("a", "b", "n" * 253)
HOSTILE_UIDS = ("p0", "p1", "p2", "p" * 253)
hostile_amounts = st.sampled_from([0, 1, 3, 2**62 - 1, 2**62])
hostile_allocatable = st.dictionaries(
    st.sampled_from(("cpu", "memory", "nvidia.com/gpu", "pods")), hostile_amounts, max_size=4
)
hostile_requests = st.dictionaries(
    st.sampled_from(("cpu", "memory", "nvidia.com/gpu", "example.com/foo")), hostile_amounts, max_size=4
)
"""No "pods": the ledger counts pods itself (test_hostile_cases.py checks a binding asking for some apart)."""
ledger_steps = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), st.sampled_from(HOSTILE_NODES), hostile_allocatable),
        st.tuples(
            st.just("bind"),
            st.sampled_from(HOSTILE_UIDS),
            st.sampled_from((*HOSTILE_NODES, "ghost")),
            hostile_requests,
            st.sampled_from([0, 1, 2, 2**62]),
        ),
        st.tuples(st.just("again")),
        st.tuples(st.just("delete"), st.sampled_from((*HOSTILE_UIDS, "never-bound"))),
        st.tuples(st.just("remove"), st.sampled_from((*HOSTILE_NODES, "ghost"))),
        st.tuples(st.just("cordon"), st.sampled_from((*HOSTILE_NODES, "ghost")), st.booleans()),
    ),
    min_size=5,
    max_size=60,
)


@settings(max_examples=200, deadline=None)
@given(ledger_steps)
def test_hostile_bindings_never_over_commit_the_ledger_and_a_redelivery_changes_nothing(
    steps: list[tuple[Any, ...]],
) -> None:
    nodes: dict[str, bytes] = {}
    pods: dict[str, bytes] = {}
    ledger, model = Ledger(nodes, pods), Model()
    last: tuple[Any, ...] | None = None
    for step in steps:
        if step[0] == "again":  # the applier redelivers the last binding after a crash
            if last is None:
                continue
            _, uid, on, asked, attempt = last
            if uid in model.bound and model.bound[uid][0] == on:
                before = (dict(nodes), dict(pods))
                result = ledger.apply(
                    Binding(uid=uid, node=on, requests=Resources(asked), attempt=attempt), 9.0
                )
                assert result.status == "applied" and (nodes, pods) == before
                continue
            # Refused before (no node yet, no room, deleted): whatever it gets now, the rules hold.
            run_step(ledger, model, last, False)
        else:
            if step[0] == "bind":
                last = step
            run_step(ledger, model, step, False)
        check_invariants(ledger, model, nodes, pods)


# ------------------------------------------------------------------------------------- the metrics core

# Built without validation: the core screens samples itself, so times and values the schema would refuse
# must not hurt it either.

SAMPLE_TIMES = st.sampled_from(
    [0.0, 5e-324, 1.0, NOW, NOW + 1, NOW + 3600, 4_102_444_800.0, 1e11, 1e300]
) | st.floats(0, 1e12)
metric_values = st.sampled_from([0.0, 5e-324, 1e-300, 0.5, 3.0, 1e17, 1e18]) | st.floats(0, 1e18)
samples = st.builds(
    lambda ts, node, pod, workload, values: MetricSample.model_construct(
        ts=ts, node=node, pod=pod, workload=workload, values=values
    ),
    SAMPLE_TIMES,
    st.sampled_from(["n0", "n1", "n" * 253]),
    st.sampled_from([None, None, "p0", "p1"]),
    st.sampled_from([None, "w0"]),
    st.dictionaries(
        st.sampled_from(["cpu", "memory", "bandwidth", "disk", "llcmiss", "crpki", "gpu_util"]),
        metric_values,
        min_size=1,
        max_size=4,
    ),
)


def finite(value: float, absent_ok: bool = False) -> bool:
    return math.isfinite(value) or (absent_ok and value == -math.inf)


def assert_finite(summary: Summary) -> None:
    assert finite(summary.ts), summary
    cells = summary.portrait or {}
    assert all(finite(v) for hours in cells.values() for cell in hours if cell is not None for v in cell), (
        summary
    )
    if isinstance(summary, NodeSummary):
        assert all(finite(v) for pair in summary.window.values() for v in pair), summary
        assert finite(summary.window_end, absent_ok=True), summary
        assert all(finite(t, absent_ok=True) for t in summary.seen or ()), summary
    kind = NodeSummary if isinstance(summary, NodeSummary) else WorkloadSummary
    assert kind.from_json(orjson.loads(orjson.dumps(summary.to_json()))) == summary  # it travels


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(samples, min_size=1, max_size=12), min_size=1, max_size=6), st.sampled_from(TIMES))
def test_the_metrics_core_never_raises_and_its_summaries_are_finite(
    batches: list[list[MetricSample]], flush_at: float
) -> None:
    core = MetricsCore(summary_interval=0.0)
    for batch in batches:
        for summary in core.ingest(batch):
            assert_finite(summary)
    for summary in core.flush(flush_at):
        assert_finite(summary)


@pytest.mark.parametrize("ts", [math.nan, math.inf, -1.0], ids=["NaN", "infinity", "before 1970"])
def test_a_sample_that_skipped_validation_with_a_bad_time_is_counted_not_raised(ts: float) -> None:
    core = MetricsCore()
    bad = MetricSample.model_construct(ts=ts, node="n0", pod=None, workload=None, values={"cpu": 1.0})
    assert core.ingest([bad]) == [] and core.counters.rejected_total == 1
