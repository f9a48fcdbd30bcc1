"""The agents' byte tables on the RocksDB store (`streams.agents.common.bytes_table`).

Faust's own RocksDB store files a key under the partition of the event being processed and asserts there is
one; the applier and the metrics agent write from `take_events` batches, where there is none, so with
``store: rocksdb://`` the applier crashed on its first node event. No broker is needed: the store is
exercised directly, as the agents' writes reach it."""

from __future__ import annotations

import zlib
from pathlib import Path

import faust

from streams.agents.common import bytes_table

PARTITIONS = 4


def rocksdb_store(tmp_path: Path) -> object:
    app = faust.App(
        "eyrie-test-tables", store="rocksdb://", datadir=str(tmp_path), broker="kafka://127.0.0.1:1"
    )
    return bytes_table(app, "ledger-pods", PARTITIONS).table.data


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
