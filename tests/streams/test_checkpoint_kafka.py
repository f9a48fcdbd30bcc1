"""Checkpoints on a real broker: written in parts under two slots, read back newest first, a slot cut short
falls back to the other, and a replay that would need deleted sequencer records refuses instead of
rebuilding a wrong shard."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from streams.core.checkpoint import CheckpointError, decode_checkpoint, encode_checkpoint
from streams.core.sequencer import encode_envelope
from streams.core.shard import Shard
from streams.runtime.agents.placement import _rebuild, read_shard_checkpoints
from streams.runtime.checkpoint_slots import READ_WINDOW, checkpoint_records, slot_key
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.streams.test_checkpoint import RUNS

pytestmark = pytest.mark.kafka

# ------------------------------------------------------------------------------------------- builders


def fresh_settings(bootstrap: str) -> Settings:
    prefix = f"eyrie-test-{uuid.uuid4().hex[:8]}."
    return load_settings(env={"KAFKA_BOOTSTRAP_SERVERS": bootstrap, "EYRIE_TOPIC_PREFIX": prefix})


async def produce(
    settings: Settings, topic: str, records: list[tuple[bytes, bytes]], partition: int = 0
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers, max_request_size=4 * 1024 * 1024
    )
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(settings.topic(topic), value, key=key, partition=partition)
    finally:
        await producer.stop()


def shard_after(count: int) -> Shard:
    shard = Shard()
    shard.feed_all(RUNS[1].envelopes[:count])
    return shard


# ----------------------------------------------------------------------------------------------- tests


def test_a_checkpoint_in_parts_is_read_back_and_a_slot_cut_short_falls_back(kafka_bootstrap: str) -> None:
    async def scenario() -> None:
        settings = fresh_settings(kafka_bootstrap)
        await ensure_topics(settings)
        older, newer = encode_checkpoint(shard_after(100), 100), encode_checkpoint(shard_after(200), 200)
        await produce(settings, "checkpoints", checkpoint_records("shard-0", "a", older, 100, 20_000))
        await produce(settings, "checkpoints", checkpoint_records("shard-0", "b", newer, 200, 20_000))
        records = await read_shard_checkpoints(settings, 0)
        assert records.checkpoint("a") == (older, 100)
        assert records.checkpoint("b") == (newer, 200)
        assert decode_checkpoint(records.checkpoint("b")[0])[1] == 200

        # A crash while writing slot a again: some parts of a newer checkpoint, no new manifest.
        newest = encode_checkpoint(shard_after(300), 300)
        await produce(settings, "checkpoints", checkpoint_records("shard-0", "a", newest, 300, 20_000)[:2])
        records = await read_shard_checkpoints(settings, 0)
        with pytest.raises(CheckpointError, match="do not match its manifest"):
            records.checkpoint("a")
        assert records.checkpoint("b") == (newer, 200)
        assert slot_key("shard-0", "a", 1) in records.values

    asyncio.run(scenario())


def test_a_replay_needing_deleted_sequencer_records_refuses_and_the_tail_after_a_checkpoint_rebuilds(
    kafka_bootstrap: str,
) -> None:
    async def scenario() -> None:
        settings = fresh_settings(kafka_bootstrap)
        await ensure_topics(settings)
        envelopes = RUNS[1].envelopes[:300]
        await produce(settings, "sequencer", [(b"shard-0", encode_envelope(e)) for e in envelopes])
        admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
        await admin.start()
        try:
            await admin.delete_records({TopicPartition(settings.topic("sequencer"), 0): RecordsToDelete(150)})
        finally:
            await admin.close()
        with pytest.raises(CheckpointError, match=r"records 0\.\.149 of shard 0 were deleted"):
            await _rebuild(settings, 0, 300)
        restored, offset = decode_checkpoint(encode_checkpoint(shard_after(200), 200))
        caught_up = await _rebuild(settings, 0, 300, offset, restored)
        assert encode_checkpoint(caught_up, 300) == encode_checkpoint(shard_after(300), 300)

    asyncio.run(scenario())


def test_a_takeover_reads_the_newest_checkpoints_from_the_end_not_every_checkpoint_ever_written(
    kafka_bootstrap: str,
) -> None:
    async def scenario() -> None:
        settings = fresh_settings(kafka_bootstrap)
        await ensure_topics(settings)
        # Thirty checkpoints in turn into the two slots, each in three parts, all still in the compacted
        # topic's open segment (as a worker that ran for a while leaves them).
        written: dict[str, tuple[bytes, int]] = {}
        total = 0
        for count in range(1, 31):
            slot = "ab"[count % 2]
            data = encode_checkpoint(shard_after(count * 10), count * 10)
            records = checkpoint_records("shard-0", slot, data, count * 10, len(data) // 3 + 1)
            await produce(settings, "checkpoints", records)
            written[slot], total = (data, count * 10), total + len(records)
        read = await read_shard_checkpoints(settings, 0)
        assert read.checkpoint("a") == written["a"]
        assert read.checkpoint("b") == written["b"]
        # Two windows from the end (the first holds the newest checkpoint whole, not both).
        assert read.scanned <= READ_WINDOW * 5 < total

    asyncio.run(scenario())
