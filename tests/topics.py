"""A fresh topic with records in it, for Kafka tests that need one (the broker never auto-creates topics)."""

from collections.abc import Iterable

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

__all__ = ["topic_with"]


async def topic_with(bootstrap: str, topic: str, values: Iterable[bytes]) -> None:
    """Creates `topic` (one partition) and writes `values` to it, in order, each acknowledged."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=0)
    finally:
        await producer.stop()
