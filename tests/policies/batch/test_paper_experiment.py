"""`eyrie evaluate --experiment tbesk-paper`: its fixed pod generator, the report, the trace variant."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from evaluation.experiments.tbesk import PAPER_LOAD, paper_cluster, paper_pods
from streams.cli import app
from tests.paths import ALIBABA_GPU_2023

RUNNER = CliRunner()
SMALL = ["--pods", "200", "--step", "100", "--population", "6", "--iterations", "4"]


def evaluate(*args: str) -> tuple[int, str, dict]:
    result = RUNNER.invoke(app, ["evaluate", "--experiment", "tbesk-paper", *args])
    lines = result.stdout.strip().splitlines()
    last = json.loads(lines[-1]) if result.exit_code == 0 else {}
    return result.exit_code, result.output, last


def test_the_generator_loads_the_paper_cluster_to_the_levels_of_its_figures_at_1800_pods():
    capacity, labels = paper_cluster()
    pods = paper_pods(1800, seed=1)
    assert capacity.shape == (31, 4) and labels.count("type 1") == 11
    np.testing.assert_allclose(pods.sum(axis=0) / capacity.sum(axis=0), PAPER_LOAD, rtol=1e-12)


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        pytest.param(
            (300, 1), (1800, 1), True, id="Fewer pods are a prefix of more pods with the same seed."
        ),
        pytest.param((300, 1), (300, 1), True, id="The same seed gives the same pods."),
        pytest.param((300, 1), (300, 2), False, id="Another seed gives other pods."),
    ],
)
def test_the_generator_is_a_fixed_seeded_sequence(first, second, same):
    a = paper_pods(first[0], seed=first[1])
    b = paper_pods(second[0], seed=second[1])[: len(a)]
    assert np.array_equal(a, b) == same


def test_the_paper_experiment_writes_its_table_csv_and_figures_and_ends_with_the_summary(tmp_path):
    code, output, summary = evaluate(*SMALL, "--out", str(tmp_path))
    assert code == 0, output
    assert summary["pods"] == 200
    assert {"LRA", "BRA", "BES", "TBESK", "TBESK-Z", "TBESK+LS", "reference"} <= set(summary["z_avg"])
    assert set(summary["seconds"]) == set(summary["z_avg"])
    for name in ("results.md", "results.csv", "z_avg.png", "z_avg_bes.png"):
        assert (tmp_path / name).stat().st_size > 0
    for resource in ("cpu", "memory", "bandwidth", "disk"):
        assert (tmp_path / f"utilisation_{resource}.png").stat().st_size > 0
    rows = (tmp_path / "results.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 * 9  # two pod counts × nine algorithms
    # The reference's local search on Z_avg is never worse than the greedy it starts from, and LRA never
    # overfills: everyone placed every pod.
    assert summary["z_avg"]["reference"] <= summary["z_avg"]["LRA"]


def test_the_paper_experiment_is_deterministic_for_a_seed(tmp_path):
    _, _, first = evaluate(*SMALL, "--seed", "3", "--out", str(tmp_path / "a"))
    _, _, second = evaluate(*SMALL, "--seed", "3", "--out", str(tmp_path / "b"))
    assert first["z_avg"] == second["z_avg"]


@pytest.mark.skipif(
    not ALIBABA_GPU_2023.is_dir(), reason=f"the Alibaba GPU 2023 trace is not at {ALIBABA_GPU_2023}"
)
def test_on_the_gpu_trace_pods_are_placed_in_batches_on_the_openb_nodes(tmp_path):
    code, output, summary = evaluate(
        "--trace",
        str(ALIBABA_GPU_2023),
        "--trace-limit",
        "60",
        "--batch",
        "30",
        "--population",
        "6",
        "--iterations",
        "3",
        "--out",
        str(tmp_path),
    )
    assert code == 0, output
    assert summary["pods"] == 60
    assert all(0 < placed <= 60 for placed in summary["placed"].values())
    assert (tmp_path / "utilisation_gpu.png").stat().st_size > 0
    table = (tmp_path / "results.md").read_text()
    assert "nvidia.com/gpu spread" in table and "bandwidth spread" not in table  # absent: skipped


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--experiment", "portrait"],
            "--trace: required",
            id="The portrait experiment still needs a trace.",
        ),
        pytest.param(
            ["--experiment", "tbesk-paper", "--pods", "50", "--step", "100"],
            "--step",
            id="A step larger than the pods is refused.",
        ),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, args, message):
    result = RUNNER.invoke(app, ["evaluate", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
