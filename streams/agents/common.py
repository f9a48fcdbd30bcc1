"""What every agent does the same way: dead letters, shard routing, envelope sends."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Iterator, MutableMapping, Sequence
from typing import Any

import faust
from faust.stores.rocksdb import Store as RocksDBStore

from schemas.codec import encode
from schemas.events import DeadLetter
from streams.core.ingress import envelope_from_record, pack_envelopes
from streams.core.sequencer import Envelope, Kind
from streams.records import Decoded, decode_record, decode_records
from streams.settings import Settings

__all__ = [
    "BATCH",
    "TableBytes",
    "batch_window_s",
    "bytes_table",
    "decode_message",
    "decode_messages",
    "envelope_of",
    "node_partition",
    "send",
    "send_dead_letter",
    "send_envelopes",
    "shards_for",
]

BATCH = 1000
"""Agents take records in batches of up to `BATCH`, gathered for at most ``Settings.batch_window_ms``: the
cost of a Faust event is paid once per batch."""


def batch_window_s(settings: Settings) -> float:
    return float(settings.batch_window_ms) / 1000.0


_BROADCAST = frozenset({Kind.WATERMARK, Kind.CONFIG, Kind.TICK, Kind.DELETE, Kind.SUMMARY, Kind.WORKLOAD})


def node_partition(node: str, partitions: int) -> int:
    return zlib.crc32(node.encode()) % partitions


def _shard_of(cluster: str, shards: int) -> int:
    return zlib.crc32(cluster.encode()) % shards


def shards_for(envelope: Envelope, shards: int) -> range | tuple[int]:
    """Which sequencer partitions need `envelope`: a cluster's own shard, or all of them for what is not
    tied to one cluster (watermarks, profiles, clock ticks, deletions, load summaries).

    A pod goes to the shard of the cluster its ``eyrie.io/cluster`` label pins it to; without one, to the
    shard of its ``eyrie.io/federation`` label, else of the cluster ``default``. A workload is divided
    among the clusters of the shard it reaches, so the federation label names a cluster whose shard-mates
    share it (all clusters when there is one shard). Deletions go everywhere, so a workload's deletion
    reaches the shard that holds its replicas; results go to the shard of the cluster their binding names,
    which is the shard that placed it."""
    if shards == 1:
        return (0,)
    if envelope.kind in _BROADCAST:
        return range(shards)
    value = envelope.value
    if envelope.kind is Kind.NODE:
        return (_shard_of(value.node.cluster, shards),)
    if envelope.kind is Kind.POD:
        labels = value.labels
        key = labels.get("eyrie.io/cluster", labels.get("eyrie.io/federation", "default"))
        return (_shard_of(key, shards),)
    if envelope.kind is Kind.RESULT:
        return (_shard_of(value.cluster or "default", shards),)
    return range(shards)


def short_topic(topics: Any, message: Any) -> str:
    return str(message.topic)[len(topics.settings.topic_prefix) :]


def _fields(topics: Any, message: Any) -> tuple[str, int, int, bytes | None, bytes | None]:
    return short_topic(topics, message), message.partition, message.offset, message.key, message.value


def decode_message(topics: Any, message: Any) -> Decoded:
    """A Faust record through the shared decoder (`streams.records`): a model or a dead letter."""
    return decode_record(*_fields(topics, message), full_topic=message.topic)


def decode_messages(topics: Any, message: Any) -> list[Decoded]:
    """`decode_message` for topics whose records may carry an array of events (`streams.records`)."""
    return decode_records(*_fields(topics, message), full_topic=message.topic)


def envelope_of(topics: Any, message: Any) -> Envelope | DeadLetter | None:
    """A Faust record as a sequencer envelope (`streams.core.ingress`)."""
    return envelope_from_record(*_fields(topics, message), message.headers, full_topic=message.topic)


async def send(
    topics: Any, short_topic: str, key: bytes | None, value: bytes, partition: int | None = None
) -> None:
    """Queue one record on the app's producer. Straight to the Kafka producer rather than through
    `Topic.send`, whose per-record bookkeeping cost more than placing the pod; Faust still flushes this
    producer before it commits offsets, so an output is never lost behind a committed input."""
    await topics.app.producer.send(topics.settings.topic(short_topic), key, value, partition, None, None)


async def send_envelopes(topics: Any, envelopes: Sequence[Envelope]) -> dict[int, str]:
    """Each shard's envelopes of the batch, in order, in as few sequencer records as ``max_message_bytes``
    allows (one, at the usual sizes: Kafka and Faust cost per record, not per byte). Returns the envelopes
    that cannot travel at all (index → reason) for the caller to dead-letter: the producer raises on an
    oversized record, and an agent that raises stops consuming."""
    if not envelopes:
        return {}
    settings = topics.settings
    limit = settings.max_value_bytes
    per_shard: dict[int, list[int]] = {}
    for index, envelope in enumerate(envelopes):
        for shard in shards_for(envelope, settings.shards):
            per_shard.setdefault(shard, []).append(index)
    refused: dict[int, str] = {}
    for shard, indices in per_shard.items():
        records, unsent = pack_envelopes([envelopes[i] for i in indices], limit)
        refused.update((indices[i], reason) for i, reason in unsent.items())
        for record in records:
            await send(topics, "sequencer", f"shard-{shard}".encode(), record, shard)
    return refused


async def send_dead_letter(topics: Any, letter: DeadLetter) -> None:
    topics.observe.dead_letters.labels(letter.topic).inc()
    await send(topics, "dead-letters", letter.topic.encode(), encode(letter))


class TableBytes(MutableMapping[str, bytes]):
    """A Faust table seen as ``str → bytes``. The table itself stores raw bytes keys, which is what comes
    back from its changelog on recovery, so keys are encoded here, in one place."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def __getitem__(self, key: str) -> bytes:
        value = self.table.get(key.encode())
        if value is None:
            raise KeyError(key)
        return bytes(value)

    def __setitem__(self, key: str, value: bytes) -> None:
        self.table[key.encode()] = value

    def __delitem__(self, key: str) -> None:
        del self.table[key.encode()]

    def __iter__(self) -> Iterator[str]:
        return (bytes(key).decode() for key in self.table)

    def __len__(self) -> int:
        return len(self.table)


class _KeyPartitionedTable(faust.Table[bytes, bytes]):
    """Changelog partition by the key's hash, not by the event being processed (Faust's default): agents
    write keys while handling records of several topics, in batches, so "the current event's partition"
    would scatter one key over partitions. (Faust's own `use_partitioner` needs producer metadata for the
    changelog topic that it does not load.)

    Writes are not sent one by one through Faust's producer buffer (a future, a buffer entry, a hand-over
    and a callback per record: about a quarter of the applier's CPU at 500 pods/s, one ledger write per
    pod). They are collected, the last value of each key, and `send_unsent_changes` sends them straight
    to the producer; `streams.batching.take_batches` calls it before it acknowledges the batch that made
    them, so a commit never passes an event whose table change was not sent."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.unsent: dict[bytes, bytes | None] = {}
        # Agents share the tables: one that returns from sending must know that every write made before
        # it asked is with the producer, including writes another agent took and is still handing over.
        self._sending = asyncio.Lock()

    def partition_for_key(self, key: Any) -> int:
        return _key_partition(key, self.partitions)

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
                partition = _key_partition(key, self.partitions)
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


# Faust's lines, under Faust's logger (see `streams.fetching`'s loggers for why it is set here).
_KeyPartitionedTable.logger = faust.Table.logger


def _key_partition(key: Any, partitions: int | None) -> int:
    return zlib.crc32(bytes(key)) % int(partitions or 1)


class _KeyPartitionedRocksDB(RocksDBStore):
    """Faust's RocksDB store files a key under the partition of the event being processed, and asserts there
    is one; these tables are written from `take_batches` batches, where there is none (the "don't write tables
    from inside take" pitfall), and their changelog is partitioned by key. So keys are filed, found and
    deleted in the partition their changelog records go to, which is also where recovery puts them."""

    def _partition(self, key: bytes) -> int:
        return _key_partition(key, self.table.partitions)

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


def bytes_table(app: faust.App, name: str, partitions: int) -> TableBytes:
    """A table of raw bytes with a changelog (and a standby replica when workers are several)."""
    schema: Any = faust.Schema(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    table = _KeyPartitionedTable(
        app,
        name=name,
        default=None,
        schema=schema,
        key_type=bytes,  # the changelog's serializer on recovery comes from these, not from the schema
        value_type=bytes,
        partitions=partitions,
        beacon=app.tables.beacon,
    )
    return TableBytes(app.tables.add(table))
