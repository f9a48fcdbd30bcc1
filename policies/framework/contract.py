"""The extension points of a kube-scheduler-style cycle, as small protocols over a columnar snapshot.

Filter and Score plugins see *all* candidate nodes at once: ``nodes`` is an int array of snapshot rows,
and they answer with one numpy array (a boolean mask, or int scores 0..100) for those rows. Reasons are
computed only when someone asks (`explain`, the unschedulable message), never on the hot path.

Before a pod enters the queue, PreEnqueue plugins may hold it back (scheduling gates). A cycle, in order
(`policies.scheduler` runs it): QueueSort → PreFilter → Filter → PostFilter (only when no node passes) →
PreScore → Score → NormalizeScore → weight and sum → select (seeded tie-break, or the lowest name) →
Reserve → Permit → (Bind, by the applier).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from policies.framework.status import Status

if TYPE_CHECKING:
    from policies.snapshot import PodInfo, Snapshot
    from schemas.pod import PodRequest

__all__ = [
    "EXTENSION_POINTS",
    "MAX_NODE_SCORE",
    "BoolArray",
    "CheckpointedPlugin",
    "CycleContext",
    "FilterPlugin",
    "Int32Array",
    "IntArray",
    "Nodes",
    "PermitPlugin",
    "Plugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "QueueSortPlugin",
    "ReservePlugin",
    "RowScorePlugin",
    "RowScores",
    "ScorePlugin",
    "SkipPlugin",
    "no_scores",
    "node_count",
    "node_rows",
    "skipped",
]

MAX_NODE_SCORE = 100

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]
Int32Array = npt.NDArray[np.int32]
RowScores = Int32Array | IntArray
"""A `RowScorePlugin`'s scores: one per snapshot row."""
Nodes = IntArray | slice
"""Rows a filter looks at: a slice over every row (the scheduler's filter pass, where numpy reads views and
gathers nothing) or an index array (preemption's what-ifs). Scorers always get an index array."""


def node_count(nodes: Nodes) -> int:
    if isinstance(nodes, slice):
        start, stop, _ = nodes.indices(nodes.stop)
        return stop - start
    return len(nodes)


_NO_SCORES: list[IntArray] = [np.zeros(0, dtype=np.int64)]


def no_scores(count: int) -> IntArray:
    """The scores of a plugin that takes no part in a cycle (PreScore's Skip): `count` zeros, a read-only
    view of one shared array, so a skipping plugin allocates and dirties no memory per cycle."""
    shared = _NO_SCORES[0]
    if len(shared) < count:
        shared = np.zeros(max(count, 2 * len(shared)), dtype=np.int64)
        shared.flags.writeable = False
        _NO_SCORES[0] = shared
    return shared[:count]


def skipped(scores: npt.NDArray[Any]) -> bool:
    """Whether `scores` came from `no_scores`: the cycle adds nothing for such a plugin."""
    return scores.base is _NO_SCORES[0]


def node_rows(nodes: Nodes) -> IntArray:
    if isinstance(nodes, slice):
        start, stop, _ = nodes.indices(nodes.stop)
        return np.arange(start, stop, dtype=np.int64)
    return nodes


EXTENSION_POINTS = (
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
)


@dataclass(slots=True)
class CycleContext:
    """Everything one scheduling cycle of one pod shares. `state` is kube-scheduler's CycleState: plugins
    leave data there in PreFilter/PreScore for their own later stages."""

    pod: PodRequest
    info: PodInfo
    snapshot: Snapshot
    now: float
    state: dict[str, Any] = field(default_factory=dict)


class Plugin(Protocol):
    name: str


@runtime_checkable
class PreEnqueuePlugin(Protocol):
    name: str

    def pre_enqueue(self, pod: PodRequest) -> Status:
        """SUCCESS to let the pod into the queue; otherwise it waits, untried, until a new version of it
        (the same uid) comes and every PreEnqueue plugin lets that one in."""


@runtime_checkable
class QueueSortPlugin(Protocol):
    name: str

    def sort_key(self, pod: PodRequest, arrival: int) -> tuple[Any, ...]:
        """Smaller keys are scheduled first; `arrival` is the pod's sequence number in the queue."""


@runtime_checkable
class PreFilterPlugin(Protocol):
    name: str

    def pre_filter(self, ctx: CycleContext) -> Status: ...


@runtime_checkable
class FilterPlugin(Protocol):
    name: str

    def filter(self, ctx: CycleContext, nodes: Nodes) -> BoolArray | None:
        """True for the rows in `nodes` where the pod may run; None when every one of them passes (cheap for
        the many filters that have nothing to check for most pods). Rows that are not live nodes may be
        among them: the answer for those does not matter."""

    def reasons(self, ctx: CycleContext, nodes: IntArray) -> list[list[str]]:
        """Why each row in `nodes` (all of which failed `filter`) was rejected. A plugin may also define
        ``reason_counts(ctx, nodes) -> Counter[str]``, how many rows give each reason: the fit error needs
        only that, and an unschedulable pod's retries pay for it (NodeResourcesFit does)."""


@dataclass(slots=True)
class PostFilterResult:
    status: Status
    node: int | None = None
    victims: list[str] = field(default_factory=list)


@runtime_checkable
class PostFilterPlugin(Protocol):
    name: str

    def post_filter(self, ctx: CycleContext, rejected: Mapping[int, str]) -> PostFilterResult:
        """Called when no node passed; `rejected` maps each row to the filter plugin that rejected it."""


@runtime_checkable
class PreScorePlugin(Protocol):
    name: str

    def pre_score(self, ctx: CycleContext, nodes: IntArray) -> Status: ...


@runtime_checkable
class ScorePlugin(Protocol):
    name: str

    def score(self, ctx: CycleContext, nodes: IntArray) -> IntArray:
        """Final scores 0..100 for `nodes`. A plugin with a NormalizeScore stage applies it here: it has
        every candidate's raw score in the same array."""


@runtime_checkable
class RowScorePlugin(Protocol):
    """Optional, for a scorer that computes every row at once anyway (from tables kept per row): its scores
    for all rows, of which the cycle reads the passing ones. When most rows pass and every scorer of a
    pod's cycle has this, the cycle sums whole rows and gathers nothing: a gather of the candidates per
    plugin, and the conversions after it, cost as much as the arithmetic.

    The answer must equal `score` on the passing rows, normalisation included (over the passing rows).
    None means "ask `score`": the cycle then scores the candidates as usual. A plugin that takes no part
    (PreScore's Skip) answers `no_scores` for the rows. The array is read before the next call to the
    plugin, never kept, so a plugin may hand out an array it overwrites next cycle."""

    name: str

    def score_rows(self, ctx: CycleContext, passing: BoolArray | None) -> RowScores | None:
        """Scores 0..100 for rows 0..``ctx.snapshot.rows``; `passing` marks the rows that passed every
        filter (None: every row passed)."""


@runtime_checkable
class SkipPlugin(Protocol):
    """Optional, kube-scheduler's PreFilter/PreScore Skip: the stages of a plugin that have nothing to do
    for a pod, which the scheduler then does not call in the pod's cycles (`explain` still calls every
    plugin). A skipped stage must be one that would have answered so anyway: PreFilter SUCCESS or SKIP,
    Filter None, Score `no_scores`.

    The answer is kept and shared by every pod alike in what it may read: which of the pod's fields named
    in ``skip_fields`` are empty (falsy), the plugin's args, and, if the plugin defines
    ``skip_key(snapshot) -> object``, that key (a count of the cluster state the answer reads, such as the
    kinds of affinity terms existing pods carry). Deciding it costs a cycle a few attribute reads, where
    calling every stage of every plugin cost it a call each."""

    name: str
    skip_fields: tuple[str, ...]

    def skips(self, ctx: CycleContext) -> frozenset[str]:
        """The skipped stages, of "preFilter", "filter" and "score"."""


@runtime_checkable
class ReservePlugin(Protocol):
    name: str

    def reserve(self, ctx: CycleContext, node: int) -> Status: ...

    def unreserve(self, ctx: CycleContext, node: int) -> None: ...


@runtime_checkable
class PermitPlugin(Protocol):
    name: str

    def permit(self, ctx: CycleContext, node: int) -> tuple[Status, float]:
        """SUCCESS to bind now, WAIT with a timeout in seconds, or UNSCHEDULABLE to give the node back."""


@runtime_checkable
class CheckpointedPlugin(Protocol):
    """Optional, for a plugin that keeps state of its own across cycles (coscheduling's pod groups): what
    a shard checkpoint stores for it (`streams.core.checkpoint`, docs/checkpoints.md).

    A plugin's instance is built again from its profile's document when a checkpoint is restored, so a
    plugin needs this only for state its args and the snapshot do not give back: caches derived from the
    snapshot (`RowCursor` tables, per-pod memos) are rebuilt and must not be stored. A plugin with such
    state that does not implement this loses it on restore, and a restored shard may then decide otherwise
    than one that never stopped: the checkpoint tests (tests/streams/test_checkpoint.py) catch that when
    their workloads exercise the plugin.

    ``checkpoint_state`` returns JSON-able data (dicts, lists, strings, numbers; tuples, sets and numpy
    arrays are kept exactly too), called between envelopes, never mid-cycle. ``restore_state`` receives it
    back, on a fresh instance built from the same args, before any cycle runs. Change the shape of the
    state only together with the checkpoint format version (`streams.core.checkpoint.VERSION`).
    """

    name: str

    def checkpoint_state(self) -> Any: ...

    def restore_state(self, state: Any) -> None: ...
