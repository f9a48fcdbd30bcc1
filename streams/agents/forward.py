"""Forwarders: pod requests, node events, binding results and profiles into the sequencer topic.

They validate (a bad record becomes a dead letter here, once) and stamp event time and log position, so
the placement agent receives only well-formed envelopes, all of a shard in one partition.
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.events import DeadLetter
from streams.agents.common import BATCH, WITHIN_S, send_dead_letter, send_envelope
from streams.core.ingress import envelope_from_record

__all__ = ["register"]


def register(app: faust.App, topics: Any) -> None:
    settings = topics.settings
    prefix = len(settings.topic_prefix)

    async def forward(stream: Any) -> None:
        async for events in stream.take_events(BATCH, within=WITHIN_S):
            for event in events:
                message = event.message
                result = envelope_from_record(
                    message.topic[prefix:],
                    message.partition,
                    message.offset,
                    message.key,
                    message.value,
                    message.headers,
                    full_topic=message.topic,
                )
                if isinstance(result, DeadLetter):
                    await send_dead_letter(topics, result)
                elif result is not None:
                    await send_envelope(topics, result)

    for name, topic in (
        ("forward-pod-requests", topics.pod_requests),
        ("forward-node-events", topics.node_events),
        ("forward-binding-results", topics.binding_results),
        ("forward-config", topics.config),
    ):
        app.agent(topic, name=name)(forward)
