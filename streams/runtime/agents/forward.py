"""Forwarders: pod requests, node events and profiles into the sequencer topic. (Binding results reach it
from the applier directly.)

They validate (a bad record becomes a dead letter here, once) and stamp event time and log position, so
the placement agent receives only well-formed envelopes, all of a shard in one partition. A pod bound by
someone else (`PodBound`, on pod-requests) must also be keyed by its uid and be one pod; it goes to the
shard its pod's labels name, as a pod request does (`shards_for`).
"""

from __future__ import annotations

import logging
from typing import Any

from schemas.events import DeadLetter
from streams.core.sequencer import Envelope
from streams.faust_overrides.batching import take_batches
from streams.faust_overrides.fetching import EyrieApp
from streams.runtime.agents.common import (
    BATCH,
    Topics,
    batch_window_s,
    envelope_of,
    letter_for,
    send_dead_letter,
    send_envelopes,
)

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(app: EyrieApp, topics: Topics) -> None:
    async def forward(stream: Any) -> None:
        async for events in take_batches(stream, BATCH, batch_window_s(topics.settings)):
            await forward_batch(topics, [event.message for event in events])

    for name, topic in (
        ("forward-pod-requests", topics.pod_requests),
        ("forward-node-events", topics.node_events),
        ("forward-config", topics.config),
    ):
        app.agent(topic, name=name)(forward)


async def forward_batch(topics: Topics, messages: list[Any]) -> None:
    """A batch's records as envelopes on their shards' sequencer partitions; what does not make one, or
    cannot travel, as dead letters."""
    envelopes: list[Envelope] = []
    sources: list[Any] = []
    for message in messages:
        try:
            result = envelope_of(topics, message)
        except Exception as exc:  # a bug must cost one record, not the agent
            log.exception("forwarding failed at %s/%d@%d", message.topic, message.partition, message.offset)
            result = letter_for(message, f"internal error in the forwarder: {type(exc).__name__}: {exc}")
        if isinstance(result, DeadLetter):
            await send_dead_letter(topics, result)
        elif result is not None:
            envelopes.append(result)
            sources.append(message)
    for index, reason in sorted((await send_envelopes(topics, envelopes)).items()):
        await send_dead_letter(topics, letter_for(sources[index], f"valid, but {reason}"))
