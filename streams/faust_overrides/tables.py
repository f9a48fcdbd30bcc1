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
from collections.abc import Callable
from typing import Any, cast

import faust
from faust.stores.rocksdb import Store as RocksDBStore
from faust.tables import TableManager

__all__ = [
    "CHANGELOG_CONFIG",
    "EyrieTableManager",
    "KeyPartition",
    "KeyPartitionedTable",
    "new_bytes_table",
    "send_table_changes",
]

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

    def partition_for_key(self, key: Any) -> int:
        return self.key_partition(bytes(key), int(self.partitions or 1))

    def on_key_set(self, key: Any, value: Any) -> None:
        self.unsent[bytes(key)] = value

    def on_key_del(self, key: Any) -> None:
        self.unsent[bytes(key)] = None  # a tombstone

    async def send_unsent_changes(self) -> None:
        """One changelog record per key written since the last call; where the store is RocksDB, the offset
        of each partition's last record becomes its persisted offset once sent, as Faust's own sends do
        record by record (recovery reads the changelog from there)."""
        async with self._sending:
            if not self.unsent:
                return
            unsent, self.unsent = self.unsent, {}
            topic = self.changelog_topic.get_topic_name()
            producer = self.app.producer
            last: dict[int, Any] = {}
            for key, value in unsent.items():
                partition = self.partition_for_key(key)
                last[partition] = await producer.send(topic, key, value, partition, None, None)
            if isinstance(self.data, RocksDBStore):
                for sent in last.values():
                    sent.add_done_callback(self._persist_offset)

    def _persist_offset(self, sent: Any) -> None:
        if not sent.cancelled() and sent.exception() is None:
            metadata = sent.result()
            self.data.set_persisted_offset(metadata.topic_partition, metadata.offset)

    def _new_store_by_url(self, url: Any) -> Any:
        if not str(url).startswith("rocksdb:"):
            return super()._new_store_by_url(url)
        return _KeyPartitionedRocksDB(
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


class _KeyPartitionedRocksDB(RocksDBStore):
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
