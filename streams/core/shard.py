"""One placement shard as a pure state machine: sequencer envelopes in, bindings and verdicts out.

The placement agent (live, through Kafka) and `eyrie replay --offline` (in process) feed the same `Shard`
the same envelopes in the same order (`streams.core.sequencer` fixes that order), which is why their
decisions agree pod for pod.

The sequencer partition is also the shard's changelog: replaying it from the start rebuilds exactly the
state a crashed worker had (every input, ticks included, is on it, and nothing here reads a clock).

A shard may hold nodes of several clusters (``NodeSpec.cluster``). A single pod (``replicas`` 1) is placed
on any node of the shard, as it always was. A workload (``replicas`` > 1) is placed in two levels by a
`TwoLevelPlacer` that shares the shard's scheduler: its profile's ``clusterPolicy`` divides the replicas
among the shard's clusters (all of them, or the one its ``eyrie.io/cluster`` label pins), and each replica
is placed on a node of its cluster. The placer keeps one resource summary per cluster, fed by the same
envelopes (every pod counts, single or replica), and re-divides replicas that are lost.

Pods bound by others (`PodBound`: another scheduler, a DaemonSet, a ``nodeName`` set by hand, or the API
server reporting placement's own binding) are facts, counted on their node whatever room they leave. Where
placement holds the uid on that node it is its own pod, confirmed (or re-counted, when its requests
changed); where it holds or queues the uid otherwise, the API server wins: placement lets its assumption or
queue entry go and the pod becomes another's. Another's pod is never queued, bound, answered or requeued
when its node goes; a `PodDeleted` of its uid releases it. A report of a node the shard does not know yet is
held until the node comes (`BOUND_HELD_LIMIT` of them at most; past that, refused). Each counted report
goes on to the applier (`Counted`), whose ledger books it too.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from policies.clusters.placement import TwoLevelPlacer
from policies.framework.profile import ProfileSet, parse_profile
from policies.scheduler import Evicted, Outcome, Placed, Scheduler, Unschedulable
from schemas.events import Binding, BindingResult
from schemas.exceptions import EyrieError
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.core.ledger import bound_node
from streams.core.metrics import NodeSummary, WorkloadSummary
from streams.core.sequencer import TIMEOUT_KEY, Envelope, Kind, ReorderBuffer

__all__ = ["BOUND_HELD_LIMIT", "REMOVED_NODES_KEPT", "Counted", "Output", "Refused", "Release", "Shard"]

BOUND_HELD_LIMIT = 10_000
"""The most reports of pods bound to nodes a shard does not know yet that it holds for their nodes: a node
announced late (node events and pods travel different topics) is the reason to hold them, and a stream of
reports naming nodes that never come must not take the worker's memory."""

REMOVED_NODES_KEPT = 10_000
"""The most deleted nodes a shard remembers as deleted (see `Shard._removed_nodes`)."""


@dataclass(frozen=True, slots=True)
class Refused:
    """An input that was well-formed but cannot apply (a cordon of a node nobody announced): the agent
    turns it into a dead letter, so it is accounted for rather than silently dropped."""

    envelope: Envelope
    reason: str


@dataclass(frozen=True, slots=True)
class Release:
    """Placement let go of a pod it had assumed or bound on `node` (deleted, or preempted)."""

    deleted: PodDeleted
    node: str


@dataclass(frozen=True, slots=True)
class Counted:
    """A pod bound by someone else that placement now counts on ``bound.node``: the applier's ledger books
    it too. It travels on the bindings partition of `via`, the pod's node; and, when placement held the uid
    on another node until then, once more on that node's partition, after any binding placement sent there
    for it, so the ledger's booking moves the pod off that node whichever partition it reads first. (A
    `PodDeleted` there could instead be read after the booking, and release the pod from its real node.)"""

    bound: PodBound
    via: str


Output = Binding | BindingResult | Release | Refused | Counted
"""Bindings, unschedulable verdicts, releases of pods placement had assumed or bound (deleted, or
preempted), inputs that could not apply, and pods bound by others that placement counted."""


def _counts_alike(held: PodRequest, reported: PodRequest) -> bool:
    """Whether a report changes nothing placement counts of the pod: requests, limits, ports, labels."""
    return (
        held.effective_requests == reported.effective_requests
        and held.effective_limits == reported.effective_limits
        and held.host_ports == reported.host_ports
        and held.labels == reported.labels
    )


def _reason_kinds(reasons: tuple[str, ...]) -> tuple[str, ...]:
    """Reasons without kube-scheduler's node counts ("3 Insufficient cpu" → "Insufficient cpu")."""
    return tuple(sorted(_without_count(reason) for reason in reasons))


def _without_count(reason: str) -> str:
    count, _, rest = reason.partition(" ")
    return rest if count.isdigit() and rest else reason


class Shard:
    """The scheduler core behind one sequencer partition: applies envelopes, returns what to publish."""

    def __init__(self, profiles: ProfileSet | None = None, *, cluster: str = "default") -> None:
        self.scheduler = Scheduler(profiles or ProfileSet.builtin())
        self.reorder = ReorderBuffer()
        self.cluster = cluster
        self.now = 0.0
        self.pods: dict[str, PodRequest] = {}
        """Every single pod placement still owns (queued, assumed or bound), for requeueing it after a
        conflict. Workloads and their replicas are the placer's."""
        self.foreign: dict[str, PodBound] = {}
        """Pods bound by others that placement counts (uid → the latest report): not placement's to
        place, answer or requeue."""
        self._unplaced_bound: dict[str, PodBound] = {}
        """Reports of pods bound to nodes the shard does not know yet (uid → report, oldest first)."""
        self._verdicts: dict[str, tuple[str, ...]] = {}
        self._removed_nodes: dict[str, None] = {}
        """Nodes deleted (and not added again), oldest first: the applier may hold a pod on one until it
        sees the deletion, which it reads on its own consumer. Only the latest `REMOVED_NODES_KEPT` are
        remembered: the applier catches up in seconds, and node churn must not grow this forever."""
        self._portrait_ts: dict[str, float] = {}
        """Per workload whose portrait the usage holds, the summary time of that portrait (for expiries)."""
        self.counters: Counter[str] = Counter()
        self._applied_offsets: dict[str, int] = {}
        """Per source partition, the offset of the last input record applied (see `feed`)."""
        self.placer = TwoLevelPlacer(scheduler=self.scheduler, counters=self.counters)
        """Divides workloads among the shard's clusters; every node and pod event goes through it, so its
        per-cluster summaries count what the scheduler holds."""

    def feed(self, envelope: Envelope) -> list[Output]:
        if envelope.offset >= 0:
            # A source partition reaches this shard in offset order; a forwarder that restarted resends
            # from its last commit, and those copies must not apply twice (a pod deleted in between would
            # otherwise be placed again).
            if envelope.offset <= self._applied_offsets.get(envelope.source, -1):
                self.counters["duplicate"] += 1
                return []
            self._applied_offsets[envelope.source] = envelope.offset
        outputs: list[Output] = []
        if envelope.kind is Kind.TICK and self.reorder.session is not None:
            # A session runs on its log's clock, which a wall-clock tick must not move (the offline replay
            # sees none); the tick only tells how long the replayer has been silent.
            timeout = envelope.value[TIMEOUT_KEY] if envelope.value is not None else math.inf
            released = self.reorder.expire(envelope.ts, timeout)
            if self.reorder.session is None:
                self.counters["replay_sessions_expired"] += 1
            for ready in released:
                outputs.extend(self.apply(ready))
            return outputs
        for ready in self.reorder.push(envelope):
            outputs.extend(self.apply(ready))
        return outputs

    def feed_all(self, envelopes: Iterable[Envelope]) -> list[Output]:
        outputs: list[Output] = []
        for envelope in envelopes:
            outputs.extend(self.feed(envelope))
        return outputs

    def advance_clock(self, envelope: Envelope) -> float:
        """The time `envelope` applies at, which becomes the shard's clock (`eyrie record` asks this too,
        for the time it writes beside each envelope placement applied)."""
        if self.reorder.session is None:
            self.now = max(self.now, envelope.ts)
        elif envelope.source in self.reorder.expected:
            self.now = envelope.ts  # the replay's own clock: its envelopes come in (ts, seq) order
        # else: a result or profile during a replay applies at the replay's current time. Its own
        # stamp is the wall clock, and moving the replay's clock there would expire backoffs and waits at
        # moments the offline replay (which feeds results at their decision's time) never sees.
        return self.now

    def apply(self, envelope: Envelope) -> list[Output]:
        """Apply one envelope at its event time, then run the queue: a pod is placed as soon as it arrives,
        so the decisions do not depend on how envelopes were batched on the way in."""
        now = self.advance_clock(envelope)
        self.counters[envelope.kind.value] += 1
        scheduler, placer, value = self.scheduler, self.placer, envelope.value
        outcomes: list[Outcome] = []  # straight from the scheduler: the placer sees them below
        settled: list[Outcome] = []  # from the placer, which has seen them already
        releases: list[Output] = []
        match envelope.kind:
            case Kind.NODE:
                refusal = self._node_refusal(value)
                if refusal is not None:
                    releases.append(Refused(envelope, refusal))
                else:
                    settled = self._node_event(value, now)
                    if value.type == "upsert" and self._unplaced_bound:
                        outcomes, counted = self._bound_waiting_for(value.node.name, now)
                        releases += counted
            case Kind.POD:
                if value.replicas > 1 or placer.workload(value.uid) is not None:
                    settled = self._workload(value, now)
                elif (
                    value.uid not in self.pods
                    and value.uid not in self.foreign  # running already, bound by someone else
                    and placer.replica(value.uid) is None
                ):
                    self.pods[value.uid] = value
                    outcomes = scheduler.add_pod(value, now)
                elif value.uid in scheduler.gated():
                    # A new version of a gated pod (a gate lifted): it replaces the one held.
                    self.pods[value.uid] = value
                    outcomes = scheduler.add_pod(value, now)
                else:
                    self.counters["duplicate_pod"] += 1
            case Kind.DELETE:
                if placer.workload(value.uid) is not None or placer.replica(value.uid) is not None:
                    settled = self._delete_replicas(value.uid, now)
                else:
                    self.pods.pop(value.uid, None)
                    self.foreign.pop(value.uid, None)
                    self._unplaced_bound.pop(value.uid, None)
                    self._verdicts.pop(value.uid, None)
                    record = scheduler.snapshot.pods.get(value.uid)
                    if record is not None:
                        node = scheduler.snapshot.names[record.row] or ""
                        releases.append(Release(PodDeleted(uid=value.uid, ts=max(now, 0.0)), node))
                    placer.released(value.uid)
                    outcomes = scheduler.delete_pod(value.uid, now)
            case Kind.BOUND:
                outcomes, counted = self._bound(envelope, now)
                releases += counted
            case Kind.SUMMARY:
                self._summary(value)
            case Kind.WORKLOAD:
                self._workload_summary(value)
            case Kind.RESULT:
                if placer.replica(value.uid) is not None:
                    settled = self._replica_result(value, now)
                else:
                    outcomes = self._result(value, now)
            case Kind.CONFIG:
                self._config(value)
            case Kind.TICK:
                outcomes = scheduler.tick(now)
            case Kind.WATERMARK:
                pass
        outcomes.extend(scheduler.schedule(now))
        settled += placer.observe(outcomes, now)
        settled += placer.retry(now)
        stamp = max(now, 0.0)
        releases += [Release(PodDeleted(uid=uid, ts=stamp), node) for uid, node in placer.take_releases()]
        return releases + self._outputs(settled, now)

    def _node_refusal(self, event: NodeEvent) -> str | None:
        name = event.node.name
        if event.type != "upsert":
            return None if name in self.scheduler.snapshot.index else f"node: unknown node {name!r}"
        cluster = self.placer.cluster_of_node(name)
        if cluster is not None and cluster != event.node.cluster:
            # Its pods were counted in the other cluster's summary and its replicas divided to it there.
            moved_to = event.node.cluster
            return f"node: {name!r} is in cluster {cluster!r}; delete it before moving it to {moved_to!r}"
        return None

    def _node_event(self, event: NodeEvent, now: float) -> list[Outcome]:
        placer, name = self.placer, event.node.name
        if event.type == "upsert":
            self._removed_nodes.pop(name, None)
            placer.upsert_node(event.node)
            return []
        if event.type == "delete":
            lost = self._single_pods_on(name)
            for uid in self._foreign_on(name):
                # Gone with its node (the API server deletes the pods of a deleted node): not requeued, it is
                # not placement's; counted again if it is reported bound again.
                del self.foreign[uid]
                self.counters["bound_lost_node"] += 1
            self._removed_nodes.pop(name, None)
            self._removed_nodes[name] = None
            if len(self._removed_nodes) > REMOVED_NODES_KEPT:
                del self._removed_nodes[next(iter(self._removed_nodes))]
            settled = placer.remove_node(name, now)
            # Like a controller recreating a pod whose node went away, but under the pod's own uid: the
            # applier marks it released when it sees the deletion, and binds it again at a later attempt.
            # (Replicas are the placer's: replaced under new uids.)
            requeued: list[Outcome] = []
            for pod, attempt in lost:
                self.counters["pods_lost_node"] += 1
                requeued += self.scheduler.requeue(pod, now, attempt)
            return settled + placer.observe(requeued, now)
        placer.set_unschedulable(name, event.type == "cordon")
        return []

    def _single_pods_on(self, name: str) -> list[tuple[PodRequest, int]]:
        """The single pods placement holds on the node (assumed or bound), in uid order, each with the
        attempt that put it there."""
        snapshot = self.scheduler.snapshot
        row = snapshot.index.get(name)
        if row is None:
            return []
        lost = []
        for uid in sorted(snapshot.pods_on_row[row]):
            pod = self.pods.get(uid)
            if pod is not None:
                lost.append((pod, snapshot.pods[uid].attempt))
        return lost

    def _foreign_on(self, name: str) -> list[str]:
        snapshot = self.scheduler.snapshot
        row = snapshot.index.get(name)
        if row is None or not self.foreign:
            return []
        return sorted(uid for uid in snapshot.pods_on_row[row] if uid in self.foreign)

    def _bound(self, envelope: Envelope, now: float) -> tuple[list[Outcome], list[Output]]:
        """A pod bound by someone else: counted on its node (see the module docstring), held for a node
        the shard does not know yet, or refused where the uid is one of placement's workloads."""
        bound: PodBound = envelope.value
        uid, placer = bound.uid, self.placer
        if placer.workload(uid) is not None:
            return [], [Refused(envelope, f"uid: {uid!r} names a workload placement divides, not one pod")]
        if placer.replica(uid) is not None:
            # Replicas are the placer's, which moves them only by its own divisions: a replica bound where
            # placement did not put it is reported, not followed.
            held_on = self._assumed_on(uid)
            if held_on != bound.node:
                where = f"holds it on {held_on!r}" if held_on is not None else "has not placed it"
                reason = f"node: {uid!r} is a replica placement {where}, not on {bound.node!r}"
                return [], [Refused(envelope, reason)]
            placer.confirm(uid)  # placement's own binding of the replica, reported back
            return [], [Counted(bound, bound.node)]
        row = self.scheduler.snapshot.index.get(bound.node)
        if row is None:
            return self._hold_bound(envelope)
        self._unplaced_bound.pop(uid, None)
        return self._count_bound(bound, row, now)

    def _hold_bound(self, envelope: Envelope) -> tuple[list[Outcome], list[Output]]:
        bound: PodBound = envelope.value
        held = self._unplaced_bound
        if bound.uid not in held and len(held) >= BOUND_HELD_LIMIT:
            reason = (
                f"node: unknown node {bound.node!r}, and {BOUND_HELD_LIMIT:,} pods bound elsewhere "
                "already wait for their nodes"
            )
            return [], [Refused(envelope, reason)]
        held.pop(bound.uid, None)  # the latest report of the uid is the one that counts
        held[bound.uid] = bound
        self.counters["bound_held"] += 1
        return [], []

    def _bound_waiting_for(self, name: str, now: float) -> tuple[list[Outcome], list[Output]]:
        """The held reports of pods bound to `name`, counted now that the node is known, in arrival order."""
        row = self.scheduler.snapshot.index.get(name)
        outcomes: list[Outcome] = []
        counted: list[Output] = []
        if row is None:
            return outcomes, counted
        for bound in [bound for bound in self._unplaced_bound.values() if bound.node == name]:
            del self._unplaced_bound[bound.uid]
            more, said = self._count_bound(bound, row, now)
            outcomes += more
            counted += said
        return outcomes, counted

    def _count_bound(self, bound: PodBound, row: int, now: float) -> tuple[list[Outcome], list[Output]]:
        uid, node = bound.uid, bound.node
        scheduler, placer = self.scheduler, self.placer
        record = scheduler.snapshot.pods.get(uid)
        held_on = scheduler.snapshot.names[record.row] if record is not None else None
        own = uid in self.pods
        if record is not None and held_on == node and _counts_alike(record.info.pod, bound.pod):
            if own:
                placer.confirm(uid)  # placement's own binding, as the API server reports it back
            else:
                self.foreign[uid] = bound
            self.counters["bound_known"] += 1
            return [], [Counted(bound, node)]
        # Counted as it is reported, bound, whatever room it leaves: dropping whatever placement assumed or
        # queued for the uid, which the API server's word overrides.
        outcomes = scheduler.adopt(bound.pod, row, now, record.attempt if record is not None else 0)
        placer.adopted(uid, node)
        placer.confirm(uid)
        counted: list[Output] = [Counted(bound, node)]
        if held_on is not None and held_on != node:
            counted.append(Counted(bound, held_on))
        if own and held_on == node:
            self.pods[uid] = bound.pod  # placement's own pod, resized in place
            self.counters["bound_resized"] += 1
            return outcomes, counted
        if own:
            del self.pods[uid]  # bound elsewhere by someone else: another's pod from now on
            self._verdicts.pop(uid, None)
            self.counters["bound_taken_over"] += 1
        else:
            key = "bound_resized" if uid in self.foreign and held_on == node else "bound_counted"
            self.counters[key] += 1
        self.foreign[uid] = bound
        return outcomes, counted

    def _workload(self, pod: PodRequest, now: float) -> list[Outcome]:
        """A workload's request: placed the first time, rescaled when its replicas change, else a
        duplicate."""
        existing = self.placer.workload(pod.uid)
        if existing is None and (pod.uid in self.pods or self.placer.replica(pod.uid) is not None):
            self.counters["duplicate_pod"] += 1  # the uid is a single pod's, or a replica's
            return []
        if existing is not None and existing.replicas == pod.replicas:
            self.counters["duplicate_pod"] += 1
            return []
        self.counters["workloads" if existing is None else "rescales"] += 1
        return self.placer.place(pod, now).outcomes

    def _delete_replicas(self, uid: str, now: float) -> list[Outcome]:
        """A workload's deletion releases all its replicas; a replica's releases it, and the workload gets
        a new one (as a ReplicaSet recreates a deleted pod: it still wants as many)."""
        placer = self.placer
        if placer.workload(uid) is not None:
            for replica in [*placer.pending(uid), *(r for rs in placer.replicas(uid).values() for r in rs)]:
                self._verdicts.pop(replica, None)
            return placer.delete_workload(uid, now)
        self._verdicts.pop(uid, None)
        return placer.delete_replica(uid, now)

    def _workload_summary(self, summary: WorkloadSummary) -> None:
        """A workload's portrait kept, or dropped on its expiry unless a newer one came since (from another
        metrics partition still sampling it): what is kept is bounded by workloads sampled within the
        metrics ttl, not by every workload ever seen."""
        usage = self.scheduler.snapshot.usage
        portrait = summary.to_portrait()
        if portrait is not None:
            usage.set_workload_portrait(summary.workload, portrait)
            self._portrait_ts[summary.workload] = summary.ts
        elif summary.expired is not None:
            if self._portrait_ts.get(summary.workload, -math.inf) <= summary.expired:
                self._portrait_ts.pop(summary.workload, None)
                dropped = usage.drop_workload_portrait(summary.workload)
                self.counters["workload_portraits_dropped" if dropped else "workload_expired_unknown"] += 1
            else:
                self.counters["workload_expired_stale"] += 1

    def _summary(self, summary: NodeSummary) -> None:
        snapshot = self.scheduler.snapshot
        row = snapshot.index.get(summary.node)
        if row is None:
            self.counters["summary_unknown_node"] += 1
            return
        usage = snapshot.usage
        if summary.window:
            usage.set_window(row, summary.window, summary.window_end)
        portrait = summary.to_portrait()
        if portrait is not None and summary.seen is not None:
            usage.set_node_portrait(row, portrait, summary.seen)

    def _result(self, result: BindingResult, now: float) -> list[Outcome]:
        pod = self.pods.get(result.uid)
        if pod is None or result.status == "unschedulable":
            return []  # a pod deleted meanwhile, or our own verdict coming back
        assumed_on = self._assumed_on(result.uid)
        if result.status == "applied":
            if assumed_on == result.node:
                self.placer.confirm(result.uid)
            return []
        if result.status == "conflict":
            if assumed_on != result.node:
                return []  # an older attempt's conflict: the pod has moved on
            self.counters["conflicts"] += 1
            self.placer.released(result.uid)
            return self.scheduler.requeue(pod, now, result.attempt)
        # rejected: the applier will never bind this binding.
        if assumed_on is not None and assumed_on != result.node:
            return []  # an older attempt's answer: the pod has moved on
        holder = bound_node(result.reasons)
        row = self.scheduler.snapshot.index.get(holder) if holder is not None else None  # live nodes only
        if holder is not None and row is not None:
            # The ledger holds the pod there, from an earlier binding: placement follows the ledger.
            outcomes = self.scheduler.adopt(pod, row, now, result.attempt)
            self.placer.adopted(result.uid, holder)
            return outcomes
        if holder in self._removed_nodes:
            # On a node deleted since: the applier has not seen the deletion yet, and lets the pod go when it
            # does. Try again after a backoff, so a lagging applier is not asked at the pipeline's pace.
            self.counters["bound_on_removed_node"] += 1
            self.placer.released(result.uid)
            return self.scheduler.requeue(pod, now, result.attempt, after_backoff=True)
        # Deleted, or a stale attempt: the pod is not going to be bound; placement lets go.
        self.pods.pop(result.uid, None)
        self.placer.released(result.uid)
        return self.scheduler.delete_pod(result.uid, now)

    def _assumed_on(self, uid: str) -> str | None:
        """The node placement holds the pod on (assumed or bound), or None."""
        snapshot = self.scheduler.snapshot
        record = snapshot.pods.get(uid)
        return None if record is None else snapshot.names[record.row]

    def _replica_result(self, result: BindingResult, now: float) -> list[Outcome]:
        if result.status == "unschedulable":
            return []
        if self._assumed_on(result.uid) != result.node:
            return []  # an older attempt's answer: the replica has moved on, or waits for a division
        if result.status == "applied":
            self.placer.confirm(result.uid)
            return []
        if result.status == "conflict":
            self.counters["conflicts"] += 1
            return self.placer.conflict(result.uid, now, result.attempt, result.reasons)
        return self.placer.reject(result.uid, now)

    def _config(self, value: dict[str, Any]) -> None:
        document = value.get("document")
        if document is None:
            return  # a tombstone: profiles are never removed at run time, only replaced
        try:
            profile = parse_profile(document)
        except EyrieError as exc:
            self.counters["config_rejected"] += 1
            self.last_config_error = f"profile {value.get('name')!r}: {exc}"
            return
        self.scheduler.profiles.replace(profile)
        self.placer.changes += 1  # a waiting workload may have been waiting for this profile
        self.counters["config_applied"] += 1

    def _outputs(self, outcomes: list[Outcome], now: float) -> list[Output]:
        outputs: list[Output] = []
        for outcome in outcomes:
            if isinstance(outcome, Placed):
                self._verdicts.pop(outcome.uid, None)
                pod = self.pods.get(outcome.uid)
                if pod is None:
                    pod = self.placer.replica(outcome.uid)
                outputs.append(
                    Binding(
                        uid=outcome.uid,
                        node=outcome.node,
                        namespace=pod.namespace if pod is not None else None,
                        name=pod.name if pod is not None else None,
                        cluster=outcome.cluster,
                        profile=outcome.profile,
                        score=outcome.score,
                        plugin_scores=outcome.plugin_scores,
                        requests=pod.effective_requests if pod is not None else {},
                        node_version=outcome.node_version,
                        batch_id=outcome.batch_id,
                        decided_at=max(now, 0.0),
                        attempt=outcome.attempt,
                        gpu_cards=list(outcome.gpu_cards),
                        gpu_milli=pod.gpu.milli if pod is not None and pod.gpu is not None else 0,
                    )
                )
            elif isinstance(outcome, Unschedulable):
                kinds = _reason_kinds(outcome.reasons)
                if self._verdicts.get(outcome.uid) == kinds:
                    continue  # the same verdict again after a retry (node counts aside): nothing new to say
                self._verdicts[outcome.uid] = kinds
                # A replica's verdict names the cluster it waits in, or none while it waits for a division.
                pod = self.pods.get(outcome.uid) or self.placer.replica(outcome.uid)
                replica = self.placer.replica(outcome.uid) is not None
                cluster = self.placer.replica_cluster(outcome.uid) if replica else self.cluster
                outputs.append(
                    BindingResult(
                        uid=outcome.uid,
                        namespace=pod.namespace if pod is not None else None,
                        name=pod.name if pod is not None else None,
                        node=None,
                        cluster=cluster,
                        status="unschedulable",
                        reasons=list(outcome.reasons),
                        at=max(now, 0.0),
                        attempt=outcome.attempt,
                    )
                )
            elif isinstance(outcome, Evicted):
                self.pods.pop(outcome.uid, None)
                outputs.append(Release(PodDeleted(uid=outcome.uid, ts=max(now, 0.0)), outcome.node))
        return outputs
