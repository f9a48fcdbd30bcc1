"""The `eyrie` command as a user runs it: exit codes, one-line errors, files written."""

import json
import uuid

import orjson
import pytest

from schemas.events import Binding, BindingResult
from streams.client import EyrieClient
from streams.settings import load_settings
from tests.commands import run_module


def eyrie(*args, env=None, check=False):
    result = run_module("streams.cli", *args, env=env)
    if check:
        assert result.returncode == 0, result.stderr
    return result


BAD_FILES = [
    (
        "a negative cpu request names the field",
        "bad.json",
        '{"uid": "p", "requests": {"cpu": "-2"}}',
        "containers.0.requests.cpu",
    ),
    ("an unknown field names itself", "bad.json", '{"uid": "p", "schedulername": "x"}', "schedulername"),
    ("a document of unknown shape says what was expected", "bad.json", '{"hello": 1}', "cannot tell"),
    ("truncated JSON is reported", "bad.json", '{"uid": ', "not valid JSON"),
    (
        "a bad JSON Lines line is reported by number",
        "bad.jsonl",
        '{"uid": "a"}\n{"uid": "b", "priority": "x"}\n',
        "bad.jsonl (line 2): priority",
    ),
    (
        "a bad YAML document is reported by index",
        "bad.yaml",
        "uid: a\n---\nuid: b\nreplicas: 0\n",
        "bad.yaml (document 2): replicas",
    ),
    (
        "a Deployment is not a Pod",
        "bad.yaml",
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\n",
        "cannot tell",
    ),
]


@pytest.mark.parametrize(("case", "name", "content", "expected"), BAD_FILES, ids=[c[0] for c in BAD_FILES])
def test_publish_of_a_bad_file_exits_2_with_one_line_naming_the_field(
    tmp_path, case, name, content, expected
):
    path = tmp_path / name
    path.write_text(content)
    # No broker is needed: files are validated before anything connects.
    result = eyrie("publish", path, "--bootstrap-servers", "127.0.0.1:1")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert expected in lines[0]


def test_publish_of_a_missing_file_exits_2(tmp_path):
    result = eyrie("publish", tmp_path / "nope.json")
    assert result.returncode == 2
    assert "no such file" in result.stderr


def test_replay_of_a_missing_log_exits_2_with_one_line_naming_the_argument(tmp_path):
    result = eyrie("replay", tmp_path / "nope.jsonl", "--offline")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: LOG: {tmp_path / 'nope.jsonl'}: no such file"]


def test_replay_into_a_missing_directory_fails_before_replaying(tmp_path):
    log = tmp_path / "log.jsonl"
    log.write_text('{"ts": 0, "topic": "pod-requests", "key": "a", "value": {"uid": "a"}}\n')
    result = eyrie("replay", log, "--offline", "--out", tmp_path / "nope" / "out.jsonl")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"error: --out: {tmp_path / 'nope' / 'out.jsonl'}: no such directory: {tmp_path / 'nope'}"
    ]


def test_dry_run_validates_every_kind_of_document(tmp_path):
    (tmp_path / "pods.yaml").write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\nspec:\n  containers:\n  - name: a\n"
        "    resources: {requests: {cpu: 250m}}\n---\nuid: plain\nrequests: {cpu: 1}\n"
    )
    (tmp_path / "events.jsonl").write_text(
        '{"type": "upsert", "node": {"name": "n1", "capacity": {"cpu": 4, "memory": "16Gi"}}}\n'
        '{"ts": 1, "node": "n1", "values": {"cpu": 1.5}}\n'
        '{"uid": "plain", "ts": 9}\n'
    )
    (tmp_path / "list.json").write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "List",
                "items": [
                    {
                        "apiVersion": "v1",
                        "kind": "Pod",
                        "metadata": {"name": "x"},
                        "spec": {"containers": [{}]},
                    }
                ],
            }
        )
    )
    result = eyrie(
        "publish",
        "--dry-run",
        tmp_path / "pods.yaml",
        tmp_path / "events.jsonl",
        tmp_path / "list.json",
        check=True,
    )
    assert result.stdout.strip() == "6 documents valid"


def test_schema_export_writes_one_json_schema_per_model(tmp_path):
    result = eyrie("schema", "export", tmp_path / "schemas", check=True)
    written = sorted(p.name for p in (tmp_path / "schemas").iterdir())
    assert written == sorted(
        f"{name}.schema.json"
        for name in (
            "Binding",
            "BindingResult",
            "DeadLetter",
            "MetricSample",
            "NodeEvent",
            "NodeSpec",
            "PodBound",
            "PodDeleted",
            "PodRequest",
        )
    )
    schema = json.loads((tmp_path / "schemas" / "PodRequest.schema.json").read_text())
    assert schema["x-schema-version"] == 1
    assert "uid" in schema["required"]
    assert "wrote 9 schemas" in result.stdout


def test_an_unreachable_broker_is_one_line(tmp_path):
    path = tmp_path / "pod.json"
    path.write_text('{"uid": "p"}')
    result = eyrie("publish", path, "--bootstrap-servers", "127.0.0.1:1")
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "127.0.0.1:1" in result.stderr


def test_a_bad_setting_in_the_environment_names_the_variable(tmp_path):
    import os

    path = tmp_path / "pod.json"
    path.write_text('{"uid": "p"}')
    result = eyrie("publish", path, env={**os.environ, "EYRIE_PARTITIONS": "many"})
    assert result.returncode == 2
    assert "EYRIE_PARTITIONS" in result.stderr and "partitions" in result.stderr


@pytest.mark.kafka
async def test_published_pods_and_their_decisions_come_out_of_the_decisions_command(
    tmp_path, kafka_bootstrap
):
    import os

    prefix = f"cli{uuid.uuid4().hex[:8]}."
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "EYRIE_TOPIC_PREFIX": prefix}
    path = tmp_path / "pods.jsonl"
    path.write_text(
        "".join(orjson.dumps({"uid": f"p{i}", "requests": {"cpu": "100m"}}).decode() + "\n" for i in range(5))
    )
    published = eyrie("publish", path, env=env, check=True)
    assert "published 5 records" in published.stdout

    settings = load_settings(env={}, bootstrap_servers=kafka_bootstrap, topic_prefix=prefix)
    async with EyrieClient(settings) as client:
        pods = [pod.uid async for pod in client.events("pod-requests")]
        for uid in pods:
            await client.send("bindings", uid, Binding(uid=uid, node="n1"))
        await client.send("binding-results", "p0", BindingResult(uid="p0", node="n1", status="applied"))
        await client.flush()

    result = eyrie("decisions", env=env, check=True)
    decisions = {d["uid"]: d for d in map(json.loads, result.stdout.splitlines())}
    assert sorted(pods) == sorted(decisions) == [f"p{i}" for i in range(5)]
    assert decisions["p0"]["status"] == "applied"
    assert {decisions[f"p{i}"]["status"] for i in range(1, 5)} == {"pending"}
    for decision in decisions.values():
        assert {"uid", "node", "cluster", "status", "reasons"} <= set(decision)
