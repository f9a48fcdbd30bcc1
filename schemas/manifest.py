"""Kubernetes ``v1 Pod`` manifests (as ``kubectl get pod -o yaml`` prints them) → `PodRequest`."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput, ManifestError
from schemas.gpu import GPU_CARD_MODEL, GPU_COUNT, GPU_MILLI, MILLI_PER_CARD
from schemas.pod import PodRequest

__all__ = [
    "NODE_INDEPENDENT_VOLUMES",
    "is_pod_manifest",
    "manifest_path",
    "manifest_warnings",
    "pod_from_manifest",
]

NODE_INDEPENDENT_VOLUMES = frozenset(
    {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "hostPath", "image"}
)
"""Volume sources that any node can provide, so they do not constrain placement. Every other source
(persistentVolumeClaim, ephemeral, csi, the cloud disks...) carries topology or attach limits that eyrie
does not model."""

# The default scheduler's name in Kubernetes; eyrie's default profile plays its part.
_KUBE_DEFAULT_SCHEDULER = "default-scheduler"
_WORKLOAD_LABELS = ("app.kubernetes.io/name", "app", "k8s-app")


def manifest_warnings(document: dict[str, Any]) -> list[str]:
    """What in a Pod manifest eyrie cannot model and leaves out of the request: volumes bound to storage
    topology or attach limits, and dynamic resource claims, each as ``<field>: <what>``. The watch bridge
    refuses such pods; a file handed to `eyrie publish` or `eyrie explain` is converted with these named."""
    raw = document.get("spec")
    spec: dict[str, Any] = raw if isinstance(raw, dict) else {}
    warnings = []
    for index, volume in enumerate(spec.get("volumes") or []):
        for source in volume if isinstance(volume, dict) else ():
            if source != "name" and source not in NODE_INDEPENDENT_VOLUMES:
                warnings.append(
                    f"spec.volumes[{index}].{source}: eyrie does not place by storage topology or attach "
                    "limits; the volume is left out"
                )
    if spec.get("resourceClaims"):
        warnings.append(
            "spec.resourceClaims: dynamic resource allocation is not modelled; the claims are left out"
        )
    return warnings


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
        "image": spec.get("image") or "",
    }
    if spec.get("restartPolicy") is not None:
        container["restart_policy"] = spec["restartPolicy"]
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


def _requirements(raw: object, field: str) -> list[dict[str, Any]]:
    return [
        {
            "key": expr.get("key"),
            "operator": expr.get("operator"),
            "values": expr.get("values") or [],
        }
        for index, item in enumerate(_list(raw, field))
        for expr in (_mapping(item, f"{field}[{index}]"),)
    ]


def _node_selector_term(raw: object, field: str) -> dict[str, Any]:
    term = _mapping(raw, field)
    return {
        "match_expressions": _requirements(term.get("matchExpressions"), f"{field}.matchExpressions"),
        "match_fields": _requirements(term.get("matchFields"), f"{field}.matchFields"),
    }


_NODE_AFFINITY = "spec.affinity.nodeAffinity"
_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def _affinity_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), _NODE_AFFINITY)
    required = _mapping(node_affinity.get(_REQUIRED), f"{_NODE_AFFINITY}.{_REQUIRED}")
    field = f"{_NODE_AFFINITY}.{_REQUIRED}.nodeSelectorTerms"
    return [
        _node_selector_term(raw, f"{field}[{index}]")
        for index, raw in enumerate(_list(required.get("nodeSelectorTerms"), field))
    ]


def _preferred_node_terms(spec: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), _NODE_AFFINITY)
    field = f"{_NODE_AFFINITY}.{_PREFERRED}"
    terms = []
    for index, raw in enumerate(_list(node_affinity.get(_PREFERRED), field)):
        term = _mapping(raw, f"{field}[{index}]")
        terms.append(
            {
                "weight": term.get("weight"),
                "preference": _node_selector_term(term.get("preference"), f"{field}[{index}].preference"),
            }
        )
    return terms


def _label_selector(raw: object, field: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    selector = _mapping(raw, field)
    return {
        "match_labels": _mapping(selector.get("matchLabels"), f"{field}.matchLabels"),
        "match_expressions": _requirements(selector.get("matchExpressions"), f"{field}.matchExpressions"),
    }


def _pod_affinity_term(raw: object, field: str) -> dict[str, Any]:
    term = _mapping(raw, field)
    return {
        "label_selector": _label_selector(term.get("labelSelector"), f"{field}.labelSelector"),
        "namespaces": _list(term.get("namespaces"), f"{field}.namespaces"),
        "namespace_selector": _label_selector(term.get("namespaceSelector"), f"{field}.namespaceSelector"),
        "topology_key": term.get("topologyKey"),
        "match_label_keys": _list(term.get("matchLabelKeys"), f"{field}.matchLabelKeys"),
        "mismatch_label_keys": _list(term.get("mismatchLabelKeys"), f"{field}.mismatchLabelKeys"),
    }


def _pod_affinity(spec: dict[str, Any], kind: str) -> dict[str, Any] | None:
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    if affinity.get(kind) is None:
        return None
    field = f"spec.affinity.{kind}"
    raw = _mapping(affinity.get(kind), field)
    required = [
        _pod_affinity_term(term, f"{field}.{_REQUIRED}[{index}]")
        for index, term in enumerate(_list(raw.get(_REQUIRED), f"{field}.{_REQUIRED}"))
    ]
    preferred = []
    for index, item in enumerate(_list(raw.get(_PREFERRED), f"{field}.{_PREFERRED}")):
        weighted = _mapping(item, f"{field}.{_PREFERRED}[{index}]")
        preferred.append(
            {
                "weight": weighted.get("weight"),
                "pod_affinity_term": _pod_affinity_term(
                    weighted.get("podAffinityTerm"), f"{field}.{_PREFERRED}[{index}].podAffinityTerm"
                ),
            }
        )
    return {"required": required, "preferred": preferred}


_SPREAD_FIELDS = {
    "maxSkew": "max_skew",
    "topologyKey": "topology_key",
    "whenUnsatisfiable": "when_unsatisfiable",
    "minDomains": "min_domains",
    "nodeAffinityPolicy": "node_affinity_policy",
    "nodeTaintsPolicy": "node_taints_policy",
    "matchLabelKeys": "match_label_keys",
}


def _spread_constraints(spec: dict[str, Any]) -> list[dict[str, Any]]:
    field = "spec.topologySpreadConstraints"
    constraints = []
    for index, raw in enumerate(_list(spec.get("topologySpreadConstraints"), field)):
        constraint = _mapping(raw, f"{field}[{index}]")
        converted = {
            ours: constraint[theirs] for theirs, ours in _SPREAD_FIELDS.items() if theirs in constraint
        }
        converted["label_selector"] = _label_selector(
            constraint.get("labelSelector"), f"{field}[{index}].labelSelector"
        )
        constraints.append(converted)
    return constraints


def _pod_resources(spec: dict[str, Any]) -> dict[str, Any] | None:
    if spec.get("resources") is None:
        return None
    resources = _mapping(spec.get("resources"), "spec.resources")
    return {
        "requests": _mapping(resources.get("requests"), "spec.resources.requests"),
        "limits": _mapping(resources.get("limits"), "spec.resources.limits"),
    }


_PATH_PREFIXES = (
    # Longest first: the model's path → the manifest's, for the heads that are not a plain renaming.
    ("gpu.milli", f"metadata.annotations.{GPU_MILLI}"),
    ("gpu.count", f"metadata.annotations.{GPU_COUNT}"),
    ("gpu.models", f"metadata.annotations.{GPU_CARD_MODEL}"),
    ("pod_anti_affinity.preferred", f"spec.affinity.podAntiAffinity.{_PREFERRED}"),
    ("pod_anti_affinity.required", f"spec.affinity.podAntiAffinity.{_REQUIRED}"),
    ("pod_affinity.preferred", f"spec.affinity.podAffinity.{_PREFERRED}"),
    ("pod_affinity.required", f"spec.affinity.podAffinity.{_REQUIRED}"),
    ("preferred_node_affinity", f"{_NODE_AFFINITY}.{_PREFERRED}"),
    ("node_affinity", f"{_NODE_AFFINITY}.{_REQUIRED}.nodeSelectorTerms"),
    ("labels", "metadata.labels"),
    ("namespace", "metadata.namespace"),
    ("name", "metadata.name"),
    ("uid", "metadata.uid"),
)
_CONTAINER_RESOURCES = re.compile(r"^(spec\.(?:containers|initContainers)\[\d+\])\.(requests|limits)")


def _camel(segment: str) -> str:
    head, *rest = segment.split("_")
    return head + "".join(word[:1].upper() + word[1:] for word in rest)


def manifest_path(field: str | None) -> str:
    """Where in a Pod manifest the `PodRequest` field path ``Pod.a.0.b`` (pydantic's, as `InvalidInput`
    names it) is: ``spec.a[0].b`` with the manifest's own names, so the person reading the error can find
    the line. Resource names and label keys after the known heads are kept as they are."""
    if not field:
        return ""
    path = field.removeprefix("Pod.")
    manifest = ""
    for prefix, target in _PATH_PREFIXES:
        if path == prefix or path.startswith(prefix + "."):
            manifest, path = target, path[len(prefix) + 1 :]
            break
    else:
        manifest = "spec"
    opaque = manifest.endswith(("labels", "requests", "limits", "overhead"))
    for segment in path.split(".") if path else []:
        if opaque:
            manifest += f".{segment}"
        elif segment.isdigit():
            manifest += f"[{segment}]"
        else:
            manifest += f".{_camel(segment)}"
            opaque = segment in ("labels", "requests", "limits", "overhead", "match_labels", "node_selector")
    return _CONTAINER_RESOURCES.sub(r"\1.resources.\2", manifest)


def _timestamp(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, datetime):  # YAML parses unquoted RFC 3339 times itself
        return value.timestamp()
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ManifestError(f"not an RFC 3339 time: {value!r}", field="metadata.creationTimestamp") from None


def _annotation_int(annotations: dict[str, Any], key: str) -> int | None:
    raw = annotations.get(key)
    if raw is None:
        return None
    try:
        return int(str(raw).strip())
    except ValueError:
        field = f"metadata.annotations.{key}"
        raise ManifestError(f"expected an integer, got {raw!r}", field=field) from None


def _gpu_request(annotations: dict[str, Any]) -> dict[str, Any] | None:
    """The GPU-sharing annotations (docs/gpu-sharing.md) as a `GpuRequest`: `GPU_MILLI` per card,
    `GPU_COUNT` cards (1 when only the milli is given; a count of 0 asks for none, as in the FGD
    simulator), `GPU_CARD_MODEL` the allowed models joined by ``|``."""
    milli = _annotation_int(annotations, GPU_MILLI)
    count = _annotation_int(annotations, GPU_COUNT)
    if milli is None and count is None:
        return None
    if count == 0:
        return None
    models = [model for model in str(annotations.get(GPU_CARD_MODEL) or "").split("|") if model]
    return {
        "milli": MILLI_PER_CARD if milli is None else milli,
        "count": 1 if count is None else count,
        "models": models,
    }


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
        "resources": _pod_resources(spec),
        "node_name": spec.get("nodeName") or None,
        "scheduling_gates": [
            _mapping(gate, f"spec.schedulingGates[{index}]").get("name")
            for index, gate in enumerate(_list(spec.get("schedulingGates"), "spec.schedulingGates"))
        ],
        "node_selector": _mapping(spec.get("nodeSelector"), "spec.nodeSelector"),
        "node_affinity": _affinity_terms(spec),
        "preferred_node_affinity": _preferred_node_terms(spec),
        "pod_affinity": _pod_affinity(spec, "podAffinity"),
        "pod_anti_affinity": _pod_affinity(spec, "podAntiAffinity"),
        "topology_spread_constraints": _spread_constraints(spec),
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
        "gpu": _gpu_request(_mapping(metadata.get("annotations"), "metadata.annotations")),
    }
    try:
        return model_from_mapping(PodRequest, fields, prefix="Pod")
    except InvalidInput as exc:
        raise ManifestError(str(exc).removeprefix(f"{exc.field}: "), field=manifest_path(exc.field)) from None
