"""A cluster's resource summary (Karmada's ``status.resourceSummary``), kept incrementally.

Per cluster: allocatable, allocated (pods the applier confirmed, and usage given as totals) and allocating
(pods placement assumed and the applier has not confirmed yet), per resource, ``pods`` included; and, with
resource modeling on, how many nodes are in each grade of the cluster's resource models.

Every event costs what it touches, never the cluster's size: a pod event adds or subtracts the pod's
requests (a handful of resources) and regrades its one node (a binary search per model resource); a node
event adds or subtracts that node. `recount` recomputes everything from the nodes, for checks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from policies.clusters.models import DEFAULT_MODELS, ResourceModels
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec

__all__ = ["DEFAULT_MAX_PODS", "ClusterStatus", "ClusterSummary", "ClusterView", "allowed_pods"]

DEFAULT_MAX_PODS = 110
"""A node that reports no ``pods`` allocatable gets the kubelet's default maxPods (as the snapshot does)."""


class ClusterView(Protocol):
    """What the estimators read of a cluster."""

    @property
    def name(self) -> str: ...

    @property
    def has_summary(self) -> bool:
        """False when the cluster reports no resource summary at all (Karmada: nothing fits)."""
        ...

    @property
    def allocatable(self) -> Mapping[str, int]: ...

    @property
    def allocated(self) -> Mapping[str, int]: ...

    @property
    def allocating(self) -> Mapping[str, int]: ...

    @property
    def models(self) -> ResourceModels: ...

    @property
    def grade_counts(self) -> Sequence[int] | None:
        """Nodes per grade, by position in `models`; None when the cluster reports none (modeling off)."""
        ...


def allowed_pods(cluster: ClusterView) -> int:
    """Karmada's getAllowedPodNumber: allocatable − allocated − allocating pods, 0 when not positive."""
    if not cluster.has_summary:
        return 0
    free = (
        cluster.allocatable.get("pods", 0)
        - cluster.allocated.get("pods", 0)
        - cluster.allocating.get("pods", 0)
    )
    return free if free > 0 else 0


@dataclass(frozen=True, slots=True)
class ClusterStatus:
    """A cluster as a document reports it (``eyrie clusters``' CLUSTERS.json), fixed."""

    name: str
    allocatable: Mapping[str, int] = field(default_factory=dict)
    allocated: Mapping[str, int] = field(default_factory=dict)
    allocating: Mapping[str, int] = field(default_factory=dict)
    models: ResourceModels = DEFAULT_MODELS
    grade_counts: Sequence[int] | None = None
    has_summary: bool = True


class _Node:
    __slots__ = ("active", "allocatable", "allocated", "allocating", "pods", "position")

    def __init__(self) -> None:
        self.allocatable: dict[str, int] = {}
        self.allocated: dict[str, int] = {}
        self.allocating: dict[str, int] = {}
        self.pods: set[str] = set()
        self.position = -1
        """Its grade's position in the models; -1 while it counts in no grade (cordoned, modeling off)."""
        self.active = True


class _Pod:
    __slots__ = ("confirmed", "node", "requests")

    def __init__(self, node: str, requests: dict[str, int], confirmed: bool) -> None:
        self.node = node
        self.requests = requests
        self.confirmed = confirmed


def _add(total: dict[str, int], amounts: Mapping[str, int], sign: int) -> None:
    for name, amount in amounts.items():
        value = total.get(name, 0) + sign * amount
        if value:
            total[name] = value
        else:
            total.pop(name, None)


class ClusterSummary:
    """One cluster's summary and per-grade node counts, updated per node and pod event.

    Cordoned nodes count nowhere (no allocatable, no usage, no grade) until uncordoned: they take no
    replicas. A pod's requests count in ``allocating`` from `assume` until `confirm`, then in ``allocated``.
    """

    def __init__(self, name: str, models: ResourceModels | None = None, *, modeling: bool = True) -> None:
        self.name = name
        self.models = models or DEFAULT_MODELS
        self.has_summary = True
        self.allocatable: dict[str, int] = {}
        self.allocated: dict[str, int] = {}
        self.allocating: dict[str, int] = {}
        self._counts: list[int] | None = [0] * len(self.models) if modeling else None
        self._nodes: dict[str, _Node] = {}
        self._pods: dict[str, _Pod] = {}

    # ------------------------------------------------------------------------------------ reading

    @property
    def modeling(self) -> bool:
        return self._counts is not None

    @property
    def grade_counts(self) -> Sequence[int] | None:
        return self._counts

    def modelings(self) -> list[dict[str, int]]:
        """Karmada's ``allocatableModelings``: [{grade, count}] in model order (empty with modeling off)."""
        if self._counts is None:
            return []
        return [{"grade": g, "count": c} for g, c in zip(self.models.grades, self._counts, strict=True)]

    @property
    def nodes(self) -> int:
        return len(self._nodes)

    def node_of(self, uid: str) -> str | None:
        pod = self._pods.get(uid)
        return pod.node if pod is not None else None

    def __contains__(self, uid: object) -> bool:
        return uid in self._pods

    def to_document(self) -> dict[str, Any]:
        """This cluster as an entry of CLUSTERS.json (Karmada's field names, base units)."""
        summary: dict[str, Any] = {
            "allocatable": dict(self.allocatable),
            "allocated": dict(self.allocated),
            "allocating": dict(self.allocating),
        }
        for key in ("allocatable", "allocated", "allocating"):
            if "cpu" in summary[key]:
                summary[key]["cpu"] = f"{summary[key]['cpu']}m"
        if self._counts is not None:
            summary["allocatableModelings"] = self.modelings()
        return {"name": self.name, "resourceSummary": summary, "resourceModels": self.models.to_documents()}

    # ------------------------------------------------------------------------------------ grading

    def _grade(self, node: _Node) -> None:
        counts = self._counts
        if counts is None:
            return
        if node.position >= 0:
            counts[node.position] -= 1
            node.position = -1
        if not node.active:
            return
        allocated, allocating = node.allocated, node.allocating
        free = {
            name: amount - allocated.get(name, 0) - allocating.get(name, 0)
            for name, amount in node.allocatable.items()
        }
        node.position = self.models.grade_position(free)
        counts[node.position] += 1

    def set_modeling(self, on: bool) -> None:
        """Switch resource modeling (a configuration change: regrades every node once)."""
        if on == self.modeling:
            return
        self._counts = [0] * len(self.models) if on else None
        for node in self._nodes.values():
            node.position = -1
            self._grade(node)

    def set_models(self, models: ResourceModels) -> None:
        """Replace the cluster's resource models (regrades every node once)."""
        self.models = models
        if self._counts is not None:
            self._counts = [0] * len(models)
            for node in self._nodes.values():
                node.position = -1
                self._grade(node)

    # ------------------------------------------------------------------------------- node events

    def _contribute(self, node: _Node, sign: int) -> None:
        _add(self.allocatable, node.allocatable, sign)
        _add(self.allocated, node.allocated, sign)
        _add(self.allocating, node.allocating, sign)

    def upsert_node(self, spec: NodeSpec) -> None:
        """Add a node or update it in place (its pods stay)."""
        node = self._nodes.get(spec.name)
        if node is None:
            node = self._nodes[spec.name] = _Node()
        elif node.active:
            _add(self.allocatable, node.allocatable, -1)
        allocatable = dict(spec.allocatable)
        allocatable["pods"] = spec.allocatable.get("pods", spec.capacity.get("pods", DEFAULT_MAX_PODS))
        was_active = node.active
        node.allocatable = allocatable
        node.active = not spec.unschedulable
        if node.active and was_active:
            _add(self.allocatable, allocatable, +1)
        elif node.active:
            self._contribute(node, +1)
        elif was_active:
            # Cordoned by this update: its usage leaves the totals too (its allocatable already did).
            _add(self.allocated, node.allocated, -1)
            _add(self.allocating, node.allocating, -1)
        self._grade(node)

    def set_unschedulable(self, name: str, value: bool) -> None:
        node = self._node(name)
        if node.active == (not value):
            return
        node.active = not value
        self._contribute(node, +1 if node.active else -1)
        self._grade(node)

    def remove_node(self, name: str) -> list[str]:
        """Drop a node and the pods on it; returns their uids."""
        node = self._nodes.pop(name, None)
        if node is None:
            return []
        if node.active:
            self._contribute(node, -1)
        if self._counts is not None and node.position >= 0:
            self._counts[node.position] -= 1
        for uid in node.pods:
            self._pods.pop(uid, None)
        return sorted(node.pods)

    def _node(self, name: str) -> _Node:
        node = self._nodes.get(name)
        if node is None:
            raise InvalidInput(f"cluster {self.name!r} has no node {name!r}", field="node")
        return node

    # -------------------------------------------------------------------------------- pod events

    def _usage(self, node: _Node, amounts: Mapping[str, int], sign: int, *, confirmed: bool) -> None:
        per_node = node.allocated if confirmed else node.allocating
        _add(per_node, amounts, sign)
        if node.active:
            _add(self.allocated if confirmed else self.allocating, amounts, sign)
            self._grade(node)

    def assume(self, uid: str, node: str, requests: Mapping[str, int], *, confirmed: bool = False) -> None:
        """Count a pod on `node`: allocating until `confirm` (or allocated at once when `confirmed`)."""
        if uid in self._pods:
            raise InvalidInput(f"pod {uid!r} is already counted on {self._pods[uid].node!r}", field="uid")
        target = self._node(node)
        amounts = {name: amount for name, amount in requests.items() if name != "pods" and amount}
        amounts["pods"] = 1
        self._pods[uid] = _Pod(node, amounts, confirmed)
        target.pods.add(uid)
        self._usage(target, amounts, +1, confirmed=confirmed)

    def confirm(self, uid: str) -> None:
        """The applier committed the pod: its requests move from allocating to allocated."""
        pod = self._pods.get(uid)
        if pod is None or pod.confirmed:
            return
        node = self._nodes[pod.node]
        _add(node.allocating, pod.requests, -1)
        _add(node.allocated, pod.requests, +1)
        if node.active:
            _add(self.allocating, pod.requests, -1)
            _add(self.allocated, pod.requests, +1)
        pod.confirmed = True

    def forget(self, uid: str) -> bool:
        """The pod is gone (deleted, evicted, or its assumption undone); unknown uids are ignored."""
        pod = self._pods.pop(uid, None)
        if pod is None:
            return False
        node = self._nodes[pod.node]
        node.pods.discard(uid)
        self._usage(node, pod.requests, -1, confirmed=pod.confirmed)
        return True

    def add_usage(self, node: str, requested: Mapping[str, int], pods: int = 0) -> None:
        """Usage not tied to known pods (a node state given as totals): counted as allocated."""
        amounts = {name: amount for name, amount in requested.items() if name != "pods" and amount}
        if pods:
            amounts["pods"] = pods
        self._usage(self._node(node), amounts, +1, confirmed=True)

    # ------------------------------------------------------------------------------------ checks

    def recount(self) -> tuple[dict[str, int], dict[str, int], dict[str, int], list[int] | None]:
        """(allocatable, allocated, allocating, grade counts) recomputed from the nodes and pods alone."""
        allocatable: dict[str, int] = {}
        allocated: dict[str, int] = {}
        allocating: dict[str, int] = {}
        counts = [0] * len(self.models) if self._counts is not None else None
        for node in self._nodes.values():
            if not node.active:
                continue
            _add(allocatable, node.allocatable, +1)
            used: dict[str, int] = {}
            for uid in node.pods:
                pod = self._pods[uid]
                _add(allocated if pod.confirmed else allocating, pod.requests, +1)
                _add(used, pod.requests, +1)
            extra = dict(node.allocated)
            _add(extra, node.allocating, +1)
            _add(extra, used, -1)  # what add_usage counted
            _add(allocated, extra, +1)
            if counts is not None:
                free = {
                    name: amount - node.allocated.get(name, 0) - node.allocating.get(name, 0)
                    for name, amount in node.allocatable.items()
                }
                counts[self.models.grade_position(free)] += 1
        return allocatable, allocated, allocating, counts
