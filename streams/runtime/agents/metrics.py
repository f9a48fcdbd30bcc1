"""The metrics agent: samples → windows and portraits (`MetricsCore`) → summaries for placement.

Raw samples never reach placement: only summaries do, at most one per node per `summary_interval` of
event time or on a > 5 % move. Portrait accumulators live in two tables (node, workload), written when a
summary goes out, so a restarted or rebalanced worker resumes each key's portrait from its last summary.
Replay watermarks are passed on after the summaries of the samples before them.

The tables hold live keys only (`MetricsTables`): a key the core expires (`metrics_state_ttl_s` of event
time without a sample: a deleted pod or node) is deleted from its table, a tombstone in the changelog, and
entries the core never loaded (restored by Faust, not sampled since) are swept by the clock in their
header, so recovery reads state, not history. Each workload forgotten either way is also said on the
sequencer (a `WorkloadSummary` with ``expired``), so placement forgets its portrait at that same point in
its input, live, replayed or restored from a checkpoint.

A live sample (no replay header) dated more than an hour past this worker's clock is a dead letter
(`streams.core.ingress.future_error`). Replayed samples keep their log's times, as offline.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import MutableMapping, Sequence
from typing import Any

from schemas.codec import encode
from schemas.events import MetricSample
from streams.core.decoders import dead_letter
from streams.core.ingress import future_error, is_replayed, is_watermark
from streams.core.metrics import MetricsCore, NodeSummary, Summary, WorkloadSummary, state_clock
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

__all__ = ["NODES_TABLE", "SWEEP_FRACTION", "WORKLOADS_TABLE", "MetricsAgent", "MetricsTables", "register"]

log = logging.getLogger(__name__)

BATCH = 5000
WITHIN_S = 0.01
NODES_TABLE = "metrics-nodes"
WORKLOADS_TABLE = "metrics-workloads"
SWEEP_FRACTION = 0.25
"""Entries the core never loaded are swept when its clock has moved this fraction of the ttl since the last
sweep (and on the first batch), at one pass over the tables per period. A held key's entry is rewritten
once its clock is this fraction of the ttl past the entry's (not only with a summary), so an entry the
ttl and this fraction behind is one whose key expired: it is deleted at most two fractions late."""


class MetricsTables:
    """A metrics core and the two state tables behind it, kept to the same keys: what the core holds is
    restored from them on first sight and written back after each batch; what it expires, or what is in
    them and has fallen as far behind, is deleted. Pure (the tables are any mappings), so a test feeds it
    as the agent does."""

    def __init__(
        self,
        core: MetricsCore,
        nodes: MutableMapping[str, bytes],
        workloads: MutableMapping[str, bytes],
    ) -> None:
        self.core, self.nodes, self.workloads = core, nodes, workloads
        self.swept_at: float | None = None
        """The core's clock at the last sweep (None: not yet, so the next batch sweeps first)."""
        self.expiries: list[WorkloadSummary] = []
        """Expiries of workloads the sweep deleted (or the clock it raised expired), for placement: the
        agent sends them (`take_expiries`) as it sends the core's own."""

    def restore(self, sample: MetricSample) -> None:
        """The state of the sample's key, from its table, when the core does not hold the key."""
        core = self.core
        if sample.pod is None:
            if not core.has_node(sample.node):
                data = self.nodes.get(sample.node)
                if data is not None:
                    core.restore_node(sample.node, data)
        else:
            key = sample.workload or sample.pod
            if not core.has_workload(key):
                data = self.workloads.get(key)
                if data is not None:
                    core.restore_workload(key, data)

    def sweep_if_due(self) -> int:
        """On the first call, the core's clock raised to the newest state in the tables (what it had when
        they were written); then, once per `SWEEP_FRACTION` of the ttl, the entries the core does not hold
        that are the ttl behind it deleted. Returns how many were."""
        core = self.core
        ttl = core.state_ttl
        if ttl == math.inf:
            return 0
        first = self.swept_at is None
        if not first and self.swept_at is not None and core.clock < self.swept_at + SWEEP_FRACTION * ttl:
            return 0
        clocks: list[tuple[MutableMapping[str, bytes], str, float]] = []
        for table, held in ((self.nodes, core.has_node), (self.workloads, core.has_workload)):
            for key, data in table.items():
                clock = state_clock(data)
                if clock is not None and not held(key):
                    clocks.append((table, key, clock))
        if first and clocks:
            self.expiries += core.advance_clock(max(clock for _, _, clock in clocks))
        self.swept_at = core.clock
        limit = core.clock - ttl * (1.0 + SWEEP_FRACTION)
        stale = [(table, key, clock) for table, key, clock in clocks if clock <= limit]
        for table, key, clock in stale:
            del table[key]
            if table is self.workloads:
                # The core that held it is gone (a restart or a rebalance) and would have expired it:
                # placement still holds its portrait unless told.
                self.expiries.append(WorkloadSummary(key, core.clock, None, clock))
        return len(stale)

    def take_expiries(self) -> list[WorkloadSummary]:
        taken, self.expiries = self.expiries, []
        return taken

    def store(self, summaries: Sequence[Summary]) -> None:
        """After a batch: expired keys deleted (unless back since), and each key that sent a summary, or
        whose entry fell `SWEEP_FRACTION` of the ttl behind it, written once (its state after the whole
        batch; each write is a changelog record of a few kilobytes)."""
        core = self.core
        expired_nodes, expired_workloads = core.take_expired()
        for name in expired_nodes:
            if not core.has_node(name):
                self.nodes.pop(name, None)
        for name in expired_workloads:
            if not core.has_workload(name):
                self.workloads.pop(name, None)
        nodes: dict[str, None] = {}
        workloads: dict[str, None] = {}
        if core.state_ttl < math.inf:
            behind_nodes, behind_workloads = core.states_behind(SWEEP_FRACTION * core.state_ttl)
            nodes.update(dict.fromkeys(behind_nodes))
            workloads.update(dict.fromkeys(behind_workloads))
        for summary in summaries:
            if isinstance(summary, NodeSummary):
                nodes[summary.node] = None
            else:
                workloads[summary.workload] = None
        for node in nodes:
            state = core.node_state(node)
            if state is not None:
                self.nodes[node] = state
        for workload in workloads:
            state = core.workload_state(workload)
            if state is not None:
                self.workloads[workload] = state


def register(app: EyrieApp, topics: Topics) -> None:
    agent = MetricsAgent(app, topics)
    app.agent(topics.metrics, name="metrics")(agent.run)


class MetricsAgent:
    """The metrics core of this worker, with its portraits kept in two tables."""

    def __init__(self, app: EyrieApp, topics: Topics) -> None:
        settings = topics.settings
        self.topics = topics
        self.core = MetricsCore(
            summary_interval=settings.summary_interval,
            state_ttl=settings.metrics_state_ttl_s or math.inf,
        )
        self.tables = MetricsTables(
            self.core,
            bytes_table(app, NODES_TABLE, settings.partitions),
            bytes_table(app, WORKLOADS_TABLE, settings.partitions),
        )

    async def run(self, stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, WITHIN_S):
            swept = self.tables.sweep_if_due()
            if swept:
                log.info("deleted %d metrics states not sampled within the ttl", swept)
            expiries = self.tables.take_expiries()
            if expiries:
                await self.send_summaries(expiries, "metrics/sweep")
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
                self.tables.restore(sample)
            except Exception:  # a state this worker cannot read: the key starts afresh
                log.exception("cannot restore the metrics state of %r", sample.node)
            batch.append(sample)

    async def ingest(self, samples: list[MetricSample], partition: int) -> None:
        """`samples` through the core (then cleared): their summaries sent, their keys' states written."""
        if not samples:
            return
        topics, core = self.topics, self.core
        source = f"metrics/{partition}"
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
        self.tables.store(summaries)
        await self.send_summaries(summaries, source)
        samples.clear()

    async def send_summaries(self, summaries: Sequence[Summary], source: str) -> None:
        """Summaries (workload expiries among them) as sequencer envelopes, in order."""
        envelopes = []
        for summary in summaries:
            kind = Kind.SUMMARY if isinstance(summary, NodeSummary) else Kind.WORKLOAD
            envelopes.append(Envelope(kind, summary.ts, summary, source))
        for index, reason in (await send_envelopes(self.topics, envelopes)).items():  # never, in fact
            log.error("a summary of %s was not sent: %s", envelopes[index].source, reason)
