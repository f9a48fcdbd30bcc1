"""The evaluation report (`eyrie evaluate --all`): every built-in profile on the real traces, side by side.

Placement, on the Alibaba GPU 2023 trace (``alibaba_gpu_v2023``: 1,523 openb nodes, the pod list
``openb_pod_list_<trace_pods>.csv``), one `Scheduler` per profile on the same input:

- Arrival mode (default): the pods are submitted in creation order, `arrival_gap` seconds apart on the
  scheduler's clock, and never deleted, until the cluster is full. This is how the trace's authors use it
  (the FGD simulator submits the pod list as an arrival sequence), and how `--experiment tbesk-paper --trace`
  reads it. The gap (5 ms) is short enough that a batch profile's batch fills before its `batch_wait`
  expires, so `tbesk` and `tbesk-z` place full batches of 100 and 20. Metrics describe the end state.
- Deletion mode (`deletions`): the trace's creation and deletion times on the scheduler's clock, deletions
  replayed in time order. The trace is sparse in time: at most 56 pods are alive at once on 1,523 nodes,
  so every profile places nearly everything and the comparison says little; and a batch profile's 1-s window
  holds about one pod, each batch costing seconds of TBESK over 1,523 nodes, so its replay takes hours. The
  metrics are hourly samples over the trace: spreads and fragmentation are their means, the count over
  allocatable is in node-hours.

GPUs are counted whole, for every profile alike: a pod asking for a share of a card asks for one whole
``nvidia.com/gpu`` (`whole_cards`), as a scheduler without GPU sharing must see it; profiles with the
GpuShareFit filter book the share on its card as well. Shares are compared by the GPU-sharing experiment.

Nothing in the trace measures usage, so the load-aware profiles (`trimaran`, `portrait`, `balanced`) run
without windows or portraits: their load plugins fall back as upstream's do (no data → the minimum score,
or the filter lets the node pass), and where a plugin counts requests for want of measurements it does so.
Nothing is invented.

Portraits, on Bitbrains (``bitbrains_rnd_2013-7``): the portrait experiment
(`evaluation.experiments.portrait`) with every profile, which replays real usage hour by hour and so can count
node-hours over capacity. It runs as `eyrie evaluate --experiment portrait` does, with the same nodes,
requests, demand and arrival-order seeds; its figures in the report are the means over those seeds.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from evaluation.experiments.metrics import gpu_fragmentation, over_capacity, spread, utilisation
from evaluation.experiments.portrait import (
    REQUEST_RULES,
    PortraitExperiment,
    ProfileResult,
    RequestRule,
    run_portrait_seeds,
)
from evaluation.traces.alibaba_gpu2023 import GPU_RESOURCE, iter_alibaba_gpu2023
from evaluation.traces.common import Report
from policies.drive import Drive, make_scheduler
from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.scheduler import Evicted, Outcome, Placed
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest, whole_cards

__all__ = [
    "ARRIVAL_GAP",
    "BITBRAINS_TRACE",
    "CHECKPOINT_DEMAND",
    "CHECKPOINT_PODS",
    "CURVE_COLUMNS",
    "DEFAULT_TRACES",
    "GPU_TRACE",
    "RESOURCES",
    "GpuResult",
    "GpuTrace",
    "SuiteExperiment",
    "SuiteResult",
    "bitbrains_means",
    "bitbrains_metrics",
    "read_gpu_trace",
    "replay_gpu_trace",
    "run_suite",
]

FloatArray = npt.NDArray[np.float64]

DEFAULT_TRACES: Final = Path(__file__).resolve().parents[3] / "shared" / "traces"
"""``../shared/traces`` beside the repository."""
GPU_TRACE: Final = "alibaba_gpu_v2023"
BITBRAINS_TRACE: Final = "bitbrains_rnd_2013-7"
RESOURCES: Final = ("cpu", "memory", GPU_RESOURCE)
ARRIVAL_GAP: Final = 0.005
HOUR: Final = 3600.0
CHECKPOINT_PODS: Final = 100
"""Arrival mode samples the cluster every this many pods: a multiple of both batch sizes (100 and 20), so no
batch is half decided when it is taken."""
CHECKPOINT_DEMAND: Final = 0.8
"""The table's checkpoint: the first sample at which the pods so far ask for this share of the cluster's
GPUs. The end state is saturated (the trace asks for 120 % of the GPUs), so fragmentation shows better
while the cluster fills."""
CURVE_COLUMNS: Final = (
    "pods",
    "gpu_demand",
    "unplaced",
    "gpus_allocated",
    "idle_gpus_partly_used",
    "free_gpus",
)


@dataclass(frozen=True, slots=True)
class SuiteExperiment:
    traces: Path = DEFAULT_TRACES
    """The folder holding both traces (``alibaba_gpu_v2023/`` and ``bitbrains_rnd_2013-7/``)."""
    profiles: tuple[str, ...] = tuple(BUILTIN_PROFILES)
    trace_pods: str = "default"
    limit: int | None = None
    """At most this many GPU-trace pods, in creation order; None: all."""
    deletions: bool = False
    arrival_gap: float = ARRIVAL_GAP
    portrait_nodes: int = 6
    replicas: int = 4
    seed: int = 42
    """The portrait experiment's first arrival order (the GPU replay has no randomness: ties are seeded by
    uid)."""
    portrait_requests: RequestRule = "usage"
    portrait_demand: float = 1.25
    portrait_seeds: int = 3
    """The portrait experiment runs with arrival orders `seed`, `seed` + 1, …, this many."""
    bitbrains: bool = True
    jobs: int = 1
    """Processes for the profiles' replays (and the Bitbrains part); the figures do not depend on it."""

    def __post_init__(self) -> None:
        if not self.profiles:
            raise InvalidInput("no profile to evaluate", field="policy")
        unknown = [name for name in self.profiles if name not in BUILTIN_PROFILES]
        if unknown:
            raise InvalidInput(
                f"no built-in profile {unknown[0]!r} (built-in: {', '.join(BUILTIN_PROFILES)})",
                field="policy",
            )
        if len(set(self.profiles)) != len(self.profiles):
            raise InvalidInput("a profile is named twice", field="policy")
        if self.limit is not None and self.limit < 1:
            raise InvalidInput("must be at least 1", field="trace_limit")
        if not 0.0 < self.arrival_gap <= 3600.0:
            raise InvalidInput("must be in (0, 3600] seconds", field="arrival_gap")
        if not 1 <= self.jobs <= 64:
            raise InvalidInput("must be in 1..64", field="jobs")
        if self.portrait_requests not in REQUEST_RULES:
            raise InvalidInput(
                f"unknown {self.portrait_requests!r} (known: {', '.join(REQUEST_RULES)})", field="requests"
            )
        if not self.portrait_demand > 0:
            raise InvalidInput("must be above 0", field="demand")
        if self.portrait_seeds < 1:
            raise InvalidInput("must be at least 1", field="seeds")

    @property
    def portrait_seed_list(self) -> list[int]:
        return [self.seed + i for i in range(self.portrait_seeds)]

    @property
    def gpu_trace(self) -> Path:
        return self.traces / GPU_TRACE

    @property
    def bitbrains_trace(self) -> Path:
        return self.traces / BITBRAINS_TRACE


@dataclass(frozen=True, slots=True)
class GpuTrace:
    nodes: list[NodeSpec]
    events: list[tuple[float, PodRequest | PodDeleted]]
    """Pod creations and deletions in time order (deletions only of pods within the limit)."""
    pods: int
    bad_rows: int


@dataclass(slots=True)
class GpuResult:
    profile: str
    pods: int
    placed: int
    unschedulable: int
    unschedulable_gpu: int
    """Of the unschedulable pods, those asking for GPUs."""
    std: dict[str, float]
    range: dict[str, float]
    mean: dict[str, float]
    """Per resource: per-node utilisation (requests / allocatable) statistics, over the nodes having it."""
    gpus_allocated: float
    idle_gpus_partly_used: float
    idle_gpu_share: float
    over_allocatable: float
    """Nodes whose requests exceed allocatable in some resource (deletion mode: node-hours)."""
    cpu_pods_on_gpu_nodes: int
    """Pods without a GPU request placed on a node with GPUs (at any time): what strands GPUs."""
    samples: int
    """1 in arrival mode (the end state); in deletion mode the hours sampled, which the figures average."""
    seconds: float
    node_utilisation: FloatArray = field(repr=False)
    """(nodes, resources) utilisation per node (deletion mode: the samples' mean); NaN: no such resource."""
    curve: FloatArray = field(repr=False, default_factory=lambda: np.zeros((0, len(CURVE_COLUMNS))))
    """Arrival mode: one row per `CHECKPOINT_PODS` pods (and the end), columns `CURVE_COLUMNS`."""
    gpus_total: int = 0

    def checkpoint(self) -> dict[str, float] | None:
        """The curve's row at `CHECKPOINT_DEMAND` of the GPUs asked for; None in deletion mode, or when the
        pods never ask for that much."""
        reached = np.flatnonzero(self.curve[:, 1] >= CHECKPOINT_DEMAND * self.gpus_total)
        if not len(reached) or self.gpus_total == 0:
            return None
        row = self.curve[reached[0]]
        found = dict(zip(CURVE_COLUMNS, (float(v) for v in row), strict=True))
        found["idle_gpu_share"] = (
            found["idle_gpus_partly_used"] / found["free_gpus"] if found["free_gpus"] else 0.0
        )
        return found

    def metrics(self) -> dict[str, Any]:
        """The figures, rounded; wall time left out so that two runs compare equal."""

        def count(value: float) -> float | int:
            return int(value) if self.samples == 1 else round(value, 2)

        result: dict[str, Any] = {
            "pods": self.pods,
            "placed": self.placed,
            "unschedulable": self.unschedulable,
            "unschedulable_gpu": self.unschedulable_gpu,
            "gpus_allocated": count(self.gpus_allocated),
            "idle_gpus_partly_used": count(self.idle_gpus_partly_used),
            "idle_gpu_share": round(self.idle_gpu_share, 4),
            "over_allocatable": count(self.over_allocatable),
            "cpu_pods_on_gpu_nodes": self.cpu_pods_on_gpu_nodes,
        }
        checkpoint = self.checkpoint()
        if checkpoint is not None:
            at = f"at{CHECKPOINT_DEMAND * 100:.0f}"
            result[f"{at}_pods"] = int(checkpoint["pods"])
            result[f"{at}_unplaced"] = int(checkpoint["unplaced"])
            result[f"{at}_idle_gpus_partly_used"] = int(checkpoint["idle_gpus_partly_used"])
            result[f"{at}_idle_gpu_share"] = round(checkpoint["idle_gpu_share"], 4)
        for resource in RESOURCES:
            key = _key(resource)
            result[f"{key}_std"] = round(self.std[resource], 4)
            result[f"{key}_range"] = round(self.range[resource], 4)
        return result


def _key(resource: str) -> str:
    return "gpu" if resource == GPU_RESOURCE else resource


def read_gpu_trace(path: Path, pods: str = "default", limit: int | None = None) -> GpuTrace:
    if not path.is_dir():
        raise InvalidInput(f"{path}: no such folder (the Alibaba GPU 2023 trace, {GPU_TRACE})", field="trace")
    report = Report()
    nodes: list[NodeSpec] = []
    events: list[tuple[float, PodRequest | PodDeleted]] = []
    offered: set[str] = set()
    for ts, _, _, value in iter_alibaba_gpu2023(path, report, pods=pods):
        if isinstance(value, NodeEvent):
            nodes.append(value.node)
        elif isinstance(value, PodRequest):
            if limit is not None and len(offered) >= limit:
                continue  # later deletions of earlier pods still count
            offered.add(value.uid)
            events.append((ts, whole_cards(value)))
        elif isinstance(value, PodDeleted) and value.uid in offered:
            events.append((ts, value))
    if not nodes or not offered:
        raise InvalidInput(f"{path}: no nodes or no pods in the trace", field="trace")
    return GpuTrace(nodes, events, len(offered), report.bad_row_count)


class _Cluster:
    """What the profile's placements add up to, per node and resource, kept apart from the scheduler's own
    books so the figures do not depend on the code they judge."""

    def __init__(self, nodes: Sequence[NodeSpec]) -> None:
        self.index = {spec.name: i for i, spec in enumerate(nodes)}
        self.allocatable = np.array(
            [[spec.allocatable.get(name, 0) for name in RESOURCES] for spec in nodes], dtype=np.float64
        )
        self.requested = np.zeros_like(self.allocatable)
        self.where: dict[str, tuple[int, FloatArray]] = {}
        self.ever_placed: set[str] = set()
        self.cpu_pods_on_gpu_nodes = 0
        self._gpu = RESOURCES.index(GPU_RESOURCE)

    def add(self, pod: PodRequest, node: str) -> None:
        row = self.index[node]
        vector = np.array([pod.effective_requests.get(name, 0) for name in RESOURCES], dtype=np.float64)
        self.requested[row] += vector
        self.where[pod.uid] = (row, vector)
        self.ever_placed.add(pod.uid)
        if vector[self._gpu] == 0 and self.allocatable[row, self._gpu] > 0:
            self.cpu_pods_on_gpu_nodes += 1

    def curve_row(self, pods: int, demand: float) -> list[float]:
        gpu = self._gpu
        found = gpu_fragmentation(self.requested[:, gpu], self.allocatable[:, gpu])
        unplaced = pods - len(self.ever_placed)
        return [pods, demand, unplaced, found.allocated, found.idle_on_partly_used, found.free]

    def remove(self, uid: str) -> None:
        found = self.where.pop(uid, None)
        if found is not None:
            self.requested[found[0]] -= found[1]


@dataclass(slots=True)
class _Samples:
    """Running sums of the per-sample figures."""

    count: int = 0
    std: FloatArray = field(default_factory=lambda: np.zeros(len(RESOURCES)))
    range: FloatArray = field(default_factory=lambda: np.zeros(len(RESOURCES)))
    mean: FloatArray = field(default_factory=lambda: np.zeros(len(RESOURCES)))
    allocated: float = 0.0
    idle: float = 0.0
    share: float = 0.0
    over: float = 0.0
    node_util: FloatArray | None = None

    def take(self, cluster: _Cluster) -> None:
        util = utilisation(cluster.requested, cluster.allocatable)
        for j in range(len(RESOURCES)):
            found = spread(util[:, j])
            self.std[j] += found.std
            self.range[j] += found.range
            self.mean[j] += found.mean
        gpu = RESOURCES.index(GPU_RESOURCE)
        fragmentation = gpu_fragmentation(cluster.requested[:, gpu], cluster.allocatable[:, gpu])
        self.allocated += fragmentation.allocated
        self.idle += fragmentation.idle_on_partly_used
        self.share += fragmentation.share
        self.over += float(over_capacity(cluster.requested, cluster.allocatable).sum())
        self.node_util = util if self.node_util is None else self.node_util + util
        self.count += 1


def _apply(cluster: _Cluster, pods: dict[str, PodRequest], outcomes: list[Outcome]) -> None:
    for outcome in outcomes:
        if isinstance(outcome, Placed):
            cluster.add(pods[outcome.uid], outcome.node)
        elif isinstance(outcome, Evicted):  # no built-in profile preempts; kept right should one start to
            cluster.remove(outcome.uid)


def replay_gpu_trace(
    profile: str, trace: GpuTrace, *, deletions: bool = False, arrival_gap: float = ARRIVAL_GAP
) -> GpuResult:
    """One profile on the trace (see the module docstring for the two modes)."""
    started = time.perf_counter()
    parsed = parse_profile(BUILTIN_PROFILES[profile])
    batch_wait = parsed.batch.batch_wait if parsed.batch is not None else 0.0
    drive = Drive(make_scheduler(trace.nodes, parsed))
    cluster = _Cluster(trace.nodes)
    pods: dict[str, PodRequest] = {}
    samples = _Samples()
    curve: list[list[float]] = []
    now = demand = 0.0
    if not deletions:
        for _, event in trace.events:
            if isinstance(event, PodRequest):
                pod = event.model_copy(update={"scheduler_name": profile})
                pods[pod.uid] = pod
                demand += pod.effective_requests.get(GPU_RESOURCE, 0)
                _apply(cluster, pods, drive.arrive(pod, now))
                now += arrival_gap
                if len(pods) % CHECKPOINT_PODS == 0:
                    curve.append(cluster.curve_row(len(pods), demand))
        # The last, partly filled batch runs once its wait is over; pods that found no node are not retried
        # (nothing is ever freed, and the 5-minute flush is never reached).
        _apply(cluster, pods, drive.tick(now + batch_wait))
        if len(pods) % CHECKPOINT_PODS:
            curve.append(cluster.curve_row(len(pods), demand))
        samples.take(cluster)
    else:
        next_sample = trace.events[0][0] + HOUR
        for ts, event in trace.events:
            while next_sample <= ts:
                samples.take(cluster)
                next_sample += HOUR
            # Due batches and retries run before anything that happens later.
            _apply(cluster, pods, drive.tick(ts))
            if isinstance(event, PodRequest):
                pod = event.model_copy(update={"scheduler_name": profile})
                pods[pod.uid] = pod
                _apply(cluster, pods, drive.arrive(pod, ts))
            else:
                cluster.remove(event.uid)
                _apply(cluster, pods, drive.delete(event.uid, ts))
        if samples.count == 0:
            samples.take(cluster)
    never = [uid for uid in pods if uid not in cluster.ever_placed]
    gpu = GPU_RESOURCE
    n = samples.count
    assert samples.node_util is not None
    return GpuResult(
        profile=profile,
        pods=len(pods),
        placed=len(cluster.ever_placed),
        unschedulable=len(never),
        unschedulable_gpu=sum(1 for uid in never if pods[uid].effective_requests.get(gpu, 0) > 0),
        std={r: float(samples.std[j] / n) for j, r in enumerate(RESOURCES)},
        range={r: float(samples.range[j] / n) for j, r in enumerate(RESOURCES)},
        mean={r: float(samples.mean[j] / n) for j, r in enumerate(RESOURCES)},
        gpus_allocated=samples.allocated / n,
        idle_gpus_partly_used=samples.idle / n,
        idle_gpu_share=samples.share / n,
        over_allocatable=samples.over if deletions else samples.over / n,
        cpu_pods_on_gpu_nodes=cluster.cpu_pods_on_gpu_nodes,
        samples=n,
        seconds=time.perf_counter() - started,
        node_utilisation=samples.node_util / n,
        curve=np.array(curve, dtype=np.float64).reshape(-1, len(CURVE_COLUMNS)),
        gpus_total=int(cluster.allocatable[:, RESOURCES.index(GPU_RESOURCE)].sum()),
    )


def bitbrains_metrics(result: ProfileResult) -> dict[str, Any]:
    """The portrait experiment's figures plus the spread of per-node mean utilisation (dominant resource)
    and the busiest node-hour, which shows how far from capacity the replayed usage stays."""
    per_node = spread(result.utilization.mean(axis=1)) if result.utilization.size else spread([])
    metrics = result.metrics()
    metrics["mean_util_std"] = round(per_node.std, 4)
    metrics["mean_util_range"] = round(per_node.range, 4)
    metrics["peak_node_hour_util"] = round(float(result.utilization.max(initial=0.0)), 4)
    return metrics


def bitbrains_means(runs: Sequence[Sequence[ProfileResult]]) -> dict[str, dict[str, float]]:
    """Per profile, every `bitbrains_metrics` figure's mean over the seeds' runs (one result per profile in
    each run), in profile order."""
    collected: dict[str, list[dict[str, Any]]] = {}
    for results in runs:
        for result in results:
            collected.setdefault(result.profile, []).append(bitbrains_metrics(result))
    return {
        profile: {key: round(float(np.mean([m[key] for m in rows])), 4) for key in rows[0]}
        for profile, rows in collected.items()
    }


@dataclass(slots=True)
class SuiteResult:
    experiment: SuiteExperiment
    gpu: list[GpuResult]
    bitbrains: list[ProfileResult]
    """The portrait experiment's results with the first seed (what the plots show)."""
    context: dict[str, Any]
    seconds: dict[str, float]
    """Wall time of each part ("gpu trace", "bitbrains") and of the whole run ("total")."""
    bitbrains_runs: list[list[ProfileResult]] = field(default_factory=list)
    """The portrait experiment's results with every seed, `bitbrains` first."""

    def portrait_means(self) -> dict[str, dict[str, float]]:
        """Per profile, the portrait experiment's figures averaged over the seeds."""
        return bitbrains_means(self.bitbrains_runs or [self.bitbrains])

    def summary(self) -> dict[str, Any]:
        """Per profile, the headline figures of each part (the last stdout line); the portrait experiment's
        are means over its seeds."""
        portraits = self.portrait_means()
        summary: dict[str, Any] = {}
        for result in self.gpu:
            entry: dict[str, Any] = {"gpu_trace": result.metrics()}
            if result.profile in portraits:
                entry["bitbrains"] = portraits[result.profile]
            summary[result.profile] = entry
        return summary


def run_suite(experiment: SuiteExperiment, progress: Callable[[str], None] | None = None) -> SuiteResult:
    started = time.perf_counter()
    note = progress or (lambda _: None)
    if experiment.bitbrains and not experiment.bitbrains_trace.is_dir():
        # Checked first, so a missing trace fails before minutes of placement.
        raise InvalidInput(
            f"{experiment.bitbrains_trace}: no such folder (the Bitbrains trace)", field="trace"
        )
    note("reading the GPU trace")
    trace = read_gpu_trace(experiment.gpu_trace, experiment.trace_pods, experiment.limit)
    if experiment.jobs > 1:
        gpu, bitbrains_runs, seconds = _run_parallel(experiment, note)
    else:
        gpu = []
        for profile in experiment.profiles:
            note(f"GPU trace: {profile}")
            gpu.append(
                replay_gpu_trace(
                    profile, trace, deletions=experiment.deletions, arrival_gap=experiment.arrival_gap
                )
            )
        seconds = {"gpu trace": time.perf_counter() - started}
        bitbrains_runs = []
        if experiment.bitbrains:
            note("Bitbrains: portrait experiment")
            part = time.perf_counter()
            bitbrains_runs = _bitbrains(experiment)
            seconds["bitbrains"] = time.perf_counter() - part
    total = time.perf_counter() - started
    gpus = sum(spec.allocatable.get(GPU_RESOURCE, 0) for spec in trace.nodes)
    mode = (
        "deletion mode: the trace's creation and deletion times, figures averaged over hourly samples"
        if experiment.deletions
        else f"arrival mode: creation order, {experiment.arrival_gap * 1000:g} ms apart, never deleted; "
        "figures at the end"
    )
    context = {
        "GPU trace": f"{_shown(experiment.gpu_trace)}: {len(trace.nodes)} nodes ({gpus} GPUs), "
        f"openb_pod_list_{experiment.trace_pods}.csv, {trace.pods} pods"
        + (f" (the first {experiment.limit})" if experiment.limit is not None else "")
        + (f", {trace.bad_rows} bad rows skipped" if trace.bad_rows else ""),
        "GPU replay": mode,
        "Bitbrains": (
            f"{_shown(experiment.bitbrains_trace)}: the portrait experiment, {experiment.portrait_nodes} "
            f"nodes, {experiment.replicas} replicas per VM, requests {experiment.portrait_requests}, demand "
            f"{experiment.portrait_demand:g}, seeds {', '.join(map(str, experiment.portrait_seed_list))}"
            if experiment.bitbrains
            else "not run"
        ),
    }
    return SuiteResult(
        experiment=experiment,
        gpu=gpu,
        bitbrains=bitbrains_runs[0] if bitbrains_runs else [],
        context=context,
        seconds={**seconds, "total": total},
        bitbrains_runs=bitbrains_runs,
    )


def _shown(path: Path) -> str:
    """The path relative to the working directory (``../shared/traces/...``), so a report does not carry
    one machine's absolute paths."""
    return os.path.relpath(path)


def _bitbrains(experiment: SuiteExperiment) -> list[list[ProfileResult]]:
    runs, _ = run_portrait_seeds(
        PortraitExperiment(
            trace=experiment.bitbrains_trace,
            profiles=experiment.profiles,
            nodes=experiment.portrait_nodes,
            replicas=experiment.replicas,
            seed=experiment.seed,
            requests=experiment.portrait_requests,
            demand=experiment.portrait_demand,
        ),
        experiment.portrait_seed_list,
    )
    return runs


_WORKER_TRACE: dict[str, GpuTrace] = {}
"""In a worker process: the trace its initialiser read."""
_BITBRAINS_TASK: Final = "bitbrains (portrait experiment)"


def _worker_init(experiment: SuiteExperiment) -> None:
    # Each worker reads the trace itself (under a second): cheaper than pickling 17,000 models to it.
    _WORKER_TRACE["trace"] = read_gpu_trace(experiment.gpu_trace, experiment.trace_pods, experiment.limit)


def _worker_task(
    experiment: SuiteExperiment, task: str
) -> tuple[GpuResult | list[list[ProfileResult]], float]:
    started = time.perf_counter()
    if task == _BITBRAINS_TASK:
        return _bitbrains(experiment), time.perf_counter() - started
    result = replay_gpu_trace(
        task, _WORKER_TRACE["trace"], deletions=experiment.deletions, arrival_gap=experiment.arrival_gap
    )
    return result, time.perf_counter() - started


def _run_parallel(
    experiment: SuiteExperiment, note: Callable[[str], None]
) -> tuple[list[GpuResult], list[list[ProfileResult]], dict[str, float]]:
    """The same replays in `jobs` processes ("spawn": nothing of this process, threads included, is
    inherited). Batch profiles go first, as they take longest; results come back in profile order."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    tasks = sorted(experiment.profiles, key=lambda name: "mode" not in BUILTIN_PROFILES[name])
    if experiment.bitbrains:
        tasks.append(_BITBRAINS_TASK)
    note(f"{len(tasks)} tasks in {experiment.jobs} processes")
    with ProcessPoolExecutor(
        max_workers=min(experiment.jobs, len(tasks)),
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker_init,
        initargs=(experiment,),
    ) as pool:
        futures = {task: pool.submit(_worker_task, experiment, task) for task in tasks}
        found = {task: future.result() for task, future in futures.items()}
    gpu: list[GpuResult] = []
    for name in experiment.profiles:
        result = found[name][0]
        assert isinstance(result, GpuResult)
        gpu.append(result)
    seconds = {"gpu trace (summed over processes)": sum(found[name][1] for name in experiment.profiles)}
    bitbrains: list[list[ProfileResult]] = []
    if experiment.bitbrains:
        portraits = found[_BITBRAINS_TASK][0]
        assert isinstance(portraits, list)
        bitbrains = portraits
        seconds["bitbrains"] = found[_BITBRAINS_TASK][1]
    return gpu, bitbrains, seconds
