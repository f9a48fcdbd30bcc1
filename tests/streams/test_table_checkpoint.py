"""Table checkpoints (the applier's ledger): their bytes read back as the entries written, a checkpoint that
cannot be read says why in one line, and one that cannot be trusted for the changelog it would stand for is
set aside."""

from __future__ import annotations

import time

import orjson
import pytest

from streams.core.checkpoint import CheckpointError, encode_checkpoint, read_container, write_container
from streams.core.shard import Shard
from streams.core.table_checkpoint import (
    TABLE_VERSION,
    TableCheckpoint,
    checkpoint_due,
    decode_table_checkpoint,
    encode_table_checkpoint,
)
from streams.faust_overrides.tables import TOMBSTONE_RETENTION_S
from streams.runtime.checkpoint_slots import CheckpointRecords, slot_key
from streams.runtime.table_checkpoints import TableCheckpoints, table_checkpoint_write

# ------------------------------------------------------------------------------------------- builders


def entries(count: int) -> list[tuple[bytes, bytes]]:
    return [
        (f"pod-{i:05d}".encode(), orjson.dumps({"node": f"n{i % 7}", "state": "bound", "attempt": i % 3}))
        for i in range(count)
    ]


def checkpoint_bytes(count: int = 50, offset: int = 120) -> bytes:
    return encode_table_checkpoint("ledger-pods", 1, offset, 1_000.0, entries(count))


def rewritten(data: bytes, **changes: object) -> bytes:
    header, blobs = read_container(data)
    header.update(changes)
    header.pop("blobs")
    return write_container(header, [bytes(blob) for blob in blobs])


def checkpoint(offset: int, age_s: float) -> TableCheckpoint:
    return TableCheckpoint("ledger-pods", 0, offset, time.time() - age_s, {})


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    "written",
    [
        pytest.param([], id="An empty partition reads back empty."),
        pytest.param(entries(1), id="One entry reads back."),
        pytest.param(entries(5_000), id="Five thousand entries read back in order."),
        pytest.param(
            [(b"\x00\xff", b""), (b"k\n", b"\x00" * 300)],
            id="Binary keys and empty or binary values read back byte for byte.",
        ),
    ],
)
def test_a_table_checkpoint_reads_back_as_the_entries_written(written: list[tuple[bytes, bytes]]) -> None:
    data = encode_table_checkpoint("ledger-pods", 3, 77, 1_234.5, written)
    read = decode_table_checkpoint(data)
    assert (read.table, read.partition, read.offset, read.taken_at) == ("ledger-pods", 3, 77, 1_234.5)
    assert list(read.entries.items()) == written


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        pytest.param(checkpoint_bytes()[:-40], "corrupt checkpoint", id="A checkpoint cut short is corrupt."),
        pytest.param(
            rewritten(checkpoint_bytes(), version=TABLE_VERSION + 1),
            f"table checkpoint format version {TABLE_VERSION + 1}; this applier reads version "
            f"{TABLE_VERSION}",
            id="A checkpoint of a newer format version is refused, naming both versions.",
        ),
        pytest.param(
            encode_checkpoint(Shard(), 5),
            "not a table checkpoint",
            id="A shard checkpoint is not read as a table's.",
        ),
        pytest.param(
            rewritten(checkpoint_bytes(), entries=51),
            "corrupt table checkpoint (blobs do not match its entries)",
            id="A checkpoint whose entry count does not match its lengths is corrupt.",
        ),
        pytest.param(
            rewritten(checkpoint_bytes(), offset=-1),
            "corrupt table checkpoint (bad table, partition, offset or entries)",
            id="A checkpoint with a negative offset is corrupt.",
        ),
        pytest.param(b"PNG" + checkpoint_bytes(), "not an eyrie checkpoint", id="Other bytes are refused."),
    ],
)
def test_a_table_checkpoint_that_cannot_be_read_says_why(data: bytes, reason: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        decode_table_checkpoint(data)
    assert raised.value.reason.startswith(reason)
    assert "\n" not in raised.value.reason


@pytest.mark.parametrize(
    ("offset", "end", "age_s", "unsafe"),
    [
        pytest.param(100, 100, 0.0, None, id="A fresh checkpoint at the changelog's end stands for it."),
        pytest.param(
            100,
            140,
            5.0,
            None,
            id="A checkpoint a few seconds old with records after it stands for the changelog.",
        ),
        pytest.param(
            100,
            100,
            TOMBSTONE_RETENTION_S * 10,
            None,
            id="An old checkpoint with no record after it stands for the changelog: nothing was dropped.",
        ),
        pytest.param(
            100,
            101,
            TOMBSTONE_RETENTION_S,
            "records follow it",
            id="An old checkpoint with records after it is set aside: a tombstone among them may be gone.",
        ),
        pytest.param(
            100,
            40,
            0.0,
            "past the changelog's end",
            id="A checkpoint past the changelog's end is set aside: the changelog is not the one it saw.",
        ),
    ],
)
def test_a_checkpoint_is_trusted_only_where_the_changelog_still_holds_what_follows_it(
    offset: int, end: int, age_s: float, unsafe: str | None
) -> None:
    reason = TableCheckpoints.unsafe(checkpoint(offset, age_s), end)
    assert (reason is None) if unsafe is None else (reason is not None and unsafe in reason)


@pytest.mark.parametrize(
    ("slots", "slot"),
    [
        pytest.param({}, "a", id="With no checkpoint kept the first goes to slot a."),
        pytest.param({"a": 10}, "b", id="With slot a kept the next goes to the empty slot b."),
        pytest.param({"a": 30, "b": 20}, "b", id="With both kept the next replaces the older."),
    ],
)
def test_the_records_an_applier_writes_read_back_as_the_checkpoint_in_the_older_slot(
    slots: dict[str, int], slot: str
) -> None:
    written, size, records = table_checkpoint_write("ledger-pods", 2, 500, 9.0, entries(400), slots, 500)
    assert written == slot
    assert records[-1][0] == slot_key("ledger-pods-2", slot)  # the manifest last
    assert len(records) > 2  # parts of at most 90 % of the limit
    data, offset = CheckpointRecords("ledger-pods-2", dict(records)).checkpoint(slot)
    assert (offset, len(data)) == (500, size)
    assert list(decode_table_checkpoint(data).entries.items()) == entries(400)


@pytest.mark.parametrize(
    ("since", "entries", "age_s", "due"),
    [
        pytest.param(0, 0, 1e9, False, id="A partition that has not changed is never due."),
        pytest.param(1_999, 0, 1.0, False, id="A small partition is not due before the fewest records."),
        pytest.param(2_000, 0, 1.0, True, id="A small partition is due at the fewest records."),
        pytest.param(
            10_000, 20_000, 1.0, False, id="A large partition is not due before as many records as it holds."
        ),
        pytest.param(
            20_000, 20_000, 1.0, True, id="A large partition is due once as many records as it holds."
        ),
        pytest.param(
            1, 20_000, 30.0, True, id="A partition that changed is due once the interval has passed."
        ),
    ],
)
def test_a_partition_is_due_a_checkpoint_by_records_as_many_as_its_entries_or_by_time(
    since: int, entries: int, age_s: float, due: bool
) -> None:
    assert checkpoint_due(since, entries, age_s, 2_000, 30.0) is due


def slot_records(slot: str, offset: int, manifest_only: bool = False) -> dict[bytes, bytes]:
    _, _, records = table_checkpoint_write("ledger-pods", 2, offset, 9.0, entries(50), {}, 500)
    renamed = {key.replace(b"/a", f"/{slot}".encode(), 1): value for key, value in records}
    return {key: value for key, value in renamed.items() if not manifest_only or key.count(b"/") == 1}


@pytest.mark.parametrize(
    ("values", "readable", "unreadable"),
    [
        pytest.param({}, [], [], id="Without a manifest nothing is readable and nothing is reported."),
        pytest.param(
            {**slot_records("a", 100), **slot_records("b", 300)},
            [(300, "b"), (100, "a")],
            [],
            id="Both slots read back, the newest first.",
        ),
        pytest.param(
            {**slot_records("a", 100), **slot_records("b", 300, manifest_only=True)},
            [(100, "a")],
            ["b"],
            id="A slot whose parts are missing is reported unreadable, the other still read.",
        ),
    ],
)
def test_the_readable_slots_come_newest_first_and_the_others_with_their_reason(
    values: dict[bytes, bytes], readable: list[tuple[int, str]], unreadable: list[str]
) -> None:
    found, refused = CheckpointRecords("ledger-pods-2", values).readable()
    assert [(offset, slot) for offset, slot, _ in found] == readable
    assert sorted(refused) == unreadable
    assert all("do not match" in reason for reason in refused.values())
