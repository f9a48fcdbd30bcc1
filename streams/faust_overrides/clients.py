"""Reads of the Kafka client inside aiokafka's consumer and Faust's consumer service, which neither library
makes public (no Faust import here: `streams.client` uses this without Faust)."""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaConsumer

__all__ = ["consumer_client", "refresh_metadata"]


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
