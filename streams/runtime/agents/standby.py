"""The hot standby: a worker's copy of placement shards it does not own, kept current, never heard.

With ``Settings.standby_shards`` a worker follows up to that many sequencer partitions it does not own:
a plain Kafka consumer (no group, so it never joins the placement group's assignment) restores each
followed shard from its newest readable checkpoint and then applies the partition's records as they are
written, into a `Shard` of its own, with every output discarded. It has no producer: it sends no binding,
no dead letter and no checkpoint.

It applies a record only once the owner is done with it: below the placement group's committed offset, or
below the offset of the shard's newest checkpoint manifest (whose outputs the owner flushed before writing
it). That is exactly where a worker taking the shard over starts: Faust hands it the partition from the
committed offset, and `PlacementAgent.restore` skips to a newer checkpoint. A follower is therefore never
ahead of a fresh takeover, and the takeover (`Standby.adopt`) applies only what the follower holds or has
not fetched between its own offset and that point. Placement is a pure function of the partition's
envelopes, so the adopted shard decides what a shard restored from a checkpoint would; the records the
dead owner applied after its last commit are applied again with their outputs sent, as after any
restore, and the applier's idempotence per uid absorbs the repeats. A follower that is ahead anyway (the
group's offset went back) is dropped, and the shard restored as if there were no standby.

A partition the worker comes to own stops being fetched; its follower waits for the placement agent to
adopt it on the partition's first record. A partition that leaves the topic, or that the worker should no
longer follow, is dropped with its memory. Records the owner deleted behind its checkpoints before the
follower read them (a follower that fell far behind) restore the follower from the checkpoint again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError, OffsetOutOfRangeError

from schemas.exceptions import InvalidInput
from streams.core.checkpoint import CheckpointError, decode_checkpoint
from streams.core.sequencer import Envelope, decode_envelopes
from streams.core.shard import Shard
from streams.faust_overrides.batching import Breather
from streams.runtime.agents.placement import _rebuild, read_shard_checkpoints, shard_owner
from streams.runtime.app import app_id
from streams.runtime.checkpoint_slots import SLOTS, slot_key
from streams.runtime.security import client_security, consumer_limits
from streams.settings import Settings

__all__ = ["HOLD_LIMIT", "POLL_S", "Follower", "Standby", "followed"]

log = logging.getLogger(__name__)

POLL_S = 0.5
"""How often the standby reads the placement group's committed offsets: a takeover finds the follower at
most this much of the owner's last commits behind, which the adoption applies from what it holds."""

HOLD_LIMIT = 50_000
"""Sequencer records a follower holds fetched but not yet applicable (past the group's committed offset)
before it stops fetching that partition: the memory of a standby whose owner stopped committing."""


def followed(unowned: set[int], limit: int, rank: int) -> set[int]:
    """Which of the `unowned` partitions to follow, at most `limit`: the sorted list rotated by `rank`, so
    workers of different ranks spread over different shards when each follows fewer than all."""
    ordered = sorted(unowned)
    if limit <= 0 or not ordered:
        return set()
    start = rank % len(ordered)
    return set((ordered[start:] + ordered[:start])[:limit])


@dataclass(slots=True)
class Follower:
    """One followed shard."""

    shard: Shard
    next_offset: int
    """The sequencer offset of the next record to apply."""
    checkpointed: int = 0
    """The newest offset a checkpoint manifest of the shard names: the owner flushed every output of the
    records before it, and a takeover starts there if it is beyond the committed offset."""
    fetch_at: int = 0
    """The next sequencer offset to fetch."""
    checkpoints_at: int = 0
    """The next offset of the shard's checkpoint partition to read (for its manifests)."""
    held: deque[tuple[int, bytes]] = field(default_factory=deque)
    """Fetched records not applied yet: (offset, value)."""

    def applicable(self, committed: int) -> int:
        return max(committed, self.checkpointed)


class Standby:
    """The followed shards of one worker and the consumer feeding them (`run`, one task of the app)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.group = app_id(settings, "worker")
        self.sequencer = settings.topic("sequencer")
        self.checkpoints = settings.topic("checkpoints")
        self.rank = zlib.crc32(f"{socket.gethostname()}/{os.getpid()}".encode())
        self.followers: dict[int, Follower] = {}
        self.committed: dict[int, int] = {}
        self.owned: set[int] | None = None
        """The sequencer partitions this worker owns; None until its first assignment."""
        self._lock = asyncio.Lock()
        """Held while records are applied to a follower, so an adoption never interleaves with it."""
        self._changed = asyncio.Event()
        self._paused: set[int] = set()

    # ----------------------------------------------------------------------------------- the group's side

    async def on_assigned(self, sender: Any, *args: Any, signal: Any, **_: Any) -> None:
        """The worker's whole assignment after a rebalance (Faust's ``on_partitions_assigned``)."""
        assigned = args[0] if args else set()
        owned = {tp.partition for tp in assigned if tp.topic == self.sequencer}
        for partition in sorted(owned & set(self.followers) - (self.owned or set())):
            # When failure detection ended and the group handed the shard here: the benchmark's and the
            # operator's mark of how much of a takeover was detection and how much the handover.
            log.info("shard %d: assigned to this worker, whose standby follows it", partition)
        self.owned = owned
        self._changed.set()

    async def adopt(self, partition: int, until: int) -> tuple[Shard, int] | None:
        """The followed shard of `partition`, ready to apply record `until` or the newer checkpoint's offset
        (where `PlacementAgent.restore` would have it), and that offset; None when there is none to adopt
        (not followed, still restoring, or ahead of that point), and the caller restores the shard."""
        started = time.monotonic()
        async with self._lock:
            follower = self.followers.pop(partition, None)
            self._changed.set()
            if follower is None:
                return None
            target = max(until, follower.checkpointed)
            await self._apply(follower, target)
        start = follower.next_offset
        if start > target:
            log.warning(
                "shard %d: the standby applied up to %d, past the takeover's offset %d; restoring instead",
                partition,
                start - 1,
                target,
            )
            return None
        try:
            shard = await _rebuild(self.settings, partition, target, start, follower.shard)
        except CheckpointError as exc:  # the tail it lacks was deleted: a restore reads the checkpoint
            log.warning(
                "shard %d: the standby cannot catch up (%s); restoring instead", partition, exc.reason
            )
            return None
        log.warning(
            "shard %d: took over from the standby at offset %d (%d records of tail) in %.2f s",
            partition,
            target,
            target - start,
            time.monotonic() - started,
        )
        return shard, target

    # --------------------------------------------------------------------------------------- the follower

    async def run(self) -> None:
        """Follow the shards to follow, until the app stops (it cancels this task)."""
        settings = self.settings
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            # Deleted records must raise, not be skipped silently (a follower then restores again).
            auto_offset_reset="none",
            **consumer_limits(settings, 32 * 1024 * 1024, 8 * 1024 * 1024),
            **client_security(settings),
        )
        admin = AIOKafkaAdminClient(
            bootstrap_servers=settings.bootstrap_servers,
            request_timeout_ms=settings.request_timeout_ms,
            client_id=f"{settings.client_id}-standby",
            **client_security(settings),
        )
        await consumer.start()
        await admin.start()
        polled = 0.0
        try:
            while True:
                if self._changed.is_set():
                    self._changed.clear()
                    await self._reassign(consumer, admin)
                if not self.followers:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), POLL_S)
                    continue
                if time.monotonic() - polled >= POLL_S:
                    polled = time.monotonic()
                    await self._poll_committed(admin)
                try:
                    batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000), max_records=5000)
                except OffsetOutOfRangeError as exc:
                    lost = {tp.partition for tp in exc.args[0]} if exc.args else set(self.followers)
                    async with self._lock:
                        for partition in lost:
                            log.warning(
                                "shard %d: the standby fell behind deleted records; restoring it", partition
                            )
                            self.followers.pop(partition, None)
                    self._changed.set()
                    continue
                except KafkaError as exc:  # the broker away: the next round tries again
                    log.warning("standby: %s", exc)
                    await asyncio.sleep(POLL_S)
                    continue
                self._take(batches)
                async with self._lock:
                    for partition, follower in list(self.followers.items()):
                        await self._apply(follower, follower.applicable(self.committed.get(partition, 0)))
                self._flow(consumer)
        finally:
            await consumer.stop()
            await admin.close()

    def _take(self, batches: dict[TopicPartition, list[Any]]) -> None:
        for tp, messages in batches.items():
            follower = self.followers.get(tp.partition)
            if follower is None:
                continue
            if tp.topic == self.sequencer:
                for message in messages:
                    if message.offset >= follower.fetch_at:
                        follower.held.append((message.offset, message.value))
                        follower.fetch_at = message.offset + 1
            else:
                for message in messages:
                    follower.checkpoints_at = message.offset + 1
                    offset = _manifest_offset(tp.partition, message.key, message.value)
                    if offset is not None:
                        follower.checkpointed = max(follower.checkpointed, offset)

    async def _apply(self, follower: Follower, below: int) -> None:
        """Apply the follower's held records below offset `below`, outputs discarded; what failed when the
        owner met it (dead-lettered there) is skipped the same way, as in a rebuild."""
        breathe = Breather()
        held, shard = follower.held, follower.shard
        while held and held[0][0] < below:
            offset, value = held.popleft()
            if offset < follower.next_offset:
                continue
            try:
                envelopes = decode_envelopes(value)
            except InvalidInput:
                envelopes = []
            for envelope in envelopes:
                if isinstance(envelope, Envelope):
                    with contextlib.suppress(Exception):
                        shard.feed(envelope)
                await breathe()
            follower.next_offset = offset + 1

    def _flow(self, consumer: AIOKafkaConsumer) -> None:
        for partition, follower in self.followers.items():
            tp = TopicPartition(self.sequencer, partition)
            if len(follower.held) >= HOLD_LIMIT and partition not in self._paused:
                consumer.pause(tp)
                self._paused.add(partition)
            elif len(follower.held) < HOLD_LIMIT // 2 and partition in self._paused:
                consumer.resume(tp)
                self._paused.discard(partition)

    async def _poll_committed(self, admin: AIOKafkaAdminClient) -> None:
        partitions = [TopicPartition(self.sequencer, p) for p in self.followers]
        try:
            offsets = await admin.list_consumer_group_offsets(self.group, partitions=partitions)
        except KafkaError as exc:
            log.warning("standby: cannot read the placement group's offsets: %s", exc)
            return
        for tp, meta in offsets.items():
            if meta is not None and meta.offset >= 0:
                self.committed[tp.partition] = max(self.committed.get(tp.partition, 0), meta.offset)

    async def _reassign(self, consumer: AIOKafkaConsumer, admin: AIOKafkaAdminClient) -> None:
        """Follow what should be followed now: new followers restored, followers no longer wanted dropped,
        the consumer assigned the partitions of those that remain."""
        if self.owned is None:
            return
        try:  # the partitions of now: added to, or gone from, the topic
            described = await admin.describe_topics([self.sequencer])
        except KafkaError as exc:
            log.warning("standby: cannot describe the sequencer: %s", exc)
            self._changed.set()
            return
        partitions = {p["partition"] for t in described if not t["error_code"] for p in t["partitions"]}
        wanted = followed(partitions - self.owned, self.settings.standby_shards, self.rank)
        async with self._lock:
            for partition in set(self.followers) - wanted - self.owned:
                log.info("shard %d: no longer followed by the standby", partition)
                del self.followers[partition]
                self.committed.pop(partition, None)
        for partition in sorted(wanted - set(self.followers)):
            follower = await self._follow(consumer, partition)
            if follower is not None and partition not in (self.owned or set()):
                self.followers[partition] = follower
        # A partition owned here stays out of the fetches: its follower waits for the placement agent.
        fetching = {p: f for p, f in self.followers.items() if p not in self.owned}
        assignment = [TopicPartition(self.sequencer, p) for p in fetching]
        assignment += [TopicPartition(self.checkpoints, p) for p in fetching]
        consumer.assign(assignment)
        self._paused.clear()
        for partition, follower in fetching.items():
            consumer.seek(TopicPartition(self.sequencer, partition), follower.fetch_at)
            consumer.seek(TopicPartition(self.checkpoints, partition), follower.checkpoints_at)
        if fetching:
            log.info("standby: following shards %s", sorted(fetching))

    async def _follow(self, consumer: AIOKafkaConsumer, partition: int) -> Follower | None:
        """A follower of `partition` from the shard's newest checkpoint it can decode (without a dead letter
        for one it cannot: the owner sends those), or from the partition's start; None when neither is
        possible now (the next reassignment tries again)."""
        started = time.monotonic()
        settings = self.settings
        checkpoints = TopicPartition(self.checkpoints, partition)
        sequencer = TopicPartition(self.sequencer, partition)
        try:
            # Manifests from here on are read by the follower's consumer; read_shard_checkpoints reads up to
            # here at least.
            checkpoints_end = (await consumer.end_offsets([checkpoints]))[checkpoints]
            records = await read_shard_checkpoints(settings, partition)
        except KafkaError as exc:
            log.warning("shard %d: the standby cannot read checkpoints: %s", partition, exc)
            return None
        manifests = [records.manifest(slot) for slot in SLOTS]
        named = [m["offset"] for m in manifests if m is not None and isinstance(m.get("offset"), int)]
        found, _ = records.readable()  # the owner dead-letters those it cannot read
        follower: Follower | None = None
        for offset, _slot, data in found:
            try:
                # Off the loop: a large shard's decode takes seconds, and the worker's heartbeats share it.
                shard, at = await asyncio.to_thread(decode_checkpoint, data)
            except CheckpointError as exc:
                log.info("shard %d: the standby cannot read a checkpoint (%s)", partition, exc.reason)
                continue
            if at == offset:
                follower = Follower(shard, at, fetch_at=at)
                break
        if follower is None:
            try:
                first = (await consumer.beginning_offsets([sequencer]))[sequencer]
            except KafkaError as exc:
                log.warning("shard %d: the standby cannot read the sequencer: %s", partition, exc)
                return None
            if first > 0:
                log.warning(
                    "shard %d: the standby cannot follow it: records before %d were deleted and no readable "
                    "checkpoint covers them",
                    partition,
                    first,
                )
                return None
            follower = Follower(Shard(), 0)
        follower.checkpointed = max(named, default=0)
        follower.checkpoints_at = checkpoints_end
        log.info(
            "shard %d: the standby follows it from offset %d (restored in %.1f s)",
            partition,
            follower.next_offset,
            time.monotonic() - started,
        )
        return follower


def _manifest_offset(partition: int, key: bytes | None, value: bytes | None) -> int | None:
    """The offset a checkpoint record names if it is one of the shard's manifests."""
    if value is None or key not in {slot_key(shard_owner(partition), slot) for slot in SLOTS}:
        return None
    try:
        manifest = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None
    offset = manifest.get("offset") if isinstance(manifest, dict) else None
    return offset if isinstance(offset, int) else None
