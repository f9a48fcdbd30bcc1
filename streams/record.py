"""`eyrie record`: live topics → an event log that `eyrie replay` accepts.

Topics are read concurrently, so records arrive in no global order; the log must be ordered by event time.
Records are therefore collected first and written sorted by (event time, arrival), which costs memory in
proportion to what is recorded. Each record's event time is, in order of preference: the replay header it
carries (a replayed record keeps its place), the model's own time (sample ts, deletion ts, node event ts,
pod creation), the record's Kafka timestamp.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from schemas.eventlog import EventLogWriter
from schemas.exceptions import InvalidInput
from streams.client import EyrieClient
from streams.core.ingress import event_time, replay_time
from streams.records import decode_records

__all__ = ["record_topics"]


def _event_time(value: Any, headers: Any, timestamp_ms: int | None) -> float:
    try:
        replayed = replay_time(headers)
    except InvalidInput:
        replayed = None  # a bad replay header: the record's own time still places it
    return replayed if replayed is not None else event_time(value, (timestamp_ms or 0) / 1000.0)


async def record_topics(
    client: EyrieClient,
    topics: Iterable[str],
    writer: EventLogWriter,
    *,
    follow: bool = False,
    until_idle: float | None = None,
    on_event: Callable[[], None] | None = None,
) -> int:
    """Write the chosen topics' records to `writer`; returns how many. Invalid records are dead-lettered
    (by the client) and left out, so the log always replays."""
    collected: list[tuple[float, int, str, str | None, Any]] = []
    async for short, message in client.records(
        list(topics), from_beginning=True, follow=follow, until_idle=until_idle, raw=True
    ):
        key = message.key.decode("utf-8", errors="replace") if message.key is not None else None
        if short == "config":
            if message.value is None:
                continue  # a deleted profile: nothing to replay
            try:
                value: Any = orjson.loads(message.value)
            except orjson.JSONDecodeError:
                continue
            ts = _event_time(None, message.headers, message.timestamp)
            collected.append((ts, len(collected), short, key, value))
        else:
            for decoded in decode_records(
                short, message.partition, message.offset, message.key, message.value
            ):
                if decoded.dead_letter is not None:
                    continue
                value = decoded.value
                ts = _event_time(value, message.headers, message.timestamp)
                collected.append((ts, len(collected), short, key, value))
        if on_event is not None:
            on_event()
    collected.sort(key=lambda item: (item[0], item[1]))
    for ts, _, short, key, value in collected:
        writer.write(ts, short, key, value)
    return len(collected)
