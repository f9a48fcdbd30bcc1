"""Table checkpoints: one partition of a key-value table (the applier's ledger) at a changelog offset.

A table's changelog is compacted, but a compacted log still holds every deletion's tombstone for
``delete.retention.ms`` and everything in its open segment, so an applier that read it from the start read
every pod deleted in the last ten minutes, however few were live. A checkpoint holds the partition's
entries as they stood after the changelog's records before `offset`; recovery loads it and reads only the
records from `offset` on (`streams.faust_overrides.tables`).

The bytes are the shard checkpoints' container (`streams.core.checkpoint.write_container`: a magic prefix,
one zlib stream of a JSON header and raw blobs, never pickle), with the header ``{"format", "version",
"table", "partition", "offset", "taken_at", "entries", "blobs"}`` and four blobs: the keys' lengths and the
values' lengths (little-endian uint32 each), then the keys and the values one after another. ``taken_at``
is the Unix time the entries were read, which tells a reader whether the tombstones after `offset` can
still be in the changelog (docs/checkpoints.md#table-checkpoints).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeGuard

import numpy as np

from streams.core.checkpoint import CheckpointError, read_container, write_container

__all__ = [
    "TABLE_FORMAT",
    "TABLE_VERSION",
    "TableCheckpoint",
    "decode_table_checkpoint",
    "encode_table_checkpoint",
]

TABLE_FORMAT = "eyrie.table-checkpoint"
TABLE_VERSION = 1
"""Bumped whenever a checkpoint written by this code could be read wrongly by the previous code, or the
other way round: an applier refuses any other version and reads the changelog instead."""


@dataclass(frozen=True, slots=True)
class TableCheckpoint:
    table: str
    partition: int
    offset: int
    """The changelog offset recovery resumes at: the entries reflect every record before it."""
    taken_at: float
    entries: dict[bytes, bytes]
    tail: int = 0
    """Changelog records applied to `entries` after the checkpoint was decoded (not stored): `offset` then
    stands after them."""


def checkpoint_due(since: int, entries: int, age_s: float, every: int, every_s: float) -> bool:
    """Whether a partition is due a checkpoint, `since` changelog records and `age_s` seconds after its
    last, which held `entries` entries: once the records since then are as many as the entries (and at
    least `every`), so that the bytes checkpoints write stay about those of the changelog and a recovery
    reads at most about twice the partition's entries; or `every_s` after the last while it changes, so
    that the tail after the newest checkpoint stays short in time too (0: neither by count nor by time)."""
    if since == 0:
        return False
    return bool((every and since >= max(every, entries)) or (every_s and age_s >= every_s))


def encode_table_checkpoint(
    table: str, partition: int, offset: int, taken_at: float, entries: Sequence[tuple[bytes, bytes]]
) -> bytes:
    keys = [key for key, _ in entries]
    values = [value for _, value in entries]
    header = {
        "format": TABLE_FORMAT,
        "version": TABLE_VERSION,
        "table": table,
        "partition": partition,
        "offset": offset,
        "taken_at": taken_at,
        "entries": len(entries),
    }
    blobs = [
        np.fromiter(map(len, keys), dtype="<u4", count=len(keys)).tobytes(),
        np.fromiter(map(len, values), dtype="<u4", count=len(values)).tobytes(),
        b"".join(keys),
        b"".join(values),
    ]
    return write_container(header, blobs)


def decode_table_checkpoint(data: bytes) -> TableCheckpoint:
    """The checkpoint's entries and where it stands; `CheckpointError` (one line) for anything corrupt or
    of another format or version."""
    header, blobs = read_container(data)
    if header.get("format") != TABLE_FORMAT:
        raise CheckpointError("not a table checkpoint")
    if header.get("version") != TABLE_VERSION:
        raise CheckpointError(
            f"table checkpoint format version {header.get('version')!r}; this applier reads version "
            f"{TABLE_VERSION}"
        )
    table, partition, offset = header.get("table"), header.get("partition"), header.get("offset")
    taken_at, count = header.get("taken_at"), header.get("entries")
    if not isinstance(table, str) or not _count(partition) or not _count(offset) or not _count(count):
        raise CheckpointError("corrupt table checkpoint (bad table, partition, offset or entries)")
    if not isinstance(taken_at, (int, float)) or isinstance(taken_at, bool):
        raise CheckpointError("corrupt table checkpoint (bad taken_at)")
    if len(blobs) != 4 or len(blobs[0]) != 4 * count or len(blobs[1]) != 4 * count:
        raise CheckpointError("corrupt table checkpoint (blobs do not match its entries)")
    key_ends = np.cumsum(np.frombuffer(blobs[0], dtype="<u4"), dtype=np.int64).tolist()
    value_ends = np.cumsum(np.frombuffer(blobs[1], dtype="<u4"), dtype=np.int64).tolist()
    keys, values = bytes(blobs[2]), bytes(blobs[3])
    if (key_ends[-1] if count else 0) != len(keys) or (value_ends[-1] if count else 0) != len(values):
        raise CheckpointError("corrupt table checkpoint (lengths do not add up)")
    entries: dict[bytes, bytes] = {}
    key_at = value_at = 0
    for key_end, value_end in zip(key_ends, value_ends, strict=True):
        entries[keys[key_at:key_end]] = values[value_at:value_end]
        key_at, value_at = key_end, value_end
    return TableCheckpoint(table, partition, offset, float(taken_at), entries)


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
