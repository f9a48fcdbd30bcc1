"""`eyrie record`: what placement applied, in its order and at its times, so that `eyrie replay --offline`
of the recording makes the live decisions pod for pod; written as it comes, so a reader, Ctrl-C or SIGTERM
finds complete lines.

The pure parts first (the recorder's order and clock against a real shard's, a scripted live run recorded
and replayed offline, a bad profile in a topic log), then against the broker: a `--follow` recording read
while it runs and stopped by a signal, and a live pipeline (worker and applier processes) recorded and
replayed offline.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from schemas.eventlog import EventLogWriter, read_events
from schemas.events import Binding, BindingResult, MetricSample
from schemas.exceptions import EventLogError
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.client import DELETED_BY_OWNER, EyrieClient, latest_decisions
from streams.core.metrics import MetricsCore
from streams.core.sequencer import Envelope, Kind, Watermark, encode_envelopes
from streams.core.shard import Output, Shard
from streams.demo.processes import start_role, stop_all
from streams.recording.record import Admissions
from streams.recording.replay import replay_offline
from streams.settings import Settings, load_settings
from tests.commands import REPO, run_module
from tests.streams.simulate import simulated_live_run, write_placement_log

# ------------------------------------------------------------------------------------------- builders

PACKER = {
    "schedulerName": "packer",
    "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
}
MISNAMED = {"schedulerName": "someone-else"}
"""A profile whose record is keyed "misnamed": the forwarder dead-letters it."""


def node(name: str, cpu: str = "4") -> NodeEvent:
    room = {"cpu": cpu, "memory": "8Gi", "pods": 110}
    return NodeEvent(type="upsert", node=NodeSpec(name=name, capacity=room, allocatable=room))


def pod(uid: str, cpu: str = "1", **extra: Any) -> PodRequest:
    return PodRequest(uid=uid, requests={"cpu": cpu, "memory": "256Mi"}, **extra)


def env(kind: Kind, ts: float, value: Any, source: str = "pod-requests/0", offset: int = -1) -> Envelope:
    return Envelope(kind, ts, value, source, math.inf, offset)


def mark(ts: float, source: str) -> Envelope:
    return Envelope(Kind.WATERMARK, 0.0, Watermark("s", ts, {"pod-requests": 1, "node-events": 1}), source)


def summary(name: str, ts: float) -> Envelope:
    (made,) = MetricsCore(summary_interval=10.0).ingest(
        [MetricSample(ts=ts, node=name, values={"cpu": 3.5, "memory": 2e9})]
    )
    return env(Kind.SUMMARY, ts, made, "metrics/0")


def nodes_of(decisions: list[Any]) -> dict[str, tuple[str | None, str]]:
    return {d.uid: (d.node, d.status) for d in decisions}


class Watched(Shard):
    """A real shard that notes each envelope it applies and its clock when it does."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[float, Envelope]] = []

    def apply(self, envelope: Envelope) -> list[Output]:
        outputs = super().apply(envelope)
        self.seen.append((self.now, envelope))
        return outputs


def lines_so_far(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a log being written (a .gz read as far as it was flushed)."""
    data = path.read_bytes() if path.exists() else b""
    if path.name.endswith(".gz"):
        data = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data)
    complete = data[: data.rfind(b"\n") + 1]
    return [orjson.loads(line) for line in complete.splitlines() if line.strip()]


def wait_until(condition: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def kafka_env(bootstrap: str, workdir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": f"rec{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(workdir / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }


def start_eyrie(*args: object, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "streams.cli", *map(str, args)],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def send_to_sequencer(settings: Settings, envelopes: list[Envelope]) -> None:
    async with EyrieClient(settings) as client:
        await client.send("sequencer", "shard-0", encode_envelopes(envelopes), partition=0)
        await client.flush()


async def live_decisions(settings: Settings) -> dict[str, tuple[str | None, str]]:
    async with EyrieClient(settings, create_topics=False) as client:
        return {d.uid: (d.node, d.status) async for d in client.decisions()}


# ----------------------------------------------------------------------------------- the pure parts

CLOCK_CASES = [
    (
        "live envelopes apply at the shard's clock, which a deletion stamped 0 does not move back",
        [
            env(Kind.NODE, 100.0, node("n1"), "node-events/0"),
            env(Kind.POD, 105.0, pod("a")),
            env(Kind.DELETE, 0.0, PodDeleted(uid="a", ts=0.0)),
            env(Kind.TICK, 103.0, None, "tick"),
            env(Kind.POD, 110.0, pod("b")),
        ],
    ),
    (
        "a restarted forwarder's resent envelopes are dropped as the shard drops them",
        [
            env(Kind.NODE, 1.0, node("n1"), "node-events/0", offset=0),
            env(Kind.POD, 2.0, pod("a"), offset=0),
            env(Kind.POD, 3.0, pod("b"), offset=1),
            env(Kind.POD, 2.0, pod("a"), offset=0),
            env(Kind.POD, 3.0, pod("b"), offset=1),
            env(Kind.POD, 4.0, pod("c"), offset=2),
        ],
    ),
    (
        "a replay session's envelopes wait for its watermarks and apply in time order on its clock",
        [
            env(Kind.POD, 1000.0, pod("live")),
            mark(-1.0, "pod-requests/0"),
            mark(-1.0, "node-events/0"),
            env(Kind.POD, 7.0, pod("late"), "pod-requests/0"),
            env(Kind.NODE, 5.0, node("n1"), "node-events/0"),
            env(Kind.RESULT, 2000.0, BindingResult(uid="x", node="n1", status="applied", at=2000.0), "b/0"),
            mark(6.0, "pod-requests/0"),
            mark(9.0, "node-events/0"),
            mark(math.inf, "pod-requests/0"),
            mark(math.inf, "node-events/0"),
            env(Kind.POD, 1500.0, pod("after")),
        ],
    ),
]


@pytest.mark.parametrize(("case", "envelopes"), CLOCK_CASES, ids=[case for case, _ in CLOCK_CASES])
def test_the_recorder_takes_what_a_shard_applies_in_its_order_at_its_clock(
    case: str, envelopes: list[Envelope]
) -> None:
    shard, admissions = Watched(), Admissions()
    for envelope in envelopes:
        shard.feed(envelope)
        admissions.feed(envelope)
    assert admissions.take() == shard.seen


def test_a_recorded_live_run_replays_offline_to_the_live_decisions_pod_for_pod(tmp_path: Path) -> None:
    same_ms = 1_700_000_000.123
    script = [
        env(Kind.NODE, 1_700_000_000.0, node("roomy", "8"), "node-events/0"),
        env(Kind.NODE, 1_700_000_000.0, node("small", "2"), "node-events/0"),
        summary("roomy", 1_700_000_000.05),
        *[env(Kind.POD, same_ms, pod(f"same-ms-{i}", "1500m")) for i in range(5)],
        env(Kind.DELETE, 0.0, PodDeleted(uid="same-ms-0", ts=0.0)),  # a deletion stamped 0, after its pod
        env(Kind.CONFIG, same_ms, {"name": "packer", "document": PACKER}, "config/0"),
        env(Kind.TICK, 1_700_000_001.0, None, "tick"),
        *[
            env(Kind.POD, 1_700_000_002.0, pod(f"packed-{i}", "250m", scheduler_name="packer"))
            for i in range(3)
        ],
        env(Kind.POD, 1_700_000_002.0, pod("too-big", "64")),
        env(Kind.DELETE, 0.0, PodDeleted(uid="packed-1", ts=0.0)),
        env(Kind.POD, 1_700_000_003.0, pod("after-deletions", "1500m")),
    ]
    carried, live = simulated_live_run(script)
    log = write_placement_log(tmp_path / "placement.jsonl", {0: carried})
    offline = replay_offline(log, Settings())
    assert nodes_of(offline.decisions) == live
    assert live["too-big"] == (None, "unschedulable") and live["after-deletions"][1] == "applied"
    assert live["same-ms-0"][1] == live["packed-1"][1] == "deleted"
    lines = [orjson.loads(line) for line in log.read_text().splitlines()]
    deletions = [line for line in lines if line["topic"] == "pod-requests" and "uid" in line["value"]]
    assert any(line["value"].get("ts") == 0.0 and line["ts"] > 0 for line in deletions)
    assert {line["topic"] for line in lines} >= {"placement.summary", "placement.result", "placement.tick"}


def decisions_of(shard: Shard, envelopes: list[Envelope]) -> dict[str, tuple[str | None, str]]:
    """A shard's own decisions (bindings pending: no applier here)."""
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    for output in shard.feed_all(envelopes):
        if isinstance(output, Binding):
            bindings[output.uid] = output
        elif isinstance(output, BindingResult):
            results[output.uid] = output
    return nodes_of(latest_decisions(bindings, results))


def test_shards_whose_clocks_differ_or_go_back_for_a_replay_session_replay_at_their_own_times(
    tmp_path: Path,
) -> None:
    session = CLOCK_CASES[2][1]
    other = [env(Kind.NODE, 50.0, node("n2"), "node-events/0"), env(Kind.POD, 60.0, pod("z"))]
    log = write_placement_log(tmp_path / "shards.jsonl", {0: session, 1: other})
    shard = Watched()
    live = decisions_of(shard, session) | decisions_of(Shard(), other)
    times = [e.ts for e in read_events(log, placement=True) if e.shard == 0]
    assert times == [now for now, _ in shard.seen] and times != sorted(times)
    offline = nodes_of(replay_offline(log, Settings()).decisions)
    # No results were recorded for these pods: offline they stay bound, not applied; "x" is a recorded one.
    assert {uid: where for uid, (where, _) in offline.items()} == {
        **{uid: where for uid, (where, _) in live.items()},
        "x": "n1",
    }


def test_a_live_replay_reads_only_the_inputs_of_a_placement_log(tmp_path: Path) -> None:
    carried, _ = simulated_live_run(
        [
            env(Kind.NODE, 10.0, node("n1"), "node-events/0"),
            summary("n1", 10.5),
            env(Kind.POD, 11.0, pod("a")),
            env(Kind.CONFIG, 12.0, {"name": "packer", "document": None}, "config/0"),
        ]
    )
    log = write_placement_log(tmp_path / "placement.jsonl", {0: carried})
    assert [e.topic for e in read_events(log)] == ["node-events", "pod-requests"]
    everything = [e.topic for e in read_events(log, placement=True)]
    assert everything == ["node-events", "placement.summary", "pod-requests", "placement.result", "config"]


BAD_LINES = [
    (
        "a placement topic without a shard",
        '{"ts": 1, "topic": "placement.tick", "key": null, "value": null}',
        "topic",
    ),
    (
        "a shard that is not a partition number",
        '{"ts": 1, "topic": "pod-requests", "shard": -1, "value": {}}',
        "shard",
    ),
    (
        "a tick that carries something",
        '{"ts": 1, "topic": "placement.tick", "shard": 0, "value": 3}',
        "value",
    ),
]


@pytest.mark.parametrize(("case", "line", "field"), BAD_LINES, ids=[case for case, _, _ in BAD_LINES])
def test_a_bad_placement_line_is_named(tmp_path: Path, case: str, line: str, field: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(EventLogError) as error:
        list(read_events(path, placement=True))
    assert error.value.field == field and error.value.line == 1


def test_an_offline_replay_refuses_a_profile_live_would_dead_letter_and_goes_on(tmp_path: Path) -> None:
    log = tmp_path / "topics.jsonl"
    with EventLogWriter(log) as writer:
        writer.write(1.0, "node-events", "n1", node("n1"))
        writer.write(2.0, "config", "misnamed", MISNAMED)
        writer.write(3.0, "config", "packer", PACKER)
        writer.write(4.0, "pod-requests", "a", pod("a", scheduler_name="packer"))
    result = replay_offline(log, Settings())
    assert nodes_of(result.decisions) == {"a": ("n1", "applied")}
    assert len(result.refused) == 1 and "line 2" in result.refused[0] and "someone-else" in result.refused[0]


def test_an_offline_replay_of_topic_records_shows_deleted_pods_as_live_does(tmp_path: Path) -> None:
    log = tmp_path / "topics.jsonl"
    with EventLogWriter(log) as writer:
        writer.write(1.0, "node-events", "n1", node("n1"))
        writer.write(2.0, "pod-requests", "placed", pod("placed"))
        writer.write(3.0, "pod-requests", "kept", pod("kept"))
        writer.write(4.0, "pod-requests", "placed", PodDeleted(uid="placed", ts=4.0))
    result = replay_offline(log, Settings())
    by_uid = {d.uid: d for d in result.decisions}
    assert by_uid["placed"].status == "deleted" and by_uid["placed"].reasons == [DELETED_BY_OWNER]
    assert by_uid["kept"].status == "applied"
    assert [d.uid for d in result.decisions] == ["kept", "placed"]  # decision order: the deletion is last


def test_the_replay_command_names_what_it_refused(tmp_path: Path) -> None:
    log = tmp_path / "topics.jsonl"
    with EventLogWriter(log) as writer:
        writer.write(1.0, "node-events", "n1", node("n1"))
        writer.write(2.0, "config", "misnamed", MISNAMED)
        writer.write(4.0, "pod-requests", "a", pod("a"))
    done = run_module("streams.cli", "replay", log, "--offline", "-o", tmp_path / "out.jsonl")
    assert done.returncode == 0, done.stderr
    assert "1 refused" in done.stderr
    assert any(
        line.startswith("refused: line 2") and "someone-else" in line for line in done.stderr.splitlines()
    )


# ------------------------------------------------------------------------------------- with a broker

FOLLOW_CASES = [
    ("a plain log is complete at every moment and after Ctrl-C", "sequencer", "log.jsonl", signal.SIGINT),
    (
        "a gzipped log is readable as it grows and finished properly after Ctrl-C",
        "sequencer",
        "log.jsonl.gz",
        signal.SIGINT,
    ),
    ("a log stopped by SIGTERM is complete too", "sequencer", "log.jsonl", signal.SIGTERM),
    ("a recording of the input topics is written as it comes too", "topics", "log.jsonl", signal.SIGINT),
]


async def publish_for(source: str, settings: Settings, events: list[Envelope]) -> None:
    """`events` where the source records them: straight on the sequencer, or on their input topics."""
    if source == "sequencer":
        await send_to_sequencer(settings, events)
        return
    async with EyrieClient(settings) as client:
        for event in events:
            if event.kind is Kind.NODE:
                await client.publish_node_event(event.value)
            else:
                await client.publish_pod(event.value)


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("case", "source", "name", "signum"), FOLLOW_CASES, ids=[case for case, *_ in FOLLOW_CASES]
)
def test_a_followed_recording_is_written_as_it_comes_and_ends_cleanly_on_a_signal(
    kafka_bootstrap: str, tmp_path: Path, case: str, source: str, name: str, signum: signal.Signals
) -> None:
    environment = kafka_env(kafka_bootstrap, tmp_path)
    settings = load_settings(env=environment)
    first = [
        env(Kind.NODE, 10.0, node("n1"), "node-events/0"),
        *[env(Kind.POD, 11.0, pod(f"a{i}")) for i in range(5)],
    ]
    asyncio.run(publish_for(source, settings, first))
    out = tmp_path / name
    recorder = start_eyrie("record", "-o", out, "--follow", "--source", source, env=environment)
    try:
        wait_until(lambda: len(lines_so_far(out)) == 6, 60, "the first lines")
        asyncio.run(publish_for(source, settings, [env(Kind.POD, 12.0, pod(f"b{i}")) for i in range(4)]))
        wait_until(lambda: len(lines_so_far(out)) == 10, 30, "the next lines")
        assert sorted(line["key"] for line in lines_so_far(out)[-4:]) == ["b0", "b1", "b2", "b3"]
        recorder.send_signal(signum)
        _, stderr = recorder.communicate(timeout=30)
    finally:
        if recorder.poll() is None:
            recorder.kill()
            recorder.wait()
    assert recorder.returncode == 128 + signum, stderr
    assert f"interrupted by {signum.name}: recorded 10 events to {out}" in stderr
    assert "Traceback" not in stderr
    keys = [e.key for e in read_events(out)]  # the whole file, gzip trailer included
    expected = ["n1", *[f"a{i}" for i in range(5)], *[f"b{i}" for i in range(4)]]
    # Topics are read concurrently: records of one millisecond may come in either order.
    assert keys == expected if source == "sequencer" else sorted(keys) == sorted(expected)


OPTION_ERRORS = [
    ("an unknown source is named", ["--source", "kafka"], "error: --source: 'kafka' is not one of"),
    (
        "topics are an option of the topics source only",
        ["--topics", "metrics"],
        "error: --topics: only with --source topics",
    ),
    ("a topic that cannot be recorded is named", ["--source", "topics", "--topics", "bindings"], "--topics"),
]


@pytest.mark.parametrize(("case", "args", "message"), OPTION_ERRORS, ids=[case for case, *_ in OPTION_ERRORS])
def test_a_bad_record_option_is_one_line_and_exit_2(
    tmp_path: Path, case: str, args: list[str], message: str
) -> None:
    done = run_module("streams.cli", "record", "-o", tmp_path / "x.jsonl", *args, "-b", "127.0.0.1:1")
    assert done.returncode == 2 and message in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "x.jsonl").exists()


@pytest.fixture
def live_pipeline(kafka_bootstrap: str, tmp_path: Path) -> Iterator[dict[str, str]]:
    environment = kafka_env(kafka_bootstrap, tmp_path)
    asyncio.run(_ensure(load_settings(env=environment)))
    processes = [start_role(role, environment, tmp_path) for role in ("worker", "applier")]
    try:
        yield environment
    finally:
        stop_all(processes)


async def _ensure(settings: Settings) -> None:
    from streams.runtime.topics import ensure_topics

    await ensure_topics(settings)


async def _publish_live_traffic(settings: Settings) -> set[str]:
    """Nodes, pods of one millisecond, deletions stamped 0, a profile change, a profile and records the
    forwarders dead-letter; returns the pods' uids."""
    uids: set[str] = set()
    same_ms = round(time.time(), 3)
    async with EyrieClient(settings) as client:
        for name, cpu in (("roomy", "8"), ("middle", "4"), ("small", "2")):
            await client.publish_node_event(node(name, cpu))
        await client.flush()
        await asyncio.sleep(1.5)  # nodes and pods travel different topics
        for i in range(6):
            uids.add(f"same-ms-{i}")
            await client.publish_pod(pod(f"same-ms-{i}", "1500m", created_at=same_ms))
        await client.send("pod-requests", "junk", b"\x00\xff not json")
        await client.send("pod-requests", "typed", {"uid": "typed", "priority": "high"})
        await client.flush()
        await asyncio.sleep(1.0)
        for uid in ("same-ms-0", "same-ms-3"):
            await client.delete_pod(uid, ts=0.0)
        await client.send("config", "misnamed", MISNAMED)
        await client.send("config", "packer", PACKER)
        await client.flush()
        await asyncio.sleep(1.5)  # profiles and pods travel different topics
        # Small enough that all four fit beside whatever the earlier pods left on any one node, so
        # MostAllocated keeps choosing the node it chose first.
        for i in range(4):
            uids.add(f"packed-{i}")
            await client.publish_pod(pod(f"packed-{i}", "100m", scheduler_name="packer"))
        uids.add("too-big")
        await client.publish_pod(pod("too-big", "64"))
        await client.flush()
    return uids


@pytest.mark.kafka
def test_recording_a_live_run_and_replaying_it_offline_gives_the_live_decisions_pod_for_pod(
    live_pipeline: dict[str, str], tmp_path: Path
) -> None:
    settings = load_settings(env=live_pipeline)
    uids = asyncio.run(_publish_live_traffic(settings))

    def settled() -> bool:
        decisions = asyncio.run(live_decisions(settings))
        return uids <= decisions.keys() and all(decisions[uid][1] != "pending" for uid in uids)

    wait_until(settled, 60, "every pod's decision")
    time.sleep(2.0)  # the applier's last results reach placement after their users
    before = asyncio.run(live_decisions(settings))
    recorded = run_module("streams.cli", "record", "-o", tmp_path / "live.jsonl.gz", env=live_pipeline)
    assert recorded.returncode == 0, recorded.stderr
    live = asyncio.run(live_decisions(settings))
    assert live == before  # nothing moved while recording

    out = tmp_path / "offline.jsonl"
    replayed = run_module(
        "streams.cli", "replay", tmp_path / "live.jsonl.gz", "--offline", "-o", out, env=live_pipeline
    )
    assert replayed.returncode == 0, replayed.stderr
    offline = {d["uid"]: (d["node"], d["status"]) for d in map(orjson.loads, out.read_text().splitlines())}
    assert offline == live
    assert live["too-big"] == (None, "unschedulable")
    assert {live[f"packed-{i}"][0] for i in range(4)} == {live["packed-0"][0]}  # the new profile packs them
    events = list(read_events(tmp_path / "live.jsonl.gz", placement=True))
    deletions = [e for e in events if isinstance(e.value, PodDeleted)]
    assert len(deletions) == 2 and all(e.value.ts == 0.0 and e.ts > 0 for e in deletions)
    assert not any(e.topic == "config" and e.key == "misnamed" for e in events)
