"""Forwarders: pod requests, node events and profiles into the sequencer topic. (Binding results reach it
from the applier directly.)

They validate (a bad record becomes a dead letter here, once) and stamp event time and log position, so
the placement agent receives only well-formed envelopes, all of a shard in one partition.
"""

from __future__ import annotations

import logging
from typing import Any

import faust

from schemas.events import DeadLetter
from streams.agents.common import BATCH, batch_window_s, envelope_of, send_dead_letter, send_envelopes
from streams.batching import take_batches
from streams.core.sequencer import Envelope
from streams.records import dead_letter

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(app: faust.App, topics: Any) -> None:
    async def forward(stream: Any) -> None:
        async for events in take_batches(stream, BATCH, batch_window_s(topics.settings)):
            envelopes: list[Envelope] = []
            messages: list[Any] = []
            for event in events:
                message = event.message
                try:
                    result = envelope_of(topics, message)
                except Exception as exc:  # a bug must cost one record, not the agent
                    log.exception(
                        "forwarding failed at %s/%d@%d", message.topic, message.partition, message.offset
                    )
                    result = _letter(message, f"internal error in the forwarder: {type(exc).__name__}: {exc}")
                if isinstance(result, DeadLetter):
                    await send_dead_letter(topics, result)
                elif result is not None:
                    envelopes.append(result)
                    messages.append(message)
            for index, reason in sorted((await send_envelopes(topics, envelopes)).items()):
                await send_dead_letter(topics, _letter(messages[index], f"valid, but {reason}"))

    for name, topic in (
        ("forward-pod-requests", topics.pod_requests),
        ("forward-node-events", topics.node_events),
        ("forward-config", topics.config),
    ):
        app.agent(topic, name=name)(forward)


def _letter(message: Any, error: str) -> DeadLetter:
    return dead_letter(message.topic, message.partition, message.offset, message.key, message.value, error)
