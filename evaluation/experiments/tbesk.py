"""The TBESK paper's experiment, and the same evaluation on real requests.

Paper mode: the paper's 31 nodes (11 × 16 cores / 24574 MB / 30 Gb/s / 800 GB, 10 × 32 / 32768 / 30 /
1000, 10 × 64 / 49512 / 40 / 1200) and a fixed pod generator: each pod copies one of the paper's
four request rows, chosen uniformly, times an independent lognormal factor (μ = 0, σ = 0.4) per resource;
every resource column is then scaled by one constant so that the first 1,800 pods load the cluster to cpu
35 %, memory 45 %, bandwidth 75 %, disk 70 %. ``numpy.random.default_rng(seed)``: the rows are drawn first
(``integers(0, 4, n)``), then the factors (``lognormal(0, 0.4, (n, 4))``); n = max(pods, 1800). For each pod
count (100, 200, ... 1800) the first that many pods are placed on the empty cluster, each algorithm on its
own, and Z_avg (paper eq. 32–34, over requests' utilisation) is measured.

Algorithms (all on the same model, `policies.batch`):

- LRA, BRA: the paper's eq. 1 and 2 (cpu and memory scores), one pod at a time; every resource must fit.
- default: eyrie's `default` profile (kube-scheduler's LeastAllocated + BalancedAllocation, integer
  scores, Fit filter on all four resources) through the real `Scheduler`, one pod per cycle.
- S_N: the TBESK node score one pod at a time (the model's own greedy).
- BES, TBESK: the whole batch at once, population and iterations as given, fitness Σ S_N; a pod
  the optimiser leaves unassigned (it fits nowhere beside the batch) is then placed one by one by S_N where
  it still fits, as the scheduler's batch mode falls back to one-by-one placement.
- TBESK-Z: TBESK as the `tbesk-z` profile runs it: the pods in windows of `window` (20), each window
  optimised on the cluster the earlier ones filled, with Z_avg (the metric itself) as the fitness.
  Population, iterations and the fallback as TBESK. It decides pod k from the pods of its window and the
  windows before, so with counts that are whole windows it runs once and each count reads a prefix.
- TBESK+LS: TBESK's assignment finished by the reference's local search (single-pod moves that lower
  Σ Z(i)). Not the paper's algorithm: shown because TBESK alone does not get near the reference.
- reference: greedy on Z then the same local search: the yardstick for "how far from the best reachable".

Sequential algorithms decide pod k from pods 1..k-1 only, so they run once over all pods and each count
reads a prefix; the batch algorithms and the reference run once per count.

Trace mode (``trace``): the openb nodes and pod list of the Alibaba GPU 2023 trace (``evaluation.traces.
alibaba_gpu2023``), resources cpu, memory and GPUs (the trace has no bandwidth or disk, so those are
skipped), pods in creation order and never deleted, placed in consecutive batches of `batch` pods on the
cluster the earlier batches filled (each algorithm on its own copy). Candidates come from the `default`
profile's filters (GPU model affinity included). Pods that fit nowhere stay unplaced (counted).
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from policies.batch import (
    BatchProblem,
    BesParams,
    balanced_allocation,
    candidate_mask,
    greedy_score,
    least_requested,
    local_search_z,
    make_problem,
    optimise,
    optimise_windows,
    reference,
    total_fitness,
    utilisation,
    z_avg,
)
from policies.drive import make_scheduler
from policies.framework.contract import CycleContext
from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.scheduler import Placed
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest

__all__ = [
    "ALGORITHMS",
    "PAPER_LOAD",
    "PAPER_NODE_COUNTS",
    "PAPER_NODE_TYPES",
    "PAPER_POD_ROWS",
    "AlgorithmRun",
    "TbeskExperiment",
    "TbeskResult",
    "generate_pods",
    "headline",
    "paper_cluster",
    "paper_pods",
    "percent_below",
    "run_and_report",
    "run_tbesk_experiment",
    "write_tbesk_report",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

PAPER_NODE_TYPES: Final = (
    (16.0, 24574.0, 30.0, 800.0),
    (32.0, 32768.0, 30.0, 1000.0),
    (64.0, 49512.0, 40.0, 1200.0),
)
PAPER_NODE_COUNTS: Final = (11, 10, 10)
PAPER_POD_ROWS: Final = (
    (0.58, 212.0, 0.68, 1.47),
    (0.17, 247.0, 0.38, 1.93),
    (0.07, 225.0, 0.05, 1.71),
    (0.5, 383.0, 0.7, 14.87),
)
PAPER_LOAD: Final = (0.35, 0.45, 0.75, 0.70)
PAPER_PODS: Final = 1800
PAPER_RESOURCES: Final = ("cpu", "memory", "bandwidth", "disk")
PAPER_UNITS: Final = ("cores", "MB", "Gb/s", "GB")
LOGNORMAL_SIGMA: Final = 0.4

ALGORITHMS: Final = ("LRA", "BRA", "default", "S_N", "BES", "TBESK", "TBESK-Z", "TBESK+LS", "reference")
TRACE_ALGORITHMS: Final = ("LRA", "BRA", "S_N", "BES", "TBESK", "TBESK-Z", "TBESK+LS", "reference")
GPU: Final = "nvidia.com/gpu"
_MIB: Final = 2**20
_GIGA: Final = 10**9


@dataclass(frozen=True, slots=True)
class TbeskExperiment:
    pods: int = PAPER_PODS
    step: int = 100
    population: int = 30
    iterations: int = 100
    seed: int = 1
    window: int = 20
    """TBESK-Z's pods per window (the `tbesk-z` profile's batch_size)."""
    trace: Path | None = None
    trace_pods: str = "default"
    batch: int = 500
    trace_limit: int | None = None
    """At most this many trace pods (in creation order); None: the whole list."""

    def __post_init__(self) -> None:
        if not 1 <= self.pods <= 1_000_000:
            raise InvalidInput("must be in 1..1000000", field="pods")
        if not 1 <= self.step <= self.pods:
            raise InvalidInput("must be in 1..pods", field="step")
        if not 1 <= self.window <= 100_000:
            raise InvalidInput("must be in 1..100000", field="window")
        if not 1 <= self.batch <= 100_000:
            raise InvalidInput("must be in 1..100000", field="batch")
        if self.trace_limit is not None and self.trace_limit < 1:
            raise InvalidInput("must be at least 1", field="trace_limit")
        BesParams(population=self.population, iterations=self.iterations)  # validates both


@dataclass(frozen=True, slots=True)
class AlgorithmRun:
    algorithm: str
    pods: int
    """Pods offered so far (paper: the pod count; trace: pods in the batches so far)."""
    z_avg: float
    fitness: float
    """Σ S_N of the placed pods (the TBESK model's batch fitness); trace: summed over the batches, each
    batch's pods scored when it was placed."""
    placed: int
    seconds: float
    """Time to decide (paper: this count; trace: this batch)."""


@dataclass(slots=True)
class TbeskResult:
    source: str
    resources: tuple[str, ...]
    units: tuple[str, ...]
    algorithms: tuple[str, ...]
    runs: list[AlgorithmRun]
    capacity: FloatArray
    utilisation: dict[str, FloatArray] = field(repr=False)
    """Per algorithm, (nodes, resources) utilisation after the last count."""
    node_labels: list[str] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)

    def last(self) -> dict[str, AlgorithmRun]:
        top = max(run.pods for run in self.runs)
        return {run.algorithm: run for run in self.runs if run.pods == top}

    def seconds(self) -> dict[str, float]:
        """Paper: the time at the last count. Trace: the total over all batches."""
        if self.source == "paper":
            return {name: run.seconds for name, run in self.last().items()}
        totals: dict[str, float] = {}
        for run in self.runs:
            totals[run.algorithm] = totals.get(run.algorithm, 0.0) + run.seconds
        return totals

    def summary(self) -> dict[str, Any]:
        last = self.last()
        top = max(run.pods for run in self.runs)
        result: dict[str, Any] = {
            "pods": top,
            "z_avg": {name: round(last[name].z_avg, 4) for name in self.algorithms},
            "seconds": {name: round(value, 3) for name, value in self.seconds().items()},
        }
        if self.source == "trace":
            result["placed"] = {name: last[name].placed for name in self.algorithms}
        return result


# ------------------------------------------------------------------------------------ the paper's data


def paper_cluster() -> tuple[FloatArray, list[str]]:
    """(31, 4) capacities in the paper's units (cores, MB, Gb/s, GB), and each node's type label."""
    capacity = np.repeat(np.array(PAPER_NODE_TYPES), PAPER_NODE_COUNTS, axis=0)
    labels = [f"type {t + 1}" for t, count in enumerate(PAPER_NODE_COUNTS) for _ in range(count)]
    return capacity, labels


def generate_pods(
    count: int, capacity: FloatArray, seed: int = 1, *, reference: int | None = None
) -> FloatArray:
    """The experiment's pod generator on any cluster: (count, 4) requests in the paper's units, each
    column scaled so that the first `reference` pods (default `count`) load `capacity` to PAPER_LOAD. The
    rows are drawn first, then the factors, from one ``default_rng(seed)``; n = max(count, reference) pods
    are drawn, so a prefix of a longer run is the shorter run."""
    reference = count if reference is None else reference
    total = max(count, reference)
    rng = np.random.default_rng(seed)
    rows = rng.integers(0, len(PAPER_POD_ROWS), total)
    factors = rng.lognormal(0.0, LOGNORMAL_SIGMA, (total, len(PAPER_RESOURCES)))
    pods = np.array(PAPER_POD_ROWS)[rows] * factors
    scale = np.array(PAPER_LOAD) * capacity.sum(axis=0) / pods[:reference].sum(axis=0)
    scaled: FloatArray = pods[:count] * scale
    return scaled


def paper_pods(count: int, seed: int = 1) -> FloatArray:
    """The paper experiment's pods: the scale is fixed by the first 1,800 pods on the paper's cluster."""
    capacity, _ = paper_cluster()
    return generate_pods(count, capacity, seed, reference=PAPER_PODS)


def _counts(experiment: TbeskExperiment) -> list[int]:
    counts = list(range(experiment.step, experiment.pods + 1, experiment.step))
    if not counts or counts[-1] != experiment.pods:
        counts.append(experiment.pods)
    return counts


def _framework_default(capacity: FloatArray, pods: FloatArray) -> IntArray:
    """eyrie's `default` profile, one pod per cycle through the `Scheduler`, on the paper cluster in
    Kubernetes units (millicores, MiB → bytes, Gb/s → bit/s, GB → bytes; requests rounded up)."""
    scales = (1000, _MIB, _GIGA, _GIGA)

    def amounts(row: FloatArray) -> dict[str, Any]:
        return {
            name: math.ceil(value * unit)
            for name, value, unit in zip(PAPER_RESOURCES, row, scales, strict=True)
        }

    # The paper's model has no pod count limit.
    nodes = [
        NodeSpec.model_validate({"name": f"n{i:02d}", "capacity": amounts(row) | {"pods": 100_000}})
        for i, row in enumerate(capacity)
    ]
    scheduler = make_scheduler(nodes, "default")
    for i, row in enumerate(pods):
        scheduler.add_pod(PodRequest.model_validate({"uid": f"p{i:05d}", "requests": amounts(row)}), 0.0)
    assignment = np.full(len(pods), -1, dtype=np.int64)
    for outcome in scheduler.schedule(0.0):
        if isinstance(outcome, Placed):
            assignment[int(outcome.uid[1:])] = int(outcome.node[1:])
    return assignment


def _run(problem: BatchProblem, name: str, pods: int, assignment: IntArray, seconds: float) -> AlgorithmRun:
    return AlgorithmRun(
        algorithm=name,
        pods=pods,
        z_avg=z_avg(utilisation(problem, assignment), problem.applicable),
        fitness=total_fitness(problem, assignment),
        placed=int((assignment >= 0).sum()),
        seconds=seconds,
    )


def _decide(
    names: Sequence[str], problems: Mapping[str, BatchProblem], experiment: TbeskExperiment, seed: int
) -> dict[str, tuple[IntArray, float]]:
    """Each named algorithm on its problem: assignment and seconds. TBESK+LS reuses TBESK's assignment
    (and time) when both have the same problem."""
    params = BesParams(population=experiment.population, iterations=experiment.iterations)
    found: dict[str, tuple[IntArray, float]] = {}
    for name in names:
        problem = problems[name]
        started = time.perf_counter()
        if name == "LRA":
            assignment = least_requested(problem)
        elif name == "BRA":
            assignment = balanced_allocation(problem)
        elif name == "S_N":
            assignment = greedy_score(problem)
        elif name == "BES":
            assignment = greedy_score(problem, optimise(problem, "bes", params, seed=seed).assignment)
        elif name == "TBESK":
            assignment = greedy_score(problem, optimise(problem, "tbesk", params, seed=seed).assignment)
        elif name == "TBESK-Z":
            assignment = optimise_windows(
                problem, "tbesk", params, window=experiment.window, seed=seed, objective="z"
            )
        elif name == "TBESK+LS":
            earlier = found.get("TBESK")
            if earlier is not None and problems.get("TBESK") is problem:
                started -= earlier[1]
                assignment = local_search_z(problem, earlier[0])
            else:
                tbesk = greedy_score(problem, optimise(problem, "tbesk", params, seed=seed).assignment)
                assignment = local_search_z(problem, tbesk)
        elif name == "reference":
            assignment = reference(problem)
        else:
            raise InvalidInput(f"unknown algorithm {name!r}", field="algorithm")
        found[name] = (assignment, time.perf_counter() - started)
    return found


def _run_paper(experiment: TbeskExperiment, progress: Callable[[str], None] | None) -> TbeskResult:
    capacity, labels = paper_cluster()
    pods = paper_pods(experiment.pods, experiment.seed)
    full = make_problem(capacity, pods, resources=PAPER_RESOURCES)
    sequential = _decide(("LRA", "BRA", "S_N"), dict.fromkeys(("LRA", "BRA", "S_N"), full), experiment, 0)
    started = time.perf_counter()
    sequential["default"] = (_framework_default(capacity, pods), time.perf_counter() - started)
    counts = _counts(experiment)
    batch_names: tuple[str, ...] = ("BES", "TBESK", "TBESK+LS", "reference")
    if all(count % experiment.window == 0 for count in counts):
        sequential.update(_decide(("TBESK-Z",), {"TBESK-Z": full}, experiment, experiment.seed))
    else:
        batch_names += ("TBESK-Z",)
    runs: list[AlgorithmRun] = []
    last_assignments: dict[str, IntArray] = {}
    for count in counts:
        if progress is not None:
            progress(f"{count} pods")
        problem = make_problem(capacity, pods[:count], resources=PAPER_RESOURCES)
        found: dict[str, tuple[IntArray, float]] = {}
        for name, (assignment, seconds) in sequential.items():
            # A prefix of the sequential run; its time is the full run's scaled by the share of pods.
            found[name] = (assignment[:count], seconds * count / experiment.pods)
        found.update(_decide(batch_names, dict.fromkeys(batch_names, problem), experiment, experiment.seed))
        for name in ALGORITHMS:
            assignment, seconds = found[name]
            runs.append(_run(problem, name, count, assignment, seconds))
            last_assignments[name] = assignment
    final = make_problem(capacity, pods, resources=PAPER_RESOURCES)
    return TbeskResult(
        source="paper",
        resources=PAPER_RESOURCES,
        units=PAPER_UNITS,
        algorithms=ALGORITHMS,
        runs=runs,
        capacity=capacity,
        utilisation={name: utilisation(final, a) for name, a in last_assignments.items()},
        node_labels=labels,
        context={
            "cluster": "31 nodes: 11 × (16 cores, 24574 MB, 30 Gb/s, 800 GB), 10 × (32, 32768, 30, 1000), "
            "10 × (64, 49512, 40, 1200)",
            "pods": f"the paper's request rows × lognormal factors, seed {experiment.seed}; 1,800 pods "
            "load cpu 35 %, memory 45 %, bandwidth 75 %, disk 70 %",
            "pod counts": f"{counts[0]} → {counts[-1]} in steps of {experiment.step}",
            "optimisers": f"population {experiment.population}, {experiment.iterations} iterations, "
            f"seed {experiment.seed}; TBESK-Z in windows of {experiment.window} pods",
        },
    )


# ------------------------------------------------------------------------------------------ the trace


def _read_trace(experiment: TbeskExperiment) -> tuple[list[NodeSpec], list[PodRequest]]:
    from evaluation.traces.alibaba_gpu2023 import iter_alibaba_gpu2023
    from evaluation.traces.common import Report

    assert experiment.trace is not None
    nodes: list[NodeSpec] = []
    pods: list[PodRequest] = []
    for _, _, _, value in iter_alibaba_gpu2023(experiment.trace, Report(), pods=experiment.trace_pods):
        if isinstance(value, NodeEvent):
            nodes.append(value.node)
        elif isinstance(value, PodRequest):
            pods.append(value)
            if experiment.trace_limit is not None and len(pods) >= experiment.trace_limit:
                break
    if not nodes or not pods:
        raise InvalidInput(f"{experiment.trace}: no nodes or no pods in the trace", field="trace")
    return nodes, pods


def _run_trace(experiment: TbeskExperiment, progress: Callable[[str], None] | None) -> TbeskResult:
    nodes, pods = _read_trace(experiment)
    profile = parse_profile(BUILTIN_PROFILES["default"])
    snapshot = make_scheduler(nodes, profile).snapshot
    rows = snapshot.live_rows()
    names = ("cpu", "memory", GPU)
    present = tuple(name for name in names if name in snapshot.column)
    columns = [snapshot.column[name] for name in present]
    capacity = snapshot.allocatable[rows][:, columns].astype(np.float64)
    requests = np.zeros((len(pods), len(present)))
    allowed = np.zeros((len(pods), len(rows)), dtype=np.bool_)
    for i, pod in enumerate(pods):
        info = snapshot.pod_info(pod)
        for j, column in enumerate(columns):
            requests[i, j] = info.vector[column] if column < len(info.vector) else 0
        mask = candidate_mask(profile, CycleContext(pod, info, snapshot, 0.0))
        if mask is not None:
            allowed[i] = mask[rows]
    labels = [f"{spec.labels.get('gpu-model', 'cpu')}" for spec in nodes]

    algorithms = TRACE_ALGORITHMS
    loads = {name: np.zeros_like(capacity) for name in algorithms}
    assignments = {name: np.full(len(pods), -1, dtype=np.int64) for name in algorithms}
    fitness = dict.fromkeys(algorithms, 0.0)
    runs: list[AlgorithmRun] = []
    for start in range(0, len(pods), experiment.batch):
        batch = np.arange(start, min(start + experiment.batch, len(pods)))
        if progress is not None:
            progress(f"pods {batch[0]}..{batch[-1]}")
        done = int(batch[-1]) + 1
        seed = experiment.seed + start
        problems = {
            name: make_problem(
                capacity, requests[batch], resources=present, requested=loads[name], candidates=allowed[batch]
            )
            for name in algorithms
        }
        found = _decide(algorithms, problems, experiment, seed)
        for name in algorithms:
            assignment, seconds = found[name]
            placed = assignment >= 0
            fitness[name] += total_fitness(problems[name], assignment)
            np.add.at(loads[name], assignment[placed], requests[batch][placed])
            assignments[name][batch] = assignment
            util = np.divide(loads[name], capacity, out=np.zeros_like(capacity), where=capacity > 0)
            runs.append(
                AlgorithmRun(
                    algorithm=name,
                    pods=done,
                    z_avg=z_avg(util, capacity > 0),
                    fitness=fitness[name],
                    placed=int((assignments[name][:done] >= 0).sum()),
                    seconds=seconds,
                )
            )
    return TbeskResult(
        source="trace",
        resources=present,
        units=("millicores", "bytes", "GPUs")[: len(present)],
        algorithms=algorithms,
        runs=runs,
        capacity=capacity,
        utilisation={
            name: np.divide(load, capacity, out=np.zeros_like(capacity), where=capacity > 0)
            for name, load in loads.items()
        },
        node_labels=labels,
        context={
            "trace": str(experiment.trace),
            "cluster": f"{len(nodes)} openb nodes; resources {', '.join(present)} "
            "(no bandwidth or disk in the trace: skipped)",
            "pods": f"openb_pod_list_{experiment.trace_pods}.csv, {len(pods)} pods in creation order, "
            f"batches of {experiment.batch}, never deleted",
            "optimisers": f"population {experiment.population}, {experiment.iterations} iterations, "
            f"seed {experiment.seed} + the batch's first index; TBESK-Z in windows of {experiment.window} "
            "pods within each batch",
        },
    )


def run_tbesk_experiment(
    experiment: TbeskExperiment, progress: Callable[[str], None] | None = None
) -> TbeskResult:
    if experiment.trace is not None:
        return _run_trace(experiment, progress)
    return _run_paper(experiment, progress)


# ------------------------------------------------------------------------------------------ reporting


def _percent_below(value: float, base: float) -> str:
    return f"{(1 - value / base) * 100:.1f} %" if base > 0 else "-"


def _markdown(result: TbeskResult, title: str) -> str:
    last = result.last()
    top = max(run.pods for run in result.runs)
    lra, bra, ref = (last[name].z_avg if name in last else 0.0 for name in ("LRA", "BRA", "reference"))
    lines = [f"# {title}", "", *(f"- {key}: {value}" for key, value in result.context.items()), ""]
    spread_heads = " | ".join(f"{name} spread" for name in result.resources)
    lines += [
        f"## At {top} pods",
        "",
        "| algorithm | Z_avg | below LRA | below BRA | above reference | Σ S_N | placed | seconds | "
        + spread_heads
        + " |",
        "|---" * (8 + len(result.resources)) + "|",
    ]
    seconds = result.seconds()
    for name in result.algorithms:
        run = last[name]
        util = result.utilisation[name]
        applicable = result.capacity > 0
        spreads = []
        for j in range(len(result.resources)):
            values = util[applicable[:, j], j]
            spreads.append(f"{(values.max() - values.min()) * 100:.0f} %" if values.size else "-")
        above = f"{(run.z_avg / ref - 1) * 100:+.1f} %" if ref > 0 else "-"
        cells = [
            name,
            f"{run.z_avg:.4f}",
            _percent_below(run.z_avg, lra),
            _percent_below(run.z_avg, bra),
            above,
            f"{run.fitness:.1f}",
            str(run.placed),
            f"{seconds[name]:.2f}",
            *spreads,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "Spread: max − min per-node utilisation of the resource. Seconds: "
        + ("the time to decide this count." if result.source == "paper" else "summed over all batches."),
        "",
        "## Z_avg by pod count",
        "",
        "| pods | " + " | ".join(result.algorithms) + " |",
        "|---" * (len(result.algorithms) + 1) + "|",
    ]
    by_count: dict[int, dict[str, AlgorithmRun]] = {}
    for run in result.runs:
        by_count.setdefault(run.pods, {})[run.algorithm] = run
    for count in sorted(by_count):
        cells = [f"{by_count[count][name].z_avg:.4f}" for name in result.algorithms]
        lines.append(f"| {count} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _slug(resource: str) -> str:
    return resource.rsplit("/", 1)[-1].replace(".", "-")


def write_tbesk_report(result: TbeskResult, out: Path) -> list[Path]:
    """results.md, results.csv, z_avg.png (paper fig. 2), z_avg_bes.png (fig. 3) and one per-node
    utilisation plot per resource at the last count (figs. 4–7)."""
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    title = "TBESK paper experiment" if result.source == "paper" else "TBESK on the Alibaba GPU 2023 trace"
    table = out / "results.md"
    table.write_text(_markdown(result, title))
    written.append(table)

    csv_path = out / "results.csv"
    with csv_path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["pods", "algorithm", "z_avg", "fitness", "placed", "seconds"])
        for run in result.runs:
            writer.writerow(
                [
                    run.pods,
                    run.algorithm,
                    f"{run.z_avg:.6f}",
                    f"{run.fitness:.4f}",
                    run.placed,
                    f"{run.seconds:.4f}",
                ]
            )
    written.append(csv_path)

    by_name: dict[str, list[AlgorithmRun]] = {}
    for run in result.runs:
        by_name.setdefault(run.algorithm, []).append(run)
    styles = {"TBESK+LS": "--", "TBESK-Z": "--", "reference": ":", "default": "-."}
    for filename, names, caption in (
        (
            "z_avg.png",
            ("LRA", "BRA", "default", "TBESK", "TBESK-Z", "TBESK+LS", "reference"),
            "Z_avg (paper fig. 2)",
        ),
        ("z_avg_bes.png", ("BES", "TBESK", "S_N"), "Z_avg, BES against TBESK (paper fig. 3)"),
    ):
        figure, axis = plt.subplots(figsize=(7.5, 4.2))
        for name in names:
            if name in by_name:
                runs = by_name[name]
                axis.plot(
                    [r.pods for r in runs],
                    [r.z_avg for r in runs],
                    styles.get(name, "-"),
                    marker="o",
                    markersize=3,
                    label=name,
                )
        axis.set_xlabel("pods")
        axis.set_ylabel("Z_avg (lower is better)")
        axis.set_title(caption, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        path = out / filename
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)

    shown = [name for name in ("LRA", "BRA", "TBESK", "TBESK-Z") if name in result.utilisation]
    top = max(run.pods for run in result.runs)
    nodes = result.capacity.shape[0]
    for j, resource in enumerate(result.resources):
        figure, axis = plt.subplots(figsize=(9, 4))
        applicable = result.capacity[:, j] > 0
        for name in shown:
            values = result.utilisation[name][:, j] * 100
            if nodes <= 64:
                axis.plot(np.arange(1, nodes + 1), values, marker="o", markersize=3, label=name)
            else:  # too many nodes to tell apart: each algorithm's nodes sorted by utilisation
                ordered = np.sort(values[applicable])
                axis.plot(np.arange(1, len(ordered) + 1), ordered, label=name)
        axis.axhline(100, color="grey", linewidth=0.8)
        axis.set_xlabel("node" if nodes <= 64 else "nodes having the resource, sorted by utilisation")
        axis.set_ylabel(f"{resource} utilisation (%)")
        axis.set_title(f"{resource} utilisation per node at {top} pods", fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
        figure.tight_layout()
        path = out / f"utilisation_{_slug(resource)}.png"
        figure.savefig(path, dpi=110)
        plt.close(figure)
        written.append(path)
    return written


def percent_below(value: float, base: float) -> float:
    """How far `value` is below `base`, in percent."""
    return (1 - value / base) * 100 if base > 0 else 0.0


def headline(
    result: TbeskResult, names: Sequence[str] = ("BES", "TBESK", "TBESK-Z", "TBESK+LS", "reference")
) -> str:
    """One line per algorithm: Z_avg at the last count and how far below LRA and BRA."""
    last = result.last()
    lra, bra = last["LRA"].z_avg, last["BRA"].z_avg
    return "\n".join(
        f"{name}: Z_avg {last[name].z_avg:.4f}, {percent_below(last[name].z_avg, lra):.1f} % below LRA, "
        f"{percent_below(last[name].z_avg, bra):.1f} % below BRA"
        for name in names
        if name in last
    )


def run_and_report(
    experiment: TbeskExperiment, out: Path, progress: Callable[[str], None] | None = None
) -> tuple[TbeskResult, list[Path], str]:
    """Run, write the report to `out`, and return the text to print (the headline table, what was written;
    the caller prints the summary JSON last)."""
    result = run_tbesk_experiment(experiment, progress)
    written = write_tbesk_report(result, out)
    table = (out / "results.md").read_text().split("## Z_avg by pod count", 1)[0]
    section = table[table.index("## At") :].rstrip()
    text = f"{section}\n\n{headline(result)}\nwrote {', '.join(str(path) for path in written)}"
    return result, written, text
