"""The metrics agent: samples → windows and portraits (`MetricsCore`) → summaries for placement.

Raw samples never reach placement: only summaries do, at most one per node per `summary_interval` of
event time or on a > 5 % move. Portrait accumulators live in two tables (node, workload), written when a
summary goes out, so a restarted or rebalanced worker resumes each key's portrait from its last summary.
Replay watermarks are passed on after the summaries of the samples before them.
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.events import MetricSample
from streams.agents.common import bytes_table, decode_messages, envelope_of, send_dead_letter, send_envelopes
from streams.core.ingress import is_watermark
from streams.core.metrics import MetricsCore, NodeSummary
from streams.core.sequencer import Envelope, Kind

__all__ = ["register"]

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

    async def ingest(samples: list[MetricSample], source: str) -> None:
        if not samples:
            return
        envelopes = []
        for summary in core.ingest(samples):
            if isinstance(summary, NodeSummary):
                state = core.node_state(summary.node)
                if state is not None:
                    node_states[summary.node] = state
                envelopes.append(Envelope(Kind.SUMMARY, summary.ts, summary, source))
            else:
                state = core.workload_state(summary.workload)
                if state is not None:
                    workload_states[summary.workload] = state
                envelopes.append(Envelope(Kind.WORKLOAD, summary.ts, summary, source))
        await send_envelopes(topics, envelopes)
        samples.clear()

    @app.agent(topics.metrics, name="metrics")
    async def metrics(stream: Any) -> None:
        async for events in stream.take_events(BATCH, within=WITHIN_S):
            pending: dict[int, list[MetricSample]] = {}
            for event in events:
                message = event.message
                source = f"metrics/{message.partition}"
                if is_watermark(message.headers):
                    # Everything of this partition before the watermark must be summarised first.
                    await ingest(pending.setdefault(message.partition, []), source)
                    mark = envelope_of(topics, message)
                    if isinstance(mark, Envelope):
                        await send_envelopes(topics, [mark])
                    elif mark is not None:
                        await send_dead_letter(topics, mark)
                    continue
                batch = pending.setdefault(message.partition, [])
                for decoded in decode_messages(topics, message):
                    if decoded.dead_letter is not None:
                        await send_dead_letter(topics, decoded.dead_letter)
                        continue
                    restore(decoded.value)
                    batch.append(decoded.value)
            for partition, samples in pending.items():
                await ingest(samples, f"metrics/{partition}")
