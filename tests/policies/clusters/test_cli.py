"""`eyrie clusters estimate|divide` as docs/cli.md describes them, checked against test vector files.

The vectors in ``vectors/`` are run through the command line exactly as a user would run them:

* ``karmada_modeling_guide.json``: the examples of Karmada's cluster resource modeling guide (v1.12), with
  current Karmada semantics.
* ``karmada_estimator.json``: Karmada's ``pkg/estimator/client/general_test.go`` (TestGetMaximumReplicasBased-
  OnResourceModels, TestGetMaximumSetsBasedOnResourceModels for single-replica sets, TestMaxAvailableReplicas,
  TestMaxAvailableReplicasGeneral, TestMaxAvailableReplicasGeneralWithResourceModels, TestGetAllowedPodNumber,
  TestGetMaximumReplicasBasedOnClusterSummary), ported case by case.
* ``karmada_division.json``: Karmada's ``pkg/scheduler/core/assignment_test.go`` (Test_assignByStaticWeight-
  Strategy, Test_dynamicScale, Test_dynamicScaleUp, Test_assignByDuplicatedStrategy) and
  ``pkg/scheduler/core/division_algorithm_test.go`` (Test_divideReplicasByPreference).

Each vector names its upstream test and case (``source``). Where the upstream version read gives a different
remainder (its dispenser handed remainders to the largest weights; eyrie uses Webster's) the vector keeps the
upstream answer under ``upstream`` and says why in ``note``; so do vectors adapted to the CLI (allowed pods
added where upstream called an inner function, models completed where upstream's would not validate).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from streams.cli import app

VECTORS = Path(__file__).parent / "vectors"
RUNNER = CliRunner()


def load(name):
    return json.loads((VECTORS / name).read_text())


def run(tmp_path, command, clusters, request, *options):
    clusters_path, request_path = tmp_path / "clusters.json", tmp_path / "req.json"
    clusters_path.write_text(clusters if isinstance(clusters, str) else json.dumps(clusters))
    request_path.write_text(request if isinstance(request, str) else json.dumps(request))
    args = ["clusters", command, "--clusters", str(clusters_path), "--request", str(request_path), *options]
    return RUNNER.invoke(app, args)


def run_vector(tmp_path, vector):
    """The printed JSON; for a vector that expects an `error`, that error's one line (exit 2)."""
    result = run(tmp_path, vector["command"], vector["clusters"], vector["request"], *vector["options"])
    if "error" in vector:
        assert result.exit_code == 2, result.output
        assert result.stderr.count("\n") == 1, result.stderr
        return result.stderr.strip()
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


ALL_VECTORS = [
    (file, vector)
    for file in ("karmada_modeling_guide.json", "karmada_estimator.json", "karmada_division.json")
    for vector in load(file)
]


@pytest.mark.parametrize(("file", "vector"), ALL_VECTORS, ids=[v["id"] for _, v in ALL_VECTORS])
def test_the_cli_reproduces_every_vector(tmp_path, file, vector):
    if "error" in vector:
        assert vector["error"] in run_vector(tmp_path, vector), vector.get("note", vector["source"])
        return
    assert run_vector(tmp_path, vector) == vector["expect"], vector.get("note", vector["source"])


def test_every_deviation_from_upstream_is_a_webster_remainder_and_keeps_the_total():
    deviating = [v for _, v in ALL_VECTORS if "upstream" in v]
    assert deviating, "the vectors record where upstream's remainder rule differs"
    for vector in deviating:
        assert sum(vector["upstream"].values()) == sum(vector["expect"].values())
        assert set(vector["upstream"]) == set(vector["expect"])
        assert "Webster" in vector["note"]


def test_estimate_prints_every_cluster_in_file_order_and_divide_only_clusters_given_replicas(tmp_path):
    clusters = [
        {"name": n, "resourceSummary": {"allocatable": {"pods": p}}}
        for n, p in (("z", 0), ("a", 5), ("m", 3))
    ]
    estimate = run(tmp_path, "estimate", clusters, {})
    assert list(json.loads(estimate.stdout).items()) == [("z", 0), ("a", 5), ("m", 3)]
    divided = run(tmp_path, "divide", clusters, {}, "--replicas", "4", "--strategy", "dynamic")
    # Floors 2 and 1; the last replica ties at 5/5 = 3/3 and goes to the cluster with fewer (Webster).
    assert json.loads(divided.stdout) == {"a": 2, "m": 2}


NODE_CLUSTERS = [
    {
        "name": "gpu",
        "nodes": [
            {
                "name": "g1",
                "capacity": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": 2, "pods": 110},
                "labels": {"gpu-model": "T4"},
                "pod_requests": [{"uid": "busy", "requests": {"cpu": "2", "memory": "8Gi"}}],
            },
            {
                "name": "g2",
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": 3},
                "requested": {"cpu": "1"},
                "pods": 2,
            },
            {
                "name": "tainted",
                "capacity": {"cpu": "64", "memory": "256Gi", "pods": 110},
                "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
            },
        ],
    },
    {"name": "empty", "nodes": []},
]

NODE_CASES = [
    (
        "the general estimate sums the nodes: (80 - 3) cores / 2 and (320 - 8) Gi / 4 Gi, at most 220 pods",
        "general",
        {"cpu": "2", "memory": "4Gi"},
        {"gpu": 38, "empty": 0},
    ),
    (
        "the model estimate grades each node by what it has free: g1 (6 cores, 24 Gi) is grade 2, "
        "g2 (7 cores, 32 Gi) grade 3, the tainted node (64 cores, 256 Gi) grade 6: 1, 2 and 16 replicas",
        "model",
        {"cpu": "2", "memory": "4Gi"},
        {"gpu": 1 + 2 + 16, "empty": 0},
    ),
    (
        "the accurate estimate runs the filters: the tainted node is out, g2 has one pod slot left",
        "accurate",
        {"cpu": "2", "memory": "4Gi"},
        {"gpu": 3 + 1, "empty": 0},
    ),
    (
        "the accurate estimate of a GPU request counts only nodes with GPUs",
        "accurate",
        {"cpu": "1", "nvidia.com/gpu": 1},
        {"gpu": 2, "empty": 0},
    ),
]


@pytest.mark.parametrize(
    ("case", "estimator", "request_", "expect"), NODE_CASES, ids=[c[0] for c in NODE_CASES]
)
def test_clusters_given_as_nodes_are_summarised_graded_and_filtered(
    tmp_path, case, estimator, request_, expect
):
    result = run(tmp_path, "estimate", NODE_CLUSTERS, request_, "--estimator", estimator)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == expect


def test_a_pod_request_as_req_json_brings_its_tolerations_to_the_accurate_estimator(tmp_path):
    pod = {
        "uid": "w",
        "requests": {"cpu": "2", "memory": "4Gi"},
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    result = run(tmp_path, "estimate", NODE_CLUSTERS, pod, "--estimator", "accurate")
    assert json.loads(result.stdout) == {"gpu": 3 + 1 + 32, "empty": 0}


def test_modeling_off_makes_the_model_estimator_read_the_summary(tmp_path):
    on = run(tmp_path, "estimate", NODE_CLUSTERS, {"cpu": "2", "memory": "4Gi"}, "--estimator", "model")
    off = run(tmp_path, "estimate", NODE_CLUSTERS, {"cpu": "2", "memory": "4Gi"}, "--no-modeling")
    general = run(
        tmp_path, "estimate", NODE_CLUSTERS, {"cpu": "2", "memory": "4Gi"}, "--estimator", "general"
    )
    assert json.loads(off.stdout) == json.loads(general.stdout) != json.loads(on.stdout)


def test_an_explicit_summary_wins_over_one_derived_from_nodes(tmp_path):
    clusters = [{**NODE_CLUSTERS[0], "resourceSummary": {"allocatable": {"pods": "1"}}}]
    result = run(tmp_path, "estimate", clusters, {"cpu": "2"}, "--estimator", "general")
    assert json.loads(result.stdout) == {"gpu": 0}  # allocatable has no cpu at all


BAD = [
    ("clusters that are not a list are refused", {"name": "a"}, {}, (), "expected a JSON list of clusters"),
    ("truncated JSON names the file", "[{", {}, (), "clusters.json: not valid JSON"),
    (
        "an unknown cluster field is named",
        [{"name": "a", "resourcesummary": {}}],
        {},
        (),
        "[0].resourcesummary",
    ),
    (
        "a bad quantity in a summary names the cluster and field",
        [{"name": "a", "resourceSummary": {"allocatable": {"cpu": "x"}}}],
        {},
        (),
        "[0].resourceSummary.allocatable.cpu",
    ),
    (
        "a cluster listed twice is refused",
        [{"name": "a"}, {"name": "a"}],
        {},
        (),
        "cluster 'a' appears twice",
    ),
    (
        "a negative node count is refused",
        [{"name": "a", "resourceSummary": {"allocatableModelings": [{"grade": 0, "count": -1}]}}],
        {},
        (),
        "allocatableModelings.0.count",
    ),
    (
        "an invalid resource model names its rule",
        [
            {
                "name": "a",
                "resourceModels": [
                    {"grade": 0, "ranges": [{"name": "cpu", "min": "1", "max": "9223372036854775807"}]}
                ],
            }
        ],
        {},
        (),
        "[0].resourceModels[0].ranges[0].min: grade 0 cpu: the first grade's min must be 0",
    ),
    (
        "a request that is neither a resource list nor a pod is refused",
        [],
        {"cpu": "1", "bogus": 1},
        (),
        "req.json",
    ),
    ("a negative request names the resource", [], {"cpu": "-1"}, (), "req.json: cpu"),
    (
        "an unknown estimator is refused",
        [],
        {},
        ("--estimator", "exact"),
        "--estimator: unknown estimator 'exact'",
    ),
    (
        "the accurate estimator needs nodes",
        [{"name": "a"}],
        {},
        ("--estimator", "accurate"),
        "[0].nodes: cluster 'a' lists no nodes",
    ),
]


@pytest.mark.parametrize(("case", "clusters", "request_", "options", "message"), BAD, ids=[c[0] for c in BAD])
def test_bad_input_exits_2_with_one_line_naming_the_field(
    tmp_path, case, clusters, request_, options, message
):
    result = run(tmp_path, "estimate", clusters, request_, *options)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert message in lines[0]


BAD_DIVIDE = [
    (
        "an unknown strategy is refused",
        ("--replicas", "3", "--strategy", "spread"),
        "--strategy: unknown strategy",
    ),
    (
        "negative replicas are refused",
        ("--replicas", "-1", "--strategy", "static"),
        "--replicas: must be >= 0",
    ),
    (
        "weights must be name=number pairs",
        ("--replicas", "3", "--strategy", "static", "--weights", "a"),
        "--weights",
    ),
    (
        "a negative weight is refused",
        ("--replicas", "3", "--strategy", "static", "--weights", "a=-2"),
        "--weights: a: must be >= 0",
    ),
    (
        "current replicas must be whole numbers",
        ("--replicas", "3", "--strategy", "dynamic", "--current", "a=x"),
        "--current: a: expected a whole number",
    ),
]


@pytest.mark.parametrize(("case", "options", "message"), BAD_DIVIDE, ids=[c[0] for c in BAD_DIVIDE])
def test_bad_divide_options_exit_2_with_one_line(tmp_path, case, options, message):
    result = run(tmp_path, "divide", [{"name": "a"}], {}, *options)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr


def test_the_installed_command_prints_one_json_line_and_exits_2_on_bad_input(tmp_path):
    vector = load("karmada_modeling_guide.json")[0]
    (tmp_path / "c.json").write_text(json.dumps(vector["clusters"]))
    (tmp_path / "r.json").write_text(json.dumps(vector["request"]))
    base = [sys.executable, "-m", "streams.cli", "clusters"]
    args = ["--clusters", str(tmp_path / "c.json"), "--request", str(tmp_path / "r.json")]
    ok = subprocess.run(
        [*base, "estimate", *args, "--estimator", "general"], capture_output=True, text=True, check=False
    )
    assert ok.returncode == 0 and ok.stdout.count("\n") == 1
    assert json.loads(ok.stdout) == vector["expect"]
    bad = subprocess.run(
        [*base, "divide", *args, "--replicas", "3", "--strategy", "nope"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert bad.returncode == 2 and bad.stderr.startswith("error: ") and bad.stderr.count("\n") == 1
