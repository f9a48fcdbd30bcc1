"""`make demo`'s program (`python -m streams.demo`) as a user runs it: its own worker and applier against
the session's broker, a generated workload replayed live, the tables, the plots and the summary line."""

from __future__ import annotations

import os
import subprocess

import orjson
import pytest

from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders


def run_demo(
    *args: str, bootstrap: str | None = None, timeout: float = 240.0
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if bootstrap is not None:
        env["KAFKA_BOOTSTRAP_SERVERS"] = bootstrap
    return run_module("streams.demo", *args, env=env, timeout=timeout)


# ---------------------------------------------------------------------------------------------- cases


@pytest.mark.kafka
def test_the_demo_places_every_pod_of_a_paced_replay_and_writes_its_report(kafka_bootstrap, tmp_path):
    out = tmp_path / "demo-out"
    done = run_demo(
        "--pods", "300", "--nodes", "30", "--rate", "3000", "--out", str(out), bootstrap=kafka_bootstrap
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "replaying at 3000 events/s" in done.stdout
    assert "Placement outcomes" in done.stdout and "Utilisation at the end" in done.stdout
    summary = orjson.loads(done.stdout.strip().splitlines()[-1])
    assert summary["pods"] == 300
    assert summary["placed"] + summary["unschedulable"] + summary["rejected"] == 300
    assert (summary["pending"], summary["conflicts"]) == (0, 0)
    assert summary["latency_ms"]["count"] == summary["placed"]
    for plot in ("utilisation.png", "latency.png", "outcomes.png"):
        assert (out / plot).stat().st_size > 0, plot


@pytest.mark.parametrize(
    ("case", "args", "error"),
    [
        (
            "A rate of zero is refused, naming the option.",
            ["--rate", "0"],
            "error: --rate: must be positive, got 0.0",
        ),
        (
            "A negative pod count is refused, naming the option.",
            ["--pods", "-5"],
            "error: --pods: must be positive, got -5",
        ),
        (
            "A rate that is not a number is refused, naming the option.",
            ["--rate", "fast"],
            "error: argument --rate: invalid float value: 'fast'",
        ),
        (
            "A trace that does not exist is refused, naming the option.",
            ["--trace", "/nonexistent"],
            "error: --trace:",
        ),
    ],
)
def test_bad_arguments_stop_the_demo_with_a_one_line_error_before_anything_starts(
    case, args, error, tmp_path
):
    # No broker is named: the check must come before one is looked for or started.
    done = run_demo(*args, "--out", str(tmp_path / "out"), timeout=60.0)
    assert done.returncode == 2, case
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(error), (case, done.stderr)
