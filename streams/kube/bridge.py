"""The watch loop that feeds eyrie from a Kubernetes API server, without Kafka: it keeps a list-and-watch of
Nodes and one of Pods going (`streams.kube.api.KubeApi.list_and_watch`), translates every object
(`streams.kube.translate`) and awaits ``publish(record)`` for each record that changes what the pipeline
knows.

What it remembers per node (by name) and per pod (by uid): the resourceVersion it last translated and a
digest of the record it last published. A relist is diffed against that memory: an object whose version is
unchanged is not translated again, a record equal to the last published one is not published again, and
an object missing from the list is published as deleted (when the pipeline holds something for it). So a
reconnect or a 410 relist publishes only real changes. A fresh process has no memory and publishes the
whole list once; every record is then a repeat the pipeline already tolerates: an upsert of an unchanged
node changes nothing, a `PodRequest` whose uid placement holds is ignored (counted as ``duplicate_pod``),
and an `Occupant` must be idempotent by uid too. What a fresh process cannot see is a pod deleted while it
was down; `Bridge` takes the uids the pipeline holds (`held_pods`) so that the first list releases those.
Better still, `remember` takes the records an earlier bridge published (the last one per node and per pod,
as the topics hold them): then a restarted bridge publishes only what changed while it was down.

`profiles` maps a pod's ``spec.schedulerName`` to the name of the eyrie profile that places it (a profile
is a pod's ``scheduler_name``; a name it lacks is kept). ``eyrie kube bridge`` passes `DEFAULT_PROFILES`,
which sends ``eyrie``'s pods to eyrie's ``default`` profile. Every pod is also pinned to the bridge's
`cluster` (label and node selector ``eyrie.io/cluster``): pods carry no cluster field, and this one can run
in no other. Both are applied before a record is remembered, so what is remembered is what was published.

Nodes and Namespaces are listed before pods, so that occupants and requests never name a node the pipeline
has not seen yet, and every pod carries its namespace's labels (``namespace_labels``, which inter-pod
affinity's ``namespaceSelector`` matches). A namespace whose labels change later changes the pods published
after that, not those published before. A record is remembered only after ``publish`` returns: if it
raises, the loop stops with that error and the record is published again by the next bridge.

Services, ReplicationControllers, ReplicaSets and StatefulSets are listed before pods too and kept in
memory by namespace (`streams.kube.workloads.Workloads`): every pod record (request or occupant) carries
the selector kube-scheduler's DefaultSelector derives from them (``default_spread_selector``: the Services
that select the pod, the controller that owns it), which PodTopologySpread's default constraints count
with. As for namespace labels, a Service or controller that appears or changes later changes the pods
published after that, not those published before: a pod whose request went out before its ReplicaSet
reached the bridge is placed without default constraints (upstream reads the selector when it schedules).
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from policies.clusters.placement import CLUSTER_LABEL
from schemas.node import NodeEvent
from schemas.pod import LabelSelector, PodDeleted, PodRequest
from streams.kube.api import (
    NAMESPACES,
    NODES,
    PODS,
    REPLICA_SETS,
    REPLICATION_CONTROLLERS,
    SERVICES,
    STATEFUL_SETS,
    KubeApi,
    Listed,
    Resource,
    WatchEvent,
)
from streams.kube.translate import KubeRecord, Occupant, Rejected, node_record, pod_record
from streams.kube.workloads import Workloads

__all__ = [
    "DEFAULT_PROFILES",
    "DEFAULT_SCHEDULERS",
    "PERMISSIONS",
    "WORKLOAD_RESOURCES",
    "Bridge",
    "Publish",
    "profile_of",
    "record_digest",
]

DEFAULT_SCHEDULERS = ("eyrie",)
DEFAULT_PROFILES: Mapping[str, str] = {"eyrie": "default"}
"""Pods for the ``eyrie`` scheduler are placed by eyrie's ``default`` profile (kube-scheduler's defaults);
any other scheduler name is placed by the profile of the same name."""

PERMISSIONS: tuple[tuple[str, str, str, str], ...] = (
    # (verb, API group, resource, subresource): what the bridge does, and nothing more.
    ("list", "", "nodes", ""),
    ("watch", "", "nodes", ""),
    ("list", "", "pods", ""),
    ("watch", "", "pods", ""),
    ("list", "", "namespaces", ""),  # their labels, which inter-pod affinity's namespaceSelector matches
    ("watch", "", "namespaces", ""),
    # Their selectors, from which PodTopologySpread's default constraints take a pod's (DefaultSelector).
    ("list", "", "services", ""),
    ("watch", "", "services", ""),
    ("list", "", "replicationcontrollers", ""),
    ("watch", "", "replicationcontrollers", ""),
    ("list", "apps", "replicasets", ""),
    ("watch", "apps", "replicasets", ""),
    ("list", "apps", "statefulsets", ""),
    ("watch", "apps", "statefulsets", ""),
    ("create", "events.k8s.io", "events", ""),  # FailedScheduling on a pod eyrie cannot place
)

WORKLOAD_RESOURCES: tuple[Resource, ...] = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)
"""What DefaultSelector reads, watched in every namespace whatever the bridge's label selector (a pod's
Service or ReplicaSet need not carry the pod's labels)."""

Publish = Callable[[KubeRecord], Awaitable[None]]


def record_digest(record: KubeRecord) -> str:
    """A digest of what a record says, without the moment it was made (``ts``), so that the same state seen
    again at another time compares equal."""
    body: Any
    if isinstance(record, Occupant):
        body = {"occupant": record.pod.model_dump(mode="json"), "node": record.node}
    elif isinstance(record, Rejected):
        body = {"rejected": [record.kind, record.uid, record.field, record.reason]}
    elif isinstance(record, PodDeleted):
        body = {"deleted": record.uid}
    else:
        body = {type(record).__name__: record.model_dump(mode="json", exclude={"ts"})}
    return hashlib.blake2b(orjson.dumps(body, option=orjson.OPT_SORT_KEYS), digest_size=16).hexdigest()


@dataclass(slots=True)
class _Seen:
    version: str
    """The resourceVersion last translated ("" when only known from `held_pods`/`known_nodes`)."""
    digest: str | None
    """Of the record last published; None when nothing was (another scheduler's pending pod)."""
    holds: bool
    """Whether the pipeline holds something for it that a deletion must release."""
    requested: bool = False
    """A `PodRequest` was published: placement ignores another for the uid, so none is sent again."""


def _requested(record: KubeRecord) -> bool:
    """Whether placement now holds a request for the pod that it ignores repeats of: a gated pod's is
    replaced by the version that lifts its gates, so that version must still be sent."""
    return isinstance(record, PodRequest) and not record.scheduling_gates


def profile_of(scheduler: str, profiles: Mapping[str, str] = DEFAULT_PROFILES) -> str:
    """The eyrie profile that places a pod whose ``scheduler_name`` is `scheduler`."""
    return profiles.get(scheduler, scheduler)


class Bridge:
    """Mirror Nodes and Pods into ``publish``. `schedulers` are the ``spec.schedulerName`` values whose
    pending pods eyrie places; `profiles` maps them to eyrie's profiles (`profile_of`; none: the names are
    kept); `cluster` is the cluster name the nodes are published under."""

    def __init__(
        self,
        api: KubeApi,
        publish: Publish,
        *,
        schedulers: Collection[str] = DEFAULT_SCHEDULERS,
        profiles: Mapping[str, str] | None = None,
        cluster: str = "default",
        held_pods: Iterable[str] = (),
        known_nodes: Iterable[str] = (),
        label_selector: str | None = None,
        watch_timeout_s: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.publish = publish
        self.schedulers = frozenset(schedulers)
        self.profiles = dict(profiles or {})
        self.cluster = cluster
        self.label_selector = label_selector
        self.watch_timeout_s = watch_timeout_s
        self.clock = clock
        self.counters: Counter[str] = Counter()
        self.nodes: dict[str, _Seen] = {name: _Seen("", None, holds=True) for name in known_nodes}
        self.pods: dict[str, _Seen] = {uid: _Seen("", None, holds=True) for uid in held_pods}
        self.namespace_labels: dict[str, dict[str, str]] = {}
        self.nodes_synced = asyncio.Event()
        self.namespaces_synced = asyncio.Event()
        self.workloads = Workloads()
        self.workloads_synced = {resource.kind: asyncio.Event() for resource in WORKLOAD_RESOURCES}
        self.pods_synced = asyncio.Event()

    def remember(self, record: KubeRecord, *, requested: bool = False) -> None:
        """Take `record` as the last one published for its node or pod (by an earlier bridge: seeding a new
        one from the topics). `requested`: a `PodRequest` was published for the pod at some point, so none
        is sent again. A deletion forgets the object, as publishing it does."""
        if isinstance(record, NodeEvent):
            if record.type == "delete":
                self.nodes.pop(record.node.name, None)
            else:
                self.nodes[record.node.name] = _Seen("", record_digest(record), holds=True)
            return
        if isinstance(record, PodDeleted):
            self.pods.pop(record.uid, None)
            return
        holds = isinstance(record, PodRequest | Occupant)
        self.pods[record.uid] = _Seen(
            "", record_digest(record), holds=holds, requested=requested or _requested(record)
        )

    async def run(self) -> None:
        """Both loops until cancelled (or until `publish` or the API raises); pods start once the first
        node list is published."""
        async with asyncio.TaskGroup() as group:
            group.create_task(self.run_nodes(), name="eyrie-kube-nodes")
            group.create_task(self.run_namespaces(), name="eyrie-kube-namespaces")
            for resource in WORKLOAD_RESOURCES:
                group.create_task(self.run_workloads(resource), name=f"eyrie-kube-{resource.kind}")
            group.create_task(self.run_pods(), name="eyrie-kube-pods")

    async def run_nodes(self) -> None:
        async for item in self.api.list_and_watch(
            NODES, label_selector=self.label_selector, watch_timeout_s=self.watch_timeout_s
        ):
            if isinstance(item, Listed):
                await self.nodes_listed(item)
            else:
                await self.node_event(item)

    async def run_namespaces(self) -> None:
        async for item in self.api.list_and_watch(NAMESPACES, watch_timeout_s=self.watch_timeout_s):
            if isinstance(item, Listed):
                self.namespace_labels = {}
                for obj in item.items:
                    self.namespace_event_object(obj, deleted=False)
                self.namespaces_synced.set()
            else:
                self.namespace_event_object(item.object, deleted=item.type == "DELETED")

    def namespace_event_object(self, obj: dict[str, Any], *, deleted: bool) -> None:
        metadata = obj.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if deleted:
            self.namespace_labels.pop(name, None)
        else:
            labels = metadata.get("labels") or {}
            self.namespace_labels[name] = {str(k): str(v) for k, v in labels.items()}

    async def run_workloads(self, resource: Resource) -> None:
        """Keep `workloads` up to date with one of `WORKLOAD_RESOURCES`."""
        synced = self.workloads_synced[resource.kind]
        async for item in self.api.list_and_watch(resource, watch_timeout_s=self.watch_timeout_s):
            if isinstance(item, Listed):
                self.workloads.replace(resource.kind, item.items)
                synced.set()
            else:
                self.workloads.apply(item.object, kind=resource.kind, deleted=item.type == "DELETED")

    async def run_pods(self) -> None:
        """The pods' loop; it starts listing once `nodes_synced`, `namespaces_synced` and every one of
        `workloads_synced` are set."""
        await self.nodes_synced.wait()
        await self.namespaces_synced.wait()
        for synced in self.workloads_synced.values():
            await synced.wait()
        async for item in self.api.list_and_watch(
            PODS, label_selector=self.label_selector, watch_timeout_s=self.watch_timeout_s
        ):
            if isinstance(item, Listed):
                await self.pods_listed(item)
            else:
                await self.pod_event(item)

    async def nodes_listed(self, listed: Listed) -> None:
        """Take a (re)list of every Node: publish what changed, and the deletion of nodes it lacks."""
        await self._relist(listed, self.nodes, self._node_key, self._node_change)
        self.nodes_synced.set()

    async def pods_listed(self, listed: Listed) -> None:
        """Take a (re)list of every Pod: publish what changed, and the deletion of held pods it lacks."""
        await self._relist(listed, self.pods, self._pod_key, self._pod_change)
        self.pods_synced.set()

    async def node_event(self, event: WatchEvent) -> None:
        await self._node_change(event.object, deleted=event.type == "DELETED")

    async def pod_event(self, event: WatchEvent) -> None:
        await self._pod_change(event.object, deleted=event.type == "DELETED")

    # ---------------------------------------------------------------------------------------- core

    @staticmethod
    def _node_key(obj: dict[str, Any]) -> str:
        return str(obj.get("metadata", {}).get("name") or "")

    @staticmethod
    def _pod_key(obj: dict[str, Any]) -> str:
        metadata = obj.get("metadata", {})
        return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")

    async def _relist(
        self,
        listed: Listed,
        seen: dict[str, _Seen],
        key: Callable[[dict[str, Any]], str],
        change: Callable[..., Awaitable[None]],
    ) -> None:
        self.counters["lists"] += 1
        present = set()
        for obj in listed.items:
            present.add(key(obj))
            await change(obj, deleted=False)
        # Sorted, so that a relist's deletions come in the same order whatever the memory's history.
        for gone in sorted(set(seen) - present):
            self.counters["missing_on_relist"] += 1
            entry = seen[gone]
            await change({"metadata": {"name": gone, "uid": gone}}, deleted=True, known=entry)

    async def _node_change(self, obj: dict[str, Any], *, deleted: bool, known: _Seen | None = None) -> None:
        name = self._node_key(obj)
        entry = known or self.nodes.get(name)
        version = str(obj.get("metadata", {}).get("resourceVersion") or "")
        if not deleted and entry is not None and version and entry.version == version:
            return
        record = node_record(obj, deleted=deleted, cluster=self.cluster, now=self.clock())
        if deleted:
            if entry is not None and entry.holds:
                await self._emit(record)
            self.nodes.pop(name, None)
            return
        digest = record_digest(record)
        if entry is None or entry.digest != digest:
            await self._emit(record)
        holds = isinstance(record, NodeEvent) or (entry is not None and entry.holds)
        self.nodes[name] = _Seen(version, digest, holds=holds)

    async def _pod_change(self, obj: dict[str, Any], *, deleted: bool, known: _Seen | None = None) -> None:
        uid = self._pod_key(obj)
        entry = known or self.pods.get(uid)
        version = str(obj.get("metadata", {}).get("resourceVersion") or "")
        if not deleted and entry is not None and version and entry.version == version:
            return
        if deleted:
            if entry is not None and entry.holds:
                await self._emit(PodDeleted(uid=uid, ts=max(self.clock(), 0.0)))
            self.pods.pop(uid, None)
            return
        record = self._adapted(
            pod_record(obj, schedulers=self.schedulers, now=self.clock()),
            self.workloads.selector_for(obj.get("metadata") or {}),
        )
        if record is None:
            self.pods[uid] = entry or _Seen(version, None, holds=False)
            self.pods[uid].version = version
            return
        digest = record_digest(record)
        if isinstance(record, PodDeleted):
            # Terminated, or withdrawn before it was bound: the object stays until someone deletes it.
            if entry is not None and entry.holds:
                await self._emit(record)
            self.pods[uid] = _Seen(version, digest, holds=False)
            return
        requested = entry is not None and entry.requested
        repeat = entry is not None and (
            entry.digest == digest or (requested and isinstance(record, PodRequest))
        )
        if not repeat:
            await self._emit(record)
        holds = isinstance(record, PodRequest | Occupant) or (entry is not None and entry.holds)
        self.pods[uid] = _Seen(
            version,
            digest if not repeat else (entry.digest if entry is not None else digest),
            holds=holds,
            requested=requested or _requested(record),
        )

    def _adapted(
        self, record: KubeRecord | None, default_selector: LabelSelector | None = None
    ) -> KubeRecord | None:
        """`record` with its pod's scheduler name replaced by the profile that places it, and the pod pinned
        to this bridge's cluster: labelled ``eyrie.io/cluster`` (which routes it to the cluster's shard) and
        selecting it (so that a shard holding several clusters places it on this one's nodes only, which
        placement labels so). A pod of this API server can run nowhere else, whatever its labels said.
        `default_selector` is the pod's DefaultSelector, computed from its labels as the API server holds
        them (before the cluster label)."""
        pod = record.pod if isinstance(record, Occupant) else record
        if not isinstance(pod, PodRequest):
            return record
        update: dict[str, Any] = {}
        namespace_labels = self.namespace_labels.get(pod.namespace)
        if namespace_labels is not None and pod.namespace_labels != namespace_labels:
            update["namespace_labels"] = namespace_labels
        if pod.default_spread_selector != default_selector:
            update["default_spread_selector"] = default_selector
        profile = profile_of(pod.scheduler_name, self.profiles)
        if profile != pod.scheduler_name:
            update["scheduler_name"] = profile
        if pod.labels.get(CLUSTER_LABEL) != self.cluster:
            update["labels"] = {**pod.labels, CLUSTER_LABEL: self.cluster}
        if pod.node_selector.get(CLUSTER_LABEL) != self.cluster:
            update["node_selector"] = {**pod.node_selector, CLUSTER_LABEL: self.cluster}
        if not update:
            return record
        # The profile and cluster names were validated as names where they came in (the command's options).
        adapted = pod.model_copy(update=update)
        return Occupant(adapted, record.node, record.gpu_cards) if isinstance(record, Occupant) else adapted

    async def _emit(self, record: KubeRecord) -> None:
        self.counters[type(record).__name__] += 1
        await self.publish(record)
