"""Two-level placement: a workload's replicas are divided among clusters, then each cluster's
share is placed on its nodes by that cluster's own scheduler.

`TwoLevelPlacer` keeps, per cluster, a `ClusterSummary` and a `policies.scheduler.Scheduler` (driven
through its public API only). The schedulers are either one per cluster (in process: `eyrie clusters`
experiments, the trace replay) or one shared by every cluster (``scheduler=``: a placement shard, which
also places single pods on all of its nodes). Every node carries the label ``eyrie.io/cluster`` with its
cluster and every replica selects it, so a replica only fits nodes of the cluster it was given, whichever
scheduler holds them. The summaries follow the same events: a node event touches its cluster; a pod the
scheduler places is assumed at once, so the next estimate sees it.

A workload is a `PodRequest` with ``replicas``; replica i is the same pod with uid ``<uid>-<i>``, replicas
1 and ``workload`` set to the workload's. Its profile's ``cluster_policy`` (or the placer's own) picks the
estimator and the division strategy. Placing a workload again with another ``replicas`` scales it: growing
adds replicas where the division puts the extra ones, shrinking releases the newest replicas of the
clusters that hold fewer now. Bindings (`Placed`) name the cluster.

Replicas are kept, not just placed once. A replica whose node is removed, that is evicted or deleted, or
that the applier rejects is gone for good: its uid is retired (the ledger may still hold it) and the
workload is divided again, with scale-up semantics: the replicas it still has stay, only the missing ones
are divided (Aggregated prefers the clusters already holding replicas) and they get new uids. A replica its
cluster cannot place (unschedulable there, or its binding refused more than `conflict_retries` times)
keeps its uid and is taken back from that cluster, which takes no more of the workload's replicas until it
changes, and divided again (dynamic and aggregated; static and duplicated divisions do not depend on
capacity, so the replica waits in its cluster like any unschedulable pod). When the estimates cannot cover
the missing replicas nothing is placed for them: they wait, with an `Unschedulable` verdict giving the
reasons, and the division is tried again after the clusters change (a node event or a pod released).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from policies.clusters.division import Division, divide
from policies.clusters.estimators import accurate_estimate, general_estimate, model_estimate, per_replica
from policies.clusters.models import ResourceModels
from policies.clusters.policy import ClusterPolicy, cluster_policy_of
from policies.clusters.summary import ClusterSummary
from policies.framework.profile import ProfileSet
from policies.scheduler import Evicted, Outcome, Placed, Scheduler, Unschedulable, Waiting
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = [
    "CLUSTER_LABEL",
    "CONFLICT_RETRIES",
    "TwoLevelPlacer",
    "WorkloadPlacement",
    "pinned_cluster",
    "replica_uid",
]

CLUSTER_LABEL = "eyrie.io/cluster"
"""A node's cluster as a label (set by the placer), and on a pod the cluster it is pinned to."""

CONFLICT_RETRIES = 3
"""Refused bindings of one replica its cluster retries before the replica is divided again."""

_CAPACITY_STRATEGIES = ("dynamic", "aggregated")
"""Divisions that follow the estimates: only these can move a replica its cluster failed to place."""


def replica_uid(workload: str, index: int) -> str:
    return f"{workload}-{index}"


def pinned_cluster(pod: PodRequest) -> str | None:
    """The cluster a pod asks for: its ``eyrie.io/cluster`` label, else the same key in its node
    selector. A pinned workload is not divided: all its replicas go there."""
    return pod.labels.get(CLUSTER_LABEL, pod.node_selector.get(CLUSTER_LABEL))


@dataclass(slots=True)
class WorkloadPlacement:
    """What placing (or rescaling, or re-placing) one workload did."""

    workload: str
    policy: ClusterPolicy
    estimates: dict[str, int]
    """Per cluster, the replicas the estimator said it could still take (before this division)."""
    current: dict[str, int]
    """Replicas per cluster before."""
    division: Division
    added: dict[str, list[str]] = field(default_factory=dict)
    """Per cluster, the replica uids handed to its scheduler."""
    removed: list[str] = field(default_factory=list)
    """Replica uids released by a scale-down."""
    outcomes: list[Outcome] = field(default_factory=list)
    """What the cluster schedulers decided (placements name their cluster), and verdicts for replicas no
    division could place; from `TwoLevelPlacer.place`, also what the divisions it led to decided."""
    pending: list[str] = field(default_factory=list)
    """Replica uids left waiting for a division (the estimates fell short)."""
    reasons: tuple[str, ...] = ()
    """Why they wait."""
    later: list[WorkloadPlacement] = field(default_factory=list)
    """Divisions this one led to (replicas a cluster could not place, divided again), in order."""

    @property
    def placed(self) -> list[Placed]:
        return [o for o in self.outcomes if isinstance(o, Placed)]

    @property
    def unschedulable(self) -> list[Unschedulable]:
        return [o for o in self.outcomes if isinstance(o, Unschedulable)]

    def new_replicas(self) -> dict[str, int]:
        """Replicas the division added per cluster (the number each estimate had to cover)."""
        return {
            name: count - self.current.get(name, 0)
            for name, count in self.division.assignment.items()
            if count > self.current.get(name, 0)
        }


@dataclass(slots=True)
class _Member:
    scheduler: Scheduler
    summary: ClusterSummary
    changes: int = 0
    """Events that may have given the cluster room (node events, pods released): lifts blocks."""


@dataclass(slots=True)
class _Replica:
    uid: str
    workload: str
    index: int
    pod: PodRequest
    """The replica as its scheduler has it (pinned to `cluster`)."""
    cluster: str | None = None
    """None while it waits for a division."""
    node: str | None = None
    attempt: int = -1
    """The attempt of its latest binding or verdict; the next binding carries a higher one."""
    conflicts: int = 0


@dataclass(slots=True)
class _Workload:
    pod: PodRequest
    replicas: dict[str, list[str]] = field(default_factory=dict)
    """Per cluster, the uids of the replicas handed to it, oldest first."""
    pending: list[str] = field(default_factory=list)
    """Uids of replicas that wait for a division."""
    next_index: int = 0
    blocked: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Clusters that failed one of its replicas: their `changes` then, and why."""
    tried: int = -1
    """The placer's `changes` when its last division fell short; -1 when nothing waits."""


class TwoLevelPlacer:
    """Clusters, each with its scheduler and summary; workloads divided among them and placed."""

    def __init__(
        self,
        profiles: ProfileSet | None = None,
        *,
        policy: ClusterPolicy | None = None,
        models: Mapping[str, ResourceModels] | None = None,
        scheduler: Scheduler | None = None,
        conflict_retries: int = CONFLICT_RETRIES,
        counters: Counter[str] | None = None,
    ) -> None:
        self.profiles = scheduler.profiles if scheduler is not None else profiles or ProfileSet.builtin()
        self.policy = policy
        """Overrides every profile's cluster policy when set."""
        self.shared = scheduler
        """The one scheduler of every cluster (a shard's), or None for one scheduler per cluster."""
        self.conflict_retries = conflict_retries
        self.counters: Counter[str] = counters if counters is not None else Counter()
        self.on_division: Callable[[WorkloadPlacement], None] | None = None
        """Called with every division made (first placements, rescales, re-placements), e.g. to audit
        them against their estimates."""
        self._models = dict(models or {})
        self._members: dict[str, _Member] = {}
        self._node_cluster: dict[str, str] = {}
        self._workloads: dict[str, _Workload] = {}
        self._waiting: dict[str, _Workload] = {}
        """Workloads with replicas no division could place yet, in the order they started waiting."""
        self._replicas: dict[str, _Replica] = {}
        self._counted: dict[str, str] = {}
        """Pod uid → the cluster whose summary counts it (replicas; with a shared scheduler, every pod)."""
        self._tracking = scheduler is None
        """Whether pods are counted in the summaries as they come. A shared scheduler's pods are counted
        from the first workload on (then all at once, from its snapshot): a shard that never sees a
        workload does not pay for summaries it would never read."""
        self.changes = 0
        """Events that may have given any cluster room: a waiting workload is divided again after one."""
        self.releases: list[tuple[str, str]] = []
        """With a shared scheduler: (uid, node) of replicas dropped while placed (scale-down, deletion,
        rejection), for the shard to tell the applier; `take_releases` empties it."""

    # ----------------------------------------------------------------------------------- clusters

    @property
    def clusters(self) -> list[str]:
        return list(self._members)

    def add_cluster(self, name: str, *, models: ResourceModels | None = None) -> None:
        if name in self._members:
            return
        modeling = self.policy.modeling if self.policy is not None else True
        summary = ClusterSummary(name, models or self._models.get(name), modeling=modeling)
        self._members[name] = _Member(self.shared or Scheduler(self.profiles), summary)

    def scheduler(self, cluster: str) -> Scheduler:
        return self._member(cluster).scheduler

    def summary(self, cluster: str) -> ClusterSummary:
        return self._member(cluster).summary

    def cluster_of_node(self, name: str) -> str | None:
        return self._node_cluster.get(name)

    def _member(self, cluster: str) -> _Member:
        member = self._members.get(cluster)
        if member is None:
            raise InvalidInput(f"unknown cluster {cluster!r}", field="cluster")
        return member

    def _changed(self, cluster: str | None) -> None:
        self.changes += 1
        if cluster is not None and cluster in self._members:
            self._members[cluster].changes += 1

    def upsert_node(self, spec: NodeSpec) -> None:
        """Add or update a node in its cluster (``spec.cluster``; the cluster is added when new)."""
        previous = self._node_cluster.get(spec.name)
        if previous is not None and previous != spec.cluster:
            raise InvalidInput(
                f"node {spec.name!r} is in cluster {previous!r}; remove it before moving it to "
                f"{spec.cluster!r}",
                field="cluster",
            )
        self.add_cluster(spec.cluster)
        member = self._members[spec.cluster]
        labeled = spec
        if spec.labels.get(CLUSTER_LABEL) != spec.cluster:
            labeled = spec.model_copy(update={"labels": {**spec.labels, CLUSTER_LABEL: spec.cluster}})
        member.scheduler.upsert_node(labeled)
        member.summary.upsert_node(spec)
        self._node_cluster[spec.name] = spec.cluster
        self._changed(spec.cluster)

    def remove_node(self, name: str, now: float) -> list[Outcome]:
        """Drop a node; replicas that were on it are replaced (new uids) where a division puts them."""
        cluster = self._node_cluster.pop(name, None)
        if cluster is None:
            return []
        member = self._members[cluster]
        for uid in member.summary.remove_node(name):
            self._counted.pop(uid, None)
        lost = [r for r in self._replicas.values() if r.cluster == cluster and r.node == name]
        outcomes = member.scheduler.remove_node(name, now)
        self._changed(cluster)
        dirty = [self._lose(replica) for replica in lost]
        self.counters["replicas_lost"] += len(lost)
        return self._settle(outcomes, now, dirty)

    def set_unschedulable(self, name: str, value: bool) -> None:
        cluster = self._node_cluster.get(name)
        if cluster is None:
            raise InvalidInput(f"unknown node {name!r}", field="node")
        member = self._members[cluster]
        member.scheduler.set_unschedulable(name, value)
        member.summary.set_unschedulable(name, value)
        self._changed(cluster)

    # ------------------------------------------------------------------------------- estimating

    def policy_for(self, workload: PodRequest) -> ClusterPolicy:
        if self.policy is not None:
            return self.policy
        return cluster_policy_of(self.profiles.get(workload.scheduler_name))

    def estimates(
        self,
        workload: PodRequest,
        policy: ClusterPolicy | None = None,
        *,
        clusters: Iterable[str] | None = None,
    ) -> dict[str, int]:
        """Per cluster (all, or `clusters`), replicas of the workload it can still take, by the policy's
        estimator."""
        policy = policy or self.policy_for(workload)
        request = per_replica(workload.effective_requests)
        result: dict[str, int] = {}
        for name in self.clusters if clusters is None else clusters:
            member = self._members[name]
            if policy.estimator == "general":
                result[name] = general_estimate(member.summary, request)
            elif policy.estimator == "model":
                result[name] = model_estimate(member.summary, request, modeling=policy.modeling)
            else:
                probe = self._pinned(workload, f"{workload.uid}-estimate", name)
                result[name] = accurate_estimate(member.scheduler, probe, workload.scheduler_name)
        return result

    @staticmethod
    def _pinned(pod: PodRequest, uid: str, cluster: str, name: str | None = None) -> PodRequest:
        return pod.model_copy(
            update={
                "uid": uid,
                "name": name or uid,
                "replicas": 1,
                "workload": pod.workload or pod.uid,
                "node_selector": {**pod.node_selector, CLUSTER_LABEL: cluster},
            }
        )

    # -------------------------------------------------------------------------------- placing

    def place(self, workload: PodRequest, now: float) -> WorkloadPlacement:
        """Divide the workload's replicas among the clusters and place each cluster's share there. A
        workload placed before is rescaled to its new ``replicas``. The placement returned holds every
        outcome, those of the divisions it led to included."""
        state = self._workloads.get(workload.uid)
        if state is None:
            state = self._workloads[workload.uid] = _Workload(workload)
        state.pod = workload
        placement = self._reconcile(state, now)
        placement.outcomes = self._settle(placement.outcomes, now, [], first=placement)
        return placement

    def delete_workload(self, uid: str, now: float) -> list[Outcome]:
        """Release every replica of the workload."""
        state = self._workloads.pop(uid, None)
        outcomes: list[Outcome] = []
        if state is None:
            return outcomes
        self._waiting.pop(uid, None)
        for replicas in state.replicas.values():
            for replica in replicas:
                outcomes += self._drop(replica, now)
        for replica in state.pending:
            self._replicas.pop(replica, None)
        return self._settle(outcomes, now, [])

    def delete_replica(self, uid: str, now: float) -> list[Outcome]:
        """One replica is gone (deleted or evicted from outside): released, and replaced by a new one."""
        replica = self._replicas.get(uid)
        if replica is None:
            return []
        state = self._workloads[replica.workload]
        if replica.cluster is None:
            state.pending.remove(uid)
            del self._replicas[uid]
            return self._settle([], now, [state])
        outcomes = self._drop(uid, now)
        state.replicas[replica.cluster].remove(uid)
        self.counters["replicas_lost"] += 1
        return self._settle(outcomes, now, [state])

    def confirm(self, uid: str) -> None:
        """The applier committed the pod's binding (allocating → allocated)."""
        cluster = self._counted.get(uid)
        if self.shared is not None:
            self.shared.confirm(uid)
        elif cluster is not None:
            self._members[cluster].scheduler.confirm(uid)
        if cluster is not None:
            self._members[cluster].summary.confirm(uid)

    def released(self, uid: str) -> None:
        """A pod that is not a replica let go of its node (deleted, rejected, or its assumption undone
        after a conflict): it no longer counts in its cluster's summary."""
        cluster = self._counted.pop(uid, None)
        if cluster is not None:
            self._members[cluster].summary.forget(uid)
            self._changed(cluster)

    def adopted(self, uid: str, node: str) -> None:
        """A pod that is not a replica moved to `node` outside a cycle (`Scheduler.adopt`): counted there."""
        self.released(uid)
        if self._tracking:
            self._count(uid, node, None)

    def conflict(self, uid: str, now: float, attempt: int, reasons: Iterable[str] = ()) -> list[Outcome]:
        """The applier refused binding number `attempt` of a replica: its cluster tries again, up to
        `conflict_retries` times, then the replica is divided again (dynamic and aggregated)."""
        replica = self._replicas.get(uid)
        if replica is None or replica.cluster is None:
            return []
        state, cluster = self._workloads[replica.workload], replica.cluster
        self._uncount(uid)
        replica.node = None
        replica.attempt = max(replica.attempt, attempt)
        replica.conflicts += 1
        scheduler = self._members[cluster].scheduler
        if replica.conflicts > self.conflict_retries and self._moves(state):
            why = f"its binding was refused {replica.conflicts} times: {'; '.join(reasons) or 'conflict'}"
            outcomes = self._withdraw(state, replica, why, now)
            self.counters["replicas_refused"] += 1
            return self._settle(outcomes, now, [state])
        return self._settle(scheduler.requeue(replica.pod, now, attempt), now, [])

    def reject(self, uid: str, now: float) -> list[Outcome]:
        """The applier will never bind this replica (it answered ``rejected``): replaced by a new one."""
        return self.delete_replica(uid, now)

    def observe(self, outcomes: list[Outcome], now: float) -> list[Outcome]:
        """Outcomes the shared scheduler gave its caller directly (single pods, ticks, its queue): counted
        in the summaries, and any replica among them handled as `place` does. Returns what to report."""
        if not self._tracking and not self._replicas:
            return outcomes
        return self._settle(outcomes, now, [])

    def retry(self, now: float) -> list[Outcome]:
        """Divide again the workloads still missing replicas, if any cluster changed since they tried."""
        if not self._waiting:
            return []
        due = [state for state in self._waiting.values() if state.tried < self.changes]
        return self._settle([], now, due) if due else []

    def schedule(self, now: float) -> list[Outcome]:
        """Let every cluster retry what it could not place yet (after backoff, or when it changed), and the
        waiting workloads their division."""
        outcomes: list[Outcome] = []
        for scheduler in self._schedulers():
            outcomes += scheduler.schedule(now)
        return self._settle(outcomes, now, []) + self.retry(now)

    def take_releases(self) -> list[tuple[str, str]]:
        releases, self.releases = self.releases, []
        return releases

    # -------------------------------------------------------------------------------- reading

    def replicas(self, workload: str) -> dict[str, list[str]]:
        """Per cluster, the uids of the workload's replicas there."""
        state = self._workloads.get(workload)
        return {name: list(uids) for name, uids in state.replicas.items() if uids} if state else {}

    def pending(self, workload: str) -> list[str]:
        """Uids of the workload's replicas that wait for a division."""
        state = self._workloads.get(workload)
        return list(state.pending) if state else []

    def workload(self, uid: str) -> PodRequest | None:
        state = self._workloads.get(uid)
        return state.pod if state is not None else None

    def replica(self, uid: str) -> PodRequest | None:
        """The replica as placement has it (None for uids that are not live replicas)."""
        replica = self._replicas.get(uid)
        return replica.pod if replica is not None else None

    def replica_cluster(self, uid: str) -> str | None:
        replica = self._replicas.get(uid)
        return replica.cluster if replica is not None else None

    # ------------------------------------------------------------------------------ internals

    def _schedulers(self) -> list[Scheduler]:
        if self.shared is not None:
            return [self.shared]
        return [member.scheduler for member in self._members.values()]

    def _moves(self, state: _Workload) -> bool:
        return self.policy_for(state.pod).strategy in _CAPACITY_STRATEGIES

    def _candidates(self, pod: PodRequest) -> tuple[list[str], tuple[str, ...]]:
        """Clusters the workload may be divided among, or none and why."""
        profile = self.profiles.get(pod.scheduler_name)
        if profile is None:
            return [], (f"no profile named {pod.scheduler_name!r}",)
        if not self._members:
            return [], ("no cluster has nodes here yet",)
        pinned = pinned_cluster(pod)
        if pinned is not None:
            if pinned not in self._members:
                return [], (f"cluster {pinned!r} has no nodes here",)
            return [pinned], ()
        if (
            self.shared is not None
            and len(self._members) > 1
            and all(plugin.name != "NodeAffinity" for plugin in profile.filter)
        ):
            # Replicas keep to their cluster through that filter; without it they would land anywhere.
            return [], (f"profile {profile.name!r} has no NodeAffinity filter to keep replicas in a cluster",)
        return self.clusters, ()

    def _track(self) -> None:
        """Count every pod the shared scheduler holds, from now on as they come."""
        if self._tracking or self.shared is None:
            return
        self._tracking = True
        snapshot = self.shared.snapshot
        for uid, record in snapshot.pods.items():
            node = snapshot.names[record.row] or ""
            cluster = self._node_cluster.get(node)
            if cluster is not None and uid not in self._counted:
                summary = self._members[cluster].summary
                summary.assume(uid, node, record.info.requests, confirmed=record.bound)
                self._counted[uid] = cluster

    def _reconcile(self, state: _Workload, now: float) -> WorkloadPlacement:
        """Divide the workload's missing (or extra) replicas and hand each cluster its share. Outcomes are
        the schedulers' raw ones: `_settle` takes them from there."""
        self._track()
        pod = state.pod
        policy = self.policy_for(pod)
        current = {name: len(uids) for name, uids in state.replicas.items() if uids}
        candidates, refusal = self._candidates(pod)
        estimates: dict[str, int] = {}
        if policy.strategy in _CAPACITY_STRATEGIES and candidates:
            estimates = self.estimates(pod, policy, clusters=candidates)
            for name, (changes, _) in list(state.blocked.items()):
                if self._members[name].changes != changes:
                    del state.blocked[name]  # the cluster changed: it may take replicas again
                elif name in estimates:
                    estimates[name] = 0
        assigned = sum(current.values())
        if candidates:
            division = divide(
                pod.replicas,
                candidates,
                policy.strategy,
                available=estimates,
                weights=policy.weights,
                current=current,
            )
        else:
            division = Division({}, feasible=False, needed=max(0, pod.replicas - assigned), available=0)
        placement = WorkloadPlacement(pod.uid, policy, estimates, current, division)
        self.counters["divisions"] += 1
        if self.on_division is not None:
            self.on_division(placement)
        if not division.feasible:
            self._short(state, placement, refusal or self._shortfall(state, placement))
            return placement
        self._waiting.pop(pod.uid, None)
        state.tried = -1
        touched: list[Scheduler] = []
        for name in self.clusters:
            have = state.replicas.setdefault(name, [])
            want = division.assignment.get(name, 0)
            member = self._members[name]
            while len(have) > want:
                uid = have.pop()
                placement.outcomes += self._drop(uid, now)
                placement.removed.append(uid)
            added = []
            while len(have) < want:
                replica = self._assign(state, name)
                have.append(replica.uid)
                added.append(replica.uid)
                if replica.attempt < 0:
                    placement.outcomes += member.scheduler.add_pod(replica.pod, now)
                else:
                    # A replica taken back from another cluster: its next binding must be newer than
                    # anything said about it before (bindings and results are joined by attempt).
                    placement.outcomes += member.scheduler.requeue(replica.pod, now, replica.attempt)
            if added:
                placement.added[name] = added
                if member.scheduler not in touched:
                    touched.append(member.scheduler)
        for uid in state.pending:  # a scale-down while replicas waited: they are no longer wanted
            del self._replicas[uid]
        state.pending.clear()
        for scheduler in touched:
            placement.outcomes += scheduler.schedule(now)
        return placement

    def _assign(self, state: _Workload, cluster: str) -> _Replica:
        """The next replica to hand `cluster`: one that waits, else a new one."""
        if state.pending:
            replica = self._replicas[state.pending.pop(0)]
        else:
            index = state.next_index
            state.next_index += 1
            uid = replica_uid(state.pod.uid, index)
            replica = self._replicas[uid] = _Replica(uid, state.pod.uid, index, state.pod)
        replica.cluster = cluster
        replica.node = None
        replica.conflicts = 0
        replica.pod = self._pinned(
            state.pod, replica.uid, cluster, replica_uid(state.pod.name, replica.index)
        )
        return replica

    def _short(self, state: _Workload, placement: WorkloadPlacement, reasons: tuple[str, ...]) -> None:
        """Nothing is placed: the missing replicas wait (with uids, so they can be told why)."""
        missing = state.pod.replicas - sum(len(uids) for uids in state.replicas.values())
        while len(state.pending) > max(missing, 0):
            del self._replicas[state.pending.pop()]
        while len(state.pending) < missing:
            index = state.next_index
            state.next_index += 1
            uid = replica_uid(state.pod.uid, index)
            self._replicas[uid] = _Replica(uid, state.pod.uid, index, state.pod)
            state.pending.append(uid)
        state.tried = self.changes
        if state.pending:
            self._waiting[state.pod.uid] = state
            self.counters["divisions_short"] += 1
        else:
            self._waiting.pop(state.pod.uid, None)
        placement.pending = list(state.pending)
        placement.reasons = reasons
        message = "; ".join(reasons)
        profile = state.pod.scheduler_name
        placement.outcomes += [
            Unschedulable(uid, reasons, profile, max(self._replicas[uid].attempt, 0), message)
            for uid in state.pending
        ]

    def _shortfall(self, state: _Workload, placement: WorkloadPlacement) -> tuple[str, ...]:
        division = placement.division
        estimator = placement.policy.estimator
        each = ", ".join(f"{name} {count}" for name, count in placement.estimates.items())
        reasons = [
            f"the clusters can take {division.available} of the {division.needed} replicas to place "
            f"({estimator} estimates: {each})"
        ]
        reasons += [f"cluster {name} {why}" for name, (_, why) in state.blocked.items()]
        return tuple(reasons)

    def _drop(self, uid: str, now: float) -> list[Outcome]:
        """Release a replica from its cluster and forget it."""
        replica = self._replicas.pop(uid, None)
        if replica is None or replica.cluster is None:
            return []
        self._uncount(uid)
        scheduler = self._members[replica.cluster].scheduler
        record = scheduler.snapshot.pods.get(uid)
        if record is not None and self.shared is not None:
            self.releases.append((uid, scheduler.snapshot.names[record.row] or ""))
        return scheduler.delete_pod(uid, now)

    def _uncount(self, uid: str) -> None:
        cluster = self._counted.pop(uid, None)
        if cluster is not None:
            self._members[cluster].summary.forget(uid)
            self._changed(cluster)

    def _lose(self, replica: _Replica) -> _Workload:
        """The replica is gone from its cluster (its node removed, or evicted): retired, to be replaced."""
        state = self._workloads[replica.workload]
        if replica.cluster is not None:
            state.replicas[replica.cluster].remove(replica.uid)
        self._uncount(replica.uid)
        self._replicas.pop(replica.uid, None)
        return state

    def _withdraw(self, state: _Workload, replica: _Replica, why: str, now: float) -> list[Outcome]:
        """Take a replica back from the cluster that could not place it; that cluster takes no more of the
        workload's replicas until it changes."""
        cluster = replica.cluster
        assert cluster is not None
        member = self._members[cluster]
        outcomes = member.scheduler.delete_pod(replica.uid, now)
        self._uncount(replica.uid)
        state.replicas[cluster].remove(replica.uid)
        state.pending.insert(0, replica.uid)
        state.blocked[cluster] = (member.changes, why)
        replica.cluster = replica.node = None
        return outcomes

    def _settle(
        self,
        outcomes: list[Outcome],
        now: float,
        dirty: list[_Workload],
        *,
        first: WorkloadPlacement | None = None,
    ) -> list[Outcome]:
        """Count the outcomes in the summaries, take back replicas their cluster could not place, and divide
        again the workloads that miss replicas, until nothing is left to do. Returns what to report."""
        result: list[Outcome] = []
        queue = outcomes
        todo: dict[str, _Workload] = {state.pod.uid: state for state in dirty}
        rounds: Counter[str] = Counter()
        while queue or todo:
            for outcome in queue:  # `_take` may append (what taking a replica back caused): seen here too
                if self._take(outcome, now, todo, queue):
                    result.append(outcome)
            queue = []
            while todo:
                uid, state = next(iter(todo.items()))
                del todo[uid]
                if self._workloads.get(uid) is not state:
                    continue  # deleted meanwhile
                rounds[uid] += 1
                if rounds[uid] > len(self._members) + 2:
                    # Each round blocks one more cluster, so this only guards against a loop we did not
                    # foresee: wait for the next change instead.
                    state.tried = self.changes
                    self._waiting[uid] = state
                    continue
                placement = self._reconcile(state, now)
                if first is not None:
                    first.later.append(placement)
                queue = placement.outcomes
                break
        return result

    def _take(self, outcome: Outcome, now: float, todo: dict[str, _Workload], queue: list[Outcome]) -> bool:
        """Account for one outcome; False when it is not to be reported (a replica taken back)."""
        uid = outcome.uid
        replica = self._replicas.get(uid)
        if isinstance(outcome, Placed | Waiting):
            # A pod held in Permit is reserved on its node already: it counts from then on.
            if self._tracking and uid not in self._counted:
                self._count(uid, outcome.node, replica)
            if replica is not None:
                replica.node = outcome.node
                if isinstance(outcome, Placed):
                    replica.attempt = max(replica.attempt, outcome.attempt)
        elif isinstance(outcome, Evicted):
            self._uncount(uid)
            if replica is not None and replica.cluster is not None:
                state = self._lose(replica)
                self.counters["replicas_lost"] += 1
                todo.setdefault(state.pod.uid, state)
        elif uid in self._counted:
            self._uncount(uid)  # let go while it waited in Permit
        if isinstance(outcome, Unschedulable) and replica is not None and replica.cluster is not None:
            replica.node = None
            replica.attempt = max(replica.attempt, outcome.attempt)
            state = self._workloads[replica.workload]
            if self._moves(state):
                why = f"could not place a replica: {outcome.message or '; '.join(outcome.reasons)}"
                queue.extend(self._withdraw(state, replica, why, now))
                self.counters["replicas_withdrawn"] += 1
                todo.setdefault(state.pod.uid, state)
                return False  # said again, with the division's reasons, if no other cluster takes it
        return True

    def _count(self, uid: str, node: str, replica: _Replica | None) -> None:
        cluster = self._node_cluster.get(node)
        if cluster is None:
            return
        if replica is not None:
            requests: Mapping[str, int] = replica.pod.effective_requests
        else:
            record = self.shared.snapshot.pods.get(uid) if self.shared is not None else None
            if record is None:
                return
            requests = record.info.requests
        self._members[cluster].summary.assume(uid, node, requests)
        self._counted[uid] = cluster
