"""The applier: bindings in, `BindingResult`s out, against its own ledger (two Faust tables).

Results go to users on ``binding-results`` at once, and to placement straight onto the sequencer: placement
needs them to confirm or requeue its assumed pods, and the hop through a forwarder cost every pod one more
record consumed, decoded and produced. A conflict or a refusal goes to placement with its batch (the pod
is to be placed again); an applied pod only moves from assumed to bound there, which changes no decision,
so those results are held for up to `RESULTS_LINGER_S` and travel many to a sequencer record
(`ForPlacement`).

It is the only writer of the ledger, so "never over allocatable" is checked in one place; the tables'
changelogs carry it across restarts (one record per commit or release), and `Ledger.apply` is idempotent
per uid, so bindings redelivered after a crash are answered again without being booked twice. A deleted
pod's entry leaves the tables once the consumer has committed its deletion and `deleted_settle_s` passed
(`Ledger.settle`): the tables, and what a restarted applier reads back, follow the live pods rather than
every pod deleted within `deleted_retention_s`, which the ledger then remembers in memory only. Invalid pod
requests and node events are not dead-lettered here: the workers' forwarders already did that for the same
records. Deletions come from placement, as releases on the bindings topic, so they can never overtake the
binding they undo. Node events come on the applier's own agent, which a binding can overtake: before it
answers a conflict, the applier reads node-events to its end itself (`streams.runtime.node_feed`).

With ``apply_target: kubernetes`` a binding the ledger commits is then bound through the API server
(`streams.kube.binder`), whose answer is the result (a refusal undoes the booking), and placement's
unschedulable verdicts, read back from ``binding-results``, become kube-scheduler's events and conditions.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from typing import Any

from aiokafka.errors import KafkaError

from schemas.codec import encode
from schemas.events import Binding, BindingResult
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted
from streams.core.ingress import envelope_from_model
from streams.core.ledger import NODES_TABLE, PODS_TABLE, Ledger
from streams.core.sequencer import Envelope
from streams.faust_overrides.batching import Breather, take_batches
from streams.faust_overrides.fetching import EyrieApp
from streams.kube.api import KubeApi
from streams.kube.binder import Binder, resolve_kube_config
from streams.runtime.agents.common import (
    BATCH,
    Topics,
    batch_window_s,
    bytes_table,
    decode_message,
    send,
    send_dead_letter,
    send_envelopes,
)
from streams.runtime.node_feed import NodeFeed
from streams.runtime.table_checkpoints import TableCheckpoints
from streams.settings import Settings

__all__ = ["RESULTS_LINGER_S", "ApplierAgent", "ForPlacement", "register"]

log = logging.getLogger(__name__)

RESULTS_LINGER_S = 0.1
"""The longest the applier holds an applied pod's result before sending it to placement. At 500 pods/s one
sequencer record a result was a third of what the worker consumed per pod, each a Faust event, a fetch and
a produce request through the broker; held for this long, about fifty travel together."""


class ForPlacement:
    """Results on their way to placement's sequencer partitions, in the order the applier decided them.
    They are sent `RESULTS_LINGER_S` after the first one held, at once when one of them is not "applied",
    and before the consumer commits the bindings they answer (`EyrieApp.before_commit`): a crash loses
    only results whose bindings are read and answered again."""

    def __init__(self, topics: Topics, linger_s: float = RESULTS_LINGER_S) -> None:
        self._topics = topics
        self._linger_s = linger_s
        self._held: list[Envelope] = []
        self._timer: asyncio.TimerHandle | None = None
        # The timer's send, held here: the event loop keeps only a weak reference to a task.
        self._flushing: asyncio.Task[None] | None = None
        self._sending = asyncio.Lock()  # a timer's send and an agent's must not interleave their records

    async def add(self, envelopes: Sequence[Envelope]) -> None:
        if not envelopes:
            return
        self._held.extend(envelopes)
        if len(self._held) >= BATCH or any(envelope.value.status != "applied" for envelope in envelopes):
            await self.send()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._linger_s, self._send_later)

    def _send_later(self) -> None:
        self._timer = None
        self._flushing = asyncio.ensure_future(self.send())
        self._flushing.add_done_callback(_log_failure)

    async def send(self) -> None:
        async with self._sending:
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            held, self._held = self._held, []
            for index, reason in (await send_envelopes(self._topics, held)).items():
                # The result is on binding-results all the same; placement keeps the pod assumed.
                log.warning("result for %s not sent to placement: %s", held[index].value.uid, reason)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("results not sent to placement", exc_info=task.exception())


def register(app: EyrieApp, topics: Topics) -> None:
    agent = ApplierAgent(app, topics)
    if agent.binder is not None:
        # Placement's unschedulable verdicts go to users only, on binding-results: read there.
        app.agent(topics.binding_results, name="applier-verdicts")(agent.tell_unschedulable)
        app.task(agent.binder.run)  # events and conditions, in the background; cancelled at shutdown
    app.before_commit.append(agent.for_placement.send)
    app.before_commit.append(agent.note_commit)
    app.after_commit.append(agent.settle_deleted)
    # mode types an async receiver oddly
    app.on_partitions_assigned.connect(agent.recount_after_recovery)  # type: ignore[arg-type]
    app.agent(topics.bindings, name="applier")(agent.apply_bindings)
    app.agent(topics.node_events, name="applier-nodes")(agent.apply_node_events)
    if agent.checkpoints is not None and agent.checkpoints.every_s:
        # A partition's checkpoint falls due by time, too, when no batch comes to send it with.
        app.timer(max(1.0, agent.checkpoints.every_s / 2))(agent.checkpoint_idle)


class ApplierAgent:
    """The ledger, kept by this applier's bindings and node events."""

    def __init__(self, app: EyrieApp, topics: Topics) -> None:
        partitions = topics.settings.partitions
        self.topics = topics
        self.pods = bytes_table(app, PODS_TABLE, partitions)
        nodes = bytes_table(app, NODES_TABLE, partitions)
        self.ledger = Ledger(nodes, self.pods)
        self.tables = (nodes.table, self.pods.table)
        settings = topics.settings
        self.checkpoints: TableCheckpoints | None = None
        if settings.checkpoint_every_envelopes or settings.checkpoint_every_s:
            self.checkpoints = TableCheckpoints(topics)
            for table in self.tables:
                table.checkpointer = self.checkpoints
        self.recounted = False
        self.acked_at = -math.inf
        """Every deletion the ledger made before this time is in a batch whose records are acknowledged."""
        self.committing = -math.inf
        """`acked_at` when the consumer began its latest commit."""
        self.for_placement = ForPlacement(topics)
        self.binder = _binder(topics.settings)
        self.nodes = NodeFeed(settings, app.conf.id, self.take_node_event)
        self.nodes_level = False
        """Whether the ledger has read node-events to its end since this batch of bindings was read."""

    async def recount_after_recovery(self, sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        self.recounted = False  # tables of newly assigned partitions are recovered before the agent resumes
        self.nodes.assigned()

    def batch_acked(self) -> None:
        self.acked_at = time.time()

    async def note_commit(self) -> None:
        self.committing = self.acked_at

    async def checkpoint_idle(self) -> None:
        for table in self.tables:
            await table.send_unsent_changes(idle=True)

    async def settle_deleted(self) -> None:
        """After a commit: the deletions it covers, once `deleted_settle_s` old, leave the pod table, their
        tombstones sent at once (an idle applier has no next batch to send them with). The commit alone
        covers every binding answered before a deletion; the age covers records placement sent before it to
        another bindings partition that this applier had not read yet when it committed (a pod bound by
        someone else is reported on two partitions), which a crash would otherwise deliver after the entry
        is gone. One consumer reads its bindings partitions within seconds of each other."""
        settings = self.topics.settings
        if self.ledger.settle(min(self.committing, time.time() - settings.deleted_settle_s)):
            await self.pods.table.send_unsent_changes()

    async def apply_bindings(self, stream: Any) -> None:
        settings = self.topics.settings
        ledger = self.ledger
        breathe = Breather()
        async for events in take_batches(stream, BATCH, batch_window_s(settings), acked=self.batch_acked):
            if not self.recounted:
                # Allocations live in memory, summed from the recovered pod entries (`streams.core.ledger`).
                bound = ledger.recount()
                log.info("ledger recovered: %d pods bound, %d entries", bound, len(self.pods))
                self.recounted = True
            answered: list[Envelope] = []
            self.nodes_level = False
            for event in events:
                await breathe()
                envelope = await self.apply(event.message)
                if envelope is not None:
                    answered.append(envelope)
            await self.for_placement.add(answered)
            if settings.deleted_retention_s > 0:
                ledger.forget_deleted(time.time() - settings.deleted_retention_s)

    async def apply(self, message: Any) -> Envelope | None:
        """One record of the bindings topic against the ledger: its result sent to users, and returned as
        the envelope placement is to receive (None for a release, or a record that is not a binding)."""
        topics, ledger, observe = self.topics, self.ledger, self.topics.observe
        decoded = decode_message(topics, message)
        if decoded.dead_letter is not None:
            await send_dead_letter(topics, decoded.dead_letter)
            return None
        if isinstance(decoded.value, PodDeleted):
            ledger.delete(decoded.value.uid, time.time())  # placement let the pod go
            return None
        if isinstance(decoded.value, PodBound):
            ledger.book(decoded.value, time.time())  # bound by someone else: counted, never answered
            return None
        binding: Binding = decoded.value
        result = ledger.apply(binding, time.time())
        if result.status == "conflict" and not self.nodes_level:
            # Placement may have decided on a node event this applier's node-events agent has yet to take.
            self.nodes_level = True
            await self.catch_up_nodes()
            # Again even if the read took nothing: the agent may have taken the node while it read.
            result = ledger.apply(binding, time.time())
        if self.binder is not None:  # booked first: a crash before the POST is answered by its replay
            result = await self.binder.answer(binding, result, ledger)
        (observe.by_status.get(result.status) or observe.results.labels(result.status)).inc()
        if result.status == "conflict":
            observe.conflicts.inc()
        await send(topics, "binding-results", binding.uid.encode(), encode(result))
        # The source names the binding record the result answers (what a dead letter would cite).
        return envelope_from_model(result, result.at, f"bindings/{message.partition}")

    async def tell_unschedulable(self, stream: Any) -> None:
        assert self.binder is not None
        async for events in take_batches(stream, BATCH, batch_window_s(self.topics.settings)):
            told = []
            for event in events:
                decoded = decode_message(self.topics, event.message)
                if isinstance(decoded.value, BindingResult) and self.binder.unschedulable(decoded.value):
                    told.append(decoded.value.uid)  # queued: the binding path never waits for the API server
            # The batch is acknowledged (so its offsets committed) once its notices are written: an applier
            # killed before then reads these verdicts again rather than leaving their pods unexplained.
            await self.binder.written(told)

    async def catch_up_nodes(self) -> None:
        """Bring the ledger level with node-events (`NodeFeed.catch_up`), to end offsets asked for now."""
        consumer = self.topics.app.consumer
        topic = self.topics.settings.topic("node-events")
        owned = [tp for tp in consumer.assignment() if tp.topic == topic]
        try:
            ends = await consumer.highwaters(*owned) if owned else {}
            taken = await self.nodes.catch_up({tp.partition: end for tp, end in ends.items()})
        except (KafkaError, OSError, TimeoutError) as exc:
            # Answered as the ledger stands, a conflict: placement queues the pod again.
            log.warning("node-events not read ahead of a conflict: %s", exc or type(exc).__name__)
            return
        if taken:
            log.info(
                "node-events read ahead of the node-events agent before a conflict: %d node events", taken
            )

    def take_node_event(self, event: NodeEvent) -> None:
        self.ledger.apply_node_event(event, time.time())

    async def apply_node_events(self, stream: Any) -> None:
        async for events in take_batches(stream, BATCH, batch_window_s(self.topics.settings)):
            for event in events:
                if not self.nodes.take(event.message.partition, event.message.offset):
                    continue  # taken ahead of this agent (`catch_up_nodes`)
                decoded = decode_message(self.topics, event.message)
                if isinstance(decoded.value, NodeEvent):
                    self.take_node_event(decoded.value)


def _binder(settings: Settings) -> Binder | None:
    """With ``apply_target: kubernetes``, the binder to the API server (`streams.kube.binder`)."""
    if settings.apply_target != "kubernetes":
        return None
    config, _ = resolve_kube_config(settings.kubeconfig)
    return Binder(KubeApi(config))
