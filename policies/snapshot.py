"""A columnar view of every node, updated in O(1) per pod event, read by every plugin at once.

Rows are nodes, columns are resources: ``allocatable[row, col]``, ``requested[row, col]`` (actual requests,
for the Fit filter and BalancedAllocation) and ``nonzero[row, 0..1]`` (cpu and memory with Kubernetes'
defaults for containers that request nothing, for LeastAllocated and friends). The resource arrays are
column-major, because plugins read one resource over many nodes and writes touch one row at a time.
Labels are one int column per label key (value ids, -1 when absent), taints bit words per row (bit i set
when the node has distinct taint i), host ports a count column per (protocol, port, ip): selectors,
tolerations and port conflicts become array comparisons.

Assume, forget, bind and delete touch one row; arrays grow by doubling, so adding nodes is amortised O(1).
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from policies.framework.contract import BoolArray, IntArray
from policies.gpu.cards import DEFAULT_RULE, choose_cards
from schemas.exceptions import InvalidInput
from schemas.node import NodeSpec
from schemas.pod import Container, PodRequest, Toleration, effective_resources

if TYPE_CHECKING:
    from policies.usage import NodeUsage

__all__ = [
    "BASE_RESOURCES",
    "CPU_MEMORY_ROWS",
    "DEFAULT_MAX_PODS",
    "DEFAULT_MEMORY_REQUEST",
    "DEFAULT_MILLI_CPU_REQUEST",
    "LabelCounter",
    "PodInfo",
    "PodRecord",
    "RowCursor",
    "Snapshot",
    "nonzero_requests",
]

DEFAULT_MILLI_CPU_REQUEST = 100
"""kube-scheduler's DefaultMilliCPURequest: what a container without a cpu request counts for scoring."""
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024
"""kube-scheduler's DefaultMemoryRequest (200 MiB)."""
DEFAULT_MAX_PODS = 110
"""A node that reports no ``pods`` allocatable gets the kubelet's default maxPods."""

BASE_RESOURCES = ("cpu", "memory", "ephemeral-storage")
CPU_MEMORY_ROWS = (
    "allocatable cpu",
    "allocatable memory",
    "non-zero cpu",
    "non-zero memory",
    "cpu",
    "memory",
)
"""The rows of `Snapshot.cpu_memory`."""
_INITIAL_ROWS = 64
_TAINT_WORD_BITS = 64
_JOURNAL = 1 << 15
"""Row changes of each kind the snapshot remembers: a reader further behind recomputes every row. A placement
makes one of each of `PODS` and `PLACED`, so this covers tens of thousands of placements."""

NODES = "nodes"
"""A kind of row change: the node itself (allocatable, capacity, labels, taints, cordon, oversell rate; added
or removed)."""
PODS = "pods"
"""A kind of row change: the pods accounted on it (requested, free, pod count, ports)."""
MEASURED = "measured"
"""A kind of row change: its measured load (`NodeUsage.refresh_row`: window, portrait, and all that depends
on them)."""
PLACED = "placed"
"""A kind of row change: a pod placed on it since it was measured (`NodeUsage.on_assume`)."""
CHANGES = (NODES, PODS, MEASURED, PLACED)


def _columns(rows: int, width: int) -> IntArray:
    return np.zeros((rows, width), dtype=np.int64, order="F")


def _add_column(array: IntArray) -> IntArray:
    grown = _columns(array.shape[0], array.shape[1] + 1)
    grown[:, : array.shape[1]] = array
    return grown


def _with_defaults(container: Container, defaults: Mapping[str, int]) -> Container:
    # Only a *missing* request takes the default; an explicit 0 stays 0 (resourcehelper.applyNonMissing).
    missing = {name: amount for name, amount in defaults.items() if name not in container.requests}
    if not missing:
        return container
    return container.model_copy(update={"requests": {**container.requests, **missing}})


def nonzero_requests(pod: PodRequest, *, scoring: bool = False) -> tuple[int, int]:
    """(cpu millicores, memory bytes) of the pod as kube-scheduler's cache counts them on a node
    (PodInfo.CalculateResource): PodRequests with the non-zero defaults applied to each container's missing
    cpu or memory request (app, init and sidecar containers, combined as for the requests), then pod-level
    requests and overhead. With pod-level requests set, only a resource the pod requests nowhere takes
    the default (getNonMissingContainerRequests).

    `scoring`: the pod's own share as the Fit scorers compute it (calculatePodResourceRequest): every
    container gets its missing defaults and pod-level requests are ignored, as v1.36's Fit builds its
    scorer (LeastAllocated, MostAllocated, RequestedToCapacityRatio) without the PodLevelResources feature,
    so SkipPodLevelResources holds there; kube-scheduler's own score logs show the containers' defaults."""
    if not pod.init_containers and (scoring or pod.resources is None):
        # App containers alone, no pod-level requests (nearly every pod): what the general path below
        # computes, without a copy of each container.
        cpu = memory = 0
        for container in pod.containers:
            cpu += container.requests.get("cpu", DEFAULT_MILLI_CPU_REQUEST)
            memory += container.requests.get("memory", DEFAULT_MEMORY_REQUEST)
        return cpu + pod.overhead.get("cpu", 0), memory + pod.overhead.get("memory", 0)
    defaults = {"cpu": DEFAULT_MILLI_CPU_REQUEST, "memory": DEFAULT_MEMORY_REQUEST}
    if (
        not scoring
        and pod.resources is not None
        and any(name in ("cpu", "memory") or name.startswith("hugepages-") for name in pod.resources.requests)
    ):
        requests = pod.effective_requests
        defaults = {name: amount for name, amount in defaults.items() if name not in requests}
    # Per container, as upstream: a request with no containers at all ({"uid": ...}) adds nothing, while
    # each container that asks for nothing counts the defaults.
    total = effective_resources(
        [_with_defaults(container, defaults) for container in pod.containers],
        [_with_defaults(container, defaults) for container in pod.init_containers],
        None if scoring else pod.resources,
        pod.overhead,
        "requests",
    )
    return total.get("cpu", 0), total.get("memory", 0)


@dataclass(slots=True)
class PodInfo:
    """What the hot path needs of a pod, computed once per pod (and again only if new resource columns
    appear in the snapshot)."""

    pod: PodRequest
    requests: dict[str, int]
    vector: IntArray
    requested_columns: IntArray
    """Columns the pod requests a positive amount of (the Fit filter checks only those)."""
    nonzero_cpu: int
    nonzero_memory: int
    score_cpu: int
    score_memory: int
    """cpu and memory with the defaults as the Fit scorers count the pod itself (`nonzero_requests`'s
    `scoring`); `nonzero_*` is what it adds to a node."""
    limits: IntArray
    """Limits per column, or the request where the pod sets no limit."""
    width: int


@dataclass(slots=True)
class PodRecord:
    """A pod the snapshot accounts for: assumed by placement, or bound (confirmed by the applier)."""

    info: PodInfo
    row: int
    bound: bool = False
    ports: tuple[tuple[str, int, str], ...] = ()
    at: float = -math.inf
    """When it was placed; -inf for pods there before any measurement (the measured load covers them)."""
    attempt: int = 0
    """The binding number that put it here: placed again after losing its node, it takes a later one."""
    gpu_cards: tuple[int, ...] = ()
    """The GPU cards (indexes on its node) it holds `gpu.milli` of each: one for a share, `gpu.count` for
    whole cards; empty when it asks for none or the node has no cards."""


@dataclass(slots=True)
class LabelCounter:
    """Pods per row for each combination of values of some pod label keys, kept incrementally. Sparse,
    because most combinations live on few nodes."""

    keys: tuple[str, ...]
    counts: dict[tuple[str, ...], dict[int, int]] = field(default_factory=dict)

    def values(self, labels: Mapping[str, str]) -> tuple[str, ...] | None:
        found = tuple(labels.get(key) for key in self.keys)
        return None if any(value is None for value in found) else found  # type: ignore[return-value]

    def add(self, labels: Mapping[str, str], row: int, delta: int) -> None:
        values = self.values(labels)
        if values is None:
            return
        rows = self.counts.setdefault(values, {})
        count = rows.get(row, 0) + delta
        if count:
            rows[row] = count
        else:
            rows.pop(row, None)
            if not rows:
                del self.counts[values]

    def on_rows(self, values: tuple[str, ...], rows: IntArray) -> IntArray:
        per_row = self.counts.get(values)
        result = np.zeros(len(rows), dtype=np.int64)
        if per_row:
            lookup = np.fromiter(per_row.keys(), dtype=np.int64, count=len(per_row))
            amounts = np.fromiter(per_row.values(), dtype=np.int64, count=len(per_row))
            order = np.argsort(lookup)
            position = np.searchsorted(lookup[order], rows)
            position = np.minimum(position, len(lookup) - 1)
            hit = lookup[order][position] == rows
            result[hit] = amounts[order][position[hit]]
        return result

    def total(self, values: tuple[str, ...]) -> int:
        return sum(self.counts.get(values, {}).values())


class _Journal:
    """The rows changed by one kind of change, newest last, in a ring."""

    __slots__ = ("count", "rows", "start")

    def __init__(self) -> None:
        self.count = 0
        """Changes so far (a reader's mark)."""
        self.rows = np.zeros(_JOURNAL, dtype=np.int64)
        self.start = 0
        """Marks below this cannot be answered: everything changed there."""

    def add(self, row: int) -> None:
        self.rows[self.count & (_JOURNAL - 1)] = row
        self.count += 1

    def reset(self) -> None:
        self.count += 1
        self.start = self.count

    def since(self, mark: int) -> IntArray | None:
        """Rows changed after `mark`, repeats possible; None when the journal cannot tell."""
        count = self.count - mark
        if mark < self.start or count > _JOURNAL:
            return None
        first = mark & (_JOURNAL - 1)
        if first + count <= _JOURNAL:
            return self.rows[first : first + count].copy()
        return np.concatenate((self.rows[first:], self.rows[: first + count - _JOURNAL]))


class RowCursor:
    """A reader's place in a snapshot's change journals. Values a plugin derives from rows alone (not from the
    pod) stay valid until those rows change in a way they depend on (`kinds`, of `CHANGES`), so the plugin
    keeps them for every row and recomputes only what `stale` names."""

    __slots__ = ("_journals", "_kinds", "_marks", "_rows", "_snapshot")

    def __init__(self, *kinds: str) -> None:
        self._kinds = kinds
        self._snapshot: weakref.ref[Snapshot] | None = None
        self._journals: list[_Journal] = []
        self._rows = -1
        self._marks = [0] * len(kinds)

    def stale(self, snapshot: Snapshot) -> IntArray | None:
        """The rows changed since the last call, which count as read from now on; None means all
        `snapshot.rows` (first use, another snapshot, rows added, or a journal cannot tell)."""
        if self._snapshot is None or self._snapshot() is not snapshot or self._rows != snapshot._rows:
            self._snapshot, self._rows = weakref.ref(snapshot), snapshot._rows
            self._journals = [snapshot.journals[kind] for kind in self._kinds]
            self._marks = [journal.count for journal in self._journals]
            return None
        marks = self._marks
        if len(marks) == 1 and self._journals[0].count == marks[0]:
            return _NO_ROWS  # one kind, unchanged: the usual answer, without the loop below
        parts = []
        for i, journal in enumerate(self._journals):
            if journal.count != marks[i]:
                part = journal.since(marks[i])
                marks[i] = journal.count
                if part is None:
                    self._marks = [journal.count for journal in self._journals]
                    return None
                parts.append(part)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else _NO_ROWS


_NO_ROWS: IntArray = np.zeros(0, dtype=np.int64)


class Snapshot:
    """All nodes of one scheduling domain (a cluster shard), as numpy columns."""

    def __init__(self) -> None:
        self.resources: list[str] = list(BASE_RESOURCES)
        self.column: dict[str, int] = {name: i for i, name in enumerate(self.resources)}
        self._rows = 0
        self.names: list[str | None] = []
        self.specs: list[NodeSpec | None] = []
        self.index: dict[str, int] = {}
        self._free: list[int] = []
        self.allocatable = _columns(0, len(self.resources))
        self.capacity = _columns(0, len(self.resources))
        self.requested = _columns(0, len(self.resources))
        self.free = _columns(0, len(self.resources))
        """allocatable − requested, kept in step so the Fit filter reads one column per resource."""
        self.limits = _columns(0, len(self.resources))
        self.max_allocatable = 0
        """The largest allocatable amount of any node and resource (scorers pick exact fast paths by it)."""
        self.nonzero = np.zeros((0, 2), dtype=np.int64)
        self.cpu_memory = np.zeros((len(CPU_MEMORY_ROWS), 0))
        """Allocatable, non-zero requested and requested cpu and memory (`CPU_MEMORY_ROWS`) as float64, a
        row each, nodes along the columns: the default scorers gather all six for a cycle's nodes in one
        `take` and compute in floats, which is exact for integers below 2^53 (the int tables stay the
        truth; every write to them writes here too)."""
        self.pod_count = np.zeros(0, dtype=np.int64)
        self.max_pods = np.zeros(0, dtype=np.int64)
        self.unschedulable = np.zeros(0, dtype=np.bool_)
        self.oversell = np.zeros(0)
        """The node's own oversell rate (NaN where it sets none: the portrait filter's default applies)."""
        self.version = np.zeros(0, dtype=np.int64)
        self.live = np.zeros(0, dtype=np.bool_)
        self._live_rows: IntArray | None = None
        self._name_rank: IntArray | None = None
        # Labels: key → value id per row (-1 absent); value vocabularies per key.
        self.label_columns: dict[str, IntArray] = {}
        self.label_vocab: dict[str, dict[str, int]] = {}
        # Taints: distinct (key, value, effect) → bit i of word i // 64 of each row.
        self.taint_ids: dict[tuple[str, str, str], int] = {}
        self.taint_words: list[npt.NDArray[np.uint64]] = []
        self._toleration_cache: dict[tuple[Any, ...], tuple[list[int], list[int]]] = {}
        self._taint_counts: dict[tuple[int, ...], IntArray] = {}
        # Host ports: (protocol, port) → host ip → pods using it per row.
        self.ports: dict[tuple[str, int], dict[str, IntArray]] = {}
        self.pods: dict[str, PodRecord] = {}
        self.pods_on_row: list[set[str]] = []
        self.label_counters: dict[tuple[str, ...], LabelCounter] = {}
        self.pod_listeners: list[Callable[[PodRecord, int], None]] = []
        """Called with each pod accounted (+1: assume) or released (-1: forget), after the row's own
        accounting: incremental indexes over pods (`policies.podlabels`) keep up through it."""
        self.extensions: dict[str, Any] = {}
        """Per-snapshot structures that plugins share and attach here (e.g. `PodLabelIndex.of`)."""
        self._usage: NodeUsage | None = None
        self.journals = {kind: _Journal() for kind in CHANGES}
        """Rows changed, by kind of change (`RowCursor` reads them)."""
        # GPU cards (docs/gpu-sharing.md): free milli per card, row-major because a fit reads whole rows.
        self.gpu_free = np.full((0, 0), -1, dtype=np.int64)
        """Rows × cards (as many as the node with most): free milli of each card; -1 where the node has no
        such card, so no request (milli >= 1) fits it. A pod booked where it did not fit (bound by someone
        else, or placed by a profile without GpuShareFit) may leave a card below 0, which fits nothing."""
        self.gpu_cards = np.zeros(0, dtype=np.int64)
        """Cards per row."""
        self.gpu_card_milli = np.zeros(0, dtype=np.int64)
        """Milli of one card per row (`GpuCards.milli_per_card`; 0 without cards)."""
        self.gpu_model = np.zeros(0, dtype=np.int64)
        """Card model id per row (`gpu_model_vocab`), -1 without cards or model."""
        self.gpu_model_vocab: dict[str, int] = {}

    @property
    def usage(self) -> NodeUsage:
        """Measured load per row (windows, portraits, pods placed since): created on first use, so profiles
        that never read load pay nothing for it."""
        if self._usage is None:
            from policies.usage import NodeUsage

            self._usage = NodeUsage(self)
        return self._usage

    @property
    def has_usage(self) -> bool:
        return self._usage is not None

    # ------------------------------------------------------------------------------ change journal

    def row_changed(self, row: int, kind: str) -> None:
        """Record that something plugins may derive from the row changed (`kind`, of `CHANGES`). `version`
        cannot serve: preemption's what-ifs put it back."""
        self.journals[kind].add(row)

    def all_changed(self) -> None:
        """Every row may read differently now (a resource column or measured load appeared)."""
        for journal in self.journals.values():
            journal.reset()

    # ------------------------------------------------------------------------------------ shape

    @property
    def size(self) -> int:
        """Rows in use (live nodes)."""
        return len(self.index)

    @property
    def rows(self) -> int:
        """Rows in use or freed (live nodes are the rows below this with `live` set)."""
        return self._rows

    def live_rows(self) -> IntArray:
        if self._live_rows is None:
            self._live_rows = np.flatnonzero(self.live[: self._rows]).astype(np.int64)
        return self._live_rows

    def name_rank(self) -> IntArray:
        """Per row, its position among the rows sorted by node name (freed rows as ""): the scheduler's
        tie-break orders tied nodes by name without building their names."""
        if self._name_rank is None:
            names = self.names
            order = sorted(range(len(names)), key=lambda row: names[row] or "")
            rank = np.empty(len(names), dtype=np.int64)
            rank[order] = np.arange(len(names), dtype=np.int64)
            self._name_rank = rank
        return self._name_rank

    def _ensure_rows(self, rows: int) -> None:
        have = len(self.live)
        if rows <= have:
            return
        new = max(_INITIAL_ROWS, have * 2, rows)

        def grow(array: np.ndarray[Any, Any], fill: Any = 0) -> np.ndarray[Any, Any]:
            shape = (new, *array.shape[1:])
            grown = np.full(shape, fill, dtype=array.dtype, order="F" if array.ndim == 2 else "C")
            grown[:have] = array
            return grown

        self.allocatable = grow(self.allocatable)
        self.capacity = grow(self.capacity)
        self.requested = grow(self.requested)
        self.free = grow(self.free)
        self.limits = grow(self.limits)
        self.nonzero = grow(self.nonzero)
        cpu_memory = np.zeros((len(CPU_MEMORY_ROWS), new))
        cpu_memory[:, :have] = self.cpu_memory
        self.cpu_memory = cpu_memory
        self.pod_count = grow(self.pod_count)
        self.max_pods = grow(self.max_pods)
        self.unschedulable = grow(self.unschedulable)
        self.oversell = grow(self.oversell, np.nan)
        self.version = grow(self.version)
        self.live = grow(self.live)
        self.taint_words = [grow(word) for word in self.taint_words]
        self._taint_counts.clear()
        for key, column in self.label_columns.items():
            self.label_columns[key] = grow(column, -1)
        for by_ip in self.ports.values():
            for ip, counts in by_ip.items():
                by_ip[ip] = grow(counts)
        gpu_free = np.full((new, self.gpu_free.shape[1]), -1, dtype=np.int64)
        gpu_free[:have] = self.gpu_free
        self.gpu_free = gpu_free
        self.gpu_cards = grow(self.gpu_cards)
        self.gpu_card_milli = grow(self.gpu_card_milli)
        self.gpu_model = grow(self.gpu_model, -1)
        if self._usage is not None:
            self._usage.grow(new)

    def resource_column(self, name: str) -> int:
        """The column of `name`, adding one (for every row) the first time an extended resource appears."""
        column = self.column.get(name)
        if column is not None:
            return column
        column = len(self.resources)
        self.resources.append(name)
        self.column[name] = column
        self.allocatable = _add_column(self.allocatable)
        self.capacity = _add_column(self.capacity)
        self.requested = _add_column(self.requested)
        self.free = _add_column(self.free)
        self.limits = _add_column(self.limits)
        self.all_changed()
        # Pods assumed before the column existed did not request the resource, so they stay correct.
        return column

    # ------------------------------------------------------------------------------------ nodes

    def upsert_node(self, spec: NodeSpec) -> int:
        """Add a node, or update one in place (its pods and their accounting stay). Returns its row."""
        row = self.index.get(spec.name)
        if row is None:
            row = self._free.pop() if self._free else self._rows
            if row == self._rows:
                self._rows += 1
                self._ensure_rows(self._rows)
                self.names.append(None)
                self.specs.append(None)
                self.pods_on_row.append(set())
            self.index[spec.name] = row
            self.names[row] = spec.name
            self.live[row] = True
            self._live_rows = self._name_rank = None
        for name in {*spec.allocatable, *spec.capacity}:
            if name != "pods":
                self.resource_column(name)
        self.allocatable[row] = 0
        self.capacity[row] = 0
        for name, amount in spec.allocatable.items():
            if name != "pods":
                self.allocatable[row, self.column[name]] = amount
                self.max_allocatable = max(self.max_allocatable, amount)
        for name, amount in spec.capacity.items():
            if name != "pods":
                self.capacity[row, self.column[name]] = amount
        self.free[row] = self.allocatable[row] - self.requested[row]
        self._mirror_cpu_memory(row)
        self.max_pods[row] = spec.allocatable.get("pods", spec.capacity.get("pods", DEFAULT_MAX_PODS))
        self.unschedulable[row] = spec.unschedulable
        self.oversell[row] = np.nan if spec.oversell_rate is None else spec.oversell_rate
        self._set_labels(row, spec.labels)
        self._set_taints(row, spec)
        self._set_gpus(row, spec)
        self.specs[row] = spec
        self.version[row] += 1
        self.row_changed(row, NODES)
        return row

    def set_unschedulable(self, name: str, value: bool) -> None:
        row = self.row_of(name)
        spec = self.specs[row]
        assert spec is not None
        self.specs[row] = spec.model_copy(update={"unschedulable": value})
        self.unschedulable[row] = value
        self.version[row] += 1
        self.row_changed(row, NODES)

    def remove_node(self, name: str) -> list[str]:
        """Drop a node; returns the uids of the pods that were on it (they are forgotten too)."""
        row = self.index.pop(name, None)
        if row is None:
            return []
        orphans = sorted(self.pods_on_row[row])
        for uid in orphans:
            self.forget(uid)
        self.live[row] = False
        self.names[row] = None
        self.specs[row] = None
        self._set_labels(row, {})
        for word in self.taint_words:
            word[row] = 0
        self._recount_taints(row)
        self.allocatable[row] = 0
        self.capacity[row] = 0
        self._mirror_cpu_memory(row)
        self._clear_gpus(row)
        self.unschedulable[row] = False
        self.version[row] += 1
        self.row_changed(row, NODES)
        if self._usage is not None:
            self._usage.clear_row(row)
        self._free.append(row)
        self._live_rows = self._name_rank = None
        return orphans

    def _set_gpus(self, row: int, spec: NodeSpec) -> None:
        """The row's cards from the spec, less what the pods on it hold (a changed spec keeps its pods)."""
        gpus = spec.gpus
        count = gpus.count if gpus is not None else 0
        if count > self.gpu_free.shape[1]:
            wider = np.full((self.gpu_free.shape[0], count), -1, dtype=np.int64)
            wider[:, : self.gpu_free.shape[1]] = self.gpu_free
            self.gpu_free = wider
        self.gpu_free[row] = -1
        self.gpu_cards[row] = count
        if gpus is None or count == 0:
            self.gpu_card_milli[row] = 0
            self.gpu_model[row] = -1
            return
        self.gpu_free[row, :count] = gpus.milli_per_card
        self.gpu_card_milli[row] = gpus.milli_per_card
        self.gpu_model[row] = (
            self.gpu_model_vocab.setdefault(gpus.model, len(self.gpu_model_vocab)) if gpus.model else -1
        )
        for uid in self.pods_on_row[row]:
            self._account_gpu(self.pods[uid], +1)

    def _clear_gpus(self, row: int) -> None:
        self.gpu_free[row] = -1
        self.gpu_cards[row] = 0
        self.gpu_card_milli[row] = 0
        self.gpu_model[row] = -1

    def gpu_model_id(self, model: str) -> int:
        """The id of a card model in `gpu_model`; -2 (no row) for a model no node has."""
        return self.gpu_model_vocab.get(model, -2)

    def _choose_gpu_cards(self, info: PodInfo, row: int, gpu_cards: Sequence[int] | None) -> tuple[int, ...]:
        gpu = info.pod.gpu
        if gpu is None:
            return ()
        count = int(self.gpu_cards[row])
        if count == 0:
            return ()
        if gpu_cards is not None:
            cards = tuple(sorted(int(card) for card in gpu_cards))
            node = self.names[row]
            if len(set(cards)) != gpu.count or not all(0 <= card < count for card in cards):
                raise InvalidInput(
                    f"{list(cards)} are not {gpu.count} distinct cards of node {node!r} ({count} cards)",
                    field="gpu_cards",
                )
            return cards
        chosen = choose_cards(self.gpu_free[row], gpu, DEFAULT_RULE)
        if chosen is not None:
            return chosen
        # Like every other resource, assume books what it is told and leaves fitting to the filters
        # (GpuShareFit): a bound pod is a fact, booked even where it leaves no room. Where no cards fit, the
        # pod takes those with most room (as many as it asks for, or all the node has), overbooking them;
        # the applier's ledger refuses such a binding.
        order = np.argsort(-self.gpu_free[row, :count], kind="stable")
        return tuple(sorted(int(card) for card in order[: gpu.count]))

    def _account_gpu(self, record: PodRecord, sign: int) -> None:
        gpu = record.info.pod.gpu
        if gpu is None or not record.gpu_cards:
            return
        row = record.row
        for card in record.gpu_cards:
            if card < self.gpu_cards[row]:  # the node may have lost cards since (an updated spec)
                self.gpu_free[row, card] -= sign * gpu.milli

    def row_of(self, name: str) -> int:
        try:
            return self.index[name]
        except KeyError:
            raise InvalidInput(f"unknown node {name!r}", field="node") from None

    def _set_labels(self, row: int, labels: Mapping[str, str]) -> None:
        for key, column in self.label_columns.items():
            if key not in labels:
                column[row] = -1
        for key, value in labels.items():
            if key not in self.label_columns:
                self.label_columns[key] = np.full(len(self.live), -1, dtype=np.int64)
            vocab = self.label_vocab.setdefault(key, {})
            self.label_columns[key][row] = vocab.setdefault(value, len(vocab))

    def label_value_id(self, key: str, value: str) -> int:
        return self.label_vocab.get(key, {}).get(value, -2)  # -2 matches no row (absent is -1)

    def _set_taints(self, row: int, spec: NodeSpec) -> None:
        for word in self.taint_words:
            word[row] = 0
        for taint in spec.taints:
            identity = (taint.key, taint.value, taint.effect)
            taint_id = self.taint_ids.get(identity)
            if taint_id is None:
                taint_id = len(self.taint_ids)
                self.taint_ids[identity] = taint_id
                if taint_id // _TAINT_WORD_BITS >= len(self.taint_words):
                    self.taint_words.append(np.zeros(len(self.live), dtype=np.uint64))
                self._toleration_cache.clear()
                self._taint_counts.clear()
            index, bit = divmod(taint_id, _TAINT_WORD_BITS)
            self.taint_words[index][row] |= np.uint64(1 << bit)
        self._recount_taints(row)

    def _recount_taints(self, row: int) -> None:
        for masks, counts in self._taint_counts.items():
            words = (int(word[row]) for word in self.taint_words)
            counts[row] = sum((word & mask).bit_count() for word, mask in zip(words, masks, strict=True))

    def untolerated_taints(self, tolerations: Iterable[Toleration]) -> tuple[list[int], list[int]]:
        """Bit masks, one per taint word, of the taints the tolerations do not tolerate: (NoSchedule and
        NoExecute ones, PreferNoSchedule ones). The PreferNoSchedule set considers only tolerations with an
        empty or PreferNoSchedule effect, as TaintToleration's score does."""
        tolerations = tuple(tolerations)
        cached = self._toleration_cache.get(tolerations)
        if cached is not None:
            return cached
        hard = [0] * len(self.taint_words)
        soft = [0] * len(self.taint_words)
        prefer = [t for t in tolerations if t.effect in ("", "PreferNoSchedule")]
        for (key, value, effect), taint_id in self.taint_ids.items():
            index, bit = divmod(taint_id, _TAINT_WORD_BITS)
            if effect == "PreferNoSchedule":
                if not any(t.tolerates(key, value, effect) for t in prefer):
                    soft[index] |= 1 << bit
            elif not any(t.tolerates(key, value, effect) for t in tolerations):
                hard[index] |= 1 << bit
        self._toleration_cache[tolerations] = (hard, soft)
        return hard, soft

    def taint_counts(self, masks: Sequence[int]) -> IntArray:
        """Per row, how many of the taints that `masks` select (one mask per taint word, as
        `untolerated_taints` gives them) the node has. Kept per set of masks, and row by row as nodes
        change, so a cycle reads it instead of counting bits over every row; read it, never write it."""
        key = tuple(masks)
        counts = self._taint_counts.get(key)
        if counts is None:
            counts = np.zeros(len(self.live), dtype=np.int64)
            for word, mask in zip(self.taint_words, key, strict=True):
                if mask:
                    counts += np.bitwise_count(word & np.uint64(mask))
            self._taint_counts[key] = counts
        return counts

    # ------------------------------------------------------------------------------------- pods

    def pod_info(self, pod: PodRequest, previous: PodInfo | None = None) -> PodInfo:
        """The pod's request as a row vector over this snapshot's columns (new columns added as needed)."""
        if previous is not None and previous.pod is pod and previous.width == len(self.resources):
            return previous
        requests = pod.effective_requests
        limits = pod.effective_limits
        column = self.column
        for name in (*requests, *limits):
            if name not in column and name != "pods":
                self.resource_column(name)
        width = len(self.resources)
        # Plain lists first, one array each at the end: a pod has a handful of resources, and numpy's
        # per-element assignment costs more than building the array whole.
        request_list = [0] * width
        limit_list = [0] * width
        for name, amount in requests.items():
            if name != "pods":
                request_list[column[name]] = amount
        for name, amount in limits.items():
            if name != "pods":
                limit_list[column[name]] = amount
        # Where no limit is set the request is the best bound we have (LimitSum sums these).
        limit_list = [limit or request for limit, request in zip(limit_list, request_list, strict=True)]
        cpu, memory = nonzero_requests(pod)
        score_cpu, score_memory = nonzero_requests(pod, scoring=True) if pod.resources else (cpu, memory)
        return PodInfo(
            pod=pod,
            requests=requests,
            vector=np.array(request_list, dtype=np.int64),
            requested_columns=np.array(
                [i for i, amount in enumerate(request_list) if amount > 0], dtype=np.int64
            ),
            nonzero_cpu=cpu,
            nonzero_memory=memory,
            score_cpu=score_cpu,
            score_memory=score_memory,
            limits=np.array(limit_list, dtype=np.int64),
            width=width,
        )

    def _account(self, record: PodRecord, sign: int) -> None:
        info, row = record.info, record.row
        vector, width = info.vector, len(info.vector)
        # In place, without a `sign ×` copy of each vector: a placement's bookkeeping is a good part of it.
        if sign > 0:
            self.requested[row, :width] += vector
            self.free[row, :width] -= vector
            self.limits[row, :width] += info.limits
        else:
            self.requested[row, :width] -= vector
            self.free[row, :width] += vector
            self.limits[row, :width] -= info.limits
        requests = info.requests
        change = (info.nonzero_cpu, info.nonzero_memory, requests.get("cpu", 0), requests.get("memory", 0))
        self.nonzero[row] += change[:2] if sign > 0 else (-change[0], -change[1])
        self.pod_count[row] += sign
        # Pods change the requested rows of the float mirror only, by integers (exact below 2^53).
        if sign > 0:
            self.cpu_memory[2:6, row] += change
        else:
            self.cpu_memory[2:6, row] -= change
        self._account_gpu(record, sign)
        for protocol, port, ip in record.ports:
            by_ip = self.ports.setdefault((protocol, port), {})
            if ip not in by_ip:
                by_ip[ip] = np.zeros(len(self.live), dtype=np.int64)
            by_ip[ip][row] += sign
        for counter in self.label_counters.values():
            counter.add(info.pod.labels, row, sign)
        for listener in self.pod_listeners:
            listener(record, sign)
        self.version[row] += 1
        self.row_changed(row, PODS)

    def _mirror_cpu_memory(self, row: int) -> None:
        mirror, cpu, memory = self.cpu_memory, self.column["cpu"], self.column["memory"]
        mirror[0, row] = self.allocatable[row, cpu]
        mirror[1, row] = self.allocatable[row, memory]
        mirror[2, row] = self.nonzero[row, 0]
        mirror[3, row] = self.nonzero[row, 1]
        mirror[4, row] = self.requested[row, cpu]
        mirror[5, row] = self.requested[row, memory]

    def assume(
        self,
        info: PodInfo,
        row: int,
        *,
        bound: bool = False,
        at: float = -math.inf,
        attempt: int = 0,
        gpu_cards: Sequence[int] | None = None,
    ) -> PodRecord:
        """Account the pod on `row` at once (kube-scheduler's assume cache); `bind` confirms it later. `at`
        is the placement time (measured load catches up with the pod after it). A GPU pod takes `gpu_cards`
        of the node, or the cards `choose_cards` picks by the default rule (the roomiest when none fit)."""
        uid = info.pod.uid
        if uid in self.pods:
            raise InvalidInput(
                f"pod {uid!r} is already placed on {self.names[self.pods[uid].row]!r}", field="uid"
            )
        if not self.live[row]:
            raise InvalidInput(f"row {row} is not a live node", field="node")
        ports = tuple((p.protocol, p.port, p.host_ip) for p in info.pod.host_ports)
        cards = self._choose_gpu_cards(info, row, gpu_cards)
        record = PodRecord(
            info=info, row=row, bound=bound, ports=ports, at=at, attempt=attempt, gpu_cards=cards
        )
        self._account(record, +1)
        self.pods[uid] = record
        self.pods_on_row[row].add(uid)
        if self._usage is not None:
            self._usage.on_assume(record)
        return record

    def bind(self, uid: str) -> None:
        record = self.pods.get(uid)
        if record is not None:
            record.bound = True

    def forget(self, uid: str) -> PodRecord | None:
        """Undo an assume, or release a bound pod (deletion, eviction). Unknown uids are ignored."""
        record = self.pods.pop(uid, None)
        if record is None:
            return None
        self._account(record, -1)
        self.pods_on_row[record.row].discard(uid)
        if self._usage is not None:
            self._usage.on_forget(record)
        return record

    def add_usage(self, row: int, requested: Mapping[str, int], pods: int) -> None:
        """Account usage not tied to known pods (a node state given as totals): actual and non-zero
        requests are both taken to be `requested`."""
        for name, amount in requested.items():
            if name != "pods":
                column = self.resource_column(name)
                self.requested[row, column] += amount
                self.free[row, column] -= amount
        self.nonzero[row, 0] += requested.get("cpu", 0)
        self.nonzero[row, 1] += requested.get("memory", 0)
        self.pod_count[row] += pods
        self._mirror_cpu_memory(row)
        self.version[row] += 1
        self.row_changed(row, PODS)

    def label_counter(self, keys: tuple[str, ...]) -> LabelCounter:
        """Pod counts per row by the values of `keys`, built once from the current pods, then incremental."""
        counter = self.label_counters.get(keys)
        if counter is None:
            counter = LabelCounter(keys)
            for record in self.pods.values():
                counter.add(record.info.pod.labels, record.row, +1)
            self.label_counters[keys] = counter
        return counter

    def port_conflicts(self, pod: PodRequest, rows: IntArray | slice) -> BoolArray:
        """True where one of the pod's host ports is taken: same protocol and port, and the same host IP
        or either side on 0.0.0.0 (NodePorts' semantics)."""
        conflict = np.zeros(len(self.live[rows]), dtype=np.bool_)
        for wanted in pod.host_ports:
            by_ip = self.ports.get((wanted.protocol, wanted.port))
            if not by_ip:
                continue
            for ip, counts in by_ip.items():
                if wanted.host_ip == "0.0.0.0" or ip in ("0.0.0.0", wanted.host_ip):
                    conflict |= counts[rows] > 0
        return conflict

    def memory_bytes(self) -> int:
        """Bytes held by the per-node arrays (the figure the placement benchmark reports per node)."""
        arrays = [
            self.allocatable,
            self.capacity,
            self.requested,
            self.free,
            self.limits,
            self.nonzero,
            self.cpu_memory,
            self.pod_count,
            self.max_pods,
            self.unschedulable,
            self.oversell,
            self.version,
            self.live,
            self.gpu_free,
            self.gpu_cards,
            self.gpu_card_milli,
            self.gpu_model,
            *self.taint_words,
            *self.label_columns.values(),
            *(counts for by_ip in self.ports.values() for counts in by_ip.values()),
        ]
        return sum(int(a.nbytes) for a in arrays)
