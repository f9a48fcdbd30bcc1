"""The portrait experiment: do hourly portraits let a scheduler oversell safely?

1. Learn a workload portrait per Bitbrains VM from the first `train_days` days of its real usage.
2. Place `replicas` copies of every VM on `nodes` equal nodes, each copy requesting what its owner
   declared (the VM's provisioned cores and memory), with each profile in turn. Pods arrive one by one,
   `arrival_gap` seconds apart, in a seeded order; between arrivals the nodes' sliding windows are
   refreshed from the placed pods' usage in the last training hour (the metrics pipeline catching up),
   which is what the load-aware profiles read.
3. Replay the remaining days of real usage on the chosen nodes, hour by hour, and measure.

A node-hour's utilisation is its dominant resource: max(cpu used / cpu, memory used / memory), with usage
the hourly mean of the VMs' 5-minute samples. Pods a profile could not place run nowhere (they count in
`pods_placed`, not in the load).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from evaluation.traces.bitbrains import VmSeries, read_vm, vm_files
from policies.drive import Drive, make_scheduler
from policies.framework.profile import BUILTIN_PROFILES
from portraits.hourly import DEFAULT_METRICS, HourlyPortraits
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = ["PORTRAIT_PROFILES", "PortraitExperiment", "ProfileResult", "run_portrait_experiment"]

FloatArray = npt.NDArray[np.float64]

PORTRAIT_PROFILES = ("default", "trimaran", "portrait", "balanced")
DAY = 86400.0
HOUR = 3600.0
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class PortraitExperiment:
    trace: Path
    profiles: tuple[str, ...] = PORTRAIT_PROFILES
    nodes: int = 12
    node_cpu_cores: int = 32
    node_memory_bytes: int = 512 * GIB
    replicas: int = 4
    train_days: float = 21.0
    arrival_gap: float = 120.0
    seed: int = 42


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
    cores_placed: int
    """Requested cores of the placed pods: pods differ in size by 32×, so counts alone mislead."""
    utilization: FloatArray = field(repr=False)
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
            "cores_placed": self.cores_placed,
        }


@dataclass(frozen=True, slots=True)
class _Workload:
    name: str
    vm: VmSeries
    recent_mean: tuple[float, float]
    recent_std: tuple[float, float]
    hourly_cpu: FloatArray
    hourly_memory: FloatArray


def _load_workloads(experiment: PortraitExperiment) -> tuple[list[_Workload], HourlyPortraits, float, int]:
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
    workloads = []
    for vm in vms:
        name = f"bitbrains-{vm.vm_id}"
        train = vm.ts < split
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
        replay = ~train & (vm.ts < split + replay_hours * HOUR)
        hour = ((vm.ts[replay] - split) // HOUR).astype(np.int64)
        count = np.bincount(hour, minlength=replay_hours)
        safe = np.maximum(count, 1)
        hourly_cpu = np.bincount(hour, weights=vm.cpu_cores[replay], minlength=replay_hours) / safe
        hourly_memory = np.bincount(hour, weights=vm.memory_bytes[replay], minlength=replay_hours) / safe
        workloads.append(
            _Workload(
                name,
                vm,
                (float(cpu.mean()) if len(cpu) else 0.0, float(memory.mean()) if len(memory) else 0.0),
                (float(cpu.std()) if len(cpu) else 0.0, float(memory.std()) if len(memory) else 0.0),
                hourly_cpu,
                hourly_memory,
            )
        )
    return workloads, store, split, replay_hours


def _place(
    experiment: PortraitExperiment,
    profile: str,
    workloads: list[_Workload],
    store: HourlyPortraits,
    split: float,
) -> dict[str, str]:
    node_names = [f"node-{i:02d}" for i in range(experiment.nodes)]
    size = {"cpu": f"{experiment.node_cpu_cores}", "memory": experiment.node_memory_bytes, "pods": 110}
    nodes = [
        NodeSpec.model_validate({"name": name, "capacity": size, "allocatable": size}) for name in node_names
    ]
    drive = Drive(make_scheduler(nodes, profile))
    snapshot = drive.scheduler.snapshot
    usage = snapshot.usage
    for workload in workloads:
        portrait = store.portrait(workload.name)
        if portrait is not None:
            usage.set_workload_portrait(workload.name, portrait)
    pods = [
        PodRequest.model_validate(
            {
                "uid": f"{workload.name}-{replica}",
                "workload": workload.name,
                "scheduler_name": profile,
                "requests": {
                    "cpu": str(workload.vm.provisioned_cores),
                    "memory": workload.vm.provisioned_memory_bytes,
                },
            }
        )
        for workload in workloads
        for replica in range(experiment.replicas)
    ]
    random.Random(experiment.seed).shuffle(pods)
    by_name = {w.name: w for w in workloads}
    now = split
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
    experiment: PortraitExperiment,
    profile: str,
    placement: dict[str, str],
    workloads: list[_Workload],
    replay_hours: int,
) -> ProfileResult:
    node_names = [f"node-{i:02d}" for i in range(experiment.nodes)]
    index = {name: i for i, name in enumerate(node_names)}
    by_name = {w.name: w for w in workloads}
    cpu = np.zeros((experiment.nodes, replay_hours))
    memory = np.zeros((experiment.nodes, replay_hours))
    for uid, node in placement.items():
        workload = by_name[uid.rsplit("-", 1)[0]]
        cpu[index[node]] += workload.hourly_cpu
        memory[index[node]] += workload.hourly_memory
    utilization = np.maximum(cpu / experiment.node_cpu_cores, memory / experiment.node_memory_bytes)
    peak = utilization.max(axis=1)
    mean = utilization.mean(axis=1)
    return ProfileResult(
        profile=profile,
        pods=len(workloads) * experiment.replicas,
        pods_placed=len(placement),
        node_hours_over_capacity=int((utilization > 1.0).sum()),
        node_hours_over_80=int((utilization > 0.8).sum()),
        peak_util_std=float(peak.std()),
        low_load_share=float((mean < 0.2).mean()),
        high_load_share=float((mean > 0.8).mean()),
        cores_placed=sum(by_name[uid.rsplit("-", 1)[0]].vm.provisioned_cores for uid in placement),
        utilization=utilization,
        placement=placement,
    )


def run_portrait_experiment(experiment: PortraitExperiment) -> list[ProfileResult]:
    unknown = [p for p in experiment.profiles if p not in BUILTIN_PROFILES]
    if unknown:
        raise InvalidInput(
            f"no built-in profile {unknown[0]!r} (built-in: {', '.join(BUILTIN_PROFILES)})", field="policy"
        )
    workloads, store, split, replay_hours = _load_workloads(experiment)
    results = []
    for profile in experiment.profiles:
        placement = _place(experiment, profile, workloads, store, split)
        results.append(_measure(experiment, profile, placement, workloads, replay_hours))
    return results
