"""`eyrie evaluate --experiment portrait` on a slice of the real Bitbrains trace (six VMs, linked into a
temporary folder: the trace itself never enters the repository)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli import app
from tests.paths import BITBRAINS

RUNNER = CliRunner()
KEYS = {
    "pods_placed",
    "node_hours_over_capacity",
    "node_hours_over_80",
    "peak_util_std",
    "low_load_share",
    "high_load_share",
    "cores_placed",
    "memory_placed",
    "busiest_node_hour",
    "low_hours_share",
    "high_hours_share",
}

pytestmark = pytest.mark.skipif(not BITBRAINS.is_dir(), reason=f"the Bitbrains trace is not at {BITBRAINS}")


@pytest.fixture(scope="module")
def slice_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("bitbrains")
    for vm in (1, 9, 22, 24, 28, 30):  # small and large VMs, including a 32-core one
        (folder / f"{vm}.csv").symlink_to(BITBRAINS / f"{vm}.csv")
    return folder


def run(slice_dir: Path, out: Path, *extra: str) -> dict[str, dict[str, float]]:
    result = RUNNER.invoke(
        app, ["evaluate", "--experiment", "portrait", "--trace", str(slice_dir), "--out", str(out), *extra]
    )
    assert result.exit_code == 0, result.output
    last: dict[str, dict[str, float]] = json.loads(result.stdout.strip().splitlines()[-1])
    return last


def test_the_portrait_experiment_reports_every_profile_and_writes_its_files(
    slice_dir: Path, tmp_path: Path
) -> None:
    summary = run(slice_dir, tmp_path, "--nodes", "3", "--requests", "declared", "--seeds", "1")
    assert list(summary) == ["default", "trimaran", "portrait", "balanced"]
    for metrics in summary.values():
        assert set(metrics) == KEYS
        assert 0 <= metrics["pods_placed"] <= 24
    for name in ("results.md", "results.csv", "utilization_heatmap.png", "metrics.png"):
        assert (tmp_path / name).stat().st_size > 0
    # With the VMs' declared requests, overselling by portraits places more requested cores than requests
    # alone allow, without running any node over capacity in the replayed days.
    assert summary["portrait"]["cores_placed"] > summary["default"]["cores_placed"]
    assert summary["portrait"]["node_hours_over_capacity"] <= summary["default"]["node_hours_over_capacity"]


def test_the_experiment_is_deterministic_for_a_seed(slice_dir: Path, tmp_path: Path) -> None:
    args = ("--nodes", "3", "--policy", "portrait", "--seed", "7", "--seeds", "1")
    first = run(slice_dir, tmp_path / "a", *args)
    second = run(slice_dir, tmp_path / "b", *args)
    assert first == second


@pytest.mark.parametrize(
    ("name", "args", "message"),
    [
        ("An unknown experiment is a one-line error.", ["--experiment", "nope"], "--experiment"),
        ("An unknown profile is a one-line error.", ["--policy", "fastest"], "no built-in profile"),
    ],
    ids=lambda v: v if isinstance(v, str) and v.endswith(".") else "",
)
def test_bad_arguments(slice_dir: Path, tmp_path: Path, name: str, args: list[str], message: str) -> None:
    base = ["evaluate", "--experiment", "portrait", "--trace", str(slice_dir), "--out", str(tmp_path)]
    result = RUNNER.invoke(app, [*base, *args])
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
