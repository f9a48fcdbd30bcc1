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

import faust
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.codec import encode
from schemas.events import Binding, BindingResult, DeadLetter
from schemas.exceptions import InvalidInput
from streams.agents.common import BATCH, batch_window_s, node_partition, send, send_dead_letter
from streams.batching import Breather, take_batches
from streams.core.sequencer import (
    Envelope,
    Kind,
    Output,
    Refused,
    Release,
    Shard,
    decode_envelopes,
    encode_envelope,
    tick_envelope,
)
from streams.records import dead_letter
from streams.security import client_security, consumer_limits

__all__ = ["register"]

log = logging.getLogger(__name__)

STALE_SHARE = 0.5
"""`/health` calls a replay session stale once it has gone this share of ``replay_session_timeout_s``
without a watermark: the replayer resends one every second or so, so by then it is gone or cut off, and
the operator hears of it before the timeout ends the session."""


@dataclass(slots=True)
class _Owned:
    shard: Shard
    next_offset: int


async def _rebuild(settings: Any, partition: int, until: int) -> Shard:
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


def letter_for(message: Any, error: str) -> DeadLetter:
    return dead_letter(message.topic, message.partition, message.offset, message.key, message.value, error)


def register(app: faust.App, topics: Any) -> None:
    settings = topics.settings
    observe = topics.observe
    owned: dict[int, _Owned] = {}

    def attempt_result(uid: str, outputs: list[Output]) -> Any:
        for output in outputs:
            if isinstance(output, Binding) and output.uid == uid:
                return observe.scheduled
            if isinstance(output, BindingResult) and output.uid == uid:
                return observe.failed
        return observe.waiting  # queued for its batch, held in Permit, or in backoff

    partitions = settings.partitions

    async def publish(outputs: list[Output], received: float) -> None:
        # Bindings and releases are keyed by uid (SPEC) but partitioned by node: the applier then sees one
        # node's bookings and releases in placement's order, and a pod placed where another was just
        # deleted is never refused because the release sat in a partition read later.
        for output in outputs:
            if isinstance(output, Binding):
                observe.bindings_sent.inc()
                observe.latency.observe(max(0.0, time.time() - received))
                partition = node_partition(output.node, partitions)
                await send(topics, "bindings", output.uid.encode(), encode(output), partition)
            elif isinstance(output, BindingResult):
                observe.verdicts_sent.inc()
                observe.unschedulable.inc()
                observe.latency.observe(max(0.0, time.time() - received))
                await send(topics, "binding-results", output.uid.encode(), encode(output))
            elif isinstance(output, Release):  # on the partition of the binding it undoes
                partition = node_partition(output.node, partitions)
                await send(topics, "bindings", output.deleted.uid.encode(), encode(output.deleted), partition)
            elif isinstance(output, Refused):
                source = output.envelope.source.rsplit("/", 1)
                letter = dead_letter(
                    settings.topic(source[0]),
                    int(source[1]) if len(source) == 2 and source[1].isdigit() else None,
                    None,
                    None,
                    encode_envelope(output.envelope),
                    output.reason,
                )
                await send_dead_letter(topics, letter)

    @app.agent(topics.sequencer, name="placement")
    async def placement(stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, batch_window_s(topics.settings)):
            for event in events:
                message = event.message
                current = owned.get(message.partition)
                if current is None or current.next_offset != message.offset:
                    # First sight of this partition, or a gap: someone else owned it meanwhile.
                    current = owned[message.partition] = _Owned(
                        await _rebuild(settings, message.partition, message.offset), message.offset
                    )
                current.next_offset = message.offset + 1
                try:
                    envelopes = decode_envelopes(message.value)
                except InvalidInput as exc:
                    await send_dead_letter(topics, letter_for(message, str(exc)))
                    continue
                for envelope in envelopes:
                    if isinstance(envelope, InvalidInput):
                        await send_dead_letter(topics, letter_for(message, str(envelope)))
                        continue
                    started = time.perf_counter()
                    session = current.shard.reorder.session
                    try:
                        outputs = current.shard.feed(envelope)
                    except Exception as exc:  # a bug must cost one envelope, not the shard's worker
                        log.exception("placement failed on %s at offset %d", envelope.kind, message.offset)
                        error = f"internal error in placement: {type(exc).__name__}: {exc}"
                        await send_dead_letter(topics, letter_for(message, error))
                        continue
                    if envelope.kind is Kind.POD:
                        attempt_result(envelope.value.uid, outputs).observe(time.perf_counter() - started)
                    elif (
                        envelope.kind is Kind.TICK
                        and session is not None
                        and current.shard.reorder.session is None
                    ):
                        log.warning(
                            "shard %d: replay session %r sent no watermark for %.0f s; ended it, and what it "
                            "held applies now",
                            message.partition,
                            session,
                            settings.replay_session_timeout_s,
                        )
                    await publish(outputs, message.timestamp)
                    await breathe()

    timeout = settings.replay_session_timeout_s

    @app.timer(settings.tick_interval)  # type: ignore[untyped-decorator]
    async def tick() -> None:
        # Time moves for placement only through its partition; outside replay sessions (which run on the
        # log's own clock) the worker writes the wall clock there so Permit timeouts and backoffs expire.
        # Only while pods wait: the partition is kept forever, and idle ticks would only lengthen rebuilds.
        # In a session, a tick goes only once the replayer has been silent for the timeout, and carries
        # it: the shard then ends the session, unless a watermark came before the tick did.
        now = time.time()
        for partition, current in list(owned.items()):
            reorder = current.shard.reorder
            if reorder.session is None and current.shard.scheduler.pending:
                envelope = tick_envelope(now)
            elif reorder.session is not None and now - reorder.last_mark_at >= timeout:
                envelope = tick_envelope(now, timeout)
            else:
                continue
            await send(
                topics, "sequencer", f"shard-{partition}".encode(), encode_envelope(envelope), partition
            )

    def replay_sessions() -> list[dict[str, Any]]:
        now = time.time()
        sessions = []
        for partition, current in sorted(owned.items()):
            reorder = current.shard.reorder
            if reorder.session is not None:
                silent = max(0.0, now - reorder.last_mark_at)
                sessions.append(
                    {
                        "shard": partition,
                        "session": reorder.session,
                        "since_watermark_s": round(silent, 1),
                        "held": reorder.held,
                        "stale": silent >= STALE_SHARE * timeout,
                    }
                )
        return sessions

    observe.replay_sessions = replay_sessions

    sequencer = settings.topic("sequencer")

    @app.on_partitions_revoked.connect  # type: ignore[arg-type]  # mode types an async receiver oddly
    async def forget_revoked(sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        # Another worker owns these now; if one comes back, it is rebuilt from the partition again.
        for tp in args[0] if args else ():
            if tp.topic == sequencer:
                owned.pop(tp.partition, None)
