"""Turning raw Kafka records into models, or into dead letters with the reason. Shared by the client's
consumers and the Faust agents, so every consumer rejects the same records in the same words."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from schemas.codec import TOPIC_MODELS, decode_topic_value
from schemas.events import DEAD_LETTER_RAW_LIMIT, Binding, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest

__all__ = [
    "BATCHED_TOPICS",
    "ELEMENTS_PER_RECORD",
    "LETTERS_PER_RECORD",
    "RECORD_OVERHEAD",
    "Decoded",
    "dead_letter",
    "decode_record",
    "decode_records",
    "json_arrays",
]

RECORD_OVERHEAD = 1024
"""Bytes kept free under ``max_message_bytes`` for a record's key, headers and batch framing (aiokafka
counts them against the limit too)."""


def json_arrays(parts: list[bytes], limit: int, most: int | None = None) -> list[bytes]:
    """JSON documents `parts`, in order, as JSON arrays of at most `limit` bytes and `most` elements each: as
    few records as that allows, since Kafka and every consumer pay per record. A part too large for an array
    of its own still gets one; the producer refuses it, and the caller says so."""
    records: list[bytes] = []
    chunk: list[bytes] = []
    size = 2  # the brackets
    for part in parts:
        if chunk and (size + 1 + len(part) > limit or len(chunk) == most):
            records.append(b"[" + b",".join(chunk) + b"]")
            chunk, size = [], 2
        size += len(part) + (1 if chunk else 0)
        chunk.append(part)
    if chunk:
        records.append(b"[" + b",".join(chunk) + b"]")
    return records


@dataclass(frozen=True, slots=True)
class Decoded:
    """Exactly one of `value` and `dead_letter` is set."""

    value: Any = None
    dead_letter: DeadLetter | None = None


def _text(raw: bytes | None) -> str:
    if raw is None:
        return ""
    return raw[:DEAD_LETTER_RAW_LIMIT].decode("utf-8", errors="backslashreplace")


def dead_letter(
    topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    error: str,
    *,
    now: float | None = None,
) -> DeadLetter:
    return DeadLetter(
        topic=topic,
        partition=partition,
        offset=offset,
        key=_text(key)[:253] if key is not None else None,
        raw=_text(value),
        error=error[:1024].replace("\r", "\\r").replace("\n", "\\n"),  # one line, whatever it quotes
        at=time.time() if now is None else now,
    )


def _identity(value: Any) -> str | None:
    """The key a record of this kind must carry, so per-key ordering means what it should."""
    if isinstance(value, PodRequest | PodDeleted | Binding):
        return value.uid
    if isinstance(value, NodeEvent):
        return value.node.name
    if isinstance(value, MetricSample):
        return value.node
    return None


def decode_record(
    short_topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    *,
    full_topic: str | None = None,
) -> Decoded:
    """Validate one record of `short_topic`; a failure becomes a `DeadLetter` naming the field."""
    topic = full_topic or short_topic
    if value is None:
        return Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, "empty record value"))
    try:
        model = decode_topic_value(short_topic, value)
    except InvalidInput as exc:
        return Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, str(exc)))
    mismatch = _key_mismatch(model, key)
    if mismatch is not None:
        return Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, f"key: {mismatch}"))
    return Decoded(value=model)


def _key_mismatch(model: Any, key: bytes | None) -> str | None:
    expected = _identity(model)
    if expected is None:
        return None
    # Bytes against bytes: a key that is not UTF-8 must not match a name that its lossy decoding spells.
    if key is not None and key == expected.encode():
        return None
    actual = key.decode("utf-8", errors="backslashreplace")[:64] if key is not None else None
    return f"record key {actual!r} does not match {expected[:64]!r}"


BATCHED_TOPICS = frozenset({"metrics"})
"""Topics whose record may carry a JSON array of events for its key instead of one: a node agent ships a
scrape's samples together, and a consumer pays Kafka's and Faust's cost per record, not per sample."""

ELEMENTS_PER_RECORD = 10_000
"""The most events one array record may carry (a scrape of one node holds a few hundred). A longer array is
one dead letter, whatever its elements: validating 300,000 bad elements of one hostile record took seconds."""

LETTERS_PER_RECORD = 64
"""Dead letters one array record can cause: its first 63 bad elements get one each, the rest share the 64th.
Without a bound, one record of max_message_bytes holding ``[0,0,...]`` became 500,000 dead letters (15 s of
a worker and over a gigabyte of memory)."""


def _element_raw(item: Any, record: bytes) -> bytes:
    try:
        return orjson.dumps(item)
    except TypeError:  # orjson writes at most 254 levels (it reads 1024): show the record instead
        return record


def decode_records(
    short_topic: str,
    partition: int | None,
    offset: int | None,
    key: bytes | None,
    value: bytes | None,
    *,
    full_topic: str | None = None,
) -> list[Decoded]:
    """`decode_record`, except that on a batched topic an array decodes element by element: each bad
    element is its own dead letter (its field prefixed ``[i]``), and the good ones still count."""
    if short_topic not in BATCHED_TOPICS or not value or value.lstrip()[:1] != b"[":
        return [decode_record(short_topic, partition, offset, key, value, full_topic=full_topic)]
    topic = full_topic or short_topic
    try:
        items = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        return [Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, f"not JSON: {exc}"))]
    if not items or len(items) > ELEMENTS_PER_RECORD:
        error = "empty array" if not items else f"{len(items):,} elements: at most {ELEMENTS_PER_RECORD:,}"
        return [Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, error))]
    parse = TOPIC_MODELS[short_topic]
    decoded: list[Decoded] = []
    bad = 0
    overflow: tuple[str, int] | None = None  # the first error past the per-record bound, and its index
    for i, item in enumerate(items):
        try:
            model = parse(item, prefix=f"[{i}]")
        except InvalidInput as exc:
            error = str(exc)
        else:
            mismatch = _key_mismatch(model, key)
            if mismatch is None:
                decoded.append(Decoded(value=model))
                continue
            error = f"[{i}].key: {mismatch}"
        bad += 1
        if bad < LETTERS_PER_RECORD:
            raw = _element_raw(item, value)
            decoded.append(Decoded(dead_letter=dead_letter(topic, partition, offset, key, raw, error)))
        elif overflow is None:
            overflow = (error, i)
    if overflow is not None:
        error, first = overflow
        more = bad - LETTERS_PER_RECORD
        summary = f"{more + 1} more bad elements from [{first}] on share this letter; the first: {error}"
        decoded.append(Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, summary)))
    return decoded
