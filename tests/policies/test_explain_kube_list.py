"""`eyrie explain --nodes` reads a cluster as `kubectl get nodes,pods -A -o yaml` prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders


def kube_node(name: str, cpu: str = "4", **labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "spec": {},
        "status": {
            "capacity": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
            "allocatable": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
        },
    }


def kube_pod(
    name: str, cpu: str, node: str | None = None, phase: str = "Running", namespace: str = "shop"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}", "labels": {"app": name}},
        "spec": spec,
        "status": {"phase": phase},
    }


def kube_list(*items: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "items": list(items), "metadata": {"resourceVersion": ""}}


POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "new", "namespace": "shop"},
    "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "2"}}}]},
}


def explain(tmp_path: Path, dump: dict[str, Any], pod: dict[str, Any] = POD) -> Any:
    nodes_path, pod_path = tmp_path / "cluster.yaml", tmp_path / "pod.yaml"
    nodes_path.write_text(yaml.safe_dump(dump))
    pod_path.write_text(yaml.safe_dump(pod))
    return run_module(
        "streams.cli", "explain", "--nodes", str(nodes_path), "--pod", str(pod_path), timeout=60
    )


def test_pods_bound_in_the_dump_occupy_their_nodes_and_others_hold_nothing(tmp_path: Path) -> None:
    dump = kube_list(
        kube_node("a"),
        kube_node("b"),
        kube_pod("busy", "3", node="a"),
        kube_pod("pending", "3"),  # not bound: holds nothing
        kube_pod("done", "3", node="b", phase="Succeeded"),  # finished: holds nothing
    )
    result = explain(tmp_path, dump)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["selected"] == "b"
    assert out["feasible"] == ["b"]
    assert out["filtered"] == {"a": ["Insufficient cpu"]}


@pytest.mark.parametrize(
    ("dump", "message"),
    [
        pytest.param(
            kube_list(kube_node("a"), {"kind": "Deployment", "metadata": {"name": "d"}}),
            "items[1].kind: 'Deployment' is not a Node, Pod, Namespace, Service, ReplicationController, "
            "ReplicaSet or StatefulSet",
            id="a kind eyrie does not read is refused naming the item",
        ),
        pytest.param(
            kube_list(kube_node("a"), kube_pod("lost", "1", node="gone")),
            "items[1].spec.nodeName: pod 'uid-lost' runs on 'gone', which the list has no Node for",
            id="a pod bound to a node the list lacks is refused naming the item",
        ),
        pytest.param(
            kube_list(kube_node("a", cpu="lots")),
            "items[0].status.capacity.cpu",
            id="a node whose capacity cannot be read is refused naming the field",
        ),
    ],
)
def test_a_dump_that_cannot_be_read_is_one_line_and_exit_2(
    tmp_path: Path, dump: dict[str, Any], message: str
) -> None:
    result = explain(tmp_path, dump)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_pod_manifest_with_a_claim_is_explained_with_a_warning_naming_the_volume(tmp_path: Path) -> None:
    pod = {
        **POD,
        "spec": {**POD["spec"], "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}]},
    }
    result = explain(tmp_path, kube_list(kube_node("a")), pod)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["selected"] == "a"
    assert "warning:" in result.stderr and "spec.volumes[0].persistentVolumeClaim" in result.stderr
