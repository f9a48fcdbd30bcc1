"""One hostile record at a time: each case is a way input once crashed an agent, went unaccounted for, or
poisoned state, and what eyrie does with it now."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from aiokafka.errors import MessageSizeTooLargeError

from schemas.events import MAX_TALLY, Binding, BindingResult, DeadLetter, MetricSample
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from schemas.quantity import Resources
from streams.core.decoders import LETTERS_PER_RECORD, decode_record, decode_records
from streams.core.ingress import (
    CONTROL_HEADER,
    WATERMARK_CONTROL,
    Headers,
    envelope_from_model,
    envelope_from_record,
    future_error,
    is_replayed,
    pack_envelopes,
    replay_headers,
)
from streams.core.ledger import Ledger, already_bound
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Shard
from streams.runtime.agents.common import send_envelopes
from streams.settings import load_settings
from tests.fuzz.corpus import nested

NOW = 1_750_000_000.0

# ------------------------------------------------------------------------------------------- builders


def dumps(value: Any) -> bytes:
    """JSON with whatever the standard library writes: integers of any size included."""
    return json.dumps(value).encode()


def sample(values: dict[str, float] | None = None, node: str = "n1", ts: float = NOW) -> dict[str, Any]:
    return {"ts": ts, "node": node, "values": values or {"cpu": 0.5}}


def profile(name: str = "fz", **fields: Any) -> dict[str, Any]:
    return {"schedulerName": name, **fields}


def node_event(name: str, kind: str = "upsert") -> NodeEvent:
    return NodeEvent(type=kind, node=NodeSpec(name=name, allocatable={"cpu": "1", "pods": 5}))


def letters_of(topic: str, key: bytes | None, value: bytes | None, headers: Headers = None) -> list[str]:
    """The dead letters' errors the agent reading `topic` writes for one record."""
    if topic == "metrics":
        return [d.dead_letter.error for d in decode_records(topic, 0, 1, key, value) if d.dead_letter]
    if topic == "bindings":
        letter = decode_record(topic, 0, 1, key, value).dead_letter
        return [] if letter is None else [letter.error]
    result = envelope_from_record(topic, 0, 1, key, value, headers, now=NOW)
    return [result.error] if isinstance(result, DeadLetter) else []


# ------------------------------------------------------------------------------------- dead letters

DEAD_LETTERS = [
    pytest.param(
        "metrics",
        b"n1",
        b"[" + dumps(nested(300)) + b"]",
        ["[0]."],
        id="A metrics array element nested 300 levels deep is a dead letter, not an encoder's TypeError.",
    ),
    pytest.param(
        "metrics",
        b"n1",
        b"[" + b",".join([b"{}"] * 100) + b"]",
        ["].ts: field required"] * (LETTERS_PER_RECORD - 1) + ["37 more bad elements from [63] on"],
        id="A metrics record of 100 bad elements makes 64 dead letters, the last standing for the rest.",
    ),
    pytest.param(
        "metrics",
        b"n1",
        b"[" + b",".join([b"0"] * 10_001) + b"]",
        ["10,001 elements: at most 10,000"],
        id="A metrics array of more than 10,000 elements is one dead letter, whatever they are.",
    ),
    pytest.param(
        "metrics",
        b"n1",
        b" [ ] ",
        ["empty array"],
        id="An empty metrics array is a dead letter rather than nothing at all.",
    ),
    pytest.param(
        "metrics",
        b"n1",
        dumps(sample({"cpu": 1e300})),
        ["values.cpu: Input should be less than or equal to"],
        id="A metric value of 1e300 is a dead letter rather than a silent count in the metrics core.",
    ),
    pytest.param(
        "metrics",
        b"n1",
        dumps(sample({"\n": -1.0})),
        ["values.\\n"],
        id="A field path holding a newline is written on one line.",
    ),
    pytest.param(
        "bindings",
        b"p1",
        dumps({"uid": "p1", "node": "n1", "attempt": 2**70}),
        ["attempt: Input should be less than or equal to"],
        id="A binding attempt of 2^70 is a dead letter: the ledger's encoder once raised on it.",
    ),
    pytest.param(
        "node-events",
        b"n1",
        dumps({"type": "upsert", "node": {"name": "n1", "images": [{"names": ["i"], "size_bytes": 2**70}]}}),
        ["node.images.0.size_bytes: Input should be less than or equal to"],
        id="An image of 2^70 bytes is a dead letter: the shard's checkpoints once failed on it.",
    ),
    pytest.param(
        "bindings",
        b"someone-else",
        dumps({"uid": "p1", "node": "n1"}),
        ["key: record key 'someone-else' does not match 'p1'"],
        id="A binding under another record key than its uid is a dead letter.",
    ),
    pytest.param(
        "bindings",
        b"p1",
        dumps({"uid": 5, "node": "n1"}),
        ["uid: Input should be a valid string"],
        id="A binding's error names its field without the topic's union tag in front.",
    ),
    pytest.param(
        "pod-requests",
        b"\xff",
        dumps({"uid": "\ufffd"}),
        ["key: record key '\\\\xff' does not match"],
        id="A key that is not UTF-8 does not pass for the uid its lossy decoding spells.",
    ),
    pytest.param(
        "pod-requests",
        b"p1",
        dumps({"uid": "p1", "requests": {"memory": "9" * 100_000}}),
        ["containers.0.requests.memory: quantity of 100,000 characters: at most 64"],
        id="A quantity of 100,000 digits is refused with the resource's name.",
    ),
    pytest.param(
        "pod-requests",
        b"w" * 245,
        dumps({"uid": "w" * 245, "replicas": 3}),
        ["uid: at most 241 characters for a workload"],
        id="A workload whose uid leaves no room for its replicas' suffix is a dead letter.",
    ),
    pytest.param(
        "pod-requests",
        b"p1",
        dumps({"uid": "p1", "containers": [{"name": "c" * 300}]}),
        ["containers.0.name: String should have at most 253 characters"],
        id="A container name longer than any Kubernetes name is a dead letter.",
    ),
    pytest.param(
        "pod-requests",
        b"p1",
        dumps({"session": "s", "ts": 1.0, "partitions": {f"t{i}": 100_000 for i in range(2)}}),
        ["watermark.partitions: more than 100,000 in all"],
        id="A watermark naming 200,000 partitions is refused before placement would list them all.",
    ),
    pytest.param(
        "config",
        b"fz",
        dumps(profile(plugins={"score": {"enabled": [{"name": "NodeResourcesFit", "junk": nested(300)}]}})),
        ["profile fz: cannot be passed on"],
        id="A profile with 300 levels of nesting in a plugin entry is refused by the forwarder.",
    ),
    pytest.param(
        "config",
        b"fz",
        dumps(profile(plugins={"score": "x"})),
        ["profile fz: malformed (AttributeError"],
        id="A profile whose extension point is a string is refused, not an AttributeError in the forwarder.",
    ),
    pytest.param(
        "config",
        b"\xfffz",
        None,
        ["key: a profile record is keyed by its name"],
        id="A profile tombstone under a key that is not UTF-8 is a dead letter.",
    ),
    pytest.param(
        "config",
        b"p" * 300,
        dumps(profile("p" * 300)),
        ["key: a profile record is keyed by its name (UTF-8, 1 to 253 characters)"],
        id="A profile named longer than any pod's scheduler name is a dead letter.",
    ),
]


@pytest.mark.parametrize(("topic", "key", "value", "errors"), DEAD_LETTERS)
def test_a_hostile_record_becomes_these_dead_letters(
    topic: str, key: bytes | None, value: bytes | None, errors: list[str]
) -> None:
    found = letters_of(
        topic, key, value, [(CONTROL_HEADER, WATERMARK_CONTROL)] if b'"session"' in (value or b"") else None
    )
    assert len(found) == len(errors), found
    for error, expected in zip(found, errors, strict=True):
        assert expected in error and "\n" not in error, (error, expected)


# ------------------------------------------------------------------------------------------- event time

TIMES = [
    pytest.param(
        "pod-requests",
        dumps({"uid": "p1", "created_at": 4_102_444_800.0}),
        None,
        NOW,
        id="A live pod request dated 2100 is stamped with the forwarder's clock.",
    ),
    pytest.param(
        "pod-requests",
        dumps({"uid": "p1", "created_at": 0.0}),
        None,
        0.0,
        id="A live pod request dated 1970 keeps its time (placement's clock never moves back).",
    ),
    pytest.param(
        "node-events",
        dumps({"type": "upsert", "node": {"name": "p1"}, "ts": 4_102_444_800.0}),
        None,
        NOW,
        id="A live node event dated 2100 is stamped with the forwarder's clock.",
    ),
    pytest.param(
        "pod-requests",
        dumps({"uid": "p1", "created_at": 4_102_444_800.0}),
        replay_headers(4_102_444_800.0, 1),
        4_102_444_800.0,
        id="A replayed record keeps its log's time, 2100 included.",
    ),
    pytest.param(
        "config",
        dumps(profile("p1")),
        replay_headers(0.0, 1),
        0.0,
        id="A replayed profile at log time 0 keeps time 0 (it once took the wall clock instead).",
    ),
]


@pytest.mark.parametrize(("topic", "value", "headers", "expected"), TIMES)
def test_an_envelope_is_stamped_with_this_event_time(
    topic: str, value: bytes, headers: Headers, expected: float
) -> None:
    envelope = envelope_from_record(topic, 0, 1, b"p1", value, headers, now=NOW)
    assert isinstance(envelope, Envelope), envelope
    assert envelope.ts == expected


@pytest.mark.parametrize(
    ("ts", "headers", "refused"),
    [
        pytest.param(4_102_444_800.0, None, True, id="A live sample dated 2100 is refused."),
        pytest.param(NOW + 3000.0, None, False, id="A live sample 50 minutes ahead (clock skew) is kept."),
        pytest.param(0.0, None, False, id="A live sample dated 1970 is kept."),
        pytest.param(
            4_102_444_800.0, replay_headers(1.0, 1), False, id="A replayed sample dated 2100 is kept."
        ),
    ],
)
def test_the_metrics_agent_refuses_live_samples_from_the_future(
    ts: float, headers: Headers, refused: bool
) -> None:
    error = None if is_replayed(headers) else future_error(ts, NOW)
    assert (error is not None) == refused
    if error is not None:
        assert error.startswith("ts: ") and "\n" not in error


# --------------------------------------------------------------------------------------------- the cores


def pods(count: int, labels: int) -> list[Envelope]:
    return [
        Envelope(
            Kind.POD, NOW, PodRequest(uid=f"p{i}", labels={f"k{j}": "v" * 60 for j in range(labels)}), "p/0"
        )
        for i in range(count)
    ]


@pytest.mark.parametrize(
    ("envelopes", "limit", "records", "refused"),
    [
        pytest.param(pods(3, 1), 10_000, 1, [], id="Envelopes that fit one record travel in one, as before."),
        pytest.param(pods(40, 20), 20_000, 4, [], id="A batch over the limit is split over several records."),
        pytest.param(pods(3, 300), 20_000, 0, [0, 1, 2], id="An envelope over the limit alone is refused."),
    ],
)
def test_a_batch_of_envelopes_is_packed_into_records_within_the_limit(
    envelopes: list[Envelope], limit: int, records: int, refused: list[int]
) -> None:
    packed, unsent = pack_envelopes(envelopes, limit)
    assert len(packed) == records and sorted(unsent) == refused
    assert all(len(record) <= limit for record in packed)
    travelled = [envelope for record in packed for envelope in decode_envelopes(record)]
    assert travelled == [e for i, e in enumerate(envelopes) if i not in unsent]


def test_a_window_mean_that_rounds_below_zero_is_sent_as_zero() -> None:
    core = MetricsCore(summary_interval=0.0)
    batch = [
        MetricSample(ts=0.0, node="n1", values={"bandwidth": 1e-300}),
        MetricSample(ts=NOW, node="n1", values={"cpu": 0.0, "bandwidth": 5e-324}),
        MetricSample(ts=NOW + 3600.0, node="n1", values={"bandwidth": 0.0}),
    ]
    summaries = [s for s in core.ingest(batch) if isinstance(s, NodeSummary)]
    assert summaries
    for summary in summaries:
        assert all(mean >= 0.0 for mean, _ in summary.window.values())
        assert NodeSummary.from_json(orjson.loads(orjson.dumps(summary.to_json()))) == summary


def test_a_binding_asking_for_pods_books_one_pod_whatever_it_asks() -> None:
    ledger = Ledger({}, {})
    ledger.upsert_node(NodeSpec(name="n1", allocatable={"cpu": "1", "pods": 1}))
    greedy = Binding(uid="p1", node="n1", requests=Resources({"cpu": 500, "pods": 2**62}))
    assert ledger.apply(greedy, NOW).status == "applied"
    assert ledger.allocated("n1") == {"cpu": 500, "pods": 1}


def test_a_binding_for_a_pod_nobody_placed_is_booked_on_a_node_with_room() -> None:
    """Documented, not refused: the ledger cannot tell placement's bindings from anyone else's, so the
    bindings topic must be writable by placement only (ACLs)."""
    ledger = Ledger({}, {})
    ledger.upsert_node(NodeSpec(name="n1", allocatable={"cpu": "1"}))
    result = ledger.apply(Binding(uid="nobody", node="n1", requests={"cpu": "1"}), NOW)
    assert result.status == "applied" and ledger.allocated("n1") == {"cpu": 1000, "pods": 1}
    assert ledger.apply(Binding(uid="ghost", node="n2"), NOW).status == "conflict"
    assert math.isfinite(result.at)


@pytest.mark.parametrize(
    "status",
    [
        pytest.param("conflict", id="A conflict at the largest attempt a record may carry."),
        pytest.param("rejected", id="A rejection on a node since removed, at the largest attempt."),
    ],
)
def test_a_result_at_the_largest_attempt_requeues_its_pod_without_counting_past_it(status: str) -> None:
    """The pod's next binding would carry one more than a record may: placement raised building it."""
    shard = Shard()
    shard.feed(Envelope(Kind.NODE, NOW, node_event("n1"), "nodes/0"))
    (binding,) = shard.feed(Envelope(Kind.POD, NOW, PodRequest(uid="p0"), "pods/0"))
    assert isinstance(binding, Binding)
    reasons = []
    if status == "rejected":  # the ledger holds the pod on a node placement has removed since
        reasons = [already_bound("n1")]
        shard.feed(Envelope(Kind.NODE, NOW, node_event("n1", "delete"), "nodes/0"))
    result = BindingResult(uid="p0", node="n1", status=status, attempt=MAX_TALLY, reasons=reasons)
    outputs = shard.feed(Envelope(Kind.RESULT, NOW + 1, result, "results/0"))
    outputs += shard.feed(Envelope(Kind.NODE, NOW + 2, node_event("n2"), "nodes/0"))
    outputs += shard.feed(Envelope(Kind.TICK, NOW + 60, None, "ticks/0"))
    again = [o for o in outputs if isinstance(o, Binding)]
    assert [(b.uid, b.attempt) for b in again] == [("p0", MAX_TALLY)]


# --------------------------------------------------------------------------------- sends within the limit


class RefusingProducer:
    """Faust's producer as far as `streams.runtime.agents.common.send` uses it: it refuses a record over the
    limit by raising, as aiokafka does (Faust wraps that in ProducerSendError, which stops the agent)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.records: list[bytes] = []

    async def send(self, topic: str, key: bytes, value: bytes, partition: int, *_: Any) -> None:
        if len(key) + len(value) + 100 > self.limit:
            raise MessageSizeTooLargeError(f"{len(value)} bytes")
        self.records.append(value)


def applier_results(count: int) -> list[Envelope]:
    """The envelopes the applier sends placement for a batch of bindings whose names are 253 control
    characters (valid names, six bytes each once escaped in JSON), none of whose nodes it knows."""
    ledger = Ledger({}, {})
    envelopes = []
    for i in range(count):
        binding = Binding(uid=f"{i}".ljust(253, "\u0001"), node="\u0001" * 253, cluster="\u0001" * 253)
        result = ledger.apply(binding, NOW)
        envelope = envelope_from_model(result, result.at, "bindings/0")
        assert envelope is not None
        envelopes.append(envelope)
    return envelopes


def stub_topics(limit: int) -> SimpleNamespace:
    settings = load_settings(env={}, max_message_bytes=limit)
    return SimpleNamespace(settings=settings, app=SimpleNamespace(producer=RefusingProducer(limit)))


async def test_a_batch_of_envelopes_over_the_limit_travels_split_from_the_forwarders_and_metrics() -> None:
    topics = stub_topics(1_048_576)
    envelopes = applier_results(1000)
    assert await send_envelopes(topics, envelopes) == {}
    records = topics.app.producer.records
    assert len(records) > 1
    assert [e for record in records for e in decode_envelopes(record)] == envelopes


async def test_the_applier_s_results_for_a_batch_of_long_named_bindings_fit_the_sequencer() -> None:
    topics = stub_topics(1_048_576)
    assert await send_envelopes(topics, applier_results(1000)) == {}
    assert all(len(record) <= 1_048_576 for record in topics.app.producer.records)
