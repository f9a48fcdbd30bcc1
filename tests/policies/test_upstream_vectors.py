"""Upstream kube-scheduler table tests replayed through ``eyrie explain``.

Each case in ``vectors/upstream_noderesources.json`` is one upstream table-test entry (see
``vectors/UPSTREAM_NOTES.md`` for sources, semantics and the cases left out). The nodes, pod and profile are
written to files, ``eyrie explain`` is run on them (in process), and the plugin's scores (and the filter
verdicts, when the case gives them) must equal upstream's expectations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from schemas.node import NodeSpec
from schemas.pod import PodRequest
from streams.cli import app

VECTORS = Path(__file__).parent / "vectors" / "upstream_noderesources.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())
RUNNER = CliRunner()


def run_explain(case: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    nodes = tmp_path / "nodes.json"
    pod = tmp_path / "pod.json"
    profile = tmp_path / "profile.yaml"
    nodes.write_text(json.dumps(case["nodes"]))
    pod.write_text(json.dumps(case["pod"]))
    profile.write_text(yaml.safe_dump(case["profile"], sort_keys=False))
    # The command itself, in process: a subprocess per case would spend the suite's time starting Python.
    args = ["explain", "--nodes", str(nodes), "--pod", str(pod), "--profile", str(profile)]
    result = RUNNER.invoke(app, args)
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.output}"
    return json.loads(result.stdout)


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_upstream_vector(case: dict[str, Any], tmp_path: Path) -> None:
    out = run_explain(case, tmp_path)
    assert out["pod"] == case["pod"]["uid"]
    if "expect_scores" in case:
        # Scores cover feasible nodes only; with none feasible the plugin may be absent altogether.
        assert out["scores"].get(case["plugin"], {}) == case["expect_scores"]
    if "expect_filtered" in case:
        assert out["filtered"] == case["expect_filtered"]
    if "expect_feasible" in case:
        assert sorted(out["feasible"]) == sorted(case["expect_feasible"])


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_vector_documents_validate(case: dict[str, Any]) -> None:
    """Every pod and node document in the vectors is valid input for eyrie (runs without the command)."""
    PodRequest.model_validate(case["pod"])
    for node in case["nodes"]:
        NodeSpec(
            name=node["name"],
            capacity=node["capacity"],
            allocatable=node["allocatable"],
            labels=node["labels"],
            taints=node["taints"],
        )
        for existing in node["pod_requests"]:
            PodRequest.model_validate(existing)
