"""`eyrie profiles publish|list|show`, `eyrie dead-letters`, `eyrie nodes` and `eyrie pending` as a user runs
them, in child processes against the shared broker, each scenario on its own topic prefix.

Profiles and pending pods need no worker (what they read is what was published); dead letters and node
allocations come from a live worker and applier, started once for the module.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.events import Binding, BindingResult
from streams.client import EyrieClient
from streams.demo.processes import start_role
from streams.settings import Settings, load_settings
from tests.commands import run_module

pytestmark = pytest.mark.kafka

# ------------------------------------------------------------------------------------------- builders


@dataclass
class Prefix:
    """One topic prefix: the environment that points `eyrie` at it, and its settings."""

    env: dict[str, str]
    settings: Settings
    workdir: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def eyrie(self, *args: object) -> subprocess.CompletedProcess[str]:
        return run_module("streams.cli", *args, env=self.env, timeout=90)

    def ok(self, *args: object) -> subprocess.CompletedProcess[str]:
        result = self.eyrie(*args)
        assert result.returncode == 0, result.stderr
        return result

    def lines(self, *args: object) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ok(*args).stdout.splitlines() if line.strip()]

    def until(
        self, args: tuple[object, ...], done: Callable[[list[dict[str, Any]]], bool]
    ) -> list[dict[str, Any]]:
        """The command's JSON lines once `done` holds for them (or at the deadline, for the assertion)."""
        deadline = time.monotonic() + 60
        while True:
            found = self.lines(*args)
            if done(found) or time.monotonic() > deadline:
                return found
            time.sleep(1)

    def send(self, *records: tuple[str, str, Any]) -> None:
        async def publish() -> None:
            async with EyrieClient(self.settings) as client:
                for topic, key, value in records:
                    await client.send(topic, key, value)

        asyncio.run(publish())

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.workdir.glob("*.log"))


def new_prefix(bootstrap: str, workdir: Path) -> Prefix:
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": f"inspect{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(workdir / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }
    return Prefix(env, load_settings(env=env), workdir)


def write(path: Path, document: Any) -> Path:
    path.write_text(yaml.safe_dump_all(document) if isinstance(document, list) else yaml.safe_dump(document))
    return path


PACKER = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "profiles": [
        {
            "schedulerName": "packer",
            "pluginConfig": [
                {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
            ],
        }
    ],
}
NODE = {
    "type": "upsert",
    "node": {"name": "inspect-n1", "capacity": {"cpu": "4", "memory": "8Gi", "pods": 10}},
}


@pytest.fixture
def prefix(kafka_bootstrap: str, tmp_path: Path) -> Prefix:
    return new_prefix(kafka_bootstrap, tmp_path)


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prefix]:
    """A worker and an applier on a prefix of their own."""
    running = new_prefix(kafka_bootstrap, tmp_path_factory.mktemp("inspect"))
    running.ok("topics", "create")
    for role in ("worker", "applier"):
        running.processes.append(start_role(role, running.env, running.workdir))
    yield running
    for process in running.processes:
        process.send_signal(signal.SIGTERM)
    for process in running.processes:
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()


# -------------------------------------------------------------------------------------------- profiles


def test_a_published_profile_is_listed_beside_the_built_ins_and_shown(prefix: Prefix, tmp_path: Path) -> None:
    published = prefix.ok("profiles", "publish", write(tmp_path / "packer.yaml", PACKER))
    assert "published 1 profile (packer)" in published.stdout

    listed = {entry["name"]: entry for entry in prefix.lines("profiles", "list")}
    assert listed["packer"]["source"] == "config" and listed["packer"]["loaded"] is True
    assert listed["packer"]["refused"] is None and listed["packer"]["offset"] == 0
    assert listed["default"]["source"] == "built-in"
    table = prefix.ok("profiles", "list", "--output", "table").stdout
    assert "packer" in table and "config" in table and "built-in" in table

    [shown] = prefix.lines("profiles", "show", "packer")
    assert shown["document"] == PACKER["profiles"][0]
    described = prefix.ok("profiles", "show", "packer", "-o", "table").stdout
    assert "NodeResourcesFit" in described and "MostAllocated" in described

    missing = prefix.eyrie("profiles", "show", "nope")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: NAME: no profile named 'nope' is loaded (loaded: ")


BROKEN = [
    (
        "an unknown plugin names the extension point it is enabled at",
        {"schedulerName": "broken", "plugins": {"score": {"enabled": [{"name": "NodeMagic"}]}}},
        "profile broken.plugins.score: unknown plugin NodeMagic",
    ),
    (
        "a bad argument names the plugin and the field",
        {
            "schedulerName": "broken",
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "Random"}}}],
        },
        "profile broken: plugin NodeResourcesFit: scoringStrategy.type",
    ),
    (
        "an unknown argument of a plugin not enabled is refused all the same",
        {"schedulerName": "broken", "pluginConfig": [{"name": "LoadThresholds", "args": {"cpuu": 0.5}}]},
        "profile broken: plugin LoadThresholds: cpuu: unknown field",
    ),
]


@pytest.mark.parametrize(
    "command", [("profiles", "publish"), ("publish",)], ids=["profiles publish", "publish"]
)
@pytest.mark.parametrize(("case", "document", "message"), BROKEN, ids=[case[0] for case in BROKEN])
def test_a_broken_profile_exits_2_with_one_line_naming_plugin_and_field_and_publishes_nothing(
    prefix: Prefix, tmp_path: Path, command: tuple[str, ...], case: str, document: Any, message: str
) -> None:
    # A valid profile in the same file is not sent either: every profile is checked before anything is.
    path = write(tmp_path / "profiles.yaml", [{"schedulerName": "fine"}, document])
    result = prefix.eyrie(*command, path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: {message}"), result.stderr
    names = {entry["name"] for entry in prefix.lines("profiles", "list") if entry["source"] == "config"}
    assert names == set()


def test_eyrie_publish_sends_a_profile_document_to_the_config_topic(prefix: Prefix, tmp_path: Path) -> None:
    result = prefix.ok("publish", write(tmp_path / "packer.yaml", PACKER))
    assert "published 1 record" in result.stdout
    listed = {entry["name"]: entry for entry in prefix.lines("profiles", "list")}
    assert listed["packer"]["source"] == "config" and listed["packer"]["loaded"] is True


def test_profiles_publish_refuses_a_document_that_is_not_a_profile(prefix: Prefix, tmp_path: Path) -> None:
    path = write(tmp_path / "pod.yaml", {"uid": "web-1", "requests": {"cpu": "1"}})
    result = prefix.eyrie("profiles", "publish", path, "--dry-run")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {path}: a pod-requests record (key 'web-1'), not a scheduler profile; publish it with "
        "`eyrie publish`"
    ]


def test_a_refused_profile_record_is_listed_with_its_reason_and_the_previous_version_stays_loaded(
    prefix: Prefix, tmp_path: Path
) -> None:
    prefix.ok("profiles", "publish", write(tmp_path / "packer.yaml", PACKER))
    # Around the front door, as any producer could: the workers refuse it and keep the profile they hold.
    prefix.send(("config", "packer", {"schedulerName": "packer", "plugins": {"scoring": {}}}))
    [entry] = [e for e in prefix.lines("profiles", "list") if e["name"] == "packer"]
    assert entry["loaded"] is True and entry["offset"] == 0
    assert "unknown extension point 'scoring'" in entry["refused"]


# ---------------------------------------------------------------------------------------------- pending


def test_pending_lists_the_pods_without_a_final_decision(prefix: Prefix, tmp_path: Path) -> None:
    pods = [{"uid": uid, "requests": {"cpu": "1"}} for uid in ("waits", "bound", "applied", "deleted")]
    prefix.ok("publish", write(tmp_path / "pods.yaml", pods))
    prefix.ok("publish", write(tmp_path / "delete.yaml", {"uid": "deleted", "ts": time.time()}))
    # No worker runs on this prefix: the verdicts are published by hand, as placement and the applier would.
    bound = Binding(uid="bound", node="n1", profile="default", requests={"cpu": "1"}, decided_at=1.0)
    applied = Binding(uid="applied", node="n1", profile="default", requests={"cpu": "1"}, decided_at=1.0)
    result = BindingResult(uid="applied", node="n1", status="applied", at=2.0)
    prefix.send(
        ("bindings", "bound", bound), ("bindings", "applied", applied), ("binding-results", "applied", result)
    )

    found = {item["uid"]: item for item in prefix.lines("pending")}
    assert set(found) == {"waits", "bound"}
    assert (found["waits"]["state"], found["waits"]["node"]) == ("waiting", None)
    assert (found["bound"]["state"], found["bound"]["node"]) == ("bound", "n1")
    assert found["waits"]["scheduler_name"] == "default" and found["waits"]["requested_at"] > 0
    table = prefix.ok("pending", "--output", "table").stdout
    assert "waits" in table and "waiting" in table and "applied" not in table


def test_every_reader_refuses_an_unknown_output_format(prefix: Prefix) -> None:
    for command in (("profiles", "list"), ("pending",), ("nodes",), ("dead-letters",)):
        result = prefix.eyrie(*command, "--output", "yaml")
        assert result.returncode == 2
        assert result.stderr.strip().splitlines() == ["error: --output: expected json or table, got 'yaml'"]


# ------------------------------------------------------------------------------- with a live pipeline


def test_dead_letters_show_a_garbage_records_source_reason_and_key(pipeline: Prefix) -> None:
    pipeline.send(("pod-requests", "garbage-1", {"uid": "garbage-1", "priority": "high"}))
    letters = pipeline.until(("dead-letters",), lambda found: any(e["key"] == "garbage-1" for e in found))
    [letter] = [e for e in letters if e["key"] == "garbage-1"]
    assert letter["topic"] == pipeline.settings.topic("pod-requests"), pipeline.logs()
    assert letter["error"].startswith("priority") and letter["at"] > 0
    table = pipeline.ok("dead-letters", "-o", "table").stdout
    assert "garbage-1" in table and "priority" in table

    followed = pipeline.lines("dead-letters", "--follow", "--from-beginning", "--until-idle", "2")
    assert any(e["key"] == "garbage-1" for e in followed)
    refused = pipeline.eyrie("dead-letters", "--follow", "-o", "table")
    assert refused.returncode == 2 and refused.stderr.startswith(
        "error: --output table: only without --follow"
    )


def test_nodes_show_allocatable_against_what_the_applier_allocated_after_a_pod_is_placed(
    pipeline: Prefix, tmp_path: Path
) -> None:
    pipeline.ok("publish", write(tmp_path / "node.yaml", NODE))
    time.sleep(2)  # nodes and pods travel different topics: a pod arriving first would be unschedulable
    pod = {"uid": "inspect-web", "requests": {"cpu": "1500m", "memory": "1Gi"}, "node_selector": {}}
    pipeline.ok("publish", write(tmp_path / "pod.yaml", pod))

    def placed(found: list[dict[str, Any]]) -> bool:
        return any(row["node"] == "inspect-n1" and row["allocated"].get("pods") == 1 for row in found)

    rows = pipeline.until(("nodes",), placed)
    [row] = [r for r in rows if r["node"] == "inspect-n1"]
    assert row["allocated"] == {"cpu": "1500m", "memory": 2**30, "pods": 1}, pipeline.logs()
    assert row["allocatable"] == {"cpu": "4000m", "memory": 8 * 2**30, "pods": 10}
    assert (row["cluster"], row["cordoned"], row["applier"]) == ("default", False, True)
    table = pipeline.ok("nodes", "--output", "table").stdout
    assert "inspect-n1" in table and "1/10" in table and "cpu=1.5" in table and "memory=1Gi" in table

    # Applied: no longer pending.
    assert "inspect-web" not in {item["uid"] for item in pipeline.lines("pending")}
