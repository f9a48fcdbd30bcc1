"""The applier: bindings in, `BindingResult`s out, against its own ledger (two Faust tables).

Results go to users on ``binding-results`` and to placement straight onto the sequencer (one record per
shard and batch): placement needs them to confirm or requeue its assumed pods, and the hop through a
forwarder cost every pod one more record consumed, decoded and produced.

It is the only writer of the ledger, so "never over allocatable" is checked in one place; the tables'
changelogs carry it across restarts (one record per commit or release), and `Ledger.apply` is idempotent
per uid, so bindings redelivered after a crash are answered again without being booked twice. Invalid pod
requests and node events are not dead-lettered here: the workers' forwarders already did that for the same
records. Deletions come from placement, as releases on the bindings topic, so they can never overtake the
binding they undo.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import faust

from schemas.codec import encode
from schemas.events import Binding
from schemas.node import NodeEvent
from schemas.pod import PodDeleted
from streams.agents.common import (
    BATCH,
    batch_window_s,
    bytes_table,
    decode_message,
    send,
    send_dead_letter,
    send_envelopes,
)
from streams.batching import Breather, take_batches
from streams.core.ingress import envelope_from_model
from streams.core.ledger import Ledger
from streams.core.sequencer import Envelope

__all__ = ["register"]

log = logging.getLogger(__name__)


def register(app: faust.App, topics: Any) -> None:
    settings = topics.settings
    observe = topics.observe

    ledger = Ledger(
        bytes_table(app, "ledger-nodes", settings.partitions),
        bytes_table(app, "ledger-pods", settings.partitions),
    )

    recounted = False

    @app.on_partitions_assigned.connect  # type: ignore[arg-type]  # mode types an async receiver oddly
    async def recount_after_recovery(sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        nonlocal recounted
        recounted = False  # tables of newly assigned partitions are recovered before the agent resumes

    @app.agent(topics.bindings, name="applier")
    async def apply_bindings(stream: Any) -> None:
        nonlocal recounted
        breathe = Breather()
        async for events in take_batches(stream, BATCH, batch_window_s(topics.settings)):
            if not recounted:
                # Allocations live in memory, summed from the recovered pod entries (`streams.core.ledger`).
                log.info("ledger recovered: %d pods bound", ledger.recount())
                recounted = True
            for_placement: list[Envelope] = []
            for event in events:
                await breathe()
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
                (observe.by_status.get(result.status) or observe.results.labels(result.status)).inc()
                if result.status == "conflict":
                    observe.conflicts.inc()
                await send(topics, "binding-results", binding.uid.encode(), encode(result))
                # The source names the binding record the result answers (what a dead letter would cite).
                source = f"bindings/{message.partition}"
                envelope = envelope_from_model(result, result.at, source)
                if envelope is not None:
                    for_placement.append(envelope)
            for index, reason in (await send_envelopes(topics, for_placement)).items():
                # The result is on binding-results all the same; placement keeps the pod assumed.
                log.warning("result for %s not sent to placement: %s", for_placement[index].value.uid, reason)
            if settings.deleted_retention_s > 0:
                ledger.forget_deleted(time.time() - settings.deleted_retention_s)

    @app.agent(topics.node_events, name="applier-nodes")
    async def node_events(stream: Any) -> None:
        async for events in take_batches(stream, BATCH, batch_window_s(topics.settings)):
            for event in events:
                message = event.message
                decoded = decode_message(topics, message)
                if isinstance(decoded.value, NodeEvent):
                    ledger.apply_node_event(decoded.value, time.time())
