"""Prometheus metrics and the health check on the worker's and applier's web ports (`--web-port`)."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request
from collections import namedtuple
from collections.abc import Iterator

import pytest

from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.client import EyrieClient
from streams.local.broker import free_ports
from streams.runtime.observability import Observability, consumer_lag
from tests.streams.test_pipeline import Pipeline, start_pipeline, wait_for

TP = namedtuple("TP", "topic partition")

# ------------------------------------------------------------------------------------------- builders


def scrape(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def sample(text: str, name: str) -> float:
    """The value of one sample line (name with its labels, exactly), 0 when absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def wait_answering(port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            scrape(port, "/health")
            return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"nothing answers on port {port}")


# ----------------------------------------------------------------------------------------- pure parts


@pytest.mark.parametrize(
    ("read", "end", "expected"),
    [
        pytest.param({TP("a", 0): 9}, {TP("a", 0): 10}, {("a", 0): 0}, id="Everything read is no lag."),
        pytest.param({TP("a", 0): 4}, {TP("a", 0): 10}, {("a", 0): 5}, id="Offsets 5 to 9 unread are 5."),
        pytest.param({}, {TP("a", 1): 10}, {}, id="A partition never read is not reported."),
        pytest.param({TP("a", 0): 12}, {TP("a", 0): 10}, {("a", 0): 0}, id="A stale end offset is no lag."),
    ],
)
def test_consumer_lag_is_the_end_offset_minus_the_next_offset_to_read(read, end, expected):
    assert consumer_lag(read, end) == expected


def test_every_documented_metric_is_exposed_before_anything_happened():
    text = Observability().exposition().decode()
    for name in (
        "eyrie_scheduling_attempt_duration_seconds",
        "eyrie_scheduling_latency_seconds",
        "eyrie_decisions_total",
        "eyrie_unschedulable_total",
        "eyrie_binding_results_total",
        "eyrie_conflicts_total",
        "eyrie_dead_letters_total",
    ):
        assert f"# TYPE {name.removesuffix('_total')}" in text, name


# ------------------------------------------------------------------------------------- through Kafka


@pytest.fixture(scope="module")
def observed(
    kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Pipeline, dict]]:
    ports = dict(zip(("worker", "applier"), free_ports(2), strict=True))
    running = start_pipeline(kafka_bootstrap, tmp_path_factory.mktemp("observed"), web_ports=ports)
    yield running, ports
    running.stop()


@pytest.mark.kafka
def test_decisions_results_dead_letters_and_latency_are_counted_and_health_is_ok(observed):
    pipeline, ports = observed

    async def publish() -> None:
        async with EyrieClient(pipeline.settings) as client:
            spec = NodeSpec(
                name="obs-node",
                capacity={"cpu": "4", "memory": "8Gi", "pods": 110},
                allocatable={"cpu": "4", "memory": "8Gi", "pods": 110},
            )
            await client.publish_node_event(NodeEvent(type="upsert", node=spec))
            await client.flush()
            await asyncio.sleep(2)
            await client.publish_pod(PodRequest(uid="fits", requests={"cpu": "1"}))
            await client.publish_pod(PodRequest(uid="too-big", requests={"cpu": "64"}))
            await client.send("pod-requests", "garbage", b"{not json")
            await client.flush()

    wait_answering(ports["worker"])
    wait_answering(ports["applier"])
    asyncio.run(publish())
    # The node and the pods travel different topics: under load "fits" may come first, be declared
    # unschedulable, and be placed on its retry once the node is there. Wait for where it ends.
    deadline = time.monotonic() + 90
    while True:
        latest = wait_for(pipeline.settings, {"fits", "too-big"}, timeout=90)
        if latest["fits"].status == "applied" or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert (latest["fits"].status, latest["too-big"].status) == ("applied", "unschedulable")

    deadline = time.monotonic() + 30
    while True:  # the applier's counter rises a moment after the result is readable
        _, worker = scrape(ports["worker"], "/metrics")
        _, applier = scrape(ports["applier"], "/metrics")
        if (
            sample(applier, 'eyrie_binding_results_total{status="applied"}') >= 1
            or time.monotonic() > deadline
        ):
            break
        time.sleep(0.5)
    assert sample(worker, 'eyrie_decisions_total{decision="binding"}') == 1
    assert sample(worker, 'eyrie_decisions_total{decision="unschedulable"}') >= 1
    assert sample(worker, "eyrie_unschedulable_total") >= 1
    assert sample(worker, "eyrie_scheduling_latency_seconds_count") >= 2
    attempts = sum(
        sample(worker, f'eyrie_scheduling_attempt_duration_seconds_count{{result="{result}"}}')
        for result in ("scheduled", "unschedulable", "waiting")
    )
    assert attempts == 2  # one per pod request (retries run from the queue, not from a request)
    dead = f'eyrie_dead_letters_total{{topic="{pipeline.settings.topic("pod-requests")}"}}'
    assert sample(worker, dead) == 1
    assert "eyrie_consumer_lag{" in worker
    assert sample(applier, 'eyrie_binding_results_total{status="applied"}') == 1
    assert sample(applier, "eyrie_conflicts_total") == 0

    for role in ("worker", "applier"):
        status, body = scrape(ports[role], "/health")
        health = json.loads(body)
        assert (status, health["status"], health["role"]) == (200, "ok", role)
        assert health["crashed_agents"] == []
