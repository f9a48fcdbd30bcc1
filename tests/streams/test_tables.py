"""The agents' byte tables (`streams.runtime.agents.common.bytes_table`) on their stores.

Faust's own RocksDB store files a key under the partition of the event being processed and asserts there is
one; the applier and the metrics agent write from `take_events` batches, where there is none, so with
``store: rocksdb://`` the applier crashed on its first node event. And the tables collect their changelog
records for the batch to send, and load a checkpoint into a partition that becomes theirs. No broker is
needed: the stores are exercised directly, as the agents' writes and a rebalance reach them (the records
sent are read back in tests/streams/test_pipeline.py, checkpoints end to end in
tests/streams/test_ledger_recovery_kafka.py)."""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import faust
import pytest
from aiokafka.structs import RecordMetadata, TopicPartition
from faust.types import TP

from streams.core.table_checkpoint import TableCheckpoint
from streams.runtime.agents.common import bytes_table

PARTITIONS = 4


def rocksdb_table(tmp_path: Path) -> Any:
    app = faust.App(
        "eyrie-test-tables", store="rocksdb://", datadir=str(tmp_path), broker="kafka://127.0.0.1:1"
    )
    return bytes_table(app, "ledger-pods", PARTITIONS).table


def rocksdb_store(tmp_path: Path) -> Any:
    return rocksdb_table(tmp_path).data


def test_a_rocksdb_table_is_written_and_read_outside_any_event_in_the_partition_of_its_key(tmp_path):
    store = rocksdb_store(tmp_path)
    uids = [f"pod-{i}".encode() for i in range(20)]
    for uid in uids:
        store[uid] = b"entry of " + uid
    assert all(store[uid] == b"entry of " + uid for uid in uids)
    assert all(uid in store for uid in uids) and b"pod-none" not in store
    for uid in uids:
        partition = zlib.crc32(uid) % PARTITIONS  # where the changelog record goes, and recovery puts it
        assert store._db_for_partition(partition).get(uid) == b"entry of " + uid


def test_a_deleted_key_is_gone_from_a_rocksdb_table(tmp_path):
    store = rocksdb_store(tmp_path)
    store[b"n1"] = b"node"
    del store[b"n1"]
    assert b"n1" not in store


def test_writes_wait_as_the_last_value_of_each_key_until_the_batch_sends_them(tmp_path):
    table = rocksdb_table(tmp_path)
    table[b"pod-1"] = b"assumed"
    table[b"pod-2"] = b"bound"
    table[b"pod-1"] = b"bound"
    del table[b"pod-2"]
    assert table.unsent == {b"pod-1": b"bound", b"pod-2": None}  # a tombstone for the deleted key
    assert table[b"pod-1"] == b"bound" and b"pod-2" not in table


def test_a_sent_changelog_record_becomes_the_persisted_offset_of_its_partition(tmp_path):
    table = rocksdb_table(tmp_path)
    sent: asyncio.Future[RecordMetadata] = asyncio.new_event_loop().create_future()
    tp = TopicPartition("eyrie-test-tables-ledger-pods-changelog", 3)
    sent.set_result(RecordMetadata(tp.topic, tp.partition, tp, 41, -1, 0, 0))
    table._persist_offset(sent)
    assert table.data.persisted_offset(tp) == 41


# ------------------------------------------------------------------------------- checkpoint restores


def memory_table(tmp_path: Path) -> Any:
    app = faust.App(
        "eyrie-test-tables", store="memory://", datadir=str(tmp_path), broker="kafka://127.0.0.1:1"
    )
    return bytes_table(app, "ledger-pods", PARTITIONS).table


def keys_of(partition: int, count: int, prefix: str) -> list[bytes]:
    keys = (f"{prefix}-{i}".encode() for i in range(10_000))
    return [key for key in keys if zlib.crc32(key) % PARTITIONS == partition][:count]


class OneCheckpoint:
    """A `TableCheckpointer` holding one checkpoint, of partition 2 at offset 50, and noting what it is
    asked for."""

    every, every_s = 0, 0.0

    def __init__(self) -> None:
        self.asked: list[tuple[int, int | None]] = []
        self.entries = {key: b"restored" for key in keys_of(2, 5, "restored")}

    async def load(self, table: str, tp: TP, local_offset: int | None) -> TableCheckpoint | None:
        self.asked.append((tp.partition, local_offset))
        return TableCheckpoint(table, 2, 50, 0.0, self.entries) if tp.partition == 2 else None

    async def write(self, *args: Any) -> None:
        raise AssertionError("not written here")


@pytest.mark.parametrize(
    ("make", "local"),
    [
        pytest.param(
            memory_table, None, id="The memory store loads a checkpoint over a partition it did not own."
        ),
        pytest.param(
            rocksdb_table, 7, id="The RocksDB store loads a newer checkpoint over its own older local state."
        ),
    ],
)
def test_a_partition_that_becomes_active_is_restored_from_its_checkpoint_and_read_from_its_offset_on(
    make: Callable[[Path], Any], local: int | None, tmp_path: Path
) -> None:
    table = make(tmp_path)
    store = table.data
    changelog = table.changelog_topic.get_topic_name()
    tps = {TP(changelog, partition) for partition in range(PARTITIONS)}
    kept = {key: b"kept" for partition in (0, 1, 3) for key in keys_of(partition, 3, "kept")}
    for key, value in {**kept, **{key: b"stale" for key in keys_of(2, 3, "stale")}}.items():
        store[key] = value
    if local is not None:
        for tp in tps:
            store.set_persisted_offset(tp, local)
    checkpointer = OneCheckpoint()
    table.checkpointer = checkpointer

    asyncio.run(store.restore(tps | {TP("another-topic", 2)}))

    assert sorted(checkpointer.asked) == [(partition, local) for partition in range(PARTITIONS)]
    assert sorted(store.partition_items(2)) == sorted(checkpointer.entries.items())
    assert {key: store[key] for key in kept} == kept
    assert store.persisted_offset(TP(changelog, 2)) == 49  # Faust's recovery reads from offset 50 on
    assert store.persisted_offset(TP(changelog, 0)) == local
    # Partitions that stay active are not loaded again.
    asyncio.run(store.restore(tps))
    assert len(checkpointer.asked) == PARTITIONS
