"""`eyrie decisions` as an operator reads it: namespace and name beside the uid, ISO-8601 times beside Unix
seconds, deleted pods shown deleted, lines in decision order, and a table on request."""

import json
import os
import uuid
from datetime import UTC, datetime

import pytest

from schemas.eventlog import EventLogWriter
from schemas.events import Binding, BindingResult
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.client import RELEASED, EyrieClient
from streams.settings import load_settings
from tests.commands import run_module

T = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def iso(ts):
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def binding(uid, namespace, name, node, at, attempt=0):
    return Binding(
        uid=uid, namespace=namespace, name=name, node=node, cluster="c1", decided_at=at, attempt=attempt
    )


def result(uid, namespace, name, node, status, at, reasons=(), attempt=0):
    return BindingResult(
        uid=uid,
        namespace=namespace,
        name=name,
        node=node,
        cluster="c1",
        status=status,
        reasons=list(reasons),
        at=at,
        attempt=attempt,
    )


# Published in this order; uid order (a, b, c, d) differs from decision order (c, a, b, d) on purpose.
RECORDS = [
    ("pod-requests", "p-e", PodRequest(uid="p-e", namespace="shop", name="undecided")),
    ("bindings", "p-c", binding("p-c", "shop", "cart", "n1", T + 1)),
    ("binding-results", "p-c", result("p-c", "shop", "cart", "n1", "applied", T + 2)),
    ("bindings", "p-a", binding("p-a", "shop", "api", "n2", T + 3)),
    (
        "binding-results",
        "p-b",
        result("p-b", "default", "batch", None, "unschedulable", T + 4, ["0/2 nodes"]),
    ),
    ("bindings", "p-d", binding("p-d", "web", "front", "n2", T + 5)),
    ("binding-results", "p-d", result("p-d", "web", "front", "n2", "applied", T + 5.5)),
    ("pod-requests", "p-b", PodDeleted(uid="p-b", ts=T + 6)),  # its owner gave up on it
    ("bindings", "p-d", PodDeleted(uid="p-d", ts=T + 7)),  # placement released it
]

EXPECTED = [
    pytest.param(
        "p-c",
        {"namespace": "shop", "name": "cart", "status": "applied", "node": "n1", "at": T + 2},
        id="An applied pod shows its namespace, name, node and when it was applied.",
    ),
    pytest.param(
        "p-a",
        {"namespace": "shop", "name": "api", "status": "pending", "node": "n2", "at": T + 3},
        id="A bound pod without a result is pending since its binding.",
    ),
    pytest.param(
        "p-b",
        {
            "namespace": "default",
            "name": "batch",
            "status": "deleted",
            "reasons": ["pod deleted"],
            "at": T + 6,
        },
        id="An unschedulable pod its owner deleted is deleted, not unschedulable for ever.",
    ),
    pytest.param(
        "p-d",
        {
            "namespace": "web",
            "name": "front",
            "status": "deleted",
            "node": "n2",
            "reasons": [RELEASED],
            "at": T + 7,
        },
        id="An applied pod placement released is deleted, and keeps the node it was on.",
    ),
]


@pytest.fixture(scope="module")
def published(kafka_bootstrap):
    """The records above on fresh topics; the environment that points `eyrie` at them."""
    import asyncio

    prefix = f"dec{uuid.uuid4().hex[:8]}."
    settings = load_settings(env={}, bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, partitions=3)

    async def publish():
        async with EyrieClient(settings) as client:
            for topic, key, value in RECORDS:
                await client.send(topic, key, value)
            await client.flush()

    asyncio.run(publish())
    return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "EYRIE_TOPIC_PREFIX": prefix}


def decisions(env, *args):
    result = run_module("streams.cli", "decisions", *args, env=env)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.fixture(scope="module")
def lines(published):
    return [json.loads(line) for line in decisions(published).splitlines()]


@pytest.mark.kafka
@pytest.mark.parametrize(("uid", "expected"), EXPECTED)
def test_each_pod_reads_as_a_person_needs_it(lines, uid, expected):
    (line,) = [line for line in lines if line["uid"] == uid]
    assert {key: line[key] for key in expected} == expected
    assert line["time"] == iso(line["at"])


@pytest.mark.kafka
def test_lines_come_in_decision_order_and_only_for_pods_with_a_decision(lines):
    assert [line["uid"] for line in lines] == ["p-c", "p-a", "p-b", "p-d"]
    assert list(lines[0]) == [
        "uid",
        "namespace",
        "name",
        "status",
        "node",
        "cluster",
        "reasons",
        "profile",
        "score",
        "attempt",
        "time",
        "at",
    ]


@pytest.mark.kafka
def test_the_table_has_a_header_and_a_row_per_pod_in_decision_order(published):
    rows = [line.split() for line in decisions(published, "--output", "table").splitlines() if line.strip()]
    assert rows[0] == ["NAMESPACE", "NAME", "UID", "STATUS", "NODE", "CLUSTER", "TIME", "REASONS"]
    body = [row for row in rows[1:] if not set("".join(row)) <= set("─━-")]
    assert [row[:4] for row in body] == [
        ["shop", "cart", "p-c", "applied"],
        ["shop", "api", "p-a", "pending"],
        ["default", "batch", "p-b", "deleted"],
        ["web", "front", "p-d", "deleted"],
    ]
    assert body[0][6] == iso(T + 2)


@pytest.mark.kafka
def test_following_ends_each_deleted_pod_on_a_deleted_line(published):
    followed = [
        json.loads(line)
        for line in decisions(published, "--follow", "--from-beginning", "--until-idle", "3").splitlines()
    ]
    last = {line["uid"]: line["status"] for line in followed}
    assert last == {"p-c": "applied", "p-b": "deleted", "p-d": "deleted"}


def test_placement_puts_the_pods_namespace_and_name_on_its_decisions(tmp_path):
    log, out = tmp_path / "log.jsonl", tmp_path / "decisions.jsonl"
    node = NodeSpec(name="n1", capacity={"cpu": "4", "memory": "8Gi", "pods": 110})
    with EventLogWriter(log) as writer:
        writer.write(1.0, "node-events", "n1", NodeEvent(type="upsert", node=node, ts=1.0))
        fits = PodRequest(uid="u1", namespace="shop", name="cart", requests={"cpu": "1"})
        writer.write(2.0, "pod-requests", "u1", fits)
        too_big = PodRequest(uid="u2", namespace="shop", name="huge", requests={"cpu": "64"})
        writer.write(3.0, "pod-requests", "u2", too_big)
    result = run_module("streams.cli", "replay", log, "--offline", "--out", out)
    assert result.returncode == 0, result.stderr
    found = {line["uid"]: line for line in map(json.loads, out.read_text().splitlines())}
    assert {uid: (d["namespace"], d["name"], d["status"]) for uid, d in found.items()} == {
        "u1": ("shop", "cart", "applied"),
        "u2": ("shop", "huge", "unschedulable"),
    }
