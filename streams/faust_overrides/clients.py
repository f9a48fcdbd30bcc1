"""Reads of the Kafka client inside aiokafka's consumer and Faust's consumer service, which neither library
makes public (no Faust import here: `streams.client` uses this without Faust)."""

from __future__ import annotations

from typing import Any

import aiokafka.errors
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.client import ConnectionGroup
from aiokafka.consumer.fetcher import Fetcher, OffsetResetStrategy

__all__ = ["consumer_client", "first_offsets", "refresh_metadata"]


def consumer_client(app: Any) -> Any | None:
    """The aiokafka client under a Faust app's Kafka consumer: the connections to the brokers and the
    cluster's metadata (None before the consumer has started)."""
    service = getattr(getattr(app, "consumer", None), "_thread", None)
    consumer = getattr(service, "_consumer", None)
    return getattr(consumer, "_client", None)


async def refresh_metadata(consumer: AIOKafkaConsumer) -> None:
    """Reads the cluster's metadata again now (topics created since the consumer started): aiokafka has no
    public refresh."""
    await consumer._client.force_metadata_update()


async def first_offsets(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
    """The first offsets of `tps`, asked on the connections aiokafka keeps for the group's coordination.
    `beginning_offsets` asks on the connection the consumer fetches on, where the request waits behind a
    fetch the broker holds for `fetch_max_wait_ms` while its partitions have nothing new (200 ms of every
    worker's start, asked right after the seek that lets the fetcher go). Falls back to
    `beginning_offsets`, with its retries, when a partition's leader is unknown or the request fails."""
    client = consumer._client
    by_node: dict[int, dict[str, list[tuple[int, int]]]] = {}
    for tp in tps:
        node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            return dict(await consumer.beginning_offsets(tps))
        topics = by_node.setdefault(node, {})
        topics.setdefault(tp.topic, []).append((tp.partition, OffsetResetStrategy.EARLIEST))
    # aiokafka's own request and reading of the answer, sent on the coordination connection.
    asking = _OnCoordination(client, consumer._fetcher._isolation_level)
    found: dict[TopicPartition, int] = {}
    try:
        for node, topics in by_node.items():
            answer = await Fetcher._proc_offset_request(asking, node, topics)
            found.update((tp, offset) for tp, (offset, _) in answer.items())
    except aiokafka.errors.KafkaError:
        return dict(await consumer.beginning_offsets(tps))
    if set(found) != set(tps) or min(found.values(), default=0) < 0:
        return dict(await consumer.beginning_offsets(tps))
    return found


class _OnCoordination:
    """What `Fetcher._proc_offset_request` reads of its fetcher (`_client.send`, `_isolation_level`), with
    the request sent on the coordination connections."""

    __slots__ = ("_isolation_level", "_kafka")

    def __init__(self, client: Any, isolation_level: int) -> None:
        self._kafka, self._isolation_level = client, isolation_level

    @property
    def _client(self) -> _OnCoordination:
        return self

    async def send(self, node_id: int, request: Any) -> Any:
        return await self._kafka.send(node_id, request, group=ConnectionGroup.COORDINATION)
