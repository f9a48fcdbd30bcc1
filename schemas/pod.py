"""Pod requests and deletions, with QoS class and effective requests derived as Kubernetes derives them."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, field_validator, model_validator

from schemas.base import Event, LabelKey, LabelValue, Name, Timestamp
from schemas.quantity import ResourceList, Resources

__all__ = [
    "POD_GROUP_LABELS",
    "POD_GROUP_MIN_AVAILABLE_LABEL",
    "WORKLOAD_NAME_LIMIT",
    "Container",
    "HostPort",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodBound",
    "PodDeleted",
    "PodGroup",
    "PodRequest",
    "QOSClass",
    "Toleration",
]

QOSClass = Literal["Guaranteed", "Burstable", "BestEffort"]

# The coscheduling plugin has used two label spellings over its releases; both name the group.
POD_GROUP_LABELS = ("pod-group.scheduling.sigs.k8s.io/name", "scheduling.x-k8s.io/pod-group")
POD_GROUP_MIN_AVAILABLE_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"

_QOS_RESOURCES = ("cpu", "memory")

WORKLOAD_NAME_LIMIT = 253 - 12
"""A workload's uid and name leave room for a replica's ``-<index>`` (up to 11 digits) within 253."""


class Container(Event):
    """One container's requests and limits. A limit without a request also sets the request, as the API
    server's defaulting does, so the scheduler sees what Kubernetes would."""

    name: str = Field(default="", max_length=253)
    requests: ResourceList = Field(default_factory=Resources)
    limits: ResourceList = Field(default_factory=Resources)

    @model_validator(mode="after")
    def _default_requests_to_limits(self) -> Container:
        for resource, limit in self.limits.items():
            request = self.requests.get(resource)
            if request is None:
                self.requests[resource] = limit
            elif request > limit:
                raise ValueError(f"requests.{resource} must be less than or equal to limits.{resource}")
        return self


class PodGroup(Event):
    """A gang: the pods sharing `name` are placed all together once `min_available` of them fit."""

    name: Name
    min_available: int = Field(default=1, ge=1, le=100_000)
    timeout_s: float = Field(default=60.0, gt=0.0, le=86_400.0)


class Toleration(Event):
    key: str = Field(default="", max_length=317)  # a label key's limit, as for the taints it matches
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = Field(default="", max_length=63)
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""

    @model_validator(mode="after")
    def _check_operator(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if not self.key and self.operator != "Exists":
            raise ValueError("an empty key requires operator Exists")
        return self

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        """Kubernetes' ToleratesTaint: an empty effect matches every effect, Exists with no key every key."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


class NodeSelectorRequirement(Event):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[LabelValue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_values(self) -> NodeSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        if self.operator in ("Gt", "Lt"):
            if len(self.values) != 1:
                raise ValueError(f"operator {self.operator} needs exactly one value")
            try:
                int(self.values[0])
            except ValueError:
                raise ValueError(f"operator {self.operator} needs an integer value") from None
        return self


class NodeSelectorTerm(Event):
    """Requirements that must all hold; a pod's terms are ORed, as in ``requiredDuringScheduling...``."""

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)


class HostPort(Event):
    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str = Field(default="0.0.0.0", max_length=45)  # the longest IPv6 text form


def _sum_into(total: dict[str, int], resources: dict[str, int]) -> None:
    for name, amount in resources.items():
        total[name] = total.get(name, 0) + amount


def _effective(
    containers: list[Container],
    init: list[Container],
    overhead: dict[str, int],
    which: Literal["requests", "limits"],
) -> Resources:
    # Kubernetes' computePodResourceRequest: init containers run one at a time before the app containers,
    # so the pod needs the larger of (sum of app containers) and (largest init container), per resource.
    total = Resources()
    for container in containers:
        _sum_into(total, getattr(container, which))
    for container in init:
        for name, amount in getattr(container, which).items():
            if amount > total.get(name, 0):
                total[name] = amount
    _sum_into(total, overhead)
    return total


def _shorthand_schema(schema: dict[str, Any]) -> None:
    """The JSON Schema of what `PodRequest._expand_shorthand` and `_ports_from_ints` accept beyond the fields:
    ``requests``/``limits`` at the top level (one container; not with a non-empty ``containers``), and a
    host port given as its number. Without this, exported schemas refused what the model reads."""
    resources = TypeAdapter(ResourceList).json_schema(mode="validation")
    properties = schema["properties"]
    for key in ("requests", "limits"):
        properties[key] = {**resources, "description": f"shorthand for containers: [{{{key}: ...}}]"}
    schema["dependentSchemas"] = {
        key: {"properties": {"containers": {"maxItems": 0}}} for key in ("requests", "limits")
    }
    ports = properties["host_ports"]
    ports["items"] = {"anyOf": [ports["items"], {"type": "integer", "minimum": 1, "maximum": 65535}]}


class PodRequest(Event):
    """A request to place one pod (or, with ``replicas > 1``, a workload across clusters)."""

    model_config = ConfigDict(json_schema_extra=_shorthand_schema)

    uid: Name
    name: str = Field(default="", max_length=253)
    namespace: str = Field(default="default", max_length=63)
    workload: str | None = Field(default=None, max_length=253)
    containers: list[Container] = Field(default_factory=list, max_length=64)
    init_containers: list[Container] = Field(default_factory=list, max_length=64)
    overhead: ResourceList = Field(default_factory=Resources)
    priority: int = Field(default=0, ge=-(2**31), le=2**31 - 1)
    scheduler_name: Name = "default"
    pod_group: PodGroup | None = None
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)
    tolerations: list[Toleration] = Field(default_factory=list)
    host_ports: list[HostPort] = Field(default_factory=list)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    replicas: int = Field(default=1, ge=1, le=1_000_000)
    created_at: Timestamp | None = None
    batch_id: str | None = Field(default=None, max_length=253)

    @model_validator(mode="before")
    @classmethod
    def _expand_shorthand(cls, data: Any) -> Any:
        """``requests``/``limits`` at the top level describe a single container."""
        if not isinstance(data, dict) or ("requests" not in data and "limits" not in data):
            return data
        if data.get("containers"):
            raise ValueError("give either containers or the requests/limits shorthand, not both")
        data = dict(data)
        single = {key: data.pop(key) for key in ("requests", "limits") if key in data}
        data["containers"] = [single]
        return data

    @field_validator("host_ports", mode="before")
    @classmethod
    def _ports_from_ints(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [
                {"port": item} if isinstance(item, int) and not isinstance(item, bool) else item
                for item in value
            ]
        return value

    @model_validator(mode="after")
    def _complete(self) -> PodRequest:
        # Frozen models still allow the constructor to settle derived defaults before anyone sees them.
        if not self.name:
            object.__setattr__(self, "name", self.uid)
        if self.replicas > 1:
            for field, value in (("uid", self.uid), ("name", self.name)):
                if len(value) > WORKLOAD_NAME_LIMIT:
                    raise ValueError(
                        f"{field}: at most {WORKLOAD_NAME_LIMIT} characters for a workload (replicas > 1), "
                        f"whose replicas are named <{field}>-<index> within 253"
                    )
        if self.pod_group is None:
            group = next((self.labels[key] for key in POD_GROUP_LABELS if self.labels.get(key)), None)
            if group is not None:
                raw_min = self.labels.get(POD_GROUP_MIN_AVAILABLE_LABEL, "1")
                try:
                    min_available = int(raw_min)
                except ValueError:
                    raise ValueError(
                        f"label {POD_GROUP_MIN_AVAILABLE_LABEL} must be an integer, got {raw_min!r}"
                    ) from None
                object.__setattr__(self, "pod_group", PodGroup(name=group, min_available=min_available))
        return self

    @cached_property
    def effective_requests(self) -> Resources:
        """What the scheduler reserves: max(Σ containers, largest init container) + overhead."""
        return _effective(self.containers, self.init_containers, self.overhead, "requests")

    @cached_property
    def effective_limits(self) -> Resources:
        return _effective(self.containers, self.init_containers, self.overhead, "limits")

    @cached_property
    def qos_class(self) -> QOSClass:
        """Kubernetes' GetPodQOS over cpu and memory of every container, init containers included."""
        requests: dict[str, int] = {}
        limits: dict[str, int] = {}
        guaranteed = True
        for container in (*self.init_containers, *self.containers):
            for name in _QOS_RESOURCES:
                if container.requests.get(name, 0) > 0:
                    requests[name] = requests.get(name, 0) + container.requests[name]
                if container.limits.get(name, 0) > 0:
                    limits[name] = limits.get(name, 0) + container.limits[name]
            if not all(container.limits.get(name, 0) > 0 for name in _QOS_RESOURCES):
                guaranteed = False
        if not requests and not limits:
            return "BestEffort"
        if guaranteed and requests == limits:
            return "Guaranteed"
        return "Burstable"


class PodDeleted(Event):
    """The pod is gone: placement and the applier release whatever it held."""

    kind: Literal["PodDeleted"] = "PodDeleted"
    uid: Name
    ts: Timestamp


class PodBound(Event):
    """A pod bound to a node by someone other than this pipeline's placement: another scheduler, a DaemonSet
    or static pod, a ``nodeName`` set by hand, or eyrie's own binding as the API server reports it back. Its
    requests occupy the node until a `PodDeleted` for its uid; it is a fact to count, never a request to
    decide, so placement and the ledger book it even where it leaves no room."""

    kind: Literal["PodBound"] = "PodBound"
    uid: Name
    node: Name
    pod: PodRequest
    ts: Timestamp

    @model_validator(mode="after")
    def _same_pod(self) -> PodBound:
        if self.pod.uid != self.uid:
            raise ValueError(f"pod.uid {self.pod.uid!r} differs from uid {self.uid!r}")
        return self
