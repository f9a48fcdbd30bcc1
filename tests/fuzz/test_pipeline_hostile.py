"""The hostile corpus through a live worker and applier (`eyrie worker`, `eyrie applier`, a real broker):
every record meets its documented fate, nothing crashes, and the worker's memory stays flat.

10,000 records per topic (pod requests, node events, metrics, bindings, profiles and the internal sequencer),
published in two halves; the worker's resident memory after the second half is compared with after the first.
Run it with ``pytest -m slow tests/fuzz``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from schemas.events import BindingResult, DeadLetter
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.client import EyrieClient
from streams.demo.processes import resident_bytes
from streams.local.broker import free_ports
from streams.runtime.security import client_security, producer_limits
from streams.settings import Settings
from tests.fuzz.corpus import TOPICS, Fate, Hostile, corpus
from tests.fuzz.fates import Outcome, Where, problems, refused_node
from tests.streams.test_observability import scrape, wait_answering
from tests.streams.test_pipeline import Pipeline, start_pipeline

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

log = logging.getLogger(__name__)

PER_TOPIC = 10_000
COMPACTED = ("node-events", "config")

# ------------------------------------------------------------------------------------------- builders


@dataclass
class Published:
    sent: dict[Where, Hostile] = field(default_factory=dict)
    never: list[Hostile] = field(default_factory=list)
    """Records the producer or the broker refused."""
    refusals: list[str] = field(default_factory=list)
    """Why, one line each."""

    @property
    def letters(self) -> int:
        """Dead letters the records sent so far must cause (placement's refusals included)."""
        return sum(
            record.letters if record.fate is Fate.DEAD_LETTER else int(record.fate is Fate.REFUSED)
            for record in self.sent.values()
        )


async def publish(settings: Settings, records: list[Hostile], into: Published) -> None:
    """Send `records` as they are (bytes, keys that are not UTF-8, tombstones), noting where each landed.
    A record the producer refuses outright, or that has no key on a compacted topic, is sent alone by a
    plain producer: the broker refuses its whole batch, and an idempotent producer would stop after that."""
    common = {"bootstrap_servers": settings.bootstrap_servers, **client_security(settings)}
    producer = AIOKafkaProducer(
        enable_idempotence=True, acks="all", linger_ms=5, **common, **producer_limits(settings)
    )
    plain = AIOKafkaProducer(acks=1, **common, **producer_limits(settings))
    await producer.start()
    await plain.start()
    try:
        pending: list[tuple[Hostile, asyncio.Future[object]]] = []
        for record in records:
            topic = settings.topic(record.topic)
            partition = 0 if record.topic == "sequencer" else None
            lone = record.key is None and record.topic in COMPACTED
            try:
                if lone:
                    await (await plain.send(topic, record.value, key=record.key, partition=partition))
                    pending.append((record, _done(None)))  # accepted after all: the checks will say so
                    continue
                future = await producer.send(topic, record.value, key=record.key, partition=partition)
            except (MessageSizeTooLargeError, KafkaError) as exc:
                into.never.append(record)
                into.refusals.append(f"{record.topic} {record.klass}: {type(exc).__name__}")
                continue
            pending.append((record, future))
        for record, future in pending:
            metadata = await future
            if metadata is None:
                into.sent[(record.topic, -1, len(into.sent))] = record
                continue
            into.sent[(record.topic, metadata.partition, metadata.offset)] = record  # type: ignore[attr-defined]
    finally:
        await producer.stop()
        await plain.stop()


def _done(value: object) -> asyncio.Future[object]:
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def dead_letter_count(settings: Settings) -> int:
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await consumer.start()
    try:
        partition = TopicPartition(settings.topic("dead-letters"), 0)
        return int((await consumer.end_offsets([partition]))[partition])
    finally:
        await consumer.stop()


def wait_for_letters(settings: Settings, expected: int, timeout: float = 300.0) -> int:
    """The dead-letter count once it reaches `expected`, or once it stalls for 15 s (the checks at the end
    then say which records are missing their letters)."""
    deadline = time.monotonic() + timeout
    seen, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        count = asyncio.run(dead_letter_count(settings))
        if count >= expected:
            return count
        if count != seen:
            seen, since = count, time.monotonic()
        elif time.monotonic() - since >= 15.0:
            break
        time.sleep(0.5)
    return seen


def healthy(port: int) -> tuple[int, dict[str, object]]:
    status, body = scrape(port, "/health")
    return status, json.loads(body)


async def read_quietly(settings: Settings) -> tuple[list[BindingResult], list[DeadLetter]]:
    """Results and dead letters, read by a client that is never started: `read_all`'s client publishes a
    dead letter for every invalid binding it reads, which would count each of them again per read."""
    results: list[BindingResult] = []
    letters: list[DeadLetter] = []
    client = EyrieClient(settings, create_topics=False)
    async for _, decoded in client.records(["binding-results", "dead-letters"]):
        if isinstance(decoded.value, BindingResult):
            results.append(decoded.value)
        elif isinstance(decoded.value, DeadLetter):
            letters.append(decoded.value)
    return results, letters


def wait_quietly(settings: Settings, uid: str, timeout: float = 120.0) -> BindingResult | None:
    """`uid`'s latest applier result once there is one (`wait_for` reads through `read_all`)."""
    deadline = time.monotonic() + timeout
    while True:
        results, _ = asyncio.run(read_quietly(settings))
        mine = [r for r in results if r.uid == uid and r.status != "unschedulable"]
        if mine or time.monotonic() > deadline:
            return mine[-1] if mine else None
        time.sleep(1.0)


async def outcome_of(settings: Settings) -> Outcome:
    results, letters = await read_quietly(settings)
    outcome = Outcome()
    for letter in letters:
        topic = letter.topic.removeprefix(settings.topic_prefix)
        if letter.offset is not None and letter.partition is not None:
            outcome.letters[(topic, letter.partition, letter.offset)].append(letter)
        elif (node := refused_node(letter)) is not None:
            outcome.refusals[node] += 1
        else:
            outcome.strays.append(letter)
    for result in results:
        if result.status == "unschedulable":
            outcome.verdicts[result.uid] += 1
        else:
            outcome.results[result.uid] += 1
    return outcome


@pytest.fixture(scope="module")
def hostile(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, dict[str, int]]]:
    ports = dict(zip(("worker", "applier"), free_ports(2), strict=True))
    running = start_pipeline(kafka_bootstrap, tmp_path_factory.mktemp("hostile"), web_ports=ports)
    yield running, ports
    running.stop()


# ---------------------------------------------------------------------------------------------- test


def test_ten_thousand_hostile_records_per_topic_meet_their_fates_and_the_workers_stay_up_and_flat(
    hostile: tuple[Pipeline, dict[str, int]],
) -> None:
    pipeline, ports = hostile
    settings = pipeline.settings
    started = time.monotonic()
    records = {  # while the worker and the applier start
        topic: list(corpus(topic, PER_TOPIC, now=time.time(), limit=settings.max_message_bytes))
        for topic in TOPICS
    }
    generated = time.monotonic()
    wait_answering(ports["worker"])
    wait_answering(ports["applier"])
    ready = time.monotonic()
    published = Published()
    resident: list[int] = []
    half = PER_TOPIC // 2
    halves: list[float] = []
    for part in (slice(0, half), slice(half, PER_TOPIC)):
        begun = time.monotonic()
        batch = [record for topic in TOPICS for record in records[topic][part]]
        asyncio.run(publish(settings, batch, published))
        count = wait_for_letters(settings, published.letters)
        resident.append(resident_bytes(pipeline.processes["worker"].pid) // 1024)
        halves.append(time.monotonic() - begun)
        log.warning(
            "after %d records: %d dead letters (%d expected), worker %d KiB",
            len(published.sent),
            count,
            published.letters,
            resident[-1],
        )
    processed = time.monotonic()

    async def valid() -> None:
        async with EyrieClient(settings, create_topics=False) as client:
            spec = NodeSpec(name="after-the-storm", capacity={"cpu": "4", "memory": "8Gi", "pods": 110})
            await client.publish_node_event(NodeEvent(type="upsert", node=spec))
            await client.flush()
            await asyncio.sleep(2)  # nodes and pods travel different topics
            pod = PodRequest.model_validate(
                {"uid": "still-placed", "requests": {"cpu": "1", "memory": "1Gi"}}
            )
            await client.publish_pod(pod)

    asyncio.run(valid())
    result = wait_quietly(settings, "still-placed")
    assert result is not None and (result.status, result.node) == ("applied", "after-the-storm"), result
    placed = time.monotonic()
    outcome = asyncio.run(outcome_of(settings))
    finished = time.monotonic()

    for role in ("worker", "applier"):
        assert pipeline.processes[role].poll() is None, f"the {role} exited; logs:\n{pipeline.logs()[-5000:]}"
        status, body = healthy(ports[role])
        assert (status, body.get("crashed_agents")) == (200, []), body
    found = problems(published.sent, outcome, published.never)
    assert not found, f"{len(found)} records off their fate:\n" + "\n".join(found[:40])
    assert all(record.fate is Fate.NEVER_SENT for record in published.never), published.refusals
    assert resident[1] <= resident[0] * 1.10, f"worker RSS grew from {resident[0]} to {resident[1]} KiB"
    # Its shard holds the profiles the corpus's config records defined; every checkpoint must still be
    # written, or the tail a takeover replays grows without bound.
    assert "cannot write a checkpoint" not in pipeline.logs()
    log.warning(
        "hostile corpus: %d records sent, %d refused before the topic; generated in %.1f s, published and "
        "processed in %.1f s (halves %s), valid pod applied %.1f s later, read back in %.1f s; worker RSS "
        "%d → %d KiB",
        len(published.sent),
        len(published.never),
        generated - started,
        processed - ready,
        " + ".join(f"{t:.1f} s" for t in halves),
        placed - processed,
        finished - placed,
        *resident,
    )
