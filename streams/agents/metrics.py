"""The metrics agent: samples → windows and portraits (`MetricsCore`) → summaries for placement.

Raw samples never reach placement: only summaries do, at most one per node per `summary_interval` of
event time or on a > 5 % move. Portrait accumulators live in two tables (node, workload), written when a
summary goes out, so a restarted or rebalanced worker resumes each key's portrait from its last summary.
Replay watermarks are passed on after the summaries of the samples before them.

A live sample (no replay header) dated more than an hour past this worker's clock is a dead letter
(`streams.core.ingress.future_error`). Replayed samples keep their log's times, as offline.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import faust

from schemas.codec import encode
from schemas.events import DeadLetter, MetricSample
from streams.agents.common import bytes_table, decode_messages, envelope_of, send_dead_letter, send_envelopes
from streams.batching import Breather, take_batches
from streams.core.ingress import future_error, is_replayed, is_watermark
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind
from streams.records import dead_letter

__all__ = ["register"]

log = logging.getLogger(__name__)

BATCH = 5000
WITHIN_S = 0.01


def register(app: faust.App, topics: Any) -> None:
    settings = topics.settings

    node_states = bytes_table(app, "metrics-nodes", settings.partitions)
    workload_states = bytes_table(app, "metrics-workloads", settings.partitions)
    core = MetricsCore(summary_interval=settings.summary_interval)
    known: set[str] = set()

    def restore(sample: MetricSample) -> None:
        if sample.pod is None:
            if sample.node not in known:
                known.add(sample.node)
                data = node_states.get(sample.node)
                if data is not None:
                    core.restore_node(sample.node, data)
        else:
            key = sample.workload or sample.pod
            if "w/" + key not in known:
                known.add("w/" + key)
                data = workload_states.get(key)
                if data is not None:
                    core.restore_workload(key, data)

    async def ingest(samples: list[MetricSample], partition: int) -> None:
        if not samples:
            return
        source = f"metrics/{partition}"
        envelopes = []
        try:
            summaries = core.ingest(samples)
        except Exception as exc:  # a bug must cost these samples, not the agent: each is accounted for
            log.exception("the metrics core failed on %d samples of %s", len(samples), source)
            error = f"internal error in the metrics core: {type(exc).__name__}: {exc}"
            for sample in samples:
                letter = dead_letter(settings.topic("metrics"), partition, None, None, encode(sample), error)
                await send_dead_letter(topics, letter)
            samples.clear()
            return
        # A key's state is written once per batch, however many summaries it made: the state is the core's
        # after the whole batch, and each write is a changelog record of a few kilobytes.
        nodes: dict[str, None] = {}
        workloads: dict[str, None] = {}
        for summary in summaries:
            if isinstance(summary, NodeSummary):
                nodes[summary.node] = None
                envelopes.append(Envelope(Kind.SUMMARY, summary.ts, summary, source))
            else:
                workloads[summary.workload] = None
                envelopes.append(Envelope(Kind.WORKLOAD, summary.ts, summary, source))
        for node in nodes:
            state = core.node_state(node)
            if state is not None:
                node_states[node] = state
        for workload in workloads:
            state = core.workload_state(workload)
            if state is not None:
                workload_states[workload] = state
        for index, reason in (await send_envelopes(topics, envelopes)).items():  # never, in fact
            log.error("a summary of %s was not sent: %s", envelopes[index].source, reason)
        samples.clear()

    @app.agent(topics.metrics, name="metrics")
    async def metrics(stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, WITHIN_S):
            pending: dict[int, list[MetricSample]] = {}
            clock = time.time()
            for event in events:
                await breathe()
                message = event.message
                if is_watermark(message.headers):
                    # Everything of this partition before the watermark must be summarised first.
                    await ingest(pending.setdefault(message.partition, []), message.partition)
                    mark = envelope_of(topics, message)
                    if isinstance(mark, Envelope):
                        await send_envelopes(topics, [mark])
                    elif mark is not None:
                        await send_dead_letter(topics, mark)
                    continue
                batch = pending.setdefault(message.partition, [])
                live = not is_replayed(message.headers)
                try:
                    decoded_all = decode_messages(topics, message)
                except Exception as exc:  # a bug must cost one record, not the agent
                    log.exception(
                        "decoding failed at %s/%d@%d", message.topic, message.partition, message.offset
                    )
                    reason = f"internal error in the metrics agent: {type(exc).__name__}: {exc}"
                    await send_dead_letter(topics, _letter(message, message.value, reason))
                    continue
                for decoded in decoded_all:
                    if decoded.dead_letter is not None:
                        await send_dead_letter(topics, decoded.dead_letter)
                        continue
                    sample: MetricSample = decoded.value
                    late = future_error(sample.ts, clock) if live else None
                    if late is not None:
                        await send_dead_letter(topics, _letter(message, encode(sample), late))
                        continue
                    try:
                        restore(sample)
                    except Exception:  # a state this worker cannot read: the key starts afresh
                        log.exception("cannot restore the metrics state of %r", sample.node)
                    batch.append(sample)
            for partition, samples in pending.items():
                await ingest(samples, partition)


def _letter(message: Any, raw: bytes | None, error: str) -> DeadLetter:
    return dead_letter(message.topic, message.partition, message.offset, message.key, raw, error)
