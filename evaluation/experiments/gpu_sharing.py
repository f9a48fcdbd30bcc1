"""The GPU-sharing experiment (`eyrie evaluate --experiment gpu-sharing`): the FGD paper's protocol on the
Alibaba GPU 2023 "openb" pod lists.

The protocol is the one of the FGD scheduler simulator's experiment scripts (Weng et al., USENIX ATC'23):

- The cluster is ``openb_node_list_gpu_node.csv`` (1,213 nodes, 6,212 GPUs), as in the simulator.
- The pod list is sorted by name and shuffled with the seed; then it is inflated: pods drawn uniformly (with
  replacement) from the list are appended, as copies named ``<name>-tuned-<i>``, until the next one would
  take the arrived GPU demand past `inflation` × the cluster's GPU capacity (a list already above that
  target loses pods drawn at random instead). Pods arrive in that order and never finish.
- A pod that finds no node fails for good (it is deleted from the queue, never retried).
- A batch profile (``gpu-share-batch``: windows of queued pods) has its queued pods placed before a level is
  read, its clock moved on by its ``batch_wait`` as if no pod came meanwhile, so each level counts exactly
  the pods arrived by then, all decided.
- Node names get a prefix ``%04d-`` from a seeded permutation, as the simulator renames its nodes: every
  built-in GPU profile breaks ties by the lowest node name (its ``selectHost``), so the prefix makes that a
  fixed random priority over the nodes instead of the trace's node order.
- FGD measures fragmentation against the typical pods of the whole pod list, computed up front as the
  simulator does (``policies.gpu.workload.typical_pods``: the most popular (cpu, GPU milli, cards, models)
  specs covering 95 % of the pods, shares renormalised over them); it is given them as its ``workload``
  argument instead of learning them from the pods as they arrive.
- As the arrived GPU demand passes each level (80, 90, ... % of capacity), the experiment reads: the share
  of GPU capacity allocated and left unallocated, the pods failed so far, and the fragmentation ratio.

GPU demand is counted in milli-GPUs as the trace gives it: a sharing pod (``num_gpu`` 1, ``gpu_milli`` <
1000) asks for ``gpu_milli``, a whole-card pod for 1000 × ``num_gpu``. Allocated is the demand of the pods
placed so far, whatever the policy reserved for them: a profile that rounds a share up to a whole card
allocates the share, and the rest of the card is left unallocated, which is the cost of not sharing.

The fragmentation ratio is the simulator's (its ``ClusterGpuFragReport``, "origin"): the typical pods are
the pod list's resource specs (CPU milli, GPU milli per card, cards, models) by popularity, the most popular
until they cover 95 % of the pods, each weighted by its share among them. For each node and typical pod,
the node's free GPU milli counts as fragmented unless the pod fits (its GPU cards, its models and its CPU);
when it fits, only the cards too small for it count. The ratio is the fragmented milli over the free milli,
summed over nodes and typical pods.

Which cards a pod holds comes from the scheduler's per-card accounting (`PodRecord.gpu_cards`); when a
profile placed the pod without it, the pod is taken to hold whole cards (the lowest fully free ones).
Randomness is NumPy's seeded PCG64, so the sequence and the node prefixes are not the simulator's (Go's
``math/rand``): the same protocol, another draw. Fed the simulator's own draws, the ``gpu-share`` profile
makes the simulator's FGD decisions pod for pod (tests/policies/test_fgd_simulator.py pins a small case).
"""

from __future__ import annotations

import copy
import csv
import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from evaluation.traces.alibaba_gpu2023 import GPU_RESOURCE, iter_alibaba_gpu2023, pod_list_path
from evaluation.traces.common import Report
from policies.drive import Drive, make_scheduler
from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.gpu.workload import PodType, TargetWorkload
from policies.gpu.workload import typical_pods as typical_workload
from policies.scheduler import Evicted, Outcome, Placed, Unschedulable
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest, whole_cards

__all__ = [
    "ARRIVAL_GAP",
    "BASELINES",
    "DEFAULT_LEVELS",
    "DEFAULT_POD_LISTS",
    "DEFAULT_PROFILES",
    "DEFAULT_TRACE_DIR",
    "GPU_NODE_LIST",
    "MILLI",
    "Demand",
    "GpuCluster",
    "GpuSharingExperiment",
    "GpuSharingResult",
    "LevelRow",
    "PodList",
    "ProfileRun",
    "build_sequence",
    "demand_of",
    "evaluate_gpu_sharing",
    "fgd_workload",
    "fragmentation_ratio",
    "prefixed_nodes",
    "profile_document",
    "read_pod_list",
    "replay",
    "run_gpu_sharing",
    "typical_pods",
    "write_report",
]

IntArray = npt.NDArray[np.int64]
MILLI: Final = 1000
GPU_NODE_LIST: Final = "openb_node_list_gpu_node.csv"
DEFAULT_POD_LISTS: Final = ("default", "gpushare100", "multigpu50")
DEFAULT_LEVELS: Final = (80, 90, 100, 110, 120)
ARRIVAL_GAP: Final = 0.005
"""Seconds between arrivals on the scheduler's clock: short enough that a batch profile's batch fills
before its wait is over (as in `evaluation.experiments.suite`)."""
POPULARITY: Final = 0.95
"""The simulator's typical pods cover this share of the pod list (its scripts' default)."""


BASELINES: Final = {
    "gpu-bestfit": "GpuBestFit",
    "gpu-dotproduct": "GpuDotProduct",
    "gpu-packing": "GpuPacking",
    "gpu-clustering": "GpuClustering",
    "gpu-randomfit": "GpuRandomFit",
}
"""The FGD paper's baselines: the ``gpu-share`` profile with its FGD scorer replaced by this one."""


def profile_document(name: str) -> dict[str, Any]:
    """A built-in profile, or one of the `BASELINES` derived from ``gpu-share``."""
    if name in BUILTIN_PROFILES:
        return BUILTIN_PROFILES[name]
    scorer = BASELINES.get(name)
    if scorer is None or "gpu-share" not in BUILTIN_PROFILES:
        known = [*BUILTIN_PROFILES, *(BASELINES if "gpu-share" in BUILTIN_PROFILES else ())]
        raise InvalidInput(f"no built-in profile {name!r} (known: {', '.join(known)})", field="profiles")
    document = copy.deepcopy(BUILTIN_PROFILES["gpu-share"])
    document["schedulerName"] = name
    document["plugins"]["score"]["enabled"] = [{"name": scorer, "weight": 1}]
    return document


def _default_profiles() -> tuple[str, ...]:
    base = [name for name in ("default", "balanced", "tbesk-z") if name in BUILTIN_PROFILES]
    gpu = ["gpu-share", "gpu-bestfit"] if "gpu-share" in BUILTIN_PROFILES else []
    plus = [name for name in ("gpu-share-plus", "gpu-share-batch") if name in BUILTIN_PROFILES]
    return (*base, *gpu, *plus)


DEFAULT_PROFILES: Final = _default_profiles()
"""default, balanced, tbesk-z, and (when built in) gpu-share (FGD), its BestFit baseline, gpu-share-plus
(FGD with GpuBestFit among its ties) and gpu-share-batch (FGD on windows of queued pods, each in the best
of a few orders)."""


@dataclass(frozen=True, slots=True)
class Demand:
    """A pod's GPU request as the trace gives it: `milli` of each of `count` cards (0 cards: none)."""

    milli: int
    count: int
    models: tuple[str, ...] = ()
    cpu: int = 0

    @property
    def total(self) -> int:
        return self.milli * self.count


def demand_of(pod: PodRequest) -> Demand:
    """The pod's GPU demand: its per-card request when the converter gives one, else the whole cards it
    requests with the ``gpu-milli`` label of a share."""
    cpu = int(pod.effective_requests.get("cpu", 0))
    gpu = getattr(pod, "gpu", None)
    if gpu is not None:
        return Demand(int(gpu.milli), int(gpu.count), tuple(sorted(gpu.models)), cpu)
    cards = int(pod.effective_requests.get(GPU_RESOURCE, 0))
    if cards == 0:
        return Demand(0, 0, (), cpu)
    milli = int(pod.labels.get("gpu-milli", MILLI)) if cards == 1 else MILLI
    models: tuple[str, ...] = ()
    for term in pod.node_affinity:
        for requirement in term.match_expressions:
            if requirement.key == "gpu-model" and requirement.operator == "In":
                models = tuple(sorted(requirement.values))
    return Demand(milli, cards, models, cpu)


@dataclass(frozen=True, slots=True)
class GpuCluster:
    """The nodes, and per node what the fragmentation measure needs."""

    nodes: tuple[NodeSpec, ...]
    cards: IntArray
    model: tuple[str, ...]
    cpu: IntArray

    @property
    def capacity_milli(self) -> int:
        return int(self.cards.sum()) * MILLI

    @property
    def max_cards(self) -> int:
        return max(1, int(self.cards.max(initial=0)))

    @classmethod
    def of(cls, nodes: Sequence[NodeSpec]) -> GpuCluster:
        cards, models, cpu = [], [], []
        for spec in nodes:
            gpus = getattr(spec, "gpus", None)
            if gpus is not None:
                cards.append(int(gpus.count))
                models.append(str(gpus.model))
            else:
                cards.append(int(spec.capacity.get(GPU_RESOURCE, 0)))
                models.append(spec.labels.get("gpu-model", ""))
            cpu.append(int(spec.allocatable.get("cpu", 0)))
        return cls(tuple(nodes), np.array(cards, np.int64), tuple(models), np.array(cpu, np.int64))


@dataclass(frozen=True, slots=True)
class PodList:
    name: str
    cluster: GpuCluster
    pods: tuple[PodRequest, ...]
    """The list as converted, sorted by name."""
    report: Report


def read_pod_list(trace_dir: Path, name: str, *, limit: int | None = None) -> PodList:
    """The GPU nodes and the pod list ``openb_pod_list_<name>.csv`` (its first `limit` rows in creation
    order when given), converted by the trace converter; rows it could not convert fail the run."""
    pod_list_path(trace_dir, name)  # a missing list fails before the node list is read
    report = Report()
    nodes: list[NodeSpec] = []
    pods: list[PodRequest] = []
    events = iter_alibaba_gpu2023(trace_dir, report, pods=name, nodes=trace_dir / GPU_NODE_LIST)
    for _, _, _, event in events:
        if isinstance(event, NodeEvent) and event.node is not None:
            nodes.append(event.node)
        elif isinstance(event, PodRequest):
            if limit is not None and len(pods) >= limit:
                break
            pods.append(event)
    if report.bad_row_count:
        first = report.bad_rows[0]
        raise InvalidInput(
            f"{name}: {report.bad_row_count} rows did not convert (first: line {first.line}: {first.reason})",
            field="pod-list",
        )
    if not pods:
        raise InvalidInput(f"{name}: no pods", field="pod-list")
    pods.sort(key=lambda pod: pod.name)
    return PodList(name, GpuCluster.of(nodes), tuple(pods), report)


def build_sequence(
    pods: Sequence[PodRequest], capacity_milli: int, *, inflation: float = 1.3, seed: int = 42
) -> list[PodRequest]:
    """The arrival sequence: `pods` (sorted by name) shuffled, then inflated or shrunk to `inflation` ×
    `capacity_milli` of GPU demand (see the module docstring)."""
    if capacity_milli <= 0:
        raise InvalidInput("the cluster has no GPUs", field="nodes")
    if inflation <= 0:
        raise InvalidInput(f"must be positive, got {inflation}", field="inflation")
    ordered = sorted(pods, key=lambda pod: pod.name)
    rng = np.random.Generator(np.random.PCG64(seed))
    sequence = [ordered[int(i)] for i in rng.permutation(len(ordered))]
    target = inflation * capacity_milli
    demand = sum(demand_of(pod).total for pod in sequence)
    if demand > target:
        while demand > target and sequence:
            removed = sequence.pop(int(rng.integers(len(sequence))))
            demand -= demand_of(removed).total
        return sequence
    if not any(demand_of(pod).total for pod in ordered):
        return sequence  # a list without GPU pods can never reach the target
    copy = 0
    while True:
        pod = ordered[int(rng.integers(len(ordered)))]
        extra = demand_of(pod).total
        if demand + extra > target:
            break
        name = f"{pod.name}-tuned-{copy}"
        sequence.append(pod.model_copy(update={"uid": name, "name": name}))
        demand += extra
        copy += 1
    return sequence


@dataclass(frozen=True, slots=True)
class _Typical:
    """The typical pods as arrays: per spec its weight, CPU, GPU milli per card, cards and models."""

    weight: npt.NDArray[np.float64]
    cpu: IntArray
    milli: IntArray
    count: IntArray
    models: tuple[tuple[str, ...], ...]


def pod_list_workload(pods: Iterable[PodRequest], popularity: float = POPULARITY) -> TargetWorkload:
    """The simulator's typical pods of the pod list (``GetTypicalPods`` with CPU pods involved, step 1, no
    GPU weight): the most popular specs until they cover `popularity` of the pods, in its order (by count,
    ties: the larger spec first), shares renormalised over them."""
    counts: dict[PodType, float] = {}
    for pod in pods:
        demand = demand_of(pod)
        kind = PodType(demand.cpu, demand.milli, demand.count, "|".join(demand.models))
        counts[kind] = counts.get(kind, 0.0) + 1.0
    return typical_workload(counts, threshold=100.0 * popularity)


def typical_pods(pods: Iterable[PodRequest], popularity: float = POPULARITY) -> _Typical:
    """`pod_list_workload` as arrays, for the fragmentation measure."""
    workload = pod_list_workload(pods, popularity)
    return _Typical(
        weight=np.array(workload.freq, np.float64),
        cpu=np.array([kind.cpu for kind in workload.types], np.int64),
        milli=np.array([kind.milli for kind in workload.types], np.int64),
        count=np.array([kind.count for kind in workload.types], np.int64),
        models=tuple(tuple(sorted(kind.model_list)) for kind in workload.types),
    )


def fgd_workload(typical: _Typical) -> list[dict[str, Any]]:
    """The typical pods as the FGD plugin's ``workload`` argument."""
    return [
        {
            "cpu": int(typical.cpu[t]),
            "gpuMilli": int(typical.milli[t]) if typical.count[t] else 0,
            "gpuCount": int(typical.count[t]) if typical.milli[t] else 0,
            "models": list(typical.models[t]) if typical.count[t] else [],
            "weight": float(typical.weight[t]),
        }
        for t in range(len(typical.weight))
    ]


def _with_workload(document: dict[str, Any], workload: list[dict[str, Any]]) -> dict[str, Any]:
    """The profile with its FGD scorer (when it has one and no configured workload) given `workload`."""
    scorers = document.get("plugins", {}).get("score", {}).get("enabled", [])
    if not any(entry.get("name") == "FGD" for entry in scorers):
        return document
    config = list(document.get("pluginConfig", []))
    if any(entry.get("name") == "FGD" and entry.get("args", {}).get("workload") for entry in config):
        return document
    document = copy.deepcopy(document)
    others = [entry for entry in config if entry.get("name") != "FGD"]
    args = next((dict(entry.get("args") or {}) for entry in config if entry.get("name") == "FGD"), {})
    document["pluginConfig"] = [*others, {"name": "FGD", "args": {**args, "workload": workload}}]
    return document


def prefixed_nodes(nodes: Sequence[NodeSpec], seed: int) -> tuple[NodeSpec, ...]:
    """The nodes renamed as the simulator renames them: in name order, node i becomes ``%04d-<name>`` with
    the i-th number of a seeded permutation, so the lowest name among equals is a random, fixed choice."""
    order = sorted(range(len(nodes)), key=lambda i: nodes[i].name)
    # A stream of its own: the arrival sequence draws from PCG64(seed).
    permutation = np.random.Generator(np.random.PCG64([seed, 1])).permutation(len(nodes))
    renamed = list(nodes)
    for position, index in enumerate(order):
        spec = nodes[index]
        renamed[index] = spec.model_copy(update={"name": f"{int(permutation[position]):04d}-{spec.name}"})
    return tuple(renamed)


def fragmentation_ratio(
    free: IntArray, cpu_free: IntArray, models: Sequence[str], typical: _Typical
) -> tuple[float, float]:
    """(fragmented milli, free milli) over the cluster: `free` is nodes × cards of free milli (-1 for a
    card the node lacks), `cpu_free` the nodes' free CPU milli, `models` their card model."""
    have = np.maximum(free, 0)
    left = have.sum(axis=1).astype(np.float64)  # per node
    fragmented = np.zeros(len(left), np.float64)
    idle = np.zeros(len(left), np.float64)
    node_models = np.array(models, dtype=object)
    for t in range(len(typical.weight)):
        weight = float(typical.weight[t])
        idle += weight * left
        milli, count = int(typical.milli[t]), int(typical.count[t])
        cpu_fits = cpu_free >= typical.cpu[t]
        if milli == 0:  # a CPU pod: every free GPU milli is idle for it (the simulator's XL/XR types)
            fragmented += weight * left
            continue
        allowed = typical.models[t]
        access = np.isin(node_models, allowed) if allowed else np.ones(len(left), np.bool_)
        big_enough = free >= milli
        gpu_fits = big_enough.sum(axis=1) >= count
        fits = access & gpu_fits & cpu_fits
        too_small = np.where(big_enough, 0, have).sum(axis=1).astype(np.float64)
        fragmented += weight * np.where(fits, too_small, left)
    return float(fragmented.sum()), float(idle.sum())


@dataclass(frozen=True, slots=True)
class LevelRow:
    """The cluster when the arrived GPU demand first reaches `level` % of capacity."""

    level: int
    pods: int
    """Pods arrived so far."""
    arrived: float
    """Arrived GPU demand, % of capacity."""
    allocated: float
    """GPU demand of the pods placed so far, % of capacity."""
    failed: int
    failed_gpu: int
    """Failed pods asking for a GPU."""
    pending: int
    """Pods arrived and not decided yet (a batch profile's unfinished batch)."""
    fragmentation: float
    """% of the free GPU milli that is fragmented (the simulator's measure)."""

    @property
    def unallocated(self) -> float:
        return 100.0 - self.allocated

    def as_dict(self) -> dict[str, Any]:
        return {
            "level": self.level,
            "pods": self.pods,
            "arrived_pct": round(self.arrived, 2),
            "allocated_pct": round(self.allocated, 2),
            "unallocated_pct": round(self.unallocated, 2),
            "failed_pods": self.failed,
            "failed_gpu_pods": self.failed_gpu,
            "pending_pods": self.pending,
            "frag_ratio_pct": round(self.fragmentation, 2),
        }


@dataclass(slots=True)
class ProfileRun:
    pod_list: str
    profile: str
    pods: int
    levels: list[LevelRow]
    curve: list[tuple[float, float, float]]
    """(arrived %, unallocated %, fragmentation %) at each whole per cent of arrived demand."""
    placed: int
    failed: int
    seconds: float

    def summary(self) -> dict[str, Any]:
        return {
            "pods": self.pods,
            "placed": self.placed,
            "failed": self.failed,
            "seconds": round(self.seconds, 1),
            "levels": {str(row.level): row.as_dict() for row in self.levels},
        }


class _State:
    """Per-card free milli and free CPU of every node, kept in step with the placements."""

    def __init__(self, cluster: GpuCluster) -> None:
        width = cluster.max_cards
        cards = np.arange(width)[None, :]
        self.free: IntArray = np.where(cards < cluster.cards[:, None], MILLI, -1).astype(np.int64)
        self.cpu_free: IntArray = cluster.cpu.copy()
        self.row = {spec.name: row for row, spec in enumerate(cluster.nodes)}
        self.held: dict[str, tuple[int, tuple[int, ...], int, int]] = {}
        self.allocated = 0

    def place(self, uid: str, node: str, demand: Demand, cards: tuple[int, ...]) -> None:
        row = self.row[node]
        if demand.count and not cards:
            # Placed without per-card accounting: whole cards, the lowest fully free ones.
            whole = np.flatnonzero(self.free[row] == MILLI)[: demand.count]
            cards = tuple(int(card) for card in whole)
            taken = MILLI
        else:
            taken = demand.milli
        for card in cards:
            self.free[row, card] = max(int(self.free[row, card]) - taken, 0)
        self.cpu_free[row] -= demand.cpu
        self.held[uid] = (row, cards, taken, demand.cpu)
        self.allocated += demand.total

    def release(self, uid: str, demand: Demand) -> None:
        held = self.held.pop(uid, None)
        if held is None:
            return
        row, cards, taken, cpu = held
        for card in cards:
            self.free[row, card] += taken
        self.cpu_free[row] += cpu
        self.allocated -= demand.total


def replay(
    pod_list: PodList,
    sequence: Sequence[PodRequest],
    profile: str,
    *,
    levels: Sequence[int] = DEFAULT_LEVELS,
    typical: _Typical | None = None,
) -> ProfileRun:
    """One profile on the arrival sequence (see the module docstring). A batch profile's queued pods are
    placed before a level is read (the clock moves on by its ``batch_wait``), so every level counts exactly
    the pods arrived by then, all decided."""
    started = time.perf_counter()
    cluster = pod_list.cluster
    capacity = cluster.capacity_milli
    typical = typical if typical is not None else typical_pods(pod_list.pods)
    parsed = parse_profile(_with_workload(profile_document(profile), fgd_workload(typical)))
    # A profile without the per-card filter knows whole cards only: a share is rounded up to one.
    shares = any(getattr(plugin, "NAME", type(plugin).__name__) == "GpuShareFit" for plugin in parsed.filter)
    drive = Drive(make_scheduler(cluster.nodes, parsed))
    scheduler = drive.scheduler
    state = _State(cluster)
    demands: dict[str, Demand] = {}
    position: dict[str, int] = {}
    # Per arrival (1-based): the GPU milli placed for it, whether it failed, whether it is decided: a level
    # or point of the curve counts the arrivals up to its crossing.
    placed_milli = np.zeros(len(sequence) + 1, np.int64)
    failed_at = np.zeros(len(sequence) + 1, np.bool_)
    failed_gpu_at = np.zeros(len(sequence) + 1, np.bool_)
    decided_at = np.zeros(len(sequence) + 1, np.bool_)
    failed: set[str] = set()
    rows: list[LevelRow] = []
    curve: list[tuple[float, float, float]] = []
    pending_levels = sorted(set(levels))
    crossed: list[tuple[int, int, float]] = []  # (level or 0 for a curve point, arrival, share)
    next_percent = 1
    arrived = 0

    def bind(outcomes: list[Outcome]) -> list[Outcome]:
        # As `Drive.arrive` binds what it places: no control plane refuses a binding here.
        for outcome in outcomes:
            if isinstance(outcome, Placed):
                scheduler.confirm(outcome.uid)
                drive.placement[outcome.uid] = outcome.node
            elif isinstance(outcome, Evicted):
                drive.placement.pop(outcome.uid, None)
        return outcomes

    def apply(outcomes: list[Outcome], now: float) -> None:
        for outcome in outcomes:
            at = position[outcome.uid]
            if isinstance(outcome, Placed):
                record = scheduler.snapshot.pods.get(outcome.uid)
                cards = tuple(getattr(record, "gpu_cards", ())) if record is not None else ()
                state.place(outcome.uid, outcome.node, demands[outcome.uid], cards)
                placed_milli[at] = demands[outcome.uid].total
                decided_at[at] = True
            elif isinstance(outcome, Evicted):
                state.release(outcome.uid, demands[outcome.uid])
                placed_milli[at] = 0
                decided_at[at] = False
            elif isinstance(outcome, Unschedulable) and outcome.uid not in failed:
                # Fails for good, as in the simulator: never retried.
                failed.add(outcome.uid)
                failed_at[at] = decided_at[at] = True
                failed_gpu_at[at] = demands[outcome.uid].count > 0
                apply(drive.delete(outcome.uid, now), now)

    def frag() -> float:
        fragmented, idle = fragmentation_ratio(state.free, state.cpu_free, cluster.model, typical)
        return 100.0 * fragmented / idle if idle > 0 else 0.0

    def read() -> None:
        """The levels and curve points crossed by the last arrival."""
        fragmentation = frag() if crossed else 0.0
        for level, at, share in crossed:
            allocated = 100.0 * float(placed_milli[: at + 1].sum()) / capacity
            if not level:
                curve.append((share, 100.0 - allocated, fragmentation))
                continue
            rows.append(
                LevelRow(
                    level=level,
                    pods=at,
                    arrived=share,
                    allocated=allocated,
                    failed=int(failed_at[: at + 1].sum()),
                    failed_gpu=int(failed_gpu_at[: at + 1].sum()),
                    pending=at - int(decided_at[: at + 1].sum()),
                    fragmentation=fragmentation,
                )
            )
        crossed.clear()

    now = 0.0
    for index, arriving in enumerate(sequence, start=1):
        pod = arriving.model_copy(update={"scheduler_name": profile})
        if not shares:
            pod = whole_cards(pod)
        demand = demand_of(pod)
        demands[pod.uid] = demand
        position[pod.uid] = index
        arrived += demand.total
        apply(bind([*scheduler.add_pod(pod, now), *scheduler.schedule(now)]), now)
        share = 100.0 * arrived / capacity
        while next_percent <= share:
            crossed.append((0, index, share))
            next_percent = math.floor(share) + 1
        level_crossed = bool(pending_levels) and share >= pending_levels[0]
        while pending_levels and share >= pending_levels[0]:
            crossed.append((pending_levels.pop(0), index, share))
        if level_crossed and parsed.batch is not None:
            # A level is read with every pod arrived by then decided: the partly filled batch waits out
            # its wait, as it would if no pod came for that long.
            now += parsed.batch.batch_wait
            apply(bind(scheduler.tick(now)), now)
        read()
        now += ARRIVAL_GAP
    apply(bind(drive.tick(now + 3600.0)), now + 3600.0)  # a batch profile's last, partly filled batch
    return ProfileRun(
        pod_list=pod_list.name,
        profile=profile,
        pods=len(sequence),
        levels=rows,
        curve=curve,
        placed=len(state.held),
        failed=len(failed),
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True, slots=True)
class GpuSharingExperiment:
    trace_dir: Path
    pod_lists: tuple[str, ...] = DEFAULT_POD_LISTS
    profiles: tuple[str, ...] = DEFAULT_PROFILES
    seed: int = 42
    inflation: float = 1.3
    levels: tuple[int, ...] = DEFAULT_LEVELS
    limit: int | None = None
    """Only the first this many pods of each list (in creation order), for quick runs and tests."""

    def __post_init__(self) -> None:
        if not self.pod_lists:
            raise InvalidInput("no pod list to run", field="pod-list")
        if not self.profiles:
            raise InvalidInput("no profile to run", field="profiles")
        for name in self.profiles:
            profile_document(name)
        if not self.trace_dir.is_dir():
            raise InvalidInput(f"{self.trace_dir}: no such folder", field="trace-dir")
        if not (self.trace_dir / GPU_NODE_LIST).is_file():
            raise InvalidInput(
                f"{self.trace_dir}: no {GPU_NODE_LIST} (not the openb trace?)", field="trace-dir"
            )
        for name in self.pod_lists:
            pod_list_path(self.trace_dir, name)
        if not 0 < self.inflation <= 10:
            raise InvalidInput(f"must be in (0, 10], got {self.inflation}", field="inflation")
        if any(not 0 < level <= 1000 for level in self.levels):
            raise InvalidInput("levels must be in (0, 1000]", field="levels")


@dataclass(slots=True)
class GpuSharingResult:
    experiment: GpuSharingExperiment
    runs: list[ProfileRun] = field(default_factory=list)
    capacity_gpus: dict[str, int] = field(default_factory=dict)
    sequence_pods: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for run in self.runs:
            out.setdefault(run.pod_list, {})[run.profile] = run.summary()
        return out


def run_gpu_sharing(
    experiment: GpuSharingExperiment, progress: Callable[[str], None] | None = None
) -> GpuSharingResult:
    note = progress or (lambda _: None)
    result = GpuSharingResult(experiment)
    for name in experiment.pod_lists:
        note(f"{name}: converting")
        pod_list = read_pod_list(experiment.trace_dir, name, limit=experiment.limit)
        nodes = prefixed_nodes(pod_list.cluster.nodes, experiment.seed)
        pod_list = dataclasses.replace(pod_list, cluster=GpuCluster.of(nodes))
        capacity = pod_list.cluster.capacity_milli
        sequence = build_sequence(
            pod_list.pods, capacity, inflation=experiment.inflation, seed=experiment.seed
        )
        typical = typical_pods(pod_list.pods)
        result.capacity_gpus[name] = capacity // MILLI
        result.sequence_pods[name] = len(sequence)
        for profile in experiment.profiles:
            note(f"{name}: {profile}")
            result.runs.append(replay(pod_list, sequence, profile, levels=experiment.levels, typical=typical))
    return result


def write_report(result: GpuSharingResult, out: Path, command: str) -> list[Path]:
    """``gpu_sharing.md`` (one table per pod list), ``gpu_sharing.csv`` and a plot per pod list."""
    import matplotlib

    matplotlib.use("Agg")  # headless: never needs a display
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    experiment = result.experiment
    written: list[Path] = []
    csv_path = out / "gpu_sharing.csv"
    columns = [
        "pod_list",
        "profile",
        "level",
        "pods",
        "arrived_pct",
        "allocated_pct",
        "unallocated_pct",
        "failed_pods",
        "failed_gpu_pods",
        "pending_pods",
        "frag_ratio_pct",
    ]
    with csv_path.open("w", newline="", encoding="utf-8") as stream:
        writer = csv.DictWriter(stream, fieldnames=columns)
        writer.writeheader()
        for run in result.runs:
            for row in run.levels:
                writer.writerow({"pod_list": run.pod_list, "profile": run.profile, **row.as_dict()})
    written.append(csv_path)
    lines = [
        "# GPU-sharing experiment",
        "",
        f"`{command}`",
        "",
        f"Seed {experiment.seed}, inflation to {round(experiment.inflation * 100)} % of the GPU capacity, "
        "pods never finish, a pod that finds no node fails for good. Each cell: GPU capacity left "
        "unallocated % / failed pods / fragmentation ratio %, when the arrived GPU demand reaches the "
        "level.",
    ]
    for name in experiment.pod_lists:
        runs = [run for run in result.runs if run.pod_list == name]
        lines += [
            "",
            f"## {name} ({result.capacity_gpus.get(name, 0):,} GPUs, "
            f"{result.sequence_pods.get(name, 0):,} pods)",
            "",
            "| profile | " + " | ".join(f"{level} %" for level in experiment.levels) + " |",
            "|---" * (len(experiment.levels) + 1) + "|",
        ]
        for run in runs:
            by_level = {row.level: row for row in run.levels}
            cells = []
            for level in experiment.levels:
                at = by_level.get(level)
                cells.append(
                    "—" if at is None else f"{at.unallocated:.1f} / {at.failed} / {at.fragmentation:.1f}"
                )
            lines.append(f"| {run.profile} | " + " | ".join(cells) + " |")
        figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
        for run in runs:
            if not run.curve:
                continue
            x = [point[0] for point in run.curve]
            left.plot(x, [point[1] for point in run.curve], label=run.profile)
            right.plot(x, [point[2] for point in run.curve], label=run.profile)
        left.plot([0, 100], [100, 0], linestyle=":", color="grey", label="ideal")
        left.set_xlim(70, 100 * experiment.inflation)
        left.set_ylim(0, 30)
        left.set_xlabel("arrived GPU demand (% of capacity)")
        left.set_ylabel("GPU capacity unallocated (%)")
        right.set_xlabel("arrived GPU demand (% of capacity)")
        right.set_ylabel("fragmentation ratio (%)")
        left.legend(fontsize=8)
        left.set_title(name)
        figure.tight_layout()
        plot = out / f"gpu_sharing_{name}.png"
        figure.savefig(plot, dpi=110)
        plt.close(figure)
        written.append(plot)
    md = out / "gpu_sharing.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written.insert(0, md)
    return written


DEFAULT_TRACE_DIR: Final = Path(__file__).resolve().parents[3] / "shared" / "traces" / "alibaba_gpu_v2023"
"""``../shared/traces/alibaba_gpu_v2023`` beside the repository."""


def evaluate_gpu_sharing(
    trace_dir: Path | None,
    pod_lists: Sequence[str] | None,
    profiles: Sequence[str] | None,
    out: Path,
    seed: int | None,
    progress: Callable[[str], None] | None = None,
    *,
    limit: int | None = None,
) -> tuple[dict[str, Any], str]:
    """The CLI's run: the experiment with defaults filled in, its report written to `out`; returns the
    summary (the JSON line) and the markdown to print."""
    names = [part.strip() for value in profiles or () for part in value.split(",")]
    if any(not name for name in names):
        raise InvalidInput("an empty profile name", field="profiles")
    experiment = GpuSharingExperiment(
        trace_dir=trace_dir if trace_dir is not None else DEFAULT_TRACE_DIR,
        pod_lists=tuple(dict.fromkeys(pod_lists)) if pod_lists else DEFAULT_POD_LISTS,
        profiles=tuple(dict.fromkeys(names)) if names else DEFAULT_PROFILES,
        seed=42 if seed is None else seed,
        limit=limit,
    )
    result = run_gpu_sharing(experiment, progress)
    command = (
        f"eyrie evaluate --experiment gpu-sharing --trace-dir {experiment.trace_dir}"
        + "".join(f" --pod-list {name}" for name in experiment.pod_lists)
        + f" --profiles {','.join(experiment.profiles)} --out {out} --seed {experiment.seed}"
    )
    written = write_report(result, out, command)
    text = written[0].read_text(encoding="utf-8").rstrip()
    text += "\nwrote " + ", ".join(str(path) for path in written)
    return result.summary(), text
