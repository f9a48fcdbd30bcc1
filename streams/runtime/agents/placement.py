"""The placement agent: one `Shard` per sequencer partition this worker owns.

A shard's state is rebuilt, not restored: when a worker receives a partition's first envelope (at start,
after a crash, or taking over from a worker that left), it replays the partition from the beginning up to
that envelope with outputs discarded. Placement is a pure function of the partition's envelopes, so the
rebuilt state is the state the previous owner had when it last committed; what it did after that commit
is redone and re-sent, and the applier's idempotence per uid absorbs the repeats.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from prometheus_client import Histogram

from schemas.codec import encode
from schemas.events import Binding, BindingResult, DeadLetter
from schemas.exceptions import InvalidInput
from streams.core.decoders import dead_letter
from streams.core.sequencer import Envelope, Kind, decode_envelopes, encode_envelope, tick_envelope
from streams.core.shard import Counted, Output, Refused, Release, Shard
from streams.faust_overrides.batching import Breather, take_batches
from streams.faust_overrides.fetching import EyrieApp
from streams.runtime.agents.common import (
    BATCH,
    Topics,
    batch_window_s,
    letter_for,
    partition_of,
    send,
    send_dead_letter,
)
from streams.runtime.security import client_security, consumer_limits
from streams.settings import Settings

__all__ = ["PlacementAgent", "register"]

log = logging.getLogger(__name__)

STALE_SHARE = 0.5
"""`/health` calls a replay session stale once it has gone this share of ``replay_session_timeout_s``
without a watermark: the replayer resends one every second or so, so by then it is gone or cut off, and
the operator hears of it before the timeout ends the session."""


def register(app: EyrieApp, topics: Topics) -> None:
    agent = PlacementAgent(topics)
    app.agent(topics.sequencer, name="placement")(agent.run)
    app.timer(topics.settings.tick_interval)(agent.tick)
    topics.observe.replay_sessions = agent.replay_sessions
    # mode types an async receiver oddly
    app.on_partitions_revoked.connect(agent.forget_revoked)  # type: ignore[arg-type]


@dataclass(slots=True)
class _Owned:
    shard: Shard
    next_offset: int


async def _rebuild(settings: Settings, partition: int, until: int) -> Shard:
    shard = Shard()
    if until <= 0:
        return shard
    started = time.monotonic()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        **consumer_limits(settings, 32 * 1024 * 1024, 8 * 1024 * 1024),
        **client_security(settings),
    )
    tp = TopicPartition(settings.topic("sequencer"), partition)
    breathe = Breather()  # a long history takes seconds, and the worker's Kafka consumer shares this loop
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        position = await consumer.position(tp)
        while position < until:
            batches = await consumer.getmany(tp, timeout_ms=1000, max_records=5000)
            for message in batches.get(tp, []):
                if message.offset >= until:
                    break
                # What failed here was dead-lettered when it was first seen; skip it the same way, envelope
                # by envelope, so the rebuilt shard is the one the live agent had.
                try:
                    envelopes = decode_envelopes(message.value)
                except InvalidInput:
                    continue
                for envelope in envelopes:
                    if isinstance(envelope, Envelope):
                        with contextlib.suppress(Exception):
                            shard.feed(envelope)
                    await breathe()
            position = await consumer.position(tp)
    finally:
        await consumer.stop()
    log.warning("shard %d rebuilt from %d envelopes in %.1f s", partition, until, time.monotonic() - started)
    return shard


class PlacementAgent:
    """The shards of the sequencer partitions this worker owns, each fed its partition's envelopes."""

    def __init__(self, topics: Topics) -> None:
        self.topics = topics
        self.settings = topics.settings
        self.observe = topics.observe
        self.owned: dict[int, _Owned] = {}
        self.timeout = self.settings.replay_session_timeout_s
        self.sequencer = self.settings.topic("sequencer")

    async def run(self, stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, batch_window_s(self.settings)):
            for event in events:
                message = event.message
                current = await self.owner_of(message)
                try:
                    envelopes = decode_envelopes(message.value)
                except InvalidInput as exc:
                    await send_dead_letter(self.topics, letter_for(message, str(exc)))
                    continue
                for envelope in envelopes:
                    if isinstance(envelope, InvalidInput):
                        await send_dead_letter(self.topics, letter_for(message, str(envelope)))
                        continue
                    await self.place(current, message, envelope)
                    await breathe()

    async def owner_of(self, message: Any) -> _Owned:
        """The shard of the message's partition, rebuilt first if this worker has not followed the partition
        up to the message."""
        current = self.owned.get(message.partition)
        if current is None or current.next_offset != message.offset:
            # First sight of this partition, or a gap: someone else owned it meanwhile.
            current = self.owned[message.partition] = _Owned(
                await _rebuild(self.settings, message.partition, message.offset), message.offset
            )
        current.next_offset = message.offset + 1
        return current

    async def place(self, current: _Owned, message: Any, envelope: Envelope) -> None:
        """One envelope through the shard, and what it decided out."""
        started = time.perf_counter()
        session = current.shard.reorder.session
        try:
            outputs = current.shard.feed(envelope)
        except Exception as exc:  # a bug must cost one envelope, not the shard's worker
            log.exception("placement failed on %s at offset %d", envelope.kind, message.offset)
            error = f"internal error in placement: {type(exc).__name__}: {exc}"
            await send_dead_letter(self.topics, letter_for(message, error))
            return
        if envelope.kind is Kind.POD:
            self.attempt_result(envelope.value.uid, outputs).observe(time.perf_counter() - started)
        elif envelope.kind is Kind.TICK and session is not None and current.shard.reorder.session is None:
            log.warning(
                "shard %d: replay session %r sent no watermark for %.0f s; ended it, and what it "
                "held applies now",
                message.partition,
                session,
                self.timeout,
            )
        await self.publish(outputs, message.timestamp)

    def attempt_result(self, uid: str, outputs: list[Output]) -> Histogram:
        observe = self.observe
        for output in outputs:
            if isinstance(output, Binding) and output.uid == uid:
                return observe.scheduled
            if isinstance(output, BindingResult) and output.uid == uid:
                return observe.failed
        return observe.waiting  # queued for its batch, held in Permit, or in backoff

    async def publish(self, outputs: list[Output], received: float) -> None:
        # Bindings, releases and pods bound by others are keyed by uid but partitioned by node: the applier
        # then sees one node's bookings and releases in placement's order, and a pod placed where another
        # was just deleted is never refused because the release sat in a partition read later.
        topics, observe, partitions = self.topics, self.observe, self.settings.partitions
        for output in outputs:
            if isinstance(output, Binding):
                observe.bindings_sent.inc()
                observe.latency.observe(max(0.0, time.time() - received))
                partition = partition_of(output.node, partitions)
                await send(topics, "bindings", output.uid.encode(), encode(output), partition)
            elif isinstance(output, BindingResult):
                observe.verdicts_sent.inc()
                observe.unschedulable.inc()
                observe.latency.observe(max(0.0, time.time() - received))
                await send(topics, "binding-results", output.uid.encode(), encode(output))
            elif isinstance(output, Release):  # on the partition of the binding it undoes
                partition = partition_of(output.node, partitions)
                await send(topics, "bindings", output.deleted.uid.encode(), encode(output.deleted), partition)
            elif isinstance(output, Counted):  # a pod bound by someone else, for the ledger to book too
                partition = partition_of(output.via, partitions)
                await send(topics, "bindings", output.bound.uid.encode(), encode(output.bound), partition)
            elif isinstance(output, Refused):
                await send_dead_letter(topics, self.refused_letter(output))

    def refused_letter(self, refused: Refused) -> DeadLetter:
        source = refused.envelope.source.rsplit("/", 1)
        return dead_letter(
            self.settings.topic(source[0]),
            int(source[1]) if len(source) == 2 and source[1].isdigit() else None,
            None,
            None,
            encode_envelope(refused.envelope),
            refused.reason,
        )

    async def tick(self) -> None:
        # Time moves for placement only through its partition; outside replay sessions (which run on the
        # log's own clock) the worker writes the wall clock there so Permit timeouts and backoffs expire.
        # Only while pods wait: the partition is kept forever, and idle ticks would only lengthen rebuilds.
        # In a session, a tick goes only once the replayer has been silent for the timeout, and carries
        # it: the shard then ends the session, unless a watermark came before the tick did.
        now = time.time()
        for partition, current in list(self.owned.items()):
            reorder = current.shard.reorder
            if reorder.session is None and current.shard.scheduler.pending:
                envelope = tick_envelope(now)
            elif reorder.session is not None and now - reorder.last_mark_at >= self.timeout:
                envelope = tick_envelope(now, self.timeout)
            else:
                continue
            key = f"shard-{partition}".encode()
            await send(self.topics, "sequencer", key, encode_envelope(envelope), partition)

    def replay_sessions(self) -> list[dict[str, Any]]:
        now = time.time()
        sessions = []
        for partition, current in sorted(self.owned.items()):
            reorder = current.shard.reorder
            if reorder.session is not None:
                silent = max(0.0, now - reorder.last_mark_at)
                sessions.append(
                    {
                        "shard": partition,
                        "session": reorder.session,
                        "since_watermark_s": round(silent, 1),
                        "held": reorder.held,
                        "stale": silent >= STALE_SHARE * self.timeout,
                    }
                )
        return sessions

    async def forget_revoked(self, sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        # Another worker owns these now; if one comes back, it is rebuilt from the partition again.
        for tp in args[0] if args else ():
            if tp.topic == self.sequencer:
                self.owned.pop(tp.partition, None)
