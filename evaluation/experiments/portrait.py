"""The portrait experiment: do hourly portraits let a scheduler oversell safely?

1. Take every Bitbrains VM with usage both in the first `train_days` days (training) and after (replay), and
   learn its workload portrait from the training days.
2. Give each VM a request. ``usage`` (the default) sets it as Kubernetes' Vertical Pod Autoscaler
   recommender (its default settings) would after watching the training days: the 90th percentile of a
   histogram whose samples lose half their weight per day, plus a 15 % margin, at least 25 millicores and
   250 MiB, at most what the VM declared. cpu takes every 5-minute sample; memory takes one peak per day,
   so a VM that fills its memory for an hour a day asks for that fill. ``declared`` takes the VM's
   provisioned cores and memory: the Bitbrains VMs use a few percent of that, so no placement that honours
   requests comes near real load.
3. Size `nodes` equal nodes from those requests: per resource, the pods' total requests are `demand` times
   the cluster's allocatable (1.25: a fifth of the requests cannot be placed by requests alone), and a node
   holds at least the largest pod. Both resources get the same rule, so neither is favoured.
4. Place `replicas` copies of every VM with each profile. Pods arrive one by one, `arrival_gap` seconds
   apart, in a seeded order; between arrivals the nodes' sliding windows are refreshed from the placed pods'
   usage in the last training hour (the metrics pipeline catching up), which the load-aware profiles read.
5. Replay the remaining days of real usage on the chosen nodes, hour by hour, and measure.

A node-hour's utilisation is its dominant resource: max(cpu used / cpu, memory used / memory), with usage
the hourly mean of the VMs' 5-minute samples. Pods a profile could not place run nowhere (they count in
`pods_placed`, not in the load). Two views of low and high load, both reported:

- per node: a node is low-load when its mean utilisation over the replay is under 20 %, high-load when over
  80 %. With requests sized from usage every node's mean lands between the two, so this share rarely tells
  profiles apart;
- per node-hour: the share of all node-hours (every node, every replayed hour, empty nodes included) under
  20 % or over 80 % utilisation. An idle hour and an overloaded hour each count, however the node's mean
  comes out.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Literal

import numpy as np
import numpy.typing as npt

from evaluation.traces.bitbrains import VmSeries, read_vm, vm_files
from policies.drive import Drive, make_scheduler
from policies.framework.profile import BUILTIN_PROFILES
from portraits.hourly import DEFAULT_METRICS, HourlyPortraits
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = [
    "HIGH_LOAD",
    "LOW_LOAD",
    "PORTRAIT_PROFILES",
    "REQUEST_RULES",
    "PortraitExperiment",
    "ProfileResult",
    "RequestRule",
    "histogram_percentile",
    "interval_peaks",
    "load_figures",
    "node_size",
    "run_portrait_experiment",
    "run_portrait_seeds",
    "usage_request",
]

FloatArray = npt.NDArray[np.float64]

PORTRAIT_PROFILES = ("default", "trimaran", "portrait", "balanced")
DAY = 86400.0
HOUR = 3600.0
GIB = 1024**3
MIB = 1024**2

RequestRule = Literal["usage", "declared"]
REQUEST_RULES: Final[tuple[RequestRule, ...]] = ("usage", "declared")

REQUEST_QUANTILE: Final = 0.9
"""The Vertical Pod Autoscaler recommender's target percentile, of cpu samples and of memory peaks."""
REQUEST_MARGIN: Final = 0.15
"""The recommender's safety margin on top of the percentile."""
MIN_CPU_MILLIS: Final = 25
"""The recommender's smallest cpu recommendation (millicores)."""
MIN_MEMORY_BYTES: Final = 250 * MIB
"""The recommender's smallest memory recommendation."""
HALF_LIFE: Final = DAY
"""The recommender's histogram decay: a sample a day older weighs half as much (cpu and memory)."""
PEAK_INTERVAL: Final = DAY
"""The recommender's memory aggregation interval: memory enters its histogram as one peak per interval."""
BUCKET_GROWTH: Final = 0.05
"""Each bucket of the recommender's histograms is this much wider than the one before."""
CPU_BUCKETS: Final = (0.001, 1000.0)
"""The cpu histogram's first bucket size and largest value, in cores."""
MEMORY_BUCKETS: Final = (1e7, 1e12)
"""The memory histogram's first bucket size and largest value, in bytes."""

LOW_LOAD: Final = 0.2
HIGH_LOAD: Final = 0.8


@dataclass(frozen=True, slots=True)
class PortraitExperiment:
    trace: Path
    profiles: tuple[str, ...] = PORTRAIT_PROFILES
    nodes: int = 6
    replicas: int = 4
    train_days: float = 21.0
    arrival_gap: float = 120.0
    seed: int = 42
    requests: RequestRule = "usage"
    demand: float = 1.25
    """The pods' total requests over the cluster's allocatable, per resource; it sizes the nodes."""


@dataclass(frozen=True, slots=True)
class NodeSize:
    cpu_millis: int
    memory_bytes: int

    def __str__(self) -> str:
        return f"{self.cpu_millis / 1000:g} cores / {self.memory_bytes / GIB:.2f} GiB"


@dataclass(slots=True)
class ProfileResult:
    profile: str
    pods: int
    pods_placed: int
    node_hours_over_capacity: int
    node_hours_over_80: int
    peak_util_std: float
    low_load_share: float
    high_load_share: float
    cores_placed: float
    """Requested cores of the placed pods: pods differ in size, so counts alone mislead."""
    memory_placed: float = 0.0
    """Requested memory of the placed pods (GiB)."""
    busiest_node_hour: float = 0.0
    """The highest utilisation of any node in any replayed hour."""
    low_hours_share: float = 0.0
    """Node-hours under `LOW_LOAD` utilisation, as a share of all node-hours."""
    high_hours_share: float = 0.0
    """Node-hours over `HIGH_LOAD` utilisation, as a share of all node-hours."""
    seed: int = 0
    utilization: FloatArray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    """(nodes, replay hours) dominant-resource utilisation."""
    placement: dict[str, str] = field(default_factory=dict, repr=False)

    def metrics(self) -> dict[str, Any]:
        return {
            "pods_placed": self.pods_placed,
            "node_hours_over_capacity": self.node_hours_over_capacity,
            "node_hours_over_80": self.node_hours_over_80,
            "peak_util_std": round(self.peak_util_std, 4),
            "low_load_share": round(self.low_load_share, 4),
            "high_load_share": round(self.high_load_share, 4),
            "cores_placed": round(self.cores_placed, 3),
            "memory_placed": round(self.memory_placed, 2),
            "busiest_node_hour": round(self.busiest_node_hour, 4),
            "low_hours_share": round(self.low_hours_share, 4),
            "high_hours_share": round(self.high_hours_share, 4),
        }


def histogram_percentile(
    values: npt.ArrayLike,
    weights: npt.ArrayLike,
    percentile: float,
    *,
    buckets: tuple[float, float],
    growth: float = BUCKET_GROWTH,
) -> float:
    """The `percentile` of weighted values as the recommender's exponential histogram reads it: bucket n
    starts at first × ((1 + growth)^n − 1) / growth (`buckets` = (first, largest value)), values fall into
    the bucket they start in (past the last: the last), and the answer is the end of the first bucket whose
    running weight reaches percentile × the total weight (the start of the last bucket if that is the one).
    Past the first few buckets that is at most about `growth` above the exact percentile. No weight: 0."""
    first, largest = buckets
    ratio = 1.0 + growth
    count = math.ceil(math.log(largest * (ratio - 1.0) / first + 1.0) / math.log(ratio)) + 1
    data = np.asarray(values, dtype=np.float64)
    weight = np.asarray(weights, dtype=np.float64)
    total = float(weight.sum())
    if data.size == 0 or not total > 0:
        return 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        found = np.log(data * (ratio - 1.0) / first + 1.0) / math.log(ratio)
    index = np.where(data < first, 0, np.minimum(np.nan_to_num(found), count - 1)).astype(np.int64)
    per_bucket = np.bincount(index, weights=weight, minlength=count)
    running = np.cumsum(per_bucket)
    used = np.flatnonzero(per_bucket > 0)
    bucket = int(np.searchsorted(running, percentile * total, side="left"))
    bucket = min(max(bucket, int(used[0])), int(used[-1]))

    def start(n: int) -> float:
        return 0.0 if n == 0 else first * (ratio**n - 1.0) / (ratio - 1.0)

    return start(bucket + 1) if bucket < count - 1 else start(bucket)


def interval_peaks(
    ts: npt.ArrayLike, values: npt.ArrayLike, interval: float = PEAK_INTERVAL
) -> tuple[FloatArray, FloatArray]:
    """One peak per `interval` from the first sample on ([t0 + k·interval, t0 + (k + 1)·interval)), stamped
    with the interval's end: the samples the recommender's memory histogram takes. Intervals without samples
    have no peak."""
    times = np.asarray(ts, dtype=np.float64)
    data = np.asarray(values, dtype=np.float64)
    if times.size == 0:
        return np.zeros(0), np.zeros(0)
    start = float(times.min())
    keys, position = np.unique(((times - start) // interval).astype(np.int64), return_inverse=True)
    peaks = np.full(len(keys), -np.inf)
    np.maximum.at(peaks, position, data)
    ends: FloatArray = start + (keys + 1).astype(np.float64) * interval
    return ends, peaks


def usage_request(ts: npt.ArrayLike, samples: npt.ArrayLike, *, memory: bool, ceiling: int) -> int:
    """A request as the Vertical Pod Autoscaler recommender (its defaults) would set it after seeing these
    samples (cpu in cores, memory in bytes): the `REQUEST_QUANTILE` of its decaying histogram plus
    `REQUEST_MARGIN`, rounded up to a millicore or a byte, at least its minimum and at most `ceiling` (what
    the VM declared; 0: no ceiling). cpu takes every sample; memory takes one peak per `PEAK_INTERVAL`, so a
    VM that idles most of the day and fills its memory once a day asks for that fill. Every sample weighs
    2^(age / `HALF_LIFE`) less than the newest. No samples: the ceiling."""
    times = np.asarray(ts, dtype=np.float64)
    values = np.asarray(samples, dtype=np.float64)
    floor = MIN_MEMORY_BYTES if memory else MIN_CPU_MILLIS
    if values.size == 0:
        return max(ceiling, floor)
    if memory:
        times, values = interval_peaks(times, values)
    weights = np.exp2((times - times.max()) / HALF_LIFE)
    buckets = MEMORY_BUCKETS if memory else CPU_BUCKETS
    value = histogram_percentile(values, weights, REQUEST_QUANTILE, buckets=buckets)
    wanted = max(math.ceil(value * (1.0 + REQUEST_MARGIN) * (1.0 if memory else 1000.0)), floor)
    return min(wanted, ceiling) if ceiling > 0 else wanted


def node_size(cpu_millis: Sequence[int], memory_bytes: Sequence[int], nodes: int, demand: float) -> NodeSize:
    """Equal nodes for pods of these requests: per resource, the total is `demand` × the `nodes` nodes'
    allocatable (rounded up to a millicore and a MiB), and a node holds at least the largest pod."""
    if nodes < 1 or not demand > 0:
        raise InvalidInput(
            f"need at least 1 node and a demand above 0, got {nodes} and {demand}", field="nodes"
        )

    def size(requests: Sequence[int], unit: int) -> int:
        share = math.ceil(sum(requests) / (demand * nodes) / unit) * unit
        return max(share, max(requests, default=0), unit)

    return NodeSize(size(cpu_millis, 1), size(memory_bytes, MIB))


def load_figures(utilization: FloatArray) -> dict[str, float]:
    """The load figures of a (nodes, hours) utilisation matrix: node-hours over capacity and over 80 %, the
    std of the nodes' peaks, the shares of low- and high-load nodes (by mean), the shares of low- and
    high-load node-hours (of all of them) and the busiest node-hour."""
    if utilization.size == 0:
        return dict.fromkeys(
            (
                "over_capacity",
                "over_80",
                "peak_std",
                "low_share",
                "high_share",
                "low_hours_share",
                "high_hours_share",
                "busiest",
            ),
            0.0,
        )
    mean = utilization.mean(axis=1)
    return {
        "over_capacity": float((utilization > 1.0).sum()),
        "over_80": float((utilization > HIGH_LOAD).sum()),
        "peak_std": float(utilization.max(axis=1).std()),
        "low_share": float((mean < LOW_LOAD).mean()),
        "high_share": float((mean > HIGH_LOAD).mean()),
        "low_hours_share": float((utilization < LOW_LOAD).mean()),
        "high_hours_share": float((utilization > HIGH_LOAD).mean()),
        "busiest": float(utilization.max()),
    }


@dataclass(frozen=True, slots=True)
class _Workload:
    name: str
    vm: VmSeries
    cpu_millis: int
    memory_bytes: int
    recent_mean: tuple[float, float]
    recent_std: tuple[float, float]
    hourly_cpu: FloatArray
    hourly_memory: FloatArray


@dataclass(frozen=True, slots=True)
class _Setup:
    workloads: list[_Workload]
    store: HourlyPortraits
    split: float
    replay_hours: int
    size: NodeSize
    skipped: list[str]
    """VMs left out: no usage in the training days or none in the replay."""


def _request(vm: VmSeries, train: npt.NDArray[np.bool_], rule: RequestRule) -> tuple[int, int]:
    declared_cpu = vm.provisioned_cores * 1000
    if rule == "declared":
        return declared_cpu, vm.provisioned_memory_bytes
    cpu = usage_request(vm.ts[train], vm.cpu_cores[train], memory=False, ceiling=declared_cpu)
    memory = usage_request(
        vm.ts[train], vm.memory_bytes[train], memory=True, ceiling=int(vm.provisioned_memory_bytes)
    )
    return cpu, memory


def _setup(experiment: PortraitExperiment) -> _Setup:
    if experiment.requests not in REQUEST_RULES:
        raise InvalidInput(
            f"unknown rule {experiment.requests!r} (known: {', '.join(REQUEST_RULES)})", field="requests"
        )
    files = vm_files(experiment.trace)
    if not files:
        raise InvalidInput(f"{experiment.trace}: no Bitbrains VM files (*.csv)", field="trace")
    vms = [read_vm(path) for path in files]
    vms = [vm for vm in vms if len(vm) and vm.provisioned_cores > 0]
    if not vms:
        raise InvalidInput(
            f"{experiment.trace}: none of its {len(files)} *.csv files holds Bitbrains usage rows "
            "(Timestamp; CPU cores; ... : 11 ';'-separated columns) with provisioned cores",
            field="trace",
        )
    start = min(float(vm.ts.min()) for vm in vms)
    split = start + experiment.train_days * DAY
    end = max(float(vm.ts.max()) for vm in vms)
    replay_hours = int((end - split) // HOUR)
    if replay_hours < 1:
        raise InvalidInput(
            f"{experiment.trace}: the trace covers {(end - start) / DAY:.1f} days, not more than the "
            f"{experiment.train_days:g} training days",
            field="trace",
        )
    store = HourlyPortraits(DEFAULT_METRICS, days=experiment.train_days)
    workloads, skipped = [], []
    for vm in vms:
        name = f"bitbrains-{vm.vm_id}"
        train = vm.ts < split
        replay = ~train & (vm.ts < split + replay_hours * HOUR)
        # A VM without training usage has no portrait and no usage-sized request; one without replay
        # usage would be placed and then load nothing. Neither tests anything.
        if not train.any() or not replay.any():
            skipped.append(name)
            continue
        values = np.full((int(train.sum()), len(DEFAULT_METRICS)), np.nan)
        for column, series in (
            (0, vm.cpu_cores),
            (1, vm.memory_bytes),
            (2, vm.bandwidth_bps),
            (3, vm.disk_bps),
        ):
            values[:, column] = series[train]
        store.update_batch(store.key_rows([name] * len(values)), vm.ts[train], values)
        recent = train & (vm.ts >= split - HOUR)
        if not recent.any():
            recent = train
        cpu, memory = vm.cpu_cores[recent], vm.memory_bytes[recent]
        hour = ((vm.ts[replay] - split) // HOUR).astype(np.int64)
        count = np.bincount(hour, minlength=replay_hours)
        safe = np.maximum(count, 1)
        hourly_cpu = np.bincount(hour, weights=vm.cpu_cores[replay], minlength=replay_hours) / safe
        hourly_memory = np.bincount(hour, weights=vm.memory_bytes[replay], minlength=replay_hours) / safe
        cpu_millis, memory_bytes = _request(vm, train, experiment.requests)
        workloads.append(
            _Workload(
                name,
                vm,
                cpu_millis,
                memory_bytes,
                (float(cpu.mean()), float(memory.mean())),
                (float(cpu.std()), float(memory.std())),
                hourly_cpu,
                hourly_memory,
            )
        )
    if not workloads:
        raise InvalidInput(
            f"{experiment.trace}: no VM has usage both before and after day {experiment.train_days:g}",
            field="trace",
        )
    per_pod = [w for w in workloads for _ in range(experiment.replicas)]
    size = node_size(
        [w.cpu_millis for w in per_pod],
        [w.memory_bytes for w in per_pod],
        experiment.nodes,
        experiment.demand,
    )
    return _Setup(workloads, store, split, replay_hours, size, skipped)


def _node_names(experiment: PortraitExperiment) -> list[str]:
    return [f"node-{i:02d}" for i in range(experiment.nodes)]


def _place(experiment: PortraitExperiment, profile: str, setup: _Setup, seed: int) -> dict[str, str]:
    node_names = _node_names(experiment)
    size = {"cpu": f"{setup.size.cpu_millis}m", "memory": setup.size.memory_bytes, "pods": 110}
    nodes = [
        NodeSpec.model_validate({"name": name, "capacity": size, "allocatable": size}) for name in node_names
    ]
    drive = Drive(make_scheduler(nodes, profile))
    snapshot = drive.scheduler.snapshot
    usage = snapshot.usage
    for workload in setup.workloads:
        portrait = setup.store.portrait(workload.name)
        if portrait is not None:
            usage.set_workload_portrait(workload.name, portrait)
    pods = [
        PodRequest.model_validate(
            {
                "uid": f"{workload.name}-{replica}",
                "workload": workload.name,
                "scheduler_name": profile,
                "requests": {"cpu": f"{workload.cpu_millis}m", "memory": workload.memory_bytes},
            }
        )
        for workload in setup.workloads
        for replica in range(experiment.replicas)
    ]
    random.Random(seed).shuffle(pods)
    by_name = {w.name: w for w in setup.workloads}
    now = setup.split
    for pod in pods:
        drive.arrive(pod, now)
        now += experiment.arrival_gap
        # The metrics pipeline catches up before the next arrival: every node's window shows the recent
        # usage of the pods on it (independent loads: variances add).
        for name in node_names:
            row = snapshot.index[name]
            on_node = [
                by_name[snapshot.pods[uid].info.pod.workload or ""] for uid in snapshot.pods_on_row[row]
            ]
            mean = np.sum([w.recent_mean for w in on_node], axis=0) if on_node else np.zeros(2)
            var = np.sum([np.square(w.recent_std) for w in on_node], axis=0) if on_node else np.zeros(2)
            stats = {
                "cpu": (float(mean[0]), float(np.sqrt(var[0]))),
                "memory": (float(mean[1]), float(np.sqrt(var[1]))),
            }
            usage.set_window(row, stats, end=now)
    drive.tick(now)  # a batch profile's last batch, when its wait has passed
    return drive.placement


def _measure(
    experiment: PortraitExperiment, profile: str, placement: dict[str, str], setup: _Setup, seed: int
) -> ProfileResult:
    node_names = _node_names(experiment)
    index = {name: i for i, name in enumerate(node_names)}
    by_name = {w.name: w for w in setup.workloads}
    cpu = np.zeros((experiment.nodes, setup.replay_hours))
    memory = np.zeros((experiment.nodes, setup.replay_hours))
    for uid, node in placement.items():
        workload = by_name[uid.rsplit("-", 1)[0]]
        cpu[index[node]] += workload.hourly_cpu
        memory[index[node]] += workload.hourly_memory
    utilization = np.maximum(cpu / (setup.size.cpu_millis / 1000), memory / setup.size.memory_bytes)
    figures = load_figures(utilization)
    return ProfileResult(
        profile=profile,
        pods=len(setup.workloads) * experiment.replicas,
        pods_placed=len(placement),
        node_hours_over_capacity=int(figures["over_capacity"]),
        node_hours_over_80=int(figures["over_80"]),
        peak_util_std=figures["peak_std"],
        low_load_share=figures["low_share"],
        high_load_share=figures["high_share"],
        cores_placed=sum(by_name[uid.rsplit("-", 1)[0]].cpu_millis for uid in placement) / 1000,
        memory_placed=sum(by_name[uid.rsplit("-", 1)[0]].memory_bytes for uid in placement) / GIB,
        busiest_node_hour=figures["busiest"],
        low_hours_share=figures["low_hours_share"],
        high_hours_share=figures["high_hours_share"],
        seed=seed,
        utilization=utilization,
        placement=placement,
    )


def _check_profiles(experiment: PortraitExperiment) -> None:
    unknown = [p for p in experiment.profiles if p not in BUILTIN_PROFILES]
    if unknown:
        raise InvalidInput(
            f"no built-in profile {unknown[0]!r} (built-in: {', '.join(BUILTIN_PROFILES)})", field="policy"
        )


def run_portrait_seeds(
    experiment: PortraitExperiment, seeds: Sequence[int]
) -> tuple[list[list[ProfileResult]], dict[str, Any]]:
    """Every profile once per arrival-order seed (the trace is read once), and what the setup was: the node
    size, the VMs taken and those left out."""
    _check_profiles(experiment)
    setup = _setup(experiment)
    runs = []
    for seed in seeds:
        results = []
        for profile in experiment.profiles:
            placement = _place(experiment, profile, setup, seed)
            results.append(_measure(experiment, profile, placement, setup, seed))
        runs.append(results)
    cpu = sum(w.cpu_millis for w in setup.workloads) * experiment.replicas / 1000
    memory = sum(w.memory_bytes for w in setup.workloads) * experiment.replicas / GIB
    described = {
        "vms": len(setup.workloads),
        "vms_left_out": ", ".join(setup.skipped) or "none",
        "node_size": str(setup.size),
        "requested": f"{cpu:g} cores / {memory:.1f} GiB",
        "replay_hours": setup.replay_hours,
    }
    return runs, described


def run_portrait_experiment(experiment: PortraitExperiment) -> list[ProfileResult]:
    """Every profile with the experiment's seed."""
    runs, _ = run_portrait_seeds(experiment, [experiment.seed])
    return runs[0]
