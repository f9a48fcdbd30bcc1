"""Raw input records → sequencer envelopes, or dead letters. Shared by the live forwarders and the offline
replay, so both reject the same records in the same words and stamp the same event times.

Replayed records carry three headers (`eyrie replay` sets them): ``eyrie-ts`` (the log's event time),
``eyrie-seq`` (the log line) and, on control records, ``eyrie-control: watermark``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

import orjson

from policies.framework.profile import parse_profile
from schemas.events import BindingResult, DeadLetter, MetricSample
from schemas.exceptions import EyrieError, InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest
from streams.core.sequencer import Envelope, Kind, Watermark
from streams.records import dead_letter, decode_record

__all__ = [
    "CONTROL_HEADER",
    "SEQ_HEADER",
    "TS_HEADER",
    "Headers",
    "config_envelope",
    "envelope_from_model",
    "envelope_from_record",
    "event_time",
    "is_watermark",
    "replay_headers",
    "replay_time",
    "watermark_from_record",
]

TS_HEADER = "eyrie-ts"
SEQ_HEADER = "eyrie-seq"
CONTROL_HEADER = "eyrie-control"
WATERMARK_CONTROL = b"watermark"

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


def watermark_from_record(value: bytes | None) -> Watermark:
    try:
        return Watermark.from_json(orjson.loads(value or b""))
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"watermark: not JSON: {exc}") from None


def event_time(value: object, fallback: float) -> float:
    """The time a validated input happened: its own timestamp where the model has one, else `fallback`."""
    if isinstance(value, MetricSample | PodDeleted):
        return value.ts
    if isinstance(value, NodeEvent) and value.ts is not None:
        return value.ts
    if isinstance(value, PodRequest) and value.created_at is not None:
        return value.created_at
    if isinstance(value, BindingResult) and value.at:
        return value.at
    return fallback


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
    try:
        if is_watermark(headers):
            return Envelope(Kind.WATERMARK, 0.0, watermark_from_record(value), source)
        replay_ts = replay_time(headers)
        seq = _float_header(headers, SEQ_HEADER)
    except EyrieError as exc:
        return dead_letter(topic, partition, offset, key, value, str(exc))
    clock = time.time() if now is None else now
    if short_topic == "config":
        return _config_envelope(topic, partition, offset, key, value, source, replay_ts or clock)
    decoded = decode_record(short_topic, partition, offset, key, value, full_topic=topic)
    if decoded.dead_letter is not None:
        return decoded.dead_letter
    model = decoded.value
    ts = replay_ts if replay_ts is not None else event_time(model, clock)
    envelope = envelope_from_model(model, ts, source, math.inf if seq is None else seq)
    if envelope is None and not isinstance(model, BindingResult):
        return dead_letter(
            topic, partition, offset, key, value, f"{short_topic} records are not for placement"
        )
    return envelope


def envelope_from_model(model: object, ts: float, source: str, seq: float = math.inf) -> Envelope | None:
    """The envelope for a validated input; None for what placement does not take (its own verdicts)."""
    kind: Kind
    if isinstance(model, PodRequest):
        kind = Kind.POD
    elif isinstance(model, PodDeleted):
        kind = Kind.DELETE
    elif isinstance(model, NodeEvent):
        kind = Kind.NODE
    elif isinstance(model, BindingResult) and model.status != "unschedulable":
        kind = Kind.RESULT
    else:
        return None
    return Envelope(kind, ts, model, source, seq)


def _config_envelope(
    topic: str,
    partition: int,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    source: str,
    ts: float,
) -> Envelope | DeadLetter:
    name = key.decode("utf-8", errors="replace") if key else None
    if not name:
        return dead_letter(topic, partition, offset, key, value, "key: a profile record is keyed by its name")
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
    profile = parse_profile(document, where=f"profile {name}")
    if profile.name != name:
        raise InvalidInput(f"key: profile record keyed {name!r} holds schedulerName {profile.name!r}")
    return Envelope(Kind.CONFIG, ts, {"name": name, "document": document}, source)
