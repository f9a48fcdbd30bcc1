"""A replay session whose replayer went silent ends by a timeout that ticks carry, in the pure shard: what
it held applies, its stragglers are live input, and a rebuild from the same envelopes decides the same."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from schemas.events import Binding
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.core.ingress import CONTROL_HEADER, WATERMARK_CONTROL, envelope_from_record
from streams.core.sequencer import (
    Envelope,
    Kind,
    Watermark,
    decode_envelope,
    decode_envelopes,
    encode_envelope,
    encode_envelopes,
    tick_envelope,
)
from streams.core.shard import Output, Shard

# ------------------------------------------------------------------------------------------- builders

NODES, PODS = "node-events/0", "pod-requests/0"
SESSION = {"node-events": 1, "pod-requests": 1}
TIMEOUT = 30.0
SILENT_FROM = 1_000.0
"""The forwarder's clock when the session's last watermark passed: the replayer died right after."""


def node(name: str, cpu: str = "8") -> NodeEvent:
    resources = {"cpu": cpu, "memory": "32Gi", "pods": 110}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=resources, allocatable=resources))


def pod(uid: str, cpu: str = "1") -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": cpu, "memory": "1Gi"})


def mark(ts: float, at: float, source: str, session: str = "r") -> Envelope:
    """A watermark of log time `ts`, stamped `at` by the forwarder that passed it on."""
    return Envelope(Kind.WATERMARK, at, Watermark(session, ts, SESSION), source)


def marks(ts: float, at: float, session: str = "r") -> list[Envelope]:
    return [mark(ts, at, NODES, session), mark(ts, at, PODS, session)]


def replayed(value: Any, ts: float, line: int) -> Envelope:
    source = NODES if isinstance(value, NodeEvent) else PODS
    kind = Kind.NODE if isinstance(value, NodeEvent) else Kind.POD
    return Envelope(kind, ts, value, source, float(line))


def silent_replay() -> list[Envelope]:
    """A replay that placed one pod, sent pod `held` (log time 2) and died before the watermark that would
    release it; a live pod `live` came after, on a partition the session holds."""
    return [
        *marks(-1.0, SILENT_FROM - 5),
        replayed(node("n1"), 0.0, 1),
        replayed(pod("placed"), 1.0, 2),
        *marks(1.0, SILENT_FROM),
        replayed(pod("held"), 2.0, 3),
        Envelope(Kind.POD, SILENT_FROM + 3, pod("live"), PODS),
    ]


def bound(outputs: list[Output]) -> dict[str, str]:
    return {o.uid: o.node for o in outputs if isinstance(o, Binding)}


def from_records(records: list[bytes]) -> tuple[Shard, list[Output]]:
    """A fresh shard fed sequencer records, as the placement agent feeds it (and rebuilds it)."""
    envelopes = [envelope for record in records for envelope in decode_envelopes(record)]
    assert all(isinstance(envelope, Envelope) for envelope in envelopes)
    return fed([envelope for envelope in envelopes if isinstance(envelope, Envelope)])


def fed(envelopes: list[Envelope]) -> tuple[Shard, list[Output]]:
    shard = Shard()
    return shard, shard.feed_all(envelopes)


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("after", "expected"),
    [
        pytest.param(
            [tick_envelope(SILENT_FROM + TIMEOUT - 0.5, TIMEOUT)],
            {},
            id="A tick before the replayer has been silent for the timeout releases nothing.",
        ),
        pytest.param(
            [tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT)],
            {"held": "n1", "live": "n1"},
            id="A tick once the replayer has been silent for the timeout places what the session held.",
        ),
        pytest.param(
            [tick_envelope(SILENT_FROM + 10 * TIMEOUT)],
            {},
            id="A tick without a timeout (from a worker that sends none) never ends a session.",
        ),
        pytest.param(
            [*marks(1.0, SILENT_FROM + TIMEOUT - 1), tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT)],
            {},
            id="A watermark during a pause of the log starts the count again.",
        ),
        pytest.param(
            [
                tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT),
                tick_envelope(SILENT_FROM + TIMEOUT + 1, TIMEOUT),
            ],
            {"held": "n1", "live": "n1"},
            id="A second tick of the timeout, sent before the first was applied, changes nothing.",
        ),
    ],
)
def test_a_silent_replay_session_ends_at_the_first_tick_past_its_timeout(
    after: list[Envelope], expected: dict[str, str]
) -> None:
    shard, before = fed(silent_replay())
    assert bound(before) == {"placed": "n1"}
    assert shard.reorder.held == 2
    outputs = shard.feed_all(after)
    assert bound(outputs) == expected
    assert (shard.reorder.session is None) == bool(expected)
    assert shard.counters["replay_sessions_expired"] == int(bool(expected))


def test_what_a_timed_out_session_held_applies_in_log_order_then_live_input_in_arrival_order() -> None:
    shard, _ = fed(silent_replay())
    outputs = shard.feed(tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT))
    assert [o.uid for o in outputs if isinstance(o, Binding)] == ["held", "live"]
    assert [o.decided_at for o in outputs if isinstance(o, Binding)] == [2.0, SILENT_FROM + 3]


def test_watermarks_of_a_timed_out_session_still_on_the_way_do_not_open_it_again() -> None:
    shard, _ = fed(silent_replay())
    shard.feed(tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT))
    straggler = replayed(pod("straggler"), 3.0, 4)
    outputs = shard.feed_all([*marks(2.0, SILENT_FROM + TIMEOUT + 1), straggler])
    assert shard.reorder.session is None
    assert bound(outputs) == {"straggler": "n1"}  # live input now: applied as it comes


def test_a_new_replay_after_a_timed_out_one_is_held_and_ordered_again() -> None:
    shard, _ = fed(silent_replay())
    shard.feed(tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT))
    later = SILENT_FROM + 2 * TIMEOUT
    assert shard.feed_all([*marks(-1.0, later, "next"), replayed(pod("second"), 5.0, 1)]) == []
    assert shard.reorder.session == "next"
    assert bound(shard.feed_all(marks(math.inf, later + 1, "next"))) == {"second": "n1"}


def test_a_tick_during_a_session_moves_neither_the_replay_clock_nor_the_queue() -> None:
    shard, _ = fed(silent_replay())
    now, ticks = shard.now, shard.counters["tick"]
    assert shard.feed(tick_envelope(SILENT_FROM + 1, TIMEOUT)) == []
    assert (shard.now, shard.counters["tick"]) == (now, ticks)


def test_a_rebuild_from_the_same_sequencer_records_reaches_the_same_state_and_decisions() -> None:
    # The live shard is fed the envelopes as they come; the rebuild reads them back from the sequencer
    # records (several to a record), as a worker taking the shard over does: the watermarks' stamps and
    # the ticks' timeout must travel with them.
    envelopes = [
        *silent_replay(),
        tick_envelope(SILENT_FROM + 1, TIMEOUT),
        tick_envelope(SILENT_FROM + TIMEOUT, TIMEOUT),
        *marks(2.0, SILENT_FROM + TIMEOUT + 1),
        replayed(pod("straggler"), 3.0, 4),
        Envelope(Kind.POD, SILENT_FROM + TIMEOUT + 2, pod("too-big", cpu="64"), PODS),
        tick_envelope(SILENT_FROM + TIMEOUT + 3),
    ]
    records = [encode_envelopes(envelopes[i : i + 3]) for i in range(0, len(envelopes), 3)]
    live, live_outputs = fed(envelopes)
    rebuilt, rebuilt_outputs = from_records(records)
    assert rebuilt_outputs == live_outputs
    assert bound(live_outputs) == {"placed": "n1", "held": "n1", "live": "n1", "straggler": "n1"}
    assert live.counters["replay_sessions_expired"] == 1
    for shard in (live, rebuilt):
        assert shard.reorder.session is None
    assert (rebuilt.now, dict(rebuilt.counters)) == (live.now, dict(live.counters))
    assert sorted(rebuilt.scheduler.snapshot.pods) == sorted(live.scheduler.snapshot.pods)


@pytest.mark.parametrize(
    "value",
    [
        pytest.param(b'{"replay_session_timeout_s": 0}', id="A timeout of 0 is refused."),
        pytest.param(b'{"replay_session_timeout_s": -5}', id="A negative timeout is refused."),
        pytest.param(b'{"replay_session_timeout_s": "30"}', id="A timeout that is a string is refused."),
        pytest.param(b'{"replay_session_timeout_s": true}', id="A timeout that is a boolean is refused."),
        pytest.param(b'{"timeout": 30}', id="A tick value without the timeout's name is refused."),
        pytest.param(
            b'{"replay_session_timeout_s": 30, "x": 1}', id="A tick value with more keys is refused."
        ),
        pytest.param(b"[30]", id="A tick value that is not an object is refused."),
    ],
)
def test_a_tick_with_a_malformed_timeout_is_refused_naming_its_value(value: bytes) -> None:
    with pytest.raises(InvalidInput, match=r"^value: must be null or"):
        decode_envelope(b'{"k": "tick", "ts": 5.0, "src": "tick", "v": ' + value + b"}")


def test_a_tick_carries_its_timeout_through_the_sequencer() -> None:
    tick = tick_envelope(12.5, 7)
    assert decode_envelope(encode_envelope(tick)) == tick
    assert decode_envelope(encode_envelope(tick_envelope(3.0))).value is None


def test_a_forwarder_stamps_a_watermark_with_its_own_clock() -> None:
    value = orjson.dumps(Watermark("r", 4.0, SESSION).to_json())
    headers = [(CONTROL_HEADER, WATERMARK_CONTROL)]
    envelope = envelope_from_record("pod-requests", 0, 9, b"w", value, headers, now=1234.5)
    assert isinstance(envelope, Envelope)
    assert (envelope.kind, envelope.ts, envelope.value.ts) == (Kind.WATERMARK, 1234.5, 4.0)
