"""Recovery: how long a fresh worker takes to own a placement shard and place its next pod, how long a fresh
applier takes to recover its ledger and answer, and what the sequencer and the ledger's changelog hold on
disk, after histories of growing length.

A history is what a steady pipeline leaves behind: every node announced, then pods arriving at ``--rate``
and each deleted once ``--live`` newer ones have come, so the live set stays steady whatever the history's
length. It is generated in this process by a real `Shard` and a real `Ledger` fed exactly as the live
agents feed them (the forwarder's batches of ``batch_window_ms``, the applier's results held for
`RESULTS_LINGER_S`, its ledger writes once per batch, `Ledger.forget_deleted` after each), and written in
bulk where the pipeline writes it: the input records to pod-requests and node-events, the envelopes to the
sequencer (with the sources and offsets of those records), the ledger's writes to the applier's table
changelogs. The consumer groups' offsets are then committed at the end, as a worker and an applier that
had kept up would have left them. A fresh ``eyrie worker`` and a fresh ``eyrie applier`` then start, and one
more pod goes in:

- ``takeover_s``: from the worker's start to its binding of that pod (the shard rebuilt first);
  ``phases``: that time in phases, from the worker's log (`takeover_phases`). The worker is then stopped
  (SIGTERM: it checkpoints the shard on the way out).
- With checkpoints, and unless ``--no-standby``, a second row of the same history with ``standby`` true:
  two workers with ``standby_shards`` 1, the owner of the shard SIGKILLed and the other taking it over
  (`measure_standby`); its ``takeover_s`` runs from the kill to the binding of the pod sent then, and its
  ``detection_s`` is the failure detection among it. Its other figures are the history's, shared with the
  row before.
- With the standby row, a third row with ``spare`` true: two workers without a standby
  (``standby_shards`` 0), the owner SIGKILLed and the other, running but holding nothing of the shard,
  restoring it from the checkpoint (`measure_spare`); ``takeover_s`` runs from the kill to the binding.
- ``tail_records``: the sequencer records after the shard's newest checkpoint, which the fresh worker
  replays. Where a history ends against the checkpoints is chance; ``--worst-tail`` writes pods past its
  length until the next checkpoint is a record or two away, for about the longest tail the checkpoint
  settings allow (``pods`` then counts them all).
- ``applier_s``: from the applier's start to its result for the binding (the ledger recovered first).
- ``sequencer_bytes`` and ``ledger_bytes``: the partitions' sizes on the broker's disk (DescribeLogDirs)
  at the end, the sequencer's once the broker's retention check had a chance to free the segments behind
  its DeleteRecords (at most one ``log.retention.check.interval.ms`` and a few seconds later);
  ``sequencer_bytes_written`` and ``ledger_bytes_written``: the same right after the history was written;
  ``sequencer_records``: the records the sequencer still holds (end offset less log start offset).
- ``ledger_written``, ``ledger_read`` and ``ledger_tombstones``: the records the history wrote to the
  ledger's changelogs, and those they held (values and tombstones) when the fresh applier started, once the
  broker's cleaner had compacted what it could, after the newest table checkpoint of each partition (from
  the start without one): what the applier's recovery read of them.

With checkpoints on (the settings' defaults), the generator takes the sequencer record by record as the
placement agent does, and when its `after_record` would checkpoint (every ``checkpoint_every_envelopes``
records, or ``checkpoint_every_s`` of the history's clock) writes the records the agent writes, from the
agent's own `checkpoint_write`; at the end it deletes the sequencer's records behind the older slot, where
the agent's deletions after each checkpoint leave it; and it writes the applier's table checkpoints
where `KeyPartitionedTable.send_unsent_changes` would (`checkpoint_due`, `table_checkpoint_write`, on the
wall clock). The baseline of each history is the same history
with checkpoints off (both triggers 0, for the history and the worker), measured in the same run. The
last line printed is one JSON object: ``{"histories": [{"pods": N, "checkpoints": bool, ...}, ...]}``.

``--metrics`` measures the metrics agent's tables instead. Its history is ``--days`` of event time in which
N pods without a workload (each its own key) come one after another, each living an hour with a sample
every 15 minutes, among ``--nodes`` nodes sampled every 5 minutes; it goes through a real `MetricsCore`
and `MetricsTables` in batches as the agent takes them, and their writes and deletions are written to the
tables' changelogs (topics as Faust creates them). Once the broker's log cleaner has compacted them (their
size stable), a fresh ``eyrie worker`` starts and one node sample goes in; ``recover_s`` runs from the
worker's start to that sample's state in the changelog (the tables recovered first), ``changelog_bytes``
is the changelogs' size on disk. Each history is measured with the state ttl off (``0``: the baseline, as
before expiry) and with the default ttl. The last line is ``{"metrics": [{"pods": N, "expiry": bool, ...}]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator, MutableMapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic, RecordsToDelete
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import Array, Boolean, Int16, Int32, Int64, Schema, String
from aiokafka.structs import OffsetAndMetadata

from schemas.codec import encode
from schemas.events import Binding, MetricSample
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.core.ingress import envelope_from_model, pack_envelopes
from streams.core.ledger import NODES_TABLE, PODS_TABLE, Ledger
from streams.core.metrics import MetricsCore, Summary
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Release, Shard
from streams.core.table_checkpoint import checkpoint_due
from streams.demo.processes import start_role, stop_all
from streams.faust_overrides.tables import CHANGELOG_CONFIG
from streams.local.broker import resolved_broker
from streams.runtime.agents import metrics as metrics_agent
from streams.runtime.agents.applier import RESULTS_LINGER_S
from streams.runtime.agents.common import partition_of
from streams.runtime.agents.placement import checkpoint_write
from streams.runtime.app import app_id
from streams.runtime.checkpoint_slots import SLOTS, read_checkpoints
from streams.runtime.security import client_security
from streams.runtime.table_checkpoints import table_checkpoint_write, table_owner
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

__all__ = [
    "History",
    "MetricsRow",
    "Row",
    "generate",
    "generate_metrics",
    "main",
    "measure_metrics_row",
    "measure_row",
    "measure_spare",
    "measure_standby",
]

NEXT_POD = "recovery-next"
WARM_POD = "recovery-warm"
"""The pod the shard's owner places in a standby row before it is killed."""
STANDBY_POD = "recovery-standby"
"""The pod sent as the owner is killed in a standby row: its binding ends the takeover."""
SPARE_WARM_POD = "recovery-spare-warm"
"""The pod the shard's owner places in a spare row before it is killed."""
SPARE_POD = "recovery-spare"
"""The pod sent as the owner is killed in a spare row: its binding ends the takeover."""
CAUGHT_UP_S = 3.0
"""How long a standby row waits after the owner's binding of `WARM_POD` before it kills the owner: the
owner commits every second and the standby reads the commits every `POLL_S`, so the standby has applied
the record by then, as one that kept up would have."""
TIMEOUT_S = 1800.0
SEND_WINDOW = 20_000
"""Records in flight to the broker at most while a history is written."""
FULL_SIZES = (10_000, 100_000, 1_000_000)
QUICK = {"pods": (600,), "nodes": 50, "live": 200}
QUICK_CHECKPOINT_EVERY = 50
"""--quick's checkpoint interval in sequencer records: its few hundred records then hold several."""
METRICS_SIZES = (10_000, 100_000)
METRICS_QUICK = {"pods": (600,), "nodes": 5, "days": 2.0}
METRICS_PROBE = "recovery-probe"
POD_LIFE_S = 3600.0
POD_EVERY_S = 900.0
NODE_EVERY_S = 300.0
SETTLE_S = 180.0
RETENTION_WAIT_S = 360.0
"""How long at most to wait for the broker's retention check to free the sequencer's deleted segments."""
QUICK_RETENTION_WAIT_S = 15.0
"""How long at most to wait for the log cleaner to compact a history's changelogs."""


# ------------------------------------------------------------------------------------------ the history


@dataclass(frozen=True, slots=True)
class History:
    pods: int
    nodes: int
    live: int
    rate: float
    """Pod arrivals per second of the history's clock (as many deletions, once `live` pods run)."""
    worst_tail: bool = False
    """Go on past `pods` until the shard's next checkpoint is a record or two away, so a takeover replays
    about the longest tail the checkpoint triggers allow."""


def _node(index: int) -> NodeSpec:
    return NodeSpec.model_validate(
        {"name": f"node-{index:05d}", "allocatable": {"cpu": "32", "memory": "128Gi", "pods": "110"}}
    )


def _pod(index: int, created_at: float) -> PodRequest:
    cpu = ("250m", "500m", "1", "2")[index % 4]
    return PodRequest.model_validate(
        {
            "uid": f"pod-{index:07d}",
            "created_at": created_at,
            "containers": [{"name": "main", "requests": {"cpu": cpu, "memory": f"{1 + index % 3}Gi"}}],
        }
    )


class _Recorded(MutableMapping[str, bytes]):
    """A ledger mapping that keeps what a Faust table would send: each key's last value since the last
    `take` (None: a tombstone), as `KeyPartitionedTable` sends a batch's writes."""

    def __init__(self) -> None:
        self.data: dict[str, bytes] = {}
        self.unsent: dict[str, bytes | None] = {}

    def __getitem__(self, key: str) -> bytes:
        return self.data[key]

    def __setitem__(self, key: str, value: bytes) -> None:
        self.data[key] = value
        self.unsent[key] = value

    def __delitem__(self, key: str) -> None:
        del self.data[key]
        self.unsent[key] = None

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def take(self) -> dict[str, bytes | None]:
        unsent, self.unsent = self.unsent, {}
        return unsent


class _Writer:
    """Records to the broker in bulk, in order per partition, with at most `SEND_WINDOW` in flight; counts
    each partition's offsets, so the envelopes can name the records they came from."""

    def __init__(self, producer: AIOKafkaProducer) -> None:
        self.producer = producer
        self.pending: list[Awaitable[Any]] = []
        self.next_offset: dict[tuple[str, int], int] = {}
        self.records = 0

    async def send(self, topic: str, partition: int, key: bytes | None, value: bytes | None) -> int:
        offset = self.next_offset.get((topic, partition), 0)
        self.next_offset[(topic, partition)] = offset + 1
        self.pending.append(await self.producer.send(topic, value, key=key, partition=partition))
        self.records += 1
        if len(self.pending) >= SEND_WINDOW:
            await self.drain()
        return offset

    async def drain(self) -> None:
        pending, self.pending = self.pending, []
        for sent in pending:
            await sent


@dataclass(slots=True)
class _TableProgress:
    since: int = 0
    entries: int = 0
    at: float = -math.inf
    next_offset: int = 0
    slots: dict[str, int] = field(default_factory=dict)


class _Generator:
    """The history through a shard and a ledger as the live agents run them, written as it goes."""

    def __init__(self, settings: Settings, writer: _Writer, history: History, end: float) -> None:
        self.settings, self.writer, self.history = settings, writer, history
        self.shard = Shard()
        self.nodes_table, self.pods_table = _Recorded(), _Recorded()
        self.ledger = Ledger(self.nodes_table, self.pods_table)
        self.start = end - history.pods / history.rate - 1.0
        self.held: list[Envelope] = []
        """Applied results the applier holds for placement (`ForPlacement`)."""
        self.held_since = math.inf
        self.sequencer = settings.topic("sequencer")
        self.changelogs = {
            name: f"{app_id(settings, 'applier')}-{name}-changelog" for name in (NODES_TABLE, PODS_TABLE)
        }
        self.sequencer_records = 0
        self.pods = 0
        """Pods written: the history's, and with `worst_tail` those after them."""
        self.checkpoints = settings.topic("checkpoints")
        self.since_checkpoint = 0
        self.checkpointed_at = self.start
        self.slots: dict[str, int] = {}
        """Slot → offset of the checkpoint it holds, as the live worker keeps them."""
        self.delete_before = 0
        """The sequencer offset the live worker would have deleted the records before."""
        self.checkpoint_s = 0.0
        """Time spent encoding checkpoints (what a live worker spends paused on them)."""
        self.table_checkpoints = settings.topic("table-checkpoints")
        self.table_checkpoints_written = 0
        self.table_checkpoint_s = 0.0
        self.table_progress: dict[tuple[str, int], _TableProgress] = {}
        """The applier's table checkpoints, by table and partition, as `KeyPartitionedTable` keeps them
        (its `every_s` on the wall clock, as the applier's: the history is written faster than it ran)."""

    async def run(self) -> None:
        history, settings = self.history, self.settings
        window = settings.batch_window_ms / 1000.0
        nodes = [NodeEvent(type="upsert", node=_node(i), ts=self.start) for i in range(history.nodes)]
        node_envelopes = []
        for event in nodes:
            raw = encode(event)
            offset = await self.writer.send(settings.topic("node-events"), 0, event.node.name.encode(), raw)
            node_envelopes.append(Envelope(Kind.NODE, self.start, event, "node-events/0", offset=offset))
            self.ledger.apply_node_event(event, self.start)
        await self.changelog()
        for first in range(0, len(node_envelopes), 1000):  # the forwarder's batches of a backlog
            await self.sequence(node_envelopes[first : first + 1000], self.start)

        batch: list[Envelope] = []
        batch_start = math.inf
        for index in itertools.count():
            at = self.start + 1.0 + index / history.rate
            if index >= history.pods and not (history.worst_tail and self.checkpoint_far(at)):
                break
            if at >= batch_start + window:
                await self.flush_results(batch_start + window)
                await self.sequence(batch, batch_start + window)
                batch, batch_start = [], math.inf
            batch_start = min(batch_start, at)
            gone = index - history.live
            if gone >= 0:  # the oldest live pod goes just before the next one comes
                deleted = PodDeleted(uid=f"pod-{gone:07d}", ts=at)
                batch.append(await self.input(deleted, deleted.uid, at))
            pod = _pod(index, at)
            batch.append(await self.input(pod, pod.uid, at))
            self.pods = index + 1
        if batch:
            await self.flush_results(batch_start + window)
            await self.sequence(batch, batch_start + window)
        await self.flush_results(math.inf)
        await self.writer.drain()

    async def input(self, model: PodRequest | PodDeleted, uid: str, at: float) -> Envelope:
        partition = partition_of(uid, self.settings.partitions)
        topic = self.settings.topic("pod-requests")
        offset = await self.writer.send(topic, partition, uid.encode(), encode(model))
        envelope = envelope_from_model(model, at, f"pod-requests/{partition}", offset=offset)
        assert envelope is not None
        return envelope

    async def sequence(self, envelopes: Sequence[Envelope], at: float) -> None:
        """One forwarder batch (or one applier send of results) onto the sequencer, and through placement
        and the applier as the live pipeline takes it."""
        if not envelopes:
            return
        records, refused = pack_envelopes(envelopes, self.settings.max_value_bytes)
        assert not refused, refused
        urgent = False
        applier_at = at + 0.002
        for record in records:
            offset = await self.writer.send(self.sequencer, 0, b"shard-0", record)
            self.sequencer_records += 1
            # Record by record, as the placement agent takes them: what it decodes goes through the shard,
            # and a checkpoint falls between two records exactly where the agent's would.
            for envelope in decode_envelopes(record):
                assert isinstance(envelope, Envelope), envelope
                for output in self.shard.feed(envelope):
                    if isinstance(output, Binding):
                        result = self.ledger.apply(output, applier_at)
                        source = f"bindings/{partition_of(output.node, self.settings.partitions)}"
                        answer = envelope_from_model(result, result.at, source)
                        if answer is not None:
                            self.held.append(answer)
                            self.held_since = min(self.held_since, applier_at)
                            urgent = urgent or result.status != "applied"
                    elif isinstance(output, Release):
                        self.ledger.delete(output.deleted.uid, applier_at)
            await self.after_record(offset, at)
        # The applier commits every second, so a deletion settles once it is `deleted_settle_s` old.
        self.ledger.settle(applier_at - self.settings.deleted_settle_s)
        if self.settings.deleted_retention_s > 0:
            self.ledger.forget_deleted(applier_at - self.settings.deleted_retention_s)
        await self.changelog()
        if urgent:
            await self.flush_results(math.inf)

    def checkpoint_far(self, at: float) -> bool:
        """Whether a batch forwarded at `at` (a record or two, with the applier's results) leaves the next
        checkpoint still to come."""
        every, every_s = self.settings.checkpoint_every_envelopes, self.settings.checkpoint_every_s
        since, age_s = self.since_checkpoint + 3, at + 2 * RESULTS_LINGER_S - self.checkpointed_at
        return bool(every or every_s) and not checkpoint_due(since, 0, age_s, every, every_s)

    async def after_record(self, offset: int, at: float) -> None:
        """The placement agent's `after_record` on the history's clock (a worker that kept up saw each
        record at its time): a checkpoint when due, written with the agent's own `checkpoint_write`."""
        settings = self.settings
        self.since_checkpoint += 1
        every, every_s = settings.checkpoint_every_envelopes, settings.checkpoint_every_s
        if not checkpoint_due(self.since_checkpoint, 0, at - self.checkpointed_at, every, every_s):
            return
        started = time.perf_counter()
        slot, _, records = checkpoint_write(self.shard, 0, offset + 1, self.slots, settings.max_message_bytes)
        self.checkpoint_s += time.perf_counter() - started
        for key, value in records:
            await self.writer.send(self.checkpoints, 0, key, value)
        self.slots[slot] = offset + 1
        self.since_checkpoint, self.checkpointed_at = 0, at
        if settings.sequencer_delete_behind_checkpoints and len(self.slots) == len(SLOTS):
            self.delete_before = min(self.slots.values())

    async def flush_results(self, until: float) -> None:
        if self.held and (self.held_since + RESULTS_LINGER_S <= until or len(self.held) >= 1000):
            held, self.held, self.held_since = self.held, [], math.inf
            await self.sequence(held, held[-1].ts + RESULTS_LINGER_S)

    async def changelog(self) -> None:
        """The ledger's writes of one applier batch onto its changelogs, and the table checkpoints the
        applier's `KeyPartitionedTable.send_unsent_changes` writes with them when due: the entries taken
        before the batch's records are sent, at the offset after the partition's last record."""
        settings = self.settings
        partitions = settings.partitions
        every, every_s = settings.checkpoint_every_envelopes, settings.checkpoint_every_s
        for name, table in ((NODES_TABLE, self.nodes_table), (PODS_TABLE, self.pods_table)):
            unsent = table.take()
            by_partition: dict[int, list[tuple[bytes, bytes | None]]] = {}
            for key, value in unsent.items():
                raw = key.encode()
                by_partition.setdefault(partition_of(raw, partitions), []).append((raw, value))
            now = time.monotonic()
            due = []
            for partition, records in by_partition.items():
                progress = self.table_progress.setdefault((name, partition), _TableProgress())
                progress.since += len(records)
                if checkpoint_due(progress.since, progress.entries, now - progress.at, every, every_s):
                    due.append(partition)
            taken_at = time.time()
            snapshots = {
                partition: [
                    (raw, value)
                    for key, value in table.data.items()
                    if partition_of(raw := key.encode(), partitions) == partition
                ]
                for partition in due
            }
            for partition, records in by_partition.items():
                for raw, value in records:
                    offset = await self.writer.send(self.changelogs[name], partition, raw, value)
                self.table_progress[(name, partition)].next_offset = offset + 1
            for partition, entries in snapshots.items():
                progress = self.table_progress[(name, partition)]
                started = time.perf_counter()
                slot, _, written = table_checkpoint_write(
                    name,
                    partition,
                    progress.next_offset,
                    taken_at,
                    entries,
                    progress.slots,
                    settings.max_message_bytes,
                )
                self.table_checkpoint_s += time.perf_counter() - started
                self.table_checkpoints_written += 1
                for record_key, record in written:
                    await self.writer.send(self.table_checkpoints, partition, record_key, record)
                progress.slots[slot] = progress.next_offset
                progress.since, progress.entries, progress.at = 0, len(entries), now


def _bulk_producer(settings: Settings) -> AIOKafkaProducer:
    """A producer for writing a history in bulk: batched, one acknowledgement, records up to the topics'
    limit."""
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        linger_ms=20,
        max_batch_size=min(settings.max_message_bytes, 512 * 1024),
        max_request_size=settings.max_message_bytes,
        acks=1,
        **client_security(settings),
    )


@dataclass(frozen=True, slots=True)
class Generated:
    nodes: list[str | None]
    """The nodes the shard the history leaves would bind the next pods to, sent one after another, which a
    worker that rebuilt it must choose too."""
    pods: int
    """Pods written (more than the history's with `History.worst_tail`)."""
    tail_records: int
    """Sequencer records after the newest checkpoint: what a takeover replays (all of them without one)."""


async def generate(settings: Settings, history: History, next_pods: Sequence[PodRequest]) -> Generated:
    """Write `history` to the broker (see the module docstring), and say what it left."""
    # Every table's changelog, the worker's (empty here: the history has no metrics) with the applier's, as
    # the workers and appliers that wrote the history would have left them: a takeover creates no topic.
    names = [*_ledger_changelogs(settings), *_metrics_changelogs(settings).values()]
    changelogs = [
        NewTopic(
            name,
            settings.partitions,
            1,
            topic_configs={
                "cleanup.policy": "compact",
                "max.message.bytes": str(settings.max_message_bytes),
                **CHANGELOG_CONFIG,  # as Faust creates them (`streams.faust_overrides.tables`)
            },
        )
        for name in names
    ]
    await ensure_topics(settings, changelogs)
    producer = _bulk_producer(settings)
    await producer.start()
    try:
        writer = _Writer(producer)
        generator = _Generator(settings, writer, history, time.time())
        await generator.run()
    finally:
        await producer.stop()
    if generator.delete_before:
        # Where the live worker's DeleteRecords after each checkpoint leave the sequencer: one call at the
        # end, once every record is written, has the same result.
        await _delete_records(settings, settings.topic("sequencer"), 0, generator.delete_before)
    if generator.slots:
        print(
            f"  {len(generator.slots)} slots written, newest at offset {max(generator.slots.values()):,} of "
            f"{generator.sequencer_records:,}; encoding checkpoints took {generator.checkpoint_s:.1f} s",
            flush=True,
        )
    if generator.table_checkpoints_written:
        print(
            f"  {generator.table_checkpoints_written:,} ledger table checkpoints written; encoding them took "
            f"{generator.table_checkpoint_s:.1f} s",
            flush=True,
        )
    await _commit_groups(settings, writer.next_offset)
    nodes: list[str | None] = []
    for pod in next_pods:
        key = (settings.topic("pod-requests"), partition_of(pod.uid, settings.partitions))
        offset = writer.next_offset[key] = writer.next_offset.get(key, 0) + 1
        envelope = Envelope(Kind.POD, time.time(), pod, f"pod-requests/{key[1]}", offset=offset - 1)
        bound = [output.node for output in generator.shard.feed(envelope) if isinstance(output, Binding)]
        nodes.append(bound[0] if bound else None)
    tail = generator.since_checkpoint if generator.slots else generator.sequencer_records
    return Generated(nodes, generator.pods, tail)


async def _delete_records(settings: Settings, topic: str, partition: int, before: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(topic, partition): RecordsToDelete(before)})
    finally:
        await admin.close()


async def _records_kept(settings: Settings, topic: str) -> int:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=None, **client_security(settings)
    )
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or {0})]
        first, end = await consumer.beginning_offsets(partitions), await consumer.end_offsets(partitions)
        return sum(end[tp] - first[tp] for tp in partitions)
    finally:
        await consumer.stop()


async def _commit_groups(settings: Settings, ends: dict[tuple[str, int], int]) -> None:
    """Each group's offsets at the end of what it consumes, as a worker and an applier that kept up leave
    them (an empty topic has nothing to commit)."""
    consumed = {
        "worker": ("pod-requests", "node-events", "sequencer"),
        "applier": ("node-events", "bindings"),
    }
    for role, shorts in consumed.items():
        offsets = {
            TopicPartition(topic, partition): OffsetAndMetadata(end, "")
            for (topic, partition), end in ends.items()
            if topic in {settings.topic(short) for short in shorts}
        }
        consumer = AIOKafkaConsumer(
            bootstrap_servers=settings.bootstrap_servers,
            group_id=app_id(settings, role),
            enable_auto_commit=False,
            **client_security(settings),
        )
        await consumer.start()
        try:
            consumer.assign(list(offsets))
            await consumer.commit(offsets)
        finally:
            await consumer.stop()


# ---------------------------------------------------------------------------------------- disk usage


class _DescribeLogDirsResponse(Response):  # type: ignore[misc]
    API_KEY = 35
    API_VERSION = 1
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "results",
            Array(
                ("error_code", Int16),
                ("log_dir", String("utf-8")),
                (
                    "topics",
                    Array(
                        ("name", String("utf-8")),
                        (
                            "partitions",
                            Array(
                                ("partition_index", Int32),
                                ("partition_size", Int64),
                                ("offset_lag", Int64),
                                ("is_future_key", Boolean),
                            ),
                        ),
                    ),
                ),
            ),
        ),
    )


class _DescribeLogDirsStruct(RequestStruct):  # type: ignore[misc]
    API_KEY = 35
    API_VERSION = 1
    RESPONSE_TYPE = _DescribeLogDirsResponse
    SCHEMA = Schema(("topics", Array(("topic", String("utf-8")), ("partitions", Array(Int32)))))


class _DescribeLogDirsRequest(Request[_DescribeLogDirsStruct]):  # type: ignore[misc]
    """DescribeLogDirs (API 35, v1), which aiokafka's admin client does not offer."""

    API_KEY = 35

    def __init__(self, topics: list[tuple[str, list[int]]]) -> None:
        self._topics = topics

    def build(self, request_struct_class: type[_DescribeLogDirsStruct]) -> _DescribeLogDirsStruct:
        return request_struct_class(self._topics)


async def topic_bytes(settings: Settings, topics: Sequence[str]) -> dict[str, int]:
    """Each topic's bytes on the brokers' disks (all partitions and replicas), from the admin API's
    DescribeLogDirs, so the figure holds for any broker, local or not."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await admin.start()
    try:
        described = await admin.describe_topics(list(topics))
        wanted = [(t["topic"], [p["partition"] for p in t["partitions"]]) for t in described]
        sizes = dict.fromkeys(topics, 0)
        cluster = await admin.describe_cluster()
        for broker in cluster["brokers"]:
            response = await admin._client.send(broker["node_id"], _DescribeLogDirsRequest(wanted))
            for _error, _dir, found in response.results:
                for name, partitions in found:
                    sizes[name] = sizes.get(name, 0) + sum(size for _p, size, _lag, _f in partitions)
        return sizes
    finally:
        await admin.close()


# -------------------------------------------------------------------------------------- measurement


@dataclass(frozen=True, slots=True)
class Row:
    pods: int
    checkpoints: bool
    takeover_s: float
    applier_s: float
    sequencer_bytes: int
    sequencer_records: int
    """Records the sequencer still holds (end offset less log start offset): what DeleteRecords left, which
    the broker frees on disk only segment by segment, once a whole segment lies behind the start."""
    ledger_bytes: int
    generate_s: float
    tail_records: int = 0
    """Sequencer records after the newest checkpoint (all of them without one): what a fresh worker's
    takeover replays."""
    phases: dict[str, float] = field(default_factory=dict)
    """The takeover's phases in seconds (`takeover_phases`, or `measure_standby`'s)."""
    standby: bool = False
    """A hot standby's takeover (`measure_standby`): `takeover_s` runs from the owner's SIGKILL."""
    spare: bool = False
    """A spare worker's takeover (`measure_spare`): a running worker that did not follow the shard;
    `takeover_s` runs from the owner's SIGKILL."""
    detection_s: float | None = None
    """Of a standby row's `takeover_s`, the failure detection: from the kill until the group assigned the
    shard to the standby's worker (the session timeout, then the rebalance)."""
    ledger_written: int = 0
    """Records written to the ledger's changelogs by the history (their end offsets)."""
    ledger_read: int = 0
    """Records the changelogs held when the fresh applier started (compaction done so far): what its
    recovery read, values and tombstones alike."""
    ledger_tombstones: int = 0
    """Of `ledger_read`, the tombstones (kept `delete.retention.ms` after the cleaner first passes them)."""
    ledger_bytes_written: int = 0
    """The changelogs' bytes on disk right after the history was written (the cleaner may have begun)."""
    sequencer_bytes_written: int = 0
    """The sequencer's bytes on disk right after the history was written and its DeleteRecords; its
    `sequencer_bytes` are measured after the broker's retention check had time to free segments."""


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT[0-9:.]+[+-]\d\d:\d\d) ", re.MULTILINE)
_READY = re.compile(r"ready: worker on .* in ([0-9.]+) s;")
_RESTORED = re.compile(
    r"restored from checkpoint \S+ at offset \d+ \(\d+ records behind \d+\) in [0-9.]+ s: read \d+ "
    r"checkpoint records in ([0-9.]+) s, decoded \d+ bytes in ([0-9.]+) s, replayed the tail in ([0-9.]+) s"
)
_REPLAYED = re.compile(r"replayed sequencer records \S+ in ([0-9.]+) s")


def _stamped(log: str, pattern: re.Pattern[str]) -> tuple[float, re.Match[str]] | None:
    """The wall-clock time of the first log line matching `pattern`, and the match."""
    for line in log.splitlines():
        found = pattern.search(line)
        stamp = _STAMP.match(line)
        if found and stamp:
            return datetime.fromisoformat(stamp.group(1)).timestamp(), found
    return None


def takeover_phases(log: str, spawned: float, bound: float) -> dict[str, float]:
    """A fresh worker's takeover in phases, from its log's wall-clock stamps, its spawn and the binding's
    arrival (both wall clock), in seconds: ``start`` (the interpreter, imports, settings, up to the app
    built), ``join`` (the topics' check, Faust's start, the group's join and assignment, up to its "ready"
    line), ``wait`` (until the first sequencer record reaches the placement agent, which starts the
    restore), ``read``, ``decode`` and ``replay`` (the restore: the checkpoint's records, their decode, the
    sequencer's tail), and ``place`` (from the restored shard to the binding on its topic). Phases the log
    does not show are left out."""
    phases: dict[str, float] = {}
    ready = _stamped(log, _READY)
    restore_start = restore_end = None
    restored = _stamped(log, _RESTORED)
    if restored is not None:
        at, found = restored
        read, decode, replay = (float(found.group(i)) for i in (1, 2, 3))
        phases |= {"read": read, "decode": decode, "replay": replay}
        restore_end, restore_start = at, at - read - decode - replay
    elif (replayed := _stamped(log, _REPLAYED)) is not None:
        at, found = replayed
        phases["replay"] = float(found.group(1))
        restore_end, restore_start = at, at - phases["replay"]
    if ready is not None:
        at, found = ready
        built = at - float(found.group(1))
        phases |= {"start": built - spawned, "join": float(found.group(1))}
        if restore_start is not None:
            phases["wait"] = restore_start - at
    if restore_end is not None:
        phases["place"] = bound - restore_end
    return {name: round(max(0.0, value), 2) for name, value in phases.items()}


def _ledger_changelogs(settings: Settings) -> list[str]:
    return [f"{app_id(settings, 'applier')}-{name}-changelog" for name in (NODES_TABLE, PODS_TABLE)]


async def _checkpointed_from(settings: Settings) -> dict[TopicPartition, int]:
    """Where the newest table checkpoint of each ledger changelog partition stands (none: not there)."""
    starts = {}
    for name in (NODES_TABLE, PODS_TABLE):
        topic = f"{app_id(settings, 'applier')}-{name}-changelog"
        for partition in range(settings.partitions):
            owner = table_owner(name, partition)
            found = await read_checkpoints(settings, settings.topic("table-checkpoints"), partition, owner)
            offsets = [m["offset"] for m in map(found.manifest, SLOTS) if m is not None and "offset" in m]
            if offsets:
                starts[TopicPartition(topic, partition)] = max(offsets)
    return starts


async def _changelog_records(
    settings: Settings, topics: Sequence[str], starts: dict[TopicPartition, int]
) -> tuple[int, int, int]:
    """The topics' records as a reader from `starts` (else from the start) sees them now: (written, i.e.
    the end offsets; held, values and tombstones; tombstones)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=None, **client_security(settings)
    )
    await consumer.start()
    try:
        # The changelogs have the settings' partitions, as `generate` creates them.
        partitions = [TopicPartition(topic, p) for topic in topics for p in range(settings.partitions)]
        ends = await consumer.end_offsets(partitions)
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        for tp, start in starts.items():
            consumer.seek(tp, start)
        held = tombstones = 0
        left = {tp for tp in partitions if ends[tp] > starts.get(tp, 0)}
        while left:
            for tp, messages in (await consumer.getmany(timeout_ms=500, max_records=50_000)).items():
                held += len(messages)
                tombstones += sum(1 for message in messages if message.value is None)
                if messages and messages[-1].offset + 1 >= ends[tp]:
                    left.discard(tp)
            left = {tp for tp in left if await consumer.position(tp) < ends[tp]}
        return sum(ends.values()), held, tombstones
    finally:
        await consumer.stop()


async def _retention_check_s(settings: Settings) -> float:
    """The broker's `log.retention.check.interval.ms`, in seconds (Kafka's default when not told)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await admin.start()
    try:
        broker = (await admin.describe_cluster())["brokers"][0]["node_id"]
        described = await admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, str(broker))])
        configs = {entry[0]: entry[1] for entry in described[0].resources[0][4]}
        return int(configs.get("log.retention.check.interval.ms") or 300_000) / 1000.0
    finally:
        await admin.close()


async def _freed_bytes(settings: Settings, topic: str, limit_s: float) -> int:
    """The topic's bytes on disk once the broker has had a chance to free what DeleteRecords left behind:
    it does so at its retention check, so this waits until the bytes drop, or one check interval and a few
    seconds more (at most `limit_s`), whichever comes first."""
    first = (await topic_bytes(settings, [topic]))[topic]
    deadline = time.monotonic() + min(limit_s, await _retention_check_s(settings) + 5.0)
    while time.monotonic() < deadline:
        await asyncio.sleep(1.0)
        now = (await topic_bytes(settings, [topic]))[topic]
        if now < first:
            return now
    return first


async def _first(
    settings: Settings, short: str, uid: str, status: str | None, timeout: float
) -> tuple[float, dict[str, Any]]:
    """When (monotonic) a record of `uid` reached `short` (with `status`, if given), and the record."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=None, **client_security(settings)
    )
    await consumer.start()
    try:
        topic = settings.topic(short)
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=100)).values():
                for message in messages:
                    if message.key != uid.encode():
                        continue
                    value = orjson.loads(message.value)
                    if status is None or value.get("status") == status:
                        return time.monotonic(), value
        raise TimeoutError(f"nothing for {uid} on {topic} within {timeout:.0f} s")
    finally:
        await consumer.stop()


async def _submit(settings: Settings, pod: PodRequest) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await producer.start()
    try:
        partition = partition_of(pod.uid, settings.partitions)
        await producer.send_and_wait(
            settings.topic("pod-requests"), encode(pod), key=pod.uid.encode(), partition=partition
        )
    finally:
        await producer.stop()


async def _delete_topics(settings: Settings) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await admin.start()
    try:
        prefixes = (settings.topic_prefix, app_id(settings, "worker"), app_id(settings, "applier"))
        names = [name for name in await admin.list_topics() if name.startswith(prefixes)]
        if names:
            await admin.delete_topics(names)
    finally:
        await admin.close()


def measure_row(
    bootstrap: str,
    history: History,
    checkpoints: bool,
    out: Path,
    timeout: float,
    keep: bool,
    checkpoint_every: int | None = None,
    retention_wait_s: float = RETENTION_WAIT_S,
    standby: bool = False,
) -> list[Row]:
    """One history, written, then taken over by a fresh worker, then (`standby`, with checkpoints) by the
    hot standby of two workers (`measure_standby`), then recovered by a fresh applier (see the module
    docstring): its row, and the standby's."""
    prefix = f"recovery-{uuid.uuid4().hex[:6]}."
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": prefix,
        "EYRIE_DATA_DIR": str(out / prefix / "faust"),
    }
    if not checkpoints:
        # The baseline: a worker that writes no checkpoints (0 turns each trigger off), as the history it
        # takes over has none; with them, the settings' defaults, for the history and the worker alike.
        env["EYRIE_CHECKPOINT_EVERY_ENVELOPES"] = "0"
        env["EYRIE_CHECKPOINT_EVERY_S"] = "0"
    elif checkpoint_every is not None:
        env["EYRIE_CHECKPOINT_EVERY_ENVELOPES"] = str(checkpoint_every)
    settings = load_settings(env=env)
    logs = out / prefix
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    now = time.time()
    pod, warm, after_kill = (
        _pod(history.pods + i, now).model_copy(update={"uid": uid, "name": uid, "created_at": None})
        for i, uid in enumerate((NEXT_POD, WARM_POD, STANDBY_POD))
    )
    standby = standby and checkpoints
    spare_warm, after_spare_kill = (
        _pod(history.pods + 3 + i, now).model_copy(update={"uid": uid, "name": uid, "created_at": None})
        for i, uid in enumerate((SPARE_WARM_POD, SPARE_POD))
    )
    later = [warm, after_kill, spare_warm, after_spare_kill] if standby else []
    written_history = asyncio.run(generate(settings, history, [pod, *later]))
    nodes = written_history.nodes
    expected = nodes[0]
    generated = time.monotonic() - started
    print(
        f"  {written_history.pods:,} pods written in {generated:.1f} s; "
        f"{written_history.tail_records:,} sequencer records after the newest checkpoint",
        flush=True,
    )
    ledger = _ledger_changelogs(settings)
    written = asyncio.run(topic_bytes(settings, [settings.topic("sequencer"), *ledger]))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        spawned, spawned_wall = time.monotonic(), time.time()
        processes.append(start_role("worker", env, logs))
        asyncio.run(_submit(settings, pod))
        bound, binding = asyncio.run(_first(settings, "bindings", NEXT_POD, None, timeout))
        takeover = bound - spawned
        bound_wall = time.time() - (time.monotonic() - bound)
        phases = takeover_phases((logs / "worker.log").read_text(), spawned_wall, bound_wall)
        if binding.get("node") != expected:
            # The rebuilt shard is not the one the history left: the measurement would mean nothing.
            raise SystemExit(f"error: the worker bound {NEXT_POD} to {binding.get('node')}, not {expected}")
        stop_all(processes)
        processes.clear()
        if standby:
            expect = {WARM_POD: nodes[1], STANDBY_POD: nodes[2]}
            standby_takeover, detection, standby_phases = measure_standby(
                settings, env, logs, (warm, after_kill), expect, timeout
            )
            expect = {SPARE_WARM_POD: nodes[3], SPARE_POD: nodes[4]}
            spare_takeover, spare_phases = measure_spare(
                settings, env, logs, (spare_warm, after_spare_kill), expect, timeout
            )
        # What the applier's recovery is about to read (counted before it starts, so not in its time): the
        # changelogs after the newest table checkpoints.
        starts = asyncio.run(_checkpointed_from(settings))
        ledger_written, ledger_read, ledger_tombstones = asyncio.run(
            _changelog_records(settings, ledger, starts)
        )
        spawned = time.monotonic()
        processes.append(start_role("applier", env, logs))
        answered, _ = asyncio.run(_first(settings, "binding-results", NEXT_POD, "applied", timeout))
        applier = answered - spawned
    finally:
        stop_all(processes)
    # Only a history with checkpoints had its sequencer records deleted: nothing else is to be freed.
    wait_s = retention_wait_s if checkpoints else 0.0
    freed = asyncio.run(_freed_bytes(settings, settings.topic("sequencer"), wait_s))
    sizes = asyncio.run(topic_bytes(settings, ledger)) | {settings.topic("sequencer"): freed}
    kept = asyncio.run(_records_kept(settings, settings.topic("sequencer")))
    if not keep:
        asyncio.run(_delete_topics(settings))
    row = Row(
        pods=written_history.pods,
        tail_records=written_history.tail_records,
        checkpoints=checkpoints,
        takeover_s=round(takeover, 2),
        applier_s=round(applier, 2),
        sequencer_bytes=sizes[settings.topic("sequencer")],
        sequencer_records=kept,
        ledger_bytes=sum(sizes[name] for name in ledger),
        generate_s=round(generated, 1),
        phases=phases,
        ledger_written=ledger_written,
        ledger_read=ledger_read,
        ledger_tombstones=ledger_tombstones,
        ledger_bytes_written=sum(written[name] for name in ledger),
        sequencer_bytes_written=written[settings.topic("sequencer")],
    )
    if not standby:
        return [row]
    # The same history and what was measured of it after the takeover (bytes, the applier), with the
    # standby's takeover.
    followed = replace(
        row, standby=True, takeover_s=standby_takeover, detection_s=detection, phases=standby_phases
    )
    spare = replace(row, spare=True, takeover_s=spare_takeover, phases=spare_phases)
    return [row, followed, spare]


_FOLLOWING = re.compile(r"standby: following shards")
_ASSIGNED = re.compile(r"shard \d+: assigned to this worker, whose standby follows it")
_ADOPTED = re.compile(r"took over from the standby at offset \d+ \(\d+ records of tail\) in ([0-9.]+) s")


def measure_standby(
    settings: Settings,
    env: dict[str, str],
    logs: Path,
    pods: tuple[PodRequest, PodRequest],
    expected: dict[str, str | None],
    timeout: float,
) -> tuple[float, float, dict[str, float]]:
    """A hot standby's takeover of the history's shard: two workers with ``standby_shards`` 1, one owning
    the shard, the other following it; the owner places the first of `pods`, then is killed (SIGKILL) once
    the standby has had `CAUGHT_UP_S` to apply that, and the second pod goes in at once. Returns the
    seconds from the kill to the second pod's binding, the failure detection among them (until the
    survivor's "assigned" line), and the phases: ``detection``, ``adopt`` (the standby's shard brought to
    the takeover's offset: the records it had not applied), ``rest`` (everything
    after the detection: the rebalance's end, the pod's way through the forwarder and the sequencer, the
    adoption, the placement)."""
    env = {**env, "EYRIE_STANDBY_SHARDS": "1"}
    warm, after_kill = pods
    processes = {name: start_role("worker", env, logs, suffix=name) for name in ("-a", "-b")}
    try:
        deadline = time.monotonic() + timeout
        follower = None
        while follower is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no worker followed the shard within {timeout:.0f} s")
            time.sleep(0.2)
            texts = {name: (logs / f"worker{name}.log").read_text() for name in processes}
            if all("ready:" in text for text in texts.values()):
                follower = next((name for name, text in texts.items() if _FOLLOWING.search(text)), None)
        owner = next(name for name in processes if name != follower)
        _bind_checked(settings, warm, expected, timeout, "owner")
        killed_wall, takeover, _ = _kill_and_bind(settings, processes[owner], after_kill, expected, timeout)
    finally:
        stop_all(list(processes.values()))
    text = (logs / f"worker{follower}.log").read_text()
    assigned, adopted = _stamped(text, _ASSIGNED), _stamped(text, _ADOPTED)
    if assigned is None or adopted is None:
        raise SystemExit(
            f"error: the standby's worker did not adopt the shard (see {logs}/worker{follower}.log)"
        )
    detection = assigned[0] - killed_wall
    phases = {
        "detection": detection,
        "adopt": float(adopted[1].group(1)),
        "rest": takeover - detection,
    }
    return round(takeover, 2), round(detection, 2), {name: round(value, 2) for name, value in phases.items()}


def measure_spare(
    settings: Settings,
    env: dict[str, str],
    logs: Path,
    pods: tuple[PodRequest, PodRequest],
    expected: dict[str, str | None],
    timeout: float,
) -> tuple[float, dict[str, float]]:
    """A spare worker's takeover of the history's shard: two workers without a standby, one owning the
    shard, the other running beside it with nothing of the shard's state; the owner places the first of
    `pods`, then is killed (SIGKILL) and the second pod goes in at once. Returns the seconds from the kill
    to the second pod's binding, and the phases from the spare's log: ``until restore`` (failure detection,
    the rebalance, the pod's way to placement, which starts the restore), ``read``, ``decode`` and
    ``replay`` (the restore from the checkpoint, as a fresh worker's), ``place`` (the restored shard to the
    binding)."""
    env = {**env, "EYRIE_STANDBY_SHARDS": "0"}
    warm, after_kill = pods
    names = ("-c", "-d")
    processes = {name: start_role("worker", env, logs, suffix=name) for name in names}
    try:
        deadline = time.monotonic() + timeout
        while not all("ready:" in (logs / f"worker{name}.log").read_text() for name in names):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the two workers were not ready within {timeout:.0f} s")
            time.sleep(0.2)
        _bind_checked(settings, warm, expected, timeout, "owner")
        restored = [name for name in names if _restore_stamp((logs / f"worker{name}.log").read_text())]
        if len(restored) != 1:
            raise SystemExit(f"error: {len(restored)} workers restored the shard, not one (see {logs})")
        owner = restored[0]
        spare = next(name for name in names if name != owner)
        killed_wall, takeover, bound_wall = _kill_and_bind(
            settings, processes[owner], after_kill, expected, timeout
        )
    finally:
        stop_all(list(processes.values()))
    stamp = _restore_stamp((logs / f"worker{spare}.log").read_text())
    if stamp is None:
        raise SystemExit(f"error: the spare worker did not restore the shard (see {logs}/worker{spare}.log)")
    restore_start, restore_end, restore = stamp
    phases = {"until restore": restore_start - killed_wall, **restore, "place": bound_wall - restore_end}
    return round(takeover, 2), {name: round(max(0.0, value), 2) for name, value in phases.items()}


def _bind_checked(
    settings: Settings, pod: PodRequest, expected: dict[str, str | None], timeout: float, who: str
) -> tuple[float, float]:
    """Send `pod` and wait for its binding, which must be on the node the history's own shard chose: the
    binding's arrival, monotonic and wall clock."""
    asyncio.run(_submit(settings, pod))
    bound, binding = asyncio.run(_first(settings, "bindings", pod.uid, None, timeout))
    if binding.get("node") != expected[pod.uid]:
        node = binding.get("node")
        raise SystemExit(f"error: the {who} bound {pod.uid} to {node}, not {expected[pod.uid]}")
    return bound, time.time() - (time.monotonic() - bound)


def _kill_and_bind(
    settings: Settings,
    owner: subprocess.Popen[bytes],
    pod: PodRequest,
    expected: dict[str, str | None],
    timeout: float,
) -> tuple[float, float, float]:
    """`CAUGHT_UP_S` after the owner's last binding, SIGKILL it and send `pod` at once: the kill's wall
    clock, the seconds from the kill to the pod's binding (by the worker that took over), and the binding's
    wall clock."""
    time.sleep(CAUGHT_UP_S)
    killed, killed_wall = time.monotonic(), time.time()
    owner.kill()
    bound, bound_wall = _bind_checked(settings, pod, expected, timeout, "worker that took over")
    return killed_wall, bound - killed, bound_wall


def _restore_stamp(log: str) -> tuple[float, float, dict[str, float]] | None:
    """The log's restore from a checkpoint: its start and end (wall clock) and its phases."""
    restored = _stamped(log, _RESTORED)
    if restored is None:
        return None
    at, found = restored
    restore = dict(zip(("read", "decode", "replay"), (float(found.group(i)) for i in (1, 2, 3)), strict=True))
    return at - sum(restore.values()), at, restore


# ------------------------------------------------------------------------------------ the metrics tables


@dataclass(frozen=True, slots=True)
class MetricsRow:
    pods: int
    expiry: bool
    recover_s: float
    changelog_bytes: int
    entries: int
    """Keys in the tables at the end of the history (what recovery must bring back)."""
    generate_s: float


def _metric_samples(pods: int, nodes: int, days: float, end: float) -> list[MetricSample]:
    """The history's samples in event-time order (see the module docstring)."""
    start = end - days * 86400.0
    spacing = max(days * 86400.0 - POD_LIFE_S, 1.0) / pods
    timed: list[tuple[float, int, MetricSample]] = []
    for index in range(pods):
        born = start + index * spacing
        for step in range(int(POD_LIFE_S // POD_EVERY_S)):
            ts = born + step * POD_EVERY_S
            values = {"cpu": 0.1 + (index % 10) / 10, "memory": 1e8 * (1 + index % 5)}
            where = f"node-{index % nodes:05d}"
            sample = MetricSample(ts=ts, node=where, pod=f"pod-{index:07d}", values=values)
            timed.append((ts, len(timed), sample))
    for step in range(int(days * 86400.0 // NODE_EVERY_S)):
        ts = start + step * NODE_EVERY_S
        for node in range(nodes):
            values = {"cpu": 4.0 + node % 3, "memory": 3e10, "disk": 1e11}
            timed.append((ts, len(timed), MetricSample(ts=ts, node=f"node-{node:05d}", values=values)))
    timed.sort(key=lambda item: (item[0], item[1]))
    return [sample for _, _, sample in timed]


def _metrics_changelogs(settings: Settings) -> dict[str, str]:
    worker = app_id(settings, "worker")
    names = (metrics_agent.NODES_TABLE, metrics_agent.WORKLOADS_TABLE)
    return {name: f"{worker}-{name}-changelog" for name in names}


async def generate_metrics(settings: Settings, pods: int, nodes: int, days: float) -> int:
    """The metrics history through a core and its tables as the agent runs them, their changelog records
    written as each batch would send them; returns the keys left in the tables."""
    changelogs = _metrics_changelogs(settings)
    topics = [
        NewTopic(
            topic,
            settings.partitions,
            1,
            topic_configs={
                "cleanup.policy": "compact",
                "max.message.bytes": str(settings.max_message_bytes),
                **CHANGELOG_CONFIG,
            },
        )
        for topic in changelogs.values()
    ]
    await ensure_topics(settings, topics)
    ttl = settings.metrics_state_ttl_s or math.inf
    core = MetricsCore(summary_interval=settings.summary_interval, state_ttl=ttl)
    nodes_table, workloads_table = _Recorded(), _Recorded()
    tables = metrics_agent.MetricsTables(core, nodes_table, workloads_table)
    samples = _metric_samples(pods, nodes, days, time.time() - 120.0)
    producer = _bulk_producer(settings)
    await producer.start()
    try:
        writer = _Writer(producer)
        for first in range(0, len(samples), metrics_agent.BATCH):
            batch = samples[first : first + metrics_agent.BATCH]
            tables.sweep_if_due()
            for sample in batch:
                tables.restore(sample)
            summaries: list[Summary] = core.ingest(batch)
            tables.store(summaries)
            for name, table in (
                (metrics_agent.NODES_TABLE, nodes_table),
                (metrics_agent.WORKLOADS_TABLE, workloads_table),
            ):
                for key, value in table.take().items():
                    raw = key.encode()
                    await writer.send(changelogs[name], partition_of(raw, settings.partitions), raw, value)
        await writer.drain()
    finally:
        await producer.stop()
    return len(nodes_table) + len(workloads_table)


async def _settled_bytes(settings: Settings, topics: Sequence[str], limit: float) -> int:
    """The topics' bytes on disk once the log cleaner has stopped shrinking them (or `limit` passed)."""
    deadline = time.monotonic() + limit
    last = -1
    while True:
        size = sum((await topic_bytes(settings, topics)).values())
        if size == last or time.monotonic() > deadline:
            return size
        last = size
        await asyncio.sleep(20.0)


async def _probe_state(settings: Settings, timeout: float, started: Callable[[], None]) -> float:
    """When (monotonic) the probe node's state reached the nodes changelog; `started` runs once the
    consumer waits at the changelog's end (it starts the worker and sends the probe)."""
    topic = _metrics_changelogs(settings)[metrics_agent.NODES_TABLE]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=None, **client_security(settings)
    )
    await consumer.start()
    try:
        partition = TopicPartition(topic, partition_of(METRICS_PROBE.encode(), settings.partitions))
        consumer.assign([partition])
        await consumer.seek_to_end(partition)
        await consumer.position(partition)
        started()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=100)).values():
                if any(message.key == METRICS_PROBE.encode() for message in messages):
                    return time.monotonic()
        raise TimeoutError(f"no state of {METRICS_PROBE} on {topic} within {timeout:.0f} s")
    finally:
        await consumer.stop()


async def _send_probe(settings: Settings) -> None:
    sample = MetricSample(ts=time.time(), node=METRICS_PROBE, values={"cpu": 1.0})
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await producer.start()
    try:
        await producer.send_and_wait(settings.topic("metrics"), encode(sample), key=METRICS_PROBE.encode())
    finally:
        await producer.stop()


def measure_metrics_row(
    bootstrap: str, pods: int, nodes: int, days: float, expiry: bool, out: Path, timeout: float, keep: bool
) -> MetricsRow:
    """One metrics history, written, compacted, then recovered by a fresh worker (module docstring)."""
    prefix = f"recovery-{uuid.uuid4().hex[:6]}."
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": prefix,
        "EYRIE_DATA_DIR": str(out / prefix / "faust"),
    }
    if not expiry:
        env["EYRIE_METRICS_STATE_TTL_S"] = "0"
    settings = load_settings(env=env)
    logs = out / prefix
    logs.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    asyncio.run(ensure_topics(settings))
    entries = asyncio.run(generate_metrics(settings, pods, nodes, days))
    generated = time.monotonic() - started
    changelogs = list(_metrics_changelogs(settings).values())
    size = asyncio.run(_settled_bytes(settings, changelogs, SETTLE_S))
    print(
        f"  {pods:,} pods written in {generated:.1f} s, {entries:,} keys left, {size / 1e6:,.1f} MB",
        flush=True,
    )
    processes: list[subprocess.Popen[bytes]] = []
    spawned = 0.0

    def start() -> None:
        nonlocal spawned
        spawned = time.monotonic()
        processes.append(start_role("worker", env, logs))

    try:

        async def recover() -> float:
            waiting = asyncio.ensure_future(_probe_state(settings, timeout, start))
            while not processes:
                await asyncio.sleep(0.01)
            await _send_probe(settings)
            return await waiting

        written = asyncio.run(recover())
    finally:
        stop_all(processes)
    if not keep:
        asyncio.run(_delete_topics(settings))
    return MetricsRow(
        pods=pods,
        expiry=expiry,
        recover_s=round(written - spawned, 2),
        changelog_bytes=size,
        entries=entries,
        generate_s=round(generated, 1),
    )


def _run_metrics(args: argparse.Namespace, out: Path) -> None:
    rows: list[MetricsRow] = []
    started = time.monotonic()
    with resolved_broker() as bootstrap:
        for pods in args.pods:
            for expiry in (False, True):
                print(f"metrics history of {pods:,} pods, expiry {'on' if expiry else 'off'}", flush=True)
                row = measure_metrics_row(
                    bootstrap, pods, args.nodes, args.days, expiry, out, args.timeout, args.keep
                )
                print(f"  recovered in {row.recover_s:.2f} s", flush=True)
                rows.append(row)
    print(f"all histories in {time.monotonic() - started:.0f} s; logs in {out}", flush=True)
    print(orjson.dumps({"metrics": [asdict(row) for row in rows]}).decode())


def _phases_text(phases: dict[str, float]) -> str:
    return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in phases.items()) or "none logged"


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part.replace("_", "")) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError("a comma-separated list of pod counts") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("pod counts must be 1 or more")
    return sizes


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.recovery", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--pods",
        type=_sizes,
        default=None,
        help=f"History lengths (default: {FULL_SIZES}; with --metrics {METRICS_SIZES})",
    )
    parser.add_argument("--nodes", type=int, default=None, help="Nodes (default: 5000; with --metrics 50)")
    parser.add_argument("--metrics", action="store_true", help="Measure the metrics agent's tables instead")
    parser.add_argument("--days", type=float, default=7.0, help="Event time of a --metrics history")
    parser.add_argument("--live", type=int, default=20_000, help="Pods running at the end of a history")
    parser.add_argument("--rate", type=float, default=100.0, help="Pod arrivals per second of history time")
    parser.add_argument(
        "--checkpoint-every",
        type=int,
        default=None,
        help="Sequencer records between checkpoints in the checkpoint rows (default: the settings')",
    )
    parser.add_argument(
        "--no-baseline",
        action="store_true",
        help="Skip the rows with checkpoints off (their histories take longest to write and to take over)",
    )
    parser.add_argument(
        "--no-standby",
        action="store_true",
        help="Skip the hot-standby rows (two workers; the shard's owner killed, the other takes over)",
    )
    parser.add_argument(
        "--worst-tail",
        action="store_true",
        help="Go on past each history's pods until its next checkpoint is a record or two away, so the "
        "takeover replays about the longest tail the checkpoint settings allow",
    )
    parser.add_argument("--quick", action="store_true", help="One small history (tests)")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--out", default=None, help="Logs of the worker and applier (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="Leave the histories' topics on the broker")
    args = parser.parse_args(argv)
    if args.quick:
        quick = METRICS_QUICK if args.metrics else QUICK
        args.pods, args.nodes = quick["pods"], quick["nodes"]
        args.live = QUICK["live"]
        args.checkpoint_every = args.checkpoint_every or QUICK_CHECKPOINT_EVERY
        args.days = float(METRICS_QUICK["days"]) if args.metrics else args.days  # type: ignore[arg-type]
    if args.pods is None:
        args.pods = METRICS_SIZES if args.metrics else FULL_SIZES
    if args.nodes is None:
        args.nodes = 50 if args.metrics else 5000
    if args.nodes < 1 or args.live < 1 or args.rate <= 0 or args.days <= 0:
        print("error: --nodes, --live, --rate and --days must be positive", file=sys.stderr)
        raise SystemExit(2)
    if args.checkpoint_every is not None and args.checkpoint_every < 1:
        print("error: --checkpoint-every: must be 1 or more", file=sys.stderr)
        raise SystemExit(2)
    out = Path(args.out or tempfile.mkdtemp(prefix="eyrie-recovery-"))
    if args.metrics:
        _run_metrics(args, out)
        return
    modes = [True] if args.no_baseline else [False, True]
    rows: list[Row] = []
    started = time.monotonic()
    with resolved_broker() as bootstrap:
        for pods in args.pods:
            history = History(pods, args.nodes, min(args.live, pods), args.rate, args.worst_tail)
            for checkpoints in modes:
                print(f"history of {pods:,} pods, checkpoints {'on' if checkpoints else 'off'}", flush=True)
                measured = measure_row(
                    bootstrap,
                    history,
                    checkpoints,
                    out,
                    args.timeout,
                    args.keep,
                    args.checkpoint_every,
                    retention_wait_s=QUICK_RETENTION_WAIT_S if args.quick else RETENTION_WAIT_S,
                    standby=not args.no_standby,
                )
                row = measured[0]
                print(
                    f"  takeover {row.takeover_s:.2f} s, applier {row.applier_s:.2f} s, sequencer "
                    f"{row.sequencer_bytes / 1e6:,.1f} MB ({row.sequencer_records:,} records kept), "
                    f"ledger changelog {row.ledger_bytes / 1e6:,.1f} MB",
                    flush=True,
                )
                print(
                    f"  ledger changelog: {row.ledger_written:,} records written, "
                    f"{row.ledger_bytes_written / 1e6:,.1f} MB on disk after the history; the applier read "
                    f"{row.ledger_read:,} ({row.ledger_tombstones:,} tombstones); sequencer "
                    f"{row.sequencer_bytes_written / 1e6:,.1f} MB after the history, "
                    f"{row.sequencer_bytes / 1e6:,.1f} MB after the retention check",
                    flush=True,
                )
                print(f"  takeover phases: {_phases_text(row.phases)}", flush=True)
                for followed in measured[1:]:
                    if followed.spare:
                        print(
                            f"  spare worker: takeover {followed.takeover_s:.2f} s from the owner's SIGKILL; "
                            f"{_phases_text(followed.phases)}",
                            flush=True,
                        )
                        continue
                    print(
                        f"  hot standby: takeover {followed.takeover_s:.2f} s from the owner's SIGKILL, of "
                        f"which failure detection {followed.detection_s:.2f} s; "
                        f"{_phases_text(followed.phases)}",
                        flush=True,
                    )
                rows.extend(measured)
    print(f"all histories in {time.monotonic() - started:.0f} s; logs in {out}", flush=True)
    print(orjson.dumps({"histories": [asdict(row) for row in rows]}).decode())


if __name__ == "__main__":
    main()
