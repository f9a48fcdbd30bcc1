"""Turning raw Kafka records into models, or into dead letters with the reason. Shared by the client's
consumers and the Faust agents, so every consumer rejects the same records in the same words."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from schemas.codec import TOPIC_MODELS, decode_topic_value
from schemas.events import DEAD_LETTER_RAW_LIMIT, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest

__all__ = ["BATCHED_TOPICS", "Decoded", "dead_letter", "decode_record", "decode_records"]


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
        error=error[:1024],
        at=time.time() if now is None else now,
    )


def _identity(value: Any) -> str | None:
    """The key a record of this kind must carry, so per-key ordering means what it should."""
    if isinstance(value, PodRequest | PodDeleted):
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
    actual = key.decode("utf-8", errors="replace") if key is not None else None
    return None if actual == expected else f"record key {actual!r} does not match {expected!r}"


BATCHED_TOPICS = frozenset({"metrics"})
"""Topics whose record may carry a JSON array of events for its key instead of one: a node agent ships a
scrape's samples together, and a consumer pays Kafka's and Faust's cost per record, not per sample."""


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
    parse = TOPIC_MODELS[short_topic]
    decoded: list[Decoded] = []
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
        decoded.append(
            Decoded(dead_letter=dead_letter(topic, partition, offset, key, orjson.dumps(item), error))
        )
    return decoded
