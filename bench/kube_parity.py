"""Placement parity with the real kube-scheduler: the same pods, one at a time, both schedulers' choices.

    python -m bench.kube_parity [--nodes N] [--pods M] [--seed S] [--timeout S] [--out DIR]

Uses the cluster that KUBECONFIG names, else starts a local control plane (etcd and kube-apiserver of the
pinned release, `streams.local.controlplane`) for the run. Every object of the run carries the label
``eyrie.bench/run=<run id>`` and is deleted at the end.

1. **Cluster**: N seeded, heterogeneous Node objects (`make_nodes`): zones of unequal size
   (``topology.kubernetes.io/zone``; two nodes have none), ``kubernetes.io/hostname``, ``parity/rack``
   (three nodes in four), NoSchedule and
   PreferNoSchedule taints, GPUs (``nvidia.com/gpu``), cpu, memory and pod capacity of several shapes,
   some cordoned, and container images in ``status.images``. Three namespaces with labels, a
   RuntimeClass with a pod overhead (the API server's RuntimeClass admission copies it into each pod), and
   the ReplicaSets, StatefulSet, ReplicationController and Services of the ``defaults`` group
   (`workload_objects`; no controller-manager runs, so they create no pods: the group's pods name them as
   their controller themselves).
2. **kube-scheduler**: the binary of the same release (`build_binaries`), with a configuration file that
   sets ``percentageOfNodesToScore: 100`` (it scores every feasible node, as eyrie does) and turns
   leader election off.
3. **Pods, one at a time** (`make_pods`, seeded, each tagged with its group in ``eyrie.parity/group``):
   created, then followed until kube-scheduler binds it (``spec.nodeName``) or reports it unschedulable
   (``PodScheduled=False``, reason ``Unschedulable``; the pod is then deleted, so that a later change
   cannot bind it behind the check's back). A gated pod is created with its gate, checked to be held by
   both schedulers, then the gate is removed. A pod created with ``spec.nodeName`` is bound by the API
   server itself; kube-scheduler never sees it.
4. **eyrie** checks each pod against the cluster kube-scheduler left before it: the nodes as
   `node_record` converts the Node objects read back, the pods bound before it as `pod_record` converts
   them (each with its namespace's labels and the default selector `streams.kube.workloads` derives from
   the run's Services and controllers, as the watch bridge does), one `Scheduler` with eyrie's ``default``
   profile, kept incrementally (each pod is assumed on kube-scheduler's node after its check). The pod
   itself is the object the API server returned (after its admission plugins), converted by `pod_record`.

Verdict per pod: **agree** when kube-scheduler's node is feasible in eyrie and has eyrie's highest total
(kube-scheduler picks at random among the nodes tied at the top), or when neither finds a node. Every
mismatch is printed with eyrie's filter reasons and per-plugin scores for kube-scheduler's node and for
eyrie's best. With ``--kube-scores`` (kube-scheduler at ``-v=10``, which logs its weighted per-plugin scores
and totals), each pod also has the **same scores** when kube-scheduler scored exactly eyrie's feasible
nodes with every plugin's score and every total equal to eyrie's (`compare_scores`). Prints a table per
group, then as its last line one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import orjson

from bench.kube import (
    KUBE_SCHEDULER,
    RUN_LABEL,
    _send,
    _stop,
    create_node,
    delete_all,
    ensure_no_other_scheduler,
)
from policies.scheduler import Explanation, Scheduler
from schemas.exceptions import ControlPlaneError, KubeApiError
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.kube.api import NAMESPACES, NODES, PODS, KubeApi, Listed, WatchEvent
from streams.kube.bridge import WORKLOAD_RESOURCES
from streams.kube.translate import Occupant, node_record, pod_record
from streams.kube.workloads import Workloads
from streams.local.controlplane import KUBERNETES_VERSION, build_binaries, resolved_control_plane

__all__ = [
    "GROUPS",
    "PlannedPod",
    "Report",
    "Verdict",
    "check",
    "compare_scores",
    "kube_scheduler_config",
    "main",
    "make_nodes",
    "make_pods",
    "run",
    "weighted_scores",
    "workload_objects",
]

GROUP_LABEL = "eyrie.parity/group"
PROFILE = "default"
"""eyrie's profile that follows kube-scheduler's default one."""
KUBE_SCHEDULER_NAME = "default-scheduler"
ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
RACK = "parity/rack"
GATE = "eyrie.parity/hold"
RUNTIME_CLASS_HANDLER = "runc"
OVERHEAD = {"cpu": "250m", "memory": "128Mi"}
PAUSE_IMAGE = "registry.invalid/pause:1"
"""On no node: ImageLocality scores 0 everywhere for pods that use only it."""
FIRST_POD_TIMEOUT_S = 120.0
"""kube-scheduler starts scheduling once its informers have synced; the first pod waits for that."""

GROUPS = (
    "plain",
    "taints",
    "node-affinity-required",
    "node-affinity-preferred",
    "spread-hard",
    "spread-soft",
    "pod-affinity-required",
    "pod-anti-affinity-required",
    "pod-affinity-preferred",
    "node-name",
    "gates",
    "images",
    "sidecars",
    "pod-resources",
    "overhead",
    "gpus",
    "defaults",
)

IMAGES: tuple[tuple[str, str, int], ...] = (
    # (the name pods use, the name nodes report, size in bytes): short names normalise to docker.io's.
    ("nginx:1.27", "docker.io/library/nginx:1.27", 190_000_000),
    ("docker.io/library/redis:7.2", "docker.io/library/redis:7.2", 120_000_000),
    ("postgres:16", "docker.io/library/postgres:16", 430_000_000),
    ("quay.io/parity/model-server:2", "quay.io/parity/model-server:2", 900_000_000),
    ("registry.parity.invalid/tools/small:1", "registry.parity.invalid/tools/small:1", 30_000_000),
    ("registry.parity.invalid/ml/trainer:5", "registry.parity.invalid/ml/trainer:5", 1_800_000_000),
)
APPS = ("web", "api", "cache", "db")
"""Labels of the plain pods, which the affinity groups' terms select."""


# ------------------------------------------------------------------------------------------ the cluster


def _zone_sizes(count: int) -> list[str | None]:
    """A zone per node: four zones of unequal size (about 40/30/20/10 %), and two nodes without a zone."""
    unzoned = 2 if count >= 10 else 0
    zoned = count - unzoned
    shares = (0.4, 0.3, 0.2, 0.1)
    sizes = [max(1, int(zoned * share)) for share in shares]
    sizes[0] += zoned - sum(sizes)
    zones: list[str | None] = []
    for index, size in enumerate(sizes):
        zones.extend([f"zone-{'abcd'[index]}"] * size)
    return zones + [None] * unzoned


def make_nodes(count: int, seed: int, run: str) -> list[dict[str, Any]]:
    """`count` seeded Node objects of several shapes, named and labelled for `run`."""
    rng = random.Random(f"bench.kube_parity nodes {seed}")
    zones = _zone_sizes(count)
    rng.shuffle(zones)
    objects = []
    for index, zone in enumerate(zones):
        name = f"{run}-n{index:03d}"
        cores = rng.choice((4, 8, 8, 16, 16, 32))
        memory_gib = cores * rng.choice((2, 4, 4, 8))
        pods = rng.choice((110, 110, 110, 20))
        labels = {
            HOSTNAME: name,
            RUN_LABEL: run,
            "parity/disk": rng.choice(("ssd", "hdd")),
            "parity/tier": rng.choice(("front", "back", "batch")),
            "parity/cores": str(cores),
        }
        if zone is not None:
            labels[ZONE] = zone
        if index % 4 != 3:
            # A topology key three quarters of the nodes carry (no random draw: the other choices stay).
            labels[RACK] = f"rack-{index % 3}"
        capacity: dict[str, str] = {"cpu": str(cores), "memory": f"{memory_gib}Gi", "pods": str(pods)}
        taints: list[dict[str, str]] = []
        if index % 6 == 1:
            capacity[GPU] = str(rng.choice((4, 8)))
            labels["parity/gpu"] = "true"
            if rng.random() < 0.5:
                taints.append({"key": GPU, "value": "present", "effect": "NoSchedule"})
        elif rng.random() < 0.1:
            taints.append({"key": "dedicated", "value": "infra", "effect": "NoSchedule"})
        if rng.random() < 0.15:
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
        # A little below capacity, as the kubelet reserves some for the system.
        allocatable = dict(capacity, cpu=f"{cores * 1000 - 100}m", memory=f"{memory_gib * 1024 - 256}Mi")
        images = [
            {"names": [node_name, f"{node_name.rsplit(':', 1)[0]}@sha256:{index:064x}"], "sizeBytes": size}
            for _, node_name, size in IMAGES
            if rng.random() < 0.35
        ]
        spec: dict[str, Any] = {"taints": taints} if taints else {}
        if index % 19 == 7:
            spec["unschedulable"] = True
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "images": images,
                    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                },
            }
        )
    return objects


def namespaces(run: str) -> dict[str, dict[str, str]]:
    """The run's namespaces and their labels (for namespaceSelector)."""
    return {
        f"{run}-a": {RUN_LABEL: run, "team": "alpha", "env": "prod"},
        f"{run}-b": {RUN_LABEL: run, "team": "beta", "env": "prod"},
        f"{run}-c": {RUN_LABEL: run, "team": "alpha", "env": "dev"},
    }


def _workload_paths() -> dict[str, str]:
    """The collection path of each workload kind in a namespace (formatted with it)."""
    return {
        "ReplicaSet": "/apis/apps/v1/namespaces/{}/replicasets",
        "StatefulSet": "/apis/apps/v1/namespaces/{}/statefulsets",
        "ReplicationController": "/api/v1/namespaces/{}/replicationcontrollers",
        "Service": "/api/v1/namespaces/{}/services",
    }


DEFAULTS_APPS = {
    "rs": "defaults-rs",
    "svc": "defaults-svc",
    "rsx": "defaults-rsx",
    "sts": "defaults-sts",
    "rc": "defaults-rc",
}
"""The ``app`` label of each kind of ``defaults`` pod, which the run's workload objects select."""


def workload_objects(run: str) -> list[dict[str, Any]]:
    """The Services and controllers the ``defaults`` group's pods belong to (kube-scheduler's
    DefaultSelector reads them): a ReplicaSet, one whose selector has an expression too and that a Service
    also selects, a Service alone, a StatefulSet and a ReplicationController, in the run's namespaces."""
    a, b, c = namespaces(run)

    def template(labels: dict[str, str]) -> dict[str, Any]:
        container = {"name": "main", "image": PAUSE_IMAGE}
        return {"metadata": {"labels": labels}, "spec": {"containers": [container]}}

    def meta(name: str, namespace: str) -> dict[str, Any]:
        return {"name": f"{run}-{name}", "namespace": namespace, "labels": {RUN_LABEL: run}}

    rs_labels = {"app": DEFAULTS_APPS["rs"]}
    rsx_labels = {"app": DEFAULTS_APPS["rsx"], "track": "stable"}
    rsx_selector = {
        "matchLabels": {"app": DEFAULTS_APPS["rsx"]},
        "matchExpressions": [{"key": "track", "operator": "In", "values": ["stable", "canary"]}],
    }
    sts_labels = {"app": DEFAULTS_APPS["sts"]}
    rc_labels = {"app": DEFAULTS_APPS["rc"]}
    return [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta("rs", a),
            "spec": {"replicas": 0, "selector": {"matchLabels": rs_labels}, "template": template(rs_labels)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "metadata": meta("rsx", b),
            "spec": {"replicas": 0, "selector": rsx_selector, "template": template(rsx_labels)},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta("svc", a),
            "spec": {"selector": {"app": DEFAULTS_APPS["svc"]}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta("svc-rsx", b),
            "spec": {"selector": {"app": DEFAULTS_APPS["rsx"]}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta("sts", c),
            "spec": {
                "replicas": 0,
                "serviceName": f"{run}-sts",
                "selector": {"matchLabels": sts_labels},
                "template": template(sts_labels),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "ReplicationController",
            "metadata": meta("rc", c),
            "spec": {"replicas": 0, "selector": rc_labels, "template": template(rc_labels)},
        },
    ]


MISSING_OWNER_UID = "00000000-0000-4000-8000-000000000000"
"""The uid a ``defaults`` pod gives a ReplicaSet that does not exist (the API server checks no owner)."""


def with_owner_uids(manifest: dict[str, Any], uids: Mapping[tuple[str, str, str], str]) -> dict[str, Any]:
    """The manifest with the uid of each owner it names (kind, namespace, name → uid, as created)."""
    references = manifest["metadata"].get("ownerReferences")
    if not references:
        return manifest
    namespace = manifest["metadata"]["namespace"]
    filled = [
        {**ref, "uid": uids.get((ref["kind"], namespace, ref["name"]), MISSING_OWNER_UID)}
        for ref in references
    ]
    return {**manifest, "metadata": {**manifest["metadata"], "ownerReferences": filled}}


# ------------------------------------------------------------------------------------------ the pods


@dataclass(frozen=True, slots=True)
class PlannedPod:
    name: str
    namespace: str
    group: str
    manifest: dict[str, Any]

    @property
    def gated(self) -> bool:
        return bool(self.manifest["spec"].get("schedulingGates"))


class _Planner:
    """Builds the pods of each group; `rng` decides every choice, so a seed gives the same pods."""

    def __init__(self, rng: random.Random, run: str, nodes: Sequence[dict[str, Any]]) -> None:
        self.rng = rng
        self.run = run
        self.namespaces = list(namespaces(run))
        # Nodes a nodeName pod may name: kube-scheduler is not asked, so they must fit any small pod.
        self.open_nodes = [
            node["metadata"]["name"]
            for node in nodes
            if not node["spec"].get("unschedulable")
            and not any(t["effect"] == "NoSchedule" for t in node["spec"].get("taints", []))
        ]
        self.all_nodes = [node["metadata"]["name"] for node in nodes]
        self.counts: dict[str, int] = {}

    def requests(self, big: bool = False) -> dict[str, str]:
        cpu = self.rng.choice(("100m", "250m", "500m", "1", "2") if not big else ("2", "4"))
        memory = self.rng.choice(("128Mi", "256Mi", "512Mi", "1Gi", "2Gi") if not big else ("4Gi", "8Gi"))
        return {"cpu": cpu, "memory": memory}

    def container(self, name: str = "main", image: str = PAUSE_IMAGE, **extra: Any) -> dict[str, Any]:
        return {"name": name, "image": image, "resources": {"requests": self.requests()}, **extra}

    def pod(self, group: str, spec: dict[str, Any], labels: Mapping[str, str] = {}) -> PlannedPod:
        index = self.counts[group] = self.counts.get(group, 0) + 1
        name = f"{group}-{index:03d}"
        namespace = spec.pop("_namespace", None) or self.rng.choice(self.namespaces)
        spec.setdefault("containers", [self.container()])
        manifest = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {RUN_LABEL: self.run, GROUP_LABEL: group, **labels},
            },
            "spec": {"schedulerName": KUBE_SCHEDULER_NAME, "terminationGracePeriodSeconds": 0, **spec},
        }
        return PlannedPod(name, namespace, group, manifest)

    # One method per group: each pod of the group is one of a few variants.

    def plain(self) -> PlannedPod:
        variant = self.rng.randrange(10)
        labels = {"app": self.rng.choice(APPS)}
        if variant == 0:
            # No requests: both schedulers score it with the non-zero defaults (100m, 200 MB).
            return self.pod("plain", {"containers": [{"name": "main", "image": PAUSE_IMAGE}]}, labels)
        if variant == 1:
            # Limits only: the API server copies them into requests.
            limits = self.requests()
            return self.pod(
                "plain",
                {"containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {"limits": limits}}]},
                labels,
            )
        if variant == 2 and self.counts.get("plain", 0) % 3 == 0:
            # Too big for every node: unschedulable by design.
            big = {"cpu": "64", "memory": "1Gi"}
            container = {"name": "main", "image": PAUSE_IMAGE, "resources": {"requests": big}}
            return self.pod("plain", {"containers": [container]}, labels)
        return self.pod("plain", {}, labels)

    def taints(self) -> PlannedPod:
        tolerations = self.rng.choice(
            (
                [{"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}],
                [{"key": "spot", "operator": "Exists", "effect": "PreferNoSchedule"}],
                [{"key": "spot", "operator": "Exists"}, {"key": GPU, "operator": "Exists"}],
                [{"operator": "Exists"}],
                [{"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}],
            )
        )
        return self.pod("taints", {"tolerations": tolerations}, {"app": "tolerant"})

    def node_affinity_required(self) -> PlannedPod:
        variant = self.rng.randrange(6)
        spec: dict[str, Any]
        if variant == 0:
            spec = {"nodeSelector": {"parity/disk": "ssd"}}
        elif variant == 1:
            terms = [
                {"matchExpressions": [{"key": "parity/cores", "operator": "Gt", "values": ["8"]}]},
                {"matchExpressions": [{"key": "parity/tier", "operator": "In", "values": ["batch"]}]},
            ]
            spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}}  # fmt: skip
        elif variant == 2:
            # matchFields takes one name per requirement: the terms are ORed.
            names = self.rng.sample(self.all_nodes, k=min(6, len(self.all_nodes)))
            terms = [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                for name in names
            ]
            spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": terms}}}}  # fmt: skip
        elif variant == 3:
            expressions = [
                {"key": ZONE, "operator": "NotIn", "values": ["zone-a"]},
                {"key": "parity/disk", "operator": "Exists"},
            ]
            spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]}}}}  # fmt: skip
        elif variant == 4 and self.counts.get("node-affinity-required", 0) % 2 == 0:
            # No node has it: unschedulable by design.
            spec = {"nodeSelector": {"parity/nowhere": "true"}}
        else:
            spec = {"nodeSelector": {ZONE: self.rng.choice(("zone-b", "zone-c", "zone-d"))}}
        return self.pod("node-affinity-required", spec, {"app": "pinned"})

    def node_affinity_preferred(self) -> PlannedPod:
        preferences = [
            {"weight": self.rng.randint(1, 100), "preference": {"matchExpressions": [expression]}}
            for expression in self.rng.sample(
                [
                    {"key": "parity/disk", "operator": "In", "values": ["ssd"]},
                    {"key": ZONE, "operator": "In", "values": ["zone-c", "zone-d"]},
                    {"key": "parity/cores", "operator": "Lt", "values": ["16"]},
                    {"key": "parity/tier", "operator": "NotIn", "values": ["front"]},
                    {"key": "parity/gpu", "operator": "DoesNotExist"},
                ],
                k=self.rng.randint(1, 3),
            )
        ]
        node_affinity: dict[str, Any] = {"preferredDuringSchedulingIgnoredDuringExecution": preferences}
        if self.rng.random() < 0.3:
            node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": ZONE, "operator": "Exists"}]}]
            }
        return self.pod(
            "node-affinity-preferred", {"affinity": {"nodeAffinity": node_affinity}}, {"app": "pref"}
        )

    def _spread(self, group: str, unsatisfiable: str) -> PlannedPod:
        app = f"{group}-{self.rng.randrange(7)}"
        selector = {"matchLabels": {"app": app}}
        labels = {"app": app}
        variant = int(app[-1])
        constraints: list[dict[str, Any]]
        spec: dict[str, Any] = {"_namespace": self.namespaces[variant % 2]}
        if variant == 0:
            constraints = [{"maxSkew": 1, "topologyKey": ZONE, "labelSelector": selector}]
        elif variant == 1:
            constraints = [
                {"maxSkew": 2, "topologyKey": HOSTNAME, "labelSelector": selector},
                {"maxSkew": 1, "topologyKey": ZONE, "labelSelector": selector},
            ]
        elif variant == 2:
            # More domains wanted than there are zones: the global minimum counts as 0 (DoNotSchedule).
            minimum = {"minDomains": 5} if unsatisfiable == "DoNotSchedule" else {}
            constraints = [{"maxSkew": 2, "topologyKey": ZONE, "labelSelector": selector, **minimum}]
        elif variant == 3:
            spec["nodeSelector"] = {"parity/disk": "ssd"}
            constraints = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "labelSelector": selector,
                    "nodeAffinityPolicy": self.rng.choice(("Honor", "Ignore")),
                    "nodeTaintsPolicy": self.rng.choice(("Honor", "Ignore")),
                }
            ]
        elif variant == 5:
            # A set-based selector over two apps, and a key some nodes lack: those fail DoNotSchedule
            # (missing label) and go unscored under ScheduleAnyway.
            expressions = {
                "matchExpressions": [{"key": "app", "operator": "In", "values": [app, f"{group}-0"]}]
            }
            constraints = [
                {"maxSkew": 1, "topologyKey": HOSTNAME, "labelSelector": expressions},
                {"maxSkew": 1, "topologyKey": RACK, "labelSelector": expressions},
            ]
        elif variant == 6:
            # Both kinds in one pod, whatever the group: a hard zone constraint among the nodes the
            # required affinity allows, and a soft hostname one over every node with tainted ones left out.
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "parity/tier", "operator": "NotIn", "values": ["front"]}]}]}}}  # fmt: skip
            constraints = [
                {"maxSkew": 2, "topologyKey": ZONE, "labelSelector": selector,
                 "whenUnsatisfiable": "DoNotSchedule"},
                {"maxSkew": 1, "topologyKey": HOSTNAME, "labelSelector": selector,
                 "whenUnsatisfiable": "ScheduleAnyway", "nodeAffinityPolicy": "Ignore",
                 "nodeTaintsPolicy": "Honor"},
            ]  # fmt: skip
        else:
            labels["pod-template-hash"] = self.rng.choice(("v1", "v2"))
            constraints = [
                {
                    "maxSkew": 1,
                    "topologyKey": self.rng.choice((ZONE, HOSTNAME)),
                    "labelSelector": selector,
                    "matchLabelKeys": ["pod-template-hash"],
                }
            ]
        for constraint in constraints:
            constraint.setdefault("whenUnsatisfiable", unsatisfiable)
        spec["topologySpreadConstraints"] = constraints
        return self.pod(group, spec, labels)

    def spread_hard(self) -> PlannedPod:
        return self._spread("spread-hard", "DoNotSchedule")

    def spread_soft(self) -> PlannedPod:
        return self._spread("spread-soft", "ScheduleAnyway")

    def _term(self, app: str, key: str, **extra: Any) -> dict[str, Any]:
        return {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key, **extra}

    def pod_affinity_required(self) -> PlannedPod:
        variant = self.rng.randrange(5)
        labels = {"app": "follower"}
        namespace = self.rng.choice(self.namespaces)
        if variant == 0:
            term = self._term("web", HOSTNAME, namespaces=self.namespaces)
        elif variant == 1:
            term = self._term("cache", ZONE, namespaceSelector={})
        elif variant == 2:
            # Matches itself: the first such pod may go anywhere, the rest follow it.
            labels = {"app": "colo"}
            term = self._term("colo", HOSTNAME)
            namespace = self.namespaces[0]
        elif variant == 3 and self.counts.get("pod-affinity-required", 0) % 2 == 0:
            # No pod matches, nor the pod itself: unschedulable by design.
            term = self._term("ghost", ZONE)
        else:
            term = self._term("db", ZONE, namespaceSelector={"matchLabels": {"env": "prod"}})
        spec = {
            "_namespace": namespace,
            "affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}},
        }
        return self.pod("pod-affinity-required", spec, labels)

    def pod_anti_affinity_required(self) -> PlannedPod:
        variant = self.rng.randrange(4)
        namespace = self.namespaces[0]
        spec: dict[str, Any] = {}
        if variant == 0:
            # One per zone: after four, unschedulable by design.
            labels = {"app": "solo-zone"}
            term = self._term("solo-zone", ZONE)
        elif variant == 1:
            # One per host, on zone-d's few nodes: exhausted soon.
            labels = {"app": "solo-host"}
            term = self._term("solo-host", HOSTNAME)
            spec["nodeSelector"] = {ZONE: "zone-d"}
        elif variant == 2:
            labels = {"app": "shy"}
            term = self._term("db", HOSTNAME, namespaceSelector={})
        else:
            # Keeps other pods away once placed (existing pods' anti-affinity counts too).
            labels = {"app": "guard"}
            term = self._term("web", HOSTNAME, namespaces=self.namespaces)
        spec["_namespace"] = namespace
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        return self.pod("pod-anti-affinity-required", spec, labels)

    def pod_affinity_preferred(self) -> PlannedPod:
        options = [
            self._term("web", HOSTNAME),
            self._term("api", ZONE, namespaces=[self.namespaces[1]]),
            self._term("cache", HOSTNAME, namespaceSelector={"matchLabels": {"team": "alpha"}}),
            self._term("db", ZONE, namespaceSelector={}),
            self._term("social", HOSTNAME, namespaces=self.namespaces),
        ]
        affinity: dict[str, Any] = {}
        for kind in ("podAffinity", "podAntiAffinity"):
            if self.rng.random() < 0.7:
                terms = [
                    {"weight": self.rng.randint(1, 100), "podAffinityTerm": term}
                    for term in self.rng.sample(options, k=self.rng.randint(1, 2))
                ]
                affinity[kind] = {"preferredDuringSchedulingIgnoredDuringExecution": terms}
        if not affinity:
            affinity["podAntiAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 50, "podAffinityTerm": self._term("social", ZONE)}
                ]
            }
        return self.pod("pod-affinity-preferred", {"affinity": affinity}, {"app": "social"})

    def node_name(self) -> PlannedPod:
        container = {
            "name": "main",
            "image": PAUSE_IMAGE,
            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
        }
        spec = {"nodeName": self.rng.choice(self.open_nodes), "containers": [container]}
        return self.pod("node-name", spec, {"app": "named"})

    def gates(self) -> PlannedPod:
        spec: dict[str, Any] = {"schedulingGates": [{"name": GATE}]}
        if self.rng.random() < 0.5:
            spec["topologySpreadConstraints"] = [
                {
                    "maxSkew": 1,
                    "topologyKey": ZONE,
                    "whenUnsatisfiable": "DoNotSchedule",
                    "labelSelector": {"matchLabels": {"app": "gated"}},
                }
            ]
        return self.pod("gates", spec, {"app": "gated"})

    def images(self) -> PlannedPod:
        chosen = self.rng.sample(IMAGES, k=self.rng.randint(1, 3))
        containers = [self.container(f"c{index}", image) for index, (image, _, _) in enumerate(chosen)]
        return self.pod("images", {"containers": containers}, {"app": "imaged"})

    def sidecars(self) -> PlannedPod:
        init = [
            self.container("setup", PAUSE_IMAGE),
            self.container("proxy", PAUSE_IMAGE, restartPolicy="Always"),
        ]
        if self.rng.random() < 0.5:
            init.append(self.container("log", PAUSE_IMAGE, restartPolicy="Always"))
        self.rng.shuffle(init)
        return self.pod("sidecars", {"initContainers": init}, {"app": "meshed"})

    def pod_resources(self) -> PlannedPod:
        requests = self.requests()
        containers: list[dict[str, Any]] = [{"name": "main", "image": PAUSE_IMAGE}]
        if self.rng.random() < 0.5:
            containers.append(
                {"name": "helper", "image": PAUSE_IMAGE, "resources": {"requests": {"cpu": "100m"}}}
            )
        resources: dict[str, Any] = {"requests": requests}
        if self.rng.random() < 0.5:
            resources["limits"] = dict(requests)
        return self.pod(
            "pod-resources", {"resources": resources, "containers": containers}, {"app": "pooled"}
        )

    def overhead(self) -> PlannedPod:
        return self.pod("overhead", {"runtimeClassName": f"{self.run}-rc"}, {"app": "sandboxed"})

    def _owner(self, kind: str, name: str) -> dict[str, Any]:
        api_version = "v1" if kind == "ReplicationController" else "apps/v1"
        return {"apiVersion": api_version, "kind": kind, "name": f"{self.run}-{name}", "controller": True}

    def defaults(self) -> PlannedPod:
        """Pods without constraints of their own that a Service selects or a controller owns: kube-scheduler
        spreads them with its system defaults over the pods the merged selector matches."""
        a, b, c = self.namespaces
        variant = self.rng.randrange(8)
        labels = {"app": DEFAULTS_APPS["rs"]}
        spec: dict[str, Any] = {"_namespace": a}
        owners: list[dict[str, Any]] = []
        if variant == 0:
            owners = [self._owner("ReplicaSet", "rs")]
        elif variant == 1:
            labels = {"app": DEFAULTS_APPS["svc"]}  # selected by a Service, owned by nothing
        elif variant == 2:
            # Owned by a ReplicaSet whose selector has an expression, and selected by a Service too.
            labels = {"app": DEFAULTS_APPS["rsx"], "track": self.rng.choice(("stable", "canary"))}
            spec["_namespace"] = b
            owners = [self._owner("ReplicaSet", "rsx")]
        elif variant == 3:
            labels = {"app": DEFAULTS_APPS["sts"]}
            spec["_namespace"] = c
            owners = [self._owner("StatefulSet", "sts")]
        elif variant == 4:
            labels = {"app": DEFAULTS_APPS["rc"]}
            spec["_namespace"] = c
            owners = [self._owner("ReplicationController", "rc")]
        elif variant == 5:
            # Its own constraint: the defaults do not apply, whatever owns it.
            owners = [self._owner("ReplicaSet", "rs")]
            spec["topologySpreadConstraints"] = [
                {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway",
                 "labelSelector": {"matchLabels": labels}}
            ]  # fmt: skip
        elif variant == 6:
            # Its controller does not exist: no selector from it, and no Service selects it.
            owners = [self._owner("ReplicaSet", "missing")]
        # else: the ReplicaSet's labels but no owner and no Service: a bare pod, no defaults.
        planned = self.pod("defaults", spec, labels)
        if owners:
            planned.manifest["metadata"]["ownerReferences"] = owners
        return planned

    def gpus(self) -> PlannedPod:
        count = self.rng.choice((1, 1, 2, 4))
        if self.counts.get("gpus", 0) % 8 == 7:
            count = 16  # more than any node has: unschedulable by design
        resources = {"requests": {**self.requests(), GPU: str(count)}, "limits": {GPU: str(count)}}
        spec: dict[str, Any] = {
            "containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": resources}]
        }
        if self.rng.random() < 0.6:
            spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
        return self.pod("gpus", spec, {"app": "trainer"})


def make_pods(count: int, seed: int, run: str, nodes: Sequence[dict[str, Any]]) -> list[PlannedPod]:
    """`count` pods in rounds of one pod of every group in a seeded order, so every group has about
    count / len(GROUPS) pods, interleaved with the others."""
    planner = _Planner(random.Random(f"bench.kube_parity pods {seed}"), run, nodes)
    builders: dict[str, Callable[[], PlannedPod]] = {
        group: getattr(planner, group.replace("-", "_")) for group in GROUPS
    }
    pods: list[PlannedPod] = []
    while len(pods) < count:
        order = list(GROUPS)
        planner.rng.shuffle(order)
        pods.extend(builders[group]() for group in order[: count - len(pods)])
    return pods


# ------------------------------------------------------------------------------------------ verdicts


@dataclass(slots=True)
class Verdict:
    pod: str
    group: str
    kube: str | None
    """kube-scheduler's node; None when it found none."""
    agree: bool
    eyrie_top: list[tuple[str, int]] = field(default_factory=list)
    detail: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    """namespace/name, to find the pod in kube-scheduler's log."""
    weighted: dict[str, dict[str, int]] = field(default_factory=dict)
    """eyrie's weighted score per node and plugin (with ``total``), for `compare_scores`."""
    scores_agree: bool | None = None
    """Whether kube-scheduler's own scores (``--kube-scores``) equal eyrie's on every node and plugin;
    None when not compared."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "group": self.group,
            "kube": self.kube,
            "eyrie_top": [[name, total] for name, total in self.eyrie_top],
            **self.detail,
        }


def check(pod: str, group: str, kube: str | None, explanation: Explanation) -> Verdict:
    """Whether eyrie agrees with kube-scheduler's choice (see the module's docstring)."""
    total = explanation.total
    ranked = sorted(total.items(), key=lambda item: (-item[1], item[0]))
    best = ranked[0][1] if ranked else None
    top = [(name, score) for name, score in ranked if score == best] or ranked[:1]
    agree = not explanation.feasible if kube is None else kube in total and total[kube] == best
    verdict = Verdict(pod, group, kube, agree, ranked[:5])
    if agree:
        return verdict
    detail: dict[str, Any] = {"eyrie_feasible": len(explanation.feasible), "message": explanation.message}
    if kube is not None and kube not in total:
        detail["kube_node_filtered_by"] = explanation.filtered.get(kube, ["(not feasible, no reason given)"])
    compared = [name for name in [kube, *(name for name, _ in top[:2])] if name is not None and name in total]
    detail["scores"] = {
        name: {plugin: scores.get(name) for plugin, scores in explanation.scores.items()}
        | {"total": total[name]}
        for name in dict.fromkeys(compared)
    }
    verdict.detail = detail
    return verdict


def weighted_scores(explanation: Explanation, weights: Mapping[str, int]) -> dict[str, dict[str, int]]:
    """Per feasible node: each plugin's score times its weight, as kube-scheduler logs them, and the total."""
    return {
        node: {
            plugin: weights.get(plugin, 1) * scores[node]
            for plugin, scores in explanation.scores.items()
            if node in scores
        }
        | {"total": total}
        for node, total in explanation.total.items()
    }


def compare_scores(verdict: Verdict, kube: Mapping[str, Mapping[str, int]]) -> None:
    """Set `verdict.scores_agree`: whether kube-scheduler's own scores of the pod (node → plugin → weighted
    score and ``total``, from its log) equal eyrie's on every node and plugin. A plugin missing on one side
    counts as 0 (a plugin whose PreScore skips is absent from kube-scheduler's log). kube-scheduler scores
    nothing when one node or none is feasible; then the verdict alone decides. The differences found go
    into the verdict's detail."""
    if verdict.kube is None or len(verdict.weighted) <= 1:
        verdict.scores_agree = verdict.agree and not kube
        return
    differences: list[dict[str, Any]] = []
    for node in sorted(set(kube) | set(verdict.weighted)):
        ours, theirs = verdict.weighted.get(node), kube.get(node)
        if ours is None or theirs is None:
            differences.append({"node": node, "feasible_in": "eyrie" if theirs is None else "kube-scheduler"})
            continue
        for plugin in sorted(set(ours) | set(theirs)):
            if ours.get(plugin, 0) != theirs.get(plugin, 0):
                differences.append(
                    {"node": node, "plugin": plugin, "kube": theirs.get(plugin), "eyrie": ours.get(plugin)}
                )
    verdict.scores_agree = verdict.agree and not differences
    if differences:
        verdict.detail["score_differences"] = differences[:20]
        verdict.detail["score_differences_count"] = len(differences)


@dataclass(slots=True)
class Report:
    nodes: int
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def scored(self) -> bool:
        """Whether kube-scheduler's own scores were compared (``--kube-scores``)."""
        return any(verdict.scores_agree is not None for verdict in self.verdicts)

    def groups(self) -> dict[str, dict[str, int]]:
        groups: dict[str, dict[str, int]] = {}
        for verdict in self.verdicts:
            entry = groups.setdefault(
                verdict.group, {"pods": 0, "agree": 0, "unschedulable": 0, "scores_agree": 0}
            )
            entry["pods"] += 1
            entry["agree"] += verdict.agree
            entry["unschedulable"] += verdict.kube is None
            entry["scores_agree"] += bool(verdict.scores_agree)
        return {group: groups[group] for group in GROUPS if group in groups}

    def to_json(self) -> dict[str, Any]:
        return {
            "pods": len(self.verdicts),
            "nodes": self.nodes,
            "kubernetes": KUBERNETES_VERSION,
            "groups": {
                group: {"pods": entry["pods"], "agree": entry["agree"]}
                | ({"scores_agree": entry["scores_agree"]} if self.scored else {})
                for group, entry in self.groups().items()
            },
            "unschedulable": sum(verdict.kube is None for verdict in self.verdicts),
            "mismatches": [verdict.to_json() for verdict in self.verdicts if not verdict.agree],
            **(
                {
                    "score_mismatches": [
                        verdict.to_json()
                        for verdict in self.verdicts
                        if verdict.agree and not verdict.scores_agree
                    ]
                }
                if self.scored
                else {}
            ),
        }

    def render(self) -> str:
        scored = self.scored
        header = f"{'group':<28}{'pods':>6}{'agree':>7}{'%':>8}{'kube: none':>12}"
        lines = [header + (f"{'same scores':>13}" if scored else "")]
        for group, entry in self.groups().items():
            share = 100.0 * entry["agree"] / entry["pods"]
            none = entry["unschedulable"]
            line = f"{group:<28}{entry['pods']:>6}{entry['agree']:>7}{share:>7.1f}%{none:>12}"
            lines.append(line + (f"{entry['scores_agree']:>13}" if scored else ""))
        agreed = sum(verdict.agree for verdict in self.verdicts)
        overall = 100.0 * agreed / len(self.verdicts) if self.verdicts else 0.0
        line = f"{'overall':<28}{len(self.verdicts):>6}{agreed:>7}{overall:>7.1f}%{'':>12}"
        same = sum(bool(verdict.scores_agree) for verdict in self.verdicts)
        lines.append(line + f"{same:>13}" if scored else line.rstrip())
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------ following pods


def _unschedulable(obj: Mapping[str, Any]) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return bool(condition.get("reason") == "Unschedulable")
    return False


def _gated(obj: Mapping[str, Any]) -> bool:
    for condition in (obj.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("reason") == "SchedulingGated":
            return True
    return False


class PodWatch:
    """The latest object of each of the run's pods, by namespace/name, as a watch delivers them."""

    def __init__(self, api: KubeApi, run: str) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self._changed = asyncio.Event()
        self._listed = asyncio.Event()
        self._stream = api.list_and_watch(PODS, label_selector=f"{RUN_LABEL}={run}")
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        async for item in self._stream:
            if isinstance(item, Listed):
                for obj in item.items:
                    self.objects[_key(obj)] = obj
                self._listed.set()
            elif isinstance(item, WatchEvent):
                if item.type == "DELETED":
                    self.objects.pop(_key(item.object), None)
                else:
                    self.objects[_key(item.object)] = item.object
            self._changed.set()

    async def listed(self) -> None:
        await asyncio.wait_for(self._listed.wait(), timeout=60.0)

    async def until(
        self,
        key: str,
        done: Callable[[dict[str, Any]], bool],
        timeout: float,
        alive: Callable[[], str | None],
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            obj = self.objects.get(key)
            if obj is not None and done(obj):
                return obj
            if self._task.done():
                self._task.result()
                raise RuntimeError("the watch of the run's pods ended")
            if (reason := alive()) is not None:
                raise RuntimeError(reason)
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(
                    f"pod {key}: kube-scheduler neither bound it nor gave up within {timeout:g} s"
                )
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, 1.0))

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, RuntimeError):
            await self._task
        with contextlib.suppress(RuntimeError):
            await self._stream.aclose()  # type: ignore[attr-defined]


_SCORE_LINE = re.compile(
    r'"(Plugin scored node for pod|Calculated node\'s final score for pod)" pod="([^"]+)"'
    r'(?: plugin="([^"]+)")? node="([^"]+)" score=(\d+)'
)


class KubeScores:
    """kube-scheduler's own scores, from its log at ``-v=10``: per pod (namespace/name),
    node → plugin → score (weighted, as its framework adds them) and ``total``."""

    def __init__(self, log: Path) -> None:
        self.log = log
        self._offset = 0
        self.scores: dict[str, dict[str, dict[str, int]]] = {}

    def read(self) -> None:
        with self.log.open("rb") as handle:
            handle.seek(self._offset)
            data = handle.read()
        end = data.rfind(b"\n") + 1
        self._offset += end
        for match in _SCORE_LINE.finditer(data[:end].decode("utf-8", "replace")):
            kind, pod, plugin, node, score = match.groups()
            per_node = self.scores.setdefault(pod, {}).setdefault(node, {})
            per_node["total" if kind.startswith("Calculated") else plugin] = int(score)

    def of(self, pod: str, nodes: Sequence[str] | None = None) -> dict[str, dict[str, int]]:
        """The pod's scores on `nodes` (every node it scored when None)."""
        self.read()
        found = self.scores.get(pod, {})
        return dict(found) if nodes is None else {node: found[node] for node in nodes if node in found}


def _key(obj: Mapping[str, Any]) -> str:
    metadata = obj.get("metadata") or {}
    return f"{metadata.get('namespace') or 'default'}/{metadata.get('name')}"


def _decided(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("spec") or {}).get("nodeName")) or _unschedulable(obj)


# ------------------------------------------------------------------------------------------ eyrie's side


class EyrieSide:
    """eyrie's view of the cluster, kept as kube-scheduler leaves it: one Scheduler, pods assumed as bound."""

    def __init__(
        self,
        nodes: Sequence[dict[str, Any]],
        bound: Sequence[dict[str, Any]],
        labels: dict[str, dict[str, str]],
        workloads: Workloads | None = None,
    ) -> None:
        self.namespace_labels = labels
        self.workloads = workloads or Workloads()
        specs: list[NodeSpec] = []
        for obj in nodes:
            record = node_record(obj, now=0.0)
            if not isinstance(record, NodeEvent):
                raise RuntimeError(f"node {obj['metadata']['name']}: eyrie cannot read it: {record.message}")
            specs.append(record.node)
        self.scheduler = Scheduler()
        for spec in specs:
            self.scheduler.upsert_node(spec)
        for obj in bound:
            self.bind(obj)

    def request(self, obj: dict[str, Any]) -> PodRequest:
        """The pod as eyrie's pipeline reads it (a bound one as its occupant's request)."""
        record = pod_record(obj, schedulers=(KUBE_SCHEDULER_NAME,), now=0.0)
        if isinstance(record, Occupant):
            pod = record.pod
        elif isinstance(record, PodRequest):
            pod = record
        else:
            raise RuntimeError(f"pod {_key(obj)}: eyrie cannot read it: {record!r}")
        update: dict[str, Any] = {}
        labels = self.namespace_labels.get(pod.namespace)
        if labels:
            update["namespace_labels"] = labels
        selector = self.workloads.selector_for(obj.get("metadata") or {})
        if selector is not None:
            update["default_spread_selector"] = selector
        return pod.model_copy(update=update) if update else pod

    def explain(self, obj: dict[str, Any]) -> Explanation:
        return self.scheduler.explain(self.request(obj), profile_name=PROFILE)

    def weights(self) -> dict[str, int]:
        """The profile's score weights by plugin name."""
        profile = self.scheduler.profiles.get(PROFILE)
        if profile is None:
            raise RuntimeError(f"eyrie has no profile {PROFILE!r}")
        return {plugin.name: weight for plugin, weight in profile.score}

    def describe(self, name: str) -> dict[str, Any]:
        """What eyrie holds of a node, to tell a mismatch's cause: allocatable, requested (actual and with
        the non-zero defaults for cpu and memory) and pods."""
        snapshot = self.scheduler.snapshot
        row = snapshot.index.get(name)
        if row is None:
            return {}
        columns = [(resource, column) for resource, column in snapshot.column.items()]
        return {
            "allocatable": {
                r: int(snapshot.allocatable[row, c]) for r, c in columns if snapshot.allocatable[row, c]
            },
            "requested": {
                r: int(snapshot.requested[row, c]) for r, c in columns if snapshot.requested[row, c]
            },
            "nonzero_cpu_memory": [int(value) for value in snapshot.nonzero[row]],
            "pods": int(snapshot.pod_count[row]),
        }

    def bind(self, obj: dict[str, Any]) -> None:
        """Take a pod bound in the cluster (``spec.nodeName``) on its node."""
        record = pod_record(obj, schedulers=(), now=0.0)
        if not isinstance(record, Occupant):
            return  # finished, or not bound: it holds nothing
        pod = self.request(obj)
        snapshot = self.scheduler.snapshot
        snapshot.assume(snapshot.pod_info(pod), snapshot.row_of(record.node), bound=True)


# ------------------------------------------------------------------------------------------ the run


def kube_scheduler_config(kubeconfig: str, out: Path) -> Path:
    """kube-scheduler's defaults but for scoring every feasible node and leader election."""
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(Path(kubeconfig).resolve())},
        "leaderElection": {"leaderElect": False},
        "percentageOfNodesToScore": 100,
    }
    path = out / "kube-scheduler.yaml"
    path.write_text(orjson.dumps(config).decode() + "\n")  # JSON is YAML
    return path


async def _setup(api: KubeApi, run: str, nodes: Sequence[dict[str, Any]]) -> None:
    for name, labels in namespaces(run).items():
        await _send(
            api, "POST", "/api/v1/namespaces", {"metadata": {"name": name, "labels": labels}}, ok=(201,)
        )
    runtime_class = {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": f"{run}-rc", "labels": {RUN_LABEL: run}},
        "handler": RUNTIME_CLASS_HANDLER,
        "overhead": {"podFixed": OVERHEAD},
    }
    await _send(api, "POST", "/apis/node.k8s.io/v1/runtimeclasses", runtime_class, ok=(201,))
    paths = _workload_paths()
    for obj in workload_objects(run):
        await _send(api, "POST", paths[obj["kind"]].format(obj["metadata"]["namespace"]), obj, ok=(201,))
    await asyncio.gather(*(create_node(api, node) for node in nodes))


async def _teardown(api: KubeApi, run: str, nodes: Sequence[dict[str, Any]]) -> None:
    pods = await api.list(PODS, label_selector=f"{RUN_LABEL}={run}")
    await delete_all(
        api,
        [f"/api/v1/namespaces/{_key(obj).replace('/', '/pods/')}" for obj in pods.items],
    )
    await delete_all(api, [f"/api/v1/nodes/{node['metadata']['name']}" for node in nodes])
    await delete_all(api, [f"/apis/node.k8s.io/v1/runtimeclasses/{run}-rc"])
    # Background: a ReplicationController's default is to orphan its pods, which leaves a finalizer only the
    # garbage collector (not running here) would remove.
    paths = _workload_paths()
    background = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    for obj in workload_objects(run):
        path = f"{paths[obj['kind']].format(obj['metadata']['namespace'])}/{obj['metadata']['name']}"
        await _send(api, "DELETE", path, background, ok=(200, 202, 404))
    for name in namespaces(run):
        await _send(api, "DELETE", f"/api/v1/namespaces/{name}", ok=(200, 202, 404))
        # No namespace controller runs on a bare control plane: finish the deletion it would finish.
        with contextlib.suppress(KubeApiError):
            finalize = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": name},
                "spec": {"finalizers": []},
            }
            await _send(api, "PUT", f"/api/v1/namespaces/{name}/finalize", finalize, ok=(200, 404, 409))


async def _create(api: KubeApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = await api.request("POST", path, body=body)
    if status != 201:
        detail = " ".join(reply[:300].decode("utf-8", "replace").split())
        raise KubeApiError(f"POST {path}: HTTP {status}: {detail}", status=status)
    created: dict[str, Any] = orjson.loads(reply)
    return {"kind": "Pod", "apiVersion": "v1", **created}


async def _patch(api: KubeApi, path: str, body: dict[str, Any]) -> dict[str, Any]:
    status, reply = await api.request("PATCH", path, body=body, content_type="application/merge-patch+json")
    if status != 200:
        detail = " ".join(reply[:300].decode("utf-8", "replace").split())
        raise KubeApiError(f"PATCH {path}: HTTP {status}: {detail}", status=status)
    patched: dict[str, Any] = orjson.loads(reply)
    return {"kind": "Pod", "apiVersion": "v1", **patched}


async def compare(
    kubeconfig: str,
    run: str,
    pods: Sequence[PlannedPod],
    report: Report,
    timeout: float,
    alive: Callable[[], str | None],
    progress: Callable[[str], None],
    keep_scores: bool = False,
) -> None:
    """Create the pods one at a time and judge each (see the module's docstring); with `keep_scores`, each
    verdict keeps eyrie's weighted scores for `compare_scores`."""
    async with KubeApi.from_kubeconfig(kubeconfig, request_timeout=60.0) as api:
        # The whole cluster as it is before the first pod: nodes and pods of others count for both.
        nodes = (await api.list(NODES)).items
        listed = (await api.list(PODS)).items
        labels = {
            str(obj["metadata"]["name"]): {
                str(k): str(v) for k, v in (obj["metadata"].get("labels") or {}).items()
            }
            for obj in (await api.list(NAMESPACES)).items
        }
        # The Services and controllers kube-scheduler's DefaultSelector reads, as the watch bridge keeps them.
        workloads = Workloads()
        owner_uids: dict[tuple[str, str, str], str] = {}
        for resource in WORKLOAD_RESOURCES:
            items = (await api.list(resource)).items
            workloads.replace(resource.kind, items)
            for obj in items:
                metadata = obj["metadata"]
                owner_uids[(resource.kind, metadata["namespace"], metadata["name"])] = metadata["uid"]
        eyrie = EyrieSide(nodes, listed, labels, workloads)
        weights = eyrie.weights()
        watch = PodWatch(api, run)
        try:
            await watch.listed()
            for index, planned in enumerate(pods):
                base = f"/api/v1/namespaces/{planned.namespace}/pods"
                key = f"{planned.namespace}/{planned.name}"
                obj = await _create(api, base, with_owner_uids(planned.manifest, owner_uids))
                if planned.group == "overhead" and not (obj.get("spec") or {}).get("overhead"):
                    note = "the API server did not set spec.overhead from the RuntimeClass"
                    if note not in report.notes:
                        report.notes.append(note)
                if planned.gated:
                    held = eyrie.explain(obj)
                    waited = await watch.until(key, lambda o: _gated(o) or _decided(o), timeout, alive)
                    if _decided(waited) or held.selected is not None or held.feasible:
                        report.verdicts.append(
                            Verdict(
                                planned.name, planned.group, None, False, detail={"gate": "not held by both"}
                            )
                        )
                        continue
                    obj = await _patch(api, f"{base}/{planned.name}", {"spec": {"schedulingGates": []}})
                explanation = eyrie.explain(obj)
                wait = FIRST_POD_TIMEOUT_S if index == 0 else timeout
                decided = await watch.until(key, _decided, wait, alive)
                node = (decided.get("spec") or {}).get("nodeName") or None
                verdict = check(planned.name, planned.group, node, explanation)
                verdict.key = key
                if keep_scores:
                    verdict.weighted = weighted_scores(explanation, weights)
                report.verdicts.append(verdict)
                if node is None:
                    # Deleted at once: a later change must not bind it where the check did not look.
                    await _send(api, "DELETE", f"{base}/{planned.name}", ok=(200, 202, 404))
                else:
                    eyrie.bind(decided)
                if not verdict.agree:
                    names = [node, *(name for name, _ in verdict.eyrie_top[:2])]
                    verdict.detail["nodes"] = {
                        n: eyrie.describe(n) for n in dict.fromkeys(names) if n is not None
                    }
                    progress(f"MISMATCH {orjson.dumps(verdict.to_json()).decode()}")
                if (index + 1) % 50 == 0:
                    agreed = sum(v.agree for v in report.verdicts)
                    progress(f"{index + 1} pods: {agreed} agree")
        finally:
            await watch.close()


def run(args: argparse.Namespace) -> Report:
    out = Path(args.out)
    run_id = f"parity-{uuid.uuid4().hex[:6]}"
    logs = out / run_id
    logs.mkdir(parents=True, exist_ok=True)
    nodes = make_nodes(args.nodes, args.seed, run_id)
    pods = make_pods(args.pods, args.seed, run_id, nodes)
    report = Report(args.nodes)

    def say(message: str) -> None:
        print(message, flush=True)

    with resolved_control_plane(progress=say) as kubeconfig:
        say(f"run {run_id}: {args.nodes} nodes, {args.pods} pods, seed {args.seed}")
        try:
            asyncio.run(_with_api(kubeconfig, lambda api: _setup(api, run_id, nodes)))
            binary = build_binaries(say) / "kube-scheduler"
            asyncio.run(ensure_no_other_scheduler(kubeconfig, run_id, KUBE_SCHEDULER, 2.0))
            config = kube_scheduler_config(kubeconfig, logs)
            log_path = logs / "kube-scheduler.log"
            say(f"kube-scheduler: starting {KUBERNETES_VERSION} (log {log_path})")
            command = [str(binary), f"--config={config}", "--secure-port=0"]
            if args.kube_scores:
                # Its per-plugin and final scores are logged at level 10 only.
                command.append("--v=10")
            with log_path.open("ab") as log:
                process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)

            def alive() -> str | None:
                if process.poll() is not None:
                    return f"kube-scheduler exited with {process.returncode}; see {log_path}"
                return None

            try:
                asyncio.run(
                    compare(kubeconfig, run_id, pods, report, args.timeout, alive, say, args.kube_scores)
                )
            finally:
                _stop(process)
            if args.kube_scores:
                # Read once it has stopped: its log is flushed every few seconds, not per line.
                scores = KubeScores(log_path)
                for verdict in report.verdicts:
                    if verdict.key:
                        compare_scores(verdict, scores.of(verdict.key))
                    if not verdict.agree and verdict.kube is not None:
                        compared = list(verdict.detail.get("nodes", {}))
                        verdict.detail["kube_scores_weighted"] = scores.of(verdict.key, compared)
        finally:
            asyncio.run(_with_api(kubeconfig, lambda api: _teardown(api, run_id, nodes)))
    return report


async def _with_api(kubeconfig: str, call: Callable[[KubeApi], Any]) -> Any:
    async with KubeApi.from_kubeconfig(kubeconfig, request_timeout=60.0) as api:
        return await call(api)


def _usage_error(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kube_parity", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=60)
    parser.add_argument("--pods", type=int, default=400)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="Seconds kube-scheduler may take to decide each pod"
    )
    parser.add_argument(
        "--kube-scores",
        action="store_true",
        help="Log kube-scheduler's own per-plugin scores (-v=10) and show them for mismatches",
    )
    parser.add_argument(
        "--out", default="bench-out/kube-parity", help="kube-scheduler's configuration and log"
    )
    args = parser.parse_args()
    if args.nodes < 4:
        _usage_error("error: --nodes must be 4 or more (four zones)")
    if args.pods < 1:
        _usage_error("error: --pods must be 1 or more")
    if args.timeout <= 0:
        _usage_error("error: --timeout must be more than 0")
    try:
        report = run(args)
    except (ControlPlaneError, KubeApiError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(report.render())
    for note in report.notes:
        print(f"note: {note}")
    print(orjson.dumps(report.to_json()).decode())


if __name__ == "__main__":
    main()
