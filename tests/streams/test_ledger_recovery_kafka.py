"""A real applier's ledger on a real broker: once their deletion is committed, deleted pods leave the ledger's
pod table as tombstones in its changelog, and a fresh applier recovers the live pods only: from the table
checkpoints and the changelog after them, or, with checkpoints off or unreadable, from the whole changelog."""

from __future__ import annotations

import asyncio
import os
import re
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from schemas.codec import encode
from schemas.events import Binding
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted
from schemas.quantity import Resources
from streams.core.ledger import NODES_TABLE, PODS_TABLE
from streams.demo.processes import start_role, stop_all
from streams.runtime.agents.common import partition_of
from streams.runtime.app import app_id
from streams.runtime.checkpoint_slots import SLOTS, slot_key
from streams.runtime.table_checkpoints import table_owner
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.streams.changelogs import read_changelog

pytestmark = pytest.mark.kafka

WAIT_S = 120.0
PODS = 20
DELETED = 10
NODES = ("n0", "n1")

# ------------------------------------------------------------------------------------------- builders


def node_event(name: str) -> NodeEvent:
    spec = NodeSpec(name=name, allocatable=Resources({"cpu": 64_000, "pods": 110}))
    return NodeEvent(type="upsert", node=spec, ts=time.time())


def binding(index: int) -> Binding:
    return Binding(
        uid=f"p{index}",
        node=NODES[index % len(NODES)],
        requests=Resources({"cpu": 100}),
        attempt=0,
        cluster="c1",
    )


class Changelog:
    """The ledger's pod-table changelog as a recovering applier reads it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.topic = f"{app_id(settings, 'applier')}-{PODS_TABLE}-changelog"

    async def read(self) -> tuple[dict[str, bytes], set[str]]:
        """Each key's last value (none where the last is a tombstone), and the keys with a tombstone."""
        return await read_changelog(self.settings, self.topic)


async def send(settings: Settings, records: list[tuple[str, int, str, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers)
    await producer.start()
    try:
        for short, partition, key, value in records:
            await producer.send(settings.topic(short), value, key=key.encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def bindings_records(
    settings: Settings, values: Sequence[Binding | PodDeleted], nodes: Sequence[str]
) -> list[tuple[str, int, str, bytes]]:
    """Bindings and deletions on the bindings partition of their node, as placement sends them."""
    return [
        ("bindings", partition_of(node, settings.partitions), value.uid, encode(value))
        for value, node in zip(values, nodes, strict=True)
    ]


def node_records(names: tuple[str, ...]) -> list[tuple[str, int, str, bytes]]:
    return [("node-events", 0, name, encode(node_event(name))) for name in names]


async def applied(settings: Settings, uids: set[str]) -> set[str]:
    """The uids among `uids` with an ``applied`` result on binding-results so far."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    await asyncio.sleep(0)
    try:
        partitions = [
            TopicPartition(settings.topic("binding-results"), p) for p in range(settings.partitions)
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        found: set[str] = set()
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                for message in messages:
                    result = orjson.loads(message.value)
                    if result["uid"] in uids and result["status"] == "applied":
                        found.add(result["uid"])
        return found
    finally:
        await consumer.stop()


def wait_applied(settings: Settings, uids: set[str]) -> None:
    deadline = time.monotonic() + WAIT_S
    while (done := asyncio.run(applied(settings, uids))) != uids:
        assert time.monotonic() < deadline, f"not applied: {sorted(uids - done)}"
        time.sleep(0.5)


def corrupt_checkpoints(settings: Settings) -> list[tuple[str, int, str, bytes]]:
    """A manifest whose parts do not match it, in every slot of every table partition: the newest value of
    each, so every checkpoint the applier wrote is unreadable."""
    manifest = orjson.dumps({"offset": 1, "parts": 1, "sha256": "0" * 64, "bytes": 1})
    return [
        ("table-checkpoints", partition, slot_key(table_owner(table, partition), slot).decode(), manifest)
        for table in (NODES_TABLE, PODS_TABLE)
        for partition in range(settings.partitions)
        for slot in SLOTS
    ]


async def dead_letter_errors(settings: Settings) -> list[str]:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic("dead-letters"), 0)
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        errors = []
        while await consumer.position(tp) < end:
            for message in (await consumer.getmany(tp, timeout_ms=500)).get(tp, []):
                errors.append(orjson.loads(message.value)["error"])
        return errors
    finally:
        await consumer.stop()


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("checkpoints", "corrupt", "restored"),
    [
        pytest.param(
            {"EYRIE_CHECKPOINT_EVERY_ENVELOPES": "0", "EYRIE_CHECKPOINT_EVERY_S": "0"},
            False,
            False,
            id="With checkpoints off the fresh applier reads the whole changelog.",
        ),
        pytest.param(
            {"EYRIE_CHECKPOINT_EVERY_ENVELOPES": "5"},
            False,
            True,
            id="With checkpoints every five records the fresh applier loads them and reads the tail after.",
        ),
        pytest.param(
            {"EYRIE_CHECKPOINT_EVERY_ENVELOPES": "5"},
            True,
            False,
            id="With every checkpoint unreadable the fresh applier says so, dead-letters them, reads it all.",
        ),
    ],
)
def test_deleted_pods_are_tombstoned_and_a_fresh_applier_recovers_only_the_live_ones(
    kafka_bootstrap: str, tmp_path: Path, checkpoints: dict[str, str], corrupt: bool, restored: bool
) -> None:
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"eyrie-test-{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DELETED_SETTLE_S": "0",  # settled at the first commit that covers the deletion
        **checkpoints,
    }
    settings = load_settings(env=env)
    asyncio.run(ensure_topics(settings))
    logs = tmp_path / "logs"
    logs.mkdir()
    changelog = Changelog(settings)
    bindings = [binding(index) for index in range(PODS)]
    deletions = [PodDeleted(uid=f"p{index}", ts=time.time()) for index in range(DELETED)]
    live = {f"p{index}" for index in range(DELETED, PODS)}

    first = start_role("applier", {**os.environ, **env, "EYRIE_DATA_DIR": str(tmp_path / "first")}, logs)
    try:
        asyncio.run(send(settings, node_records(NODES)))
        asyncio.run(send(settings, bindings_records(settings, bindings, [b.node for b in bindings])))
        wait_applied(settings, {b.uid for b in bindings})
        nodes_of = [b.node for b in bindings[:DELETED]]
        asyncio.run(send(settings, bindings_records(settings, deletions, nodes_of)))
        deadline = time.monotonic() + WAIT_S
        while True:
            view, tombstoned = asyncio.run(changelog.read())
            if set(view) == live:
                break
            assert time.monotonic() < deadline, f"the changelog holds {sorted(view)}"
            # Deletions settle at a commit, and an idle applier has nothing new to commit: node events keep
            # it busy.
            asyncio.run(send(settings, node_records(NODES)))
            time.sleep(0.5)
    finally:
        stop_all([first])
    assert tombstoned == {d.uid for d in deletions}
    assert {orjson.loads(value)["state"] for value in view.values()} == {"bound"}
    if corrupt:
        asyncio.run(send(settings, corrupt_checkpoints(settings)))

    second = start_role(
        "applier", {**os.environ, **env, "EYRIE_DATA_DIR": str(tmp_path / "second")}, logs, suffix="-second"
    )
    try:
        extra = binding(PODS)
        asyncio.run(send(settings, bindings_records(settings, [extra], [extra.node])))
        wait_applied(settings, {extra.uid})
    finally:
        stop_all([second])
    text = (logs / "applier-second.log").read_text()
    recovered = re.search(r"ledger recovered: (\d+) pods bound, (\d+) entries", text)
    assert recovered is not None
    assert (int(recovered.group(1)), int(recovered.group(2))) == (len(live), len(live))
    loaded = re.search(rf"table {PODS_TABLE}: partitions restored from checkpoints .*: (.*)", text)
    partitions = re.findall(r"(\d+) \(\d+ entries", loaded.group(1)) if loaded else []
    assert partitions == ([str(p) for p in range(settings.partitions)] if restored else [])
    errors = [e for e in asyncio.run(dead_letter_errors(settings)) if e.startswith("checkpoint:")]
    assert len(errors) == (len(corrupt_checkpoints(settings)) if corrupt else 0)
    assert ("cannot be read" in text) == corrupt
