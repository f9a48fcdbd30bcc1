"""Replaying a recorded event log: live through Kafka, or offline through the same cores in process.

Both give every input the same place in the order, ``(ts, line)``: offline by applying the log in that
order, live by stamping each record with its ts and line (headers) and sending watermarks, so the placement
agent can restore that order whatever way the topics interleave on the way (see `streams.core.sequencer`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
from pydantic import BaseModel

from policies.framework.profile import ProfileSet
from schemas.codec import encode
from schemas.eventlog import LogEvent, read_events
from schemas.events import Binding, BindingResult, MetricSample
from streams.client import Decision, EyrieClient, latest_decisions
from streams.core.ingress import (
    CONTROL_HEADER,
    WATERMARK_CONTROL,
    config_envelope,
    envelope_from_model,
    replay_headers,
)
from streams.core.ledger import Ledger
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind, Output, Refused, Release, Shard, Watermark
from streams.settings import Settings

__all__ = ["OfflineResult", "ReplayStats", "replay_live", "replay_offline", "write_decisions"]

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
    it afterwards, e.g. at its placer's cluster summaries and divisions."""
    started = time.perf_counter()
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
            elif isinstance(output, Refused):
                refused.append(output.reason)

    samples: list[MetricSample] = []
    refused: list[str] = []

    def summarise() -> None:
        for summary in metrics.ingest(samples):
            kind = Kind.SUMMARY if isinstance(summary, NodeSummary) else Kind.WORKLOAD
            handle(shard.feed(Envelope(kind, summary.ts, summary, _OFFLINE)))
        samples.clear()

    mark(session.ts)
    last_ts, count = -1.0, 0
    for event in read_events(path):
        count += 1
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
            envelope = _envelope(event)
            if envelope is not None:
                if envelope.kind is Kind.NODE:
                    ledger.apply_node_event(envelope.value, event.ts)
                handle(shard.feed(envelope))
        if on_event is not None:
            on_event()
    summarise()
    mark(math.inf)
    return OfflineResult(
        latest_decisions(bindings, results),
        bindings,
        results,
        count,
        time.perf_counter() - started,
        dict(shard.counters),
        refused,
    )


def _envelope(event: LogEvent) -> Envelope | None:
    if event.topic == "config":
        return config_envelope(event.key or "", event.value, event.ts, _OFFLINE)
    return envelope_from_model(event.value, event.ts, _OFFLINE, float(event.line))


@dataclass(slots=True)
class ReplayStats:
    events: int = 0
    watermarks: int = 0
    seconds: float = 0.0
    published_at: dict[str, float] = field(default_factory=dict)
    """Wall-clock time each pod request was handed to the producer (for latency figures)."""


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
) -> ReplayStats:
    """Publish the log. `speed`: log seconds per wall second (None: as fast as possible); `rate`: at most
    this many events per second."""
    stats = ReplayStats()
    # Everything a replay publishes to, and so everything its watermarks must cover.
    partitions = {"metrics": settings.partitions, "node-events": 1, "pod-requests": settings.partitions}
    session = session or f"{Path(path).name}-{time.time_ns()}"
    started = time.monotonic()
    async with EyrieClient(settings) as client:

        async def watermark(ts: float) -> None:
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

        await watermark(-1.0)
        first_ts: float | None = None
        last_ts, last_mark = -1.0, time.monotonic()
        for event in read_events(path):
            first_ts = event.ts if first_ts is None else first_ts
            if speed is not None:
                due = started + (event.ts - first_ts) / speed
                if due > time.monotonic():
                    if event.ts > last_ts:
                        await watermark(last_ts)  # about to wait: let placement see everything so far
                        last_mark = time.monotonic()
                    await asyncio.sleep(due - time.monotonic())
            if rate is not None:
                due = started + stats.events / rate
                if due > time.monotonic():
                    await asyncio.sleep(due - time.monotonic())
            if event.ts > last_ts and time.monotonic() - last_mark >= watermark_every_s:
                await watermark(last_ts)
                last_mark = time.monotonic()
            last_ts = max(last_ts, event.ts)
            await client.send(
                event.topic, event.key, _payload(event.value), headers=replay_headers(event.ts, event.line)
            )
            if event.topic == "pod-requests" and event.key is not None:
                stats.published_at.setdefault(event.key, time.time())
            stats.events += 1
            if on_event is not None:
                on_event()
        await watermark(math.inf)
        await client.flush()
    stats.seconds = time.monotonic() - started
    return stats


def write_decisions(decisions: list[Decision], stream: IO[str]) -> None:
    """One JSON object per pod and line, by uid (what `eyrie decisions` prints)."""
    for decision in sorted(decisions, key=lambda d: d.uid):
        stream.write(orjson.dumps(decision.to_json()).decode())
        stream.write("\n")
