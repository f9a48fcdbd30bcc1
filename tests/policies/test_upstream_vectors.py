"""Upstream kube-scheduler table tests replayed through ``eyrie explain``.

Each case in a ``vectors/upstream_*.json`` file (every one but those with a module of their own: Trimaran's,
InterPodAffinity's, PodTopologySpread's) is one
upstream table-test entry (see ``vectors/UPSTREAM_NOTES.md`` for sources, semantics and the cases left out).
The nodes, pod and profile are written to files, ``eyrie explain`` is run on them (in process), and the
plugin's scores (and the filter verdicts, when the case gives them) must equal upstream's expectations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from policies.explain import NodeState
from schemas.pod import PodRequest
from streams.cli import app

VECTOR_DIR = Path(__file__).parent / "vectors"
OWN_RUNNERS = {"upstream_trimaran.json", "upstream_interpodaffinity.json", "upstream_podtopologyspread.json"}
"""Vector files replayed by a module of their own (their expectations read differently)."""
VECTOR_FILES = sorted(p for p in VECTOR_DIR.glob("upstream_*.json") if p.name not in OWN_RUNNERS)
CASES: list[dict[str, Any]] = [
    {**case, "file": path.name} for path in VECTOR_FILES for case in json.loads(path.read_text())
]
IDS = [f"{case['file']}: {case['name']}" for case in CASES]
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


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_upstream_vector(case: dict[str, Any], tmp_path: Path) -> None:
    out = run_explain(case, tmp_path)
    assert out["pod"] == case["pod"]["uid"]
    if "expect_pre_filter" in case:
        # PreFilter rejected the pod: no node was tried and its reason is the message (the code is
        # checked on the plugin itself, which `explain` does not report).
        assert out["selected"] is None and out["message"] == case["expect_pre_filter"]["reason"]
    if "expect_scores" in case:
        # Scores cover feasible nodes only; with none feasible the plugin may be absent altogether.
        assert out["scores"].get(case["plugin"], {}) == case["expect_scores"]
    if "expect_filtered" in case:
        assert out["filtered"] == case["expect_filtered"]
    if "expect_feasible" in case:
        assert sorted(out["feasible"]) == sorted(case["expect_feasible"])


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vector_documents_validate(case: dict[str, Any]) -> None:
    """Every pod and node document in the vectors is valid input for eyrie (runs without the command)."""
    PodRequest.model_validate(case["pod"])
    for node in case["nodes"]:
        NodeState.model_validate(node)


def test_every_vector_names_its_upstream_test_and_source() -> None:
    for case in CASES:
        assert case.get("upstream_test") and case.get("source") and case.get("plugin"), case["name"]
