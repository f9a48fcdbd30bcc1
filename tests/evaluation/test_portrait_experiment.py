"""The portrait experiment's setup rule (requests sized from usage, nodes sized from requests), its load
figures on hand-checked matrices, a tiny synthetic trace end to end, and a small run on the real Bitbrains
trace (skipped without it) that checks the setup puts the cluster under real load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from evaluation.experiments.portrait import (
    MIB,
    PortraitExperiment,
    histogram_percentile,
    interval_peaks,
    load_figures,
    node_size,
    run_portrait_experiment,
    run_portrait_seeds,
    usage_request,
)
from evaluation.experiments.report import across_seeds, write_portrait_report
from streams.cli import app
from tests.paths import BITBRAINS

GIB = 1024**3
HOUR = 3600
DAY = 24 * HOUR
START = 1_372_629_600  # 2013-07-01 00:00 UTC, a whole hour as in the trace
HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
    "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
    "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\t"
    "Network transmitted throughput [KB/s]"
)


def write_vm(
    folder: Path, vm: str, cores: int, memory_gib: float, used_cores: float, used_gib: float, hours: int
) -> None:
    """A Bitbrains VM file: `cores` of 2,000 MHz and `memory_gib` declared, the same usage every hour."""
    lines = [HEADER]
    for hour in range(hours):
        mhz = used_cores * 2000.0
        lines.append(
            f"{START + hour * HOUR};\t{cores};\t{cores * 2000.0};\t{mhz};\t{100 * used_cores / cores};\t"
            f"{memory_gib * 1024 * 1024};\t{used_gib * 1024 * 1024};\t0;\t0;\t0;\t0"
        )
    (folder / f"{vm}.csv").write_text("\n".join(lines) + "\n")


def experiment(folder: Path, **changes: object) -> PortraitExperiment:
    """Two days of hourly samples: the first trains, the second is replayed."""
    settings: dict[str, object] = {"trace": folder, "profiles": ("default",), "nodes": 1, "train_days": 1.0}
    settings.update(changes)
    return PortraitExperiment(**settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("values", "weights", "percentile", "expected"),
    [
        pytest.param([0.5, 2, 5], [1, 1, 1], 0.5, 3.0, id="The median's bucket [1, 3) answers its end, 3."),
        pytest.param([0.5, 2, 5], [1, 1, 1], 0.9, 7.0, id="The 90th percentile lies in [3, 7): 7."),
        pytest.param([0.5, 2, 5], [1, 1, 8], 0.5, 7.0, id="Weights count: a heavy 5 is the median."),
        pytest.param([1000], [1], 0.5, 127.0, id="Past the largest value: the last bucket's start."),
        pytest.param([5], [1], 0.0, 7.0, id="Percentile 0 is the first bucket with weight, not bucket 0."),
        pytest.param([], [], 0.9, 0.0, id="No samples: 0."),
    ],
)
def test_histogram_percentile(
    values: list[float], weights: list[float], percentile: float, expected: float
) -> None:
    # Buckets doubling from 1 (growth 100 %): [0, 1), [1, 3), [3, 7), [7, 15), … [63, 127), [127, ∞).
    found = histogram_percentile(values, weights, percentile, buckets=(1.0, 100.0), growth=1.0)
    assert found == expected


def test_interval_peaks_take_one_peak_per_day_from_the_first_sample() -> None:
    ends, peaks = interval_peaks([0, 10, DAY, DAY + 10, 3 * DAY], [1, 3, 2, 1, 5], DAY)
    # Day 2 has no sample and no peak; each peak is stamped with its day's end.
    assert ends.tolist() == [DAY, 2 * DAY, 4 * DAY] and peaks.tolist() == [3, 2, 5]


HOURLY = [hour * HOUR for hour in range(48)]
THREE_WEEKS = [hour * HOUR for hour in range(21 * 24)]


@pytest.mark.parametrize(
    ("ts", "samples", "memory", "ceiling", "expected"),
    [
        pytest.param(
            HOURLY,
            [0.4] * 48,
            False,
            8000,
            475,
            id="cpu asks for the end of its 90th percentile's bucket (0.4125 cores) plus 15 % (millicores).",
        ),
        pytest.param(
            THREE_WEEKS,
            [0.1] * (20 * 24) + [1.0] * 24,
            False,
            8000,
            1174,
            id="The last day weighs as much as all before it: one busy day in 21 sets the cpu request.",
        ),
        pytest.param(
            HOURLY,
            [10 * GIB if hour % 24 == 12 else 0.0 for hour in range(48)],
            True,
            64 * GIB,
            12965919540,
            id="Memory asks for its daily peak (10 GiB, bucket end 10.5 GiB, plus 15 %), one hour in 24.",
        ),
        pytest.param(
            HOURLY, [GIB] * 48, True, 0, 1238659777, id="Memory in bytes; no declared size: no ceiling."
        ),
        pytest.param(HOURLY, [0.0] * 48, True, 0, 250 * MIB, id="No memory used: the recommender's minimum."),
        pytest.param(
            HOURLY, [0.001] * 48, False, 0, 25, id="Usage under the cpu minimum asks for the minimum."
        ),
        pytest.param(HOURLY, [6.0] * 48, False, 4000, 4000, id="Never more than the VM declared."),
        pytest.param([], [], False, 2000, 2000, id="Without samples the declared size is asked for."),
    ],
)
def test_usage_request(
    ts: list[float], samples: list[float], memory: bool, ceiling: int, expected: int
) -> None:
    assert usage_request(ts, samples, memory=memory, ceiling=ceiling) == expected


@pytest.mark.parametrize(
    ("cpu", "memory", "nodes", "demand", "expected"),
    [
        pytest.param(
            [1000] * 10,
            [GIB] * 10,
            4,
            1.25,
            (2000, 2 * GIB),
            id="The requests are demand times the cluster's allocatable, per resource.",
        ),
        pytest.param(
            [1000] * 10,
            [GIB] * 10,
            4,
            1.0,
            (2500, 2560 * MIB),
            id="Demand 1 makes the requests exactly fill the cluster.",
        ),
        pytest.param(
            [500, 500, 4000], [GIB] * 3, 4, 1.0, (4000, GIB), id="A node holds at least the largest pod."
        ),
        pytest.param([1, 1, 1], [MIB + 1] * 3, 3, 1.0, (1, 2 * MIB), id="Memory is rounded up to a MiB."),
    ],
)
def test_node_size(
    cpu: list[int], memory: list[int], nodes: int, demand: float, expected: tuple[int, int]
) -> None:
    size = node_size(cpu, memory, nodes, demand)
    assert (size.cpu_millis, size.memory_bytes) == expected


@pytest.mark.parametrize(
    ("utilization", "expected"),
    [
        pytest.param(
            [[0.1, 0.1, 0.1], [0.5, 0.9, 1.2]],
            {
                "over_capacity": 1,
                "over_80": 2,
                "peak_std": 0.55,
                "low_share": 0.5,
                "high_share": 0.5,
                "low_hours_share": 3 / 6,
                "high_hours_share": 2 / 6,
                "busiest": 1.2,
            },
            id="A light node and an overloaded one: one low-load, one high-load node.",
        ),
        pytest.param(
            [[0.5, 0.5], [0.5, 0.5]],
            {
                "over_capacity": 0,
                "over_80": 0,
                "peak_std": 0.0,
                "low_share": 0.0,
                "high_share": 0.0,
                "low_hours_share": 0.0,
                "high_hours_share": 0.0,
                "busiest": 0.5,
            },
            id="Two nodes at half load: neither low nor high.",
        ),
        pytest.param(
            [[0.1, 0.9, 0.1, 0.9], [0.5, 0.5, 0.5, 0.5]],
            {
                "over_capacity": 0,
                "over_80": 2,
                "peak_std": 0.2,
                "low_share": 0.0,
                "high_share": 0.0,
                "low_hours_share": 2 / 8,
                "high_hours_share": 2 / 8,
                "busiest": 0.9,
            },
            id="A node swinging between idle and busy has a middling mean; its hours count low and high.",
        ),
        pytest.param(
            [[0.2, 0.8], [0.0, 0.0]],
            {
                "over_capacity": 0,
                "over_80": 0,
                "peak_std": 0.4,
                "low_share": 0.5,
                "high_share": 0.0,
                "low_hours_share": 2 / 4,
                "high_hours_share": 0.0,
                "busiest": 0.8,
            },
            id="Exactly 20 % and 80 % are neither low nor high; an empty node's hours are all low.",
        ),
        pytest.param(
            np.zeros((0, 0)),
            {
                "over_capacity": 0,
                "over_80": 0,
                "peak_std": 0,
                "low_share": 0,
                "high_share": 0,
                "low_hours_share": 0,
                "high_hours_share": 0,
                "busiest": 0,
            },
            id="No nodes or no hours: every figure is 0.",
        ),
    ],
)
def test_load_figures(utilization: list[list[float]], expected: dict[str, float]) -> None:
    assert load_figures(np.asarray(utilization, dtype=np.float64)) == pytest.approx(expected)


def test_a_tiny_synthetic_trace_end_to_end(tmp_path: Path) -> None:
    write_vm(tmp_path, "1", cores=2, memory_gib=4, used_cores=0.5, used_gib=1.0, hours=48)
    write_vm(tmp_path, "2", cores=1, memory_gib=2, used_cores=0.1, used_gib=0.5, hours=10)  # no replay
    runs, described = run_portrait_seeds(experiment(tmp_path, replicas=2), [1, 2])
    assert described["vms"] == 1 and described["vms_left_out"] == "bitbrains-2"
    # Each pod asks 582 m (0.5 cores fall in the bucket ending at 0.5057, plus 15 %) and 1,238,659,777 bytes
    # (1 GiB's bucket ends at 1.0771e9 bytes, plus 15 %); at demand 1.25 the one node has 2 × 582 / 1.25 =
    # 931.2, rounded up to 932 m (more than a pod, less than two), and 1,891 MiB.
    assert described["node_size"] == f"0.932 cores / {1891 * MIB / GIB:.2f} GiB"
    for results in runs:
        (result,) = results
        assert result.pods == 2 and result.pods_placed == 1  # the second pod does not fit by requests
        assert result.cores_placed == 0.582
        # One VM using 0.5 of 0.932 cores and 1 GiB of 1,891 MiB: the dominant share, every hour.
        assert result.busiest_node_hour == pytest.approx(max(0.5 / 0.932, 1024 / 1891))
        assert (result.low_load_share, result.high_load_share, result.node_hours_over_80) == (0, 0, 0)
    assert across_seeds(runs)["default"]["pods_placed"] == 1


def test_two_pods_on_a_node_sized_for_both_load_it_fully(tmp_path: Path) -> None:
    write_vm(tmp_path, "1", cores=2, memory_gib=4, used_cores=0.5, used_gib=1.0, hours=48)
    (result,) = run_portrait_experiment(experiment(tmp_path, replicas=2, demand=1.0))
    assert result.pods_placed == 2
    # 2 × 0.5 cores used of 2 × 0.582 requested (86 %), 2 GiB of 2,363 MiB (87 %) in each of the 23 replayed
    # hours (the 48 samples end at hour 47), so the node is high-load.
    assert result.busiest_node_hour == pytest.approx(2048 / 2363)
    assert result.node_hours_over_80 == 23 and result.high_load_share == 1.0
    assert (result.low_hours_share, result.high_hours_share) == (0.0, 1.0)


def test_declared_requests_are_the_vms_provisioned_size(tmp_path: Path) -> None:
    write_vm(tmp_path, "1", cores=2, memory_gib=4, used_cores=0.5, used_gib=1.0, hours=48)
    runs, described = run_portrait_seeds(
        experiment(tmp_path, requests="declared", demand=1.0, replicas=1), [1]
    )
    assert described["requested"] == "2 cores / 4.0 GiB"
    assert runs[0][0].busiest_node_hour == pytest.approx(0.25)


def test_the_report_shows_the_mean_and_range_over_seeds(tmp_path: Path) -> None:
    write_vm(tmp_path, "1", cores=2, memory_gib=4, used_cores=0.5, used_gib=1.0, hours=48)
    runs, _ = run_portrait_seeds(experiment(tmp_path, replicas=2), [1, 2])
    write_portrait_report(runs[0], tmp_path / "out", {"command": "test"}, runs)
    text = (tmp_path / "out" / "results.md").read_text()
    assert "## Mean over 2 seeds (min–max)" in text and "## Seed 1" in text and "## Seed 2" in text
    assert "| node-hours < 20 % | node-hours > 80 % |" in text
    assert len((tmp_path / "out" / "results.csv").read_text().splitlines()) == 1 + 2


def test_an_unknown_request_rule_is_a_one_line_error(tmp_path: Path) -> None:
    write_vm(tmp_path, "1", cores=2, memory_gib=4, used_cores=0.5, used_gib=1.0, hours=48)
    args = ["evaluate", "--experiment", "portrait", "--trace", str(tmp_path), "--out", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*args, "--requests", "guessed"])
    assert result.exit_code == 2
    assert result.output.strip() == "error: --requests: unknown 'guessed' (known: usage, declared)"


@pytest.mark.skipif(not BITBRAINS.is_dir(), reason=f"the Bitbrains trace is not at {BITBRAINS}")
def test_on_the_real_trace_the_setup_puts_the_cluster_under_real_load() -> None:
    profiles = ("default", "portrait")
    runs, described = run_portrait_seeds(PortraitExperiment(BITBRAINS, profiles=profiles), [42])
    usage = runs[0]
    declared = run_portrait_experiment(PortraitExperiment(BITBRAINS, profiles=profiles, requests="declared"))
    assert described["vms"] == 29  # 1.csv … 30.csv but 14.csv, whose usage starts after the training days
    for result in usage:
        # Requests set as the recommender would: the busiest node-hour is loaded but within capacity, and
        # no node-hour runs over it: the VM that fills 30 GiB some days (27.csv) asks for its daily peak.
        assert 0.3 < result.busiest_node_hour < 1.0
        assert result.node_hours_over_capacity == 0
        assert result.low_load_share < 1.0
    for result in declared:
        # Declared requests: the VMs use a few percent of them, nothing comes near capacity.
        assert result.busiest_node_hour < 0.3
        assert result.low_load_share == 1.0
