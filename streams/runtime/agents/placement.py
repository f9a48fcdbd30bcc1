"""The placement agent: one `Shard` per sequencer partition this worker owns.

A shard's state is restored, then caught up: when a worker receives a partition's first envelope (at start,
after a crash, or taking over from a worker that left), it loads the shard's newest readable checkpoint
(`streams.core.checkpoint`, docs/checkpoints.md) and replays the sequencer from the checkpoint's offset up
to that envelope with outputs discarded (the whole partition when the shard has no checkpoint yet).
Placement is a pure function of the partition's envelopes, so the state is the one the previous owner had
when it last committed; what it did after that commit is redone and re-sent, and the applier's idempotence
per uid absorbs the repeats. A checkpoint taken after the last commit is newer still: the records before
it are then skipped, not applied twice, which is safe because the worker flushes every output before it
writes a checkpoint.

Every `Settings.checkpoint_every_envelopes` records (or `checkpoint_every_s` seconds), and when a shard
leaves the worker cleanly (a rebalance, or the worker stopping: a handover), the agent writes a
checkpoint, alternating between two slots per shard on the compacted checkpoints topic, and then deletes
the sequencer records behind the older slot (`Settings.sequencer_delete_behind_checkpoints`): a checkpoint
that turns out unreadable falls back to the other one. A checkpoint that cannot be read is one log line and
a dead letter; with neither readable and the history behind them deleted, the agent stops rather than
place from a wrong state.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.errors import KafkaError
from prometheus_client import Histogram

from schemas.codec import encode
from schemas.events import Binding, BindingResult, DeadLetter
from schemas.exceptions import InvalidInput
from streams.core.checkpoint import CheckpointError, decode_checkpoint, encode_checkpoint
from streams.core.decoders import dead_letter
from streams.core.sequencer import Envelope, Kind, decode_envelopes, encode_envelope, tick_envelope
from streams.core.shard import Counted, Output, Refused, Release, Shard
from streams.core.table_checkpoint import checkpoint_due
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
from streams.runtime.checkpoint_slots import (
    SLOTS,
    CheckpointRecords,
    checkpoint_records,
    next_slot,
    part_limit,
    read_checkpoints,
    read_consumer,
    slot_key,
)
from streams.runtime.security import client_security
from streams.settings import Settings

if TYPE_CHECKING:
    from streams.runtime.agents.standby import Standby

__all__ = ["PlacementAgent", "checkpoint_write", "read_shard_checkpoints", "register", "shard_owner"]

log = logging.getLogger(__name__)

STALE_SHARE = 0.5
"""`/health` calls a replay session stale once it has gone this share of ``replay_session_timeout_s``
without a watermark: the replayer resends one every second or so, so by then it is gone or cut off, and
the operator hears of it before the timeout ends the session."""

PAUSE_BEFORE_MANIFEST_ENV = "EYRIE_TEST_CHECKPOINT_PAUSE_S"
"""Tests only: seconds a worker waits between a checkpoint's parts (flushed, with a log line) and its
manifest, so a test can kill it while a checkpoint is half written. Unset in any real deployment."""


def register(app: EyrieApp, topics: Topics) -> None:
    threading.Thread(target=_warm, name="eyrie-warm", daemon=True).start()
    agent = PlacementAgent(topics)
    app.agent(topics.sequencer, name="placement")(agent.run)
    app.timer(topics.settings.tick_interval)(agent.tick)
    topics.observe.replay_sessions = agent.replay_sessions
    # mode types an async receiver oddly
    app.on_partitions_revoked.connect(agent.forget_revoked)  # type: ignore[arg-type]
    app.on_before_shutdown.connect(agent.hand_over_all)  # type: ignore[arg-type]
    if topics.settings.standby_shards:
        from streams.runtime.agents.standby import Standby

        agent.standby = Standby(topics.settings)
        app.on_partitions_assigned.connect(agent.standby.on_assigned)  # type: ignore[arg-type]
        app.task(agent.standby.run)


def _warm() -> None:
    """Import what a shard's first restore needs and no agent has imported yet: the plugins' registry,
    SciPy among them (about 0.2 s), and the builtin profiles built from it. Run on a thread while the worker
    checks its topics and joins its group, which is mostly waiting on the broker, so that a takeover does
    not pay for it after the assignment. A failure here is the restore's to report: it builds the same."""
    with contextlib.suppress(Exception):
        Shard()


@dataclass(slots=True)
class _Owned:
    shard: Shard
    next_offset: int
    """The sequencer offset of the next record to apply: records below it are skipped."""
    since_checkpoint: int = 0
    """Sequencer records applied since the latest checkpoint."""
    checkpointed_at: float = field(default_factory=time.monotonic)
    slots: dict[str, int] = field(default_factory=dict)
    """Slot → offset of the readable checkpoint it holds."""
    whole: bool = True
    """False while a record is being applied: the shard then holds part of it, and no checkpoint may be
    taken of it."""


def shard_owner(partition: int) -> str:
    """The owner name of a shard's checkpoints (`streams.runtime.checkpoint_slots`)."""
    return f"shard-{partition}"


def checkpoint_write(
    shard: Shard, partition: int, offset: int, slots: dict[str, int], max_message_bytes: int
) -> tuple[str, int, list[tuple[bytes, bytes]]]:
    """What a worker writes to checkpoint `shard` before sequencer record `offset`, given the readable
    checkpoints it keeps (`slots`: slot → offset): the slot (the older, or an empty one), the checkpoint's
    size in bytes, and its (key, value) records in write order. `CheckpointError` when the shard cannot be
    encoded. Pure, so a generated history (bench.recovery) holds exactly what a live worker writes."""
    data = encode_checkpoint(shard, offset)
    slot = next_slot(slots)
    records = checkpoint_records(shard_owner(partition), slot, data, offset, part_limit(max_message_bytes))
    return slot, len(data), records


async def read_shard_checkpoints(settings: Settings, partition: int) -> CheckpointRecords:
    """The records of the shard's newest checkpoints (`read_checkpoints`)."""
    return await read_checkpoints(settings, settings.topic("checkpoints"), partition, shard_owner(partition))


async def _rebuild(
    settings: Settings, partition: int, until: int, start: int = 0, shard: Shard | None = None
) -> Shard:
    """`shard` (a fresh one by default) after the sequencer records [start, until), outputs discarded.
    Raises `CheckpointError` when records of that range were deleted."""
    shard = shard if shard is not None else Shard()
    if until <= start:
        return shard
    started = time.monotonic()
    consumer = read_consumer(settings)
    tp = TopicPartition(settings.topic("sequencer"), partition)
    breathe = Breather()  # a long tail takes seconds, and the worker's Kafka consumer shares this loop
    await consumer.start()
    try:
        consumer.assign([tp])
        first = (await consumer.beginning_offsets([tp]))[tp]
        if first > start:
            raise CheckpointError(
                f"sequencer records {start}..{first - 1} of shard {partition} were deleted, and no "
                "readable checkpoint covers them"
            )
        consumer.seek(tp, start)
        position = start
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
    elapsed = time.monotonic() - started
    log.warning("shard %d: replayed sequencer records %d..%d in %.1f s", partition, start, until - 1, elapsed)
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
        self.checkpoints = self.settings.topic("checkpoints")
        self._admin: AIOKafkaAdminClient | None = None
        self.standby: Standby | None = None
        """The shards this worker follows without owning them (`streams.runtime.agents.standby`)."""
        self._applying = asyncio.Lock()
        """Held while a record is applied, so a handover checkpoint sees whole records only."""

    async def run(self, stream: Any) -> None:
        breathe = Breather()
        async for events in take_batches(stream, BATCH, batch_window_s(self.settings)):
            for event in events:
                # A record is applied whole or not at all as far as a handover checkpoint can see.
                async with self._applying:
                    await self.apply_record(event.message, breathe)

    async def apply_record(self, message: Any, breathe: Breather) -> None:
        current = await self.owner_of(message)
        if current is None:
            return  # applied already: the shard's checkpoint is newer than this record
        current.whole = False  # stays so if the agent is cancelled halfway through the record
        try:
            envelopes = decode_envelopes(message.value)
        except InvalidInput as exc:
            await send_dead_letter(self.topics, letter_for(message, str(exc)))
            current.whole = True
            return
        for envelope in envelopes:
            if isinstance(envelope, InvalidInput):
                await send_dead_letter(self.topics, letter_for(message, str(envelope)))
                continue
            await self.place(current, message, envelope)
            await breathe()
        await self.after_record(current, message.partition)
        current.whole = True

    async def owner_of(self, message: Any) -> _Owned | None:
        """The shard of the message's partition, restored first if this worker has not followed the
        partition up to the message; None when the shard has applied the message already."""
        current = self.owned.get(message.partition)
        if current is None or current.next_offset < message.offset:
            # First sight of this partition, or a gap: someone else owned it meanwhile. A shard the standby
            # followed is adopted where a restore would have put it.
            partition, offset = message.partition, message.offset
            adopted = None if self.standby is None else await self.standby.adopt(partition, offset)
            current = self.owned[partition] = (
                _Owned(*adopted) if adopted else await self.restore(partition, offset)
            )
        if message.offset < current.next_offset:
            return None
        current.next_offset = message.offset + 1
        return current

    async def restore(self, partition: int, until: int) -> _Owned:
        """The shard of `partition` ready to apply record `until`, or a later one if its newest checkpoint
        is newer: the newest readable checkpoint, then the sequencer's records after it. Logs how long each
        phase took (the checkpoint's read, its decode, the replay of the tail), as a takeover costs them."""
        started = time.monotonic()
        records = await read_shard_checkpoints(self.settings, partition)
        read_s = time.monotonic() - started
        found, unreadable = records.readable()
        for slot, reason in unreadable.items():
            await self.unreadable(partition, slot, reason)
        slots = {slot: offset for offset, slot, _ in found}
        for offset, slot, data in found:
            decoding = time.monotonic()
            try:
                # Off the loop: a large shard's decode takes a second or more, and the group's heartbeats
                # and the worker's other agents share the loop.
                shard, at = await asyncio.to_thread(decode_checkpoint, data)
                if at != offset:
                    raise CheckpointError(f"it says offset {at}, its manifest {offset}")
            except CheckpointError as exc:
                await self.unreadable(partition, slot, exc.reason)
                del slots[slot]
                continue
            replaying = time.monotonic()
            shard = await _rebuild(self.settings, partition, until, at, shard)
            done = time.monotonic()
            log.warning(
                "shard %d: restored from checkpoint %s at offset %d (%d records behind %d) in %.1f s: read "
                "%d checkpoint records in %.2f s, decoded %d bytes in %.2f s, replayed the tail in %.2f s",
                partition,
                slot,
                at,
                max(0, until - at),
                until,
                done - started,
                records.scanned,
                read_s,
                len(data),
                replaying - decoding,
                done - replaying,
            )
            return _Owned(shard, max(at, until), slots=slots)
        # No checkpoint: the whole partition, which `_rebuild` refuses if its start was deleted.
        return _Owned(await _rebuild(self.settings, partition, until), until, slots=slots)

    async def unreadable(self, partition: int, slot: str, reason: str) -> None:
        log.error("shard %d: checkpoint %s cannot be read (%s); falling back", partition, slot, reason)
        letter = dead_letter(
            self.checkpoints,
            partition,
            None,
            slot_key(shard_owner(partition), slot),
            None,
            f"checkpoint: {reason}",
        )
        await send_dead_letter(self.topics, letter)

    async def after_record(self, current: _Owned, partition: int) -> None:
        """Count a record applied, and checkpoint the shard when it is due."""
        current.since_checkpoint += 1
        settings = self.settings
        every, every_s = settings.checkpoint_every_envelopes, settings.checkpoint_every_s
        # A shard's checkpoint holds no entries to weigh the count against (a table partition's does).
        age_s = time.monotonic() - current.checkpointed_at
        if checkpoint_due(current.since_checkpoint, 0, age_s, every, every_s):
            await self.checkpoint(partition, current)

    async def checkpoint(self, partition: int, current: _Owned, why: str = "due") -> None:
        """Write the shard's state at its next offset into its older slot, then drop the sequencer's
        records behind the other slot."""
        started = time.monotonic()
        offset = current.next_offset
        try:
            slot, size, records = checkpoint_write(
                current.shard, partition, offset, current.slots, self.settings.max_message_bytes
            )
        except CheckpointError as exc:  # a bug: the shard goes on, its tail grows, the operator hears
            log.error("shard %d: cannot write a checkpoint: %s", partition, exc.reason)
            current.since_checkpoint, current.checkpointed_at = 0, time.monotonic()
            return
        producer = self.topics.app.producer
        # Every output of the records before `offset` is on its topic before a checkpoint says they were
        # applied: a worker restoring it skips those records.
        await producer.flush()
        for key, value in records[:-1]:
            await send(self.topics, "checkpoints", key, value, partition)
        pause = float(os.environ.get(PAUSE_BEFORE_MANIFEST_ENV) or 0)
        if pause > 0:
            await producer.flush()
            log.warning("shard %d: checkpoint %s parts written, manifest in %.1f s", partition, slot, pause)
            await asyncio.sleep(pause)
        await send(self.topics, "checkpoints", *records[-1], partition)
        await producer.flush()
        current.slots[slot] = offset
        current.since_checkpoint, current.checkpointed_at = 0, time.monotonic()
        log.info(
            "shard %d: checkpoint %s at offset %d (%s), %d bytes, in %.2f s",
            partition,
            slot,
            offset,
            why,
            size,
            time.monotonic() - started,
        )
        if self.settings.sequencer_delete_behind_checkpoints and len(current.slots) == len(SLOTS):
            await self.delete_behind(partition, min(current.slots.values()))

    async def delete_behind(self, partition: int, offset: int) -> None:
        """Delete the shard's sequencer records before `offset` (the older kept checkpoint's)."""
        try:
            if self._admin is None:
                self._admin = AIOKafkaAdminClient(
                    bootstrap_servers=self.settings.bootstrap_servers,
                    request_timeout_ms=self.settings.request_timeout_ms,
                    client_id=self.settings.client_id,
                    **client_security(self.settings),
                )
                await self._admin.start()
            tp = TopicPartition(self.sequencer, partition)
            await self._admin.delete_records({tp: RecordsToDelete(offset)})
        except KafkaError as exc:  # next checkpoint tries again; meanwhile the tail is only longer
            log.warning("shard %d: cannot delete sequencer records before %d: %s", partition, offset, exc)

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
                await self.hand_over(tp.partition)

    async def hand_over_all(self, sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        """The worker stops (Faust's ``on_before_shutdown``: its consumer stopped, its producer not yet)."""
        for partition in sorted(self.owned):
            await self.hand_over(partition)

    async def hand_over(self, partition: int) -> None:
        """A shard leaving this worker cleanly (a rebalance took it, or the worker stops): checkpointed at
        the last record it applied, when any came since its latest checkpoint, so the worker taking it next
        replays nothing. A checkpoint that cannot be written only leaves that worker a longer tail."""
        async with self._applying:
            current = self.owned.pop(partition, None)
            settings = self.settings
            enabled = settings.checkpoint_every_envelopes or settings.checkpoint_every_s
            if current is None or not enabled or current.since_checkpoint == 0 or not current.whole:
                return
            try:
                await self.checkpoint(partition, current, "handover")
            except Exception as exc:  # the broker away, the producer stopping: the next owner replays more
                log.warning("shard %d: no checkpoint on handover: %s", partition, exc)
