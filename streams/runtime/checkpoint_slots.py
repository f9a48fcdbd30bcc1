"""Checkpoints on a compacted topic: two slots per owner, each a checkpoint's parts and a manifest.

An owner is what a checkpoint holds the state of: a placement shard (``shard-3``, on the checkpoints
topic) or a partition of one of the applier's tables (``ledger-pods-1``, on the table-checkpoints topic).
A checkpoint is written into the owner's older slot, its parts first and then the manifest naming them
(offset, part count, SHA-256, size), so a write cut short leaves the slot's previous manifest the one read,
and the other slot stays the fallback while one is written. docs/checkpoints.md describes the records.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from aiokafka.errors import KafkaTimeoutError

from streams.core.checkpoint import CheckpointError
from streams.runtime.security import client_security, consumer_limits
from streams.settings import Settings

__all__ = [
    "READ_FETCH_WAIT_MS",
    "SLOTS",
    "CheckpointRecords",
    "checkpoint_records",
    "next_slot",
    "part_limit",
    "read_checkpoints",
    "read_consumer",
    "read_range",
    "slot_key",
]

SLOTS = ("a", "b")
"""An owner's two checkpoint slots, written in turn: the older one is the fallback while the newer is
written."""

PART_SHARE = 0.9
"""Of ``max_message_bytes``, what one checkpoint part may take (the rest is the record's own overhead)."""

READ_FETCH_WAIT_MS = 10

READ_WINDOW = 8
"""Records of a checkpoints partition `read_checkpoints` reads first, from its end; each further window
back is four times longer."""


def slot_key(owner: str, slot: str, part: int | None = None) -> bytes:
    """The checkpoint topics' keys: a manifest per owner and slot, and the parts it names."""
    return f"{owner}/{slot}".encode() + (b"" if part is None else f"/part-{part}".encode())


def next_slot(slots: dict[str, int]) -> str:
    """The slot a new checkpoint goes to, given the readable ones kept (slot → offset): an empty one, or the
    older."""
    return min(SLOTS, key=lambda name: slots.get(name, -1))


@dataclass(slots=True)
class CheckpointRecords:
    """The latest value of the keys of one owner's checkpoints that its newest checkpoints need
    (`read_checkpoints`)."""

    owner: str
    values: dict[bytes, bytes] = field(default_factory=dict)
    scanned: int = 0
    """Records read to find them."""

    def manifest(self, slot: str) -> dict[str, Any] | None:
        raw = self.values.get(slot_key(self.owner, slot))
        if raw is None:
            return None
        try:
            manifest = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return {"error": "its manifest is not JSON"}
        return manifest if isinstance(manifest, dict) else {"error": "its manifest is not an object"}

    def checkpoint(self, slot: str) -> tuple[bytes, int]:
        """The slot's checkpoint bytes and offset; `CheckpointError` when they cannot be put together."""
        manifest = self.manifest(slot)
        if manifest is None:
            raise CheckpointError("no checkpoint")
        if "error" in manifest:
            raise CheckpointError(str(manifest["error"]))
        parts, digest, offset = manifest.get("parts"), manifest.get("sha256"), manifest.get("offset")
        if not isinstance(parts, int) or not isinstance(digest, str) or not isinstance(offset, int):
            raise CheckpointError("its manifest lacks parts, sha256 or offset")
        chunks = [self.values.get(slot_key(self.owner, slot, i)) for i in range(parts)]
        data = b"".join(chunk or b"" for chunk in chunks)
        if any(chunk is None for chunk in chunks) or hashlib.sha256(data).hexdigest() != digest:
            raise CheckpointError("its parts do not match its manifest (a write cut short, or corrupt)")
        return data, offset

    def readable(self) -> tuple[list[tuple[int, str, bytes]], dict[str, str]]:
        """The slots whose checkpoint can be put together, as (offset, slot, bytes), newest first; and the
        slots with a manifest whose checkpoint cannot, each with the reason."""
        found: list[tuple[int, str, bytes]] = []
        unreadable: dict[str, str] = {}
        for slot in SLOTS:
            if self.manifest(slot) is None:
                continue
            try:
                data, offset = self.checkpoint(slot)
            except CheckpointError as exc:
                unreadable[slot] = exc.reason
                continue
            found.append((offset, slot, data))
        return sorted(found, reverse=True), unreadable


def checkpoint_records(
    owner: str, slot: str, data: bytes, offset: int, limit: int
) -> list[tuple[bytes, bytes]]:
    """(key, value) of a checkpoint in `slot`: its parts of at most `limit` bytes, then the manifest that
    names them, which is what makes the slot's new checkpoint the one read."""
    size = max(1, limit)
    parts = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
    manifest = {
        "offset": offset,
        "parts": len(parts),
        "sha256": hashlib.sha256(data).hexdigest(),
        "bytes": len(data),
        "written_at": time.time(),
    }
    records = [(slot_key(owner, slot, i), part) for i, part in enumerate(parts)]
    return [*records, (slot_key(owner, slot), orjson.dumps(manifest))]


def part_limit(max_message_bytes: int) -> int:
    return int(max_message_bytes * PART_SHARE)


def read_consumer(settings: Settings) -> AIOKafkaConsumer:
    """A consumer for a restore's reads: records that exist, up to an end offset read first."""
    limits = consumer_limits(settings, 32 * 1024 * 1024, 8 * 1024 * 1024)
    # Waiting for new records would only delay these reads, and the first fetch after `assign` goes to the
    # log's end before the seek lands: with the pipeline's fetch wait, every read of a takeover (the
    # checkpoint, the tail) would wait that long there.
    limits["fetch_max_wait_ms"] = READ_FETCH_WAIT_MS
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        **limits,
        **client_security(settings),
    )


async def read_range(
    settings: Settings, tp: TopicPartition, start: int | None, end: int, timeout_s: float | None = None
) -> list[ConsumerRecord[bytes, bytes]]:
    """The records of `tp` from `start` (the partition's first when None) up to `end`, read in bulk by a
    `read_consumer` of its own. Past `timeout_s` (if given) it raises `KafkaTimeoutError`."""
    records: list[ConsumerRecord[bytes, bytes]] = []
    consumer = read_consumer(settings)
    await consumer.start()
    try:
        consumer.assign([tp])
        if start is None:
            await consumer.seek_to_beginning(tp)
        else:
            consumer.seek(tp, start)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while await consumer.position(tp) < end:
            if deadline is not None and time.monotonic() > deadline:
                raise KafkaTimeoutError(f"{tp.topic}/{tp.partition} not read to {end} in {timeout_s:g} s")
            fetched = await consumer.getmany(tp, timeout_ms=1000, max_records=10_000)
            records += [record for record in fetched.get(tp, []) if record.offset < end]
    finally:
        await consumer.stop()
    return records


async def read_checkpoints(
    settings: Settings, topic: str, partition: int, owner: str, consumer: AIOKafkaConsumer | None = None
) -> CheckpointRecords:
    """The latest value of each key of `owner`'s checkpoints in `topic`'s `partition` from the newest
    manifest of each slot and the parts it names, read from the partition's end backwards in growing windows
    until those are found (or the partition's start is reached). Compaction never touches the active
    segment, which holds every checkpoint written since it began (one per `checkpoint_every_s` for up to
    the topic's ``segment.ms``, or a whole generated history): reading all of it would make a takeover's
    cost grow with the owner's uptime. A key's latest value lies in the window nearest the end that holds
    the key, so what is found is what reading the whole partition would find. With `consumer` (started),
    that consumer is assigned the partition and left running."""
    own = consumer is None
    reader = read_consumer(settings) if consumer is None else consumer
    tp = TopicPartition(topic, partition)
    records = CheckpointRecords(owner)
    latest: dict[bytes, bytes | None] = {}
    """Key → latest value (None: a tombstone) in the windows read so far."""
    if own:
        await reader.start()
    try:
        reader.assign([tp])
        first = (await reader.beginning_offsets([tp]))[tp]
        upto = (await reader.end_offsets([tp]))[tp]
        window = READ_WINDOW
        while upto > first:
            start = max(first, upto - window)
            older: dict[bytes, bytes | None] = {}
            reader.seek(tp, start)
            while await reader.position(tp) < upto:
                batches = await reader.getmany(tp, timeout_ms=1000, max_records=1000)
                for message in batches.get(tp, []):
                    if message.offset >= upto:
                        break
                    records.scanned += 1
                    if message.key is not None:
                        older[message.key] = message.value
            for key, value in older.items():
                latest.setdefault(key, value)
            upto, window = start, window * 4
            if _complete(owner, latest):
                break
    finally:
        if own:
            await reader.stop()
    records.values = {key: value for key, value in latest.items() if value is not None}
    return records


def _complete(owner: str, latest: dict[bytes, bytes | None]) -> bool:
    """Whether `latest` holds both slots' manifests and every part each names (a manifest that cannot be
    read needs nothing more: an older value of its key is superseded)."""
    for slot in SLOTS:
        key = slot_key(owner, slot)
        if key not in latest:
            return False
        raw = latest[key]
        try:
            manifest = orjson.loads(raw) if raw is not None else None
        except orjson.JSONDecodeError:
            continue
        parts = manifest.get("parts") if isinstance(manifest, dict) else None
        if isinstance(parts, int) and any(slot_key(owner, slot, i) not in latest for i in range(parts)):
            return False
    return True
