"""``eyrie clusters``' inputs: CLUSTERS.json with Karmada's field names, REQ.json.

CLUSTERS.json is a list of clusters::

    {"name": "member1",
     "resourceSummary": {"allocatable": {...}, "allocated": {...}, "allocating": {...},
                         "allocatableModelings": [{"grade": 0, "count": 2}, ...]},
     "resourceModels": [{"grade": 0, "ranges": [{"name": "cpu", "min": "0", "max": "1"}, ...]}, ...],
     "nodes": [node states, as `eyrie explain` reads them]}

Every part is optional. Without ``resourceModels`` the default grades apply. A summary field that is absent
is derived from ``nodes`` when they are given (allocatable and usage summed, nodes graded by the models);
a cluster with neither a summary nor nodes reports nothing, and nothing fits in it (Karmada's nil summary).
An empty ``allocatableModelings`` list means the cluster reports no per-grade counts. Counts of grades the
models do not declare are ignored, and counts of one grade listed twice add up, as in Karmada.

REQ.json is a per-replica ``{resource: quantity}``, or a PodRequest (its effective requests; its node
selector, affinity and tolerations matter to the accurate estimator).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from policies.clusters.models import DEFAULT_MODELS, ResourceModels, parse_resource_models
from policies.clusters.summary import ClusterStatus, ClusterSummary
from policies.explain import NodeState, build_scheduler, read_json_file, resolve_profiles
from policies.framework.profile import ProfileSet
from policies.scheduler import Scheduler
from schemas.codec import model_from_mapping
from schemas.exceptions import InvalidInput
from schemas.pod import PodRequest
from schemas.quantity import ResourceList, Resources, parse_resource_list, validate_resource_name

__all__ = [
    "ClusterInput",
    "build_summary",
    "load_clusters",
    "load_request",
    "parse_clusters",
    "parse_request",
    "resolve_profiles",
]


class _AllocatableModeling(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    grade: Annotated[int, Field(ge=0)]
    count: Annotated[int, Field(ge=0)]


class _ResourceSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    allocatable: ResourceList | None = None
    allocated: ResourceList | None = None
    allocating: ResourceList | None = None
    allocatable_modelings: list[_AllocatableModeling] | None = Field(
        default=None, alias="allocatableModelings"
    )


class _Cluster(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)

    name: Annotated[str, Field(min_length=1, max_length=253)]
    resource_summary: _ResourceSummary | None = Field(default=None, alias="resourceSummary")
    resource_models: list[Any] | None = Field(default=None, alias="resourceModels")
    nodes: list[NodeState] | None = None


@dataclass(slots=True)
class ClusterInput:
    """One cluster of CLUSTERS.json: what the summary and model estimators read (`status`), and its nodes
    for the accurate estimator (a scheduler over them is built on first use)."""

    status: ClusterStatus
    states: list[NodeState] | None = None
    _schedulers: dict[int, Scheduler] = field(default_factory=dict, repr=False)

    @property
    def name(self) -> str:
        return self.status.name

    def scheduler(self, profiles: ProfileSet) -> Scheduler | None:
        """A scheduler over the cluster's nodes (None when the cluster lists none)."""
        if self.states is None:
            return None
        built = self._schedulers.get(id(profiles))
        if built is None:
            built = self._schedulers[id(profiles)] = build_scheduler(self.states, profiles)
        return built


def build_summary(name: str, states: list[NodeState], models: ResourceModels | None = None) -> ClusterSummary:
    """A cluster summary from node states: pods listed on a node count as allocated, and so do totals."""
    summary = ClusterSummary(name, models)
    for state in states:
        summary.upsert_node(state.spec())
        for pod in state.pod_requests:
            summary.assume(pod.uid, state.name, pod.effective_requests, confirmed=True)
        if state.requested is not None or state.pods is not None:
            summary.add_usage(state.name, state.requested or {}, state.pods or 0)
    return summary


def _counts(models: ResourceModels, modelings: list[_AllocatableModeling]) -> list[int] | None:
    if not modelings:
        return None
    counts = [0] * len(models)
    for item in modelings:
        position = models.position.get(item.grade)
        if position is not None:
            counts[position] += item.count
    return counts


def _cluster(index: int, raw: object) -> ClusterInput:
    prefix = f"[{index}]"
    doc = model_from_mapping(_Cluster, raw, prefix=prefix)
    models = DEFAULT_MODELS
    if doc.resource_models is not None:
        models = parse_resource_models(doc.resource_models, field=f"{prefix}.resourceModels")
    states = None
    derived: ClusterSummary | None = None
    if doc.nodes is not None:
        states = []
        seen: set[str] = set()
        for j, state in enumerate(doc.nodes):
            if state.cluster not in ("default", doc.name):
                raise InvalidInput(
                    f"node {state.name!r} names cluster {state.cluster!r} but is listed under {doc.name!r}",
                    field=f"{prefix}.nodes[{j}].cluster",
                )
            if state.name in seen:
                raise InvalidInput(f"node {state.name!r} appears twice", field=f"{prefix}.nodes[{j}].name")
            seen.add(state.name)
            states.append(state.model_copy(update={"cluster": doc.name}))
        derived = build_summary(doc.name, states, models)
    summary = doc.resource_summary

    def pick(key: str) -> Mapping[str, int]:
        given: Mapping[str, int] | None = getattr(summary, key) if summary is not None else None
        if given is not None:
            return given
        return dict(getattr(derived, key)) if derived is not None else {}

    counts: list[int] | None = None
    if summary is not None and summary.allocatable_modelings is not None:
        counts = _counts(models, summary.allocatable_modelings)
    elif derived is not None:
        counts = list(derived.grade_counts or ()) or None
    status = ClusterStatus(
        name=doc.name,
        allocatable=pick("allocatable"),
        allocated=pick("allocated"),
        allocating=pick("allocating"),
        models=models,
        grade_counts=counts,
        has_summary=summary is not None or derived is not None,
    )
    return ClusterInput(status, states)


def parse_clusters(document: object) -> list[ClusterInput]:
    if not isinstance(document, list):
        raise InvalidInput("expected a JSON list of clusters")
    clusters = [_cluster(index, raw) for index, raw in enumerate(document)]
    names = [cluster.name for cluster in clusters]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise InvalidInput(f"cluster {duplicate!r} appears twice", field=f"[{names.index(duplicate)}].name")
    return clusters


def load_clusters(path: str | Path) -> list[ClusterInput]:
    document = read_json_file(path)
    try:
        return parse_clusters(document)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None


def _is_resource_list(document: Mapping[str, Any]) -> bool:
    for name in document:
        try:
            validate_resource_name(str(name))
        except InvalidInput:
            return False
    return True


def parse_request(document: object) -> tuple[Resources, PodRequest]:
    """(per-replica requests without ``pods``, a pod carrying them) from REQ.json's content."""
    if not isinstance(document, Mapping):
        raise InvalidInput("expected a JSON object: {resource: quantity} or a PodRequest")
    if _is_resource_list(document):
        requests = parse_resource_list(document)
        requests.pop("pods", None)
        pod = model_from_mapping(PodRequest, {"uid": "replica", "containers": [{"requests": requests}]})
        return Resources(requests), pod
    data = dict(document)
    data.setdefault("uid", "replica")
    pod = model_from_mapping(PodRequest, data)
    requests = Resources(pod.effective_requests)
    requests.pop("pods", None)
    return requests, pod


def load_request(path: str | Path) -> tuple[Resources, PodRequest]:
    document = read_json_file(path)
    try:
        return parse_request(document)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None
