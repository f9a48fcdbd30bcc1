"""`eyrie evaluate --all` (the evaluation report): its metrics worked by hand on tiny clusters, the GPU-trace
replay on hand-made traces, and the command on a slice of the real traces (linked or sliced into a temporary
folder: the traces never enter the repository)."""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evaluation.experiments.metrics import gpu_fragmentation, over_capacity, spread, utilisation
from evaluation.experiments.portrait import PortraitExperiment, run_portrait_seeds
from evaluation.experiments.report import across_seeds
from evaluation.experiments.suite import GpuTrace, SuiteExperiment, replay_gpu_trace, run_suite
from policies.framework.profile import BUILTIN_PROFILES
from schemas.node import NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.cli import app
from tests.paths import ALIBABA_GPU_2023, BITBRAINS, TRACES

RUNNER = CliRunner()
NAN = math.nan

needs_traces = pytest.mark.skipif(
    not (ALIBABA_GPU_2023.is_dir() and BITBRAINS.is_dir()),
    reason=f"the Alibaba GPU 2023 and Bitbrains traces are not under {TRACES}",
)


# ------------------------------------------------------------------------------------ metrics by hand


@pytest.mark.parametrize(
    ("values", "nodes", "mean", "std", "spread_range"),
    [
        pytest.param([0.5, 0.5, 0.5], 3, 0.5, 0.0, 0.0, id="Equal nodes have no spread."),
        pytest.param(
            [0.25, 0.5, 1.0],
            3,
            7 / 12,
            math.sqrt(((0.25 - 7 / 12) ** 2 + (0.5 - 7 / 12) ** 2 + (1.0 - 7 / 12) ** 2) / 3),
            0.75,
            id="The spread is the population std and max minus min.",
        ),
        pytest.param(
            [0.0, NAN, 1.0, NAN],
            2,
            0.5,
            0.5,
            1.0,
            id="Nodes without the resource are left out, not counted as empty.",
        ),
        pytest.param([NAN, NAN], 0, 0.0, 0.0, 0.0, id="A resource no node has has no spread."),
    ],
)
def test_spread(values: list[float], nodes: int, mean: float, std: float, spread_range: float) -> None:
    found = spread(values)
    assert found.nodes == nodes
    assert found.mean == pytest.approx(mean)
    assert found.std == pytest.approx(std)
    assert found.range == pytest.approx(spread_range)


def test_utilisation_is_nan_where_a_node_lacks_the_resource() -> None:
    found = utilisation([[2.0, 1.0], [0.0, 0.0]], [[4.0, 0.0], [8.0, 2.0]])
    assert found[0, 0] == 0.5 and math.isnan(found[0, 1])
    assert found[1].tolist() == [0.0, 0.0]


@pytest.mark.parametrize(
    ("allocated", "total", "idle", "free", "used", "share"),
    [
        pytest.param([0, 0], [8, 4], 0, 12, 0, 0.0, id="An empty cluster has no idle GPU on a used node."),
        pytest.param(
            [0, 3, 4, 0],
            [8, 8, 4, 0],
            5,
            13,
            7,
            5 / 13,
            id="Only the free GPUs of a partly used node count; an empty or a full node adds none.",
        ),
        pytest.param(
            [1, 1],
            [4, 4],
            6,
            6,
            2,
            1.0,
            id="One GPU used on every node makes every free GPU a fragment.",
        ),
        pytest.param([2, 0], [4, 4], 2, 6, 2, 2 / 6, id="Packing leaves fewer fragments than spreading."),
        pytest.param([8, 8], [8, 8], 0, 0, 16, 0.0, id="A full cluster has no free GPU and a share of 0."),
        pytest.param(
            [5, 1],
            [4, 4],
            3,
            3,
            5,
            1.0,
            id="A node allocated beyond its GPUs has none free, not fewer than 0.",
        ),
    ],
)
def test_gpu_fragmentation(
    allocated: list[int], total: list[int], idle: int, free: int, used: int, share: float
) -> None:
    found = gpu_fragmentation(allocated, total)
    assert (found.idle_on_partly_used, found.free, found.allocated) == (idle, free, used)
    assert found.share == pytest.approx(share)


@pytest.mark.parametrize(
    ("load", "capacity", "over"),
    [
        pytest.param(
            [[4, 4], [5, 1]], [[4, 4], [4, 4]], [False, True], id="Reaching capacity is not over it."
        ),
        pytest.param([[0, 1]], [[4, 0]], [True], id="Any load on a resource the node lacks is over."),
        pytest.param(
            [[[1.0], [9.0]], [[3.0], [2.0]]],
            [[2.0], [8.0]],
            [[False, True], [True, False]],
            id="Node-hours: every hour of every node is judged on its own.",
        ),
    ],
)
def test_over_capacity(load: Any, capacity: Any, over: Any) -> None:
    assert over_capacity(load, capacity).tolist() == over


# ------------------------------------------------------------------------- the replay on tiny traces


def _node(name: str, cpu: str = "8", gpus: int = 4, memory: str = "32Gi") -> NodeSpec:
    return NodeSpec.model_validate(
        {"name": name, "capacity": {"cpu": cpu, "memory": memory, "nvidia.com/gpu": gpus, "pods": 110}}
    )


def _pod(uid: str, gpus: int = 1, cpu: str = "2", memory: str = "4Gi") -> PodRequest:
    requests: dict[str, Any] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = gpus
    return PodRequest.model_validate({"uid": uid, "requests": requests})


def _trace(nodes: list[NodeSpec], events: list[tuple[float, PodRequest | PodDeleted]]) -> GpuTrace:
    return GpuTrace(nodes, events, sum(isinstance(e, PodRequest) for _, e in events), 0)


TWO_NODES = _trace([_node("n1"), _node("n2")], [(0.0, _pod("a")), (1.0, _pod("b")), (2.0, _pod("c", gpus=8))])


@pytest.mark.parametrize(
    ("profile", "idle", "share", "gpu_std", "gpu_range", "cpu_std"),
    [
        pytest.param(
            "binpack",
            2,
            2 / 6,
            0.25,
            0.5,
            0.25,
            id="Binpack puts both one-GPU pods on one node: two idle GPUs beside them, a third of all free.",
        ),
        pytest.param(
            "default",
            6,
            1.0,
            0.0,
            0.0,
            0.0,
            id="Default spreads them: every free GPU sits on a partly used node.",
        ),
    ],
)
def test_the_replay_measures_fragmentation_and_spread_of_what_the_profile_placed(
    profile: str, idle: int, share: float, gpu_std: float, gpu_range: float, cpu_std: float
) -> None:
    result = replay_gpu_trace(profile, TWO_NODES)
    metrics = result.metrics()
    assert (metrics["pods"], metrics["placed"]) == (3, 2)
    # The 8-GPU pod fits no 4-GPU node.
    assert (metrics["unschedulable"], metrics["unschedulable_gpu"]) == (1, 1)
    assert metrics["gpus_allocated"] == 2
    assert metrics["idle_gpus_partly_used"] == idle
    assert metrics["idle_gpu_share"] == pytest.approx(share, abs=1e-4)
    assert metrics["gpu_std"] == pytest.approx(gpu_std)
    assert metrics["gpu_range"] == pytest.approx(gpu_range)
    assert metrics["cpu_std"] == pytest.approx(cpu_std)
    assert metrics["over_allocatable"] == 0
    # The three pods ask for 10 of the 8 GPUs, so the 80 % checkpoint is the end (fewer than 100 pods).
    assert (metrics["at80_pods"], metrics["at80_unplaced"]) == (3, 1)
    assert metrics["at80_idle_gpus_partly_used"] == idle


def test_cpu_only_pods_on_gpu_nodes_are_counted() -> None:
    # Each pod fits one node only: `a` (4 cores) the GPU node, `z` (48 GiB) the CPU node.
    trace = _trace(
        [_node("gpu", gpus=4), _node("cpu", cpu="2", gpus=0, memory="64Gi")],
        [
            (0.0, _pod("a", gpus=0, cpu="4")),
            (1.0, _pod("z", gpus=0, cpu="1", memory="48Gi")),
            (2.0, _pod("c")),
        ],
    )
    result = replay_gpu_trace("default", trace)
    assert (result.placed, result.cpu_pods_on_gpu_nodes) == (3, 1)
    assert result.metrics()["cpu_pods_on_gpu_nodes"] == 1


def test_a_batch_profile_places_its_last_partly_filled_batch() -> None:
    result = replay_gpu_trace("tbesk-z", TWO_NODES)
    assert (result.placed, result.unschedulable) == (2, 1)


def test_in_deletion_mode_the_figures_are_means_over_hourly_samples() -> None:
    events: list[tuple[float, PodRequest | PodDeleted]] = [
        (0.0, _pod("a")),
        (0.0, _pod("b")),
        (5400.0, PodDeleted(uid="a", ts=5400.0)),
        (9000.0, _pod("c", gpus=0)),
    ]
    result = replay_gpu_trace("default", _trace([_node("n1")], events), deletions=True)
    # Samples at 1 h (a and b: 2 of 4 GPUs) and 2 h (b: 1 of 4); the trace ends before 3 h.
    assert result.samples == 2
    assert result.gpus_allocated == pytest.approx(1.5)
    assert result.idle_gpus_partly_used == pytest.approx(2.5)
    assert result.idle_gpu_share == pytest.approx(1.0)
    assert (result.placed, result.unschedulable) == (3, 0)
    assert result.metrics()["gpus_allocated"] == 1.5


# ------------------------------------------------------------------------- the command on real traces


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every tenth openb node (CPU-only and GPU nodes) with the real pod list; three Bitbrains VMs."""
    root = tmp_path_factory.mktemp("traces")
    gpu = root / "alibaba_gpu_v2023"
    gpu.mkdir()
    lines = (ALIBABA_GPU_2023 / "openb_node_list_all_node.csv").read_text().splitlines()
    (gpu / "openb_node_list_all_node.csv").write_text("\n".join([lines[0], *lines[1::10]]) + "\n")
    (gpu / "openb_pod_list_default.csv").symlink_to(ALIBABA_GPU_2023 / "openb_pod_list_default.csv")
    bitbrains = root / "bitbrains_rnd_2013-7"
    bitbrains.mkdir()
    for vm in (1, 9, 28):
        (bitbrains / f"{vm}.csv").symlink_to(BITBRAINS / f"{vm}.csv")
    return root


def run(traces: Path, out: Path, *extra: str) -> tuple[dict[str, Any], str]:
    args = ["evaluate", "--all", "--trace", str(traces), "--out", str(out), "--nodes", "3", *extra]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, result.output
    summary: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return summary, result.stdout


@needs_traces
def test_the_report_covers_every_built_in_profile_and_writes_its_files(traces: Path, tmp_path: Path) -> None:
    summary, stdout = run(traces, tmp_path, "--trace-limit", "60")
    assert list(summary) == list(BUILTIN_PROFILES)
    for entry in summary.values():
        gpu = entry["gpu_trace"]
        assert gpu["pods"] == 60
        assert gpu["placed"] + gpu["unschedulable"] == 60
        assert 0.0 <= gpu["idle_gpu_share"] <= 1.0
        assert {"cpu_std", "memory_range", "gpu_std", "over_allocatable"} <= set(gpu)
        assert {"node_hours_over_capacity", "pods_placed", "mean_util_std"} <= set(entry["bitbrains"])
    written = ["results.md", "results.csv", "metrics.png", "gpu_utilisation.png", "portrait/results.md"]
    for name in written:
        assert (tmp_path / name).stat().st_size > 0
    table = (tmp_path / "results.md").read_text()
    assert "eyrie evaluate --all" in table and "idle GPUs on partly used nodes" in table
    assert "node-hours > capacity" in table
    assert len((tmp_path / "results.csv").read_text().splitlines()) == 1 + len(BUILTIN_PROFILES)
    assert "| tbesk-z |" in stdout


@needs_traces
def test_the_portrait_options_reach_the_reports_portrait_part(traces: Path, tmp_path: Path) -> None:
    extra = ["--trace-limit", "20", "--policy", "default", "--policy", "portrait", "--seed", "7"]
    extra += ["--requests", "declared", "--demand", "2", "--seeds", "2"]
    summary, _ = run(traces, tmp_path, *extra)
    table = (tmp_path / "results.md").read_text()
    assert "requests declared, demand 2, seeds 7, 8" in table
    assert "--requests declared --demand 2 --seeds 2" in table
    assert "## Mean over 2 seeds (min–max)" in (tmp_path / "portrait" / "results.md").read_text()
    # The same figures as the portrait experiment run on its own with these options.
    setup = PortraitExperiment(
        traces / "bitbrains_rnd_2013-7",
        profiles=("default", "portrait"),
        nodes=3,
        seed=7,
        requests="declared",
        demand=2.0,
    )
    runs, _ = run_portrait_seeds(setup, [7, 8])
    for profile, means in across_seeds(runs).items():
        for key, value in means.items():
            assert summary[profile]["bitbrains"][key] == pytest.approx(value), (profile, key)


@pytest.mark.parametrize(
    ("option", "field"),
    [
        pytest.param("nodes", "portrait_nodes", id="The report's portrait nodes default as --nodes does."),
        pytest.param("replicas", "replicas", id="The report's replicas default as --replicas does."),
        pytest.param("requests", "portrait_requests", id="The report's requests default as --requests does."),
        pytest.param("demand", "portrait_demand", id="The report's demand defaults as --demand does."),
        pytest.param("seeds", "portrait_seeds", id="The report's seeds default as --seeds does."),
    ],
)
def test_the_suite_defaults_are_the_commands(option: str, field: str) -> None:
    from streams.cli.main import evaluate

    default = inspect.signature(evaluate).parameters[option].default
    assert getattr(SuiteExperiment(), field) == default


@needs_traces
def test_the_report_is_deterministic(traces: Path, tmp_path: Path) -> None:
    extra = ("--trace-limit", "40", "--policy", "binpack", "--policy", "tbesk-z", "--seed", "7")
    first, _ = run(traces, tmp_path / "a", *extra)
    second, _ = run(traces, tmp_path / "b", *extra)
    assert first == second
    assert (tmp_path / "a" / "results.csv").read_bytes() == (tmp_path / "b" / "results.csv").read_bytes()


@needs_traces
def test_two_processes_give_the_same_figures_as_one(traces: Path) -> None:
    setup = SuiteExperiment(traces=traces, profiles=("binpack", "tbesk-z"), limit=40, bitbrains=False)
    one = run_suite(setup).summary()
    two = run_suite(dataclasses.replace(setup, jobs=2)).summary()
    assert one == two
    assert list(two) == ["binpack", "tbesk-z"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--all", "--experiment", "portrait"], "not both", id="--all with --experiment is refused."
        ),
        pytest.param([], "--experiment: required", id="Neither --all nor --experiment is refused."),
        pytest.param(
            ["--experiment", "portrait", "--deletions"], "only with --all", id="--deletions needs --all."
        ),
        pytest.param(
            ["--experiment", "portrait", "--jobs", "2"], "only with --all", id="--jobs needs --all."
        ),
        pytest.param(
            ["--all", "--policy", "fastest"], "no built-in profile", id="An unknown profile is refused."
        ),
        pytest.param(
            ["--all", "--policy", "binpack", "--policy", "binpack"],
            "named twice",
            id="A profile named twice is refused.",
        ),
        pytest.param(
            ["--all", "--trace", "{empty}"], "no such folder", id="A folder without the traces is refused."
        ),
        pytest.param(
            ["--all", "--requests", "guessed"],
            "--requests: unknown 'guessed' (known: usage, declared)",
            id="With --all an unknown request rule is refused as with the portrait experiment.",
        ),
        pytest.param(
            ["--all", "--pods", "300"],
            "--pods: only with --experiment tbesk-paper",
            id="With --all a tbesk-paper option is refused, not ignored.",
        ),
        pytest.param(
            ["--all", "--pod-list", "default"],
            "--pod-list: only with --experiment gpu-sharing",
            id="With --all a gpu-sharing option is refused, not ignored.",
        ),
        pytest.param(
            ["--experiment", "portrait", "--trace", "{empty}", "--window", "20"],
            "--window: only with --experiment tbesk-paper",
            id="The portrait experiment refuses a tbesk-paper option even at its default value.",
        ),
        pytest.param(
            ["--experiment", "tbesk-paper", "--seeds", "2"],
            "--seeds: only with --experiment portrait or --all",
            id="The tbesk-paper experiment refuses the portrait experiment's seeds.",
        ),
        pytest.param(
            ["--experiment", "gpu-sharing", "--demand", "1.5"],
            "--demand: only with --experiment portrait or --all",
            id="The gpu-sharing experiment refuses the portrait experiment's demand.",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path: Path, args: list[str], message: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    args = [str(empty) if arg == "{empty}" else arg for arg in args]
    result = RUNNER.invoke(app, ["evaluate", *args, "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
