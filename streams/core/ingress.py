"""Raw input records → sequencer envelopes, or dead letters. Shared by the live forwarders and the offline
replay, so both reject the same records in the same words and stamp the same event times.

Replayed records carry three headers (`eyrie replay` sets them): ``eyrie-ts`` (the log's event time),
``eyrie-seq`` (the log line) and, on control records, ``eyrie-control: watermark``.

Live records (no ``eyrie-ts``) take their event time from the model (``created_at``, ``ts``), but never later
than the forwarder's clock: placement's clock only moves forward, so one record dated 2100 would otherwise
move it to 2100 for good (every later decision stamped then, Permit timeouts and backoffs measured from
then). Times in the past are kept; placement's clock never moves back for them.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Iterable, Sequence

import orjson

from policies.framework.profile import parse_profile
from schemas.events import BindingResult, DeadLetter, MetricSample
from schemas.exceptions import EyrieError, InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.core.decoders import dead_letter, decode_record, json_arrays
from streams.core.sequencer import Envelope, Kind, Watermark, encode_envelope, encode_envelopes

__all__ = [
    "CONTROL_HEADER",
    "FUTURE_S",
    "SEQ_HEADER",
    "TS_HEADER",
    "Headers",
    "bound_error",
    "config_envelope",
    "envelope_from_model",
    "envelope_from_record",
    "event_time",
    "future_error",
    "is_replayed",
    "is_watermark",
    "pack_envelopes",
    "replay_headers",
    "replay_time",
    "watermark_from_record",
]

TS_HEADER = "eyrie-ts"
SEQ_HEADER = "eyrie-seq"
CONTROL_HEADER = "eyrie-control"
WATERMARK_CONTROL = b"watermark"
SESSION_PARTITIONS_LIMIT = 100_000
"""The most partitions a replay session may list: placement keeps one entry per session partition, so a
watermark naming 10^9 of them would take a worker's memory."""
FUTURE_S = 3600.0
"""How far past a worker's clock a live metric sample may be dated: clock skew between hosts, not years."""
_NAME_LIMIT = 253
"""A profile's name is a pod's ``scheduler_name``, a `schemas.base.Name`: a longer one could never be used."""

Headers = Iterable[tuple[str, bytes]] | None


def replay_headers(ts: float, seq: int) -> list[tuple[str, bytes]]:
    return [(TS_HEADER, repr(float(ts)).encode()), (SEQ_HEADER, str(seq).encode())]


def _header(headers: Headers, name: str) -> bytes | None:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def is_watermark(headers: Headers) -> bool:
    return _header(headers, CONTROL_HEADER) == WATERMARK_CONTROL


def replay_time(headers: Headers) -> float | None:
    """The log time a replayed record carries, None for live input; raises `InvalidInput` when bad."""
    return _float_header(headers, TS_HEADER)


def _float_header(headers: Headers, name: str) -> float | None:
    raw = _header(headers, name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise InvalidInput(f"header {name} is not a number: {raw[:32]!r}") from None
    if not math.isfinite(value) or value < 0:
        raise InvalidInput(f"header {name} must be a finite number ≥ 0")
    return value


def is_replayed(headers: Headers) -> bool:
    """Whether the record came from `eyrie replay` (it then runs on its log's clock, not the worker's)."""
    return _header(headers, TS_HEADER) is not None


def future_error(ts: float, clock: float) -> str | None:
    """Why a live sample dated `ts` is refused at `clock`, or None. The metrics core keeps a node's clock at
    its newest sample, so one sample from 2100 would push every later real one out of the node's window and
    date its summaries, and with them placement's clock, 2100."""
    if ts > clock + FUTURE_S:
        return f"ts: {ts} is more than {FUTURE_S:.0f} s past this worker's clock"
    return None


def watermark_from_record(value: bytes | None) -> Watermark:
    try:
        mark = Watermark.from_json(orjson.loads(value or b""))
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"watermark: not JSON: {exc}") from None
    if sum(mark.partitions.values()) > SESSION_PARTITIONS_LIMIT:
        raise InvalidInput(f"more than {SESSION_PARTITIONS_LIMIT:,} in all", field="watermark.partitions")
    return mark


def event_time(value: object, fallback: float) -> float:
    """The time a validated input happened: its own timestamp where the model has one, else `fallback`."""
    if isinstance(value, MetricSample | PodDeleted | PodBound):
        return value.ts
    if isinstance(value, NodeEvent) and value.ts is not None:
        return value.ts
    if isinstance(value, PodRequest) and value.created_at is not None:
        return value.created_at
    if isinstance(value, BindingResult) and value.at:
        return value.at
    return fallback


def bound_error(bound: PodBound, key: bytes | None) -> str | None:
    """Why a valid `PodBound` record cannot be counted, or None. It is keyed by its uid, as the pod's own
    requests and deletion are, so all three reach placement in their order; and it is one pod on one node,
    never a workload to divide."""
    if key != bound.uid.encode():
        actual = key.decode("utf-8", errors="backslashreplace")[:64] if key is not None else None
        return f"key: record key {actual!r} does not match {bound.uid[:64]!r}"
    if bound.pod.replicas != 1:
        return f"pod.replicas: a pod bound to a node is one pod, not {bound.pod.replicas} replicas"
    return None


def envelope_from_record(
    short_topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    headers: Headers = None,
    *,
    full_topic: str | None = None,
    now: float | None = None,
) -> Envelope | DeadLetter | None:
    """None for records placement does not need (its own verdicts coming back)."""
    topic = full_topic or short_topic
    source = f"{short_topic}/{partition}"
    clock = time.time() if now is None else now
    try:
        if is_watermark(headers):
            # Stamped with this forwarder's clock: placement ends a session whose watermarks stopped coming
            # (the replayer died) by comparing its ticks with this stamp.
            return Envelope(Kind.WATERMARK, clock, watermark_from_record(value), source)
        replay_ts = replay_time(headers)
        seq = _float_header(headers, SEQ_HEADER)
    except EyrieError as exc:
        return dead_letter(topic, partition, offset, key, value, str(exc))
    if short_topic == "config":
        ts = replay_ts if replay_ts is not None else clock  # a replay at time 0 is still a replay
        return _config_envelope(topic, partition, offset, key, value, source, ts)
    decoded = decode_record(short_topic, partition, offset, key, value, full_topic=topic)
    if decoded.dead_letter is not None:
        return decoded.dead_letter
    model = decoded.value
    if isinstance(model, PodBound):
        refusal = bound_error(model, key)
        if refusal is not None:
            return dead_letter(topic, partition, offset, key, value, refusal)
    ts = replay_ts if replay_ts is not None else min(event_time(model, clock), clock)
    envelope = envelope_from_model(
        model, ts, source, math.inf if seq is None else seq, -1 if offset is None else offset
    )
    if envelope is None and not isinstance(model, BindingResult):
        return dead_letter(
            topic, partition, offset, key, value, f"{short_topic} records are not for placement"
        )
    return envelope


def envelope_from_model(
    model: object, ts: float, source: str, seq: float = math.inf, offset: int = -1
) -> Envelope | None:
    """The envelope for a validated input; None for what placement does not take (its own verdicts)."""
    kind: Kind
    if isinstance(model, PodRequest):
        kind = Kind.POD
    elif isinstance(model, PodDeleted):
        kind = Kind.DELETE
    elif isinstance(model, PodBound):
        kind = Kind.BOUND
    elif isinstance(model, NodeEvent):
        kind = Kind.NODE
    elif isinstance(model, BindingResult) and model.status != "unschedulable":
        kind = Kind.RESULT
    else:
        return None
    return Envelope(kind, ts, model, source, seq, offset)


def _config_envelope(
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    source: str,
    ts: float,
) -> Envelope | DeadLetter:
    try:
        name = key.decode() if key else None
    except UnicodeDecodeError:
        name = None
    if not name or len(name) > _NAME_LIMIT:
        error = f"key: a profile record is keyed by its name (UTF-8, 1 to {_NAME_LIMIT} characters)"
        return dead_letter(topic, partition, offset, key, value, error)
    if value is None:
        return Envelope(Kind.CONFIG, ts, {"name": name, "document": None}, source)
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return dead_letter(topic, partition, offset, key, value, f"not JSON: {exc}")
    try:
        return config_envelope(name, document, ts, source)
    except EyrieError as exc:
        return dead_letter(topic, partition, offset, key, value, str(exc))


def config_envelope(name: str, document: object, ts: float, source: str) -> Envelope:
    """A profile checked before it travels: a bad one is refused here, with the reason, not in placement."""
    if not isinstance(document, dict):
        raise InvalidInput("a profile document must be a JSON object")
    try:
        profile = parse_profile(document, where=f"profile {name}")
    except EyrieError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # The loader assumes the shapes it reads (``plugins.score: "x"`` raised AttributeError in the
        # forwarder); whatever it trips on, the profile is refused, not the agent stopped.
        raise InvalidInput(f"profile {name}: malformed ({type(exc).__name__}: {exc})") from None
    if profile.name != name:
        raise InvalidInput(f"key: profile record keyed {name!r} holds schedulerName {profile.name!r}")
    try:  # the document travels as it came; orjson writes 254 levels of nesting, and reads 1024
        orjson.dumps(document)
    except TypeError as exc:
        raise InvalidInput(f"profile {name}: cannot be passed on: {exc}") from None
    return Envelope(Kind.CONFIG, ts, {"name": name, "document": document}, source)


def pack_envelopes(envelopes: Sequence[Envelope], limit: int) -> tuple[list[bytes], dict[int, str]]:
    """`envelopes` as sequencer records of at most `limit` bytes each (JSON arrays, in order), and the
    envelopes that cannot travel at all (index → reason; the caller dead-letters them): those over `limit` on
    their own, or that orjson cannot write. A validated record can grow on the way: a pod's ``host_ports:
    [1, 2, ...]`` becomes objects with protocol and address, ten times the bytes, and one batch of large
    pods is larger still; the producer raises on a record over ``max_message_bytes``, which would stop the
    agent."""
    if not envelopes:
        return [], {}
    with contextlib.suppress(TypeError):  # orjson.JSONEncodeError: found again below, envelope by envelope
        whole = encode_envelopes(envelopes)
        if len(whole) <= limit:
            return [whole], {}
    refused: dict[int, str] = {}
    parts: list[bytes] = []
    for index, envelope in enumerate(envelopes):
        try:
            part = encode_envelope(envelope)
        except TypeError as exc:
            refused[index] = f"cannot be encoded for the sequencer: {exc}"
            continue
        if len(part) + 2 > limit:
            refused[index] = f"{len(part):,} bytes once encoded for the sequencer: over {limit:,}"
            continue
        parts.append(part)
    return json_arrays(parts, limit), refused
