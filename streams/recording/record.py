"""`eyrie record`: what placement applied, or the input topics as they are, → an event log `eyrie replay`
accepts.

Two sources:

- ``sequencer`` (the default): every envelope each placement shard applied, in the order it applied them
  and with the time it applied them at, as placement records (`schemas.eventlog`). These are the inputs
  after the forwarders validated them, stamped them with their clock and dead-lettered the bad ones,
  the metrics agent's summaries instead of raw samples, and the applier's results and the worker's clock
  ticks where placement met them. `eyrie replay --offline` feeds such a log to the same shards at the same
  times and so makes the live decisions pod for pod. The order and the times are found as placement finds
  them (`Shard.feed`: a restarted forwarder's duplicates dropped, a replay session's inputs held for its
  watermarks, the clock of `Shard.advance_clock`), without placing anything.
- ``topics``: the input topics' valid records as they are (raw samples, not summaries), for replaying
  through another pipeline or with other settings. Topics are read concurrently, so records arrive in no
  global order: they are held in a window (`WINDOW_RECORDS` records, and with ``--follow`` at most
  `WINDOW_S` seconds) and written in event-time order; one that comes later than that is written at the
  time of the line before it, so the log stays ordered. A record's event time is, in order of preference:
  the replay header it carries, the model's own time (sample ts, deletion ts, node event ts, pod
  creation), its Kafka timestamp. Use it for other settings or pipelines; to reproduce the live decisions,
  record the sequencer: these inputs do not say in which order placement met them.

Lines are written as records come and flushed whenever the input pauses (and at least every `FLUSH_S`), so
the log is complete JSON Lines at any moment, and memory does not grow with what is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable
from typing import Any, TypeVar

import orjson

from schemas.eventlog import EventLogWriter
from schemas.exceptions import InvalidInput
from streams.client import EyrieClient
from streams.core.decoders import decode_records
from streams.core.ingress import event_time, replay_time
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Output, Shard

__all__ = [
    "FLUSH_S",
    "SOURCES",
    "WINDOW_RECORDS",
    "WINDOW_S",
    "Admissions",
    "placement_line",
    "record_sequencer",
    "record_topics",
]

SOURCES = ("sequencer", "topics")

FLUSH_S = 1.0
"""The longest a written line waits for a flush while records keep coming."""
_PAUSE_S = 0.2
"""A pause in the input this long flushes what was written."""
WINDOW_RECORDS = 10_000
WINDOW_S = 1.0

T = TypeVar("T")


class Admissions(Shard):
    """A shard that places nothing: it takes envelopes as placement does and notes which it would apply,
    in order, each with the time it would apply it at."""

    def __init__(self) -> None:
        super().__init__()
        self.applied: list[tuple[float, Envelope]] = []

    def apply(self, envelope: Envelope) -> list[Output]:
        self.applied.append((self.advance_clock(envelope), envelope))
        return []

    def take(self) -> list[tuple[float, Envelope]]:
        applied, self.applied = self.applied, []
        return applied


def placement_line(envelope: Envelope) -> tuple[str, str | None, Any] | None:
    """``(topic, key, value)`` of the placement record of an applied envelope (None: a watermark, which
    placement never applies)."""
    value = envelope.value
    match envelope.kind:
        case Kind.POD | Kind.DELETE | Kind.BOUND:
            return "pod-requests", value.uid, value
        case Kind.NODE:
            return "node-events", value.node.name, value
        case Kind.CONFIG:
            return "config", value["name"], value.get("document")
        case Kind.SUMMARY:
            return "placement.summary", value.node, value.to_json()
        case Kind.WORKLOAD:
            return "placement.workload", value.workload, value.to_json()
        case Kind.RESULT:
            return "placement.result", value.uid, value
        case Kind.TICK:
            return "placement.tick", None, None  # what else a tick carries is for `Shard.feed`, done here
    return None


async def _with_pauses(source: AsyncIterator[T], pause: float) -> AsyncGenerator[T | None, None]:
    """`source`'s items, and None whenever `pause` seconds pass without one."""
    done = object()

    async def following() -> Any:
        try:
            return await anext(source)
        except StopAsyncIteration:
            return done

    pending: asyncio.Task[Any] | None = None
    try:
        while True:
            if pending is None:
                pending = asyncio.ensure_future(following())
            finished, _ = await asyncio.wait({pending}, timeout=pause)
            if not finished:
                yield None
                continue
            fetched, pending = pending, None
            item = fetched.result()
            if item is done:
                return
            yield item
    finally:
        if pending is not None:
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await pending
        if isinstance(source, AsyncGenerator):
            await source.aclose()


class _Flusher:
    def __init__(self, writer: EventLogWriter) -> None:
        self.writer = writer
        self.last = time.monotonic()
        self.flushed = writer.count

    def __call__(self, paused: bool) -> None:
        now = time.monotonic()
        # Only when there is something new: a gzip stream grows by a few bytes at every flush.
        if self.writer.count != self.flushed and (paused or now - self.last >= FLUSH_S):
            self.writer.flush()
            self.last, self.flushed = now, self.writer.count


async def record_sequencer(
    client: EyrieClient,
    writer: EventLogWriter,
    *,
    follow: bool = False,
    until_idle: float | None = None,
    on_event: Callable[[], None] | None = None,
) -> int:
    """Write what every placement shard applied, as placement records; returns how many lines. Records
    placement could not decode were its dead letters, and are left out as it left them out."""
    shards: dict[int, Admissions] = {}
    written = writer.count
    flush = _Flusher(writer)
    records = client.records(
        ["sequencer"], from_beginning=True, follow=follow, until_idle=until_idle, raw=True
    )
    async with contextlib.aclosing(_with_pauses(records, _PAUSE_S)) as stream:
        async for item in stream:
            if item is None:
                flush(paused=True)
                continue
            _, message = item
            shard = shards.get(message.partition)
            if shard is None:
                shard = shards[message.partition] = Admissions()
            try:
                envelopes = decode_envelopes(message.value or b"")
            except InvalidInput:
                continue
            for envelope in envelopes:
                if isinstance(envelope, InvalidInput):
                    continue
                shard.feed(envelope)
                for ts, applied in shard.take():
                    line = placement_line(applied)
                    if line is not None:
                        writer.write(ts, *line, shard=message.partition)
                        if on_event is not None:
                            on_event()
            flush(paused=False)
    return writer.count - written


def _event_time(value: Any, headers: Any, timestamp_ms: int | None) -> float:
    try:
        replayed = replay_time(headers)
    except InvalidInput:
        replayed = None  # a bad replay header: the record's own time still places it
    return replayed if replayed is not None else event_time(value, (timestamp_ms or 0) / 1000.0)


class _Window:
    """Records held to be written in event-time order: the earliest goes once more than `WINDOW_RECORDS`
    are held, or once it has been held `hold_s`."""

    def __init__(self, writer: EventLogWriter, on_event: Callable[[], None] | None, hold_s: float) -> None:
        self.writer = writer
        self.on_event = on_event
        self.hold_s = hold_s
        self.held: list[tuple[float, int, float, str, str | None, Any]] = []
        self.arrivals = 0
        self.last_ts = 0.0
        self.late = 0
        """Records that came after a later one had been written, and were written at its time."""

    def add(self, ts: float, topic: str, key: str | None, value: Any) -> None:
        self.arrivals += 1
        heapq.heappush(self.held, (ts, self.arrivals, time.monotonic(), topic, key, value))

    def release(self, everything: bool = False) -> None:
        cutoff = time.monotonic() - self.hold_s
        held = self.held
        while held and (everything or len(held) > WINDOW_RECORDS or held[0][2] <= cutoff):
            ts, _, _, topic, key, value = heapq.heappop(held)
            if ts < self.last_ts:
                self.late += 1
                ts = self.last_ts
            self.last_ts = ts
            self.writer.write(ts, topic, key, value)
            if self.on_event is not None:
                self.on_event()


async def record_topics(
    client: EyrieClient,
    topics: Iterable[str],
    writer: EventLogWriter,
    *,
    follow: bool = False,
    until_idle: float | None = None,
    on_event: Callable[[], None] | None = None,
) -> int:
    """Write the chosen input topics' records to `writer`; returns how many lines. Invalid records are left
    out (the pipeline dead-letters them), so the log always replays."""
    # Without --follow the records are history, read as fast as they come: when they arrived says nothing.
    window = _Window(writer, on_event, WINDOW_S if follow else math.inf)
    written = writer.count
    flush = _Flusher(writer)
    records = client.records(
        list(topics), from_beginning=True, follow=follow, until_idle=until_idle, raw=True
    )
    try:
        async with contextlib.aclosing(_with_pauses(records, _PAUSE_S)) as stream:
            async for item in stream:
                if item is None:
                    window.release()
                    flush(paused=True)
                    continue
                short, message = item
                key = message.key.decode("utf-8", errors="replace") if message.key is not None else None
                if short == "config":
                    if message.value is None:
                        continue  # a deleted profile: nothing to replay
                    try:
                        value: Any = orjson.loads(message.value)
                    except orjson.JSONDecodeError:
                        continue
                    window.add(_event_time(None, message.headers, message.timestamp), short, key, value)
                else:
                    for decoded in decode_records(
                        short, message.partition, message.offset, message.key, message.value
                    ):
                        if decoded.dead_letter is None:
                            ts = _event_time(decoded.value, message.headers, message.timestamp)
                            window.add(ts, short, key, decoded.value)
                window.release()
                flush(paused=False)
    finally:
        window.release(everything=True)  # on Ctrl-C too: every record read is in the log
    return writer.count - written
