"""The placement shard and its reorder buffer, without Kafka: order, idempotence, conflicts, profiles."""

from __future__ import annotations

import math
import random
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schemas.codec import encode
from schemas.events import Binding, BindingResult, DeadLetter
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.core.ingress import (
    CONTROL_HEADER,
    WATERMARK_CONTROL,
    envelope_from_record,
    replay_headers,
)
from streams.core.sequencer import (
    Envelope,
    Kind,
    ReorderBuffer,
    Watermark,
    decode_envelope,
    decode_envelopes,
    encode_envelope,
    encode_envelopes,
)
from streams.core.shard import Shard

# ------------------------------------------------------------------------------------------- builders


def node(name: str, cpu: str = "4", memory: str = "8Gi", **labels: str) -> NodeEvent:
    spec = NodeSpec(
        name=name,
        capacity={"cpu": cpu, "memory": memory, "pods": 110},
        allocatable={"cpu": cpu, "memory": memory, "pods": 110},
        labels=labels,
    )
    return NodeEvent(type="upsert", node=spec)


def pod(uid: str, cpu: str = "1", memory: str = "1Gi", **extra: Any) -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": cpu, "memory": memory}, **extra)


def env(kind: Kind, ts: float, value: Any, source: str = "offline/0", seq: float = math.inf) -> Envelope:
    return Envelope(kind, ts, value, source, seq)


def mark(ts: float, source: str, session: str = "s", partitions: dict[str, int] | None = None) -> Envelope:
    return Envelope(Kind.WATERMARK, 0.0, Watermark(session, ts, partitions or {"a": 1, "b": 1}), source)


def bindings(outputs: list[Any]) -> dict[str, str]:
    return {o.uid: o.node for o in outputs if isinstance(o, Binding)}


# ------------------------------------------------------------------------------------- reorder buffer


def test_without_a_session_envelopes_are_applied_in_arrival_order() -> None:
    buffer = ReorderBuffer()
    first, second = env(Kind.TICK, 5.0, None, "a/0"), env(Kind.TICK, 1.0, None, "b/0")
    assert buffer.push(first) == [first]
    assert buffer.push(second) == [second]


def test_a_session_holds_envelopes_until_every_partition_passed_their_time() -> None:
    buffer = ReorderBuffer()
    assert buffer.push(mark(-1.0, "a/0")) == []
    assert buffer.push(mark(-1.0, "b/0")) == []
    late = env(Kind.TICK, 2.0, None, "b/0", seq=4)
    early = env(Kind.TICK, 1.0, None, "a/0", seq=3)
    assert buffer.push(late) == []
    assert buffer.push(early) == []
    assert buffer.push(mark(1.0, "a/0")) == []  # b has not passed 1.0 yet
    assert buffer.push(mark(2.0, "b/0")) == [early]
    assert buffer.push(mark(5.0, "a/0")) == [late]


def test_equal_times_are_ordered_by_log_line() -> None:
    buffer = ReorderBuffer()
    buffer.push(mark(-1.0, "a/0"))
    buffer.push(mark(-1.0, "b/0"))
    third, second = env(Kind.TICK, 1.0, None, "a/0", seq=3), env(Kind.TICK, 1.0, None, "b/0", seq=2)
    buffer.push(third)
    buffer.push(second)
    buffer.push(mark(1.0, "a/0"))
    assert buffer.push(mark(1.0, "b/0")) == [second, third]


def test_the_end_of_a_session_releases_everything_and_returns_to_arrival_order() -> None:
    buffer = ReorderBuffer()
    buffer.push(mark(-1.0, "a/0"))
    held = env(Kind.TICK, 9.0, None, "a/0", seq=1)
    assert buffer.push(held) == []
    buffer.push(mark(math.inf, "a/0"))
    assert buffer.push(mark(math.inf, "b/0")) == [held]
    assert buffer.session is None
    live = env(Kind.TICK, 1.0, None, "a/0")
    assert buffer.push(live) == [live]


def test_sources_outside_the_session_are_not_held() -> None:
    buffer = ReorderBuffer()
    buffer.push(mark(-1.0, "a/0"))
    result = env(Kind.TICK, 50.0, None, "binding-results/3")
    assert buffer.push(result) == [result]


# ------------------------------------------------------------------------------------------- the shard


def scripted_log() -> list[Envelope]:
    """Nodes, then pods with deletions between them, each with its log line as seq."""
    events: list[tuple[float, Kind, Any]] = [(0.0, Kind.NODE, node(f"n{i}", cpu="2")) for i in range(3)]
    for i in range(12):
        events.append((1.0 + i, Kind.POD, pod(f"p{i:02d}", cpu="500m")))
        if i % 4 == 3:
            events.append((1.5 + i, Kind.DELETE, PodDeleted(uid=f"p{i - 2:02d}", ts=1.5 + i)))
    return [env(kind, ts, value, seq=line) for line, (ts, kind, value) in enumerate(events, start=1)]


def test_a_pod_is_placed_once_even_if_its_request_arrives_twice() -> None:
    shard = Shard()
    outputs = shard.feed_all(
        [env(Kind.NODE, 0, node("n1")), env(Kind.POD, 1, pod("a")), env(Kind.POD, 2, pod("a"))]
    )
    assert [o.uid for o in outputs if isinstance(o, Binding)] == ["a"]
    assert shard.counters["duplicate_pod"] == 1


def test_a_conflict_returns_the_pod_to_the_queue_with_the_next_attempt() -> None:
    shard = Shard()
    first = shard.feed_all(
        [env(Kind.NODE, 0, node("n1")), env(Kind.NODE, 0, node("n2")), env(Kind.POD, 1, pod("a"))]
    )
    binding = next(o for o in first if isinstance(o, Binding))
    conflict = BindingResult(
        uid="a", node=binding.node, status="conflict", reasons=["Insufficient cpu"], attempt=0
    )
    again = shard.feed(env(Kind.RESULT, 2, conflict, "binding-results/0"))
    retried = next(o for o in again if isinstance(o, Binding))
    assert retried.attempt == 1


def test_a_conflict_for_an_older_attempt_is_ignored() -> None:
    shard = Shard()
    outputs = shard.feed_all([env(Kind.NODE, 0, node("n1")), env(Kind.POD, 1, pod("a"))])
    binding = next(o for o in outputs if isinstance(o, Binding))
    stale = BindingResult(uid="a", node="elsewhere", status="conflict", attempt=0)
    assert shard.feed(env(Kind.RESULT, 2, stale, "binding-results/0")) == []
    assert shard.scheduler.snapshot.pods["a"].row == shard.scheduler.snapshot.index[binding.node]


def placed_on_n1(uid: str = "a") -> Shard:
    """A shard of nodes n1 (roomier, so the pod's choice) and n2, the pod `uid` assumed on n1 (attempt 0)."""
    shard = Shard()
    outputs = shard.feed_all(
        [env(Kind.NODE, 0, node("n1", cpu="8")), env(Kind.NODE, 0, node("n2")), env(Kind.POD, 1, pod(uid))]
    )
    assert bindings(outputs) == {uid: "n1"}
    return shard


def where(shard: Shard, uid: str) -> tuple[str | None, bool] | None:
    record = shard.scheduler.snapshot.pods.get(uid)
    return None if record is None else (shard.scheduler.snapshot.names[record.row], record.bound)


@pytest.mark.parametrize(
    ("case", "rejected_node", "reasons", "expected"),
    [
        (
            "a rejected answer to a binding for another node (an older attempt) leaves the pod where it is",
            "n2",
            ["pod already bound to node n2"],
            ("n1", False),
        ),
        (
            "the applier holding the pod on another node from an earlier binding moves it there, bound",
            "n1",
            ["pod already bound to node n2"],
            ("n2", True),
        ),
        ("a pod the applier knows as deleted is let go", "n1", ["pod deleted"], None),
        (
            "bound to a node placement does not know, the pod is let go",
            "n1",
            ["pod already bound to node n9"],
            None,
        ),
    ],
)
def test_a_rejected_result_follows_what_the_ledger_holds(
    case: str, rejected_node: str, reasons: list[str], expected: tuple[str, bool] | None
) -> None:
    shard = placed_on_n1()
    rejected = BindingResult(uid="a", node=rejected_node, status="rejected", reasons=reasons, attempt=0)
    assert bindings(shard.feed(env(Kind.RESULT, 2, rejected, "binding-results/0"))) == {}
    assert where(shard, "a") == expected


def deleted(name: str) -> NodeEvent:
    return NodeEvent(type="delete", node=NodeSpec(name=name))


def placed_attempts(outputs: list[Any]) -> dict[str, tuple[str, int]]:
    return {o.uid: (o.node, o.attempt) for o in outputs if isinstance(o, Binding)}


@pytest.mark.parametrize("confirmed", [False, True], ids=["assumed", "bound"])
def test_a_single_pod_whose_node_is_deleted_is_placed_again_at_a_later_attempt(confirmed: bool) -> None:
    shard = placed_on_n1()
    if confirmed:
        applied = BindingResult(uid="a", node="n1", status="applied", attempt=0)
        shard.feed(env(Kind.RESULT, 2, applied, "binding-results/0"))
    outputs = shard.feed(env(Kind.NODE, 3, deleted("n1")))
    assert placed_attempts(outputs) == {"a": ("n2", 1)}
    assert where(shard, "a") == ("n2", False)
    # The first binding's answer, from an applier that saw the deletion first, is an older attempt's.
    lost = BindingResult(uid="a", node="n1", status="conflict", reasons=["node not found"], attempt=0)
    assert shard.feed(env(Kind.RESULT, 4, lost, "binding-results/0")) == []
    assert where(shard, "a") == ("n2", False)


def test_a_pod_whose_node_is_deleted_and_that_fits_nowhere_else_is_said_unschedulable() -> None:
    shard = placed_on_n1()
    outputs = shard.feed(env(Kind.NODE, 3, deleted("n2")))
    assert outputs == []  # n2 held nothing
    assert bindings(shard.feed(env(Kind.POD, 4, pod("b")))) == {"b": "n1"}  # the only node left
    outputs = shard.feed(env(Kind.NODE, 5, deleted("n1")))
    verdicts = {o.uid: o.status for o in outputs if isinstance(o, BindingResult)}
    assert verdicts == {"a": "unschedulable", "b": "unschedulable"}


def test_a_pod_the_applier_still_holds_on_a_deleted_node_is_tried_again_after_its_backoff() -> None:
    shard = placed_on_n1()
    assert placed_attempts(shard.feed(env(Kind.NODE, 3, deleted("n1")))) == {"a": ("n2", 1)}
    # The applier had not seen the deletion when binding 1 came.
    held = BindingResult(
        uid="a", node="n2", status="rejected", reasons=["pod already bound to node n1"], attempt=1
    )
    assert shard.feed(env(Kind.RESULT, 4, held, "binding-results/0")) == []
    assert where(shard, "a") is None
    assert shard.feed(env(Kind.TICK, 5.5, None, "tick")) == []  # backoff of attempt 1: 2 s
    assert placed_attempts(shard.feed(env(Kind.TICK, 6.0, None, "tick"))) == {"a": ("n2", 2)}


def test_after_moving_a_pod_to_the_ledgers_node_that_node_counts_it() -> None:
    shard = placed_on_n1()
    moved = BindingResult(
        uid="a", node="n1", status="rejected", reasons=["pod already bound to node n2"], attempt=0
    )
    shard.feed(env(Kind.RESULT, 2, moved, "binding-results/0"))
    snapshot = shard.scheduler.snapshot
    counts = {name: int(snapshot.pod_count[snapshot.index[name]]) for name in ("n1", "n2")}
    assert counts == {"n1": 0, "n2": 1}
    # n2 keeps 3 of its 4 cpu free, so a pod of 4 cpu cannot go there.
    assert bindings(shard.feed(env(Kind.POD, 3, pod("b", cpu="4")))) == {"b": "n1"}
    assert bindings(shard.feed(env(Kind.POD, 4, pod("c", cpu="4")))) == {"c": "n1"}


def test_an_unschedulable_verdict_is_said_once_while_the_reasons_stay_the_same() -> None:
    shard = Shard()
    outputs = shard.feed_all(
        [
            env(Kind.NODE, 0, node("n1", cpu="1")),
            env(Kind.POD, 1, pod("big", cpu="2")),
            env(Kind.NODE, 2, node("n2", cpu="1")),
        ]
    )
    verdicts = [o for o in outputs if isinstance(o, BindingResult)]
    assert [v.status for v in verdicts] == ["unschedulable"]


def test_a_pod_that_did_not_fit_is_placed_when_a_node_arrives() -> None:
    shard = Shard()
    outputs = shard.feed_all(
        [
            env(Kind.NODE, 0, node("n1", cpu="1")),
            env(Kind.POD, 1, pod("big", cpu="2")),
            env(Kind.NODE, 20, node("n2", cpu="4")),
        ]
    )
    assert bindings(outputs) == {"big": "n2"}


def test_a_profile_on_the_config_topic_changes_the_decisions_of_later_pods() -> None:
    shard = Shard()
    nodes = [env(Kind.NODE, 0, node("a-node", cpu="8")), env(Kind.NODE, 0, node("b-node", cpu="8"))]
    before = bindings(shard.feed_all([*nodes, env(Kind.POD, 1, pod("p1")), env(Kind.POD, 2, pod("p2"))]))
    assert set(before.values()) == {"a-node", "b-node"}  # default spreads (LeastAllocated)
    packing = {
        "schedulerName": "default",
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ],
    }
    shard.feed(env(Kind.CONFIG, 3, {"name": "default", "document": packing}))
    after = bindings(shard.feed_all([env(Kind.POD, 4, pod("p3")), env(Kind.POD, 5, pod("p4"))]))
    assert after["p3"] == after["p4"]  # MostAllocated packs
    assert shard.counters["config_applied"] == 1


def test_a_deleted_pod_frees_its_node_for_the_next_one() -> None:
    shard = Shard()
    first = bindings(shard.feed_all([env(Kind.NODE, 0, node("n1", cpu="1")), env(Kind.POD, 1, pod("a"))]))
    assert first == {"a": "n1"}
    later = shard.feed_all([env(Kind.DELETE, 2, PodDeleted(uid="a", ts=2)), env(Kind.POD, 3, pod("b"))])
    assert bindings(later) == {"b": "n1"}


@settings(max_examples=40, deadline=None)
@given(st.randoms(use_true_random=False))
def test_any_interleaving_of_the_partitions_gives_the_offline_decisions(rng: random.Random) -> None:
    log = scripted_log()
    offline = Shard()
    offline.feed(mark(-1.0, "offline/0", partitions={"offline": 1}))
    expected = bindings(
        offline.feed_all(log) + offline.feed(mark(math.inf, "offline/0", partitions={"offline": 1}))
    )
    # Live: the log split over three partitions, each in order, interleaved at random, with watermarks.
    partitions = {"t": 3}
    lanes: list[list[Envelope]] = [[mark(-1.0, f"t/{p}", partitions=partitions)] for p in range(3)]
    for item in log:
        lane = rng.randrange(3)
        lanes[lane].append(Envelope(item.kind, item.ts, item.value, f"t/{lane}", item.seq))
        if rng.random() < 0.3:
            for p in range(3):
                lanes[p].append(mark(item.ts - 0.25, f"t/{p}", partitions=partitions))
    for p in range(3):
        lanes[p].append(mark(math.inf, f"t/{p}", partitions=partitions))
    live, outputs = Shard(), []
    while any(lanes):
        lane = rng.choice([lane for lane in lanes if lane])
        outputs += live.feed(lane.pop(0))
    assert bindings(outputs) == expected


# ------------------------------------------------------------------------------------ wire and ingress


def test_an_envelope_survives_the_sequencer_topic() -> None:
    original = env(Kind.POD, 12.5, pod("a", labels={"app": "web"}), "pod-requests/2", seq=7)
    assert decode_envelope(encode_envelope(original)) == original


def test_a_batch_of_envelopes_survives_as_one_record_in_order() -> None:
    batch = [
        env(Kind.NODE, 1.0, node("n1"), "node-events/0"),
        env(Kind.POD, 2.0, pod("a"), "pod-requests/1", seq=3),
        env(Kind.POD, 2.0, pod("b"), "pod-requests/1", seq=4),
    ]
    assert decode_envelopes(encode_envelopes(batch)) == batch


def test_a_single_envelope_record_still_decodes_as_a_batch_of_one() -> None:
    original = env(Kind.POD, 1.0, pod("a"), "pod-requests/0")
    assert decode_envelopes(encode_envelope(original)) == [original]


def test_a_bad_element_of_a_batch_is_refused_alone_and_the_others_still_decode() -> None:
    good = env(Kind.POD, 1.0, pod("a"), "pod-requests/0")
    raw = (
        b"["
        + encode_envelope(good)
        + b', {"k": "teleport", "ts": 1, "v": {}}, '
        + encode_envelope(good)
        + b"]"
    )
    first, bad, last = decode_envelopes(raw)
    assert first == good and last == good
    assert isinstance(bad, InvalidInput) and str(bad).startswith("[1]: ") and "teleport" in str(bad)


@pytest.mark.parametrize(
    "raw",
    [b"not json", b'"a string"', b"42"],
    ids=["bytes that are not JSON", "a JSON string", "a JSON number"],
)
def test_a_sequencer_record_that_is_neither_an_envelope_nor_a_batch_is_refused(raw: bytes) -> None:
    with pytest.raises(InvalidInput):
        decode_envelopes(raw)


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        (b'{"k": "pod", "ts": "soon", "v": {}}', "ts"),
        (b'{"k": "teleport", "ts": 1, "v": {}}', "k"),
        (b'{"k": "pod", "ts": 1, "v": {"uid": ""}}', "value.uid"),
        (
            b'{"k": "watermark", "ts": 0, "v": {"session": "s", "ts": 1, "partitions": {}}}',
            "watermark.partitions",
        ),
    ],
    ids=[
        "a time that is not a number",
        "an unknown kind",
        "a pod without a uid",
        "a watermark covering nothing",
    ],
)
def test_a_bad_envelope_is_refused_naming_the_field(raw: bytes, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        decode_envelope(raw)
    assert caught.value.field == field or field in str(caught.value)


def test_a_replayed_record_keeps_its_log_time_and_line() -> None:
    record = envelope_from_record("pod-requests", 1, 10, b"a", encode(pod("a")), replay_headers(42.0, 17))
    assert isinstance(record, Envelope)
    assert (record.kind, record.ts, record.seq, record.source) == (Kind.POD, 42.0, 17.0, "pod-requests/1")


def test_a_watermark_record_becomes_a_watermark_envelope() -> None:
    value = orjson.dumps(Watermark("s", 3.0, {"metrics": 2}).to_json())
    record = envelope_from_record("metrics", 1, 0, b"w", value, [(CONTROL_HEADER, WATERMARK_CONTROL)])
    assert isinstance(record, Envelope)
    assert record.kind is Kind.WATERMARK and record.value.ts == 3.0


@pytest.mark.parametrize(
    ("topic", "key", "value", "headers", "words"),
    [
        ("pod-requests", b"a", b"\xff\xfe", None, "JSON"),
        ("pod-requests", b"b", encode(pod("a")), None, "does not match"),
        ("pod-requests", b"a", encode(pod("a")), [("eyrie-ts", b"yesterday")], "eyrie-ts"),
        ("config", b"fast", b'{"schedulerName": "slow"}', None, "schedulerName"),
        (
            "config",
            b"fast",
            b'{"schedulerName": "fast", "plugins": {"score": {"enabled": [{"name": "Nope"}]}}}',
            None,
            "Nope",
        ),
    ],
    ids=[
        "garbage bytes",
        "a key that is not the pod's uid",
        "a replay time that is not a number",
        "a profile under another profile's name",
        "a profile naming an unknown plugin",
    ],
)
def test_a_bad_input_record_becomes_a_dead_letter_with_the_reason(
    topic: str, key: bytes, value: bytes, headers: Any, words: str
) -> None:
    letter = envelope_from_record(topic, 0, 5, key, value, headers)
    assert isinstance(letter, DeadLetter)
    assert words in letter.error and letter.offset == 5


def test_placements_own_unschedulable_verdicts_are_not_fed_back() -> None:
    verdict = BindingResult(uid="a", status="unschedulable", reasons=["Insufficient cpu"])
    assert envelope_from_record("binding-results", 0, 0, b"a", encode(verdict)) is None


GANG = {
    "schedulerName": "gang",
    "plugins": {
        "queueSort": {"disabled": [{"name": "*"}]},
        "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
    },
}


def test_gang_members_arriving_one_at_a_time_are_placed_together_once_the_group_is_complete() -> None:
    from schemas.pod import PodGroup

    shard = Shard()
    shard.feed(env(Kind.CONFIG, 0, {"name": "gang", "document": GANG}))
    shard.feed_all([env(Kind.NODE, 0, node(f"n{i}")) for i in range(2)])
    group = PodGroup(name="g", min_available=3, timeout_s=30)
    outputs = []
    for i in range(3):  # each arrival runs the queue at once: the first two are too few on their own
        outputs += shard.feed(
            env(Kind.POD, 1 + i * 0.01, pod(f"m{i}", scheduler_name="gang", pod_group=group))
        )
    assert not bindings(outputs)
    outputs += shard.feed(env(Kind.TICK, 3.0, None, "tick"))  # past the first members' backoff
    assert set(bindings(outputs)) == {"m0", "m1", "m2"}


# ------------------------------------------------------------------------------ forwarded twice


def forwarded(kind: Kind, ts: float, value: Any, offset: int, source: str = "pod-requests/0") -> Envelope:
    return Envelope(kind, ts, value, source, math.inf, offset)


def test_copies_a_restarted_forwarder_resends_apply_once_so_a_deleted_pod_is_not_placed_again() -> None:
    shard = Shard()
    shard.feed(forwarded(Kind.NODE, 0.0, node("n1"), 0, "node-events/0"))
    first = [
        forwarded(Kind.POD, 1.0, pod("p"), 10),
        forwarded(Kind.DELETE, 2.0, PodDeleted(uid="p", ts=2.0), 11),
    ]
    placed = shard.feed_all(first)
    assert bindings(placed) == {"p": "n1"}
    # The forwarder died before committing offset 11, and sends both again after its restart.
    again = shard.feed_all(first)
    assert again == []
    assert shard.counters["duplicate"] == 2
    assert "p" not in shard.scheduler.snapshot.pods


@pytest.mark.parametrize(
    ("offsets", "placed"),
    [
        pytest.param([5, 6], {"a", "b"}, id="Increasing offsets of one source all apply."),
        pytest.param([6, 5], {"a"}, id="An offset at or below the last applied one of its source is a copy."),
        pytest.param([-1, -1], {"a", "b"}, id="Envelopes without an offset (offline, results) always apply."),
    ],
)
def test_only_offsets_above_the_last_applied_one_of_their_source_apply(offsets, placed) -> None:
    shard = Shard()
    shard.feed(forwarded(Kind.NODE, 0.0, node("n1"), 0, "node-events/0"))
    outputs = []
    for uid, offset in zip(("a", "b"), offsets, strict=True):
        outputs += shard.feed(forwarded(Kind.POD, 1.0, pod(uid), offset))
    assert set(bindings(outputs)) == placed


def test_the_offset_travels_in_the_sequencer_record_and_a_bad_one_is_refused() -> None:
    envelope = forwarded(Kind.POD, 1.0, pod("p"), 42)
    assert decode_envelope(encode_envelope(envelope)).offset == 42
    data = orjson.loads(encode_envelope(envelope))
    data["o"] = "42"
    with pytest.raises(InvalidInput, match="o"):
        decode_envelope(orjson.dumps(data))


def test_a_result_arriving_during_a_replay_applies_at_the_replay_s_time_not_its_wall_clock_stamp() -> None:
    shard = Shard()
    session = {"node-events": 1, "pod-requests": 1}
    for source in ("node-events/0", "pod-requests/0"):
        shard.feed(mark(-1.0, source, partitions=session))
    shard.feed(Envelope(Kind.NODE, 0.0, node("n1"), "node-events/0", 1))
    shard.feed(Envelope(Kind.POD, 5.0, pod("p"), "pod-requests/0", 2))
    outputs = []
    for source in ("node-events/0", "pod-requests/0"):
        outputs += shard.feed(mark(5.0, source, partitions=session))
    placed = [o for o in outputs if isinstance(o, Binding)]
    assert [b.uid for b in placed] == ["p"] and shard.now == 5.0
    result = BindingResult(uid="p", node="n1", status="applied", at=1.8e9)
    shard.feed(Envelope(Kind.RESULT, 1.8e9, result, "bindings/0"))
    assert shard.now == 5.0
