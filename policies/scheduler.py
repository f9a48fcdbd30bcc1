"""The scheduler core: a queue, and one cycle per pod through its profile's plugin chain.

Pure and synchronous: time is a parameter (``now``), never the wall clock, and every public method returns
the outcomes it produced (placements, unschedulable verdicts, evictions), so the streaming agent, the
offline replay and the tests drive the same code and get the same decisions.

`Scheduler._cycle` is the architecture in one function; each stage is commented where it runs.
"""

from __future__ import annotations

import heapq
import zlib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from operator import attrgetter, not_
from typing import Any

import numpy as np

from policies.batch.placement import candidate_mask, plan_batch
from policies.framework.contract import BoolArray, CycleContext, Int32Array, IntArray, RowScores, skipped
from policies.framework.profile import Profile, ProfileSet
from policies.framework.select import select
from policies.framework.status import Code, Status
from policies.gpu.cards import planned_cards
from policies.plugins.gpushare.fit import NAME as GPU_SHARE_FIT
from policies.snapshot import PodInfo, Snapshot
from schemas.events import MAX_TALLY
from schemas.gpu import GPU_RESOURCE
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = [
    "Evicted",
    "Explanation",
    "Outcome",
    "Placed",
    "Scheduler",
    "Unschedulable",
    "Waiting",
    "fit_error",
    "uncounted_gpu",
]

UNSCHEDULABLE_FLUSH_S = 300.0
"""Like kube-scheduler's podMaxInUnschedulablePodsDuration: retry even without a cluster change."""


@dataclass(frozen=True, slots=True)
class Placed:
    uid: str
    node: str
    cluster: str
    profile: str
    score: int
    plugin_scores: dict[str, int]
    node_version: int
    attempt: int
    batch_id: str | None = None
    gpu_cards: tuple[int, ...] = ()
    """The GPU cards of the node the pod was assumed on (docs/gpu-sharing.md)."""


@dataclass(frozen=True, slots=True)
class Unschedulable:
    uid: str
    reasons: tuple[str, ...]
    profile: str
    attempt: int
    message: str = ""


@dataclass(frozen=True, slots=True)
class Evicted:
    uid: str
    node: str
    preemptor: str


@dataclass(frozen=True, slots=True)
class Waiting:
    """Reserved on `node`, held in Permit until its group is complete (not a final decision)."""

    uid: str
    node: str
    deadline: float


Outcome = Placed | Unschedulable | Evicted | Waiting


@dataclass(slots=True)
class Explanation:
    """Why a pod went where it went: the `eyrie explain` output."""

    pod: str
    selected: str | None
    feasible: list[str]
    filtered: dict[str, list[str]]
    scores: dict[str, dict[str, int]]
    total: dict[str, int]
    message: str = ""
    """Why no node was selected, in the words of the unschedulable result placement would publish."""
    profile: str | None = None
    """The profile the cycle ran; None when the pod names a profile placement does not have."""

    def to_json(self) -> dict[str, Any]:
        return {
            "pod": self.pod,
            "profile": self.profile,
            "selected": self.selected,
            "feasible": self.feasible,
            "filtered": self.filtered,
            "scores": self.scores,
            "total": self.total,
            **({"message": self.message} if self.message else {}),
        }


@dataclass(slots=True)
class _Queued:
    pod: PodRequest
    arrival: int
    info: PodInfo | None = None
    attempt: int = 0
    backoff_until: float = 0.0
    unschedulable_since: float = 0.0
    moved: bool = False
    """Retry once the backoff ends even if the cluster does not change (time lifts the rejection, or a
    member of its gang arrived)."""
    failed_change: int = 0
    """The scheduler's count of cluster changes when the pod failed: any later change makes it worth a
    retry."""


@dataclass(slots=True)
class _Stages:
    """The stages of a profile's plugins that have something to do for pods of one shape (kube-scheduler's
    PreFilter/PreScore Skip, `SkipPlugin`): a cycle calls only these."""

    pre_filter: list[Any]
    filter: list[Any]
    score: list[tuple[Any, int]]
    zeros: dict[str, int]
    """Every scorer's name → 0, in the profile's order: the skipped scorers' part of `plugin_scores`."""
    by_rows: bool
    """Whether every scorer here is a `RowScorePlugin`: the cycle may then score whole rows."""
    row_order: list[tuple[int, int]]
    """(index in `score`, weight), weight-1 scorers last: whole-row sums add them without a multiply."""


@dataclass(slots=True)
class _Skipping:
    """A profile's `SkipPlugin`s and the stages they answered per pod shape (which of their `skip_fields`
    the pod leaves empty), valid on `snapshot` while the keyed plugins' `skip_key`s are `keys`."""

    profile: Profile
    plugins: list[Any]
    keyed: list[Any]
    shape: Callable[[PodRequest], tuple[bool, ...]]
    snapshot: Snapshot | None = None
    keys: list[object] = field(default_factory=list)
    stages: dict[tuple[bool, ...], _Stages] = field(default_factory=dict)


@dataclass(slots=True)
class _Wait:
    queued: _Queued
    profile: Profile
    row: int
    deadline: float
    score: int
    plugin_scores: dict[str, int]


@dataclass(slots=True)
class _Batch:
    """Pods of a batch-mode profile collected for one batch (by profile and the pods' `batch_id`), each
    with the time it was collected: the batch runs when it is full or its first pod waited `batch_wait`."""

    pods: list[tuple[_Queued, float]] = field(default_factory=list)


class _RejectedRows(Mapping[int, str]):
    """Row → the filter that rejected it, as PostFilter receives it, with `groups`: each plugin's rows as
    an array, in the same order. The mapping itself is built only if read: preemption reads the groups."""

    def __init__(self, groups: list[tuple[str, IntArray]]) -> None:
        self.groups = groups
        self._rows: dict[int, str] | None = None

    def _mapping(self) -> dict[int, str]:
        if self._rows is None:
            self._rows = {}
            for name, rows in self.groups:
                self._rows.update(dict.fromkeys(rows.tolist(), name))
        return self._rows

    def __getitem__(self, row: int) -> str:
        return self._mapping()[row]

    def __iter__(self) -> Iterator[int]:
        return iter(self._mapping())

    def __len__(self) -> int:
        return sum(len(rows) for _, rows in self.groups)


@dataclass(slots=True)
class _Rejection:
    """Which filter dropped which rows; masks and reasons are worked out only when read.

    A cycle appends each filter's answer, with the rows still passing before it, to a list (`_answers`),
    which costs nothing: nearly every pod is placed, and only a failed or explained cycle wraps the list in
    a `_Rejection` and asks which filter dropped a row. Read within the cycle that recorded it, before
    anything changes the arrays it refers to."""

    ctx: CycleContext
    _answers: list[tuple[Any, BoolArray, BoolArray | None]] = field(default_factory=list)
    _steps: list[tuple[Any, BoolArray]] | None = None
    _reasons: dict[int, list[str]] | None = None

    @property
    def steps(self) -> list[tuple[Any, BoolArray]]:
        """Per filter that dropped any row, the rows it dropped: a row is charged to the first plugin that
        rejects it, as kube-scheduler stops at the first."""
        if self._steps is None:
            self._steps = []
            for plugin, keep, before in self._answers:
                dropped = ~keep if before is None else before & ~keep
                if dropped.any():
                    self._steps.append((plugin, dropped))
        return self._steps

    def by_row(self) -> Mapping[int, str]:
        # The steps' rows are disjoint. The rows of each plugin go along as arrays (`groups`), so PostFilter
        # need not split a mapping again row by row.
        return _RejectedRows(
            [(plugin.name, np.flatnonzero(dropped).astype(np.int64)) for plugin, dropped in self.steps]
        )

    def reasons(self) -> dict[int, list[str]]:
        """Per rejected row (for an explanation)."""
        if self._reasons is None:
            self._reasons = {}
            for plugin, dropped in self.steps:
                rows = np.flatnonzero(dropped).astype(np.int64)
                self._reasons.update(zip(rows.tolist(), plugin.reasons(self.ctx, rows), strict=True))
        return self._reasons

    def counts(self) -> Counter[str]:
        """How many rejected rows give each reason: what the fit error reports. Without the rows: an
        unschedulable pod is retried again and again on a saturated cluster, and building a list of reasons
        per node took three quarters of each failed cycle."""
        histogram: Counter[str] = Counter()
        for plugin, dropped in self.steps:
            rows = np.flatnonzero(dropped).astype(np.int64)
            count_reasons = getattr(plugin, "reason_counts", None)
            if count_reasons is not None:
                histogram.update(count_reasons(self.ctx, rows))
                continue
            # Plugins share one list among rows with the same reasons: count the lists, then their reasons.
            lists = plugin.reasons(self.ctx, rows)
            by_identity = dict(zip(map(id, lists), lists, strict=True))
            for identity, count in Counter(map(id, lists)).items():
                for reason in by_identity[identity]:
                    histogram[reason] += count
        return histogram


def fit_error(total_nodes: int, histogram: Counter[str]) -> tuple[tuple[str, ...], str]:
    """kube-scheduler's FitError from how many nodes gave each reason: ("2 Insufficient cpu", ...) sorted,
    and the one-line message."""
    counted = tuple(sorted(f"{count} {reason}" for reason, count in histogram.items() if count))
    message = f"0/{total_nodes} nodes are available" + (f": {', '.join(counted)}." if counted else ".")
    return counted, message


def uncounted_gpu(pod: PodRequest, profile: str) -> str | None:
    """Why a profile without GpuShareFit refuses the pod, or None: its `gpu` request (cards, or a share of
    one) is more than the whole ``nvidia.com/gpu`` it requests, which is all such a profile counts, as
    kube-scheduler counts it."""
    gpu = pod.gpu
    if gpu is None or pod.effective_requests.get(GPU_RESOURCE, 0) >= gpu.count:
        return None
    asked = f"a share of a GPU card ({gpu.milli} milli)" if gpu.is_share else f"{gpu.count} GPU card(s)"
    return (
        f"profile {profile} does not place GPU cards (it has no {GPU_SHARE_FIT} filter): the pod asks for "
        f"{asked} and requests {pod.effective_requests.get(GPU_RESOURCE, 0)} {GPU_RESOURCE}; use a profile "
        f"with {GPU_SHARE_FIT}, such as gpu-share, or request whole {GPU_RESOURCE}"
    )


def _checks_cards(profile: Profile) -> bool:
    return any(plugin.name == GPU_SHARE_FIT for plugin in profile.filter)


def _skipping(profile: Profile) -> _Skipping:
    # Both parts of the contract: an answer is shared only by pods alike in the fields it names.
    plugins = [p for p in profile.plugins.values() if hasattr(p, "skips") and hasattr(p, "skip_fields")]
    fields = sorted({name for plugin in plugins for name in plugin.skip_fields})
    read = attrgetter(*fields) if fields else None

    def shape(pod: PodRequest) -> tuple[bool, ...]:
        # Emptiness only, in C (no Python frame per field): pods alike in it share their stages.
        if read is None:
            return ()
        values = read(pod)
        return tuple(map(not_, values)) if len(fields) > 1 else (not values,)

    keyed = [plugin for plugin in plugins if hasattr(plugin, "skip_key")]
    return _Skipping(profile, plugins, keyed, shape)


def _stages(ctx: CycleContext, profile: Profile, plugins: list[Any]) -> _Stages:
    skips = {plugin.name: plugin.skips(ctx) for plugin in plugins}
    none: frozenset[str] = frozenset()
    scorers = [(p, w) for p, w in profile.score if "score" not in skips.get(p.name, none)]
    return _Stages(
        [p for p in profile.pre_filter if "preFilter" not in skips.get(p.name, none)],
        [p for p in profile.filter if "filter" not in skips.get(p.name, none)],
        scorers,
        dict.fromkeys((p.name for p, _ in profile.score), 0),
        all(hasattr(p, "score_rows") for p, _ in scorers),
        sorted(((i, w) for i, (_, w) in enumerate(scorers)), key=lambda pair: pair[1] == 1),
    )


def _weighted_total(scorers: list[tuple[Any, int]], per_plugin: dict[str, IntArray], count: int) -> IntArray:
    """The weighted sum of the plugins' scores over the cycle's nodes."""
    total: IntArray | None = None
    for scorer, weight in scorers:
        scores = per_plugin[scorer.name]
        if skipped(scores):  # plugins with nothing to say (PreScore's Skip) score all 0
            continue
        if total is None:
            total = np.multiply(scores, weight, dtype=np.int64)  # a fresh array: `scores` stay as given
        elif weight == 1:
            total += scores
        else:
            weighted = np.multiply(scores, weight)
            total += weighted
    return total if total is not None else np.zeros(count, dtype=np.int64)


class Scheduler:
    """Placement for one snapshot (one cluster shard). Not thread-safe: one writer, as the sequencer
    guarantees in the pipeline."""

    def __init__(
        self,
        profiles: ProfileSet | None = None,
        snapshot: Snapshot | None = None,
        *,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 10.0,
    ) -> None:
        self.profiles = profiles or ProfileSet.builtin()
        self.snapshot = snapshot or Snapshot()
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self._queue: dict[str, _Queued] = {}
        self._active: list[tuple[tuple[Any, ...], int, str]] = []
        self._unschedulable: dict[str, _Queued] = {}
        # Unschedulable pods wait in two places, so that an event or a flush costs what it releases, not a
        # scan of every unschedulable pod (thousands of them on a saturated cluster, on every event):
        # a heap by the end of their backoff, then, if the cluster has not changed since they failed,
        # `_parked` until it does (or until UNSCHEDULABLE_FLUSH_S, a second heap).
        self._changes = 0
        self._backoffs: list[tuple[float, int, str]] = []
        self._parked: dict[str, _Queued] = {}
        self._parked_changes = 0
        self._flushes: list[tuple[float, int, str]] = []
        self._nudged: list[str] = []
        self._waiting: dict[str, _Wait] = {}
        self._arrivals = 0
        self._outbox: list[Outcome] = []
        self._now = 0.0
        self._listeners: dict[str, list[Any]] = {}
        self._listeners_version = -1
        self._batches: dict[tuple[str, str], _Batch] = {}
        self._gated: dict[str, PodRequest] = {}
        """Pods PreEnqueue holds back (scheduling gates), by uid: the latest version of each."""
        self._skipping: dict[int, _Skipping] = {}
        """Per profile (by identity): its plugins' Skip answers."""
        self._row_sum: Int32Array = np.zeros(0, dtype=np.int32)
        self._row_scratch: Int32Array = np.zeros(0, dtype=np.int32)
        self._row_failed: BoolArray = np.zeros(0, dtype=np.bool_)
        """Whole-row totals, reused from cycle to cycle (`_score_rows`)."""
        self._cards: dict[int, tuple[Profile, bool]] = {}

    # ------------------------------------------------------------------------------ cluster events

    def upsert_node(self, spec: NodeSpec) -> None:
        self.snapshot.upsert_node(spec)
        self._cluster_changed()

    def remove_node(self, name: str, now: float) -> list[Outcome]:
        for uid in self.snapshot.remove_node(name):
            # The pod lost its node. Whether it is placed again is its owner's call (`requeue`): a shard
            # requeues single pods, the two-level placer replaces replicas under new uids.
            self._waiting.pop(uid, None)
            self._notify("on_pod_deleted", uid)
        self._cluster_changed()
        return self._drain()

    def set_unschedulable(self, name: str, value: bool) -> None:
        self.snapshot.set_unschedulable(name, value)
        self._cluster_changed()

    def add_pod(self, pod: PodRequest, now: float) -> list[Outcome]:
        """Queue a pod. A uid already queued, waiting or placed is ignored (requests are idempotent); a
        gated one (PreEnqueue) is replaced by the new version, which is queued once nothing holds it."""
        self._now = now
        if pod.uid in self._queue or pod.uid in self.snapshot.pods:
            return []
        profile = self.profiles.get(pod.scheduler_name)
        if profile is None:
            self._gated.pop(pod.uid, None)
            reason = self.unknown_profile(pod.scheduler_name)
            return [Unschedulable(pod.uid, (reason,), pod.scheduler_name, 0, reason)]
        if self._held(pod, profile) is not None:
            self._gated[pod.uid] = pod
            return []
        self._gated.pop(pod.uid, None)
        queued = _Queued(pod, self._arrivals)
        self._arrivals += 1
        self._queue[pod.uid] = queued
        self._notify("on_pod_added", pod, queued.arrival)
        self._push(queued, profile)
        if pod.pod_group is not None:
            # Like coscheduling's EventsToRegister: a new member may complete its group, so the members
            # that PreFilter turned away for being too few get another try (after their backoff).
            name = pod.pod_group.name
            for waiting in self._unschedulable.values():
                if waiting.pod.pod_group is not None and waiting.pod.pod_group.name == name:
                    waiting.moved = True
                    self._nudged.append(waiting.pod.uid)
        return []

    def _held(self, pod: PodRequest, profile: Profile) -> Status | None:
        """The first PreEnqueue plugin's refusal to let the pod into the queue, if any."""
        for plugin in profile.pre_enqueue:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status
        return None

    def delete_pod(self, uid: str, now: float) -> list[Outcome]:
        """The pod is gone: release whatever it held and drop it from the queue."""
        self._now = now
        self._gated.pop(uid, None)
        self._drop_pending(uid, reason="deleted")
        if self.snapshot.forget(uid) is not None:
            self._cluster_changed()
        self._notify("on_pod_deleted", uid)
        return self._drain()

    def confirm(self, uid: str) -> None:
        """The applier committed the binding."""
        self.snapshot.bind(uid)

    def adopt(self, pod: PodRequest, row: int, now: float, attempt: int = 0) -> list[Outcome]:
        """The applier holds the pod on `row`, committed from an earlier binding of it (a duplicate
        delivered after a crash can be answered after a later attempt was made). Placement follows it,
        bound, dropping whatever it assumed or queued for the pod since: otherwise that node would look
        roomier here than it is, and every pod sent there would come back as a conflict. `attempt` is the
        latest binding number sent for the pod (the one the applier held is no later)."""
        self._now = now
        self._drop_pending(pod.uid, reason="bound on another node")
        self.snapshot.forget(pod.uid)
        self.snapshot.assume(self.snapshot.pod_info(pod), row, bound=True, at=now, attempt=attempt)
        self._cluster_changed()
        return self._drain()

    def _drop_pending(self, uid: str, *, reason: str) -> None:
        """Take the pod out of the queue, backoff and Permit (releasing what it reserved while it waited)."""
        self._queue.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._parked.pop(uid, None)
        wait = self._waiting.pop(uid, None)
        if wait is not None:
            self._unreserve(wait.queued, wait.profile, wait.row, reason=reason)

    def requeue(
        self, pod: PodRequest, now: float, attempt: int, *, after_backoff: bool = False
    ) -> list[Outcome]:
        """Queue the pod again as binding number `attempt` + 1, forgetting where it was assumed: the
        applier refused binding `attempt` (a conflict), or the pod lost its node. With `after_backoff`, it
        waits out its backoff first, and is then tried whether or not the cluster changed."""
        self._now = now
        if self.snapshot.forget(pod.uid) is not None:
            self._cluster_changed()
        self.add_pod(pod, now)
        queued = self._queue.get(pod.uid)
        if queued is not None:
            # Saturated: a result may carry the largest attempt a record can (a hostile one), and the
            # binding this one becomes must still be a valid record.
            queued.attempt = min(attempt + 1, MAX_TALLY)
            if after_backoff:
                self._back_off(queued, moved=True)
        return self._drain()

    # ---------------------------------------------------------------------------------- running

    def schedule(self, now: float, limit: int | None = None) -> list[Outcome]:
        """Run cycles for queued pods (highest in queue order first) until the active queue is empty."""
        self._now = now
        self._expire_waits(now)
        self._flush_unschedulable(now)
        done = 0
        while self._active and (limit is None or done < limit):
            _, _, uid = heapq.heappop(self._active)
            queued = self._queue.get(uid)
            if queued is None or uid in self._unschedulable or uid in self._waiting:
                continue  # deleted, or a stale heap entry
            profile = self.profiles.get(queued.pod.scheduler_name)
            if profile is None:
                continue
            if profile.batch is not None:
                key = (profile.name, queued.pod.batch_id or "")
                self._batches.setdefault(key, _Batch()).pods.append((queued, now))
                done += 1
                continue
            self._attach(profile)
            self._cycle(queued, profile, now, explain=False)
            done += 1
        if self._batches:
            self._run_batches(now)
        return self._drain()

    def tick(self, now: float) -> list[Outcome]:
        """Advance time: Permit timeouts, and retries of unschedulable pods whose backoff has passed."""
        self._now = now
        self._expire_waits(now)
        self._flush_unschedulable(now)
        if self._batches:
            self._run_batches(now)
        return self._drain()

    def unknown_profile(self, name: str) -> str:
        """The reason a pod naming a profile this scheduler lacks is unschedulable."""
        return f"no profile named {name!r} (known: {', '.join(self.profiles.names())})"

    def explain(self, pod: PodRequest, now: float = 0.0, *, profile_name: str | None = None) -> Explanation:
        """One dry cycle (nothing is reserved) with every filter's reasons and every plugin's scores.

        `profile_name` overrides the pod's `scheduler_name` and must be known (KeyError). A pod naming an
        unknown profile is explained as `add_pod` answers it: unschedulable, no node tried, never another
        profile's decision."""
        if profile_name is not None and self.profiles.get(profile_name) is None:
            raise KeyError(profile_name)
        profile = self.profiles.get(profile_name or pod.scheduler_name)
        if profile is None:
            message = self.unknown_profile(pod.scheduler_name)
            return Explanation(pod.uid, None, [], {}, {}, {}, message=message)
        held = self._held(pod, profile)
        if held is not None:
            # Placement would not try it: say so rather than pick a node it would not get.
            return Explanation(pod.uid, None, [], {}, {}, {}, message=held.reasons[0], profile=profile.name)
        self._attach(profile)
        explanation = self._cycle(_Queued(pod, -1), profile, now, explain=True)
        assert explanation is not None
        explanation.profile = profile.name
        return explanation

    @property
    def pending(self) -> int:
        """Pods queued, waiting or gated (not placed, not dropped)."""
        return len(self._queue) + len(self._gated)

    def gated(self) -> dict[str, PodRequest]:
        """The pods held out of the queue by PreEnqueue (scheduling gates), by uid; read, never write."""
        return self._gated

    # ------------------------------------------------------------------------------- the cycle

    def _cycle(self, queued: _Queued, profile: Profile, now: float, *, explain: bool) -> Explanation | None:
        snapshot, pod = self.snapshot, queued.pod
        queued.info = info = snapshot.pod_info(pod, queued.info)
        ctx = CycleContext(pod, info, snapshot, now)

        # Skip: only the stages with something to do for this pod, as its plugins answered for pods of its
        # shape. `explain` runs every plugin, for every plugin's verdict.
        if explain:
            stages = None
            pre_filters, filters, scorers = profile.pre_filter, profile.filter, profile.score
        else:
            stages = self._stages_for(ctx, profile)
            pre_filters, filters, scorers = stages.pre_filter, stages.filter, stages.score

        # A GPU request in cards that the profile does not check would be placed as if it asked for none.
        if pod.gpu is not None and not self._checks_cards(profile):
            refusal = uncounted_gpu(pod, profile.name)
            if refusal is not None:
                return self._fail(queued, profile, (refusal,), refusal, explain)

        # PreFilter: whole-pod checks that need no node (a gang still missing members).
        for pre_filter in pre_filters:
            status = pre_filter.pre_filter(ctx)
            if not status.ok:
                reasons = status.reasons or (f"rejected by {pre_filter.name}",)
                return self._fail(
                    queued, profile, reasons, "; ".join(reasons), explain, retry_at=status.retry_at
                )

        # Filter: every plugin answers for all rows at once (a slice: numpy reads views, gathers nothing);
        # a row is charged to the first plugin that rejects it, as kube-scheduler stops at the first.
        total_nodes = snapshot.size
        # The answers are only read from here on, within this cycle: a rejection keeps references to them.
        answers: list[tuple[Any, BoolArray, BoolArray | None]] = []
        every_row = slice(0, snapshot.rows)
        passing: BoolArray | None = None if total_nodes == snapshot.rows else snapshot.live[every_row]
        for node_filter in filters:
            keep = node_filter.filter(ctx, every_row)
            if keep is None:
                continue
            answers.append((node_filter, keep, passing))
            passing = keep if passing is None else passing & keep
        count = snapshot.size if passing is None else int(np.count_nonzero(passing))
        # Most rows passing and every scorer able to: Score and Select over whole rows, gathering nothing.
        if (
            stages is not None
            and stages.by_rows
            and 2 * count > snapshot.rows
            and not profile.pre_score
            and self._score_rows(queued, profile, stages, ctx, passing)
        ):
            return None
        nodes = snapshot.live_rows() if passing is None else passing.nonzero()[0]

        # PostFilter: nothing fits; preemption may free a node by evicting lower-priority pods.
        if count == 0:
            rejection = _Rejection(ctx, answers)
            counted, message = fit_error(total_nodes, rejection.counts())
            if not explain and profile.post_filter:
                rejected_by = rejection.by_row()
                for post in profile.post_filter:
                    result = post.post_filter(ctx, rejected_by)
                    if result.node is not None and result.victims:
                        node_name = snapshot.names[result.node] or ""
                        for victim in result.victims:
                            snapshot.forget(victim)
                            self._outbox.append(Evicted(victim, node_name, pod.uid))
                        # The preemptor goes straight back to the queue; the freed node fits it now.
                        self._push(queued, profile)
                        return None
                    if result.status.code == Code.UNSCHEDULABLE and result.status.reasons:
                        message += " " + " ".join(result.status.reasons)
            return self._fail(queued, profile, counted or (message,), message, explain, rejection)

        # PreScore, Score, NormalizeScore (inside each plugin), weight and sum.
        for pre_score in profile.pre_score:
            pre_score.pre_score(ctx, nodes)
        per_plugin = {scorer.name: scorer.score(ctx, nodes) for scorer, _ in scorers}
        total = _weighted_total(scorers, per_plugin, len(nodes))

        # Select: the highest total, ties broken by name or by a choice seeded with the pod's uid.
        position = select(snapshot, nodes, total, pod.uid, profile.tie_break)
        best = total.item(position)
        row = int(nodes[position])
        if stages is None:
            plugin_scores = {name: scores.item(position) for name, scores in per_plugin.items()}
        else:
            plugin_scores = stages.zeros.copy()
            for name, scores in per_plugin.items():
                plugin_scores[name] = scores.item(position)
        if explain:
            return self._explanation(pod, nodes, _Rejection(ctx, answers), per_plugin, total, row)

        self._reserve_and_permit(queued, profile, ctx, row, int(best), plugin_scores)
        return None

    def _score_rows(
        self, queued: _Queued, profile: Profile, stages: _Stages, ctx: CycleContext, passing: BoolArray | None
    ) -> bool:
        """Score and Select over whole rows (every scorer a `RowScorePlugin`, most rows passing): the
        weighted sum of every row's scores, the rows that failed a filter set below any score, and the same
        Select over rows as over the candidates. False, having placed nothing, when a scorer asks to be
        scored by candidates after all."""
        snapshot, rows = ctx.snapshot, ctx.snapshot.rows
        per_row: list[RowScores] = []
        for scorer, _ in stages.score:
            scores = scorer.score_rows(ctx, passing)
            if scores is None:
                return False
            per_row.append(scores)
        total, scratch, failed = self._row_buffers(rows)
        summed = False
        for index, weight in stages.row_order:
            scores = per_row[index]
            if skipped(scores):
                continue
            if not summed:
                np.multiply(scores, weight, out=total, casting="same_kind")
                summed = True
            elif weight == 1:
                total += scores
            else:
                total += np.multiply(scores, weight, out=scratch, casting="same_kind")
        if not summed:
            total[:] = 0
        if passing is not None:
            # Every score is ≥ 0: a row that failed a filter never wins.
            np.putmask(total, np.logical_not(passing, out=failed), -1)
        row = select(snapshot, None, total, queued.pod.uid, profile.tie_break)
        plugin_scores = stages.zeros.copy()
        for (scorer, _), scores in zip(stages.score, per_row, strict=True):
            plugin_scores[scorer.name] = scores.item(row)
        self._reserve_and_permit(queued, profile, ctx, row, total.item(row), plugin_scores)
        return True

    def _row_buffers(self, rows: int) -> tuple[Int32Array, Int32Array, BoolArray]:
        """The total, a weighted score and the failed rows, over `rows`, reused from cycle to cycle. int32,
        as the scores: numpy's mixed-type arithmetic costs twice its same-type arithmetic, and a total is
        at most 100 × the weights' sum."""
        if len(self._row_sum) < rows:
            self._row_sum = np.zeros(2 * rows, dtype=np.int32)
            self._row_scratch = np.zeros(2 * rows, dtype=np.int32)
            self._row_failed = np.zeros(2 * rows, dtype=np.bool_)
        return self._row_sum[:rows], self._row_scratch[:rows], self._row_failed[:rows]

    def _reserve_and_permit(
        self,
        queued: _Queued,
        profile: Profile,
        ctx: CycleContext,
        row: int,
        score: int,
        plugin_scores: dict[str, int],
        batch_id: str | None = None,
    ) -> None:
        """Reserve: assume the pod on the node at once, so the next cycle sees it (the assume cache); then
        Permit, where a gang member waits until its group is complete. A pod a batch placed is placed with
        the batch's id unless it names its own."""
        snapshot, pod, now = self.snapshot, queued.pod, ctx.now
        cards = None if pod.gpu is None else planned_cards(ctx.state, row, snapshot.gpu_free[row], pod.gpu)
        snapshot.assume(ctx.info, row, at=now, attempt=queued.attempt, gpu_cards=cards)
        for reserve in profile.reserve:
            status = reserve.reserve(ctx, row)
            if not status.ok:
                self._unreserve(queued, profile, row, reason="reserve failed")
                self._fail(queued, profile, status.reasons, "; ".join(status.reasons), False)
                return
        timeout: float | None = None
        for permit in profile.permit:
            status, wait_s = permit.permit(ctx, row)
            if status.code == Code.WAIT:
                timeout = wait_s if timeout is None else min(timeout, wait_s)
            elif not status.ok:
                self._unreserve(queued, profile, row, reason="; ".join(status.reasons))
                self._fail(queued, profile, status.reasons, "; ".join(status.reasons), False)
                return
        if timeout is not None:
            deadline = now + timeout
            self._waiting[pod.uid] = _Wait(queued, profile, row, deadline, score, plugin_scores)
            self._outbox.append(Waiting(pod.uid, snapshot.names[row] or "", deadline))
        else:
            self._place(queued, profile, row, score, plugin_scores, batch_id)
        for uid in ctx.state.get("permit.allow", ()):
            self.allow_waiting(uid)

    # -------------------------------------------------------------------------------- batches

    def _run_batches(self, now: float) -> None:
        """Place every collected batch that is full (`batch_size` pods) or whose first pod has waited
        `batch_wait`; the rest keep waiting."""
        for key in sorted(self._batches):
            batch = self._batches[key]
            profile = self.profiles.get(key[0])
            live = [(q, at) for q, at in batch.pods if self._queue.get(q.pod.uid) is q]
            if profile is None:
                live = []  # as in `schedule`: pods whose profile went away are not scheduled
            elif profile.batch is None:  # replaced by a one-by-one profile at run time
                self._attach(profile)
                for queued, _ in live:
                    self._cycle(queued, profile, now, explain=False)
                live = []
            else:
                config = profile.batch
                while len(live) >= config.batch_size:
                    self._run_batch([q for q, _ in live[: config.batch_size]], profile, now)
                    live = live[config.batch_size :]
                if live and now - live[0][1] >= config.batch_wait:
                    self._run_batch([q for q, _ in live], profile, now)
                    live = []
            if live:
                batch.pods = live
            else:
                del self._batches[key]

    def _run_batch(self, members: list[_Queued], profile: Profile, now: float) -> None:
        """One batch: each pod's PreFilter and Filter choose its candidate nodes, the profile's
        optimiser assigns them all at once, each assigned pod goes through Reserve and Permit as in a cycle,
        and pods with no candidate, or that the optimiser left unassigned, run a one-by-one cycle after."""
        assert profile.batch is not None
        self._attach(profile)
        snapshot = self.snapshot
        batch: list[tuple[_Queued, CycleContext]] = []
        masks: list[BoolArray] = []
        single: list[_Queued] = []
        checks_cards = self._checks_cards(profile)
        for queued in members:
            if not checks_cards and uncounted_gpu(queued.pod, profile.name) is not None:
                single.append(queued)  # its cycle refuses it, as for a profile placing one pod at a time
                continue
            queued.info = info = snapshot.pod_info(queued.pod, queued.info)
            ctx = CycleContext(queued.pod, info, snapshot, now)
            passing = candidate_mask(profile, ctx)
            if passing is not None and passing.any():
                batch.append((queued, ctx))
                masks.append(passing)
            else:
                single.append(queued)
        if batch:
            plan = plan_batch(snapshot, [ctx for _, ctx in batch], np.array(masks), profile.batch, profile)
            batch_id = f"{profile.name}-{zlib.crc32(' '.join(q.pod.uid for q, _ in batch).encode()):08x}"
            name = profile.batch.algorithm.upper()
            for (queued, ctx), row, score in zip(
                batch, plan.rows.tolist(), plan.scores.tolist(), strict=True
            ):
                if row < 0:
                    single.append(queued)
                else:
                    self._reserve_and_permit(queued, profile, ctx, row, score, {name: score}, batch_id)
        for queued in sorted(single, key=lambda q: q.arrival):
            self._cycle(queued, profile, now, explain=False)

    # ---------------------------------------------------------------------------- bookkeeping

    def _explanation(
        self,
        pod: PodRequest,
        nodes: IntArray,
        rejection: _Rejection | None,
        per_plugin: dict[str, IntArray],
        total: IntArray,
        row: int | None,
    ) -> Explanation:
        names = self.snapshot.names
        reasons = rejection.reasons() if rejection is not None else {}
        return Explanation(
            pod=pod.uid,
            selected=names[row] if row is not None else None,
            feasible=[names[r] or "" for r in nodes.tolist()],
            filtered={
                names[r] or "": found for r, found in sorted(reasons.items(), key=lambda x: names[x[0]] or "")
            },
            scores={
                plugin: {names[r] or "": int(s) for r, s in zip(nodes.tolist(), scores.tolist(), strict=True)}
                for plugin, scores in per_plugin.items()
            },
            total={names[r] or "": int(t) for r, t in zip(nodes.tolist(), total.tolist(), strict=True)},
        )

    def _place(
        self,
        queued: _Queued,
        profile: Profile,
        row: int,
        score: int,
        plugin_scores: dict[str, int],
        batch_id: str | None = None,
    ) -> None:
        pod, snapshot = queued.pod, self.snapshot
        spec = snapshot.specs[row]
        record = snapshot.pods.get(pod.uid)
        self._queue.pop(pod.uid, None)
        self._outbox.append(
            Placed(
                uid=pod.uid,
                node=snapshot.names[row] or "",
                cluster=spec.cluster if spec is not None else "default",
                profile=profile.name,
                score=score,
                plugin_scores=plugin_scores,
                node_version=int(snapshot.version[row]),
                attempt=queued.attempt,
                batch_id=pod.batch_id if pod.batch_id is not None else batch_id,
                # Only a profile that checks cards (GpuShareFit) promises them: the ledger and the device
                # plugin hold a binding to its cards. Others see GPUs as whole nvidia.com/gpu units, as
                # kube-scheduler does, and their bindings name no card.
                gpu_cards=record.gpu_cards if record is not None and self._checks_cards(profile) else (),
            )
        )

    def _fail(
        self,
        queued: _Queued,
        profile: Profile,
        reasons: tuple[str, ...],
        message: str,
        explain: bool,
        rejection: _Rejection | None = None,
        *,
        retry_at: float | None = None,
    ) -> Explanation | None:
        if explain:
            empty = np.zeros(0, dtype=np.int64)
            explanation = self._explanation(queued.pod, empty, rejection, {}, empty, None)
            explanation.message = message
            return explanation
        self._outbox.append(
            Unschedulable(queued.pod.uid, tuple(reasons), profile.name, queued.attempt, message)
        )
        # Back off exponentially, and retry when the cluster changes (or after the flush interval).
        queued.attempt = min(queued.attempt + 1, MAX_TALLY)
        self._back_off(queued, moved=False, retry_at=retry_at)
        return None

    def _back_off(self, queued: _Queued, *, moved: bool, retry_at: float | None = None) -> None:
        """Park the pod, whose attempt just failed, until its backoff (exponential in the attempts made) is
        over; then it is tried again if `moved`, or once the cluster changed since now."""
        backoff = min(self.backoff_max_s, self.backoff_initial_s * 2 ** min(queued.attempt - 1, 16))
        queued.backoff_until = self._now + backoff
        queued.unschedulable_since = self._now
        queued.moved = moved
        if retry_at is not None:
            # Time alone lifts this rejection: retry then, whether or not the cluster changes.
            queued.backoff_until = max(queued.backoff_until, retry_at)
            queued.moved = True
        queued.failed_change = self._changes
        self._unschedulable[queued.pod.uid] = queued
        heapq.heappush(self._backoffs, (queued.backoff_until, queued.arrival, queued.pod.uid))

    def _unreserve(self, queued: _Queued, profile: Profile, row: int, *, reason: str) -> None:
        ctx = CycleContext(
            queued.pod, queued.info or self.snapshot.pod_info(queued.pod), self.snapshot, self._now
        )
        ctx.state["unreserve.reason"] = reason
        self.snapshot.forget(queued.pod.uid)
        for plugin in reversed(profile.reserve):
            plugin.unreserve(ctx, row)

    def _push(self, queued: _Queued, profile: Profile) -> None:
        key = profile.queue_sort.sort_key(queued.pod, queued.arrival)
        heapq.heappush(self._active, (key, queued.arrival, queued.pod.uid))

    def _cluster_changed(self) -> None:
        self._changes += 1

    def _flush_unschedulable(self, now: float) -> None:
        """Queue again every unschedulable pod whose backoff has ended and that the cluster changed for
        since it failed (or that `moved` marks, or that waited UNSCHEDULABLE_FLUSH_S), oldest first."""
        ready: dict[str, _Queued] = {}
        if self._changes != self._parked_changes:
            ready.update(self._parked)  # each was parked before this change
            self._parked.clear()
        self._parked_changes = self._changes
        for uid in self._nudged:
            queued = self._parked.pop(uid, None)
            if queued is not None:
                ready[uid] = queued
        self._nudged.clear()
        while self._flushes and self._flushes[0][0] <= now:
            _, _, uid = heapq.heappop(self._flushes)
            queued = self._parked.get(uid)
            if queued is not None and now - queued.unschedulable_since >= UNSCHEDULABLE_FLUSH_S:
                ready[uid] = self._parked.pop(uid)
        while self._backoffs and self._backoffs[0][0] <= now:
            _, _, uid = heapq.heappop(self._backoffs)
            queued = self._unschedulable.get(uid)
            if queued is None or uid in ready or uid in self._parked or queued.backoff_until > now:
                continue  # deleted, already handled, or an older entry of a pod that failed again
            if (
                queued.moved
                or self._changes != queued.failed_change
                or now - queued.unschedulable_since >= UNSCHEDULABLE_FLUSH_S
            ):
                ready[uid] = queued
            else:
                self._parked[uid] = queued
                heapq.heappush(
                    self._flushes, (queued.unschedulable_since + UNSCHEDULABLE_FLUSH_S, queued.arrival, uid)
                )
        for queued in sorted(ready.values(), key=lambda q: q.arrival):
            if self._unschedulable.get(queued.pod.uid) is not queued:
                continue
            del self._unschedulable[queued.pod.uid]
            profile = self.profiles.get(queued.pod.scheduler_name)
            if profile is not None:
                self._push(queued, profile)

    def _expire_waits(self, now: float) -> None:
        for uid, wait in sorted(self._waiting.items(), key=lambda item: item[1].deadline):
            if wait.deadline <= now and uid in self._waiting:
                self.reject_waiting(uid, "timed out waiting in Permit")

    def _notify(self, hook: str, *args: Any) -> None:
        """Queue events (pod added, deleted) go to every plugin of every profile that listens for them."""
        version = self.profiles.version
        if self._listeners_version != version:
            self._listeners = {}
            self._listeners_version = version
        listeners = self._listeners.get(hook)
        if listeners is None:
            listeners = []
            for name in self.profiles.names():
                profile = self.profiles.get(name)
                for plugin in profile.plugins.values() if profile is not None else ():
                    method = getattr(plugin, hook, None)
                    if method is not None and all(m.__self__ is not plugin for m in listeners):
                        listeners.append(method)
            self._listeners[hook] = listeners
        for method in listeners:
            method(*args)

    def _stages_for(self, ctx: CycleContext, profile: Profile) -> _Stages:
        """The stages the pod's cycle calls: kept per profile and pod shape while the snapshot and every
        `skip_key` stay the same (they change with the cluster state the answers read)."""
        skipping = self._skipping.get(id(profile))
        if skipping is None or skipping.profile is not profile:
            skipping = self._skipping[id(profile)] = _skipping(profile)
        snapshot = ctx.snapshot
        keys = [plugin.skip_key(snapshot) for plugin in skipping.keyed]  # before `skips` reads the state
        if skipping.snapshot is not snapshot or skipping.keys != keys:
            skipping.snapshot, skipping.keys, skipping.stages = snapshot, keys, {}
        shape = skipping.shape(ctx.pod)
        stages = skipping.stages.get(shape)
        if stages is None:
            stages = skipping.stages[shape] = _stages(ctx, profile, skipping.plugins)
        return stages

    def _checks_cards(self, profile: Profile) -> bool:
        """`_checks_cards`, kept per profile: every placement asks."""
        checks = self._cards.get(id(profile))
        if checks is None or checks[0] is not profile:
            checks = self._cards[id(profile)] = (profile, _checks_cards(profile))
        return checks[1]

    def _attach(self, profile: Profile) -> None:
        profile.handle.waiting = self

    def _drain(self) -> list[Outcome]:
        outcomes, self._outbox = self._outbox, []
        return outcomes

    # -------------------------------------------------------------- WaitingPods (for Permit plugins)

    def waiting_uids(self) -> list[str]:
        return list(self._waiting)

    def waiting_pod(self, uid: str) -> PodRequest | None:
        wait = self._waiting.get(uid)
        return wait.queued.pod if wait is not None else None

    def allow_waiting(self, uid: str) -> None:
        wait = self._waiting.pop(uid, None)
        if wait is not None:
            self._place(wait.queued, wait.profile, wait.row, wait.score, wait.plugin_scores)

    def reject_waiting(self, uid: str, reason: str) -> None:
        wait = self._waiting.pop(uid, None)
        if wait is None:
            return
        self._unreserve(wait.queued, wait.profile, wait.row, reason=reason)
        self._fail(wait.queued, wait.profile, (reason,), reason, False)
