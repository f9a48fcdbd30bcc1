"""Kubernetes API objects → the records eyrie's pipeline reads. Pure functions: no I/O, no clock (the
caller passes `now`), no exceptions past the caller for bad objects (they become `Rejected`).

Nodes become `NodeEvent` records. A cordon (``spec.unschedulable``) is an ``upsert`` whose spec says
``unschedulable``, not a ``cordon`` event: node-events is compacted by node name, so the last record of a
node must describe it whole, and a bare ``cordon`` left as the last record would reach a consumer that
starts later as a cordon of a node it never saw (which placement refuses). Placement and the applier's
ledger both read the flag from an upsert.

Pods become, depending on their state:

- a `PodRequest` when one of eyrie's scheduler names is in ``spec.schedulerName``, no node is set, and it
  is not terminating (a pod with scheduling gates too: placement holds it until the update that lifts the
  last gate, which comes as a new `PodRequest` of the same uid);
- an `Occupant` when a node is set and the pod has not terminated: whoever bound it (eyrie earlier,
  another scheduler, a controller that set ``spec.nodeName`` itself), its requests are taken on that node;
- a `PodDeleted` when it is deleted, Succeeded or Failed (its resources are free again), or terminating
  before it was bound (kube-scheduler does not place those either);
- a `Rejected` when it is one of eyrie's pods but cannot be read or uses what eyrie cannot honour
  (volume sources outside `NODE_INDEPENDENT_VOLUMES`, dynamic resource claims);
- None when it is none of eyrie's business (another scheduler's pod not yet bound).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput
from schemas.gpu import GPU_CARD_MODEL, GPU_COUNT, GPU_INDEX, GPU_RESOURCE, parse_gpu_index
from schemas.manifest import NODE_INDEPENDENT_VOLUMES, pod_from_manifest
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from schemas.quantity import Resources, parse_quantity, validate_resource_name

__all__ = [
    "NODE_INDEPENDENT_VOLUMES",
    "KubeRecord",
    "NodeRecord",
    "Occupant",
    "PodRecord",
    "Rejected",
    "node_record",
    "pod_record",
    "unsupported",
]

_TERMINATED = ("Succeeded", "Failed")
_TAINT_FIELD = re.compile(r"^taints\.(\d+)((?:\..+)?)$")


@dataclass(frozen=True, slots=True)
class Occupant:
    """A pod on a node, counted there whatever placed it. `requests` are its effective requests (what
    kube-scheduler reserves); `pod` is the whole request, for the ports, labels and limits that placement's
    plugins also count."""

    pod: PodRequest
    node: str
    gpu_cards: tuple[int, ...] = ()
    """The GPU cards it holds there, from its ``alibabacloud.com/gpu-index`` annotation."""

    @property
    def uid(self) -> str:
        return self.pod.uid

    @property
    def requests(self) -> Resources:
        return self.pod.effective_requests


@dataclass(frozen=True, slots=True)
class Rejected:
    """An object eyrie should act on but cannot read or honour. `field` is the object's own path to the
    culprit (``spec.containers[0].resources.requests.memory``); `reason` says what is wrong with it."""

    kind: str
    uid: str
    namespace: str
    name: str
    field: str
    reason: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.reason}" if self.field else self.reason


NodeRecord = NodeEvent | Rejected
PodRecord = PodRequest | PodDeleted | Occupant | Rejected
KubeRecord = NodeEvent | PodRequest | PodDeleted | Occupant | Rejected


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _metadata(obj: dict[str, Any]) -> dict[str, Any]:
    return _mapping(obj.get("metadata"))


# --------------------------------------------------------------------------------------------- nodes


def _node_resources(raw: object, where: str) -> Resources:
    resources = Resources()
    for name, quantity in _mapping(raw).items():
        try:
            validate_resource_name(str(name))
        except InvalidInput:
            # Nodes report resources no pod can ask eyrie for (old attachable-volumes-*, vendor names
            # without a domain): leaving them out loses nothing, rejecting the node would lose it all.
            continue
        resources[name] = parse_quantity(quantity, name, field=f"{where}.{name}")
    return resources


def node_record(
    obj: dict[str, Any], *, deleted: bool = False, cluster: str = "default", now: float
) -> NodeRecord:
    """A Node as a `NodeEvent` (``delete`` when `deleted`, else ``upsert``), or `Rejected`."""
    metadata = _metadata(obj)
    name = str(metadata.get("name") or "")
    uid = str(metadata.get("uid") or name)
    if not name:
        return Rejected("Node", uid, "", name, "metadata.name", "a Node needs a name")
    try:
        if deleted:
            gone = model_from_mapping(NodeSpec, {"name": name, "cluster": cluster})
            return model_from_mapping(NodeEvent, {"type": "delete", "node": gone, "ts": now})
        spec, status = _mapping(obj.get("spec")), _mapping(obj.get("status"))
        capacity = _node_resources(status.get("capacity"), "status.capacity")
        allocatable = _node_resources(status.get("allocatable"), "status.allocatable")
        for resource, amount in list(allocatable.items()):
            # The kubelet reports both; a capacity it did not report is taken to be the allocatable.
            capacity.setdefault(resource, amount)
        taints = [
            {key: taint[key] for key in ("key", "value", "effect") if key in taint}
            for taint in (spec.get("taints") or [])
            if isinstance(taint, dict)
        ]
        node = model_from_mapping(
            NodeSpec,
            {
                "name": name,
                "cluster": cluster,
                "capacity": capacity,
                "allocatable": allocatable,
                "labels": {str(k): str(v) for k, v in _mapping(metadata.get("labels")).items()},
                "taints": taints,
                "unschedulable": bool(spec.get("unschedulable")),
                "gpus": _node_gpus(capacity, _mapping(metadata.get("labels"))),
                "images": [
                    {"names": image.get("names") or [], "size_bytes": image.get("sizeBytes") or 0}
                    for image in (status.get("images") or [])
                    if isinstance(image, dict)
                ],
            },
        )
        return model_from_mapping(NodeEvent, {"type": "upsert", "node": node, "ts": now})
    except InvalidInput as exc:
        return Rejected("Node", uid, "", name, _node_field(exc.field), _bare(exc))


def _node_gpus(capacity: Resources, labels: dict[str, Any]) -> dict[str, Any] | None:
    """The node's GPU cards (docs/gpu-sharing.md): as many as its ``alibabacloud.com/gpu-count``
    capacity (the GPU-sharing device plugin's), else its ``nvidia.com/gpu`` capacity; the model from its
    ``alibabacloud.com/gpu-card-model`` label. None without cards."""
    count = capacity.get(GPU_COUNT, capacity.get(GPU_RESOURCE, 0))
    if count <= 0:
        return None
    return {"count": count, "model": str(labels.get(GPU_CARD_MODEL) or "")}


def _node_field(field: str | None) -> str:
    """The Node's own path for a `NodeSpec` field path."""
    if not field:
        return "status.allocatable"  # the one check without a field: allocatable above capacity
    if match := _TAINT_FIELD.match(field):
        return f"spec.taints[{match[1]}]{match[2]}"
    head = field.split(".", 1)[0]
    if head in ("capacity", "allocatable"):
        return f"status.{field}" if not field.startswith("status.") else field
    if head == "labels":
        return f"metadata.{field}"
    if field.startswith("gpus.model"):
        return f"metadata.labels.{GPU_CARD_MODEL}"
    if field.startswith("gpus.count"):
        return f"status.capacity.{GPU_COUNT}"
    return field


# ---------------------------------------------------------------------------------------------- pods


def _pod_name(metadata: dict[str, Any]) -> tuple[str, str, str]:
    name = str(metadata.get("name") or "")
    namespace = str(metadata.get("namespace") or "default")
    return str(metadata.get("uid") or f"{namespace}/{name}"), namespace, name


def unsupported(obj: dict[str, Any]) -> tuple[str, str] | None:
    """The first field of a pod that eyrie cannot honour when placing it, and why; None when there is
    none. Only hard constraints count: a preference eyrie ignores still yields a valid placement."""
    spec = _mapping(obj.get("spec"))
    for index, volume in enumerate(spec.get("volumes") or []):
        for source in _mapping(volume):
            if source != "name" and source not in NODE_INDEPENDENT_VOLUMES:
                return (
                    f"spec.volumes[{index}].{source}",
                    f"volume source {source} is not supported: eyrie does not place pods by storage "
                    f"topology or attach limits (supported: {', '.join(sorted(NODE_INDEPENDENT_VOLUMES))})",
                )
    if spec.get("resourceClaims"):
        return "spec.resourceClaims", "dynamic resource allocation (resource claims) is not supported"
    return None


def _request(obj: dict[str, Any]) -> PodRequest | Rejected:
    uid, namespace, name = _pod_name(_metadata(obj))
    document = {"apiVersion": "v1", "kind": "Pod", **obj}
    try:
        return pod_from_manifest(document)
    except InvalidInput as exc:
        return Rejected("Pod", uid, namespace, name, exc.field or "", _bare(exc))


def pod_record(
    obj: dict[str, Any], *, schedulers: Collection[str], deleted: bool = False, now: float
) -> PodRecord | None:
    """What the bridge publishes for a Pod (see the module's docstring). `schedulers` are the
    ``spec.schedulerName`` values eyrie places pods for."""
    metadata, spec = _metadata(obj), _mapping(obj.get("spec"))
    uid, namespace, name = _pod_name(metadata)
    phase = _mapping(obj.get("status")).get("phase")
    node = spec.get("nodeName")
    if deleted or phase in _TERMINATED or (not node and metadata.get("deletionTimestamp")):
        return PodDeleted(uid=uid, ts=max(now, 0.0))
    if node:
        request = _request(obj)
        if not isinstance(request, PodRequest):
            return request
        try:
            cards = parse_gpu_index(str(_mapping(metadata.get("annotations")).get(GPU_INDEX) or ""))
        except InvalidInput as exc:
            return Rejected("Pod", uid, namespace, name, f"metadata.annotations.{GPU_INDEX}", _bare(exc))
        return Occupant(request, str(node), cards)
    if (spec.get("schedulerName") or "default-scheduler") not in schedulers:
        return None
    problem = unsupported(obj)
    if problem is not None:
        return Rejected("Pod", uid, namespace, name, *problem)
    return _request(obj)


# ------------------------------------------------------------------------------------------ helpers


def _bare(exc: InvalidInput) -> str:
    """The message without the ``field: `` prefix that `InvalidInput` adds (Rejected keeps both apart)."""
    text = str(exc)
    return text.removeprefix(f"{exc.field}: ") if exc.field else text
