"""`eyrie explain --nodes` with a cluster dump that holds Services and controllers: the pod to explain, and
the pods bound in the dump, carry the default selector kube-scheduler derives from them, so
PodTopologySpread's system defaults apply as in the cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders

NAMESPACE = "shop"


def kube_node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
            "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
        },
    }


def owned_by(name: str) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": name,
            "uid": f"uid-{name}",
            "controller": True,
        }
    ]


def kube_pod(name: str, node: str | None, labels: dict[str, str], owner: str | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE, "uid": f"uid-{name}", "labels": labels}
    if owner is not None:
        metadata["ownerReferences"] = owned_by(owner)
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}]}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": spec,
        "status": {"phase": "Running"},
    }


def replica_set(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}}},
    }


def service(name: str, selector: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"selector": selector},
    }


def explain(tmp_path: Path, items: list[dict[str, Any]], incoming: dict[str, Any]) -> dict[str, Any]:
    nodes_path, pod_path = tmp_path / "cluster.yaml", tmp_path / "pod.yaml"
    nodes_path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    pod_path.write_text(yaml.safe_dump(incoming))
    result = run_module(
        "streams.cli", "explain", "--nodes", str(nodes_path), "--pod", str(pod_path), timeout=60
    )
    assert result.returncode == 0, result.stderr
    found: dict[str, Any] = json.loads(result.stdout)
    return found


WEB = {"app": "web"}
# Three web pods on a, none on b: with the default selector, the hostname default (maxSkew 3) favours b:
# round(3 × ln(2 + 2) + 2) = 6 against 2, so a scores 100 × (6 + 2 − 6) / 6 = 33 (no node has a zone, and
# the zone default scores nothing on nodes without one).
BOUND = [kube_node("a"), kube_node("b"), *(kube_pod(f"w{i}", "a", WEB, owner="web") for i in range(3))]


@pytest.mark.parametrize(
    ("objects", "incoming", "spread"),
    [
        pytest.param(
            [replica_set("web", WEB)],
            kube_pod("new", None, WEB, owner="web"),
            {"a": 33, "b": 100},
            id="a pod owned by a ReplicaSet of the dump is spread from its siblings",
        ),
        pytest.param(
            [service("web", WEB)],
            kube_pod("new", None, WEB),
            {"a": 33, "b": 100},
            id="a pod a Service of the dump selects is spread from the pods it selects",
        ),
        pytest.param(
            [],
            kube_pod("new", None, WEB, owner="web"),
            None,
            id="without its ReplicaSet in the dump a pod gets no default constraints",
        ),
    ],
)
def test_the_dumps_services_and_controllers_give_the_default_selector(
    tmp_path: Path, objects: list[dict[str, Any]], incoming: dict[str, Any], spread: dict[str, int] | None
) -> None:
    out = explain(tmp_path, [*BOUND, *objects], incoming)
    got = out["scores"].get("PodTopologySpread")
    if spread is None:
        assert not got or set(got.values()) == {0}, got
    else:
        assert got == spread
