"""Pod requests and deletions, with QoS class and effective requests derived as Kubernetes derives them."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cached_property
from typing import Any, Literal

from pydantic import ConfigDict, Field, TypeAdapter, field_validator, model_validator

from schemas.base import Event, LabelKey, LabelValue, Name, Timestamp
from schemas.gpu import GPU_RESOURCE, MAX_CARDS, CardIndex, GpuRequest
from schemas.quantity import ResourceList, Resources

__all__ = [
    "POD_GROUP_LABELS",
    "POD_GROUP_MIN_AVAILABLE_LABEL",
    "WORKLOAD_NAME_LIMIT",
    "Container",
    "HostPort",
    "LabelSelector",
    "LabelSelectorRequirement",
    "NodeSelectorRequirement",
    "NodeSelectorTerm",
    "PodAffinity",
    "PodAffinityTerm",
    "PodBound",
    "PodDeleted",
    "PodGroup",
    "PodRequest",
    "PodResources",
    "PreferredSchedulingTerm",
    "QOSClass",
    "Toleration",
    "TopologySpreadConstraint",
    "WeightedPodAffinityTerm",
    "effective_resources",
    "whole_cards",
]

QOSClass = Literal["Guaranteed", "Burstable", "BestEffort"]

# The coscheduling plugin has used two label spellings over its releases; both name the group.
POD_GROUP_LABELS = ("pod-group.scheduling.sigs.k8s.io/name", "scheduling.x-k8s.io/pod-group")
POD_GROUP_MIN_AVAILABLE_LABEL = "pod-group.scheduling.sigs.k8s.io/min-available"

_QOS_RESOURCES = ("cpu", "memory")
_POD_LEVEL_RESOURCES = ("cpu", "memory")

WORKLOAD_NAME_LIMIT = 253 - 12
"""A workload's uid and name leave room for a replica's ``-<index>`` (up to 11 digits) within 253."""


class Container(Event):
    """One container's requests and limits. A limit without a request also sets the request, as the API
    server's defaulting does, so the scheduler sees what Kubernetes would."""

    name: str = Field(default="", max_length=253)
    requests: ResourceList = Field(default_factory=Resources)
    limits: ResourceList = Field(default_factory=Resources)
    image: str = Field(default="", max_length=4096)
    """The image reference (ImageLocality scores nodes that already hold it)."""
    restart_policy: Literal["Always"] | None = None
    """``Always`` on an init container makes it a sidecar: it keeps running beside the app containers, so
    its requests add to theirs (Kubernetes' restartable init containers)."""

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
    """Requirements that must all hold; a pod's terms are ORed, as in ``requiredDuringScheduling...``.
    `match_fields` select by the node's fields, of which Kubernetes supports ``metadata.name`` only."""

    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list)
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_fields(self) -> NodeSelectorTerm:
        for requirement in self.match_fields:
            if requirement.key != "metadata.name":
                raise ValueError(f"match_fields: key {requirement.key!r} is not supported (metadata.name)")
            if requirement.operator not in ("In", "NotIn"):
                raise ValueError(f"match_fields: operator {requirement.operator} is not supported")
        return self


class PreferredSchedulingTerm(Event):
    """A node preference: nodes matching `preference` gain `weight` (NodeAffinity's score)."""

    weight: int = Field(ge=1, le=100)
    preference: NodeSelectorTerm


class LabelSelectorRequirement(Event):
    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: list[LabelValue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"operator {self.operator} needs at least one value")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.operator == "In":
            return value is not None and value in self.values
        if self.operator == "NotIn":
            return value is None or value not in self.values
        if self.operator == "Exists":
            return value is not None
        return value is None


class LabelSelector(Event):
    """Kubernetes' metav1.LabelSelector: every label and every expression must match. An empty selector
    matches everything; a missing one (None where a selector is optional) matches nothing."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    match_expressions: list[LabelSelectorRequirement] = Field(default_factory=list)

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(key) == value for key, value in self.match_labels.items()) and all(
            requirement.matches(labels) for requirement in self.match_expressions
        )


class PodAffinityTerm(Event):
    """Pods matching `label_selector` in `namespaces` (or namespaces matching `namespace_selector`; neither
    means the pod's own namespace) define topology domains by `topology_key`. `match_label_keys` and
    `mismatch_label_keys` add the pod's own values of those labels to the selector (In and NotIn)."""

    label_selector: LabelSelector | None = None
    namespaces: list[str] = Field(default_factory=list)
    namespace_selector: LabelSelector | None = None
    topology_key: LabelKey
    match_label_keys: list[LabelKey] = Field(default_factory=list)
    mismatch_label_keys: list[LabelKey] = Field(default_factory=list)


class WeightedPodAffinityTerm(Event):
    weight: int = Field(ge=1, le=100)
    pod_affinity_term: PodAffinityTerm


class PodAffinity(Event):
    """``podAffinity`` or ``podAntiAffinity``: `required` is
    ``requiredDuringSchedulingIgnoredDuringExecution``, `preferred` is
    ``preferredDuringSchedulingIgnoredDuringExecution``."""

    required: list[PodAffinityTerm] = Field(default_factory=list)
    preferred: list[WeightedPodAffinityTerm] = Field(default_factory=list)


class TopologySpreadConstraint(Event):
    """``spec.topologySpreadConstraints[]``. `node_affinity_policy` None means Honor and
    `node_taints_policy` None means Ignore, Kubernetes' defaults."""

    max_skew: int = Field(ge=1, le=2**31 - 1)
    topology_key: LabelKey
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"]
    label_selector: LabelSelector | None = None
    min_domains: int | None = Field(default=None, ge=1, le=2**31 - 1)
    node_affinity_policy: Literal["Honor", "Ignore"] | None = None
    node_taints_policy: Literal["Honor", "Ignore"] | None = None
    match_label_keys: list[LabelKey] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check_min_domains(self) -> TopologySpreadConstraint:
        if self.min_domains is not None and self.when_unsatisfiable != "DoNotSchedule":
            raise ValueError("min_domains can only be set with when_unsatisfiable DoNotSchedule")
        return self


class PodResources(Event):
    """Pod-level ``spec.resources``: where set, its cpu and memory requests (and limits) replace the sum of
    the containers' for scheduling (Kubernetes' pod-level resources)."""

    requests: ResourceList = Field(default_factory=Resources)
    limits: ResourceList = Field(default_factory=Resources)

    @model_validator(mode="after")
    def _default_requests_to_limits(self) -> PodResources:
        for resource, limit in self.limits.items():
            request = self.requests.get(resource)
            if request is None:
                if resource in _POD_LEVEL_RESOURCES:
                    self.requests[resource] = limit
            elif request > limit:
                raise ValueError(f"requests.{resource} must be less than or equal to limits.{resource}")
        for resource in (*self.requests, *self.limits):
            if resource not in _POD_LEVEL_RESOURCES and not resource.startswith("hugepages-"):
                raise ValueError(f"{resource}: pod-level resources support cpu, memory and hugepages only")
        return self


class HostPort(Event):
    port: int = Field(ge=1, le=65535)
    protocol: Literal["TCP", "UDP", "SCTP"] = "TCP"
    host_ip: str = Field(default="0.0.0.0", max_length=45)  # the longest IPv6 text form


def _sum_into(total: dict[str, int], resources: dict[str, int]) -> None:
    for name, amount in resources.items():
        total[name] = total.get(name, 0) + amount


def effective_resources(
    containers: list[Container],
    init: list[Container],
    pod_level: PodResources | None,
    overhead: dict[str, int],
    which: Literal["requests", "limits"],
) -> Resources:
    # Kubernetes' PodRequests / PodLimits (component-helpers resource, v1.36). App containers add up.
    # Init containers run one at a time before them, so the pod needs the larger of that sum and the largest
    # init container; a sidecar (an init container with restartPolicy Always) keeps running, so it adds to
    # the sum and to every init container that starts after it. Pod-level cpu and memory, where given,
    # replace the containers' figure; overhead adds to every request, and to limits that are set.
    total = Resources()
    for container in containers:
        _sum_into(total, getattr(container, which))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in init:
        amounts: dict[str, int] = getattr(container, which)
        if container.restart_policy == "Always":
            _sum_into(total, amounts)
            _sum_into(sidecars, amounts)
            running = sidecars
        else:
            running = dict(amounts)
            _sum_into(running, sidecars)
        for name, amount in running.items():
            if name not in init_peak or amount > init_peak[name]:
                init_peak[name] = amount
    for name, amount in init_peak.items():
        if name not in total or amount > total[name]:
            total[name] = amount
    if pod_level is not None:
        for name, amount in getattr(pod_level, which).items():
            if name in _POD_LEVEL_RESOURCES or name.startswith("hugepages-"):
                total[name] = amount
    if which == "requests":
        _sum_into(total, overhead)
    else:
        for name, amount in overhead.items():
            if total.get(name, 0):
                total[name] += amount
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
    resources: PodResources | None = None
    """Pod-level ``spec.resources`` (not the ``requests``/``limits`` shorthand, which is one container)."""
    node_name: Name | None = None
    """``spec.nodeName`` set before scheduling: the pod may only go to that node (NodeName)."""
    scheduling_gates: list[Name] = Field(default_factory=list, max_length=64)
    """``spec.schedulingGates`` by name: the pod waits, unscheduled, until a version of it comes with none."""
    node_selector: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    node_affinity: list[NodeSelectorTerm] = Field(default_factory=list)
    """The required node-affinity terms (``requiredDuringSchedulingIgnoredDuringExecution``), ORed."""
    preferred_node_affinity: list[PreferredSchedulingTerm] = Field(default_factory=list)
    """``preferredDuringSchedulingIgnoredDuringExecution`` of the node affinity."""
    pod_affinity: PodAffinity | None = None
    pod_anti_affinity: PodAffinity | None = None
    topology_spread_constraints: list[TopologySpreadConstraint] = Field(default_factory=list, max_length=64)
    tolerations: list[Toleration] = Field(default_factory=list)
    host_ports: list[HostPort] = Field(default_factory=list)
    labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    namespace_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    """The labels of the pod's namespace, which affinity terms' ``namespaceSelector`` match against."""
    default_spread_selector: LabelSelector | None = None
    """The selectors of the Services, ReplicationControllers, ReplicaSets and StatefulSets that select or own
    the pod, merged as kube-scheduler's DefaultSelector does: PodTopologySpread's default constraints count
    the pods it matches, for a pod without constraints of its own. None (or empty): nothing selects or owns
    the pod, and default constraints do not apply to it. The watch bridge and ``eyrie explain`` with a
    cluster dump fill it in; a manifest alone cannot (it names its owner, not the owner's selector)."""
    replicas: int = Field(default=1, ge=1, le=1_000_000)
    created_at: Timestamp | None = None
    batch_id: str | None = Field(default=None, max_length=253)
    gpu: GpuRequest | None = None
    """GPU cards or a share of one, accounted per card (docs/gpu-sharing.md)."""

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
        """What the scheduler reserves: max(Σ containers and sidecars, largest init container plus the
        sidecars started before it), pod-level cpu and memory where set, + overhead."""
        return effective_resources(
            self.containers, self.init_containers, self.resources, self.overhead, "requests"
        )

    @cached_property
    def effective_limits(self) -> Resources:
        return effective_resources(
            self.containers, self.init_containers, self.resources, self.overhead, "limits"
        )

    @cached_property
    def qos_class(self) -> QOSClass:
        """Kubernetes' ComputePodQOS (v1.36) over cpu and memory: of the pod-level resources when the pod sets
        them (then the containers' do not count at all), else of every container, init containers included."""
        requests: dict[str, int] = {}
        limits: dict[str, int] = {}
        guaranteed = True
        if self.resources is not None:
            for name in _QOS_RESOURCES:
                if self.resources.requests.get(name, 0) > 0:
                    requests[name] = self.resources.requests[name]
                if self.resources.limits.get(name, 0) > 0:
                    limits[name] = self.resources.limits[name]
            # Upstream checks the limits only when some are set: requests without limits fail below instead.
            if self.resources.limits and len(limits) < len(_QOS_RESOURCES):
                guaranteed = False
        for container in () if self.resources is not None else (*self.init_containers, *self.containers):
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


def whole_cards(pod: PodRequest) -> PodRequest:
    """The pod as a scheduler without GPU sharing must see it: its `gpu` request as whole
    ``nvidia.com/gpu`` (a share of a card asks for one, since no node offers a tenth of a whole-unit
    resource), added to its first container. A pod already requesting as many comes back as it is."""
    if pod.gpu is None or pod.effective_requests.get(GPU_RESOURCE, 0) >= pod.gpu.count:
        return pod
    containers = list(pod.containers) or [Container(name="app")]
    requests = Resources(containers[0].requests)
    requests[GPU_RESOURCE] = pod.gpu.count
    containers[0] = containers[0].model_copy(update={"requests": requests})
    # Built anew (not model_copy), so the effective requests are derived again.
    fields = {name: getattr(pod, name) for name in PodRequest.model_fields}
    return PodRequest(**{**fields, "containers": containers})


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
    gpu_cards: list[CardIndex] = Field(default_factory=list, max_length=MAX_CARDS)
    """The GPU cards the pod holds on the node (the ``alibabacloud.com/gpu-index`` annotation), if known."""

    @model_validator(mode="after")
    def _same_pod(self) -> PodBound:
        if self.pod.uid != self.uid:
            raise ValueError(f"pod.uid {self.pod.uid!r} differs from uid {self.uid!r}")
        return self
