"""Pipeline throughput and latency through a real broker: a worker and an applier, as `make demo` runs them.

    python -m bench.pipeline [--nodes N] [--pods P] [--profile NAME] [--samples S] [--samples-per-record K]
                             [--latency-share F] [--latency-rate R] [--warm-up-pods N] [--partitions K]
                             [--workers W] [--seed S] [--cprofile DIR]

Uses the broker named by KAFKA_BOOTSTRAP_SERVERS, else starts the local one. Topics get a fresh prefix, so
runs never see each other's records. The cluster and the pods are bench.placement's (seeded node shapes,
zones, GPUs, taints, affinities), the nodes start empty.

1. **In process** (the baseline): the placement core the worker runs (`streams.core.shard.Shard`) fed
   the same node events and pods, one envelope at a time: decisions per second without Kafka.
2. **Metrics**: before the worker starts, `--samples` node samples are published one per record, then the
   same samples again later in event time, `--samples-per-record` of a node per record (a JSON array, as a
   node agent ships a scrape); each round ends with one sentinel sample per partition. The worker drains
   both. Samples per second per worker = samples / (the round's last sentinel summary − the previous
   round's, or the worker's first summary), stamped by the worker's producer. The first round is the
   baseline of the second.
3. **Throughput**: the first (1 − latency share) of the pods published flat out; pods per second = pods /
   (last final result − first publish), a final result being `applied`, `unschedulable` or `rejected` as
   the binding-results topic carries it (publish → placement → applier → result).
4. **Latency**: first `--warm-up-pods` more pods (default 2,000, not part of `--pods`) at the latency rate,
   not measured: a broker started for the run compiles the code paths of a steady stream only once it sees
   one, and its compiler threads took the pipeline's cores in the measured phase
   (docs/pipeline-performance.md). Then, once a probe pod's verdict says the pipeline is drained, the
   remaining pods published at `--latency-rate` (default: half the measured throughput); per pod,
   publish → its final result as this process receives it; p50, p99.
   Over this phase, each process's cores kept busy and its cores' worth of waiting for a CPU (`CpuMeter`:
   this process, the applier, the workers, and the broker when it runs on this machine: the one Kafka
   process, or the one listening on the bootstrap port).

The worker and the applier are separate processes; the broker, they and this process share the machine's
cores. With `--cprofile DIR`, the worker and the applier run under cProfile and write
DIR/{worker,applier}.prof.

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.placement import make_nodes, make_pod
from policies.framework.profile import BUILTIN_PROFILES
from schemas.codec import encode
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.core.sequencer import Envelope, Kind, decode_envelopes
from streams.core.shard import Shard
from streams.demo.processes import start_role, stop_all
from streams.local.broker import resolved_broker
from streams.runtime.app import GC_THRESHOLDS
from streams.runtime.security import client_security, consumer_limits
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

FINAL = frozenset({"applied", "unschedulable", "rejected"})
SAMPLE_STEP_S = 1.0
"""Event-time spacing of one node's samples: with the default 10 s summary interval, one sample in ten (or
one that moves > 5 %) makes a summary for placement."""


@dataclass
class Workload:
    nodes: list[NodeSpec]
    pods: list[PodRequest]
    samples: list[dict[str, Any]] = field(default_factory=list)
    """One metrics round: node samples, every node in turn, `SAMPLE_STEP_S` apart per node."""
    warm_up: list[PodRequest] = field(default_factory=list)
    """Pods published at the latency rate before that phase, not measured."""


def make_workload(nodes: int, pods: int, samples: int, profile: str, seed: int, warm_up: int = 0) -> Workload:
    rng = random.Random(seed)
    specs = make_nodes(nodes, rng)
    pod_list = [make_pod(i, rng, profile) for i in range(pods)]
    # Drawn after the measured pods, so those are the same whatever the warm-up.
    warm_up_list = [make_pod(i, rng, profile) for i in range(pods, pods + warm_up)]
    levels = np.random.default_rng(seed).uniform(0.2, 0.7, size=(len(specs), 2))
    noise = np.random.default_rng(seed + 1).normal(0.0, 0.01, size=(samples, 2))
    rows = []
    for i in range(samples):
        row = i % len(specs)
        spec = specs[row]
        cpu = max(0.0, levels[row, 0] + noise[i, 0]) * spec.allocatable.get("cpu") / 1000
        memory = max(0.0, levels[row, 1] + noise[i, 1]) * spec.allocatable.get("memory")
        rows.append(
            {
                "ts": (i // len(specs)) * SAMPLE_STEP_S,
                "node": spec.name,
                "values": {"cpu": round(float(cpu), 4), "memory": round(float(memory))},
            }
        )
    return Workload(specs, pod_list, rows, warm_up_list)


# ------------------------------------------------------------------------------------------ in process


def in_process_rate(workload: Workload) -> tuple[float, int]:
    """Decisions per second of the placement core alone, fed envelopes as the agent is."""
    shard = Shard()
    for spec in workload.nodes:
        shard.feed(Envelope(Kind.NODE, 0.0, NodeEvent(type="upsert", node=spec), "node-events/0"))
    now = 1.0
    decided = 0
    started = time.perf_counter()
    for pod in workload.pods:
        outputs = shard.feed(Envelope(Kind.POD, now, pod, "pod-requests/0"))
        decided += len(outputs)
    seconds = time.perf_counter() - started
    return len(workload.pods) / seconds, decided


# ------------------------------------------------------------------------------------------ processes


# ------------------------------------------------------------------------------------------ CPU


def _schedstat(pid: int) -> tuple[int, int]:
    """Nanoseconds a process's threads spent on a CPU and runnable but waiting for one (Linux schedstat)."""
    on_cpu = waiting = 0
    for path in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        with contextlib.suppress(OSError, ValueError):
            run, wait, _ = path.read_text().split()
            on_cpu, waiting = on_cpu + int(run), waiting + int(wait)
    return on_cpu, waiting


def local_broker_pid(bootstrap: str) -> int | None:
    """The pid of the Kafka broker on this machine that serves `bootstrap` (its CPU counts too): the one
    Kafka process, or, when several run, the one holding the listening socket of the bootstrap port."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        with contextlib.suppress(OSError):
            if b"kafka.Kafka" in cmdline.read_bytes().split(b"\0"):
                found.append(int(cmdline.parent.name))
    if len(found) <= 1:
        return found[0] if found else None
    port = int(bootstrap.split(",", maxsplit=1)[0].rsplit(":", 1)[-1])
    listening = _listening_inodes(port)
    for pid in found:
        with contextlib.suppress(OSError):
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in listening:
                        return pid
    return None


def _listening_inodes(port: int) -> set[str]:
    """``socket:[INODE]`` of the TCP sockets listening on `port` (Linux /proc/net/tcp and tcp6)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                # local address "HEX_IP:HEX_PORT", state 0A = LISTEN, inode the 10th field
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    inodes.add(f"socket:[{fields[9]}]")
    return inodes


class CpuMeter:
    """Per process, the cores it kept busy over a phase, and the cores' worth of time it was runnable but
    waited for a CPU. The pipeline shares this machine's cores with its broker and with this benchmark: the
    sum says how close a rate comes to saturating them, which is what sets the latency tail."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, tuple[int, int]] = {}
        self._started = 0.0

    def start(self) -> None:
        self._start = {name: _schedstat(pid) for name, pid in self.pids.items()}
        self._started = time.monotonic()

    def stop(self) -> dict[str, dict[str, float]]:
        seconds = max(time.monotonic() - self._started, 1e-9)
        shares = {}
        for name, pid in self.pids.items():
            on_cpu, waiting = _schedstat(pid)
            before = self._start[name]
            shares[name] = {
                "on_cpu": (on_cpu - before[0]) / 1e9 / seconds,
                "waiting": (waiting - before[1]) / 1e9 / seconds,
            }
        return shares


# ------------------------------------------------------------------------------------------ Kafka side


class Results:
    """Follows binding-results from its end: when each pod's first final result arrived here."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.final_at: dict[str, float] = {}
        self.statuses: dict[str, str] = {}
        self.conflicts = 0
        self._awaited: set[str] = set()
        self._all_arrived = asyncio.Event()
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.bootstrap_servers,
            group_id=None,
            enable_auto_commit=False,
            **consumer_limits(self.settings),  # the pipeline's fetch wait, so a result is not held back
            **client_security(self.settings),
        )
        await consumer.start()
        topic = self.settings.topic("binding-results")
        partitions = [TopicPartition(topic, p) for p in range(self.settings.partitions)]
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        for tp in partitions:
            await consumer.position(tp)  # the seek happens now, before anything is published
        self._consumer = consumer
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        assert self._consumer is not None
        while True:
            batches = await self._consumer.getmany(timeout_ms=100, max_records=5000)
            now = time.perf_counter()
            for messages in batches.values():
                for message in messages:
                    result = orjson.loads(message.value)
                    status = result["status"]
                    if status == "conflict":
                        self.conflicts += 1
                    elif status in FINAL and result["uid"] not in self.final_at:
                        uid = result["uid"]
                        self.final_at[uid] = now
                        self.statuses[uid] = status
                        if uid in self._awaited:
                            self._awaited.discard(uid)
                            if not self._awaited:
                                self._all_arrived.set()

    async def wait_for(self, uids: Sequence[str], timeout: float) -> bool:
        # The awaited set shrinks as results arrive: rescanning every uid on each fetched batch was 44 % of
        # this process's py-spy samples at about 750 pods/s, on cores the pipeline it measures shares.
        self._awaited = {uid for uid in uids if uid not in self.final_at}
        if not self._awaited:
            return True
        self._all_arrived.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._all_arrived.wait(), timeout=timeout)
        return not self._awaited

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
        if self._consumer is not None:
            await self._consumer.stop()


def bench_producer(settings: Settings, linger_ms: int | None = None) -> AIOKafkaProducer:
    return AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        acks="all",
        enable_idempotence=True,
        linger_ms=settings.linger_ms if linger_ms is None else linger_ms,
        max_batch_size=256 * 1024,
        **client_security(settings),
    )


ROUNDS = ("one sample per record", "batched records")


async def publish_backlog(settings: Settings, workload: Workload, per_record: int) -> None:
    """Node events, then the metric samples twice: one sample per record, and again (later in event time)
    `per_record` samples of a node per record; each round closes with one sentinel sample per partition."""
    producer = bench_producer(settings)
    await producer.start()
    try:
        futures = []
        for spec in workload.nodes:
            event = NodeEvent(type="upsert", node=spec)
            futures.append(
                await producer.send(settings.topic("node-events"), encode(event), key=spec.name.encode())
            )
        topic = settings.topic("metrics")
        span = (len(workload.samples) // max(1, len(workload.nodes)) + 2) * SAMPLE_STEP_S
        for round_, name in enumerate(ROUNDS):
            start = 1_000_000.0 + round_ * span
            shifted = [{**sample, "ts": start + sample["ts"]} for sample in workload.samples]
            if name == "batched records":
                by_node: dict[str, list[dict[str, Any]]] = {}
                for sample in shifted:
                    by_node.setdefault(sample["node"], []).append(sample)
                records = [
                    (node, orjson.dumps(items[i : i + per_record]))
                    for node, items in by_node.items()
                    for i in range(0, len(items), per_record)
                ]
            else:
                records = [(sample["node"], orjson.dumps(sample)) for sample in shifted]
            for node, payload in records:
                futures.append(await producer.send(topic, payload, key=node.encode()))
            for partition in range(settings.partitions):
                node = f"sentinel-{round_}-{partition}"
                sentinel = {"ts": start + span, "node": node, "values": {"cpu": 1.0}}
                futures.append(
                    await producer.send(topic, orjson.dumps(sentinel), key=node.encode(), partition=partition)
                )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def metrics_drain_seconds(settings: Settings, timeout: float) -> list[float]:
    """Per round, the seconds the worker took: from its first summary (round 0) or the previous round's
    last sentinel summary to this round's last, as stamped by the worker's producer."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        fetch_max_bytes=32 * 1024 * 1024,
        **client_security(settings),
    )
    await consumer.start()
    topic = settings.topic("sequencer")
    partitions = [TopicPartition(topic, p) for p in range(settings.shards)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    first: float | None = None
    sentinels: dict[str, float] = {}
    expected = len(ROUNDS) * settings.partitions
    deadline = time.monotonic() + timeout
    try:
        while len(sentinels) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"metrics: {len(sentinels)} of {expected} sentinels seen")
            batches = await consumer.getmany(timeout_ms=500, max_records=10000)
            for messages in batches.values():
                for message in messages:
                    if b'"k":"summary"' not in message.value:
                        continue
                    stamp = message.timestamp / 1000
                    first = stamp if first is None else min(first, stamp)
                    for envelope in decode_envelopes(message.value):
                        if (
                            isinstance(envelope, Envelope)
                            and envelope.kind is Kind.SUMMARY
                            and envelope.value.node.startswith("sentinel-")
                        ):
                            sentinels[envelope.value.node] = stamp
    finally:
        await consumer.stop()
    assert first is not None
    ends = [
        max(t for node, t in sentinels.items() if node.startswith(f"sentinel-{r}-"))
        for r in range(len(ROUNDS))
    ]
    return [ends[0] - first] + [ends[r] - ends[r - 1] for r in range(1, len(ROUNDS))]


async def probe(settings: Settings, results: Results, timeout: float, purpose: str) -> float:
    """A pod that fits nowhere, and its verdict.

    Before the first phase, the verdict says the worker and the applier have joined and placement is live.
    Between phases, it says the backlog of the flat-out phase is gone: the sequencer partition is a queue,
    so the probe is decided after every envelope ahead of it (the flat-out pods' binding results included),
    and the latency phase measures the pipeline at its rate, not the tail of the previous phase.
    """
    started = time.perf_counter()
    producer = bench_producer(settings)
    await producer.start()
    try:
        pod = PodRequest(uid=f"{purpose}-{uuid.uuid4().hex[:6]}", node_selector={"eyrie.io/probe": "none"})
        await (await producer.send(settings.topic("pod-requests"), encode(pod), key=pod.uid.encode()))
    finally:
        await producer.stop()
    if not await results.wait_for([pod.uid], timeout):
        raise TimeoutError(f"the worker gave no verdict on the {purpose} pod")
    return time.perf_counter() - started


async def publish_pods(
    settings: Settings, pods: Sequence[PodRequest], rate: float | None, linger_ms: int
) -> dict[str, float]:
    """Publish pods, flat out or at `rate` per second; returns when each was handed to the producer (the
    producer's linger counts in the latency)."""
    payloads = [(pod.uid, encode(pod)) for pod in pods]
    producer = bench_producer(settings, linger_ms)
    await producer.start()
    sent_at: dict[str, float] = {}
    topic = settings.topic("pod-requests")
    try:
        futures = []
        started = time.perf_counter()
        for i, (uid, payload) in enumerate(payloads):
            if rate is not None:
                due = started + i / rate
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
            sent_at[uid] = time.perf_counter()
            futures.append(await producer.send(topic, payload, key=uid.encode()))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return sent_at


def percentile(values: Sequence[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


# ------------------------------------------------------------------------------------------ the run


@dataclass
class Figures:
    nodes: int
    pods: int
    profile: str
    partitions: int
    workers: int
    in_process_pods_per_s: float
    metrics_samples: int
    samples_per_record: int
    metrics_samples_per_s: float
    metrics_single_samples_per_s: float
    throughput_pods: int
    pods_per_s: float
    latency_pods: int
    warm_up_pods: int
    """Published at the latency rate before that phase, not measured."""
    latency_rate: float
    latency_ms: dict[str, float]
    unschedulable: int
    conflicts: int
    missing: int
    warm_up_s: float
    cpu: dict[str, dict[str, float]]
    """`CpuMeter` over the latency phase, by process."""
    client_linger_ms: int
    """How long the benchmark's producer of pod requests lingers for a batch."""

    def cpu_ms_per_pod(self) -> float:
        """Every measured process's CPU time per pod at the latency rate."""
        return sum(share["on_cpu"] for share in self.cpu.values()) * 1000 / self.latency_rate

    def to_json(self) -> dict[str, Any]:
        return {
            "nodes": self.nodes,
            "pods": self.pods,
            "profile": self.profile,
            "partitions": self.partitions,
            "workers": self.workers,
            "cores": os.cpu_count(),
            "pods_per_s": round(self.pods_per_s, 1),
            "latency_rate": round(self.latency_rate, 1),
            "latency_ms": {k: round(v, 1) for k, v in self.latency_ms.items()},
            "warm_up_pods": self.warm_up_pods,
            "in_process_pods_per_s": round(self.in_process_pods_per_s, 1),
            "end_to_end_vs_in_process": round(self.pods_per_s / self.in_process_pods_per_s, 3),
            "metrics_samples_per_s": round(self.metrics_samples_per_s, 1),
            "metrics_samples_per_record": self.samples_per_record,
            "metrics_one_per_record_samples_per_s": round(self.metrics_single_samples_per_s, 1),
            "metrics_samples": self.metrics_samples,
            "unschedulable": self.unschedulable,
            "conflicts": self.conflicts,
            "missing": self.missing,
            "warm_up_s": round(self.warm_up_s, 2),
            "client_linger_ms": self.client_linger_ms,
            "cpu_ms_per_pod": round(self.cpu_ms_per_pod(), 2),
            "cpu_in_latency_phase": {
                name: {key: round(value, 3) for key, value in shares.items()}
                for name, shares in self.cpu.items()
            },
        }


async def _measure(
    settings: Settings,
    workload: Workload,
    throughput_pods: Sequence[PodRequest],
    latency_pods: Sequence[PodRequest],
    latency_rate: float | None,
    timeout: float,
    meter: CpuMeter,
    client_linger_ms: int,
) -> tuple[float, float, dict[str, float], Results, float, dict[str, dict[str, float]]]:
    results = Results(settings)
    await results.start()
    try:
        warm = await probe(settings, results, timeout, "warm-up")
        sent = await publish_pods(settings, throughput_pods, None, client_linger_ms)
        uids = [pod.uid for pod in throughput_pods]
        await results.wait_for(uids, timeout)
        finished = [results.final_at[uid] for uid in uids if uid in results.final_at]
        pods_per_s = len(finished) / (max(finished) - min(sent.values())) if finished else 0.0
        rate = latency_rate or max(1.0, pods_per_s / 2)
        if workload.warm_up:
            await publish_pods(settings, workload.warm_up, rate, client_linger_ms)
            await results.wait_for([pod.uid for pod in workload.warm_up], timeout)
        await probe(settings, results, timeout, "drain")
        meter.start()
        sent = await publish_pods(settings, latency_pods, rate, client_linger_ms)
        uids = [pod.uid for pod in latency_pods]
        await results.wait_for(uids, timeout)
        cpu = meter.stop()
        latencies = [(results.final_at[uid] - sent[uid]) * 1000 for uid in uids if uid in results.final_at]
        latency = {"p50": percentile(latencies, 50), "p99": percentile(latencies, 99)}
    finally:
        await results.stop()
    return pods_per_s, rate, latency, results, warm, cpu


def run(args: argparse.Namespace) -> Figures:
    if args.profile not in BUILTIN_PROFILES:
        raise SystemExit(f"error: --profile: unknown {args.profile!r} (known: {', '.join(BUILTIN_PROFILES)})")
    workload = make_workload(args.nodes, args.pods, args.samples, args.profile, args.seed, args.warm_up_pods)
    split = round(args.pods * (1 - args.latency_share))
    print(f"workload: {args.nodes} nodes, {args.pods} pods, {args.samples} samples", flush=True)
    in_process, _ = in_process_rate(workload)
    print(f"in process: {in_process:,.0f} pods/s", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.cprofile is not None:
        Path(args.cprofile).mkdir(parents=True, exist_ok=True)
    with resolved_broker() as bootstrap:
        prefix = f"bench-{uuid.uuid4().hex[:6]}."
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "EYRIE_TOPIC_PREFIX": prefix,
            "EYRIE_PARTITIONS": str(args.partitions),
            "EYRIE_DATA_DIR": str(out / "faust"),
        }
        settings = load_settings(env=env)
        client_linger_ms = settings.linger_ms if args.client_linger_ms is None else args.client_linger_ms
        asyncio.run(ensure_topics(settings))
        asyncio.run(publish_backlog(settings, workload, args.samples_per_record))
        print(
            f"published {len(workload.nodes)} nodes and {args.samples} samples to {prefix}*; starting",
            flush=True,
        )
        cprofile = Path(args.cprofile) if args.cprofile is not None else None
        processes = [start_role("applier", env, out, cprofile=cprofile)]
        for i in range(args.workers):
            # Each worker its own data directory; they share the consumer group, so Kafka splits the
            # input partitions between them (the sequencer partition, one per shard, goes to one).
            worker_env = {**env, "EYRIE_DATA_DIR": str(out / f"faust-{i}")}
            processes.append(
                start_role("worker", worker_env, out, cprofile=cprofile, suffix=f"-{i}" if i else "")
            )
        try:
            drains = asyncio.run(metrics_drain_seconds(settings, args.timeout))
            # Record timestamps are in milliseconds: a tiny round can drain within one.
            single, batched = (
                (args.samples + settings.partitions) / max(d, 0.001) / args.workers for d in drains
            )
            print(
                f"metrics: {single:,.0f} samples/s one per record, {batched:,.0f} samples/s "
                f"{args.samples_per_record} per record",
                flush=True,
            )
            pids = {"benchmark": os.getpid(), "applier": processes[0].pid}
            pids.update((f"worker-{i}" if i else "worker", p.pid) for i, p in enumerate(processes[1:]))
            broker_pid = local_broker_pid(bootstrap)
            if broker_pid is not None:
                pids["broker"] = broker_pid
            pods_per_s, rate, latency, results, warm, cpu = asyncio.run(
                _measure(
                    settings,
                    workload,
                    workload.pods[:split],
                    workload.pods[split:],
                    args.latency_rate,
                    args.timeout,
                    CpuMeter(pids),
                    client_linger_ms,
                )
            )
        finally:
            stop_all(processes)
    uids = [pod.uid for pod in workload.pods]
    return Figures(
        nodes=args.nodes,
        pods=args.pods,
        profile=args.profile,
        partitions=args.partitions,
        workers=args.workers,
        in_process_pods_per_s=in_process,
        metrics_samples=args.samples,
        samples_per_record=args.samples_per_record,
        metrics_samples_per_s=batched,
        metrics_single_samples_per_s=single,
        throughput_pods=split,
        pods_per_s=pods_per_s,
        latency_pods=args.pods - split,
        warm_up_pods=args.warm_up_pods,
        latency_rate=rate,
        latency_ms=latency,
        unschedulable=sum(1 for uid in uids if results.statuses.get(uid) == "unschedulable"),
        conflicts=results.conflicts,
        missing=sum(
            1 for uid in [*uids, *(pod.uid for pod in workload.warm_up)] if uid not in results.final_at
        ),
        warm_up_s=warm,
        cpu=cpu,
        client_linger_ms=client_linger_ms,
    )


def render(figures: Figures) -> str:
    rows = [
        ("in process (placement core, no Kafka)", f"{figures.in_process_pods_per_s:,.0f} pods/s"),
        (
            f"end to end, {figures.throughput_pods:,} pods flat out",
            f"{figures.pods_per_s:,.0f} pods/s "
            f"({figures.pods_per_s / figures.in_process_pods_per_s:.2f} × in process)",
        ),
        (
            f"latency, {figures.latency_pods:,} pods at {figures.latency_rate:,.0f}/s "
            f"after {figures.warm_up_pods:,} unmeasured",
            f"p50 {figures.latency_ms['p50']:.1f} ms, p99 {figures.latency_ms['p99']:.1f} ms",
        ),
        (
            f"metrics, {figures.metrics_samples:,} samples, one per record",
            f"{figures.metrics_single_samples_per_s:,.0f} samples/s per worker",
        ),
        (
            f"metrics, {figures.metrics_samples:,} samples, {figures.samples_per_record} per record",
            f"{figures.metrics_samples_per_s:,.0f} samples/s per worker "
            f"({figures.metrics_samples_per_s / figures.metrics_single_samples_per_s:.1f} × one per record)",
        ),
        (
            f"cores busy in the latency phase (of {os.cpu_count()})",
            f"{sum(share['on_cpu'] for share in figures.cpu.values()):.2f} "
            f"({figures.cpu_ms_per_pod():.2f} ms of CPU per pod): "
            + ", ".join(f"{name} {share['on_cpu']:.2f}" for name, share in figures.cpu.items()),
        ),
        (
            "cores' worth of waiting for a CPU",
            ", ".join(f"{name} {share['waiting']:.2f}" for name, share in figures.cpu.items()),
        ),
        (
            "unschedulable / conflicts / missing",
            f"{figures.unschedulable} / {figures.conflicts} / {figures.missing}",
        ),
    ]
    width = max(len(name) for name, _ in rows)
    header = (
        f"{figures.nodes:,} nodes, profile {figures.profile}, {figures.partitions} partitions, "
        f"{figures.workers} worker(s), {os.cpu_count()} cores, client linger {figures.client_linger_ms} ms"
    )
    return "\n".join([header] + [f"  {name:<{width}}  {value}" for name, value in rows])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=20000)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--samples", type=int, default=100_000, help="Metric samples per metrics round")
    parser.add_argument(
        "--samples-per-record", type=int, default=20, help="Samples of one node per record, batched round"
    )
    parser.add_argument("--latency-share", type=float, default=0.25, help="Share of the pods for latency")
    parser.add_argument("--latency-rate", type=float, default=None, help="Pods/s (default: half throughput)")
    parser.add_argument(
        "--warm-up-pods", type=int, default=2000, help="Pods at the latency rate before it is measured"
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--workers", type=int, default=1, help="Worker processes (one consumer group)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--out", default="bench-out/pipeline", help="Logs and the workers' data")
    parser.add_argument("--cprofile", default=None, help="Directory for worker.prof and applier.prof")
    parser.add_argument(
        "--client-linger-ms",
        type=int,
        default=None,
        help="Linger of the benchmark's pod producer (default: the pipeline's linger_ms; Kafka's own "
        "producer defaults to 5 since 4.0)",
    )
    args = parser.parse_args()
    if not 0 < args.latency_share < 1:
        raise SystemExit("error: --latency-share must be between 0 and 1")
    if args.warm_up_pods < 0:
        raise SystemExit("error: --warm-up-pods must be 0 or more")
    if args.client_linger_ms is not None and args.client_linger_ms < 0:
        raise SystemExit("error: --client-linger-ms must be 0 or more")
    # The measuring process holds every pod and result too: it collects garbage as the worker does, so its
    # own pauses do not show up as pipeline latency.
    gc.set_threshold(*GC_THRESHOLDS)
    figures = run(args)
    print(render(figures))
    print(orjson.dumps(figures.to_json()).decode())


if __name__ == "__main__":
    main()
