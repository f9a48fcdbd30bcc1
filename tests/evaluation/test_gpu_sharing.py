"""The GPU-sharing experiment (`eyrie evaluate --experiment gpu-sharing`): the arrival sequence (shuffle,
inflation, seed), the metric on hand-made clusters, every openb pod list converting faithfully, the CLI's
one-line errors, and a run on the head of the real default pod list."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evaluation.experiments.gpu_sharing import (
    GPU_NODE_LIST,
    MILLI,
    build_sequence,
    demand_of,
    fgd_workload,
    fragmentation_ratio,
    prefixed_nodes,
    read_pod_list,
    replay,
    typical_pods,
)
from policies.framework.profile import BUILTIN_PROFILES
from streams.cli import app
from tests.paths import ALIBABA_GPU_2023

RUNNER = CliRunner()
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"


def write_trace(folder: Path, nodes: list[str], pods: list[str], name: str = "tiny") -> Path:
    """A trace folder in the openb layout: node rows ``sn,cpu,mem,gpu,model``, pod rows ``name,cpu,mem,
    num_gpu,gpu_milli,gpu_spec`` (qos LS, times filled in by position)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / GPU_NODE_LIST).write_text("\n".join([NODE_HEADER, *nodes]) + "\n")
    rows = [f"{pod},LS,Running,{i},,{i}" for i, pod in enumerate(pods)]
    (folder / f"openb_pod_list_{name}.csv").write_text("\n".join([POD_HEADER, *rows]) + "\n")
    return folder


def pods_of(count: int, milli: int = 1000, num: int = 1) -> list[str]:
    return [f"p{i:03d},1000,1024,{num},{milli}," for i in range(count)]


# --- the arrival sequence -------------------------------------------------------------------------------


def test_inflation_stops_at_the_last_pod_that_keeps_the_demand_within_the_target(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, ["n0,64000,65536,4,V100M16"], pods_of(3, milli=300))
    pod_list = read_pod_list(trace, "tiny")
    sequence = build_sequence(pod_list.pods, pod_list.cluster.capacity_milli, inflation=1.3, seed=42)
    demand = sum(demand_of(pod).total for pod in sequence)
    # 130 % of 4 cards is 5,200 milli: 17 pods of 300 (5,100) fit, an 18th would not.
    assert demand == 5100
    assert len(sequence) == 17
    assert {pod.uid for pod in sequence[:3]} == {"p000", "p001", "p002"}
    assert all("-tuned-" in pod.uid for pod in sequence[3:])
    assert len({pod.uid for pod in sequence}) == len(sequence)


def test_the_sequence_depends_on_the_seed_alone(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, ["n0,64000,65536,8,V100M16"], pods_of(20, milli=250))
    pod_list = read_pod_list(trace, "tiny")
    capacity = pod_list.cluster.capacity_milli

    def uids(seed: int) -> list[str]:
        return [pod.uid for pod in build_sequence(pod_list.pods, capacity, seed=seed)]

    assert uids(42) == uids(42)
    assert uids(42) != uids(43)
    # The file order does not matter: the list is sorted by name before the shuffle.
    reversed_order = build_sequence(list(reversed(pod_list.pods)), capacity, seed=42)
    assert [pod.uid for pod in reversed_order] == uids(42)


def test_a_list_above_the_target_loses_pods_until_it_is_within_it(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, ["n0,64000,65536,2,V100M16"], pods_of(10))
    pod_list = read_pod_list(trace, "tiny")
    sequence = build_sequence(pod_list.pods, pod_list.cluster.capacity_milli, inflation=1.3, seed=1)
    assert sum(demand_of(pod).total for pod in sequence) == 2000
    assert all("-tuned-" not in pod.uid for pod in sequence)


# --- the metric -----------------------------------------------------------------------------------------


def test_levels_report_unallocated_capacity_and_failed_pods_when_the_demand_first_reaches_them(
    tmp_path: Path,
) -> None:
    # Two cards; whole-card pods arrive: 50 %, 100 %, 150 % of the capacity. The third cannot fit.
    trace = write_trace(tmp_path, ["n0,64000,65536,2,V100M16"], pods_of(3))
    pod_list = read_pod_list(trace, "tiny")
    run = replay(pod_list, pod_list.pods, "default", levels=(50, 100, 150))
    rows = {row.level: row for row in run.levels}
    assert [rows[level].pods for level in (50, 100, 150)] == [1, 2, 3]
    assert [rows[level].unallocated for level in (50, 100, 150)] == [50.0, 0.0, 0.0]
    assert [rows[level].failed for level in (50, 100, 150)] == [0, 0, 1]
    assert (run.placed, run.failed) == (2, 1)


def test_a_level_the_sequence_never_reaches_is_not_reported(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, ["n0,64000,65536,4,V100M16"], pods_of(1))
    pod_list = read_pod_list(trace, "tiny")
    run = replay(pod_list, pod_list.pods, "default", levels=(10, 80))
    assert [row.level for row in run.levels] == [10]


@pytest.mark.skipif("gpu-share" not in BUILTIN_PROFILES, reason="the gpu-share profile is not built in yet")
def test_sharing_profiles_put_two_shares_on_one_card_where_whole_cards_fail_the_second(
    tmp_path: Path,
) -> None:
    trace = write_trace(tmp_path, ["n0,64000,65536,1,V100M16"], [*pods_of(2, milli=400)])
    pod_list = read_pod_list(trace, "tiny")
    shared = replay(pod_list, pod_list.pods, "gpu-share", levels=(80,))
    assert shared.levels[0].unallocated == pytest.approx(20.0)
    assert shared.levels[0].failed == 0


def test_gpu_share_batch_places_a_window_largest_first_where_fgd_in_arrival_order_fails_the_big_pod(
    tmp_path: Path,
) -> None:
    # Two cards: a 300-milli share, then a two-card pod. One by one, the share breaks a card and the pair
    # fails; in one window the pair goes first and the share fails: 2,000 of the 2,300 milli are placed.
    trace = write_trace(
        tmp_path, ["n0,64000,65536,2,V100M16"], ["p0,1000,1024,1,300,", "p1,1000,1024,2,1000,"]
    )
    pod_list = read_pod_list(trace, "tiny")
    one_by_one = replay(pod_list, pod_list.pods, "gpu-share", levels=(115,))
    window = replay(pod_list, pod_list.pods, "gpu-share-batch", levels=(115,))
    assert (one_by_one.levels[0].unallocated, one_by_one.levels[0].failed) == (pytest.approx(85.0), 1)
    assert (window.levels[0].unallocated, window.levels[0].failed) == (pytest.approx(0.0), 1)
    assert window.levels[0].pending == 0


def test_a_batch_profile_s_queued_pods_are_placed_before_a_level_is_read(tmp_path: Path) -> None:
    # Four shares of 250 on one card: each 25 % of the capacity. The window (8 pods) never fills, so
    # every level's reading waits out the batch: nothing is pending when it is read.
    trace = write_trace(tmp_path, ["n0,64000,65536,1,V100M16"], pods_of(4, milli=250))
    pod_list = read_pod_list(trace, "tiny")
    run = replay(pod_list, pod_list.pods, "gpu-share-batch", levels=(25, 50, 100))
    assert [(row.pods, row.pending, row.unallocated) for row in run.levels] == [
        (1, 0, pytest.approx(75.0)),
        (2, 0, pytest.approx(50.0)),
        (4, 0, pytest.approx(0.0)),
    ]


FRAG_CASES = [
    pytest.param(
        [[1000, 1000]],
        [8000],
        [(1.0, 1000, 500, 1)],
        (0.0, 2000.0),
        id="Free cards that fit the pod are not fragmented.",
    ),
    pytest.param(
        [[300, 1000]],
        [8000],
        [(1.0, 1000, 500, 1)],
        (300.0, 1300.0),
        id="Only the card too small for the pod is fragmented.",
    ),
    pytest.param(
        [[1000, 1000]],
        [0],
        [(1.0, 1000, 500, 1)],
        (2000.0, 2000.0),
        id="A node without the CPU for the pod is all fragmented.",
    ),
    pytest.param(
        [[1000, 600]],
        [8000],
        [(1.0, 1000, 1000, 2)],
        (1600.0, 1600.0),
        id="Two whole cards needed and one free: all fragmented.",
    ),
    pytest.param(
        [[1000, -1]],
        [8000],
        [(1.0, 1000, 0, 0)],
        (1000.0, 1000.0),
        id="A CPU pod counts every free GPU as fragmented.",
    ),
    pytest.param(
        [[500, 500], [1000, 1000]],
        [8000, 8000],
        [(0.5, 1000, 1000, 1), (0.5, 1000, 500, 1)],
        (500.0, 3000.0),
        id="Typical pods weigh by their share: a half-full node is fragmented for the whole-card half.",
    ),
]


@pytest.mark.parametrize(("free", "cpu", "specs", "expected"), FRAG_CASES)
def test_fragmentation_follows_the_simulator_s_measure(
    free: list[list[int]],
    cpu: list[int],
    specs: list[tuple[float, int, int, int]],
    expected: tuple[float, float],
) -> None:
    from evaluation.experiments.gpu_sharing import _Typical

    typical = _Typical(
        weight=np.array([s[0] for s in specs]),
        cpu=np.array([s[1] for s in specs], np.int64),
        milli=np.array([s[2] for s in specs], np.int64),
        count=np.array([s[3] for s in specs], np.int64),
        models=tuple(() for _ in specs),
    )
    models = ["V100M16"] * len(free)
    got = fragmentation_ratio(np.array(free, np.int64), np.array(cpu, np.int64), models, typical)
    assert got == pytest.approx(expected)


def test_a_node_of_another_model_is_fragmented_for_a_pod_that_needs_a_model(tmp_path: Path) -> None:
    trace = write_trace(
        tmp_path, ["n0,64000,65536,1,T4", "n1,64000,65536,1,V100M16"], ["p0,1000,1024,1,500,V100M16"]
    )
    pod_list = read_pod_list(trace, "tiny")
    typical = typical_pods(pod_list.pods)
    free = np.full((2, 1), MILLI, np.int64)
    got = fragmentation_ratio(free, pod_list.cluster.cpu, pod_list.cluster.model, typical)
    assert got == pytest.approx((1000.0, 2000.0))


def test_typical_pods_cover_the_popular_specs_up_to_95_percent(tmp_path: Path) -> None:
    pods = [*pods_of(19, milli=500), "z,2000,1024,1,1000,"]
    trace = write_trace(tmp_path, ["n0,64000,65536,1,V100M16"], pods)
    typical = typical_pods(read_pod_list(trace, "tiny").pods)
    assert typical.milli.tolist() == [500]
    # The simulator renormalises the shares over the specs kept.
    assert typical.weight.tolist() == [1.0]


def test_fgd_is_given_the_pod_list_s_typical_pods_and_nodes_get_the_simulator_s_prefixes(
    tmp_path: Path,
) -> None:
    trace = write_trace(
        tmp_path,
        ["n0,64000,65536,2,V100M16", "n1,64000,65536,2,V100M16", "n2,64000,65536,2,V100M16"],
        [*pods_of(3, milli=500), "z,2000,1024,0,0,"],
    )
    pod_list = read_pod_list(trace, "tiny")
    workload = fgd_workload(typical_pods(pod_list.pods))
    assert [(e["gpuMilli"], e["gpuCount"], e["weight"]) for e in workload] == [(500, 1, 0.75), (0, 0, 0.25)]
    names = [spec.name for spec in prefixed_nodes(pod_list.cluster.nodes, 42)]
    assert sorted(name.split("-", 1)[0] for name in names) == ["0000", "0001", "0002"]
    assert [name.split("-", 1)[1] for name in names] == ["n0", "n1", "n2"]
    assert names == [spec.name for spec in prefixed_nodes(pod_list.cluster.nodes, 42)]


# --- the real pod lists ---------------------------------------------------------------------------------

needs_trace = pytest.mark.skipif(
    not ALIBABA_GPU_2023.is_dir(), reason=f"the Alibaba GPU 2023 trace is not at {ALIBABA_GPU_2023}"
)
POD_LISTS = sorted(
    path.stem.removeprefix("openb_pod_list_") for path in ALIBABA_GPU_2023.glob("openb_pod_list_*.csv")
)


@needs_trace
@pytest.mark.parametrize("name", POD_LISTS or ["default"])
def test_every_openb_pod_list_converts_faithfully(name: str) -> None:
    pod_list = read_pod_list(ALIBABA_GPU_2023, name)
    by_name = {pod.name: pod for pod in pod_list.pods}
    with (ALIBABA_GPU_2023 / f"openb_pod_list_{name}.csv").open(newline="") as stream:
        rows = list(csv.DictReader(stream))
    assert len(by_name) == len(rows)
    for row in rows:
        pod = by_name[row["name"]]
        demand = demand_of(pod)
        num_gpu, gpu_milli = int(row["num_gpu"]), int(row["gpu_milli"])
        assert demand.count == num_gpu, row
        assert demand.milli == (0 if num_gpu == 0 else gpu_milli if num_gpu == 1 else MILLI), row
        if num_gpu:
            assert demand.models == tuple(sorted(m for m in (row.get("gpu_spec") or "").split("|") if m)), row
        requests = pod.effective_requests
        assert requests["cpu"] == int(row["cpu_milli"]), row
        assert requests["memory"] == int(row["memory_mib"]) << 20, row


@needs_trace
def test_the_gpu_node_list_is_the_simulator_s_cluster() -> None:
    pod_list = read_pod_list(ALIBABA_GPU_2023, "default", limit=1)
    assert len(pod_list.cluster.nodes) == 1213
    assert pod_list.cluster.capacity_milli == 6212 * MILLI


@needs_trace
def test_the_cli_runs_the_head_of_the_real_default_pod_list(tmp_path: Path) -> None:
    trace = tmp_path / "trace"
    trace.mkdir()
    nodes = (ALIBABA_GPU_2023 / GPU_NODE_LIST).read_text().splitlines()[:41]  # 40 nodes
    (trace / GPU_NODE_LIST).write_text("\n".join(nodes) + "\n")
    pods = (ALIBABA_GPU_2023 / "openb_pod_list_default.csv").read_text().splitlines()[:301]
    (trace / "openb_pod_list_default.csv").write_text("\n".join(pods) + "\n")
    out = tmp_path / "out"
    result = RUNNER.invoke(
        app,
        [
            *("evaluate", "--experiment", "gpu-sharing", "--trace-dir", str(trace), "--pod-list", "default"),
            *("--profiles", "default", "--out", str(out), "--seed", "7"),
        ],
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    levels = summary["default"]["default"]["levels"]
    assert list(levels) == ["80", "90", "100", "110", "120"]
    for row in levels.values():
        assert 0 <= row["unallocated_pct"] <= 100
        assert 0 <= row["frag_ratio_pct"] <= 100
    failed = [row["failed_pods"] for row in levels.values()]
    assert failed == sorted(failed)
    assert levels["120"]["failed_pods"] > 0  # 120 % of the capacity cannot all fit
    for name in ("gpu_sharing.md", "gpu_sharing.csv", "gpu_sharing_default.png"):
        assert (out / name).stat().st_size > 0
    assert "| default |" in (out / "gpu_sharing.md").read_text()


# --- the CLI's errors -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--trace-dir", "{missing}"], "no such folder", id="A missing trace folder is refused."),
        pytest.param(
            ["--trace-dir", "{empty}"], GPU_NODE_LIST, id="A folder without the node list is refused."
        ),
        pytest.param(
            ["--trace-dir", "{tiny}", "--pod-list", "nosuch"], "nosuch", id="A missing pod list is refused."
        ),
        pytest.param(
            ["--trace-dir", "{tiny}", "--pod-list", "tiny", "--profiles", "fastest"],
            "no built-in profile",
            id="An unknown profile is refused.",
        ),
        pytest.param(
            ["--trace-dir", "{tiny}", "--pod-list", "tiny", "--profiles", "default,"],
            "empty profile",
            id="An empty profile name is refused.",
        ),
        pytest.param(
            ["--trace-dir", "{tiny}", "--pod-list", "bad"],
            "did not convert",
            id="A pod list with bad rows is refused.",
        ),
    ],
)
def test_bad_input_is_a_one_line_error(tmp_path: Path, args: list[str], message: str) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    tiny = write_trace(tmp_path / "tiny", ["n0,64000,65536,2,V100M16"], pods_of(2))
    (tiny / "openb_pod_list_bad.csv").write_text(POD_HEADER + "\np0,1000,1024,1,1500,,LS,Running,0,,0\n")
    places = {"{missing}": str(tmp_path / "missing"), "{empty}": str(empty), "{tiny}": str(tiny)}
    args = [places.get(arg, arg) for arg in args]
    result = RUNNER.invoke(
        app, ["evaluate", "--experiment", "gpu-sharing", *args, "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.output.startswith("error: ")
    assert not (tmp_path / "out").exists()


def test_gpu_sharing_options_need_the_gpu_sharing_experiment(tmp_path: Path) -> None:
    result = RUNNER.invoke(
        app, ["evaluate", "--experiment", "portrait", "--pod-list", "default", "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 2, result.output
    assert "only with --experiment gpu-sharing" in result.output
