"""The applier's results on their way to placement: applied ones are held for a while and travel together,
a conflict or a refusal takes everything held with it at once, and the consumer sends what is held before
it commits the bindings they answer."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from schemas.events import BindingResult, BindingStatus
from streams.core.ingress import envelope_from_model
from streams.core.sequencer import Envelope, decode_envelopes
from streams.runtime.agents.applier import ForPlacement
from streams.runtime.app import create_app
from streams.settings import Settings, load_settings

# ------------------------------------------------------------------------------------------- builders

LINGER_S = 0.05


class RecordingProducer:
    """Stands in for the app's Kafka producer: keeps what `streams.runtime.agents.common.send` hands it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, int | None, bytes]] = []

    async def send(self, topic: str, key: bytes, value: bytes, partition: int | None, *_: Any) -> None:
        self.sent.append((topic, partition, value))

    def uids_per_record(self) -> list[list[str]]:
        return [
            [envelope.value.uid for envelope in decode_envelopes(value) if isinstance(envelope, Envelope)]
            for _, _, value in self.sent
        ]


def topics_with(producer: RecordingProducer, settings: Settings | None = None) -> Any:
    settings = settings or load_settings(env={})
    return SimpleNamespace(settings=settings, app=SimpleNamespace(producer=producer))


def result(uid: str, status: BindingStatus = "applied") -> Envelope:
    answer = BindingResult(uid=uid, node="n1", cluster="default", status=status, at=1.0, attempt=1)
    envelope = envelope_from_model(answer, answer.at, "bindings/0")
    assert envelope is not None
    return envelope


# ---------------------------------------------------------------------------------------------- cases


@pytest.mark.parametrize(
    ("case", "batches", "sent_at_once", "sent_after_linger"),
    [
        (
            "applied results are held, then sent in one record once the linger is over",
            [["a"], ["b", "c"]],
            [],
            [["a", "b", "c"]],
        ),
        (
            "a conflict takes the results held before it along at once, in the order they were decided",
            [["a"], ["b", "c:conflict"]],
            [["a", "b", "c"]],
            [["a", "b", "c"]],
        ),
        (
            "a refusal is sent at once too, and what is applied after it waits for the next linger",
            [["a:rejected"], ["b"]],
            [["a"]],
            [["a"], ["b"]],
        ),
    ],
)
def test_results_for_placement(
    case: str, batches: list[list[str]], sent_at_once: list[list[str]], sent_after_linger: list[list[str]]
) -> None:
    async def scenario() -> tuple[list[list[str]], list[list[str]]]:
        producer = RecordingProducer()
        held = ForPlacement(topics_with(producer), linger_s=LINGER_S)
        for batch in batches:
            envelopes = [result(*spec.split(":")) for spec in batch]  # type: ignore[arg-type]
            await held.add(envelopes)
        at_once = producer.uids_per_record()
        await asyncio.sleep(LINGER_S * 4)
        return at_once, producer.uids_per_record()

    assert asyncio.run(scenario()) == (sent_at_once, sent_after_linger)


def test_a_batch_of_held_results_is_sent_without_waiting() -> None:
    async def scenario() -> int:
        producer = RecordingProducer()
        held = ForPlacement(topics_with(producer), linger_s=60.0)
        await held.add([result(f"pod-{i}") for i in range(1000)])
        return sum(len(uids) for uids in producer.uids_per_record())

    assert asyncio.run(scenario()) == 1000


def test_sending_with_nothing_held_sends_nothing() -> None:
    async def scenario() -> int:
        producer = RecordingProducer()
        await ForPlacement(topics_with(producer)).send()
        return len(producer.sent)

    assert asyncio.run(scenario()) == 0


@pytest.mark.parametrize(
    ("case", "role", "hooks"),
    [
        (
            "the applier sends its held results and notes what it acknowledged before its consumer commits, "
            "and settles the committed deletions after",
            "applier",
            (2, 1),
        ),
        ("a worker holds nothing back", "worker", (0, 0)),
    ],
)
def test_commit_hooks(case: str, role: str, hooks: tuple[int, int], tmp_path: Path) -> None:
    async def scenario() -> tuple[tuple[int, int], list[str]]:
        settings = load_settings(env={}, data_dir=str(tmp_path), topic_prefix="applier-test.")
        app: Any = create_app(settings, role)
        registered = (len(app.before_commit), len(app.after_commit))
        calls: list[str] = []

        async def before_commit() -> None:
            calls.append("sent")

        async def after_commit() -> None:
            calls.append("committed")

        app.before_commit.append(before_commit)
        app.after_commit.append(after_commit)
        await app.consumer._commit_tps([], start_new_transaction=False)  # nothing to commit: no broker asked
        return registered, calls

    # Nothing was committed, so nothing runs after.
    assert asyncio.run(scenario()) == (hooks, ["sent"])
