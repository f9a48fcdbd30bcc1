"""Kubernetes API objects → the records eyrie's pipeline reads. Pure functions: no I/O, no clock (the
caller passes `now`), no exceptions past the caller for bad objects (they become `Rejected`).

Nodes become `NodeEvent` records. A cordon (``spec.unschedulable``) is an ``upsert`` whose spec says
``unschedulable``, not a ``cordon`` event: node-events is compacted by node name, so the last record of a
node must describe it whole, and a bare ``cordon`` left as the last record would reach a consumer that
starts later as a cordon of a node it never saw (which placement refuses). Placement and the applier's
ledger both read the flag from an upsert.

Pods become, depending on their state:

- a `PodRequest` when one of eyrie's scheduler names is in ``spec.schedulerName``, no node is set, no
  scheduling gate holds it, and it is not terminating;
- an `Occupant` when a node is set and the pod has not terminated: whoever bound it (eyrie earlier,
  another scheduler, a controller that set ``spec.nodeName`` itself), its requests are taken on that node;
- a `PodDeleted` when it is deleted, Succeeded or Failed (its resources are free again), or terminating
  before it was bound (kube-scheduler does not place those either);
- a `Rejected` when it is one of eyrie's pods but cannot be read or uses what eyrie cannot honour
  (`UNSUPPORTED_VOLUMES`, inter-pod affinity, hard topology spread, dynamic resource claims);
- None when it is none of eyrie's business (another scheduler's pod not yet bound; a gated pod).
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput
from schemas.manifest import pod_from_manifest
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

NODE_INDEPENDENT_VOLUMES = frozenset(
    {"emptyDir", "configMap", "secret", "projected", "downwardAPI", "hostPath", "image"}
)
"""Volume sources that any node can provide, so they do not constrain placement. Every other source
(persistentVolumeClaim, ephemeral, csi, the cloud disks...) carries topology or attach limits that eyrie
does not model: such a pod is `Rejected` rather than placed where its volume may never attach."""

_TERMINATED = ("Succeeded", "Failed")
_TAINT_FIELD = re.compile(r"^taints\.(\d+)((?:\..+)?)$")
_MODEL_FIELD = re.compile(r"^Pod\.(containers|init_containers)\.(\d+)\.(requests|limits)((?:\..+)?)$")


@dataclass(frozen=True, slots=True)
class Occupant:
    """A pod on a node, counted there whatever placed it. `requests` are its effective requests (what
    kube-scheduler reserves); `pod` is the whole request, for the ports, labels and limits that placement's
    plugins also count."""

    pod: PodRequest
    node: str

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
            },
        )
        return model_from_mapping(NodeEvent, {"type": "upsert", "node": node, "ts": now})
    except InvalidInput as exc:
        return Rejected("Node", uid, "", name, _node_field(exc.field), _bare(exc))


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
    affinity = _mapping(spec.get("affinity"))
    for kind in ("podAffinity", "podAntiAffinity"):
        if _mapping(affinity.get(kind)).get("requiredDuringSchedulingIgnoredDuringExecution"):
            return (
                f"spec.affinity.{kind}.requiredDuringSchedulingIgnoredDuringExecution",
                "required inter-pod (anti-)affinity is not supported",
            )
    node_affinity = _mapping(affinity.get("nodeAffinity"))
    required = _mapping(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"))
    for index, term in enumerate(required.get("nodeSelectorTerms") or []):
        if _mapping(term).get("matchFields"):
            return (
                "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
                f".nodeSelectorTerms[{index}].matchFields",
                "node selector matchFields are not supported (use matchExpressions on labels)",
            )
    for index, constraint in enumerate(spec.get("topologySpreadConstraints") or []):
        if _mapping(constraint).get("whenUnsatisfiable", "DoNotSchedule") == "DoNotSchedule":
            return (
                f"spec.topologySpreadConstraints[{index}]",
                "topology spread with whenUnsatisfiable: DoNotSchedule is not supported",
            )
    if spec.get("resourceClaims"):
        return "spec.resourceClaims", "dynamic resource allocation (resource claims) is not supported"
    return None


def _manifest_field(field: str | None) -> str:
    """The pod's own path for a `PodRequest` field path, so a person can find it in the manifest."""
    if not field:
        return ""
    if match := _MODEL_FIELD.match(field):
        which, index, kind, rest = match.groups()
        container = "containers" if which == "containers" else "initContainers"
        return f"spec.{container}[{index}].resources.{kind}{rest}"
    if field.startswith("Pod.overhead"):
        return "spec." + field.removeprefix("Pod.")
    return field


def _request(obj: dict[str, Any]) -> PodRequest | Rejected:
    uid, namespace, name = _pod_name(_metadata(obj))
    document = {"apiVersion": "v1", "kind": "Pod", **obj}
    try:
        return pod_from_manifest(document)
    except InvalidInput as exc:
        return Rejected("Pod", uid, namespace, name, _manifest_field(exc.field), _bare(exc))


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
        return Occupant(request, str(node)) if isinstance(request, PodRequest) else request
    if (spec.get("schedulerName") or "default-scheduler") not in schedulers:
        return None
    if spec.get("schedulingGates"):
        return None  # not ready to be placed; the update that lifts the last gate is
    problem = unsupported(obj)
    if problem is not None:
        return Rejected("Pod", uid, namespace, name, *problem)
    return _request(obj)


# ------------------------------------------------------------------------------------------ helpers


def _bare(exc: InvalidInput) -> str:
    """The message without the ``field: `` prefix that `InvalidInput` adds (Rejected keeps both apart)."""
    text = str(exc)
    return text.removeprefix(f"{exc.field}: ") if exc.field else text
