"""Checkpoints of the applier's tables on the table-checkpoints topic (`TableCheckpointer` for
`streams.faust_overrides.tables.KeyPartitionedTable`).

A table partition's checkpoint is written when due (`streams.core.table_checkpoint.checkpoint_due`: as
many changelog records as it holds entries, at least ``checkpoint_every_envelopes``, or
``checkpoint_every_s`` seconds while it changes), in two slots per partition as shard checkpoints are
(`streams.runtime.checkpoint_slots`). A recovering applier loads the newest it can read and reads the
changelog records after it, in bulk (`_with_tail`). One it cannot read is one log line and a dead
letter, and the other slot or the whole changelog is read instead. One it can read is still set aside,
with one log line, when it is not safe: when it stands past the changelog's end (the changelog was
recreated), or when records after it are older than half of the changelog's tombstone retention
(`TOMBSTONE_RETENTION_S`), since a tombstone among them may already be gone and its key would come back
from the checkpoint. A checkpoint is written at most `every_s` after a partition's last change, so that
happens only to an applier that stopped right after a change and stayed down for minutes.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Sequence

from aiokafka import TopicPartition
from faust.types import TP

from streams.core.checkpoint import CheckpointError
from streams.core.decoders import dead_letter
from streams.core.table_checkpoint import TableCheckpoint, decode_table_checkpoint, encode_table_checkpoint
from streams.faust_overrides.tables import TOMBSTONE_RETENTION_S
from streams.runtime.agents.common import Topics, send, send_dead_letter
from streams.runtime.checkpoint_slots import (
    CheckpointRecords,
    checkpoint_records,
    next_slot,
    part_limit,
    read_checkpoints,
    read_consumer,
    read_range,
    slot_key,
)
from streams.settings import Settings

__all__ = ["TableCheckpoints", "table_checkpoint_write", "table_owner"]

log = logging.getLogger(__name__)

TOPIC = "table-checkpoints"


def table_owner(table: str, partition: int) -> str:
    """The owner name of a table partition's checkpoints (`streams.runtime.checkpoint_slots`)."""
    return f"{table}-{partition}"


def table_checkpoint_write(
    table: str,
    partition: int,
    offset: int,
    taken_at: float,
    entries: Sequence[tuple[bytes, bytes]],
    slots: dict[str, int],
    max_message_bytes: int,
) -> tuple[str, int, list[tuple[bytes, bytes]]]:
    """What an applier writes to checkpoint a table partition at changelog offset `offset`, given the
    readable checkpoints it keeps (`slots`): the slot, the checkpoint's size, and its (key, value) records in
    write order. Pure, so a generated history (bench.recovery) holds exactly what a live applier writes."""
    data = encode_table_checkpoint(table, partition, offset, taken_at, entries)
    slot = next_slot(slots)
    owner = table_owner(table, partition)
    return slot, len(data), checkpoint_records(owner, slot, data, offset, part_limit(max_message_bytes))


class TableCheckpoints:
    """The `TableCheckpointer` of an app's tables."""

    def __init__(self, topics: Topics) -> None:
        settings = topics.settings
        self.topics = topics
        self.every = settings.checkpoint_every_envelopes
        self.every_s = settings.checkpoint_every_s
        self.slots: dict[str, dict[str, int]] = {}
        """Owner → slot → offset of the readable checkpoints it holds."""

    async def load(self, table: str, tp: TP, local_offset: int | None) -> TableCheckpoint | None:
        settings = self.topics.settings
        owner = table_owner(table, tp.partition)
        consumer = read_consumer(settings)
        await consumer.start()
        changelog = TopicPartition(tp.topic, tp.partition)
        try:
            end = (await consumer.end_offsets([changelog]))[changelog]
            records = await read_checkpoints(settings, settings.topic(TOPIC), tp.partition, owner, consumer)
        finally:
            await consumer.stop()
        checkpoint = await self._newest(table, tp.partition, records, end)
        if checkpoint is None or (local_offset is not None and local_offset + 1 >= checkpoint.offset):
            return None  # none, or the local store is as new
        if checkpoint.offset < end:
            checkpoint = await _with_tail(settings, changelog, checkpoint, end)
        return checkpoint

    async def _newest(
        self, table: str, partition: int, records: CheckpointRecords, end: int
    ) -> TableCheckpoint | None:
        """The newest checkpoint among `records` that can be read, if it can stand for the changelog
        partition that ends at `end`; remembers the readable slots for the next write."""
        owner = table_owner(table, partition)
        found, unreadable = records.readable()
        for slot, reason in unreadable.items():
            await self.unreadable(owner, partition, slot, reason)
        slots = self.slots[owner] = {slot: offset for offset, slot, _ in found}
        for offset, slot, data in found:
            try:
                checkpoint = await asyncio.to_thread(decode_table_checkpoint, data)
                if (checkpoint.table, checkpoint.partition, checkpoint.offset) != (table, partition, offset):
                    raise CheckpointError(
                        f"it holds {checkpoint.table} partition {checkpoint.partition} at offset "
                        f"{checkpoint.offset}, its manifest names {table} partition {partition} at {offset}"
                    )
            except CheckpointError as exc:
                await self.unreadable(owner, partition, slot, exc.reason)
                del slots[slot]
                continue
            unsafe = self.unsafe(checkpoint, end)
            if unsafe:
                log.warning(
                    "table %s partition %d: checkpoint %s set aside: %s", table, partition, slot, unsafe
                )
                return None
            return checkpoint
        return None

    @staticmethod
    def unsafe(checkpoint: TableCheckpoint, end: int) -> str | None:
        """Why the checkpoint cannot stand for the changelog partition that ends at `end`, if it cannot."""
        if checkpoint.offset > end:
            return f"it stands at offset {checkpoint.offset}, past the changelog's end {end}"
        age = time.time() - checkpoint.taken_at
        if checkpoint.offset < end and age > TOMBSTONE_RETENTION_S / 2:
            return (
                f"it is {age:.0f} s old and records follow it: a tombstone among them may be gone "
                f"(delete.retention.ms {TOMBSTONE_RETENTION_S:g} s); reading the whole changelog"
            )
        return None

    async def unreadable(self, owner: str, partition: int, slot: str, reason: str) -> None:
        log.error("table checkpoint %s slot %s cannot be read (%s); falling back", owner, slot, reason)
        letter = dead_letter(
            self.topics.settings.topic(TOPIC),
            partition,
            None,
            slot_key(owner, slot),
            None,
            f"checkpoint: {reason}",
        )
        await send_dead_letter(self.topics, letter)

    async def write(
        self, table: str, partition: int, offset: int, taken_at: float, entries: Sequence[tuple[bytes, bytes]]
    ) -> None:
        started = time.monotonic()
        settings = self.topics.settings
        slots = self.slots.setdefault(table_owner(table, partition), {})
        slot, size, records = await asyncio.to_thread(
            table_checkpoint_write,
            table,
            partition,
            offset,
            taken_at,
            entries,
            slots,
            settings.max_message_bytes,
        )
        for key, value in records:
            await send(self.topics, TOPIC, key, value, partition)
        await self.topics.app.producer.flush()
        slots[slot] = offset
        log.info(
            "table %s partition %d: checkpoint %s at offset %d, %d entries, %d bytes, in %.2f s",
            table,
            partition,
            slot,
            offset,
            len(entries),
            size,
            time.monotonic() - started,
        )


async def _with_tail(
    settings: Settings, changelog: TopicPartition, checkpoint: TableCheckpoint, end: int
) -> TableCheckpoint:
    """`checkpoint` brought up to the changelog's `end` with the records after it, read here in bulk: Faust's
    recovery takes a changelog one event at a time, about 70 µs a record, and the tail after a checkpoint
    can be as long as the partition's entries. Nothing writes the changelog meanwhile: its only writer is
    the applier that owns it, and that applier is this one, still recovering."""
    entries = checkpoint.entries
    tail = 0
    for message in await read_range(settings, changelog, checkpoint.offset, end):
        tail += 1
        if message.key is None:
            continue
        if message.value is None:
            entries.pop(message.key, None)
        else:
            entries[message.key] = message.value
    return dataclasses.replace(checkpoint, offset=end, tail=tail)
