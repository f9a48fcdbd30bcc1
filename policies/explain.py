"""`eyrie explain` (docs/cli.md): load node states and a pod, run one dry cycle, report every stage.

Node states describe a cluster at one instant: each node's capacity, allocatable, labels and taints, and
what already runs on it, either as the pods themselves (``pod_requests``: actual and non-zero-default
requested totals and the pod count are derived as Kubernetes derives them) or as totals (``requested`` +
``pods``: both totals are then taken to be ``requested``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

from policies.framework.profile import ProfileSet, load_profiles
from policies.scheduler import Explanation, Scheduler
from policies.usage import PORTRAIT_METRICS, WINDOW_METRICS, unknown_metric
from portraits.hourly import HOURS, Portrait
from schemas.codec import decode_json, model_from_mapping
from schemas.exceptions import ConfigError, InvalidInput
from schemas.gpu import GpuCards
from schemas.manifest import is_pod_manifest, manifest_warnings, pod_from_manifest
from schemas.node import ContainerImage, NodeSpec, Taint
from schemas.pod import PodRequest
from schemas.quantity import ResourceList, Resources

__all__ = [
    "NodeState",
    "WindowStat",
    "build_scheduler",
    "explain_files",
    "explain_in_cluster",
    "load_node_states",
    "load_pod",
    "read_document",
    "read_json_file",
    "resolve_profiles",
    "scheduler_for_cluster",
    "to_portrait",
]

Finite = Annotated[float, Field(allow_inf_nan=False)]


class WindowStat(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mean: Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
    std: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.0


class NodeState(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=253)]
    cluster: str = "default"
    capacity: ResourceList = Field(default_factory=Resources)
    allocatable: ResourceList = Field(default_factory=Resources)
    pod_requests: list[PodRequest] = Field(default_factory=list)
    requested: ResourceList | None = None
    pods: Annotated[int, Field(ge=0)] | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    taints: list[Taint] = Field(default_factory=list)
    images: list[ContainerImage] = Field(default_factory=list)
    """The images the node holds (ImageLocality)."""
    unschedulable: bool = False
    gpus: GpuCards | None = None
    window: dict[str, WindowStat] = Field(default_factory=dict)
    """Sliding-window mean and std per metric, in base units (cpu cores, memory bytes)."""
    portrait: dict[str, Annotated[list[tuple[Finite, Finite]], Field(min_length=24, max_length=24)]] = Field(
        default_factory=dict
    )
    """Hourly [mean, std] × 24 per metric."""
    assumed: ResourceList = Field(default_factory=Resources)
    """Requests of pods assumed since the window's last sample."""
    oversell_rate: Annotated[float, Field(gt=0.0, le=100.0)] | None = None

    @model_validator(mode="after")
    def _one_form_of_usage(self) -> NodeState:
        if self.pod_requests and (self.requested is not None or self.pods is not None):
            raise ValueError("give either pod_requests or the requested + pods shorthand, not both")
        return self

    def spec(self) -> NodeSpec:
        return NodeSpec(
            name=self.name,
            cluster=self.cluster,
            capacity=self.capacity,
            allocatable=self.allocatable,
            labels=self.labels,
            taints=self.taints,
            images=self.images,
            unschedulable=self.unschedulable,
            oversell_rate=self.oversell_rate,
            gpus=self.gpus,
        )


def read_json_file(path: str | Path) -> Any:
    """A JSON file's document; an unreadable file or bad JSON is `InvalidInput` naming the path."""
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise InvalidInput(f"{path}: {exc.strerror or exc}") from None
    try:
        return decode_json(text)
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None


def read_document(path: str | Path) -> Any:
    """A JSON file's document, or a YAML file's (``.yaml``, ``.yml``: one document)."""
    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        return read_json_file(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise InvalidInput(f"{path}: {reason}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InvalidInput(f"{path}: not valid YAML: {' '.join(str(exc).split())}") from None


def load_node_states(path: str | Path) -> list[NodeState]:
    document = read_document(path)
    if not isinstance(document, list):
        raise InvalidInput(f"{path}: expected a list of node states")
    states = []
    for index, item in enumerate(document):
        try:
            states.append(model_from_mapping(NodeState, item, prefix=f"[{index}]"))
        except InvalidInput as exc:
            raise InvalidInput(f"{path}: {exc}") from None
    names = [state.name for state in states]
    duplicate = next((name for name in names if names.count(name) > 1), None)
    if duplicate is not None:
        raise InvalidInput(f"{path}: node {duplicate!r} appears twice")
    return states


def load_pod(path: str | Path) -> tuple[PodRequest, dict[str, Any]]:
    """The pod (a PodRequest, or a Kubernetes Pod manifest as `eyrie publish` reads one), and the extras
    `eyrie explain` allows beside a PodRequest (``portrait``)."""
    document = read_document(path)
    if not isinstance(document, dict):
        raise InvalidInput(f"{path}: expected an object (a PodRequest or a Pod manifest)")
    try:
        if is_pod_manifest(document):
            for warning in manifest_warnings(document):
                print(f"warning: {path}: {warning}", file=sys.stderr)
            return pod_from_manifest(document), {}
        extras = {key: document.pop(key) for key in ("portrait",) if key in document}
        return model_from_mapping(PodRequest, document), extras
    except InvalidInput as exc:
        raise InvalidInput(f"{path}: {exc}") from None


def to_portrait(hours: Mapping[str, Sequence[tuple[float, float]]], field: str) -> Portrait:
    """A portrait from `eyrie explain`'s ``{metric: [[mean, std] × 24]}`` (metrics not given have no data)."""
    mean = np.zeros((HOURS, len(PORTRAIT_METRICS)))
    std = np.zeros_like(mean)
    has = np.zeros(mean.shape, dtype=np.bool_)
    problem = unknown_metric(hours, PORTRAIT_METRICS, "portrait")
    if problem:
        raise InvalidInput(f"{field}: {problem}", field=field)
    for metric, pairs in hours.items():
        column = PORTRAIT_METRICS.index(metric)
        values = np.asarray(pairs, dtype=np.float64)
        if values.shape != (HOURS, 2) or not np.isfinite(values).all() or (values < 0).any():
            raise InvalidInput(
                f"{field}.{metric}: expected 24 pairs [mean, std] of finite numbers >= 0", field=field
            )
        mean[:, column], std[:, column], has[:, column] = values[:, 0], values[:, 1], True
    return Portrait(PORTRAIT_METRICS, mean, std, has)


def build_scheduler(
    states: list[NodeState], profiles: ProfileSet | None = None, now: float = 0.0
) -> Scheduler:
    scheduler = Scheduler(profiles)
    snapshot = scheduler.snapshot
    for index, state in enumerate(states):
        row = snapshot.upsert_node(state.spec())
        for pod in state.pod_requests:
            snapshot.assume(snapshot.pod_info(pod), row, bound=True)
        if state.requested is not None or state.pods is not None:
            snapshot.add_usage(row, state.requested or {}, state.pods or 0)
        # Measurements are as of `now`, and the pods listed on the node were running before it: the window
        # and portrait include them, while `assumed` lists what they do not.
        if state.window:
            problem = unknown_metric(sorted(state.window), WINDOW_METRICS, "window")
            if problem:
                raise InvalidInput(f"[{index}].window: {problem}", field="window")
            stats = {metric: (stat.mean, stat.std) for metric, stat in state.window.items()}
            snapshot.usage.set_window(row, stats, end=now)
        if state.portrait:
            portrait = to_portrait(state.portrait, f"[{index}].portrait")
            snapshot.usage.set_node_portrait(row, portrait, seen=np.full(HOURS, now))
        if state.assumed:
            snapshot.usage.add_assumed(row, state.assumed)
    return scheduler


def resolve_profiles(
    profile_path: str | Path | None, scheduler_name: str | None, pod: PodRequest
) -> tuple[ProfileSet, str | None]:
    """The profiles a worker would hold and the one to explain with.

    A worker holds the built-in profiles and every published one (a published profile replaces the
    built-in of its name), so `--profile`'s profiles join the built-ins here. The cycle runs
    `--scheduler-name` when given (it must exist), else the file's profile when it holds only one, else
    the pod's `scheduler_name` as placement would: None when no profile has that name, which placement
    answers with unschedulable, not with another profile's decision."""
    profiles = ProfileSet.builtin()
    loaded = load_profiles(profile_path) if profile_path is not None else {}
    for profile in loaded.values():
        profiles.replace(profile)
    if scheduler_name is not None:
        if profiles.get(scheduler_name) is None:
            known = ", ".join(profiles.names())
            raise ConfigError(f"--scheduler-name: no profile named {scheduler_name!r} (known: {known})")
        return profiles, scheduler_name
    if len(loaded) == 1:
        return profiles, next(iter(loaded))
    return profiles, None


def scheduler_for_cluster(
    nodes: Iterable[NodeSpec], occupants: Iterable[tuple[PodRequest, str]], profiles: ProfileSet | None = None
) -> Scheduler:
    """A scheduler holding `nodes` with each (pod, node name) of `occupants` bound there, as a cluster's
    objects describe it (pods bound by anyone)."""
    scheduler = Scheduler(profiles)
    snapshot = scheduler.snapshot
    for spec in nodes:
        scheduler.upsert_node(spec)
    for pod, node in occupants:
        snapshot.assume(snapshot.pod_info(pod), snapshot.row_of(node), bound=True)
    return scheduler


def explain_files(
    nodes: str | Path,
    pod_path: str | Path,
    profile: str | Path | None = None,
    scheduler_name: str | None = None,
) -> Explanation:
    states = load_node_states(nodes)
    pod, extras = load_pod(pod_path)
    profiles, name = resolve_profiles(profile, scheduler_name, pod)
    return _explain(build_scheduler(states, profiles), pod, extras, pod_path, name)


def explain_in_cluster(
    scheduler: Scheduler,
    pod: PodRequest,
    extras: Mapping[str, Any],
    pod_path: str | Path,
    profile_name: str | None,
) -> Explanation:
    """One dry cycle for `pod` (as `load_pod` read it from `pod_path`) in the cluster `scheduler` holds."""
    return _explain(scheduler, pod, extras, pod_path, profile_name)


def _explain(
    scheduler: Scheduler,
    pod: PodRequest,
    extras: Mapping[str, Any],
    pod_path: str | Path,
    profile_name: str | None,
) -> Explanation:
    if "portrait" in extras:
        if not isinstance(extras["portrait"], dict):
            raise InvalidInput(f"{pod_path}: portrait: expected an object {{metric: [[mean, std] x 24]}}")
        portrait = to_portrait(extras["portrait"], "portrait")
        scheduler.snapshot.usage.set_workload_portrait(pod.workload or pod.uid, portrait)
    return scheduler.explain(pod, profile_name=profile_name)
