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

from schemas.codec import encode
from schemas.events import MetricSample
from streams.core.decoders import dead_letter
from streams.core.ingress import future_error, is_replayed, is_watermark
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind
from streams.faust_overrides.batching import Breather, take_batches
from streams.faust_overrides.fetching import EyrieApp
from streams.runtime.agents.common import (
    Topics,
    bytes_table,
    decode_messages,
    envelope_of,
    letter_for,
    send_dead_letter,
    send_envelopes,
)

__all__ = ["MetricsAgent", "register"]

log = logging.getLogger(__name__)

BATCH = 5000
WITHIN_S = 0.01


def register(app: EyrieApp, topics: Topics) -> None:
    agent = MetricsAgent(app, topics)
    app.agent(topics.metrics, name="metrics")(agent.run)


class MetricsAgent:
    """The metrics core of this worker, with its portraits kept in two tables."""

    def __init__(self, app: EyrieApp, topics: Topics) -> None:
        settings = topics.settings
        self.topics = topics
        self.node_states = bytes_table(app, "metrics-nodes", settings.partitions)
        self.workload_states = bytes_table(app, "metrics-workloads", settings.partitions)
        self.core = MetricsCore(summary_interval=settings.summary_interval)
        self.known: set[str] = set()
        """Keys whose state was looked up in the tables already (workloads prefixed ``w/``)."""

    async def run(self, stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, WITHIN_S):
            pending: dict[int, list[MetricSample]] = {}
            clock = time.time()
            for event in events:
                await breathe()
                message = event.message
                if is_watermark(message.headers):
                    # Everything of this partition before the watermark must be summarised first.
                    await self.ingest(pending.setdefault(message.partition, []), message.partition)
                    await self.pass_on(message)
                else:
                    await self.gather(message, pending.setdefault(message.partition, []), clock)
            for partition, samples in pending.items():
                await self.ingest(samples, partition)

    async def pass_on(self, watermark: Any) -> None:
        topics = self.topics
        mark = envelope_of(topics, watermark)
        if isinstance(mark, Envelope):
            await send_envelopes(topics, [mark])
        elif mark is not None:
            await send_dead_letter(topics, mark)

    async def gather(self, message: Any, batch: list[MetricSample], clock: float) -> None:
        """The samples of `message` onto `batch`, their keys' states restored (what cannot be gathered is
        dead-lettered)."""
        topics = self.topics
        live = not is_replayed(message.headers)
        try:
            decoded_all = decode_messages(topics, message)
        except Exception as exc:  # a bug must cost one record, not the agent
            log.exception("decoding failed at %s/%d@%d", message.topic, message.partition, message.offset)
            reason = f"internal error in the metrics agent: {type(exc).__name__}: {exc}"
            await send_dead_letter(topics, letter_for(message, reason))
            return
        for decoded in decoded_all:
            if decoded.dead_letter is not None:
                await send_dead_letter(topics, decoded.dead_letter)
                continue
            sample: MetricSample = decoded.value
            late = future_error(sample.ts, clock) if live else None
            if late is not None:
                await send_dead_letter(topics, letter_for(message, late, encode(sample)))
                continue
            try:
                self.restore(sample)
            except Exception:  # a state this worker cannot read: the key starts afresh
                log.exception("cannot restore the metrics state of %r", sample.node)
            batch.append(sample)

    def restore(self, sample: MetricSample) -> None:
        """The portrait of the sample's key, from its table, the first time this worker sees the key."""
        known, core = self.known, self.core
        if sample.pod is None:
            if sample.node not in known:
                known.add(sample.node)
                data = self.node_states.get(sample.node)
                if data is not None:
                    core.restore_node(sample.node, data)
        else:
            key = sample.workload or sample.pod
            if "w/" + key not in known:
                known.add("w/" + key)
                data = self.workload_states.get(key)
                if data is not None:
                    core.restore_workload(key, data)

    async def ingest(self, samples: list[MetricSample], partition: int) -> None:
        """`samples` through the core (then cleared): their summaries sent, their keys' states written."""
        if not samples:
            return
        topics, core = self.topics, self.core
        source = f"metrics/{partition}"
        envelopes = []
        try:
            summaries = core.ingest(samples)
        except Exception as exc:  # a bug must cost these samples, not the agent: each is accounted for
            log.exception("the metrics core failed on %d samples of %s", len(samples), source)
            error = f"internal error in the metrics core: {type(exc).__name__}: {exc}"
            topic = topics.settings.topic("metrics")
            for sample in samples:
                letter = dead_letter(topic, partition, None, None, encode(sample), error)
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
                self.node_states[node] = state
        for workload in workloads:
            state = core.workload_state(workload)
            if state is not None:
                self.workload_states[workload] = state
        for index, reason in (await send_envelopes(topics, envelopes)).items():  # never, in fact
            log.error("a summary of %s was not sent: %s", envelopes[index].source, reason)
        samples.clear()
