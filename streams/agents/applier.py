"""The applier: bindings in, `BindingResult`s out, against its own ledger (two Faust tables).

It is the only writer of the ledger, so "never over allocatable" is checked in one place; the tables'
changelogs carry it across restarts, and `Ledger.apply` is idempotent per uid, so bindings redelivered after
a crash are answered again without being booked twice. Invalid pod requests and node events are not
dead-lettered here: the workers' forwarders already did that for the same records. Deletions come from
placement, as releases on the bindings topic, so they can never overtake the binding they undo.
"""

from __future__ import annotations

import time
from typing import Any

import faust

from schemas.codec import encode
from schemas.events import Binding
from schemas.node import NodeEvent
from schemas.pod import PodDeleted
from streams.agents.common import BATCH, WITHIN_S, bytes_table, decode_message, send, send_dead_letter
from streams.core.ledger import Ledger

__all__ = ["register"]


def register(app: faust.App, topics: Any) -> None:
    settings = topics.settings

    ledger = Ledger(
        bytes_table(app, "ledger-nodes", settings.partitions),
        bytes_table(app, "ledger-pods", settings.partitions),
    )

    @app.agent(topics.bindings, name="applier")
    async def apply_bindings(stream: Any) -> None:
        async for events in stream.take_events(BATCH, within=WITHIN_S):
            for event in events:
                message = event.message
                decoded = decode_message(topics, message)
                if decoded.dead_letter is not None:
                    await send_dead_letter(topics, decoded.dead_letter)
                    continue
                if isinstance(decoded.value, PodDeleted):
                    ledger.delete(decoded.value.uid, time.time())  # placement let the pod go
                    continue
                binding: Binding = decoded.value
                result = ledger.apply(binding, time.time())
                await send(topics, "binding-results", binding.uid.encode(), encode(result))

    @app.agent(topics.node_events, name="applier-nodes")
    async def node_events(stream: Any) -> None:
        async for events in stream.take_events(BATCH, within=WITHIN_S):
            for event in events:
                message = event.message
                decoded = decode_message(topics, message)
                if isinstance(decoded.value, NodeEvent):
                    ledger.apply_node_event(decoded.value, time.time())
