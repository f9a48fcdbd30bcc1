"""The client against a real broker: bulk publish and read-back, dead letters, decisions."""

import logging
import uuid
from collections import defaultdict

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from schemas.events import Binding, BindingResult, DeadLetter, MetricSample
from schemas.pod import PodRequest
from streams.client import EyrieClient
from streams.settings import load_settings

pytestmark = pytest.mark.kafka


def isolated_settings(bootstrap):
    """Every test gets its own topic prefix, so tests sharing the session's broker never see each other."""
    return load_settings(
        env={}, bootstrap_servers=bootstrap, topic_prefix=f"t{uuid.uuid4().hex[:8]}.", partitions=3
    )


def pod_version(uid_index, version):
    return PodRequest(
        uid=f"pod-{uid_index:05d}",
        workload=f"job-{uid_index % 37}",
        containers=[
            {
                "requests": {"cpu": f"{100 + uid_index % 900}m", "memory": f"{64 + version}Mi"},
                "limits": {"cpu": "2"},
            }
        ],
        priority=uid_index % 5,
        labels={"role": "worker"},
        created_at=float(version),
    )


async def test_twenty_thousand_pod_requests_come_back_equal_and_in_order_per_key(kafka_bootstrap):
    settings = isolated_settings(kafka_bootstrap)
    published = defaultdict(list)
    async with EyrieClient(settings) as client:
        # 2,000 pods, each published 10 times (as updates), interleaved: order per key is then meaningful.
        for version in range(10):
            for index in range(2_000):
                pod = pod_version(index, version)
                published[pod.uid].append(pod)
                await client.publish_pod(pod)
        await client.flush()

        received = defaultdict(list)
        async for pod in client.events("pod-requests"):
            received[pod.uid].append(pod)

    assert sum(len(v) for v in received.values()) == 20_000
    assert client.dead_letters == 0
    for uid, pods in published.items():
        assert received[uid] == pods, f"{uid} came back different or out of order"


async def test_topics_the_client_creates_take_a_first_record_on_every_partition_without_a_retry(
    kafka_bootstrap, caplog
):
    # Before the client waited for the partitions to be served, such sends met NotLeaderForPartition
    # (about a dozen retries per set of topics on this broker), each logged as a warning.
    settings = isolated_settings(kafka_bootstrap)
    caplog.set_level(logging.WARNING, logger="aiokafka")
    async with EyrieClient(settings) as client:
        for short in ("pod-requests", "bindings", "binding-results", "metrics"):
            for partition in range(settings.partitions):
                await client.send(short, f"first-{partition}", b"{}", partition=partition)
        await client.flush()

    retries = [record.getMessage() for record in caplog.records if "retrying" in record.getMessage()]
    assert retries == []


async def test_metric_samples_published_together_come_back_one_by_one_in_order(kafka_bootstrap):
    settings = isolated_settings(kafka_bootstrap)
    samples = [
        MetricSample(ts=float(t), node=f"n{t % 3}", values={"cpu": t / 10, "memory": 1e9 + t})
        for t in range(30)
    ]
    async with EyrieClient(settings) as client:
        await client.publish_metrics(samples)
        await client.flush()
        received = [sample async for sample in client.events("metrics")]
    assert client.dead_letters == 0
    for node in ("n0", "n1", "n2"):
        assert [s for s in received if s.node == node] == [s for s in samples if s.node == node]


async def test_a_scrape_too_large_for_one_record_travels_in_several_and_comes_back_whole_in_order(
    kafka_bootstrap,
):
    settings = isolated_settings(kafka_bootstrap).model_copy(update={"max_message_bytes": 64 * 1024})
    samples = [MetricSample(ts=float(t), node="n0", values={"cpu": t / 10}) for t in range(12_000)]
    async with EyrieClient(settings) as client:
        await client.publish_metrics(samples)  # ~0.6 MB and more elements than one record may carry
        await client.flush()
        received = [sample async for sample in client.events("metrics")]
        records = [record async for record in client.records(["metrics"], raw=True)]
    assert client.dead_letters == 0
    assert received == samples
    assert len(records) > 1


async def test_garbage_and_invalid_records_become_dead_letters_and_the_consumer_goes_on(kafka_bootstrap):
    settings = isolated_settings(kafka_bootstrap)
    topic = settings.topic("pod-requests")
    bad = [
        (b"k1", b"\xff\xfe garbage \x00"),
        (b"k2", b'{"uid": "k2", "requests": {"cpu": "lots"}}'),
        (b"k3", b'{"uid": "k3", "priority": "high"}'),
        (b"k4", b'{"uid": "k4", "requests": {"memory": "-1Gi"}}'),
        (b"wrong-key", b'{"uid": "k5"}'),
        (b"k6", b"[" * 300 + b"]" * 300),
        (b"k7", None),
    ]
    async with EyrieClient(settings) as client:
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(topic, orjson.dumps({"uid": "good-1"}), key=b"good-1", partition=0)
            for key, value in bad:
                await producer.send_and_wait(topic, value, key=key, partition=0)
            await producer.send_and_wait(topic, orjson.dumps({"uid": "good-2"}), key=b"good-2", partition=0)
        finally:
            await producer.stop()

        valid = [pod.uid async for pod in client.events("pod-requests")]
        await client.flush()
        letters = [letter async for letter in client.events("dead-letters")]

    assert valid == ["good-1", "good-2"]
    assert client.dead_letters == len(bad)
    assert all(isinstance(letter, DeadLetter) for letter in letters)
    assert [letter.key for letter in letters] == [key.decode() for key, _ in bad]
    assert [letter.offset for letter in letters] == list(range(1, len(bad) + 1))
    errors = [letter.error for letter in letters]
    assert "not valid JSON" in errors[0]
    assert errors[1].startswith("containers.0.requests.cpu")
    assert errors[2].startswith("priority")
    assert "negative" in errors[3]
    assert errors[4].startswith("key")
    assert "recursion limit" in errors[5]
    assert errors[6] == "empty record value"
    assert letters[0].raw.startswith("\\xff\\xfe garbage")


async def test_decisions_join_bindings_with_their_results(kafka_bootstrap):
    settings = isolated_settings(kafka_bootstrap)
    async with EyrieClient(settings) as client:
        await client.send(
            "bindings", "a", Binding(uid="a", node="n1", cluster="c1", score=180, profile="default")
        )
        await client.send("bindings", "b", Binding(uid="b", node="n2", cluster="c1"))
        await client.send("bindings", "c", Binding(uid="c", node="n1", cluster="c1"))
        await client.send(
            "binding-results", "a", BindingResult(uid="a", node="n1", cluster="c1", status="applied")
        )
        await client.send(
            "binding-results",
            "c",
            BindingResult(uid="c", node="n1", status="conflict", reasons=["node version moved"]),
        )
        await client.send(
            "binding-results",
            "d",
            BindingResult(uid="d", status="unschedulable", reasons=["0/3 nodes: Insufficient cpu"]),
        )
        await client.flush()
        decisions = {d.uid: d.to_json() async for d in client.decisions()}

    assert decisions["a"] | {"at": None, "time": None} == {
        "uid": "a",
        "namespace": None,
        "name": None,
        "node": "n1",
        "cluster": "c1",
        "status": "applied",
        "reasons": [],
        "profile": "default",
        "score": 180,
        "attempt": 0,
        "time": None,
        "at": None,
    }
    assert decisions["b"]["status"] == "pending" and decisions["b"]["node"] == "n2"
    assert decisions["c"]["status"] == "conflict" and decisions["c"]["reasons"] == ["node version moved"]
    assert decisions["d"]["node"] is None and decisions["d"]["status"] == "unschedulable"
