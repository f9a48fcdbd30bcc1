"""Workloads for ``make demo``: a seeded synthetic event log shaped like the Alibaba GPU 2023 "openb" trace,
and a prefix of the real trace.

`generate_gpu_like_log` needs no input files: the node mix, the pod shapes and the pod durations below were
measured once from ``../shared/traces/alibaba_gpu_v2023`` (alibaba/clusterdata @ 7a6c496e,
``cluster-trace-gpu-v2023/csv``) and are hard-coded, so the demo runs where the traces are absent. Nodes and
pods map to eyrie's models exactly as `evaluation.traces.alibaba_gpu2023` maps the real rows (same resource
names, ``gpu-model`` node label, ``qos`` / ``gpu-milli`` pod labels, limits for Guaranteed pods), so policies
read the synthetic log and a converted one alike, except that pods here also carry a priority derived from
their QoS (the converter leaves it 0).

Time: the trace's own creation times make no load. They span 149 days, 99.7 % of the pods arrive in the
last quarter of it, and at most 56 pods (0.5 % of the cluster's cpu) are ever alive at once; the FGD
simulator the trace was published for ignores them and places the pods as one arrival sequence. So arrivals
here are a Poisson process whose rate grows with the node count, while each pod keeps a lifetime drawn from
the trace's lifetimes; what is alive at a time is then a load comparable to the trace's all-at-once demand
(which asks for 68 % of the cluster's cpu and 120 % of its GPUs). The log ends at the last arrival: pods
whose lifetime reaches past it stay alive (no ``PodDeleted``), as in a recorded window of a live cluster.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from evaluation.traces.alibaba_gpu2023 import (
    DEFAULT_PODS,
    GPU_MODEL_LABEL,
    GPU_RESOURCE,
    MAX_PODS_PER_NODE,
    iter_alibaba_gpu2023,
)
from evaluation.traces.common import Report, TraceEvent, write_log
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput
from schemas.gpu import MILLI_PER_CARD, GpuCards, GpuRequest
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from schemas.quantity import Resources

__all__ = [
    "NODE_MIX",
    "NODE_SECONDS_PER_ARRIVAL",
    "POD_LIFETIME_QUANTILES",
    "POD_SHAPES",
    "QOS_PRIORITY",
    "SAMPLE_INTERVAL_S",
    "NodeType",
    "PodShape",
    "WorkloadInfo",
    "generate_gpu_like_log",
    "slice_gpu_trace",
]

_MIB = 1 << 20


class NodeType(NamedTuple):
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # "" for a CPU-only node
    nodes: int  # nodes of this type in the trace


# Every node type of openb_node_list_all_node.csv with its node count: 1,523 nodes, 1,213 with GPUs, 6,212
# GPUs, grouped by (cpu_milli, memory_mib, gpu, model).
# G1 is named by the trace's README but no node has it.
NODE_MIX: tuple[NodeType, ...] = (
    NodeType(96000, 393216, 8, "G2", 549),
    NodeType(104000, 524288, 2, "T4", 387),
    NodeType(32000, 262144, 0, "", 129),
    NodeType(16000, 122880, 2, "P100", 107),
    NodeType(96000, 524288, 0, "", 59),
    NodeType(128000, 786432, 8, "G3", 39),
    NodeType(96000, 393216, 0, "", 30),
    NodeType(32000, 131072, 4, "V100M16", 28),
    NodeType(32000, 131072, 0, "", 23),
    NodeType(64000, 262144, 2, "P100", 22),
    NodeType(64000, 524288, 0, "", 22),
    NodeType(96000, 786432, 8, "V100M32", 21),
    NodeType(104000, 524288, 0, "", 20),
    NodeType(8000, 32768, 1, "V100M16", 19),
    NodeType(96000, 393216, 4, "T4", 17),
    NodeType(32000, 65536, 0, "", 10),
    NodeType(48000, 376832, 4, "V100M32", 9),
    NodeType(64000, 262144, 0, "", 8),
    NodeType(64000, 262144, 8, "V100M16", 7),
    NodeType(64000, 131072, 0, "", 4),
    NodeType(8000, 61440, 1, "P100", 3),
    NodeType(104000, 786432, 0, "", 3),
    NodeType(8000, 61440, 2, "P100", 2),
    NodeType(128000, 1048576, 1, "A10", 2),
    NodeType(82000, 344064, 8, "V100M16", 1),
    NodeType(96000, 786432, 0, "", 1),
    NodeType(104000, 196608, 0, "", 1),
)


class PodShape(NamedTuple):
    cpu_milli: int
    memory_mib: int
    gpus: int  # num_gpu: whole cards requested
    gpu_milli: int  # thousandths of one card used; < 1000 with gpus == 1 is a shared (fractional) GPU
    qos: str  # LS, BE, Burstable or Guaranteed
    pods: int  # pods of this shape in the trace


# The pod shapes of openb_pod_list_default.csv (8,152 pods, all with an empty gpu_spec) that at least 5 pods
# share, with their pod counts: 87 of its 162 (cpu, memory, num_gpu, gpu_milli, qos) combinations, 8,018
# pods (98.4 %). Shares kept: CPU-only 13.2 % (trace 13.3 %), one whole GPU 48.2 % (48.0 %), a fraction
# of one GPU 37.9 % (37.8 %), 2/4/8 GPUs 0.65 % (0.92 %: the rarest multi-GPU shapes fall under the cut).
POD_SHAPES: tuple[PodShape, ...] = (
    PodShape(3152, 5600, 1, 810, "BE", 1047),
    PodShape(11300, 49152, 1, 1000, "LS", 857),
    PodShape(11400, 48128, 1, 1000, "LS", 534),
    PodShape(3152, 5600, 1, 1000, "BE", 470),
    PodShape(11908, 47104, 1, 470, "LS", 388),
    PodShape(12500, 57344, 0, 0, "LS", 364),
    PodShape(8000, 30517, 1, 470, "BE", 358),
    PodShape(32000, 49152, 0, 0, "BE", 284),
    PodShape(18708, 64512, 1, 1000, "LS", 255),
    PodShape(11908, 47104, 1, 650, "LS", 237),
    PodShape(9810, 41560, 1, 1000, "LS", 195),
    PodShape(8000, 30517, 0, 0, "BE", 163),
    PodShape(15700, 58368, 1, 1000, "LS", 158),
    PodShape(11908, 47104, 1, 1000, "BE", 153),
    PodShape(15400, 51200, 0, 0, "LS", 120),
    PodShape(4000, 22888, 1, 320, "BE", 111),
    PodShape(16000, 32768, 1, 1000, "LS", 108),
    PodShape(4000, 24576, 1, 1000, "LS", 104),
    PodShape(8000, 16384, 1, 1000, "LS", 101),
    PodShape(12000, 24576, 1, 1000, "LS", 101),
    PodShape(12000, 16384, 1, 1000, "LS", 99),
    PodShape(16500, 51200, 0, 0, "LS", 95),
    PodShape(14200, 58368, 1, 1000, "LS", 93),
    PodShape(4000, 30517, 1, 230, "BE", 84),
    PodShape(24200, 93184, 1, 1000, "LS", 84),
    PodShape(4000, 15258, 1, 320, "BE", 78),
    PodShape(3152, 5600, 1, 590, "BE", 75),
    PodShape(4152, 10600, 1, 550, "BE", 72),
    PodShape(8000, 30517, 1, 320, "BE", 72),
    PodShape(11400, 77824, 1, 1000, "LS", 65),
    PodShape(4000, 15258, 1, 160, "BE", 53),
    PodShape(12000, 24576, 1, 1000, "Burstable", 52),
    PodShape(6000, 6144, 1, 460, "LS", 51),
    PodShape(11900, 77824, 1, 1000, "LS", 51),
    PodShape(8000, 32768, 1, 1000, "LS", 50),
    PodShape(4152, 10600, 1, 370, "BE", 45),
    PodShape(12000, 15360, 1, 1000, "LS", 44),
    PodShape(4000, 30517, 1, 320, "BE", 43),
    PodShape(8200, 33792, 1, 1000, "LS", 41),
    PodShape(4000, 31250, 1, 1000, "LS", 40),
    PodShape(15200, 80896, 1, 1000, "LS", 36),
    PodShape(16000, 65536, 1, 1000, "LS", 33),
    PodShape(4152, 10600, 1, 810, "BE", 31),
    PodShape(6000, 12288, 1, 460, "LS", 29),
    PodShape(16400, 125952, 1, 1000, "LS", 27),
    PodShape(4000, 22888, 1, 230, "BE", 26),
    PodShape(4000, 15258, 1, 220, "BE", 24),
    PodShape(1000, 2048, 1, 320, "BE", 22),
    PodShape(6000, 22888, 1, 160, "BE", 20),
    PodShape(8000, 30517, 1, 220, "BE", 19),
    PodShape(4000, 22888, 1, 480, "BE", 18),
    PodShape(6000, 18432, 1, 460, "LS", 18),
    PodShape(8000, 30517, 1, 230, "BE", 18),
    PodShape(64200, 263168, 8, 1000, "LS", 18),
    PodShape(88000, 327680, 8, 1000, "Burstable", 18),
    PodShape(11300, 37888, 1, 1000, "LS", 16),
    PodShape(1000, 6144, 1, 1000, "LS", 15),
    PodShape(4000, 15258, 1, 230, "BE", 12),
    PodShape(8000, 30517, 1, 650, "BE", 12),
    PodShape(4000, 22888, 1, 220, "BE", 11),
    PodShape(7000, 30000, 1, 1000, "Burstable", 11),
    PodShape(8000, 15625, 0, 0, "LS", 11),
    PodShape(11400, 57344, 0, 0, "LS", 11),
    PodShape(4000, 22888, 1, 110, "BE", 9),
    PodShape(6000, 8192, 1, 460, "LS", 9),
    PodShape(15400, 90112, 1, 1000, "LS", 9),
    PodShape(32200, 132096, 4, 1000, "LS", 9),
    PodShape(4000, 16384, 1, 1000, "LS", 8),
    PodShape(4000, 30517, 1, 220, "BE", 8),
    PodShape(12000, 32768, 1, 1000, "LS", 8),
    PodShape(12000, 47104, 1, 1000, "Burstable", 8),
    PodShape(14900, 73728, 1, 1000, "LS", 8),
    PodShape(16000, 31250, 0, 0, "LS", 8),
    PodShape(4000, 15258, 1, 110, "BE", 7),
    PodShape(4000, 22888, 1, 330, "BE", 7),
    PodShape(6000, 16384, 1, 460, "LS", 7),
    PodShape(16200, 66560, 2, 1000, "LS", 7),
    PodShape(4000, 22888, 1, 350, "BE", 6),
    PodShape(6000, 23552, 1, 460, "LS", 6),
    PodShape(6000, 32768, 1, 1000, "LS", 6),
    PodShape(9400, 52224, 1, 1000, "LS", 6),
    PodShape(12000, 18432, 1, 460, "LS", 6),
    PodShape(2000, 16384, 1, 1000, "LS", 5),
    PodShape(4000, 32768, 1, 1000, "LS", 5),
    PodShape(8000, 31250, 0, 0, "LS", 5),
    PodShape(8000, 32768, 1, 1000, "BE", 5),
    PodShape(12000, 24576, 1, 1000, "Guaranteed", 5),
)

# (quantile, seconds) of deletion_time - creation_time over openb_pod_list_default.csv. The trace's 0 (one
# pod deleted the second it was created) is 1 here, so that every deletion follows its creation. The top is
# long only because pods still running when the trace ends were "deleted" at its end.
POD_LIFETIME_QUANTILES: tuple[tuple[float, float], ...] = (
    (0.00, 1.0),
    (0.05, 48.0),
    (0.10, 80.0),
    (0.15, 112.0),
    (0.20, 146.0),
    (0.25, 167.0),
    (0.30, 202.0),
    (0.35, 244.0),
    (0.40, 301.0),
    (0.45, 406.0),
    (0.50, 540.0),
    (0.55, 691.0),
    (0.60, 883.0),
    (0.65, 1122.0),
    (0.70, 1422.0),
    (0.75, 1971.0),
    (0.80, 2700.0),
    (0.85, 4005.0),
    (0.90, 6574.0),
    (0.95, 16377.0),
    (0.98, 40752.0),
    (0.99, 93426.0),
    (1.00, 12537496.0),
)

QOS_PRIORITY: dict[str, int] = {"LS": 100, "Guaranteed": 100, "Burstable": 50, "BE": 0}
"""The trace has no priority column; its qos column is Alibaba's service class, latency-sensitive (LS) over
best-effort (BE), with the Kubernetes classes in between. PrioritySort and preemption read this."""

NODE_SECONDS_PER_ARRIVAL = 300.0
"""One pod arrives per this many node-seconds (200 nodes: one every 1.5 s). With the trace's lifetimes, 2,000
pods on 200 nodes arrive over about 50 minutes and end with about 35 % of them alive, asking for about 80 %
of the GPUs and 45 % of the cpu: busy enough that fragmentation and load matter, not so full that most pods
are unschedulable."""

SAMPLE_INTERVAL_S = 600.0
"""Seconds between two node-level samples of one node: a few per node over a default-sized log, and never
more than one window (1 h) apart, so the load-aware plugins always have data."""

# The trace records no usage, so node samples are a background load: per node a level drawn uniformly from
# these fractions of its capacity, then ±10 % (one standard deviation) per sample. Different levels per
# node give the load-aware plugins something to tell apart.
_CPU_LEVEL = (0.05, 0.35)
_MEMORY_LEVEL = (0.10, 0.40)
_SAMPLE_NOISE = 0.10

# Order of events sharing a ts: nodes exist before anything names them, a deletion frees room before a new
# pod asks for it (as the converter does), and a sample reaches the windows before the pod it may affect.
_RANK_NODE, _RANK_DELETE, _RANK_SAMPLE, _RANK_CREATE = range(4)

# (ts, rank, sequence, key, model, topic): sorting the tuple's first three fields gives the log's order.
_Ranked = tuple[float, int, int, str, NodeEvent | PodRequest | PodDeleted | MetricSample, str]


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """What a workload log holds: event counts and the ts of its last event."""

    nodes: int
    pods: int
    deletions: int
    samples: int
    span_seconds: float


# --- models, mapped as evaluation.traces.alibaba_gpu2023 maps trace rows ----------------------------------


def _node_spec(name: str, kind: NodeType) -> NodeSpec:
    capacity = Resources(cpu=kind.cpu_milli, memory=kind.memory_mib * _MIB, pods=MAX_PODS_PER_NODE)
    if kind.gpus:
        capacity[GPU_RESOURCE] = kind.gpus
    labels = {GPU_MODEL_LABEL: kind.model} if kind.model else {}
    gpus = GpuCards(count=kind.gpus, model=kind.model) if kind.gpus else None
    return NodeSpec(name=name, capacity=capacity, labels=labels, gpus=gpus)


def _pod_request(uid: str, shape: PodShape, created: float) -> PodRequest:
    requests = Resources(cpu=shape.cpu_milli, memory=shape.memory_mib * _MIB)
    labels: dict[str, str] = {}
    gpu: GpuRequest | None = None
    if shape.gpus:
        if shape.gpus == 1 and 0 < shape.gpu_milli < MILLI_PER_CARD:
            # A share of one card, as the converter maps it: no whole nvidia.com/gpu, the share in `gpu`
            # and, for analysis, in a label.
            labels["gpu-milli"] = str(shape.gpu_milli)
            gpu = GpuRequest(milli=shape.gpu_milli, count=1)
        else:
            requests[GPU_RESOURCE] = shape.gpus
            gpu = GpuRequest(milli=MILLI_PER_CARD, count=shape.gpus)
    labels["qos"] = shape.qos
    container: dict[str, Resources] = {"requests": requests}
    if shape.qos == "Guaranteed":
        container["limits"] = Resources(requests)
    return PodRequest(
        uid=uid,
        name=uid,
        containers=[container],
        labels=labels,
        priority=QOS_PRIORITY[shape.qos],
        created_at=created,
        gpu=gpu,
    )


# --- sampling ------------------------------------------------------------------------------------------


def _apportion(weights: Sequence[int], total: int) -> list[int]:
    """Largest remainders: counts summing to `total` in the weights' proportions. Exact shares rather than
    draws, so a 200-node demo cluster has the trace's mix and not a lucky or unlucky sample of it."""
    whole = sum(weights)
    quotas = [total * weight / whole for weight in weights]
    counts = [math.floor(quota) for quota in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda index: (counts[index] - quotas[index], index))
    for index in by_remainder[: total - sum(counts)]:
        counts[index] += 1
    return counts


def _node_types(count: int, rng: np.random.Generator) -> list[NodeType]:
    kinds = [
        kind
        for kind, n in zip(NODE_MIX, _apportion([kind.nodes for kind in NODE_MIX], count), strict=True)
        for _ in range(n)
    ]
    # Shuffled so that a node's name says nothing about its type (and a name-ordered tie-break is fair).
    order = rng.permutation(len(kinds))
    return [kinds[index] for index in order.tolist()]


def _lifetimes(uniform: np.ndarray) -> np.ndarray:
    quantiles = np.array([q for q, _ in POD_LIFETIME_QUANTILES])
    log_seconds = np.log([seconds for _, seconds in POD_LIFETIME_QUANTILES])
    # Log-linear between the measured quantiles: lifetimes span five orders of magnitude.
    result: np.ndarray = np.exp(np.interp(uniform, quantiles, log_seconds))
    return result


def _ms(seconds: float) -> float:
    # Millisecond timestamps keep the log readable and byte-stable; nothing downstream resolves finer.
    return round(seconds, 3)


def _pod_events(count: int, mean_gap: float, rng: np.random.Generator) -> tuple[list[_Ranked], float, int]:
    weights = np.array([shape.pods for shape in POD_SHAPES], dtype=np.float64)
    shapes = rng.choice(len(POD_SHAPES), size=count, p=weights / weights.sum())
    arrivals = np.cumsum(rng.exponential(mean_gap, size=count))
    lifetimes = _lifetimes(rng.random(count))
    width = max(5, len(str(count - 1)))
    horizon = _ms(float(arrivals[-1])) if count else 0.0
    events: list[_Ranked] = []
    deletions = 0
    for index, (shape, arrival, lifetime) in enumerate(
        zip(shapes.tolist(), arrivals.tolist(), lifetimes.tolist(), strict=True)
    ):
        uid = f"pod-{index:0{width}d}"
        created = _ms(arrival)
        events.append(
            (created, _RANK_CREATE, index, uid, _pod_request(uid, POD_SHAPES[shape], created), "pod-requests")
        )
        deleted = _ms(arrival + lifetime)
        if created < deleted <= horizon:
            events.append(
                (deleted, _RANK_DELETE, index, uid, PodDeleted(uid=uid, ts=deleted), "pod-requests")
            )
            deletions += 1
    return events, horizon, deletions


def _sample_events(specs: Sequence[NodeSpec], horizon: float, rng: np.random.Generator) -> list[_Ranked]:
    events: list[_Ranked] = []
    sequence = 0
    for spec in specs:
        cpu_level = rng.uniform(*_CPU_LEVEL)
        memory_level = rng.uniform(*_MEMORY_LEVEL)
        # A sample at 0 so that the first pods already see load; then one per interval from a random phase,
        # so that the nodes do not all report in the same instant.
        phase = rng.uniform(0.0, SAMPLE_INTERVAL_S)
        times = [0.0, *np.arange(phase, horizon, SAMPLE_INTERVAL_S).tolist()] if horizon > 0 else [0.0]
        noise = rng.normal(1.0, _SAMPLE_NOISE, size=(len(times), 2)).clip(0.0, None)
        for when, (cpu_noise, memory_noise) in zip(times, noise.tolist(), strict=True):
            cpu = min(1.0, cpu_level * cpu_noise) * spec.capacity["cpu"] / 1000
            memory = min(1.0, memory_level * memory_noise) * spec.capacity["memory"]
            ts = _ms(when)
            sample = MetricSample(
                ts=ts, node=spec.name, values={"cpu": round(cpu, 3), "memory": float(round(memory))}
            )
            events.append((ts, _RANK_SAMPLE, sequence, spec.name, sample, "metrics"))
            sequence += 1
    return events


def _check_count(value: int, field: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidInput(f"must be a whole number ≥ 0, got {value!r}", field=field)


def generate_gpu_like_log(
    path: str | Path,
    *,
    nodes: int = 200,
    pods: int = 2000,
    seed: int = 42,
    metrics: bool = True,
    mean_interarrival_s: float | None = None,
) -> WorkloadInfo:
    """Write a seeded event log shaped like the openb trace (see the module docstring) to `path`.

    Node upserts at ts 0 (``node-0000``...), in the trace's node mix; `pods` pod requests (``pod-00000``...,
    in creation order) with the trace's request shapes, arriving as a Poisson process, one per
    `mean_interarrival_s` seconds on average (default ``NODE_SECONDS_PER_ARRIVAL / nodes``); a
    ``PodDeleted`` at the end of each lifetime that ends within the log; with `metrics`, node-level samples
    (cpu in cores, memory in bytes) at 0 and every ``SAMPLE_INTERVAL_S``. The same arguments give the same
    bytes. Nodes, pods and samples draw from independent streams of the seed, so the nodes of a seed are the
    same whatever `pods` is.
    """
    _check_count(nodes, "nodes")
    _check_count(pods, "pods")
    _check_count(seed, "seed")
    if mean_interarrival_s is None:
        mean_gap = NODE_SECONDS_PER_ARRIVAL / max(nodes, 1)
    elif not math.isfinite(mean_interarrival_s) or mean_interarrival_s <= 0:
        raise InvalidInput(
            f"must be a positive number, got {mean_interarrival_s!r}", field="mean_interarrival_s"
        )
    else:
        mean_gap = mean_interarrival_s
    node_rng, pod_rng, sample_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(3)
    )

    width = max(4, len(str(nodes - 1)))
    kinds = _node_types(nodes, node_rng)
    specs = [_node_spec(f"node-{index:0{width}d}", kind) for index, kind in enumerate(kinds)]
    ranked: list[_Ranked] = [
        (0.0, _RANK_NODE, index, spec.name, NodeEvent(type="upsert", node=spec, ts=0.0), "node-events")
        for index, spec in enumerate(specs)
    ]
    pod_events, horizon, deletions = _pod_events(pods, mean_gap, pod_rng)
    ranked.extend(pod_events)
    samples = _sample_events(specs, horizon, sample_rng) if metrics else []
    ranked.extend(samples)
    ranked.sort(key=lambda event: event[:3])

    def events() -> Iterator[TraceEvent]:
        for ts, _, _, key, model, topic in ranked:
            yield ts, topic, key, model

    write_log(events(), path, Report(), kind="gpu-like", source="synthetic")
    span = ranked[-1][0] if ranked else 0.0
    return WorkloadInfo(
        nodes=len(specs), pods=pods, deletions=deletions, samples=len(samples), span_seconds=span
    )


# --- a prefix of the real trace ------------------------------------------------------------------------


def _spread_pick(count: int, total: int) -> set[int]:
    # Evenly spaced over the file: the node list is grouped (its first 230 rows are almost all CPU-only),
    # so a plain prefix would give a cluster without GPUs.
    return {index * total // count for index in range(count)}


class _Slice:
    """Filters the converter's event stream down to some nodes and the first pods, counting as it goes."""

    def __init__(self, pods: int, nodes: int | None) -> None:
        self.pods_wanted = pods
        self.nodes_wanted = nodes
        self.nodes = 0
        self.pods = 0
        self.deletions = 0
        self.last_ts = 0.0

    def _emit(self, event: TraceEvent) -> TraceEvent:
        self.last_ts = event[0]
        return event

    def filter(self, events: Iterator[TraceEvent]) -> Iterator[TraceEvent]:
        node_events: list[TraceEvent] = []
        alive: set[str] = set()
        try:
            for event in events:
                _, topic, key, value = event
                if topic == "node-events":
                    # Node upserts all come first; held until the first pod, which tells how many there are.
                    node_events.append(event)
                    continue
                if node_events:
                    yield from self._nodes(node_events)
                    node_events = []
                if isinstance(value, PodRequest):
                    if self.pods < self.pods_wanted:
                        self.pods += 1
                        alive.add(key)
                        yield self._emit(event)
                elif isinstance(value, PodDeleted) and key in alive:
                    alive.discard(key)
                    self.deletions += 1
                    yield self._emit(event)
                if self.pods >= self.pods_wanted and not alive:
                    # Nothing more can be kept; stop before reading the rest of the pod list.
                    break
            yield from self._nodes(node_events)
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def _nodes(self, node_events: list[TraceEvent]) -> Iterator[TraceEvent]:
        total = len(node_events)
        keep = (
            range(total) if self.nodes_wanted is None else _spread_pick(min(self.nodes_wanted, total), total)
        )
        for index, event in enumerate(node_events):
            if index in keep:
                self.nodes += 1
                yield self._emit(event)


def slice_gpu_trace(
    trace_dir: str | Path,
    path: str | Path,
    *,
    pods: int = 2000,
    nodes: int | None = None,
    pod_list: str = DEFAULT_PODS,
) -> WorkloadInfo:
    """Write the real trace's first `pods` pod requests (in creation order), their deletions and its nodes
    (all, or `nodes` of them evenly spaced over the node list) to `path`, through the converter
    `evaluation.traces.alibaba_gpu2023`. Times are the trace's own: the span can be months (see the module
    docstring). `pod_list` picks ``openb_pod_list_<pod_list>.csv``.
    """
    _check_count(pods, "pods")
    if nodes is not None:
        _check_count(nodes, "nodes")
    report = Report()
    sliced = _Slice(pods, nodes)
    events = iter_alibaba_gpu2023(trace_dir, report, pods=pod_list)
    write_log(sliced.filter(events), path, report, kind="alibaba-gpu-2023", source=trace_dir)
    return WorkloadInfo(
        nodes=sliced.nodes,
        pods=sliced.pods,
        deletions=sliced.deletions,
        samples=0,
        span_seconds=sliced.last_ts,
    )
