"""Two-level placement (SPEC 6): a workload's replicas are divided among clusters, then each cluster's
share is placed on its nodes by that cluster's own scheduler.

`TwoLevelPlacer` keeps, per cluster, a `policies.scheduler.Scheduler` (driven through its public API
only) and a `ClusterSummary` updated by the same events: node events go to the node's cluster
(``NodeSpec.cluster``); a replica the cluster's scheduler places is assumed in the summary at once, so the
next estimate sees it. The workload's profile's ``cluster_policy`` (or the placer's own) picks the
estimator and the division strategy.

A workload is a `PodRequest` with ``replicas``; replica i is the same pod with uid ``<uid>-<i>``, replicas
1 and ``workload`` set to the workload's. Placing a workload again with another ``replicas`` scales it:
growing adds replicas where the division puts the extra ones, shrinking releases the newest replicas of the
clusters that hold fewer now. Bindings (`Placed`) name the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from policies.clusters.division import Division, divide
from policies.clusters.estimators import accurate_estimate, general_estimate, model_estimate, per_replica
from policies.clusters.models import ResourceModels
from policies.clusters.policy import ClusterPolicy, cluster_policy_of
from policies.clusters.summary import ClusterSummary
from policies.framework.profile import ProfileSet
from policies.scheduler import Evicted, Outcome, Placed, Scheduler, Unschedulable
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = ["TwoLevelPlacer", "WorkloadPlacement", "replica_uid"]


def replica_uid(workload: str, index: int) -> str:
    return f"{workload}-{index}"


@dataclass(slots=True)
class WorkloadPlacement:
    """What placing (or rescaling) one workload did."""

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
    """What the cluster schedulers decided (placements name their cluster)."""

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


@dataclass(slots=True)
class _Workload:
    pod: PodRequest
    replicas: dict[str, list[str]] = field(default_factory=dict)
    next_index: int = 0


class TwoLevelPlacer:
    """Clusters, each with its scheduler and summary; workloads divided among them and placed."""

    def __init__(
        self,
        profiles: ProfileSet | None = None,
        *,
        policy: ClusterPolicy | None = None,
        models: Mapping[str, ResourceModels] | None = None,
    ) -> None:
        self.profiles = profiles or ProfileSet.builtin()
        self.policy = policy
        """Overrides every profile's cluster policy when set."""
        self._models = dict(models or {})
        self._members: dict[str, _Member] = {}
        self._node_cluster: dict[str, str] = {}
        self._workloads: dict[str, _Workload] = {}
        self._replicas: dict[str, tuple[str, PodRequest]] = {}
        """Replica uid → (workload uid, replica pod)."""

    # ----------------------------------------------------------------------------------- clusters

    @property
    def clusters(self) -> list[str]:
        return list(self._members)

    def add_cluster(self, name: str, *, models: ResourceModels | None = None) -> None:
        if name in self._members:
            return
        modeling = self.policy.modeling if self.policy is not None else True
        summary = ClusterSummary(name, models or self._models.get(name), modeling=modeling)
        self._members[name] = _Member(Scheduler(self.profiles), summary)

    def scheduler(self, cluster: str) -> Scheduler:
        return self._member(cluster).scheduler

    def summary(self, cluster: str) -> ClusterSummary:
        return self._member(cluster).summary

    def _member(self, cluster: str) -> _Member:
        member = self._members.get(cluster)
        if member is None:
            raise InvalidInput(f"unknown cluster {cluster!r}", field="cluster")
        return member

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
        member.scheduler.upsert_node(spec)
        member.summary.upsert_node(spec)
        self._node_cluster[spec.name] = spec.cluster

    def remove_node(self, name: str, now: float) -> list[Outcome]:
        cluster = self._node_cluster.pop(name, None)
        if cluster is None:
            return []
        member = self._members[cluster]
        member.summary.remove_node(name)
        return self._absorb(member, member.scheduler.remove_node(name, now))

    def set_unschedulable(self, name: str, value: bool) -> None:
        cluster = self._node_cluster.get(name)
        if cluster is None:
            raise InvalidInput(f"unknown node {name!r}", field="node")
        member = self._members[cluster]
        member.scheduler.set_unschedulable(name, value)
        member.summary.set_unschedulable(name, value)

    # ------------------------------------------------------------------------------- estimating

    def policy_for(self, workload: PodRequest) -> ClusterPolicy:
        if self.policy is not None:
            return self.policy
        return cluster_policy_of(self.profiles.get(workload.scheduler_name))

    def estimates(self, workload: PodRequest, policy: ClusterPolicy | None = None) -> dict[str, int]:
        """Per cluster, replicas of the workload it can still take, by the policy's estimator."""
        policy = policy or self.policy_for(workload)
        request = per_replica(workload.effective_requests)
        result: dict[str, int] = {}
        for name, member in self._members.items():
            if policy.estimator == "general":
                result[name] = general_estimate(member.summary, request)
            elif policy.estimator == "model":
                result[name] = model_estimate(member.summary, request, modeling=policy.modeling)
            else:
                result[name] = accurate_estimate(
                    member.scheduler, self._probe(workload), workload.scheduler_name
                )
        return result

    @staticmethod
    def _probe(workload: PodRequest) -> PodRequest:
        return workload.model_copy(update={"uid": f"{workload.uid}-estimate", "replicas": 1})

    # -------------------------------------------------------------------------------- placing

    def place(self, workload: PodRequest, now: float) -> WorkloadPlacement:
        """Divide the workload's replicas among the clusters and place each cluster's share there. A
        workload placed before is rescaled to its new ``replicas``."""
        if workload.scheduler_name not in self.profiles.names():
            raise InvalidInput(f"no profile named {workload.scheduler_name!r}", field="scheduler_name")
        policy = self.policy_for(workload)
        state = self._workloads.get(workload.uid)
        if state is None:
            state = self._workloads[workload.uid] = _Workload(workload)
        state.pod = workload
        current = {name: len(uids) for name, uids in state.replicas.items() if uids}
        needs_estimates = policy.strategy in ("dynamic", "aggregated")
        estimates = self.estimates(workload, policy) if needs_estimates else {}
        division = divide(
            workload.replicas,
            self.clusters,
            policy.strategy,
            available=estimates,
            weights=policy.weights,
            current=current,
        )
        placement = WorkloadPlacement(workload.uid, policy, estimates, current, division)
        if not division.feasible:
            return placement
        for name in self.clusters:
            have = state.replicas.setdefault(name, [])
            want = division.assignment.get(name, 0)
            member = self._members[name]
            while len(have) > want:
                uid = have.pop()
                self._replicas.pop(uid, None)
                member.summary.forget(uid)
                placement.outcomes += self._absorb(member, member.scheduler.delete_pod(uid, now))
                placement.removed.append(uid)
            added = []
            while len(have) < want:
                uid = replica_uid(workload.uid, state.next_index)
                state.next_index += 1
                replica = workload.model_copy(
                    update={
                        "uid": uid,
                        "name": replica_uid(workload.name, state.next_index - 1),
                        "replicas": 1,
                        "workload": workload.workload or workload.uid,
                    }
                )
                have.append(uid)
                added.append(uid)
                self._replicas[uid] = (workload.uid, replica)
                member.scheduler.add_pod(replica, now)
            if added:
                placement.added[name] = added
                placement.outcomes += self._absorb(member, member.scheduler.schedule(now))
        return placement

    def delete_workload(self, uid: str, now: float) -> list[Outcome]:
        """Release every replica of the workload."""
        state = self._workloads.pop(uid, None)
        outcomes: list[Outcome] = []
        if state is None:
            return outcomes
        for name, replicas in state.replicas.items():
            member = self._members[name]
            for replica in replicas:
                self._replicas.pop(replica, None)
                member.summary.forget(replica)
                outcomes += self._absorb(member, member.scheduler.delete_pod(replica, now))
        return outcomes

    def confirm(self, replica: str) -> None:
        """The applier committed the replica's binding (allocating → allocated)."""
        cluster = self._cluster_of(replica)
        if cluster is not None:
            member = self._members[cluster]
            member.scheduler.confirm(replica)
            member.summary.confirm(replica)

    def schedule(self, now: float) -> list[Outcome]:
        """Let every cluster retry what it could not place yet (after backoff, or when it changed)."""
        outcomes: list[Outcome] = []
        for member in self._members.values():
            outcomes += self._absorb(member, member.scheduler.schedule(now))
        return outcomes

    def replicas(self, workload: str) -> dict[str, list[str]]:
        state = self._workloads.get(workload)
        return {name: list(uids) for name, uids in state.replicas.items() if uids} if state else {}

    def _cluster_of(self, replica: str) -> str | None:
        owner = self._replicas.get(replica)
        if owner is None:
            return None
        state = self._workloads.get(owner[0])
        if state is None:
            return None
        return next((name for name, uids in state.replicas.items() if replica in uids), None)

    def _absorb(self, member: _Member, outcomes: Iterable[Outcome]) -> list[Outcome]:
        """Mirror the scheduler's decisions in the cluster's summary."""
        result = list(outcomes)
        for outcome in result:
            if isinstance(outcome, Placed):
                owner = self._replicas.get(outcome.uid)
                if owner is not None and outcome.uid not in member.summary:
                    member.summary.assume(outcome.uid, outcome.node, owner[1].effective_requests)
            elif isinstance(outcome, Evicted):
                member.summary.forget(outcome.uid)
        return result
