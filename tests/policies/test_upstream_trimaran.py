"""Upstream scheduler-plugins Trimaran expectations replayed through ``eyrie explain``.

Each case in ``vectors/upstream_trimaran.json`` is a TargetLoadPacking or LoadVariationRiskBalancing
table-test entry from kubernetes-sigs/scheduler-plugins, a worked TargetLoadPacking example, or a case
derived from upstream's Score functions (``upstream_test`` says which). ``vectors/UPSTREAM_NOTES.md`` gives
the sources, how upstream's percentages become window values, and the cases left out. The plugin's scores
must equal upstream's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from policies.explain import NodeState
from schemas.pod import PodRequest
from tests.policies.test_upstream_vectors import run_explain

VECTORS = Path(__file__).parent / "vectors" / "upstream_trimaran.json"
CASES: list[dict[str, Any]] = json.loads(VECTORS.read_text())


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_upstream_trimaran_vector(case: dict[str, Any], tmp_path: Path) -> None:
    out = run_explain(case, tmp_path)
    assert out["pod"] == case["pod"]["uid"]
    # Every node passes the default filters, so every node is scored.
    assert sorted(out["feasible"]) == sorted(node["name"] for node in case["nodes"])
    assert out["scores"][case["plugin"]] == case["expect_scores"]


@pytest.mark.parametrize("case", CASES, ids=[case["name"] for case in CASES])
def test_trimaran_vector_documents_validate(case: dict[str, Any]) -> None:
    """Every pod and node state in the vectors is valid input for eyrie (runs without the command)."""
    PodRequest.model_validate(case["pod"])
    for node in case["nodes"]:
        NodeState.model_validate(node)
    assert set(case["expect_scores"]) == {node["name"] for node in case["nodes"]}


def test_trimaran_vectors_cover_both_plugins() -> None:
    plugins = {case["plugin"] for case in CASES}
    assert plugins == {"TargetLoadPacking", "LoadVariationRiskBalancing"}
