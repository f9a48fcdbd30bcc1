"""The agents' byte tables on the RocksDB store (`streams.runtime.agents.common.bytes_table`).

Faust's own RocksDB store files a key under the partition of the event being processed and asserts there is
one; the applier and the metrics agent write from `take_events` batches, where there is none, so with
``store: rocksdb://`` the applier crashed on its first node event. And the tables collect their changelog
records for the batch to send. No broker is needed: the store is exercised directly, as the agents' writes
reach it (the records sent are read back in tests/streams/test_pipeline.py)."""

from __future__ import annotations

import asyncio
import zlib
from pathlib import Path
from typing import Any

import faust
from aiokafka.structs import RecordMetadata, TopicPartition

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
