"""The applier's read of node-events ahead of its node-events agent (`streams.runtime.node_feed`), on a real
broker: it applies, in order, exactly the records the agent has not taken, from the agent's next offset or
else the group's committed one, and the agent then skips what it applied."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from schemas.codec import encode
from schemas.node import NodeEvent, NodeSpec
from streams.local.services import free_port
from streams.runtime.node_feed import NodeFeed
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

pytestmark = pytest.mark.kafka

# ------------------------------------------------------------------------------------------- builders

NODES = 5


def fresh_settings(bootstrap: str) -> Settings:
    prefix = f"eyrie-test-{uuid.uuid4().hex[:8]}."
    return load_settings(env={"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "EYRIE_TOPIC_PREFIX": prefix})


def node_event(index: int) -> bytes:
    spec = NodeSpec(name=f"node-{index}", allocatable={"cpu": 4000, "memory": 8 * 2**30})
    return encode(NodeEvent(type="upsert", node=spec))


async def write_node_events(settings: Settings, values: list[bytes]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers)
    await producer.start()
    try:
        for index, value in enumerate(values):  # keyed: the topic is compacted
            await producer.send_and_wait(
                settings.topic("node-events"), value, key=f"node-{index}".encode(), partition=0
            )
    finally:
        await producer.stop()


async def ends(settings: Settings) -> dict[int, int]:
    """The end offsets of node-events, asked for as the applier asks its consumer."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers)
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic("node-events"), 0)
        return {tp.partition: end for tp, end in (await consumer.end_offsets([tp])).items()}
    finally:
        await consumer.stop()


async def commit(settings: Settings, group: str, offset: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic("node-events"), 0)
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await consumer.stop()


@dataclass
class Case:
    name: str
    taken_by_agent: int
    """The records the agent took before the catch-up (offsets 0 to this less one)."""
    committed: int | None
    expected: list[str]
    garbage_at: int | None = None
    """An offset holding a record that is no node event (the workers' forwarder dead-letters it)."""
    records: list[bytes] = field(default_factory=list)


CASES = [
    Case(
        "With nothing taken and nothing committed, the catch-up reads the partition from its start.",
        taken_by_agent=0,
        committed=None,
        expected=[f"node-{i}" for i in range(NODES)],
    ),
    Case(
        "With the first two records taken by the agent, the catch-up applies the three after them.",
        taken_by_agent=2,
        committed=None,
        expected=["node-2", "node-3", "node-4"],
    ),
    Case(
        "With nothing taken since the assignment, the catch-up starts at the group's committed offset.",
        taken_by_agent=0,
        committed=3,
        expected=["node-3", "node-4"],
    ),
    Case(
        "An agent level with the topic leaves the catch-up nothing to read.",
        taken_by_agent=NODES,
        committed=None,
        expected=[],
    ),
    Case(
        "A record that is no node event is passed over and the ones after it are applied.",
        taken_by_agent=1,
        committed=None,
        expected=["node-1", "node-3", "node-4"],
        garbage_at=2,
    ),
]


# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_a_catch_up_applies_exactly_the_node_events_the_agent_has_not_taken(
    kafka_bootstrap: str, case: Case
) -> None:
    async def scenario() -> None:
        settings = fresh_settings(kafka_bootstrap)
        await ensure_topics(settings)
        values = [node_event(i) for i in range(NODES)]
        if case.garbage_at is not None:
            values[case.garbage_at] = b'{"type": "upsert", "node": 7}'
        await write_node_events(settings, values)
        group = f"{settings.topic_prefix}applier"
        if case.committed is not None:
            await commit(settings, group, case.committed)
        applied: list[NodeEvent] = []
        feed = NodeFeed(settings, group, applied.append)
        assert all(feed.take(0, offset) for offset in range(case.taken_by_agent))

        taken = await feed.catch_up(await ends(settings))

        assert [event.node.name for event in applied] == case.expected
        assert taken == len(case.expected)
        # The agent then skips every record the catch-up read, and takes the next one written.
        assert not any(feed.take(0, offset) for offset in range(NODES))
        assert feed.take(0, NODES)

    asyncio.run(scenario())


def test_after_a_rebalance_the_catch_up_starts_again_from_the_committed_offset(kafka_bootstrap: str) -> None:
    async def scenario() -> None:
        settings = fresh_settings(kafka_bootstrap)
        await ensure_topics(settings)
        await write_node_events(settings, [node_event(i) for i in range(NODES)])
        group = f"{settings.topic_prefix}applier"
        applied: list[NodeEvent] = []
        feed = NodeFeed(settings, group, applied.append)
        assert await feed.catch_up(await ends(settings)) == NODES
        await commit(settings, group, 4)

        feed.assigned()
        assert await feed.catch_up(await ends(settings)) == 1
        assert [event.node.name for event in applied][-1] == "node-4"
        assert await feed.catch_up({}) == 0

    asyncio.run(scenario())


def test_a_level_ledger_asks_no_broker_and_one_behind_without_a_broker_gets_a_kafka_error() -> None:
    # Nothing listens on the bootstrap address: a catch-up that talked to a broker would fail.
    settings = load_settings(env={"KAFKA_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}"})
    applied: list[NodeEvent] = []
    feed = NodeFeed(settings, "applier", applied.append)
    assert all(feed.take(0, offset) for offset in range(NODES))

    async def scenario() -> None:
        assert await feed.catch_up({0: NODES}) == 0
        assert await feed.catch_up({0: NODES - 2}) == 0
        assert applied == []
        # Records it has not taken, and no broker to read them from: a Kafka error, which the applier
        # logs before answering the binding as the ledger stands.
        with pytest.raises(KafkaError):
            await feed.catch_up({0: NODES + 1})
        feed.assigned()
        with pytest.raises(KafkaError):
            await feed.catch_up({0: NODES})

    asyncio.run(scenario())
