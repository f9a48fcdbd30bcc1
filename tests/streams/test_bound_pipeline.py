"""Pods bound by others through the whole pipeline, against a real broker: a worker and an applier as real
processes. A pod another scheduler bound fills most of a node; eyrie's pods go elsewhere, the applier
refuses a binding that would over-commit the node with it, `eyrie decisions` does not list it, and its
deletion gives the node back. The run, recorded, replays offline to the same decisions."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.events import Binding, BindingResult
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodBound, PodDeleted, PodRequest
from schemas.quantity import Resources
from streams.client import EyrieClient
from streams.runtime.agents.common import partition_of
from streams.settings import Settings
from tests.commands import run_module
from tests.streams.test_pipeline import Pipeline, start_pipeline, wait_for

pytestmark = pytest.mark.kafka

OTHER = "other-scheduler-pod"


def node(name: str) -> NodeEvent:
    room = {"cpu": "4", "memory": "8Gi", "pods": 110}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=room, allocatable=room))


def pod(uid: str, cpu: str = "1") -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": cpu, "memory": "256Mi"})


async def publish(settings: Settings, *records: tuple[str, str, Any]) -> None:
    async with EyrieClient(settings) as client:
        for topic, key, value in records:
            await client.send(topic, key, value)
        await client.flush()


async def bindings_topic(settings: Settings) -> list[Any]:
    async with EyrieClient(settings, create_topics=False) as client:
        return [decoded.value async for _, decoded in client.records(["bindings"])]


async def result_of(settings: Settings, uid: str) -> BindingResult | None:
    async with EyrieClient(settings, create_topics=False) as client:
        found = None
        async for value in client.events("binding-results"):
            if isinstance(value, BindingResult) and value.uid == uid:
                found = value
        return found


def eventually(condition: Any, what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)
    return value


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    running = start_pipeline(kafka_bootstrap, tmp_path_factory.mktemp("bound"))
    yield running
    running.stop()


def test_a_pod_bound_by_another_scheduler_keeps_eyrie_off_the_room_it_takes_until_it_is_deleted(
    pipeline: Pipeline, tmp_path: Path
) -> None:
    settings = pipeline.settings
    asyncio.run(publish(settings, *[("node-events", name, node(name)) for name in ("node-a", "node-b")]))
    time.sleep(2)  # nodes and pods travel different topics
    other = PodBound(uid=OTHER, node="node-a", pod=pod(OTHER, "3500m"), ts=time.time())
    asyncio.run(publish(settings, ("pod-requests", OTHER, other)))
    # Placement counted it once it passed it on to the applier (pods of other uids travel other partitions).
    eventually(lambda: any(isinstance(v, PodBound) for v in asyncio.run(bindings_topic(settings))), OTHER)

    first = {f"first-{i}" for i in range(4)}
    asyncio.run(publish(settings, *[("pod-requests", uid, pod(uid)) for uid in sorted(first)]))
    latest = wait_for(settings, first, timeout=90)
    assert {uid: (d.node, d.status) for uid, d in latest.items()} == {
        uid: ("node-b", "applied") for uid in first
    }

    # The applier's ledger counts it too: a binding that would over-commit node-a with it is refused.
    sneaky = Binding(uid="sneaky", node="node-a", requests=Resources({"cpu": 1000}), node_version=0)
    partition = partition_of("node-a", settings.partitions)
    asyncio.run(_send_binding(settings, sneaky, partition))
    answer = eventually(lambda: asyncio.run(result_of(settings, "sneaky")), "the applier's answer")
    assert (answer.status, answer.reasons) == ("conflict", ["Insufficient cpu"])

    # Deleted: node-a is eyrie's again, and node-b is full.
    asyncio.run(_delete(settings, OTHER))

    # Placement released it (its release goes to the applier in node-a's partition, before any binding there).
    def released() -> list[str]:
        return [v.uid for v in asyncio.run(bindings_topic(settings)) if isinstance(v, PodDeleted)]

    assert eventually(released, "the release") == [OTHER]
    after = {f"after-{i}" for i in range(3)}
    asyncio.run(publish(settings, *[("pod-requests", uid, pod(uid)) for uid in sorted(after)]))
    latest = wait_for(settings, after, timeout=90)
    assert {uid: (d.node, d.status) for uid, d in latest.items()} == {
        uid: ("node-a", "applied") for uid in after
    }

    # `eyrie decisions` reads PodBound on pod-requests and bindings: no crash, no line for it.
    shown = run_module("streams.cli", "decisions", env=pipeline.env)
    assert shown.returncode == 0, shown.stderr
    decisions = {d["uid"]: (d["node"], d["status"]) for d in map(orjson.loads, shown.stdout.splitlines())}
    assert OTHER not in decisions and decisions.keys() >= first | after

    # The run, recorded from the sequencer, replays offline to the live decisions pod for pod.
    time.sleep(2)  # the applier's last results reach placement after their users
    recorded = run_module("streams.cli", "record", "-o", tmp_path / "live.jsonl", env=pipeline.env)
    assert recorded.returncode == 0, recorded.stderr
    lines = [orjson.loads(line) for line in (tmp_path / "live.jsonl").read_text().splitlines()]
    assert [line["key"] for line in lines if line["value"] and line["value"].get("kind") == "PodBound"] == [
        OTHER
    ]
    out = tmp_path / "offline.jsonl"
    replayed = run_module(
        "streams.cli", "replay", tmp_path / "live.jsonl", "--offline", "-o", out, env=pipeline.env
    )
    assert replayed.returncode == 0, replayed.stderr
    offline = {d["uid"]: (d["node"], d["status"]) for d in map(orjson.loads, out.read_text().splitlines())}
    # (But for the binding this test sent the applier itself, which placement never made.)
    offline.pop("sneaky", None)
    assert offline == {uid: where for uid, where in decisions.items() if uid != "sneaky"}


async def _send_binding(settings: Settings, binding: Binding, partition: int) -> None:
    async with EyrieClient(settings) as client:
        await client.send("bindings", binding.uid, binding, partition=partition)
        await client.flush()


async def _delete(settings: Settings, uid: str) -> None:
    async with EyrieClient(settings) as client:
        await client.delete_pod(uid)
        await client.flush()
