"""Upstream kube-scheduler table tests replayed through ``eyrie explain``.

Each case in ``vectors/upstream_noderesources.json`` is one upstream table-test entry (see
``vectors/UPSTREAM_NOTES.md`` for sources, semantics and the cases left out). The nodes, pod and profile are
written to files, ``python -m streams.cli explain`` is run on them, and the plugin's scores (and the filter
verdicts, when the case gives them) must equal upstream's expectations.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.node import NodeSpec
from schemas.pod import PodRequest

VECTORS = Path(__file__).parent / "vectors" / "upstream_noderesources.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())
REPO = Path(__file__).resolve().parents[2]


def run_explain(case: dict[str, Any], tmp_path: Path) -> dict[str, Any]:
    nodes = tmp_path / "nodes.json"
    pod = tmp_path / "pod.json"
    profile = tmp_path / "profile.yaml"
    nodes.write_text(json.dumps(case["nodes"]))
    pod.write_text(json.dumps(case["pod"]))
    profile.write_text(yaml.safe_dump(case["profile"], sort_keys=False))
    command = [
        sys.executable,
        "-m",
        "streams.cli",
        "explain",
        "--nodes",
        str(nodes),
        "--pod",
        str(pod),
        "--profile",
        str(profile),
    ]
    result = subprocess.run(command, capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr}"
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
