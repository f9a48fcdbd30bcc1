"""Forwarders: pod requests, node events, binding results and profiles into the sequencer topic.

They validate (a bad record becomes a dead letter here, once) and stamp event time and log position, so
the placement agent receives only well-formed envelopes, all of a shard in one partition.
"""

from __future__ import annotations

from typing import Any

import faust

from schemas.events import DeadLetter
from streams.agents.common import BATCH, WITHIN_S, envelope_of, send_dead_letter, send_envelopes

__all__ = ["register"]


def register(app: faust.App, topics: Any) -> None:
    async def forward(stream: Any) -> None:
        async for events in stream.take_events(BATCH, within=WITHIN_S):
            envelopes = []
            for event in events:
                result = envelope_of(topics, event.message)
                if isinstance(result, DeadLetter):
                    await send_dead_letter(topics, result)
                elif result is not None:
                    envelopes.append(result)
            await send_envelopes(topics, envelopes)

    for name, topic in (
        ("forward-pod-requests", topics.pod_requests),
        ("forward-node-events", topics.node_events),
        ("forward-binding-results", topics.binding_results),
        ("forward-config", topics.config),
    ):
        app.agent(topic, name=name)(forward)
