"""`eyrie explain` decides as a worker does: the profile a pod names or nothing (an unknown name is
unschedulable, as placement answers it), the profile named in the output, and YAML inputs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from policies.framework.profile import ProfileSet
from policies.scheduler import Scheduler, Unschedulable
from schemas.pod import PodRequest
from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders

NODES: list[dict[str, Any]] = [
    {"name": "small", "capacity": {"cpu": "4", "memory": "8Gi", "pods": 110}},
    {"name": "large", "capacity": {"cpu": "32", "memory": "64Gi", "pods": 110}, "requested": {"cpu": "8"}},
]
POD: dict[str, Any] = {"uid": "web-1", "requests": {"cpu": "1", "memory": "1Gi"}}
PACK = {
    "schedulerName": "pack",
    "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit"}]}},
    "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": "MostAllocated"}}}],
}
MANIFEST = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "web-1", "namespace": "shop", "uid": "web-1"},
    "spec": {
        "schedulerName": "binpack",
        "containers": [{"name": "web", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}],
    },
}


def write(path: Path, document: Any) -> Path:
    if path.suffix in (".yaml", ".yml"):
        path.write_text(document if isinstance(document, str) else yaml.safe_dump(document))
    else:
        path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def explain(
    tmp_path: Path,
    *,
    nodes: Any = None,
    pod: Any = None,
    profile: Any = None,
    suffix: str = ".json",
    extra: tuple[str, ...] = (),
) -> Any:
    args = [
        "--nodes",
        write(tmp_path / f"nodes{suffix}", NODES if nodes is None else nodes),
        "--pod",
        write(tmp_path / f"pod{suffix}", POD if pod is None else pod),
        *extra,
    ]
    if profile is not None:
        args += ["--profile", write(tmp_path / "profile.yaml", profile)]
    return run_module("streams.cli", "explain", *args, timeout=60)


def output(result: Any) -> dict[str, Any]:
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


def live_reason(scheduler_name: str) -> str:
    """What placement publishes for a pod naming `scheduler_name` on a worker holding the built-ins."""
    outcomes = Scheduler(ProfileSet.builtin()).add_pod(
        PodRequest(uid="p", scheduler_name=scheduler_name), 0.0
    )
    assert len(outcomes) == 1 and isinstance(outcomes[0], Unschedulable)
    return outcomes[0].reasons[0]


# ---------------------------------------------------------------------------------------------- tests


def test_a_pod_naming_an_unknown_profile_is_unschedulable_as_placement_says_not_explained_with_default(
    tmp_path: Path,
) -> None:
    out = output(explain(tmp_path, pod={**POD, "scheduler_name": "gpu-pack"}))
    assert out["profile"] is None
    assert out["selected"] is None
    assert (out["feasible"], out["filtered"], out["scores"], out["total"]) == ([], {}, {}, {})
    assert out["message"] == live_reason("gpu-pack")
    assert out["message"].startswith("no profile named 'gpu-pack' (known: ")


def test_a_profile_file_not_holding_the_pods_profile_leaves_it_unschedulable(tmp_path: Path) -> None:
    profiles = {"profiles": [PACK, {"schedulerName": "spread"}]}
    out = output(explain(tmp_path, pod={**POD, "scheduler_name": "gpu-pack"}, profile=profiles))
    assert out["selected"] is None and out["profile"] is None
    # The file's profiles join the built-ins, as published profiles do on a worker.
    known = out["message"].split("(known: ")[1].rstrip(")").split(", ")
    assert {"pack", "spread", "default", "binpack"} <= set(known)


NAMED = [
    ("a pod without a scheduler name is explained with default", {}, None, (), "default"),
    (
        "a pod naming a built-in profile is explained with it",
        {"scheduler_name": "binpack"},
        None,
        (),
        "binpack",
    ),
    ("the only profile of --profile is the one explained", {}, PACK, (), "pack"),
    (
        "a profile of --profile that the pod names is chosen among several",
        {"scheduler_name": "pack"},
        {"profiles": [{"schedulerName": "spread"}, PACK]},
        (),
        "pack",
    ),
    ("--scheduler-name may name a built-in profile", {}, None, ("--scheduler-name", "trimaran"), "trimaran"),
]


@pytest.mark.parametrize(
    ("case", "pod_fields", "profile", "extra", "expected"), NAMED, ids=[case[0] for case in NAMED]
)
def test_the_output_names_the_profile_the_cycle_ran(
    tmp_path: Path,
    case: str,
    pod_fields: dict[str, Any],
    profile: Any,
    extra: tuple[str, ...],
    expected: str,
) -> None:
    out = output(explain(tmp_path, pod={**POD, **pod_fields}, profile=profile, extra=extra))
    assert out["profile"] == expected
    assert out["selected"] in ("small", "large")
    assert "message" not in out


def test_yaml_node_states_pod_and_profile_explain_as_their_json_does(tmp_path: Path) -> None:
    as_json = output(explain(tmp_path, profile=PACK))
    as_yaml = output(explain(tmp_path, profile=PACK, suffix=".yaml"))
    assert as_yaml == as_json
    assert as_yaml["profile"] == "pack" and list(as_yaml["scores"]) == ["NodeResourcesFit"]


def test_a_kubernetes_pod_manifest_in_yaml_is_explained_with_the_profile_it_names(tmp_path: Path) -> None:
    out = output(explain(tmp_path, pod=MANIFEST, suffix=".yml"))
    assert out["pod"] == "web-1"
    assert out["profile"] == "binpack"


BAD_YAML = [
    ("node states that are not YAML name the file", "[{name: a", None, "nodes.yaml: not valid YAML"),
    (
        "a YAML mapping of nodes is not a list",
        "name: a\n",
        None,
        "nodes.yaml: expected a list of node states",
    ),
    (
        "a YAML pod with a bad field names file and field",
        None,
        "uid: p\npriority: high\n",
        "pod.yaml: priority",
    ),
    ("a YAML pod that is a list is refused", None, "- uid: p\n", "pod.yaml: expected an object"),
]


@pytest.mark.parametrize(("case", "nodes", "pod", "message"), BAD_YAML, ids=[case[0] for case in BAD_YAML])
def test_bad_yaml_inputs_exit_2_with_one_line_naming_the_file(
    tmp_path: Path, case: str, nodes: str | None, pod: str | None, message: str
) -> None:
    result = explain(tmp_path, nodes=nodes, pod=pod, suffix=".yaml")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
