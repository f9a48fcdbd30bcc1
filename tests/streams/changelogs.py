"""A table's changelog read from a real broker as a recovering process reads it."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer, TopicPartition

from streams.settings import Settings

__all__ = ["read_changelog"]


async def read_changelog(settings: Settings, topic: str) -> tuple[dict[str, bytes], set[str]]:
    """Each key's last value (none where the last is a tombstone), and the keys with a tombstone; both
    empty while the topic does not exist yet."""
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, group_id=None)
    await consumer.start()
    # Let the consumer's background task begin: cancelled before its first step (a stop at once, while the
    # changelog does not exist yet), it raises CancelledError out of `stop`.
    await asyncio.sleep(0)
    try:
        if topic not in await consumer.topics():
            return {}, set()
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        view: dict[str, bytes] = {}
        tombstoned: set[str] = set()
        while [tp for tp in partitions if await consumer.position(tp) < ends[tp]]:
            for messages in (await consumer.getmany(timeout_ms=200)).values():
                for message in messages:
                    key = bytes(message.key or b"").decode()
                    if message.value is None:
                        view.pop(key, None)
                        tombstoned.add(key)
                    else:
                        view[key] = bytes(message.value)
        return view, tombstoned
    finally:
        await consumer.stop()
