"""The hot standby on a real broker: it follows a shard's sequencer only up to what the placement group
committed (or the newest checkpoint), never past it, and the shard it hands over at a takeover is the
shard an offline replay of the partition up to the takeover's offset builds, byte for byte."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.structs import OffsetAndMetadata

from schemas.exceptions import ConfigError
from streams.core.checkpoint import encode_checkpoint
from streams.core.sequencer import encode_envelope
from streams.runtime.agents.standby import Standby, followed
from streams.runtime.app import app_id
from streams.runtime.checkpoint_slots import checkpoint_records
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.streams.test_checkpoint import RUNS
from tests.streams.test_checkpoint_kafka import fresh_settings, produce, shard_after

# ------------------------------------------------------------------------------------------- builders

ENVELOPES = RUNS[1].envelopes
"""500 envelopes of a seeded workload (nodes, pods, deletions, ticks), one sequencer record each."""


@dataclass(frozen=True)
class Case:
    committed: int
    """The placement group's committed sequencer offset while the standby follows."""
    until: int
    """The offset of the first record the new owner is handed (where Faust seeks it)."""
    checkpoint: int | None = None
    """A checkpoint written at this offset before the standby starts."""
    deleted_before: int = 0
    """Sequencer records deleted before this offset (behind the checkpoint)."""
    adopted_at: int | None = None
    """Where the adopted shard stands; None: the standby declines and the shard is restored instead."""


async def commit(settings: Settings, offset: int) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=app_id(settings, "worker"),
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        tp = TopicPartition(settings.topic("sequencer"), 0)
        consumer.assign([tp])
        await consumer.commit({tp: OffsetAndMetadata(offset, "")})
    finally:
        await consumer.stop()


async def delete_before(settings: Settings, offset: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers)
    await admin.start()
    try:
        await admin.delete_records({TopicPartition(settings.topic("sequencer"), 0): RecordsToDelete(offset)})
    finally:
        await admin.close()


async def until_true(condition: object, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


async def follow_then_adopt(settings: Settings, case: Case) -> tuple[int, tuple[bytes, int] | None]:
    """Writes the partition, lets a standby follow it, adopts at `case.until`: the offset the follower
    reached before the adoption, and the adopted shard's checkpoint bytes with its offset."""
    await ensure_topics(settings)
    await produce(settings, "sequencer", [(b"shard-0", encode_envelope(e)) for e in ENVELOPES])
    if case.checkpoint is not None:
        data = encode_checkpoint(shard_after(case.checkpoint), case.checkpoint)
        records = checkpoint_records("shard-0", "a", data, case.checkpoint, 20_000)
        await produce(settings, "checkpoints", records)
    if case.deleted_before:
        await delete_before(settings, case.deleted_before)
    await commit(settings, case.committed)
    standby = Standby(settings)
    task = asyncio.create_task(standby.run())
    try:
        await standby.on_assigned(None, set(), signal=None)  # this worker owns no shard
        reach = max(case.committed, case.checkpoint or 0)
        await until_true(
            lambda: 0 in standby.followers and standby.followers[0].next_offset >= reach,
            f"the standby at offset {reach}",
        )
        await asyncio.sleep(2 * 0.5 + 0.5)  # more polls: it must not go past the committed offset
        reached = standby.followers[0].next_offset
        adopted = await standby.adopt(0, case.until)
        assert 0 not in standby.followers  # adopted or declined, the standby no longer has it
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if adopted is None:
        return reached, None
    shard, offset = adopted
    return reached, (encode_checkpoint(shard, offset), offset)


# ----------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("unowned", "limit", "rank", "expected"),
    [
        pytest.param({0, 1, 2, 3}, 0, 5, set(), id="A limit of zero follows nothing."),
        pytest.param({1, 3}, 8, 0, {1, 3}, id="A limit above the unowned partitions follows all of them."),
        pytest.param({0, 1, 2, 3}, 2, 0, {0, 1}, id="Rank zero follows the first partitions in order."),
        pytest.param({0, 1, 2, 3}, 2, 3, {3, 0}, id="Another rank starts elsewhere and wraps around."),
        pytest.param(set(), 4, 7, set(), id="With every partition owned there is nothing to follow."),
    ],
)
def test_a_worker_follows_at_most_its_limit_of_the_partitions_it_does_not_own(
    unowned: set[int], limit: int, rank: int, expected: set[int]
) -> None:
    assert followed(unowned, limit, rank) == expected


@pytest.mark.parametrize(
    ("env", "error"),
    [
        pytest.param(
            {"EYRIE_SESSION_TIMEOUT_S": "6", "EYRIE_HEARTBEAT_INTERVAL_S": "3"},
            "heartbeat_interval_s: must be at most a third of session_timeout_s (6 s)",
            id="A heartbeat interval above a third of the session timeout is refused.",
        ),
        pytest.param(
            {"EYRIE_STANDBY_SHARDS": "-1"},
            "standby_shards",
            id="A negative number of standby shards is refused.",
        ),
    ],
)
def test_failure_detection_settings_that_would_fail_members_over_are_refused(
    env: dict[str, str], error: str
) -> None:
    with pytest.raises(ConfigError, match=re.escape(error)):
        load_settings(env=env)


def test_the_defaults_detect_a_dead_worker_within_a_session_of_six_seconds() -> None:
    settings = Settings()
    assert settings.session_timeout_s == 6.0
    assert settings.heartbeat_interval_s * 3 <= settings.session_timeout_s
    assert settings.standby_shards == 0


@pytest.mark.kafka
@pytest.mark.parametrize(
    "case",
    [
        pytest.param(
            Case(committed=150, until=150, adopted_at=150),
            id="The standby stops at the committed offset, and the takeover starting there adopts it as is.",
        ),
        pytest.param(
            Case(committed=100, until=260, adopted_at=260),
            id="The owner committed more after the standby's last poll: the adoption replays the tail.",
        ),
        pytest.param(
            Case(committed=100, until=100, checkpoint=300, adopted_at=300),
            id="A checkpoint newer than the committed offset: the standby and the takeover both start there.",
        ),
        pytest.param(
            Case(committed=200, until=320, checkpoint=150, deleted_before=150, adopted_at=320),
            id="The standby restores from the checkpoint when the records behind it are deleted.",
        ),
        pytest.param(
            Case(committed=200, until=120, adopted_at=None),
            id="A standby ahead of the takeover's offset declines, and the shard is restored instead.",
        ),
    ],
)
def test_the_standby_follows_up_to_the_group_and_hands_over_the_shard_an_offline_replay_builds(
    kafka_bootstrap: str, case: Case
) -> None:
    settings = fresh_settings(kafka_bootstrap)
    settings = settings.model_copy(update={"standby_shards": 1})
    reached, adopted = asyncio.run(follow_then_adopt(settings, case))
    assert reached == max(case.committed, case.checkpoint or 0)  # never past what the owner is done with
    if case.adopted_at is None:
        assert adopted is None
        return
    assert adopted is not None
    data, offset = adopted
    assert offset == case.adopted_at
    assert data == encode_checkpoint(shard_after(offset), offset)
