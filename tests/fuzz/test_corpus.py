"""The hostile corpus through the pipeline's cores in process (no Kafka): every record meets the fate the
corpus documents for it. The same corpus goes through a live worker and applier in
test_pipeline_hostile.py."""

from __future__ import annotations

import pytest

from tests.fuzz.corpus import LIMIT, TOPICS, Fate, classes, corpus
from tests.fuzz.fates import problems, run_in_process

NOW = 1_750_000_000.0
PER_TOPIC = 300

# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    "topic",
    TOPICS,
    ids=[
        f"Every hostile {topic} record is a dead letter, a refusal or handled as documented."
        for topic in TOPICS
    ],
)
def test_every_record_of_one_topic_meets_its_documented_fate(topic: str) -> None:
    records = {topic: list(corpus(topic, PER_TOPIC, now=NOW))}
    sent, never, outcome, _ = run_in_process(records, now=NOW, limit=LIMIT)
    found = problems(sent, outcome, never)
    assert not found, "\n".join(found[:20])
    assert len({record.klass.split(" in ")[0] for record in records[topic]}) >= len(classes(topic)) // 2


def test_all_topics_interleaved_meet_their_fates_and_place_no_hostile_pod() -> None:
    records = {topic: list(corpus(topic, 150, now=NOW)) for topic in TOPICS}
    sent, never, outcome, pipeline = run_in_process(records, now=NOW, limit=LIMIT)
    found = problems(sent, outcome, never)
    assert not found, "\n".join(found[:20])
    assert not pipeline.shard.scheduler.snapshot.pods, "a corpus pod was placed"
    assert (
        pipeline.shard.counters["duplicate_pod"] > 0 and pipeline.shard.counters["summary_unknown_node"] > 0
    )


def test_the_same_seed_gives_the_same_corpus_and_another_seed_another() -> None:
    def take(seed: int) -> list[tuple[bytes | None, bytes | None]]:
        return [(r.key, r.value) for r in corpus("pod-requests", 120, seed=seed, now=NOW)]

    assert take(3) == take(3)
    assert take(3) != take(4)


@pytest.mark.parametrize(
    "topic",
    TOPICS,
    ids=[f"The {topic} records near the limit sit on the side of it their fate says." for topic in TOPICS],
)
def test_records_near_the_limit_sit_on_the_side_of_it_their_fate_says(topic: str) -> None:
    near = [r for r in corpus(topic, len(classes(topic)), now=NOW) if "max_message_bytes" in r.klass]
    assert {r.fate for r in near} == {Fate.DEAD_LETTER, Fate.NEVER_SENT}
    for record in near:
        size = len(record.value or b"") + len(record.key or b"")
        assert (size > LIMIT) == (record.fate is Fate.NEVER_SENT), (record.klass, size)
        assert size > LIMIT - 4096, (record.klass, size)
