"""The whole pipeline against a real broker: worker and applier as real processes (`eyrie worker`,
`eyrie applier`), fed by `eyrie replay` and the client, read through `eyrie decisions`' join.

One pipeline (topic prefix) per module serves the end-to-end, determinism, gang, dead-letter and profile
tests; the crash test gets its own, since it kills processes, and so does the test of an applier started
after placement.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.events import Binding, BindingResult, DeadLetter
from schemas.node import NodeEvent, NodeSpec, Taint
from schemas.pod import PodDeleted, PodGroup, PodRequest, Toleration
from streams.client import EyrieClient, latest_decisions
from streams.demo.processes import start_role
from streams.demo.workload import generate_gpu_like_log, slice_gpu_trace
from streams.recording.replay import replay_live, replay_offline
from streams.runtime.app import app_id
from streams.settings import Settings, load_settings
from tests.paths import ALIBABA_GPU_2023

pytestmark = pytest.mark.kafka

FINAL = {"applied", "unschedulable", "rejected"}

# ------------------------------------------------------------------------------------------- builders


@dataclass
class Pipeline:
    settings: Settings
    env: dict[str, str]
    workdir: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, role: str, *args: str, name: str | None = None) -> None:
        """`eyrie ROLE ARGS...`, known as `name` (default: the role) to `kill`."""
        name = name or role
        self.processes[name] = start_role(
            role, self.env, self.workdir, args=args, suffix=name.removeprefix(role)
        )

    def kill(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
        self.processes.clear()

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.workdir.glob("*.log"))


async def placement_committed(settings: Settings) -> int:
    """The sequencer offset the workers' group has committed (0 before its first commit)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=app_id(settings, "worker"),
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        return await consumer.committed(TopicPartition(settings.topic("sequencer"), 0)) or 0
    finally:
        await consumer.stop()


def start_pipeline(
    bootstrap: str,
    workdir: Path,
    web_ports: dict[str, int] | None = None,
    roles: tuple[str, ...] = ("worker", "applier"),
) -> Pipeline:
    prefix = f"t{uuid.uuid4().hex[:8]}."
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "EYRIE_TOPIC_PREFIX": prefix,
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(workdir / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }
    settings = load_settings(env=env)
    pipeline = Pipeline(settings, env, workdir)
    asyncio.run(_ensure(settings))
    for role in roles:
        port = (web_ports or {}).get(role)
        pipeline.start(role, *(["--web-port", str(port)] if port else []))
    return pipeline


async def _ensure(settings: Settings) -> None:
    from streams.runtime.topics import ensure_topics

    await ensure_topics(settings)


async def read_all(settings: Settings) -> tuple[list[Binding], list[BindingResult], list[DeadLetter]]:
    bindings, results, letters = [], [], []
    async with EyrieClient(settings, create_topics=False) as client:
        async for _, decoded in client.records(["bindings", "binding-results", "dead-letters"]):
            value = decoded.value
            if isinstance(value, Binding):
                bindings.append(value)
            elif isinstance(value, BindingResult):
                results.append(value)
            elif isinstance(value, DeadLetter):
                letters.append(value)
    return bindings, results, letters


def wait_for(settings: Settings, uids: set[str], timeout: float = 120.0) -> dict[str, Any]:
    """Each pod's latest decision once every pod in `uids` has a final one."""
    deadline = time.monotonic() + timeout
    while True:
        bindings, results, _ = asyncio.run(read_all(settings))
        latest = {
            d.uid: d
            for d in latest_decisions({b.uid: b for b in bindings}, {r.uid: r for r in results})
            if d.uid in uids
        }
        done = {uid for uid, d in latest.items() if d.status in FINAL}
        if done >= uids or time.monotonic() > deadline:
            return latest
        time.sleep(1.0)


def applied_on(settings: Settings, uid: str, node: str, timeout: float = 60.0) -> str | None:
    """The node the pod's latest decision applies it on, once that is `node` or at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        latest = wait_for(settings, {uid}, timeout=0).get(uid)
        where = latest.node if latest is not None and latest.status == "applied" else None
        if where == node or time.monotonic() > deadline:
            return where
        time.sleep(1.0)


def workload_log(path: Path, pods: int) -> Path:
    if ALIBABA_GPU_2023.is_dir():
        slice_gpu_trace(ALIBABA_GPU_2023, path, pods=pods, nodes=120)
    else:
        generate_gpu_like_log(path, nodes=120, pods=pods)
    return path


def pod_uids(log: Path) -> set[str]:
    from schemas.eventlog import read_events

    return {e.value.uid for e in read_events(log) if isinstance(e.value, PodRequest)}


@pytest.fixture(scope="module")
def pipeline(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    running = start_pipeline(kafka_bootstrap, tmp_path_factory.mktemp("pipeline"))
    yield running
    running.stop()


@pytest.fixture(scope="module")
def replayed(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    log = workload_log(tmp_path_factory.mktemp("log") / "gpu.jsonl", 2000)
    asyncio.run(replay_live(log, pipeline.settings))
    uids = pod_uids(log)
    latest = wait_for(pipeline.settings, uids)
    return {"log": log, "uids": uids, "latest": latest}


# ---------------------------------------------------------------------------------------------- tests


def test_every_pod_of_a_replayed_trace_ends_applied_or_unschedulable_exactly_once(
    pipeline: Pipeline, replayed: dict[str, Any]
) -> None:
    latest, uids = replayed["latest"], replayed["uids"]
    assert len(uids) == 2000
    missing = uids - {uid for uid, d in latest.items() if d.status in FINAL}
    assert not missing, f"{len(missing)} pods without a final decision; logs:\n{pipeline.logs()}"
    _, results, _ = asyncio.run(read_all(pipeline.settings))
    applied = Counter(r.uid for r in results if r.status == "applied")
    assert max(applied.values()) == 1
    assert all(latest[uid].status in {"applied", "unschedulable"} for uid in uids)


def test_no_node_ever_holds_more_than_its_allocatable(pipeline: Pipeline, replayed: dict[str, Any]) -> None:
    # Walk the run in event time: every applied pod from its binding until its deletion in the log. The
    # ledger books a subset of that (it commits what placement assumed, and frees after placement does),
    # and its own refusal to overfill a node is property-tested in test_ledger.py.
    from schemas.eventlog import read_events

    events = list(read_events(replayed["log"]))
    allocatable = {
        e.value.node.name: e.value.node.allocatable for e in events if isinstance(e.value, NodeEvent)
    }
    bindings, _, _ = asyncio.run(read_all(pipeline.settings))
    latest = {b.uid: b for b in bindings}
    applied = {uid for uid, d in replayed["latest"].items() if d.status == "applied"}
    steps = [(latest[uid].decided_at, 1, uid) for uid in applied]
    steps += [
        (e.ts, 0, e.value.uid) for e in events if isinstance(e.value, PodDeleted) and e.value.uid in applied
    ]
    held: dict[str, Counter[str]] = {name: Counter() for name in allocatable}
    peak = 0
    for _, kind, uid in sorted(steps):
        binding = latest[uid]
        if kind == 1:
            held[binding.node].update(binding.requests)
            over = [
                r for r, amount in held[binding.node].items() if amount > allocatable[binding.node].get(r, 0)
            ]
            assert not over, (uid, binding.node, over)
            peak = max(peak, len(applied))
        else:
            held[binding.node].subtract(binding.requests)
    assert peak > 0


async def changelog(settings: Settings, table: str) -> dict[bytes, tuple[int, bytes | None]]:
    """The applier's changelog of `table` read to its end: per key, the partition and the last value."""
    topic = f"{app_id(settings, 'applier')}-{table}-changelog"
    consumer = AIOKafkaConsumer(bootstrap_servers=settings.bootstrap_servers, enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = [TopicPartition(topic, p) for p in range(settings.partitions)]  # as the table's
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        last: dict[bytes, tuple[int, bytes | None]] = {}
        unread = set(partitions)
        while unread:
            for tp, messages in (await consumer.getmany(timeout_ms=1000)).items():
                for message in messages:
                    last[message.key] = (tp.partition, message.value)
            unread = {tp for tp in unread if await consumer.position(tp) < ends[tp]}
        return last
    finally:
        await consumer.stop()


def test_the_ledger_changelog_holds_every_applied_pod_with_its_node_in_the_partition_of_its_key(
    pipeline: Pipeline, replayed: dict[str, Any]
) -> None:
    # The applier sends its tables' changelog records itself, one per key and batch
    # (`streams.faust_overrides.tables.KeyPartitionedTable`): what a restarted applier recovers is what
    # this reads.
    import zlib

    import orjson

    latest = replayed["latest"]
    entries = asyncio.run(changelog(pipeline.settings, "ledger-pods"))
    applied = {uid: d.node for uid, d in latest.items() if d.status == "applied"}
    assert applied
    for uid, node in applied.items():
        partition, value = entries[uid.encode()]
        assert partition == zlib.crc32(uid.encode()) % pipeline.settings.partitions
        assert value is not None
        entry = orjson.loads(value)
        assert entry["node"] == node
        assert entry["state"] in ("bound", "deleted")  # the log deletes most pods after a while


def test_offline_and_live_replays_of_the_same_log_bind_every_pod_to_the_same_node(
    pipeline: Pipeline, replayed: dict[str, Any]
) -> None:
    offline = replay_offline(replayed["log"], pipeline.settings)
    offline_nodes = {d.uid: d.node for d in offline.decisions}
    live_nodes = {uid: d.node for uid, d in replayed["latest"].items()}
    differing = [uid for uid in replayed["uids"] if offline_nodes.get(uid) != live_nodes.get(uid)]
    assert not differing, f"{len(differing)} differ, e.g. {differing[:3]}"


def test_a_gang_of_four_is_placed_all_or_nothing(pipeline: Pipeline) -> None:
    gang = {
        "schedulerName": "gang",
        "plugins": {
            "queueSort": {"disabled": [{"name": "*"}]},
            "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
        },
    }

    async def publish() -> None:
        async with EyrieClient(pipeline.settings) as client:
            await client.send("config", "gang", gang)
            await client.flush()
            await asyncio.sleep(3)  # profiles and pods travel different topics
            for i in range(3):
                spec = NodeSpec(
                    name=f"gang-node-{i}",
                    cluster="default",
                    capacity={"cpu": "4", "memory": "8Gi", "pods": 110},
                    allocatable={"cpu": "4", "memory": "8Gi", "pods": 110},
                    labels={"pool": "gang"},
                )
                await client.publish_node_event(NodeEvent(type="upsert", node=spec))
            await client.flush()
            # Nodes and pods travel different topics too: a pod that arrives first is declared
            # unschedulable (a final status for wait_for) before the nodes make room for it.
            await asyncio.sleep(2)
            group = PodGroup(name="trainers", min_available=4, timeout_s=30)
            for i in range(4):  # 4 × 3 cpu on 3 nodes of 4 cpu: the whole gang cannot fit
                await client.publish_pod(
                    PodRequest(
                        uid=f"big-{i}",
                        requests={"cpu": "3"},
                        scheduler_name="gang",
                        pod_group=group,
                        node_selector={"pool": "gang"},
                    )
                )
            fits = PodGroup(name="workers", min_available=4, timeout_s=30)
            for i in range(4):
                await client.publish_pod(
                    PodRequest(
                        uid=f"small-{i}",
                        requests={"cpu": "500m"},
                        scheduler_name="gang",
                        pod_group=fits,
                        node_selector={"pool": "gang"},
                    )
                )

    asyncio.run(publish())
    uids = {f"small-{i}" for i in range(4)} | {f"big-{i}" for i in range(4)}
    latest = wait_for(pipeline.settings, uids, timeout=90)
    assert {latest[f"small-{i}"].status for i in range(4)} == {"applied"}
    bindings, results, _ = asyncio.run(read_all(pipeline.settings))
    trail = [r for r in [*bindings, *results] if r.uid.startswith("big")]
    assert {latest[f"big-{i}"].status for i in range(4)} == {"unschedulable"}, trail


def test_garbage_wrong_types_and_unknown_nodes_become_dead_letters_and_the_pipeline_goes_on(
    pipeline: Pipeline,
) -> None:
    async def publish() -> None:
        async with EyrieClient(pipeline.settings) as client:
            await client.send("pod-requests", "junk", b"\x00\xff not json")
            await client.send("pod-requests", "typed", {"uid": "typed", "priority": "high"})
            await client.send("node-events", "ghost", {"type": "cordon", "node": {"name": "ghost"}})
            await client.send("bindings", "x", b"{]")
            await client.publish_pod(PodRequest(uid="after-junk", requests={"cpu": "100m"}))

    asyncio.run(publish())
    latest = wait_for(pipeline.settings, {"after-junk"}, timeout=60)
    assert latest["after-junk"].status == "applied"
    deadline = time.monotonic() + 30
    while True:
        _, _, letters = asyncio.run(read_all(pipeline.settings))
        errors = " | ".join(letter.error for letter in letters)
        if ("ghost" in errors and "priority" in errors) or time.monotonic() > deadline:
            break
        time.sleep(1)
    topics = Counter(letter.topic.removeprefix(pipeline.settings.topic_prefix) for letter in letters)
    assert topics["pod-requests"] >= 2 and topics["bindings"] >= 1
    assert "priority" in errors and "ghost" in errors


def test_a_profile_published_on_the_config_topic_changes_later_decisions_without_a_restart(
    pipeline: Pipeline,
) -> None:
    packing = {
        "schedulerName": "packer",
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
        ],
    }

    async def publish(pods: list[PodRequest], profile: dict[str, Any] | None = None) -> None:
        async with EyrieClient(pipeline.settings) as client:
            if profile is not None:
                await client.send("config", "packer", profile)
                await client.flush()
                await asyncio.sleep(3)  # profiles and pods travel different topics
            for pod in pods:
                await client.publish_pod(pod)

    def pods(tag: str) -> list[PodRequest]:
        return [
            PodRequest(
                uid=f"{tag}-{i}",
                requests={"cpu": "100m"},
                scheduler_name="packer",
                node_selector={"pool": "gang"},
            )
            for i in range(3)
        ]

    asyncio.run(publish(pods("before")))
    before = wait_for(pipeline.settings, {f"before-{i}" for i in range(3)}, timeout=60)
    assert {d.status for d in before.values()} == {"unschedulable"}  # no such profile yet
    asyncio.run(publish(pods("after"), packing))
    after = wait_for(pipeline.settings, {f"after-{i}" for i in range(3)}, timeout=60)
    assert {d.status for d in after.values()} == {"applied"}
    assert len({d.node for d in after.values()}) == 1  # MostAllocated packs them on one node


def test_a_pod_whose_node_is_deleted_is_bound_again_on_another_node(pipeline: Pipeline) -> None:
    # Tainted nodes, so the other tests' pods stay off them, and labelled, so this pod stays on them.
    taint = Taint(key="eyrie.test/moving", effect="NoSchedule")

    def upsert(name: str, cpu: str) -> NodeEvent:
        room = {"cpu": cpu, "memory": "8Gi", "pods": 110}
        spec = NodeSpec(name=name, capacity=room, taints=[taint], labels={"pool": "moving"})
        return NodeEvent(type="upsert", node=spec)

    async def publish(*events: NodeEvent | PodRequest) -> None:
        async with EyrieClient(pipeline.settings) as client:
            for event in events:
                if isinstance(event, NodeEvent):
                    await client.publish_node_event(event)
                else:
                    await client.publish_pod(event)
            await client.flush()

    asyncio.run(publish(upsert("moving-a", "8"), upsert("moving-b", "4")))
    time.sleep(2)  # nodes and pods travel different topics
    toleration = Toleration(key=taint.key, operator="Exists", effect="NoSchedule")
    moving = PodRequest(
        uid="moving-pod", requests={"cpu": "1"}, tolerations=[toleration], node_selector={"pool": "moving"}
    )
    asyncio.run(publish(moving))
    # Applied on the roomier node (once the worker has the nodes: a pod that comes first waits for them).
    assert applied_on(pipeline.settings, "moving-pod", "moving-a") == "moving-a"
    asyncio.run(publish(NodeEvent(type="delete", node=NodeSpec(name="moving-a"))))
    assert applied_on(pipeline.settings, "moving-pod", "moving-b") == "moving-b"


def test_a_worker_killed_mid_replay_loses_no_pod_and_binds_none_twice(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    crashing = start_pipeline(kafka_bootstrap, tmp_path)
    try:
        log = workload_log(tmp_path / "gpu.jsonl", 1500)

        async def replay_and_kill() -> None:
            replay = asyncio.create_task(replay_live(log, crashing.settings, rate=300))
            # Kill it once it has placed something and committed a sequencer offset, so the restarted worker
            # resumes mid-partition and must rebuild its shard from what lies before.
            while not (await read_all(crashing.settings))[0] or not await placement_committed(
                crashing.settings
            ):
                await asyncio.sleep(0.5)
            crashing.kill("worker")
            await asyncio.sleep(1)
            crashing.start("worker")
            await replay

        asyncio.run(replay_and_kill())
        uids = pod_uids(log)
        latest = wait_for(crashing.settings, uids, timeout=180)
        missing = uids - {uid for uid, d in latest.items() if d.status in FINAL}
        assert not missing, f"{len(missing)} pods lost; logs:\n{crashing.logs()}"
        _, results, _ = asyncio.run(read_all(crashing.settings))
        nodes_applied: dict[str, set[str]] = {}
        for result in results:
            if result.status == "applied":
                nodes_applied.setdefault(result.uid, set()).add(result.node or "")
        assert all(len(nodes) == 1 for nodes in nodes_applied.values())
        # The restarted worker rebuilt the shard: from the sequencer, or from a checkpoint and its tail.
        logs = crashing.logs()
        assert "replayed sequencer records" in logs or "restored from checkpoint" in logs
    finally:
        crashing.stop()


def test_an_applier_started_after_placement_bound_pods_refuses_none_for_a_node_it_has_yet_to_read(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    # The pods fit only the last of many nodes. Placement has bound them when the applier starts, so its
    # bindings agent takes them while its node-events agent is still far from that node, and only a read
    # of node-events ahead of that agent (`streams.runtime.node_feed`) knows the node.
    fillers, pods = 20_000, 20
    late = start_pipeline(kafka_bootstrap, tmp_path, roles=("worker",))
    try:

        async def publish() -> None:
            async with EyrieClient(late.settings) as client:
                for i in range(fillers):
                    spec = NodeSpec(name=f"filler-{i:05d}", capacity={"cpu": "100m", "memory": "1Gi"})
                    await client.publish_node_event(NodeEvent(type="upsert", node=spec))
                room = NodeSpec(name="roomy", capacity={"cpu": "64", "memory": "256Gi", "pods": 110})
                await client.publish_node_event(NodeEvent(type="upsert", node=room))
                for i in range(pods):
                    await client.publish_pod(
                        PodRequest.model_validate(
                            {
                                "uid": f"late-{i}",
                                "name": f"late-{i}",
                                "containers": [{"requests": {"cpu": "1"}}],
                            }
                        )
                    )

        asyncio.run(publish())
        uids = {f"late-{i}" for i in range(pods)}
        deadline = time.monotonic() + 120
        while {b.uid for b in asyncio.run(read_all(late.settings))[0]} < uids and time.monotonic() < deadline:
            time.sleep(0.5)
        late.start("applier")
        latest = wait_for(late.settings, uids)
        _, results, _ = asyncio.run(read_all(late.settings))
    finally:
        late.stop()
    assert not [r.uid for r in results if "node not found" in r.reasons]
    assert {uid: (d.status, d.node) for uid, d in latest.items()} == dict.fromkeys(uids, ("applied", "roomy"))


def test_a_recorded_log_holds_every_replayed_event_once_and_replays_offline(
    pipeline: Pipeline, replayed: dict[str, Any], tmp_path: Path
) -> None:
    from schemas.eventlog import EventLogWriter, read_events
    from streams.recording.record import record_topics

    async def record() -> int:
        async with EyrieClient(pipeline.settings, create_topics=False) as client:
            with EventLogWriter(tmp_path / "recorded.jsonl") as writer:
                return await record_topics(client, ["node-events", "pod-requests"], writer)

    asyncio.run(record())
    recorded = list(read_events(tmp_path / "recorded.jsonl"))  # ordered by ts, or this raises
    original = [e for e in read_events(replayed["log"]) if e.topic in ("node-events", "pod-requests")]
    kept = Counter((e.topic, e.key, e.ts) for e in recorded)
    assert all(kept[(e.topic, e.key, e.ts)] == 1 for e in original)
    result = replay_offline(tmp_path / "recorded.jsonl", pipeline.settings)
    assert {d.uid for d in result.decisions} >= replayed["uids"]
