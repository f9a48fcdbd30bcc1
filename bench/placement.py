"""Placement throughput: eyrie's Scheduler against a plain per-node Python loop, in the same process.

    python -m bench.placement [--nodes N] [--pods P] [--profile NAME] [--seed S] [--baseline-pods K]
                              [--cprofile TOP] [--workload mixed|spread]

A seeded synthetic cluster (node shapes, zones, GPUs, taints, cordons, 20-50% existing usage) and a seeded
pod stream. Eyrie schedules every pod, one decision at a time (`add_pod` + `schedule`, every node filtered
and scored), each timed on its own. The baseline implements the profile's plugins as a loop over nodes with
its own state in plain Python objects; it runs over the first K pods from the same starting state, and the
two are compared pod by pod (node, total and per-plugin scores). When they disagree, a second, untimed pass
keeps the baseline on eyrie's placements so each disagreement is seen on its own, and prints both sides'
verdicts for every node that differs.

The per-node loop covers the request-based profiles (default, binpack) only. The load-aware profiles
(trimaran, portrait, balanced) run on a snapshot with measured load: every node gets a sliding window
(cpu, memory, bandwidth at 20-70% utilisation) and an hourly node portrait, a few hundred workloads get
portraits, and the pods carry those workloads' names (some carry none, or one with no portrait yet: the
cold-start path). Pods arrive at an increasing `now`, so each is tracked as placed since the measurements.
Their baseline is the `default` profile, run in the same process on the same nodes, pods and measured load;
`default` on a snapshot without measured load (what `--profile default` times) is shown too.

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import random
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import orjson

from policies.drive import arrive, make_scheduler
from policies.framework.profile import BUILTIN_PROFILES, ProfileSet
from policies.plugins.imagelocality import MAX_CONTAINER_THRESHOLD, MIN_THRESHOLD, normalized_image_name
from policies.scheduler import Explanation, Outcome, Placed, Scheduler, Unschedulable
from policies.snapshot import nonzero_requests
from policies.usage import PORTRAIT_METRICS, WINDOW_METRICS
from portraits.hourly import HOURS, Portrait
from schemas.gpu import GpuCards
from schemas.node import NodeSpec
from schemas.pod import (
    LabelSelector,
    PodAffinity,
    PodAffinityTerm,
    PodRequest,
    TopologySpreadConstraint,
    whole_cards,
)
from schemas.quantity import Resources

GIB = 2**30
MIB = 2**20
GPU = "nvidia.com/gpu"
ZONE_KEY = "topology.kubernetes.io/zone"
HOSTNAME_KEY = "kubernetes.io/hostname"
TYPE_KEY = "node-type"
GENERATION_KEY = "example.com/generation"
LIFECYCLE_KEY = "lifecycle"
ZONES = ("us-east-1a", "us-east-1b", "us-east-1c")
CORDON_TAINT = "node.kubernetes.io/unschedulable"
NOW = 0.0
"""Time stands still: a pod that fails stays parked in backoff instead of being retried mid-run."""
LOAD_PROFILES = ("trimaran", "portrait", "balanced")
"""Profiles that read measured load: they run on a snapshot with windows and portraits, against `default`."""
ARRIVAL_STEP = 0.01
"""Seconds between pod arrivals on the load-aware runs: 5,000 pods span 50 s, well inside the scheduler's
unschedulable flush interval, so a pod that fails is still not retried mid-run."""
TARGET_LOAD_PODS_PER_S = 1500.0

# (instance type, node-type, cores, memory GiB, GPUs, relative frequency)
SHAPES = (
    ("m5.4xlarge", "general", 16, 64, 0, 3),
    ("m5.8xlarge", "general", 32, 128, 0, 4),
    ("c5.16xlarge", "compute", 64, 128, 0, 2),
    ("r5.16xlarge", "memory", 64, 512, 0, 1),
    ("m5.24xlarge", "general", 96, 384, 0, 2),
)
GPU_SHAPES = (("p3.8xlarge", "gpu", 32, 244, 4, 1), ("p3.16xlarge", "gpu", 64, 488, 8, 1))


# ------------------------------------------------------------------------------------------ the cluster


@dataclass(slots=True)
class Cluster:
    specs: list[NodeSpec]
    existing: list[list[PodRequest]]
    """Pods already bound, per node (same order as `specs`)."""
    fill: tuple[float, float]


def _reserved_cpu(cores: int) -> int:
    # GKE's kube-reserved ladder: allocatable is a little less than capacity, and not a round number,
    # which keeps exact score ties at a realistic level.
    millis = 60 + 10 + 2 * 5
    return millis + max(0, cores - 4) * 25 // 10


def _reserved_memory(gib: int) -> int:
    steps = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (10**6, 0.02))
    left, reserved = float(gib), 0.0
    for size, share in steps:
        take = min(left, size)
        reserved += take * share
        left -= take
    return int(reserved * GIB) + 100 * MIB  # + the kubelet's hard eviction threshold


def make_nodes(count: int, rng: random.Random) -> list[NodeSpec]:
    specs = []
    weights = [shape[-1] for shape in SHAPES]
    for i in range(count):
        name = f"node-{i:05d}"
        if rng.random() < 0.20:
            instance, kind, cores, memory_gib, gpus, _ = rng.choice(GPU_SHAPES)
        else:
            instance, kind, cores, memory_gib, gpus, _ = rng.choices(SHAPES, weights)[0]
        capacity: dict[str, int] = {
            "cpu": cores * 1000,
            "memory": memory_gib * GIB,
            "ephemeral-storage": 200 * GIB,
            "pods": 110,
        }
        allocatable = dict(capacity)
        allocatable["cpu"] -= _reserved_cpu(cores)
        allocatable["memory"] -= _reserved_memory(memory_gib)
        allocatable["ephemeral-storage"] = 180 * GIB
        if gpus:
            capacity[GPU] = allocatable[GPU] = gpus
        labels = {
            "kubernetes.io/hostname": name,
            ZONE_KEY: rng.choice(ZONES),
            "topology.kubernetes.io/region": "us-east-1",
            "node.kubernetes.io/instance-type": instance,
            TYPE_KEY: kind,
            GENERATION_KEY: str(rng.randint(1, 5)),
        }
        taints = []
        if rng.random() < 0.10:
            if gpus:
                taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
            else:
                taints.append(
                    {"key": "dedicated", "value": rng.choice(("batch", "infra")), "effect": "NoSchedule"}
                )
        if rng.random() < 0.05:
            labels[LIFECYCLE_KEY] = "spot"
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
            # A second soft taint on some, so TaintToleration's normalisation sees counts of 0, 1 and 2.
            if rng.random() < 0.4:
                taints.append({"key": "maintenance", "value": "scheduled", "effect": "PreferNoSchedule"})
        cordoned = rng.random() < 0.02
        if cordoned:
            # What `kubectl cordon` leads to: the flag, and the taint the node lifecycle controller adds.
            taints.append({"key": CORDON_TAINT, "effect": "NoSchedule"})
        specs.append(
            NodeSpec(
                name=name,
                capacity=Resources(capacity),
                allocatable=Resources(allocatable),
                labels=labels,
                taints=taints,
                unschedulable=cordoned,
                # Per-card accounting for the gpu-share profile (other profiles read nvidia.com/gpu).
                gpus=GpuCards(count=gpus, model=instance) if gpus else None,
            )
        )
    return specs


def _existing_pods(spec: NodeSpec, fill: float, rng: random.Random, row: int) -> list[PodRequest]:
    cpu_target = spec.allocatable["cpu"] * fill
    # Memory fills unevenly against cpu, so BalancedAllocation has something to balance.
    memory_target = spec.allocatable["memory"] * min(0.9, fill * rng.uniform(0.6, 1.4))
    shares = [rng.random() + 0.2 for _ in range(rng.randint(2, 6))]
    total = sum(shares)
    gpus_used = rng.randint(0, spec.allocatable.get(GPU, 0) // 2)
    pods = []

    def pod(suffix: str, **fields: Any) -> PodRequest:
        return PodRequest(uid=f"existing-{row:05d}-{suffix}", labels={"app": "existing"}, **fields)

    for j, share in enumerate(shares):
        requests = {
            "cpu": max(10, int(cpu_target * share / total) // 10 * 10),
            "memory": max(MIB, int(memory_target * share / total) // MIB * MIB),
        }
        if j == 0 and gpus_used:
            requests[GPU] = gpus_used
        pods.append(pod(str(j), containers=[{"name": "app", "requests": Resources(requests)}]))
    if rng.random() < 0.3:
        pods.append(pod("besteffort", containers=[{"name": "app"}]))  # counts only through the defaults
    small = Resources({"cpu": 100, "memory": 128 * MIB})
    if rng.random() < 0.10:
        pods.append(pod("ingress", containers=[{"name": "nginx", "requests": small}], host_ports=[80, 443]))
    if rng.random() < 0.05:
        pods.append(pod("exporter", containers=[{"name": "exporter", "requests": small}], host_ports=[9100]))
    if rng.random() < 0.03:
        dns = {"port": 53, "protocol": "UDP", "host_ip": "127.0.0.1"}
        pods.append(pod("dns", containers=[{"name": "dns", "requests": small}], host_ports=[dns]))
    return pods


def _loguniform(rng: random.Random, low: float, high: float) -> float:
    return float(low * (high / low) ** rng.random())


def _term(*expressions: tuple[str, str, list[str]]) -> dict[str, Any]:
    return {"match_expressions": [{"key": k, "operator": op, "values": v} for k, op, v in expressions]}


AFFINITIES = (
    [_term((ZONE_KEY, "In", [ZONES[0], ZONES[1]]))],
    [_term((TYPE_KEY, "NotIn", ["gpu"]))],
    [_term((GENERATION_KEY, "Gt", ["2"]))],
    [_term((ZONE_KEY, "In", [ZONES[2]]), (TYPE_KEY, "In", ["memory"])), _term((GENERATION_KEY, "Lt", ["3"]))],
    [_term((LIFECYCLE_KEY, "DoesNotExist", []))],
    [_term((LIFECYCLE_KEY, "Exists", []), (TYPE_KEY, "In", ["general", "compute"]))],
)
HOST_PORTS: tuple[list[Any], ...] = (
    [8080],
    [9100],
    [80, 443],
    [{"port": 53, "protocol": "UDP"}],
    [{"port": 53, "protocol": "UDP", "host_ip": "127.0.0.1"}],
)


def make_pod(i: int, rng: random.Random, scheduler_name: str) -> PodRequest:
    data: dict[str, Any] = {
        "uid": f"pod-{i:06d}",
        "scheduler_name": scheduler_name,
        "priority": rng.randint(0, 3),
        "labels": {"app": f"app-{rng.randrange(40)}"},
    }
    tolerations: list[dict[str, str]] = []
    kind = rng.random()
    gpus = 0
    if kind < 0.05:
        data["containers"] = [{"name": "app"}]  # BestEffort: scored with the non-zero defaults
    else:
        cpu = int(_loguniform(rng, 100, 8000)) // 10 * 10
        memory = int(_loguniform(rng, 128, 32 * 1024)) * MIB
        requests = {"cpu": cpu, "memory": memory}
        if kind < 0.15:
            gpus = rng.choice((1, 1, 1, 1, 2, 2, 4, 8))
            if scheduler_name.startswith("gpu-share"):
                # The gpu-share mix: as in the openb trace, most GPU pods share one card.
                share = rng.random() < 0.6
                data["gpu"] = {"milli": rng.choice((100, 250, 300, 500, 700)) if share else 1000}
                data["gpu"]["count"] = 1 if share else gpus
            else:
                requests[GPU] = gpus
            tolerations.append({"key": GPU, "operator": "Exists", "effect": "NoSchedule"})
        if rng.random() < 0.10:
            requests["ephemeral-storage"] = rng.randint(1, 20) * GIB
        app: dict[str, Any] = {"name": "app", "requests": Resources(requests)}
        if rng.random() < 0.3:
            app["limits"] = Resources({"cpu": cpu * 2, "memory": memory})
        containers = [app]
        sidecar = rng.random()
        if sidecar < 0.10:
            containers.append({"name": "sidecar"})  # no requests: the defaults apply to this container only
        elif sidecar < 0.25:
            containers.append({"name": "sidecar", "requests": Resources({"cpu": 50, "memory": 64 * MIB})})
        data["containers"] = containers
        if rng.random() < 0.08:
            init = Resources({"cpu": rng.choice((500, 2000, 4000)), "memory": 256 * MIB})
            data["init_containers"] = [{"name": "init", "requests": init}]
    selector: dict[str, str] = {}
    if rng.random() < 0.15:
        selector[ZONE_KEY] = rng.choice(ZONES)
    if gpus and rng.random() < 0.3:
        selector[TYPE_KEY] = "gpu"
    elif rng.random() < 0.05:
        selector[TYPE_KEY] = rng.choice(("general", "compute", "memory"))
    data["node_selector"] = selector
    if rng.random() < 0.08:
        data["node_affinity"] = rng.choice(AFFINITIES)
    roll = rng.random()
    if roll < 0.15:
        tolerations.append(
            {"key": "dedicated", "operator": "Equal", "value": "batch", "effect": "NoSchedule"}
        )
    elif roll < 0.20:
        tolerations.append({"key": "spot", "operator": "Exists"})
    elif roll < 0.22:
        tolerations.append({"key": "maintenance", "value": "scheduled", "effect": "PreferNoSchedule"})
    elif roll < 0.24:
        tolerations.append({"operator": "Exists"})  # a DaemonSet-style pod: tolerates everything
    elif roll < 0.25:
        tolerations.append({"key": CORDON_TAINT, "operator": "Exists", "effect": "NoSchedule"})
    data["tolerations"] = tolerations
    if rng.random() < 0.03:
        data["host_ports"] = rng.choice(HOST_PORTS)
    return PodRequest.model_validate(data)


def make_cluster(nodes: int, pods: Sequence[PodRequest], seed: int) -> Cluster:
    specs = make_nodes(nodes, random.Random(f"{seed}-nodes"))
    schedulable = [s for s in specs if not s.unschedulable]
    # Size the existing usage so that, with every new pod placed, the cluster ends at most ~80% full.
    added = max(
        sum(p.effective_requests.get(r, 0) for p in pods) / max(1, sum(s.allocatable[r] for s in schedulable))
        for r in ("cpu", "memory")
    )
    high = min(0.50, max(0.05, 0.80 - added))
    low = min(0.20, high / 2)
    rng = random.Random(f"{seed}-usage")
    existing = [_existing_pods(spec, rng.uniform(low, high), rng, row) for row, spec in enumerate(specs)]
    return Cluster(specs, existing, (low, high))


# ------------------------------------------------------------------------------------------ measured load

BANDWIDTH = 1.25e9
"""A 10 Gbit/s NIC, in bytes/s: the bandwidth window's scale (nodes here have no bandwidth resource, so
LoadThresholds skips that metric, but the window carries it as the metrics agent would)."""
WORKLOADS = 300


@dataclass(slots=True)
class Load:
    """The measured load a run starts from: workload portraits by name, and per node (same order as the
    cluster's specs) a window and a portrait."""

    workloads: dict[str, Portrait]
    windows: list[dict[str, tuple[float, float]]]
    portraits: list[Portrait]


def _daily(rng: np.random.Generator, level: np.ndarray, amplitude: tuple[float, float]) -> np.ndarray:
    """(24, metrics): each metric's level on a daily cycle with its own amplitude and phase."""
    hours = np.arange(HOURS, dtype=np.float64)[:, None]
    width = len(level)
    swing = rng.uniform(*amplitude, width)
    phase = rng.uniform(0.0, 24.0, width)
    cycle: np.ndarray = level * (1.0 + swing * np.sin(2 * np.pi * (hours - phase) / HOURS))
    return cycle


def _portrait(
    rng: np.random.Generator,
    level: np.ndarray,
    amplitude: tuple[float, float],
    spread: tuple[float, float],
    has: np.ndarray,
) -> Portrait:
    mean = _daily(rng, level, amplitude)
    std = mean * rng.uniform(*spread, len(level))
    return Portrait(PORTRAIT_METRICS, np.where(has, mean, 0.0), np.where(has, std, 0.0), has)


def assign_workloads(pods: Sequence[PodRequest], seed: int) -> tuple[list[PodRequest], dict[str, Portrait]]:
    """Give pods workload names, and `WORKLOADS` of those workloads portraits. Pods of one workload have
    similar requests (they are grouped by cpu request), and the portrait is what such pods use: 30-90% of
    the cpu request, 50-95% of the memory request, on a daily cycle. 85% of the pods belong to a workload
    with a portrait, 10% to a new workload without one and 5% to none (both take the cold-start path)."""
    rng = np.random.default_rng([seed, 101])
    cpu = np.array([p.effective_requests.get("cpu", 0) for p in pods], dtype=np.float64)
    memory = np.array([p.effective_requests.get("memory", 0) for p in pods], dtype=np.float64)
    rank = np.empty(len(pods), dtype=np.int64)
    rank[np.argsort(cpu, kind="stable")] = np.arange(len(pods))
    group = rank * WORKLOADS // max(1, len(pods))
    roll = rng.random(len(pods))
    names = [f"team-{g % 17:02d}/app-{g:03d}" for g in range(WORKLOADS)]
    assigned: list[PodRequest] = []
    for i, pod in enumerate(pods):
        if roll[i] < 0.85:
            workload: str | None = names[group[i]]
        elif roll[i] < 0.95:
            workload = f"team-new/app-{i:06d}"
        else:
            workload = None
        assigned.append(pod.model_copy(update={"workload": workload}))
    portraits: dict[str, Portrait] = {}
    width = len(PORTRAIT_METRICS)
    for g, name in enumerate(names):
        members = group == g
        if not members.any():
            continue
        level = np.array(
            [
                cpu[members].mean() / 1000.0 * rng.uniform(0.3, 0.9),
                memory[members].mean() * rng.uniform(0.5, 0.95),
                math.exp(rng.uniform(math.log(1e5), math.log(1e8))),
                math.exp(rng.uniform(math.log(1e8), math.log(1e10))),
                rng.uniform(0.01, 1.0),  # LLC misses per kilo-instruction
                rng.uniform(0.05, 1.0),  # cache references per kilo-instruction
            ]
        )
        has = np.ones((HOURS, width), dtype=np.bool_)
        has[:, 4:] = rng.random() < 0.3  # perf counters on some hosts only
        if rng.random() < 0.05:
            has[rng.random(HOURS) < 0.5] = False  # a young workload: some hours never seen
        portraits[name] = _portrait(rng, level, (0.1, 0.6), (0.1, 0.4), has)
    return assigned, portraits


def make_load(cluster: Cluster, workloads: dict[str, Portrait], seed: int) -> Load:
    """Per node: window means at 20-70% of allocatable (cpu, memory, bandwidth) with a 5-30% std, and an
    hourly portrait around the same levels (±5-25% over the day, σ 3-12% of μ; 10% of nodes without perf
    counters)."""
    rng = np.random.default_rng([seed, 202])
    windows, portraits = [], []
    width = len(PORTRAIT_METRICS)
    for spec in cluster.specs:
        cores = spec.allocatable["cpu"] / 1000.0
        scale = np.array([cores, float(spec.allocatable["memory"]), BANDWIDTH])
        means = rng.uniform(0.2, 0.7, len(WINDOW_METRICS)) * scale
        stds = means * rng.uniform(0.05, 0.3, len(WINDOW_METRICS))
        windows.append(
            {m: (float(mean), float(std)) for m, mean, std in zip(WINDOW_METRICS, means, stds, strict=True)}
        )
        level = np.array(
            [
                *means,
                math.exp(rng.uniform(math.log(1e11), math.log(1e12))),  # disk, bytes
                rng.uniform(0.05, 3.0),
                rng.uniform(0.2, 3.0),
            ]
        )
        has = np.ones((HOURS, width), dtype=np.bool_)
        has[:, 4:] = rng.random() >= 0.10
        portraits.append(_portrait(rng, level, (0.05, 0.25), (0.03, 0.12), has))
    return Load(workloads, windows, portraits)


def attach_load(scheduler: Scheduler, cluster: Cluster, load: Load) -> None:
    """Push the measured load into the snapshot, as the metrics pipeline would: windows ending at t = 0,
    portraits whose every hour was last seen at t = 0 (the run's pods arrive after, so all of them count as
    placed since the measurements)."""
    snapshot = scheduler.snapshot
    usage = snapshot.usage
    seen = np.zeros(HOURS)
    for spec, window, portrait in zip(cluster.specs, load.windows, load.portraits, strict=True):
        row = snapshot.row_of(spec.name)
        usage.set_window(row, window, end=NOW)
        usage.set_node_portrait(row, portrait, seen=seen)
    for name, portrait in load.workloads.items():
        usage.set_workload_portrait(name, portrait)


# ------------------------------------------------------------------------------------------ eyrie


@dataclass(frozen=True, slots=True)
class Decision:
    node: str | None
    score: int | None = None
    plugin_scores: dict[str, int] = field(default_factory=dict)


def build_scheduler(cluster: Cluster) -> Scheduler:
    scheduler = make_scheduler(cluster.specs)
    snapshot = scheduler.snapshot
    for spec, pods in zip(cluster.specs, cluster.existing, strict=True):
        row = snapshot.row_of(spec.name)
        for pod in pods:
            snapshot.assume(snapshot.pod_info(pod), row, bound=True)
    return scheduler


def eyrie_decision(pod: PodRequest, outcomes: Sequence[object]) -> Decision:
    for outcome in outcomes:
        if isinstance(outcome, Placed) and outcome.uid == pod.uid:
            return Decision(outcome.node, outcome.score, dict(outcome.plugin_scores))
        if isinstance(outcome, Unschedulable) and outcome.uid == pod.uid:
            return Decision(None)
    raise AssertionError(f"no outcome for {pod.uid}: {outcomes!r}")


def run_eyrie(
    scheduler: Scheduler, pods: Sequence[PodRequest], step: float = 0.0
) -> tuple[list[Decision], list[int], int]:
    """Schedule the pods one by one, pod i arriving at NOW + i·step. Returns the decisions, each one's
    wall-clock latency, and the thread's CPU time over all of them (ns): on a shared machine the wall clock
    counts the time other processes held the core, the CPU time does not."""
    outcomes: list[list[Outcome]] = []
    latencies: list[int] = []
    clock = time.perf_counter_ns
    cpu_start = time.thread_time_ns()
    for i, pod in enumerate(pods):
        now = NOW + i * step
        start = clock()
        found = arrive(scheduler, pod, now)
        latencies.append(clock() - start)
        outcomes.append(found)
    profiles = [scheduler.profiles.get(name) for name in scheduler.profiles.names()]
    if pods and any(profile is not None and profile.batch is not None for profile in profiles):
        # A batch profile decides a pod when its batch runs: the last, partly filled one once its wait is
        # over (charged to the last arrival). Each pod's decision is the first outcome naming it.
        start = clock()
        outcomes[-1] = [*outcomes[-1], *scheduler.tick(NOW + len(pods) * step + 3600.0)]
        latencies[-1] += clock() - start
        cpu_ns = time.thread_time_ns() - cpu_start
        every = [outcome for found in outcomes for outcome in found]
        first: dict[str, list[Outcome]] = {}
        for outcome in every:
            if isinstance(outcome, Placed | Unschedulable):
                first.setdefault(outcome.uid, [outcome])
        return [eyrie_decision(p, first.get(p.uid, [])) for p in pods], latencies, cpu_ns
    cpu_ns = time.thread_time_ns() - cpu_start
    return [eyrie_decision(p, o) for p, o in zip(pods, outcomes, strict=True)], latencies, cpu_ns


# ------------------------------------------------------------------------------------------ baseline

FILTERS = {
    "NodeUnschedulable",
    "NodeName",
    "TaintToleration",
    "NodeAffinity",
    "NodeSelector",
    "NodePorts",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
}
SCORERS = {
    "TaintToleration",
    "NodeAffinity",
    "NodeResourcesFit",
    "PodTopologySpread",
    "InterPodAffinity",
    "NodeResourcesBalancedAllocation",
    "ImageLocality",
}
PRE_FILTERS = {"NodeAffinity", "PodTopologySpread"}
"""PreFilters the baseline covers: NodeAffinity's only narrows the nodes to those its filter accepts;
PodTopologySpread's skips pods without constraints (eyrie derives no default selector, so the system
default constraints apply to none), the only pods the baseline takes."""
POST_FILTERS = {"DefaultPreemption"}
"""PostFilters the baseline covers by never running them: a pod eyrie places by preempting counts as a
decision that differs."""
NATIVE = ("cpu", "memory", "ephemeral-storage")


@dataclass(frozen=True, slots=True)
class Plan:
    """What the baseline needs of a profile: its filter and score chains, and the scorers' args, read from
    the profile's document rather than from eyrie's plugin objects."""

    filters: tuple[str, ...]
    scorers: tuple[tuple[str, int], ...]
    strategy: str = "LeastAllocated"
    fit_resources: tuple[tuple[str, int], ...] = (("cpu", 1), ("memory", 1))
    shape: tuple[tuple[int, int], ...] = ()
    balanced_resources: tuple[str, ...] = ("cpu", "memory")
    kubernetes_version: tuple[int, int] = (1, 36)
    """BalancedAllocation scores the change in balance from 1.36 and skips pods requesting none of its
    resources from 1.34."""


def make_plan(name: str) -> tuple[Plan | None, str]:
    profile = ProfileSet.builtin().get(name)
    assert profile is not None
    stages: list[Any] = [
        *(p for p in profile.pre_filter if p.name not in PRE_FILTERS),
        *(p for p in profile.post_filter if p.name not in POST_FILTERS),
        *profile.pre_score,
        *profile.reserve,
        *profile.permit,
    ]
    extra = [stage.name for stage in stages]
    filters = tuple(p.name for p in profile.filter)
    scorers = tuple((p.name, w) for p, w in profile.score)
    unknown = [
        *extra,
        *(f for f in filters if f not in FILTERS),
        *(s for s, _ in scorers if s not in SCORERS),
    ]
    if unknown:
        return None, f"baseline does not implement {', '.join(sorted(set(unknown)))}"
    config = {e["name"]: e.get("args") or {} for e in BUILTIN_PROFILES[name].get("pluginConfig", [])}
    if config.get("NodeAffinity", {}).get("addedAffinity"):
        return None, "baseline does not implement NodeAffinity's addedAffinity"
    plan = Plan(filters, scorers, kubernetes_version=profile.handle.kubernetes_version)
    strategy = config.get("NodeResourcesFit", {}).get("scoringStrategy", {})
    if strategy:
        resources = strategy.get("resources")
        shape = strategy.get("requestedToCapacityRatio", {}).get("shape", [])
        plan = Plan(
            filters,
            scorers,
            strategy.get("type", "LeastAllocated"),
            tuple((r["name"], r.get("weight") or 1) for r in resources) if resources else plan.fit_resources,
            # The API's shape scores are 0..10; the scheduler scales them to 0..100.
            tuple((p["utilization"], p["score"] * 10) for p in shape),
            kubernetes_version=plan.kubernetes_version,
        )
    balanced = config.get("NodeResourcesBalancedAllocation", {}).get("resources")
    if balanced:
        plan = Plan(
            plan.filters,
            plan.scorers,
            plan.strategy,
            plan.fit_resources,
            plan.shape,
            tuple(r["name"] for r in balanced),
            plan.kubernetes_version,
        )
    return plan, ""


@dataclass(slots=True)
class PlainNode:
    name: str
    unschedulable: bool
    labels: dict[str, str]
    taints: list[tuple[str, str, str]]
    allocatable: dict[str, int]
    max_pods: int
    requested: dict[str, int] = field(default_factory=dict)
    nonzero_cpu: int = 0
    nonzero_memory: int = 0
    pods: int = 0
    ports: dict[tuple[str, int, str], int] = field(default_factory=dict)
    images: frozenset[str] = frozenset()


Toleration = tuple[str, str, str, str]  # key, operator, value, effect


def _tolerates(tolerations: Sequence[Toleration], key: str, value: str, effect: str) -> bool:
    for t_key, operator, t_value, t_effect in tolerations:
        if t_effect and t_effect != effect:
            continue
        if t_key and t_key != key:
            continue
        if operator == "Exists" or t_value == value:
            return True
    return False


def _matches(labels: dict[str, str], key: str, operator: str, values: list[str]) -> bool:
    value = labels.get(key)
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None:
        return False
    try:
        number = int(value)
    except ValueError:
        return False
    return number > int(values[0]) if operator == "Gt" else number < int(values[0])


def as_deployments(pods: list[PodRequest], rng: random.Random) -> list[PodRequest]:
    """The ``spread`` workload: the same pods, grouped in order into deployments of 5-50 replicas, each
    labelled ``app=<deployment>`` and spread by its app label: across zones (DoNotSchedule, maxSkew 1) for
    most, across hosts (ScheduleAnyway) for many, and about a third keep one replica per host (required
    pod anti-affinity on ``kubernetes.io/hostname``). Node selectors of the individual pods are dropped, so
    a deployment's replicas ask for the same nodes."""
    out: list[PodRequest] = []
    index = 0
    deployment = 0
    while index < len(pods):
        replicas = rng.randint(5, 50)
        app = f"deploy-{deployment}"
        selector = LabelSelector(match_labels={"app": app})
        constraints: list[TopologySpreadConstraint] = []
        if rng.random() < 0.8:
            constraints.append(
                TopologySpreadConstraint(
                    max_skew=1,
                    topology_key=ZONE_KEY,
                    when_unsatisfiable="DoNotSchedule",
                    label_selector=selector,
                )
            )
        if rng.random() < 0.6:
            constraints.append(
                TopologySpreadConstraint(
                    max_skew=1,
                    topology_key=HOSTNAME_KEY,
                    when_unsatisfiable="ScheduleAnyway",
                    label_selector=selector,
                )
            )
        anti = None
        if rng.random() < 0.33:
            anti = PodAffinity(required=[PodAffinityTerm(label_selector=selector, topology_key=HOSTNAME_KEY)])
        for pod in pods[index : index + replicas]:
            update: dict[str, Any] = {
                "labels": {**pod.labels, "app": app},
                "workload": app,
                "node_selector": {},
                "topology_spread_constraints": constraints,
                "pod_anti_affinity": anti,
            }
            out.append(pod.model_copy(update=update))
        index += replicas
        deployment += 1
    return out


def inter_pod_terms(pod: PodRequest) -> bool:
    """Whether the pod has pod affinity or anti-affinity terms (the baseline implements InterPodAffinity only
    for clusters without any: its filter then passes every node and its PreScore skips, scoring 0)."""
    return any(
        terms is not None and (terms.required or terms.preferred)
        for terms in (pod.pod_affinity, pod.pod_anti_affinity)
    )


def _term_matches(
    node: PlainNode, expressions: Sequence[tuple[str, str, list[str]]], names: list[str]
) -> bool:
    """A node selector term: expressions on labels and metadata.name fields ANDed; an empty term matches
    nothing."""
    if not expressions and not names:
        return False
    return all(_matches(node.labels, *e) for e in expressions) and all(n == node.name for n in names)


def _field_names(term: Any) -> list[str]:
    """The ``metadata.name`` field requirements of a term as the single names they allow (In with one
    value, as the API allows for fields); anything else never matches."""
    names = []
    for requirement in term.match_fields:
        ok = requirement.operator == "In" and len(requirement.values) == 1
        names.append(requirement.values[0] if ok else "\0")
    return names


def _broken_linear(shape: Sequence[tuple[int, int]], utilization: int) -> int:
    for i, (point_u, point_s) in enumerate(shape):
        if utilization <= point_u:
            if i == 0:
                return point_s
            before_u, before_s = shape[i - 1]
            rise = (point_s - before_s) * (utilization - before_u)
            run = point_u - before_u
            # Go's integer division truncates toward zero.
            return before_s + (abs(rise) // run) * (1 if rise >= 0 else -1)
    return shape[-1][1]


@dataclass(slots=True)
class Verdict:
    decision: Decision
    rejected: dict[str, str] = field(default_factory=dict)
    scores: dict[str, dict[str, int]] = field(default_factory=dict)


class Baseline:
    """The profile's plugins as a loop over nodes, kept as simple as the plugins' specifications."""

    def __init__(self, cluster: Cluster, plan: Plan) -> None:
        self.plan = plan
        self.nodes: list[PlainNode] = []
        self.index: dict[str, int] = {}
        for spec, pods in zip(cluster.specs, cluster.existing, strict=True):
            node = PlainNode(
                name=spec.name,
                unschedulable=spec.unschedulable,
                labels=dict(spec.labels),
                taints=[(t.key, t.value, t.effect) for t in spec.taints],
                allocatable={k: v for k, v in spec.allocatable.items() if k != "pods"},
                max_pods=spec.allocatable.get("pods", spec.capacity.get("pods", 110)),
                images=frozenset(name for image in spec.images for name in image.names),
            )
            self.index[spec.name] = len(self.nodes)
            self.nodes.append(node)
            for pod in pods:
                self.place(pod, node)
        # ImageLocality's image states: each image's size (from the first node reporting it) and how many
        # nodes hold it.
        self.images: dict[str, tuple[int, int]] = {}
        for spec in cluster.specs:
            for name in {name for image in spec.images for name in image.names}:
                size = next(i.size_bytes for i in spec.images if name in i.names)
                known = self.images.get(name)
                self.images[name] = (known[0] if known else size, (known[1] if known else 0) + 1)

    def place(self, pod: PodRequest, node: PlainNode) -> None:
        if inter_pod_terms(pod):
            raise ValueError(f"{pod.uid}: the baseline does not implement InterPodAffinity's terms")
        for resource, amount in pod.effective_requests.items():
            node.requested[resource] = node.requested.get(resource, 0) + amount
        cpu, memory = nonzero_requests(pod)
        node.nonzero_cpu += cpu
        node.nonzero_memory += memory
        node.pods += 1
        for port in pod.host_ports:
            key = (port.protocol, port.port, port.host_ip)
            node.ports[key] = node.ports.get(key, 0) + 1

    def decide(self, pod: PodRequest, *, detail: bool = False) -> Verdict:
        plan = self.plan
        requests = {r: q for r, q in pod.effective_requests.items() if r != "pods"}
        wanted = {r: q for r, q in requests.items() if q > 0}
        cpu_nonzero, memory_nonzero = nonzero_requests(pod)
        tolerations = [(t.key, t.operator, t.value, t.effect) for t in pod.tolerations]
        prefer = [t for t in tolerations if t[3] in ("", "PreferNoSchedule")]
        tolerates_cordon = _tolerates(tolerations, CORDON_TAINT, "", "NoSchedule")
        selector = list(pod.node_selector.items())
        if inter_pod_terms(pod):
            raise ValueError(f"{pod.uid}: the baseline does not implement InterPodAffinity's terms")
        terms = [
            ([(e.key, e.operator, e.values) for e in term.match_expressions], _field_names(term))
            for term in pod.node_affinity
        ]
        preferred = [
            (
                p.weight,
                [(e.key, e.operator, e.values) for e in p.preference.match_expressions],
                _field_names(p.preference),
            )
            for p in pod.preferred_node_affinity
        ]
        containers = [*pod.init_containers, *pod.containers]
        images = [normalized_image_name(c.image) for c in containers]
        ports = [(p.protocol, p.port, p.host_ip) for p in pod.host_ports]

        def unschedulable(node: PlainNode) -> bool:
            return node.unschedulable and not tolerates_cordon

        def tainted(node: PlainNode) -> bool:
            return any(
                effect in ("NoSchedule", "NoExecute") and not _tolerates(tolerations, key, value, effect)
                for key, value, effect in node.taints
            )

        def unmatched(node: PlainNode) -> bool:
            labels = node.labels
            if any(labels.get(key) != value for key, value in selector):
                return True
            if not terms:
                return False
            # Terms are ORed, their requirements ANDed; an empty term matches nothing.
            return not any(_term_matches(node, expressions, names) for expressions, names in terms)

        def port_taken(node: PlainNode) -> bool:
            for protocol, port, ip in ports:
                for (used_protocol, used_port, used_ip), count in node.ports.items():
                    same = count > 0 and used_protocol == protocol and used_port == port
                    if same and (ip == "0.0.0.0" or used_ip in ("0.0.0.0", ip)):
                        return True
            return False

        def no_room(node: PlainNode) -> bool:
            if node.pods + 1 > node.max_pods:
                return True
            return any(q > node.allocatable.get(r, 0) - node.requested.get(r, 0) for r, q in wanted.items())

        def wrong_name(node: PlainNode) -> bool:
            return pod.node_name is not None and node.name != pod.node_name

        checks: dict[str, Callable[[PlainNode], bool]] = {
            "NodeUnschedulable": unschedulable,
            "NodeName": wrong_name,
            "InterPodAffinity": lambda node: False,
            "PodTopologySpread": lambda node: False,
            "TaintToleration": tainted,
            "NodeAffinity": unmatched,
            "NodeSelector": unmatched,
            "NodePorts": port_taken,
            "NodeResourcesFit": no_room,
        }
        chain = [(name, checks[name]) for name in plan.filters]

        def fit_score(node: PlainNode) -> int:
            node_score = weight_sum = 0
            for resource, weight in plan.fit_resources:
                if resource == "cpu":
                    q, a = node.nonzero_cpu + cpu_nonzero, node.allocatable.get("cpu", 0)
                elif resource == "memory":
                    q, a = node.nonzero_memory + memory_nonzero, node.allocatable.get("memory", 0)
                else:
                    request = requests.get(resource, 0)
                    if request == 0 and resource not in NATIVE:
                        continue  # an extended resource the pod does not ask for is not scored
                    q, a = node.requested.get(resource, 0) + request, node.allocatable.get(resource, 0)
                if a == 0:
                    continue
                if plan.strategy == "LeastAllocated":
                    score = 0 if q > a else (a - q) * 100 // a
                elif plan.strategy == "MostAllocated":
                    score = min(q, a) * 100 // a
                else:
                    score = _broken_linear(plan.shape, 100 if q > a else q * 100 // a)
                    if score <= 0:
                        continue
                node_score += score * weight
                weight_sum += weight
            if weight_sum == 0:
                return 0
            if plan.strategy == "RequestedToCapacityRatio":
                return (2 * node_score + weight_sum) // (2 * weight_sum)  # math.Round, exactly
            return node_score // weight_sum

        # BalancedAllocation's PreScore skips (1.34 on) a pod requesting none of its resources: 0 everywhere.
        balanced_skip = plan.kubernetes_version >= (1, 34) and not any(
            requests.get(r, 0) for r in plan.balanced_resources
        )

        def balance(node: PlainNode, with_pod: bool) -> int:
            fractions = []
            for resource in plan.balanced_resources:
                request = requests.get(resource, 0)
                if request == 0 and resource not in NATIVE:
                    continue
                a = node.allocatable.get(resource, 0)
                if a == 0:
                    continue
                fractions.append(min((node.requested.get(resource, 0) + request * with_pod) / a, 1.0))
            if len(fractions) == 2:
                std = abs((fractions[0] - fractions[1]) / 2)
            elif len(fractions) > 2:
                mean = sum(fractions) / len(fractions)
                std = math.sqrt(sum((f - mean) * (f - mean) for f in fractions) / len(fractions))
            else:
                std = 0.0
            return int((1 - std) * 100)

        def balanced_score(node: PlainNode) -> int:
            if balanced_skip:
                return 0
            if plan.kubernetes_version < (1, 36):
                return balance(node, True)
            # 1.36: the change in balance the pod causes, 50 + (50 + with - without) / 2 (never negative).
            return 50 + (50 + balance(node, True) - balance(node, False)) // 2

        def preferred_affinity(node: PlainNode) -> int:
            return sum(w for w, expressions, names in preferred if _term_matches(node, expressions, names))

        max_threshold = MAX_CONTAINER_THRESHOLD * len(containers)

        def image_locality(node: PlainNode) -> int:
            total = 0
            for name in images:
                if name in node.images:
                    size, holders = self.images[name]
                    total += int(float(size) * (float(holders) / float(len(self.nodes))))
            if max_threshold <= MIN_THRESHOLD:
                return 0
            total = min(max(total, MIN_THRESHOLD), max_threshold)
            return 100 * (total - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)

        def soft_taints(node: PlainNode) -> int:
            return sum(
                1
                for key, value, effect in node.taints
                if effect == "PreferNoSchedule" and not _tolerates(prefer, key, value, effect)
            )

        raw: dict[str, Callable[[PlainNode], int]] = {
            "TaintToleration": soft_taints,
            "NodeResourcesFit": fit_score,
            "NodeResourcesBalancedAllocation": balanced_score,
            "NodeAffinity": preferred_affinity,
            "InterPodAffinity": lambda node: 0,
            "PodTopologySpread": lambda node: 0,
            "ImageLocality": image_locality,
        }
        scorers = [(name, raw[name]) for name, _ in plan.scorers]

        feasible: list[PlainNode] = []
        per_node: list[list[int]] = []
        rejected: dict[str, str] = {}
        for node in self.nodes:
            for name, check in chain:
                if check(node):
                    if detail:
                        rejected[node.name] = name
                    break
            else:
                feasible.append(node)
                per_node.append([score(node) for _, score in scorers])
        if not feasible:
            return Verdict(Decision(None), rejected)

        # DefaultNormalizeScore over the feasible nodes: TaintToleration's reversed, NodeAffinity's not.
        for k, (name, _) in enumerate(plan.scorers):
            if name == "TaintToleration":
                highest = max(scores[k] for scores in per_node)
                for scores in per_node:
                    scores[k] = 100 if highest == 0 else 100 - 100 * scores[k] // highest
            elif name == "NodeAffinity":
                highest = max(scores[k] for scores in per_node)
                for scores in per_node:
                    scores[k] = 0 if highest == 0 else 100 * scores[k] // highest
        weights = [w for _, w in plan.scorers]
        totals = [sum(s * w for s, w in zip(scores, weights, strict=True)) for scores in per_node]
        best = max(totals)
        tied = sorted((node.name, k) for k, node in enumerate(feasible) if totals[k] == best)
        _, chosen = tied[zlib.crc32(pod.uid.encode()) % len(tied)]
        names = [name for name, _ in plan.scorers]
        decision = Decision(feasible[chosen].name, best, dict(zip(names, per_node[chosen], strict=True)))
        table = {}
        if detail:
            table = {
                n.name: dict(zip(names, s, strict=True)) for n, s in zip(feasible, per_node, strict=True)
            }
        return Verdict(decision, rejected, table)


def run_baseline(baseline: Baseline, pods: Sequence[PodRequest]) -> tuple[list[Decision], list[int]]:
    decisions: list[Decision] = []
    latencies: list[int] = []
    clock = time.perf_counter_ns
    for pod in pods:
        start = clock()
        decision = baseline.decide(pod).decision
        if decision.node is not None:
            baseline.place(pod, baseline.nodes[baseline.index[decision.node]])
        latencies.append(clock() - start)
        decisions.append(decision)
    return decisions, latencies


# ------------------------------------------------------------------------------------------ comparison


def _describe(decision: Decision) -> str:
    if decision.node is None:
        return "unschedulable"
    return f"{decision.node} total={decision.score} {decision.plugin_scores}"


def _explain_diff(explanation: Explanation, verdict: Verdict, limit: int = 5) -> list[str]:
    """Nodes on which the two implementations disagree: feasibility, or any plugin's score."""
    lines = []
    eyrie_feasible = set(explanation.feasible)
    base_feasible = set(verdict.scores)
    for name in sorted(eyrie_feasible ^ base_feasible)[:limit]:
        eyrie_says = "feasible" if name in eyrie_feasible else f"filtered {explanation.filtered.get(name)}"
        base_says = "feasible" if name in base_feasible else f"filtered by {verdict.rejected.get(name)}"
        lines.append(f"    {name}: eyrie {eyrie_says}; baseline {base_says}")
    differing = [
        name
        for name in sorted(eyrie_feasible & base_feasible)
        if {p: s[name] for p, s in explanation.scores.items()} != verdict.scores[name]
    ]
    for name in differing[:limit]:
        eyrie_scores = {p: s[name] for p, s in explanation.scores.items()}
        lines.append(f"    {name}: eyrie {eyrie_scores}; baseline {verdict.scores[name]}")
    lines.insert(
        0,
        f"    feasibility differs on {len(eyrie_feasible ^ base_feasible)} nodes, "
        f"scores on {len(differing)} of {len(eyrie_feasible & base_feasible)}",
    )
    return lines


def diagnose(
    cluster: Cluster, plan: Plan, pods: Sequence[PodRequest], eyrie: Sequence[Decision], limit: int = 3
) -> tuple[int, list[str]]:
    """Replay with the baseline placing every pod where eyrie did, so both see the same cluster before each
    decision: a disagreement here is one of its own, not the echo of an earlier one."""
    scheduler = build_scheduler(cluster)
    baseline = Baseline(cluster, plan)
    count, report = 0, []
    for i, (pod, expected) in enumerate(zip(pods, eyrie, strict=True)):
        verdict = baseline.decide(pod)
        if verdict.decision != expected:
            count += 1
            if count <= limit:
                explanation = scheduler.explain(pod, NOW)
                verdict = baseline.decide(pod, detail=True)
                report.append(f"  pod #{i} {pod.uid}")
                report.append(f"    eyrie:    {_describe(expected)}")
                report.append(f"    baseline: {_describe(verdict.decision)}")
                report.extend(_explain_diff(explanation, verdict))
                report.append(f"    pod: {pod.model_dump_json(exclude_defaults=True)}")
        placed = eyrie_decision(pod, arrive(scheduler, pod, NOW))
        assert placed == expected, f"eyrie is not deterministic at pod #{i}"
        if placed.node is not None:
            baseline.place(pod, baseline.nodes[baseline.index[placed.node]])
    return count, report


# ------------------------------------------------------------------------------------------ report


def _percentile(latencies_ns: Sequence[int], q: float) -> float:
    return float(np.percentile(np.asarray(latencies_ns, dtype=np.float64), q)) / 1e6


def _fill(scheduler: Scheduler) -> str:
    snapshot = scheduler.snapshot
    rows = snapshot.live_rows()
    shares = []
    for resource in ("cpu", "memory", GPU):
        column = snapshot.column.get(resource)
        if column is None:
            continue
        allocatable = int(snapshot.allocatable[rows, column].sum())
        shares.append(f"{resource} {100 * int(snapshot.requested[rows, column].sum()) / allocatable:.0f}%")
    return ", ".join(shares)


@dataclass(slots=True)
class Run:
    """One timed pass of the pod stream over a freshly built scheduler."""

    label: str
    decisions: list[Decision]
    latencies: list[int]
    cpu_ns: int
    """The thread's CPU time over the timed loop."""
    build_s: float
    fill_before: str
    fill_after: str
    snapshot_bytes: int
    usage_bytes: int
    filtered: tuple[float, dict[str, float]] = (0.0, {})
    """After the run, over a sample of its pods (untimed): mean feasible nodes, mean nodes rejected by
    reason."""

    @property
    def pods_per_s(self) -> float:
        return len(self.latencies) / (sum(self.latencies) / 1e9)

    @property
    def cpu_us_per_pod(self) -> float:
        return self.cpu_ns / 1e3 / max(len(self.latencies), 1)

    @property
    def placed(self) -> int:
        return sum(1 for d in self.decisions if d.node is not None)

    def row(self) -> str:
        latencies = self.latencies
        p50, p99 = _percentile(latencies, 50), _percentile(latencies, 99)
        return (
            f"  {self.label:<26}{len(latencies):>8}{self.pods_per_s:>12,.0f}{p50:>10.3f}{p99:>10.3f}"
            f"{max(latencies) / 1e6:>10.3f}{self.cpu_us_per_pod:>12,.1f}"
        )


def rejections(
    scheduler: Scheduler, pods: Sequence[PodRequest], now: float, sample: int = 20
) -> tuple[float, dict[str, float]]:
    """Dry cycles (`explain`) for a sample of the pods on the final cluster: how many nodes stay feasible,
    and how many each reason rejects, on average. Shows which filters the measured load brings into play."""
    chosen = pods[:: max(1, len(pods) // sample)][:sample]
    feasible = 0
    counts: dict[str, int] = {}
    for pod in chosen:
        explanation = scheduler.explain(pod.model_copy(update={"uid": f"{pod.uid}-explain"}), now)
        feasible += len(explanation.feasible)
        for reasons in explanation.filtered.values():
            for reason in reasons:
                counts[reason] = counts.get(reason, 0) + 1
    average = {reason: count / len(chosen) for reason, count in sorted(counts.items(), key=lambda x: -x[1])}
    return feasible / len(chosen), average


def timed_run(
    label: str, cluster: Cluster, pods: Sequence[PodRequest], load: Load | None, step: float
) -> Run:
    start = time.perf_counter()
    scheduler = build_scheduler(cluster)
    if load is not None:
        attach_load(scheduler, cluster, load)
    build_s = time.perf_counter() - start
    fill_before = _fill(scheduler)
    # The setup's objects are long-lived: keep the collector from walking them during the timed loop.
    gc.collect()
    gc.freeze()
    decisions, latencies, cpu_ns = run_eyrie(scheduler, pods, step)
    snapshot = scheduler.snapshot
    usage_bytes = snapshot.usage.nbytes() if snapshot.has_usage else 0
    # After the run: host ports the new pods use add per-node columns.
    fill_after, snapshot_bytes = _fill(scheduler), snapshot.memory_bytes()
    run = Run(
        label, decisions, latencies, cpu_ns, build_s, fill_before, fill_after, snapshot_bytes, usage_bytes
    )
    if load is not None:
        run.filtered = rejections(scheduler, pods, NOW + len(pods) * step)
    del scheduler
    gc.unfreeze()
    gc.collect()
    return run


def profile_run(
    cluster: Cluster, pods: Sequence[PodRequest], load: Load | None, step: float, top: int
) -> str:
    """cProfile over a fresh run (untimed for the figures), sorted by cumulative time."""
    import cProfile
    import io
    import pstats

    scheduler = build_scheduler(cluster)
    if load is not None:
        attach_load(scheduler, cluster, load)
    profiler = cProfile.Profile()
    profiler.enable()
    run_eyrie(scheduler, pods, step)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--profile", default="default", choices=sorted(BUILTIN_PROFILES))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--baseline-pods", type=int, default=None, help="pods the baseline decides (default min(pods, 2000))"
    )
    parser.add_argument(
        "--cprofile", type=int, default=0, help="after the figures, profile a run of the profile; print top N"
    )
    parser.add_argument(
        "--workload",
        choices=("mixed", "spread"),
        default="mixed",
        help="spread: the pods as deployments of 5-50 replicas with topology spread (zone, host) and "
        "required anti-affinity by app label",
    )
    args = parser.parse_args()
    baseline_pods = min(args.pods, args.baseline_pods if args.baseline_pods is not None else 2000)
    load_aware = args.profile in LOAD_PROFILES

    started = time.perf_counter()
    pod_rng = random.Random(f"{args.seed}-pods")
    pods = [make_pod(i, pod_rng, args.profile) for i in range(args.pods)]
    if args.workload == "spread":
        pods = as_deployments(pods, random.Random(f"{args.seed}-deployments"))
    cluster = make_cluster(args.nodes, pods, args.seed)
    load: Load | None = None
    step = 0.0
    if load_aware:
        pods, workload_portraits = assign_workloads(pods, args.seed)
        load = make_load(cluster, workload_portraits, args.seed)
        step = ARRIVAL_STEP
    generated = time.perf_counter()

    main_run = timed_run(f"eyrie {args.profile}" if load_aware else "eyrie", cluster, pods, load, step)
    eyrie = main_run.decisions
    setup_s = generated - started + main_run.build_s

    # Load-aware profiles: `default` on the same nodes, pods and measured load (the ratio's baseline), and
    # on a snapshot without measured load (what `--profile default` measures).
    default_runs: list[Run] = []
    if args.profile.startswith("gpu-share"):
        # No baseline implements per-card sharing: the reference is `default` on the same nodes and pods,
        # each GPU request in whole nvidia.com/gpu, as a profile without card accounting counts it.
        as_default = [whole_cards(p).model_copy(update={"scheduler_name": "default"}) for p in pods]
        default_runs.append(timed_run("eyrie default, same pods", cluster, as_default, None, 0.0))
    if load_aware:
        as_default = [p.model_copy(update={"scheduler_name": "default"}) for p in pods]
        default_runs.append(timed_run("eyrie default, same load", cluster, as_default, load, step))
        default_runs.append(timed_run("eyrie default, no load", cluster, as_default, None, 0.0))

    plan, unsupported = make_plan(args.profile)
    on_nodes = (pod for node_pods in cluster.existing for pod in node_pods)
    if plan is not None and any(inter_pod_terms(p) for p in (*pods[:baseline_pods], *on_nodes)):
        plan, unsupported = None, "baseline does not implement InterPodAffinity's terms (pods with them)"
    if plan is not None and any(p.topology_spread_constraints for p in pods[:baseline_pods]):
        plan, unsupported = None, "baseline does not implement PodTopologySpread (pods with constraints)"
    base: list[Decision] = []
    base_latencies: list[int] = []
    base_setup_s = 0.0
    if plan is not None and baseline_pods:
        start = time.perf_counter()
        baseline = Baseline(cluster, plan)
        base_setup_s = time.perf_counter() - start
        gc.collect()
        gc.freeze()
        base, base_latencies = run_baseline(baseline, pods[:baseline_pods])
        del baseline
    compared = list(zip(eyrie, base, strict=False))
    mismatches = [(i, e, b) for i, (e, b) in enumerate(compared) if e != b]
    decisions_equal = None if plan is None or not baseline_pods else not mismatches
    node_mismatches = sum(1 for _, e, b in mismatches if e.node != b.node)

    pods_per_s = main_run.pods_per_s
    latencies = main_run.latencies
    base_per_s = len(base) / (sum(base_latencies) / 1e9) if base else None
    reference = default_runs[0] if default_runs else None
    if reference is not None:
        base_per_s = reference.pods_per_s
    placed = main_run.placed
    print(
        f"placement benchmark: {args.nodes} nodes, {args.pods} pods, profile {args.profile}, "
        f"workload {args.workload}, seed {args.seed}"
    )
    low, high = cluster.fill
    snapshot_text = (
        f"{main_run.snapshot_bytes / args.nodes:,.0f} bytes/node ({main_run.snapshot_bytes / 2**20:.1f} MiB)"
    )
    if main_run.usage_bytes:
        snapshot_text += f", measured load {main_run.usage_bytes / args.nodes:,.0f} bytes/node"
    lines = [
        (
            "cluster fill",
            f"{main_run.fill_before}  →  {main_run.fill_after}  "
            f"(existing usage drawn from {low:.0%}-{high:.0%})",
        ),
        (
            "setup",
            f"{setup_s:.2f} s (generate {generated - started:.2f} s, snapshot {main_run.build_s:.2f} s; "
            f"baseline state {base_setup_s:.2f} s)",
        ),
        ("snapshot", snapshot_text),
        ("placed", f"{placed} of {args.pods} ({args.pods - placed} unschedulable)"),
    ]
    if load is not None:
        with_portrait = sum(1 for p in pods if p.workload in load.workloads)
        lines.insert(
            1,
            (
                "measured load",
                f"windows and portraits on {len(load.windows)} nodes, "
                f"{len(load.workloads)} workload portraits; "
                f"{with_portrait} pods with a workload portrait, {args.pods - with_portrait} cold start; "
                f"pods arrive every {ARRIVAL_STEP * 1000:g} ms",
            ),
        )
    for label, text in lines:
        print(f"  {label:<19}{text}")
    for run in default_runs:
        print(f"  {'placed':<19}{run.placed} of {args.pods} ({run.label.removeprefix('eyrie ')})")
    for run in (main_run, *default_runs[:1]):
        if run.filtered[1] or run.filtered[0]:
            feasible, by_reason = run.filtered
            top = "; ".join(f"{reason} {count:,.0f}" for reason, count in list(by_reason.items())[:5])
            name = run.label.removeprefix("eyrie ")
            print(f"  {'filters at end':<19}{name}: {feasible:,.0f} feasible nodes; rejected: {top}")
    print()
    print(
        f"  {'path':<26}{'pods':>8}{'pods/s':>12}{'p50 ms':>10}{'p99 ms':>10}{'max ms':>10}{'cpu µs/pod':>12}"
    )
    for run in (main_run, *default_runs):
        print(run.row())
    if reference is not None:
        ratio = pods_per_s / reference.pods_per_s
        print(f"  ratio {ratio:,.2f}x ({args.profile} against default on the same load)")
        met = "met" if pods_per_s >= TARGET_LOAD_PODS_PER_S else "NOT met"
        print(f"  target {TARGET_LOAD_PODS_PER_S:,.0f} pods/s at {args.nodes} nodes: {met}")
        print(
            f"  per-node baseline skipped: the loop implements default/binpack only ({unsupported}); "
            "no decisions_equal check for this profile"
        )
    elif base_per_s is not None:
        print(
            f"  {'baseline':<26}{len(base):>8}{base_per_s:>12,.0f}{_percentile(base_latencies, 50):>10.3f}"
            f"{_percentile(base_latencies, 99):>10.3f}{max(base_latencies) / 1e6:>10.3f}"
        )
        print(f"  ratio {pods_per_s / base_per_s:,.1f}x")
    else:
        print(f"  baseline skipped: {unsupported or 'no pods'}")
    print()
    if plan is not None and base:
        print(
            f"  decisions_equal: {str(decisions_equal).lower()} over {len(compared)} pods "
            f"({len(mismatches)} differ, {node_mismatches} on the node itself)"
        )
        for i, e, b in mismatches[:5]:
            print(f"  pod #{i} {pods[i].uid}\n    eyrie:    {_describe(e)}\n    baseline: {_describe(b)}")
        if mismatches:
            independent, report = diagnose(cluster, plan, pods[: len(compared)], eyrie[: len(compared)])
            print(f"  with the baseline following eyrie's placements, {independent} decisions differ:")
            print("\n".join(report))
    if args.cprofile:
        print(profile_run(cluster, pods, load, step, args.cprofile))
    figures: dict[str, Any] = {
        "nodes": args.nodes,
        "pods": args.pods,
        "profile": args.profile,
        "workload": args.workload,
        "cores": os.cpu_count(),
        "pods_per_s": round(pods_per_s, 1),
        "p50_decision_ms": round(_percentile(latencies, 50), 3),
        "p99_decision_ms": round(_percentile(latencies, 99), 3),
        "cpu_us_per_pod": round(main_run.cpu_us_per_pod, 1),
        "baseline": "default" if reference is not None else ("per-node loop" if base else None),
        "baseline_pods_per_s": round(base_per_s, 1) if base_per_s is not None else None,
        "ratio": round(pods_per_s / base_per_s, 2) if base_per_s is not None else None,
        "decisions_equal": decisions_equal,
        "snapshot_bytes_per_node": round(main_run.snapshot_bytes / args.nodes, 1),
        "setup_s": round(setup_s, 2),
    }
    if load_aware:
        same_load, no_load = default_runs
        figures.update(
            {
                "placed": placed,
                "default_placed": same_load.placed,
                "default_p99_decision_ms": round(_percentile(same_load.latencies, 99), 3),
                "default_no_load_pods_per_s": round(no_load.pods_per_s, 1),
                "default_no_load_p99_decision_ms": round(_percentile(no_load.latencies, 99), 3),
                "usage_bytes_per_node": round(main_run.usage_bytes / args.nodes, 1),
                "target_pods_per_s": TARGET_LOAD_PODS_PER_S,
                "target_met": pods_per_s >= TARGET_LOAD_PODS_PER_S,
                "per_node_baseline": "default/binpack only",
            }
        )
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
