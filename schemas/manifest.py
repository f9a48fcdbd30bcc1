"""Kubernetes ``v1 Pod`` manifests (as ``kubectl get pod -o yaml`` prints them) → `PodRequest`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput, ManifestError
from schemas.pod import PodRequest

__all__ = ["is_pod_manifest", "pod_from_manifest"]

# The default scheduler's name in Kubernetes; eyrie's default profile plays its part.
_KUBE_DEFAULT_SCHEDULER = "default-scheduler"
_WORKLOAD_LABELS = ("app.kubernetes.io/name", "app", "k8s-app")


def is_pod_manifest(document: object) -> bool:
    return isinstance(document, dict) and "apiVersion" in document and document.get("kind") == "Pod"


def _mapping(value: object, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ManifestError(f"expected a mapping, got {type(value).__name__}", field=field)
    return value


def _list(value: object, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ManifestError(f"expected a list, got {type(value).__name__}", field=field)
    return value


def _container(raw: object, field: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    spec = _mapping(raw, field)
    resources = _mapping(spec.get("resources"), f"{field}.resources")
    container = {
        "name": spec.get("name", ""),
        "requests": _mapping(resources.get("requests"), f"{field}.resources.requests"),
        "limits": _mapping(resources.get("limits"), f"{field}.resources.limits"),
    }
    ports = []
    for index, raw_port in enumerate(_list(spec.get("ports"), f"{field}.ports")):
        port = _mapping(raw_port, f"{field}.ports[{index}]")
        if port.get("hostPort"):
            ports.append(
                {
                    "port": port["hostPort"],
                    "protocol": port.get("protocol", "TCP"),
                    "host_ip": port.get("hostIP") or "0.0.0.0",
                }
            )
    return container, ports


def _affinity_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "spec.affinity.nodeAffinity")
    required = _mapping(
        node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
    )
    terms = []
    for index, raw_term in enumerate(_list(required.get("nodeSelectorTerms"), "nodeSelectorTerms")):
        term = _mapping(raw_term, f"nodeSelectorTerms[{index}]")
        terms.append(
            {
                "match_expressions": [
                    {
                        "key": expr.get("key"),
                        "operator": expr.get("operator"),
                        "values": expr.get("values") or [],
                    }
                    for expr in _list(
                        term.get("matchExpressions"), f"nodeSelectorTerms[{index}].matchExpressions"
                    )
                ]
            }
        )
    return terms


def _timestamp(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # YAML parses unquoted RFC 3339 times itself
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ManifestError(f"not an RFC 3339 time: {value!r}", field="metadata.creationTimestamp") from None


def pod_from_manifest(document: dict[str, Any]) -> PodRequest:
    """Convert one Pod. The uid is ``metadata.uid`` when present, else ``namespace/name`` (stable, so
    publishing the same manifest twice is idempotent). The workload is the first owner reference, else the
    ``app.kubernetes.io/name``/``app`` label."""
    if not is_pod_manifest(document):
        kind = document.get("kind") if isinstance(document, dict) else type(document).__name__
        raise ManifestError(f"expected kind Pod, got {kind!r}", field="kind")
    if document["apiVersion"] != "v1":
        raise ManifestError(f"expected apiVersion v1, got {document['apiVersion']!r}", field="apiVersion")
    metadata = _mapping(document.get("metadata"), "metadata")
    spec = _mapping(document.get("spec"), "spec")
    name = metadata.get("name") or metadata.get("generateName")
    if not name:
        raise ManifestError("a Pod needs a name", field="metadata.name")
    namespace = metadata.get("namespace") or "default"
    labels = {str(k): str(v) for k, v in _mapping(metadata.get("labels"), "metadata.labels").items()}
    owners = _list(metadata.get("ownerReferences"), "metadata.ownerReferences")
    workload = (owners[0].get("name") if owners and isinstance(owners[0], dict) else None) or next(
        (labels[key] for key in _WORKLOAD_LABELS if key in labels), None
    )

    containers, host_ports = [], []
    for index, raw in enumerate(_list(spec.get("containers"), "spec.containers")):
        container, ports = _container(raw, f"spec.containers[{index}]")
        containers.append(container)
        host_ports.extend(ports)
    if not containers:
        raise ManifestError("a Pod needs at least one container", field="spec.containers")
    init_containers = [
        _container(raw, f"spec.initContainers[{index}]")[0]
        for index, raw in enumerate(_list(spec.get("initContainers"), "spec.initContainers"))
    ]

    scheduler = spec.get("schedulerName") or _KUBE_DEFAULT_SCHEDULER
    fields = {
        "uid": metadata.get("uid") or f"{namespace}/{name}",
        "name": name,
        "namespace": namespace,
        "workload": workload,
        "containers": containers,
        "init_containers": init_containers,
        "overhead": _mapping(spec.get("overhead"), "spec.overhead"),
        "priority": spec.get("priority") or 0,
        "scheduler_name": "default" if scheduler == _KUBE_DEFAULT_SCHEDULER else scheduler,
        "node_selector": _mapping(spec.get("nodeSelector"), "spec.nodeSelector"),
        "node_affinity": _affinity_terms(spec),
        "tolerations": [
            {
                key: value
                for key, value in _mapping(t, "spec.tolerations").items()
                if key in ("key", "operator", "value", "effect")
            }
            for t in _list(spec.get("tolerations"), "spec.tolerations")
        ],
        "host_ports": host_ports,
        "labels": labels,
        "created_at": _timestamp(metadata.get("creationTimestamp")),
    }
    try:
        return model_from_mapping(PodRequest, fields, prefix="Pod")
    except InvalidInput as exc:
        raise ManifestError(str(exc).removeprefix(f"{exc.field}: "), field=exc.field) from None
