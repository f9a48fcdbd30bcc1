"""Faust tables of raw bytes, partitioned by key, whose changelog records a batch sends all at once.

Faust files a table write under the partition of the event being processed. eyrie's agents write keys
while handling records of several topics, in batches (`streams.faust_overrides.batching.take_batches`),
where "the current event's partition" would scatter one key over partitions, and where the RocksDB store
finds no current event at all (it asserts there is one). So a `KeyPartitionedTable` files each key, in its
changelog and in its store, under the partition a function of the key alone gives (eyrie's partitioning,
passed in). Faust's own `use_partitioner` would need producer metadata for the changelog topic that Faust
does not load.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import faust
from faust.stores.memory import Store as MemoryStore
from faust.stores.rocksdb import Store as RocksDBStore
from faust.tables import TableManager
from faust.types import TP

from streams.core.table_checkpoint import TableCheckpoint, checkpoint_due

__all__ = [
    "CHANGELOG_CONFIG",
    "TOMBSTONE_RETENTION_S",
    "EyrieTableManager",
    "KeyPartition",
    "KeyPartitionedTable",
    "TableCheckpointer",
    "new_bytes_table",
    "send_table_changes",
]

log = logging.getLogger(__name__)

CHANGELOG_CONFIG: dict[str, str] = {
    "segment.bytes": str(1024 * 1024),
    "segment.ms": str(10 * 60 * 1000),
    "min.cleanable.dirty.ratio": "0.2",
    "delete.retention.ms": str(10 * 60 * 1000),
}
"""Topic settings of every table's changelog, so recovery reads the tables' state, not their history.
Compaction only cleans closed segments, and Kafka closes one at 1 GiB or after 7 days: a ledger booking
and freeing pods at hundreds a second kept every record it ever wrote (each pod's booking, its deletion and
the tombstone that dropped it) in the open segment, and a new applier read them all. Small segments that
close after 1 MiB or ten minutes, whichever comes first, let the cleaner keep each key's last value, so a
recovery reads the table plus at most the open segment of each partition; tombstones are dropped once
every reader has had ten minutes to pass them. (A table's records are a few kilobytes at most, far below
a segment.) Applied when Faust creates the changelog; an existing topic keeps its settings
(``kafka-configs --alter``, docs/operations.md)."""

TOMBSTONE_RETENTION_S = int(CHANGELOG_CONFIG["delete.retention.ms"]) / 1000
"""How long a changelog keeps a tombstone at least: a table checkpoint whose tail is older than half of
this is not trusted (`TableCheckpointer.load`)."""


class TableCheckpointer(Protocol):
    """Where a `KeyPartitionedTable` writes and finds checkpoints of its partitions
    (`streams.runtime.table_checkpoints`)."""

    every: int
    """The fewest changelog records between a partition's checkpoints (`checkpoint_due`; 0: not by count)."""
    every_s: float
    """Seconds between a partition's checkpoints while it changes (0: not by time)."""

    async def load(self, table: str, tp: TP, local_offset: int | None) -> TableCheckpoint | None:
        """The partition's newest checkpoint that may be trusted and is newer than what the local store
        holds up to `local_offset` (None: nothing), or None."""

    async def write(
        self, table: str, partition: int, offset: int, taken_at: float, entries: Sequence[tuple[bytes, bytes]]
    ) -> None:
        """Write a checkpoint of `entries`, the partition after the changelog's records before `offset`."""


@dataclass(slots=True)
class _Progress:
    """A changelog partition's checkpointing, as this table writes it."""

    since: int = 0
    """Records sent since the latest checkpoint's entries were taken."""
    checkpointed_at: float = -math.inf
    """When they were taken (monotonic): never, until a checkpoint is written or restored."""
    entries: int = 0
    """Entries the latest checkpoint held."""
    last_sent: Any = None
    """The future of the latest record sent to the partition: its offset is where a checkpoint stands."""
    writing: bool = False


class EyrieTableManager(TableManager):
    """Faust's table manager without its start's one-second sleep.

    Faust sleeps a second before it registers the tables, so that tables an app defines as it starts are
    registered too; the consumer subscribes only after that. eyrie defines every table before the app
    starts (`streams.runtime.app.create_app`), so the second was only a fixed part of every worker's and
    applier's start, and so of every takeover of a placement shard."""

    logger = logging.getLogger("faust.tables.manager.eyrie")  # its lines under Faust's name, as Faust's

    async def on_start(self) -> None:
        if not self.should_stop:
            await self._update_channels()
            await self.recovery.start()


KeyPartition = Callable[[bytes, int], int]
"""A key and a partition count → the key's partition."""


class KeyPartitionedTable(faust.Table[bytes, bytes]):
    """Changelog partition by the key, through `key_partition`, not by the event being processed.

    Writes are not sent one by one through Faust's producer buffer (a future, a buffer entry, a hand-over
    and a callback per record: about a quarter of the applier's CPU at 500 pods/s, one ledger write per
    pod). They are collected, the last value of each key, and `send_unsent_changes` sends them straight
    to the producer; `streams.faust_overrides.batching.take_batches` calls it (`send_table_changes`) before
    it acknowledges the batch that made them, so a commit never passes an event whose table change was not
    sent."""

    def __init__(self, *args: Any, key_partition: KeyPartition, **kwargs: Any) -> None:
        self.key_partition = key_partition
        super().__init__(*args, **kwargs)
        self.unsent: dict[bytes, bytes | None] = {}
        # Agents share the tables: one that returns from sending must know that every write made before
        # it asked is with the producer, including writes another agent took and is still handing over.
        self._sending = asyncio.Lock()
        self.checkpointer: TableCheckpointer | None = None
        self._progress: dict[int, _Progress] = {}
        self._writing: set[asyncio.Task[None]] = set()

    def partition_for_key(self, key: Any) -> int:
        return self.key_partition(bytes(key), int(self.partitions or 1))

    def on_key_set(self, key: Any, value: Any) -> None:
        self.unsent[bytes(key)] = value

    def on_key_del(self, key: Any) -> None:
        self.unsent[bytes(key)] = None  # a tombstone

    async def send_unsent_changes(self, *, idle: bool = False) -> None:
        """One changelog record per key written since the last call; where the store is RocksDB, the offset
        of each partition's last record becomes its persisted offset once sent, as Faust's own sends do
        record by record (recovery reads the changelog from there).

        With a `checkpointer`, a partition due a checkpoint (`streams.core.table_checkpoint.checkpoint_due`,
        counting these records; with `idle`, also among partitions these do not touch) has its
        entries taken here, before the first await: they are then exactly the changelog up to the
        partition's last record sent, whose offset the checkpoint is written at once the broker has it."""
        async with self._sending:
            unsent, self.unsent = self.unsent, {}
            by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for key, value in unsent.items():
                by_partition.setdefault(self.partition_for_key(key), []).append((key, value))
            taken_at = time.time()
            store = cast(_LoadsCheckpoints, self.data)
            try:
                snapshots = {
                    partition: store.partition_items(partition) for partition in self._due(by_partition, idle)
                }
            except Exception:  # the records below are what must not be lost; a checkpoint can wait
                log.exception("table %s: no checkpoint taken", self.name)
                snapshots = {}
            topic = self.changelog_topic.get_topic_name()
            producer = self.app.producer
            persist = isinstance(self.data, RocksDBStore)
            for partition, records in by_partition.items():
                sent: Any = None
                for key, value in records:
                    sent = await producer.send(topic, key, value, partition, None, None)
                progress = self._progress.setdefault(partition, _Progress())
                progress.since += len(records)
                progress.last_sent = sent
                if persist:
                    sent.add_done_callback(self._persist_offset)
            for partition, entries in snapshots.items():
                progress = self._progress[partition]
                progress.since, progress.checkpointed_at, progress.writing = 0, time.monotonic(), True
                progress.entries = len(entries)
                task = asyncio.ensure_future(self._checkpoint(partition, progress, taken_at, entries))
                self._writing.add(task)
                task.add_done_callback(self._writing.discard)

    def _due(self, by_partition: dict[int, list[Any]], idle: bool) -> list[int]:
        checkpointer = self.checkpointer
        if checkpointer is None:
            return []
        every, every_s, now = checkpointer.every, checkpointer.every_s, time.monotonic()
        due = []
        for partition in set(by_partition) | (set(self._progress) if idle else set()):
            progress = self._progress.get(partition) or _Progress()
            since = progress.since + len(by_partition.get(partition, ()))
            age = now - progress.checkpointed_at
            if not progress.writing and checkpoint_due(since, progress.entries, age, every, every_s):
                due.append(partition)
        return due

    async def _checkpoint(
        self, partition: int, progress: _Progress, taken_at: float, entries: list[tuple[bytes, bytes]]
    ) -> None:
        assert self.checkpointer is not None
        try:
            metadata = await progress.last_sent
            await self.checkpointer.write(self.name, partition, metadata.offset + 1, taken_at, entries)
        except Exception as exc:  # the next one tries again; meanwhile recovery reads a longer tail
            log.warning("table %s partition %d: checkpoint not written: %s", self.name, partition, exc)
        finally:
            progress.writing = False

    def restored(self, partition: int, entries: int) -> None:
        """The partition's entries were loaded from a checkpoint: the next one is due from now."""
        self._progress[partition] = _Progress(checkpointed_at=time.monotonic(), entries=entries)

    def revoked(self, partition: int) -> None:
        self._progress.pop(partition, None)

    def _persist_offset(self, sent: Any) -> None:
        if not sent.cancelled() and sent.exception() is None:
            metadata = sent.result()
            self.data.set_persisted_offset(metadata.topic_partition, metadata.offset)

    def _new_store_by_url(self, url: Any) -> Any:
        store = _KeyPartitionedRocksDB if str(url).startswith("rocksdb:") else _CheckpointedMemory
        return store(
            url,
            self.app,
            self,
            table_name=self.name,
            key_type=self.key_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            value_type=self.value_type,
            loop=self.loop,
            options=self.options,
        )


class _LoadsCheckpoints:
    """A store that, when a changelog partition becomes its table's active one here, loads the partition's
    newest checkpoint with the changelog records after it (`TableCheckpointer.load`) and reports the offset
    they reach as its persisted one, so that Faust's recovery reads the changelog from there on (nothing,
    as a rule) instead of from the start."""

    table: Any
    app: Any
    _restored: dict[TP, int]
    _actives: set[TP]

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)  # type: ignore[misc]
        await self.restore(set(self.app.assignor.assigned_actives()))

    async def restore(self, actives: set[TP]) -> None:
        """Given the consumer's active partitions (of every topic), load a checkpoint into each changelog
        partition of the table that was not active here before: all of them at once, since each waits on
        the broker."""
        table = cast(KeyPartitionedTable, self.table)
        changelog = table.changelog_topic.get_topic_name()
        actives = {tp for tp in actives if tp.topic == changelog}
        before: set[TP] = getattr(self, "_actives", set())
        for tp in before - actives:
            table.revoked(tp.partition)
        self._actives, self._restored = actives, {}
        checkpointer = table.checkpointer
        if checkpointer is None:
            return
        new = sorted(actives - before)
        started = time.monotonic()
        loaded = await asyncio.gather(
            *(checkpointer.load(table.name, tp, self.local_offset(tp)) for tp in new)
        )
        restored = []
        for tp, checkpoint in zip(new, loaded, strict=True):
            if checkpoint is not None:
                self.replace_partition(tp, checkpoint.entries, checkpoint.offset - 1)
                self._restored[tp] = checkpoint.offset - 1
                table.restored(tp.partition, len(checkpoint.entries))
                restored.append(
                    f"{tp.partition} ({len(checkpoint.entries)} entries, {checkpoint.tail} records of tail, "
                    f"offset {checkpoint.offset})"
                )
        if restored:
            log.info(
                "table %s: partitions restored from checkpoints and the changelog after them in %.2f s: %s",
                table.name,
                time.monotonic() - started,
                ", ".join(restored),
            )

    def persisted_offset(self, tp: TP) -> int | None:
        restored = self._restored.get(tp) if hasattr(self, "_restored") else None
        return restored if restored is not None else self.local_offset(tp)

    def local_offset(self, tp: TP) -> int | None:
        raise NotImplementedError

    def partition_items(self, partition: int) -> list[tuple[bytes, bytes]]:
        raise NotImplementedError

    def replace_partition(self, tp: TP, entries: dict[bytes, bytes], offset: int) -> None:
        raise NotImplementedError


class _CheckpointedMemory(_LoadsCheckpoints, MemoryStore[Any, Any]):
    def local_offset(self, tp: TP) -> int | None:
        return None

    def partition_items(self, partition: int) -> list[tuple[bytes, bytes]]:
        table = cast(KeyPartitionedTable, self.table)
        if int(table.partitions or 1) == 1:
            return list(self.data.items())
        return [(key, value) for key, value in self.data.items() if table.partition_for_key(key) == partition]

    def replace_partition(self, tp: TP, entries: dict[bytes, bytes], offset: int) -> None:
        table = cast(KeyPartitionedTable, self.table)
        for key in [key for key in self.data if table.partition_for_key(key) == tp.partition]:
            del self.data[key]
            self._key_partition.pop(key, None)
        self.data.update(entries)
        self._key_partition.update(dict.fromkeys(entries, tp.partition))


class _KeyPartitionedRocksDB(_LoadsCheckpoints, RocksDBStore):
    """Faust's RocksDB store files a key under the partition of the event being processed, and asserts there
    is one; these tables are written from `take_batches` batches, where there is none (the "don't write tables
    from inside take" pitfall), and their changelog is partitioned by key. So keys are filed, found and
    deleted in the partition their changelog records go to, which is also where recovery puts them."""

    def _partition(self, key: bytes) -> int:
        return cast(KeyPartitionedTable, self.table).partition_for_key(key)

    def _set(self, key: bytes, value: bytes | None) -> None:
        partition = self._partition(key)
        self._key_index[key] = partition
        self._db_for_partition(partition).put(key, value)

    def _get(self, key: bytes) -> bytes | None:
        value: bytes | None = self._db_for_partition(self._partition(key)).get(key)
        return value

    def _contains(self, key: bytes) -> bool:
        return self._get(key) is not None

    def _del(self, key: bytes) -> None:
        self._key_index.pop(key, None)
        self._db_for_partition(self._partition(key)).delete(key)

    def local_offset(self, tp: TP) -> int | None:
        offset: int | None = RocksDBStore.persisted_offset(self, tp)
        return offset

    def partition_items(self, partition: int) -> list[tuple[bytes, bytes]]:
        items = self._db_for_partition(partition).items()
        return [(bytes(key), bytes(value)) for key, value in items if key != self.offset_key]

    def replace_partition(self, tp: TP, entries: dict[bytes, bytes], offset: int) -> None:
        db = self._db_for_partition(tp.partition)
        for key in list(db.keys()):
            if key != self.offset_key:
                db.delete(key)
                self._key_index.pop(key, None)
        for key, value in entries.items():
            db.put(key, value)
            self._key_index[key] = tp.partition
        self.set_persisted_offset(tp, offset)


def new_bytes_table(app: faust.App, name: str, partitions: int, key_partition: KeyPartition) -> Any:
    """A `KeyPartitionedTable` of raw bytes with a changelog (and a standby replica when workers are
    several), added to `app`'s tables."""
    schema: Any = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    table = KeyPartitionedTable(
        app,
        name=name,
        default=None,
        schema=schema,
        key_type=bytes,  # the changelog's serializer on recovery comes from these, not from the schema
        value_type=bytes,
        partitions=partitions,
        beacon=app.tables.beacon,
        key_partition=key_partition,
        extra_topic_configs=CHANGELOG_CONFIG,
    )
    return app.tables.add(table)


async def send_table_changes(app: Any) -> None:
    """The changelog records of what a batch wrote to the app's tables, sent before its events are
    acknowledged (Faust's own tables send as they are written)."""
    for table in app.tables.values():
        if isinstance(table, KeyPartitionedTable):
            await table.send_unsent_changes()


# Faust's lines, under Faust's logger (see `streams.faust_overrides.fetching`'s loggers for why it is set
# here).
KeyPartitionedTable.logger = faust.Table.logger
_CheckpointedMemory.logger = MemoryStore.logger
