"""Every topic of the pipeline, declared once, and created idempotently with the admin client.

Workers never rely on broker auto-creation (it is off on the local broker, and a Faust agent on a missing
topic silently subscribes to nothing), so everything that produces or consumes calls `ensure_topics` first.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from schemas.exceptions import BrokerError
from streams.runtime.security import client_security, kafka_errors
from streams.settings import Settings

__all__ = ["TOPICS", "TopicSpec", "ensure_topics", "topic_specs"]

_TOPIC_ALREADY_EXISTS = 36


@dataclass(frozen=True, slots=True)
class TopicSpec:
    short: str
    keyed_by: str
    partitions: int | None = None  # None: the settings' partition count
    compacted: bool = False
    config: dict[str, str] = field(default_factory=dict)


TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec("metrics", "node name"),
    TopicSpec("node-events", "node name", partitions=1, compacted=True),
    TopicSpec("pod-requests", "pod uid"),
    TopicSpec("bindings", "pod uid"),
    TopicSpec("binding-results", "pod uid"),
    TopicSpec("dead-letters", "source topic", partitions=1),
    TopicSpec("config", "profile name", partitions=1, compacted=True),
    # Internal: every input of a cluster shard, in one partition per shard. No time retention: it is the
    # shard's changelog (a worker that takes a shard over replays it after the shard's newest checkpoint),
    # and the placement agent deletes what lies behind the checkpoints itself (DeleteRecords). The broker
    # frees disk a whole segment at a time, at its retention check (`log.retention.check.interval.ms`), so
    # segments are kept small (16 MiB, or 10 minutes of records): what a deletion leaves on disk is then
    # about one segment beyond the records the checkpoints need.
    TopicSpec(
        "sequencer",
        "cluster shard",
        config={"retention.ms": "-1", "segment.bytes": str(16 * 2**20), "segment.ms": "600000"},
    ),
    # Internal: shard checkpoints, one partition per shard (the sequencer's), two slots per shard written in
    # turn (docs/checkpoints.md). Compacted, with short segments so superseded checkpoints go soon.
    TopicSpec(
        "checkpoints",
        "cluster shard and slot",
        compacted=True,
        config={"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "600000"},
    ),
    # Internal: checkpoints of the applier's tables, one partition per table partition, two slots each.
    TopicSpec(
        "table-checkpoints",
        "table, partition and slot",
        compacted=True,
        config={"segment.ms": "600000", "min.cleanable.dirty.ratio": "0.1", "delete.retention.ms": "600000"},
    ),
)


def topic_specs(settings: Settings) -> list[NewTopic]:
    specs = []
    for spec in TOPICS:
        config = {"max.message.bytes": str(settings.max_message_bytes), **spec.config}
        if spec.compacted:
            config["cleanup.policy"] = "compact"
        specs.append(
            NewTopic(
                name=settings.topic(spec.short),
                num_partitions=settings.shards
                if spec.short in ("sequencer", "checkpoints")
                else spec.partitions or settings.partitions,
                replication_factor=settings.replication_factor,
                topic_configs=config,
            )
        )
    return specs


async def _wait_until_served(
    admin: AIOKafkaAdminClient, settings: Settings, topics: list[str], timeout: float = 15.0
) -> None:
    # A producer that starts before the partitions are served gets NotLeaderForPartition, retries and logs a
    # warning per retry (the first thing `make demo` printed). Metadata names a leader as soon as the KRaft
    # controller picks one, before the leader broker hosts the partition, so leaders alone are not enough:
    # the partitions are served once ListOffsets (`end_offsets`, which retries quietly) answers for each.
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while topics and loop.time() < deadline:
        described = await admin.describe_topics(topics)
        if all(
            topic["error_code"] == 0
            and topic["partitions"]
            and all(p["leader"] >= 0 for p in topic["partitions"])
            for topic in described
        ):
            partitions = [
                TopicPartition(topic["topic"], p["partition"])
                for topic in described
                for p in topic["partitions"]
            ]
            consumer = AIOKafkaConsumer(
                bootstrap_servers=settings.bootstrap_servers,
                client_id=settings.client_id,
                request_timeout_ms=max(1, int((deadline - loop.time()) * 1000)),
                retry_backoff_ms=10,
                **client_security(settings),
            )
            await consumer.start()
            try:
                with contextlib.suppress(KafkaError):  # not served in time: the producers' retries remain
                    await consumer.end_offsets(partitions)
            finally:
                await consumer.stop()
            return
        await asyncio.sleep(0.1)


async def ensure_topics(settings: Settings, extra: list[NewTopic] | None = None) -> list[str]:
    """Create whichever declared topics are missing; returns the names created (empty when all exist)."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        request_timeout_ms=settings.request_timeout_ms,
        client_id=settings.client_id,
        **client_security(settings),
    )
    try:
        with kafka_errors(settings):
            await admin.start()
            existing = set(await admin.list_topics())
            brokers = len((await admin.describe_cluster())["brokers"]) or 1
            wanted = [*topic_specs(settings), *(extra or [])]
            missing = [
                NewTopic(
                    t.name,
                    t.num_partitions,
                    min(t.replication_factor, brokers),
                    topic_configs=t.topic_configs,
                )
                for t in wanted
                if t.name not in existing
            ]
            if not missing:
                return []
            response = await admin.create_topics(missing)
            created = []
            for name, code, *message in response.topic_errors:
                if code not in (0, _TOPIC_ALREADY_EXISTS):  # another process may have created it meanwhile
                    raise BrokerError(
                        f"cannot create topic {name}: error {code} {message[0] if message else ''}"
                    )
                if code == 0:
                    created.append(name)
            await _wait_until_served(admin, settings, created)
            return created
    finally:
        await admin.close()
