"""Replaying a recorded event log: live through Kafka, or offline through the same cores in process.

Both give every input the same place in the order, ``(ts, line)``: offline by applying the log in that
order, live by stamping each record with its ts and line (headers) and sending watermarks, so the placement
agent can restore that order whatever way the topics interleave on the way (see `streams.core.sequencer`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import BaseModel

from policies.framework.profile import ProfileSet
from schemas.codec import encode
from schemas.eventlog import LogEvent, placement_only, read_events
from schemas.events import Binding, BindingResult, MetricSample
from schemas.exceptions import EventLogError, EyrieError, InvalidInput
from schemas.pod import PodBound
from streams.client import DELETED_BY_OWNER, RELEASED, Decision, Deletion, EyrieClient, latest_decisions
from streams.core.ingress import (
    CONTROL_HEADER,
    WATERMARK_CONTROL,
    bound_error,
    config_envelope,
    envelope_from_model,
    replay_headers,
)
from streams.core.ledger import Ledger
from streams.core.metrics import MetricsCore, NodeSummary, WorkloadSummary
from streams.core.sequencer import Envelope, Kind, Watermark
from streams.core.shard import Counted, Output, Refused, Release, Shard
from streams.settings import Settings

__all__ = [
    "END_TIMEOUT_S",
    "HEARTBEAT_S",
    "OfflineResult",
    "ReplayStats",
    "replay_live",
    "replay_offline",
    "write_decisions",
]

_OFFLINE = "offline/0"
_RESULTS = "binding-results/0"
_METRICS_BATCH = 5000


@dataclass(slots=True)
class OfflineResult:
    decisions: list[Decision]
    bindings: dict[str, Binding]
    results: dict[str, BindingResult]
    events: int
    seconds: float
    counters: dict[str, int] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    """Inputs that could not apply (live, these are dead letters)."""


def replay_offline(
    path: str | Path,
    settings: Settings,
    *,
    profiles: ProfileSet | None = None,
    on_event: Callable[[], None] | None = None,
    shard: Shard | None = None,
) -> OfflineResult:
    """Run the log through the metrics core, the placement shard and the ledger, all in this process.
    `shard` is the placement shard to feed (a fresh one with `profiles` by default): pass one to look at
    it afterwards, e.g. at its placer's cluster summaries and divisions.

    A log of placement records (`eyrie record`'s default) goes to `_replay_placement` instead. A profile
    the live forwarder would dead-letter is refused (in `OfflineResult.refused`), and the replay goes on."""
    started = time.perf_counter()
    events = read_events(path, placement=True)
    first = next(events, None)
    if first is not None and first.shard is not None:
        return _replay_placement([first], events, profiles, shard, on_event, started)
    shard = shard if shard is not None else Shard(profiles)
    metrics = MetricsCore(summary_interval=settings.summary_interval)
    ledger = Ledger({}, {})
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    session = Watermark("offline", -1.0, {"offline": 1})

    def mark(ts: float) -> None:
        watermark = Watermark(session.session, ts, session.partitions)
        handle(shard.feed(Envelope(Kind.WATERMARK, 0.0, watermark, _OFFLINE)))

    def handle(outputs: list[Output]) -> None:
        # The applier's part: bindings become results at once, and results go back to placement as they
        # would through the binding-results topic (a source the replay does not hold back).
        queue = list(outputs)
        while queue:
            output = queue.pop(0)
            if isinstance(output, Binding):
                bindings[output.uid] = output
                result = ledger.apply(output, output.decided_at)
                results[output.uid] = result
                queue.extend(shard.feed(Envelope(Kind.RESULT, output.decided_at, result, _RESULTS)))
            elif isinstance(output, BindingResult):
                results[output.uid] = output
            elif isinstance(output, Release):  # a deleted or preempted pod
                ledger.delete(output.deleted.uid, output.deleted.ts)
                known = bindings.get(output.deleted.uid)
                attempt = known.attempt if known else -1
                _note_deletion(deletions, output.deleted.uid, output.deleted.ts, RELEASED, attempt)
            elif isinstance(output, Counted):  # a pod bound by someone else: booked, never answered
                ledger.book(output.bound, output.bound.ts)
            elif isinstance(output, Refused):
                refused.append(output.reason)

    samples: list[MetricSample] = []
    refused: list[str] = []
    deletions: dict[str, Deletion] = {}

    def summarise() -> None:
        for summary in metrics.ingest(samples):
            kind = Kind.SUMMARY if isinstance(summary, NodeSummary) else Kind.WORKLOAD
            handle(shard.feed(Envelope(kind, summary.ts, summary, _OFFLINE)))
        samples.clear()

    mark(session.ts)
    last_ts, count = -1.0, 0
    for event in itertools.chain([first] if first is not None else [], events):
        count += 1
        if event.shard is not None:
            raise _mixed(event)
        if event.ts > last_ts:
            summarise()
            mark(last_ts)
            last_ts = event.ts
        if isinstance(event.value, MetricSample):
            samples.append(event.value)
            if len(samples) >= _METRICS_BATCH:
                summarise()
        else:
            summarise()
            try:
                envelope = _envelope(event)
            except EyrieError as exc:  # live, the forwarder dead-letters it and placement never sees it
                refused.append(f"line {event.line}: {exc}")
                envelope = None
            if envelope is not None:
                if envelope.kind is Kind.NODE:
                    ledger.apply_node_event(envelope.value, event.ts)
                elif envelope.kind is Kind.DELETE:
                    _note_deletion(
                        deletions, envelope.value.uid, envelope.value.ts, DELETED_BY_OWNER, math.inf
                    )
                handle(shard.feed(envelope))
        if on_event is not None:
            on_event()
    summarise()
    mark(math.inf)
    return OfflineResult(
        latest_decisions(bindings, results, deletions),
        bindings,
        results,
        count,
        time.perf_counter() - started,
        dict(shard.counters),
        refused,
    )


def _note_deletion(deletions: dict[str, Deletion], uid: str, ts: float, reason: str, after: float) -> None:
    """Keeps the deletion that ends the latest attempt: an owner's deletion is followed by placement's
    release of the same pod, which says nothing new (as `EyrieClient.decisions` takes them)."""
    known = deletions.get(uid)
    if known is None or known.after < after:
        deletions[uid] = Deletion(ts, reason, after)


def _mixed(event: LogEvent) -> EventLogError:
    return EventLogError(
        "a log holds either placement records (with a shard) or topic records, not both",
        line=event.line,
        field="shard",
    )


_RECORDED = "recorded/0"


def _replay_placement(
    head: list[LogEvent],
    rest: Iterator[LogEvent],
    profiles: ProfileSet | None,
    shard: Shard | None,
    on_event: Callable[[], None] | None,
    started: float,
) -> OfflineResult:
    """Apply placement records as the live shards applied them: each line to its shard (a fresh one per
    shard number; `shard`, when given, is the first), in order, at its ts. Bindings and unschedulable
    verdicts come from the shards; the other results are the recorded ones (the applier's answers, from
    its ledger, which the log does not hold), fed back to the shards where they came live. Deletions are
    taken as `EyrieClient.decisions` takes them: the owners' (the deletions placement applied) and
    placement's releases."""
    shards: dict[int, Shard] = {}
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    deletions: dict[str, Deletion] = {}
    refused: list[str] = []

    def delete(uid: str, ts: float, reason: str, after: float) -> None:
        _note_deletion(deletions, uid, ts, reason, after)

    count = 0
    for event in itertools.chain(head, rest):
        count += 1
        if event.shard is None:
            raise _mixed(event)
        target = shards.get(event.shard)
        if target is None:
            target = shard if shard is not None and not shards else Shard(profiles)
            # A session whose source is every line makes the shard take each line's ts as its clock, as
            # the live shard's was: it need not grow (see `schemas.eventlog`).
            mark = Watermark("recorded", -math.inf, {"recorded": 1})
            target.feed(Envelope(Kind.WATERMARK, 0.0, mark, _RECORDED))
            shards[event.shard] = target
        envelope = _placement_envelope(event)
        if envelope.kind is Kind.RESULT:
            results[envelope.value.uid] = envelope.value
        elif envelope.kind is Kind.DELETE:
            delete(envelope.value.uid, envelope.value.ts, DELETED_BY_OWNER, math.inf)
        for output in target.apply(envelope):
            if isinstance(output, Binding):
                bindings[output.uid] = output
            elif isinstance(output, BindingResult):
                results[output.uid] = output
            elif isinstance(output, Release):
                known = bindings.get(output.deleted.uid)
                delete(output.deleted.uid, output.deleted.ts, RELEASED, known.attempt if known else -1)
            elif isinstance(output, Refused):
                refused.append(output.reason)
        if on_event is not None and not placement_only(event):
            on_event()  # counted as `read_events` counts, without placement's own lines
    counters: Counter[str] = Counter()
    for each in shards.values():
        counters.update(each.counters)
    decisions = latest_decisions(bindings, results, deletions)
    seconds = time.perf_counter() - started
    return OfflineResult(decisions, bindings, results, count, seconds, dict(counters), refused)


_SUMMARY_READERS: dict[str, tuple[Kind, Callable[[object], Any]]] = {
    "placement.summary": (Kind.SUMMARY, NodeSummary.from_json),
    "placement.workload": (Kind.WORKLOAD, WorkloadSummary.from_json),
}


def _placement_envelope(event: LogEvent) -> Envelope:
    kind: Kind
    value: Any = event.value
    if event.topic == "config":
        if not event.key:
            raise EventLogError("a profile line is keyed by the profile's name", line=event.line, field="key")
        kind, value = Kind.CONFIG, {"name": event.key, "document": event.value}
    elif event.topic in _SUMMARY_READERS:
        kind, read = _SUMMARY_READERS[event.topic]
        try:
            value = read(event.value)
        except InvalidInput as exc:
            message = str(exc).removeprefix(f"{exc.field}: ")
            raise EventLogError(
                message, line=event.line, field=f"value.{exc.field}" if exc.field else "value"
            ) from None
    elif event.topic == "placement.tick":
        kind = Kind.TICK
    elif event.topic == "placement.result":
        kind = Kind.RESULT
    else:
        envelope = envelope_from_model(event.value, event.ts, _RECORDED)
        if envelope is None or envelope.kind not in (Kind.POD, Kind.DELETE, Kind.BOUND, Kind.NODE):
            error = f"topic {event.topic!r} is not one placement applies"
            raise EventLogError(error, line=event.line, field="topic")
        return envelope
    return Envelope(kind, event.ts, value, _RECORDED)


def _envelope(event: LogEvent) -> Envelope | None:
    if event.topic == "config":
        return config_envelope(event.key or "", event.value, event.ts, _OFFLINE)
    if isinstance(event.value, PodBound):  # what the forwarder refuses of a valid one, refused here too
        key = event.key.encode() if event.key is not None else None
        refusal = bound_error(event.value, key)
        if refusal is not None:
            raise InvalidInput(refusal)
    return envelope_from_model(event.value, event.ts, _OFFLINE, float(event.line))


HEARTBEAT_S = 1.0
"""A live replay resends its latest watermark at least this often (every quarter of
``replay_session_timeout_s`` when that is shorter), through the log's pauses too: placement ends a session
that goes ``replay_session_timeout_s`` without one, taking its replayer for dead."""
END_TIMEOUT_S = 10.0
"""How long a replay that stops early tries to send its end marker; past it, placement's timeout ends the
session instead."""


@dataclass(slots=True)
class ReplayStats:
    events: int = 0
    watermarks: int = 0
    seconds: float = 0.0
    published_at: dict[str, float] = field(default_factory=dict)
    """Wall-clock time each pod request was handed to the producer (for latency figures)."""
    ended: bool = False
    """Whether the session's end marker reached the broker (also when the replay stopped early)."""


def _payload(value: Any) -> bytes:
    if isinstance(value, BaseModel):
        return encode(value)
    return orjson.dumps(value)


async def replay_live(
    path: str | Path,
    settings: Settings,
    *,
    speed: float | None = None,
    rate: float | None = None,
    watermark_every_s: float = 0.02,
    on_event: Callable[[], None] | None = None,
    session: str | None = None,
    stats: ReplayStats | None = None,
) -> ReplayStats:
    """Publish the log. `speed`: log seconds per wall second (None: as fast as possible); `rate`: at most
    this many events per second. `stats` (a new one by default) is filled as the replay goes: pass one to
    know how far a replay that was cancelled got.

    Placement holds live input on the replay's partitions until the replay's session ends, so the session is
    ended however the replay stops: at the end of the log, or cancelled or failing part way (then the
    exception goes on once the end marker is sent, or `END_TIMEOUT_S` has passed). Only a replayer killed
    outright cannot; placement ends its session ``replay_session_timeout_s`` after its last watermark."""
    stats = stats if stats is not None else ReplayStats()
    # Everything a replay publishes to, and so everything its watermarks must cover.
    partitions = {"metrics": settings.partitions, "node-events": 1, "pod-requests": settings.partitions}
    session = session or f"{Path(path).name}-{time.time_ns()}"
    heartbeat = min(HEARTBEAT_S, settings.replay_session_timeout_s / 4)
    started = time.monotonic()
    marked, last_mark = -1.0, started  # the latest watermark sent, and when
    async with EyrieClient(settings) as client:

        async def watermark(ts: float) -> None:
            nonlocal marked, last_mark
            payload = orjson.dumps(Watermark(session, ts, partitions).to_json())
            for topic, count in partitions.items():
                for partition in range(count):
                    await client.send(
                        topic,
                        "__eyrie_watermark__",
                        payload,
                        headers=[(CONTROL_HEADER, WATERMARK_CONTROL)],
                        partition=partition,
                    )
            stats.watermarks += 1
            marked, last_mark = ts, time.monotonic()

        async def wait_until(due: float) -> None:
            # In heartbeats: a pause of the log must not look like a dead replayer.
            while (left := due - time.monotonic()) > 0:
                if time.monotonic() - last_mark >= heartbeat:
                    await watermark(marked)
                await asyncio.sleep(min(left, last_mark + heartbeat - time.monotonic()))

        async def end() -> None:
            await watermark(math.inf)
            await client.flush()
            stats.ended = True

        try:
            await watermark(-1.0)
            first_ts: float | None = None
            last_ts = -1.0
            for event in read_events(path):
                first_ts = event.ts if first_ts is None else first_ts
                if speed is not None:
                    due = started + (event.ts - first_ts) / speed
                    if due > time.monotonic():
                        if event.ts > last_ts and marked < last_ts:
                            await watermark(last_ts)  # about to wait: let placement see everything so far
                        await wait_until(due)
                if rate is not None:
                    await wait_until(started + stats.events / rate)
                since = time.monotonic() - last_mark
                if event.ts > last_ts and marked < last_ts and since >= watermark_every_s:
                    await watermark(last_ts)
                elif since >= heartbeat:
                    await watermark(marked)  # a long run of events of one time: still alive
                last_ts = max(last_ts, event.ts)
                headers = replay_headers(event.ts, event.line)
                await client.send(event.topic, event.key, _payload(event.value), headers=headers)
                if event.topic == "pod-requests" and event.key is not None:
                    stats.published_at.setdefault(event.key, time.time())
                stats.events += 1
                if on_event is not None:
                    on_event()
        except BaseException:
            # Cancelled (Ctrl-C) or failing: what was sent stays, and placement must stop holding live input.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(end(), END_TIMEOUT_S)
            raise
        await end()
    stats.seconds = time.monotonic() - started
    return stats


def write_decisions(decisions: list[Decision], stream: IO[str]) -> None:
    """One JSON object per pod and line, in the order given (`latest_decisions`' decision order, as
    `eyrie decisions` prints them)."""
    for decision in decisions:
        stream.write(orjson.dumps(decision.to_json()).decode())
        stream.write("\n")
