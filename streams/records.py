"""Turning raw Kafka records into models, or into dead letters with the reason. Shared by the client's
consumers and the Faust agents, so every consumer rejects the same records in the same words."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from schemas.codec import decode_topic_value
from schemas.events import DEAD_LETTER_RAW_LIMIT, DeadLetter, MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest

__all__ = ["Decoded", "dead_letter", "decode_record"]


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
    expected = _identity(model)
    if expected is not None:
        actual = key.decode("utf-8", errors="replace") if key is not None else None
        if actual != expected:
            error = f"key: record key {actual!r} does not match {expected!r}"
            return Decoded(dead_letter=dead_letter(topic, partition, offset, key, value, error))
    return Decoded(value=model)
