"""`eyrie explain` as docs/cli.md describes it: inputs, output keys, one-line errors naming file and field."""

import json

import pytest
import yaml

from tests.commands import run_module

NODES = [
    {
        "name": "m1",
        "capacity": {"cpu": "64", "memory": "64Gi", "pods": 110},
        "pod_requests": [{"uid": "b1", "requests": {"cpu": "50", "memory": "10Gi"}}],
    },
    {
        "name": "m2",
        "capacity": {"cpu": "64", "memory": "64Gi", "pods": 110},
        "requested": {"cpu": "30", "memory": "30Gi"},
        "pods": 1,
    },
    {
        "name": "m3",
        "capacity": {"cpu": "64", "memory": "64Gi", "pods": 110},
        "pod_requests": [{"uid": "b3", "requests": {"cpu": "10", "memory": "50Gi"}}],
    },
    {
        "name": "tainted",
        "capacity": {"cpu": "64", "memory": "64Gi", "pods": 110},
        "taints": [{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
    },
]
POD = {"uid": "p1", "requests": {"cpu": "2", "memory": "10Gi"}}


def explain(tmp_path, nodes=None, pod=None, profile=None, *extra):
    nodes_path, pod_path = tmp_path / "nodes.json", tmp_path / "pod.json"
    nodes_path.write_text(nodes if isinstance(nodes, str) else json.dumps(NODES if nodes is None else nodes))
    pod_path.write_text(pod if isinstance(pod, str) else json.dumps(POD if pod is None else pod))
    args = ["--nodes", str(nodes_path), "--pod", str(pod_path), *extra]
    if profile is not None:
        profile_path = tmp_path / "profile.yaml"
        profile_path.write_text(profile if isinstance(profile, str) else yaml.safe_dump(profile))
        args += ["--profile", str(profile_path)]
    return run_module("streams.cli", "explain", *args, timeout=60)


def test_explain_prints_the_documented_object_for_the_three_machine_example(tmp_path):
    result = explain(tmp_path)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert list(out) == ["pod", "profile", "selected", "feasible", "filtered", "scores", "total"]
    assert out["pod"] == "p1"
    assert out["profile"] == "default"
    # kube-scheduler 1.36 scores the change in balance: m1, which the pod evens out, wins over m2.
    assert out["selected"] == "m1"
    assert out["feasible"] == ["m1", "m2", "m3"]
    assert out["filtered"] == {"tainted": ["node(s) had untolerated taint {gpu: true}"]}
    assert out["scores"]["NodeResourcesFit"] == {"m1": 43, "m2": 43, "m3": 43}
    assert out["scores"]["NodeResourcesBalancedAllocation"] == {"m1": 78, "m2": 71, "m3": 72}
    assert out["total"] == {
        node: 3 * 100 + 43 + balanced for node, balanced in (("m1", 78), ("m2", 71), ("m3", 72))
    }


def test_a_profile_file_with_several_profiles_is_chosen_by_scheduler_name(tmp_path):
    profiles = {
        "profiles": [
            {"schedulerName": "spread"},
            {
                "schedulerName": "pack",
                "plugins": {
                    "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}
                },
                "pluginConfig": [
                    {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}
                ],
            },
        ]
    }
    result = explain(tmp_path, None, None, profiles, "--scheduler-name", "pack")
    out = json.loads(result.stdout)
    assert list(out["scores"]) == ["NodeResourcesFit"]
    # MostAllocated: m1 (81 + 31) // 2 = 56, m2 (50 + 62) // 2 = 56, m3 (18 + 93) // 2 = 55.
    assert out["scores"]["NodeResourcesFit"] == {"m1": 56, "m2": 56, "m3": 55}
    assert out["selected"] in ("m1", "m2")
    assert out["profile"] == "pack"
    # Neither is the pod's: it names `default`, which a worker holds beside every published profile.
    builtin = json.loads(explain(tmp_path, None, None, profiles).stdout)
    assert builtin["profile"] == "default"
    assert list(builtin["scores"]) == [
        "TaintToleration",
        "NodeAffinity",
        "NodeResourcesFit",
        "PodTopologySpread",
        "InterPodAffinity",
        "NodeResourcesBalancedAllocation",
        "ImageLocality",
    ]
    missing = explain(tmp_path, None, None, profiles, "--scheduler-name", "nope")
    assert missing.returncode == 2
    assert missing.stderr.startswith("error: --scheduler-name: no profile named 'nope' (known: ")


def test_a_pod_that_fits_nowhere_selects_null(tmp_path):
    out = json.loads(explain(tmp_path, pod={"uid": "big", "requests": {"cpu": "100"}}).stdout)
    assert out["selected"] is None and out["feasible"] == [] and out["scores"] == {} and out["total"] == {}
    assert out["filtered"]["m1"] == ["Insufficient cpu"]


def test_a_pod_may_carry_a_portrait_beside_its_request(tmp_path):
    pod = {**POD, "portrait": {"cpu": [[1.0, 0.1]] * 24}}
    assert explain(tmp_path, pod=pod).returncode == 0


BAD = [
    (
        "a node quantity that does not parse names the node and field",
        [{"name": "n", "capacity": {"cpu": "x"}}],
        None,
        None,
        "nodes.json: [0].capacity.cpu",
    ),
    (
        "nodes that are not a list are refused",
        {"name": "n"},
        None,
        None,
        "nodes.json: expected a list of node states",
    ),
    (
        "a node given both forms of usage is refused",
        [{"name": "n", "pod_requests": [{"uid": "a"}], "requested": {"cpu": 1}}],
        None,
        None,
        "nodes.json: [0]",
    ),
    ("an unknown node field is named", [{"name": "n", "cpus": 4}], None, None, "nodes.json: [0].cpus"),
    ("truncated JSON names the file", "[{", None, None, "nodes.json: not valid JSON"),
    (
        "a bad pod field names the pod file",
        None,
        {"uid": "p", "priority": "high"},
        None,
        "pod.json: priority",
    ),
    ("a pod without a uid is refused", None, {"requests": {"cpu": 1}}, None, "pod.json: uid"),
    (
        "a bad profile names the plugin",
        None,
        None,
        {"schedulerName": "default", "plugins": {"score": {"enabled": [{"name": "Nope"}]}}},
        "unknown plugin Nope",
    ),
    ("a profile that is not YAML names the file", None, None, "a: [", "profile.yaml: cannot read profile"),
]


@pytest.mark.parametrize(("case", "nodes", "pod", "profile", "message"), BAD, ids=[c[0] for c in BAD])
def test_malformed_inputs_exit_2_with_one_line_naming_file_and_field(
    tmp_path, case, nodes, pod, profile, message
):
    result = explain(tmp_path, nodes, pod, profile)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")
    assert message in lines[0]


def test_a_missing_file_exits_2(tmp_path):
    result = run_module("streams.cli", "explain", "--nodes", tmp_path / "none", "--pod", tmp_path / "none")
    assert result.returncode == 2 and "No such file" in result.stderr
