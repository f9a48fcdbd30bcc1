"""GPU fragmentation of nodes against a target workload, and FGD's score: the FGD simulator's math.

Definitions (hkust-adsl/kubernetes-scheduler-simulator, ``pkg/utils/frag.go``). For a node with cpu left
`cpu` and free milli per card `free`, and a pod type k of the target workload (share `freq_k`):

* ``GetNodePodFrag``: a type without GPUs is XL / XR; a type whose models exclude the node's is NoAccess;
  otherwise Q3 (satisfied) when `count_k` cards have `milli_k` free (``CanNodeHostPodOnGpuMemory``) and
  `cpu` >= `cpu_k`, else Q1 / Q2 / Q4.
* ``NodeGpuShareFragAmount``: for Q3 the free milli of the cards with less than `milli_k` free is fragment
  (``GetGpuFragMilliByNodeResAndPodRes``); for every other class all the node's free GPU milli is.
  Each weighed by `freq_k`; ``NodeGpuShareFragAmountScore`` sums all but Q3's own part:

      F(node) = Σ_k freq_k · (below_k if satisfied_k else total)

  with total = Σ free, below_k = Σ {free_c : free_c < milli_k}.
* FGD (``pkg/simulator/plugin/fgd_score.go``, ``calculateGpuShareFragExtendScore``): the node's score is
  int(sigmoid((F(before) − F(after)) / 1000) · 100), where a share pod tries every card with room and keeps
  the best (the first card on equal scores) and any other pod takes cards as ``NodeResource.Sub`` does
  (whole cards: the lowest-indexed free ones; its cpu in every case).

Vectorised (`FragTable`, `RowFrag`, `fgd_scores`): F = total × Σ freq − Σ_k [satisfied_k] freq_k ×
usable_k, with usable_k = total − below_k the free milli of the cards holding `milli_k`. Types that differ
only in cpu share their cards' test, so per node only each distinct `milli` matters (cards with that much
free, and their free milli), and the cpu enters as a step function of the node's cpu left; a node's F costs
O(distinct (milli, cards, models)) however many types the workload has. An after-state differs from its
row in one card (a share) or in `q` whole cards, so F(after) for every (node, card) is a few array
operations over (pairs × columns). The sums run in another order than the simulator's per-class sums, which
can differ in the last bits only; equal states give equal F, so an unchanged fragmentation scores 50.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from policies.framework.contract import MAX_NODE_SCORE, BoolArray, IntArray
from policies.gpu.workload import PodType, TargetWorkload
from schemas.gpu import MILLI_PER_CARD

__all__ = [
    "FRAG_CLASSES",
    "FloatArray",
    "FragTable",
    "RowFrag",
    "fgd_card_score",
    "fgd_cpu_scores",
    "fgd_scores",
    "frag_amount_reference",
    "frag_score_reference",
    "node_pod_frag",
    "sigmoid",
]

FloatArray = npt.NDArray[np.float64]

FRAG_CLASSES = ("q1_lack_both", "q2_lack_gpu", "q3_satisfied", "q4_lack_cpu", "xl_satisfied", "xr_lack_cpu")
"""``FragRatioDataMap``'s classes in its order, NoAccess last ("no_access")."""
NO_ACCESS = "no_access"


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


# ----------------------------------------------------------------------------- reference (scalar, Go order)


def _accessible(node_model: str, kind: PodType) -> bool:
    """``IsNodeAccessibleToPodByType``."""
    models = kind.model_list
    if not kind.models:
        return True
    if not node_model:
        return False
    return node_model in models if models else True


def node_pod_frag(cpu_left: int, free: Sequence[int], node_model: str, kind: PodType) -> str:
    """``GetNodePodFrag``: the class of the node for one pod type."""
    if kind.milli == 0:
        return FRAG_CLASSES[4] if cpu_left >= kind.cpu else FRAG_CLASSES[5]
    if not _accessible(node_model, kind):
        return NO_ACCESS
    wanted = kind.count
    hosts = False
    for left in free:
        if left >= kind.milli:
            wanted -= 1
            if wanted <= 0:
                hosts = True
                break
    if hosts:
        return FRAG_CLASSES[2] if cpu_left >= kind.cpu else FRAG_CLASSES[3]
    return FRAG_CLASSES[1] if cpu_left >= kind.cpu else FRAG_CLASSES[0]


def frag_amount_reference(
    cpu_left: int, free: Sequence[int], node_model: str, workload: TargetWorkload
) -> list[float]:
    """``NodeGpuShareFragAmount``: frag milli per class (`FRAG_CLASSES` + no_access), in Go's order of
    additions."""
    data = [0.0] * 7
    index = {name: i for i, name in enumerate((*FRAG_CLASSES, NO_ACCESS))}
    total = sum(free)
    for kind, freq in zip(workload.types, workload.freq, strict=True):
        cls = node_pod_frag(cpu_left, free, node_model, kind)
        if cls == FRAG_CLASSES[2]:
            below = sum(left for left in free if left < kind.milli)
            data[1] += freq * float(below)
            data[2] += freq * float(total - below)
        else:
            data[index[cls]] += freq * float(total)
    return data


def frag_score_reference(
    cpu_left: int, free: Sequence[int], node_model: str, workload: TargetWorkload
) -> float:
    """``NodeGpuShareFragAmountScore``: the sum of every class but Q3, in Go's order."""
    data = frag_amount_reference(cpu_left, free, node_model, workload)
    out = 0.0
    for i, value in enumerate(data):
        if i != 2:
            out += value
    return out


def fgd_card_score(before: float, after: float) -> int:
    """FGD's score of one placement: int64(sigmoid((before − after) / 1000) × MaxNodeScore)."""
    return int(sigmoid((before - after) / 1000) * float(MAX_NODE_SCORE))


# ----------------------------------------------------------------------------------- vectorised


@dataclass(slots=True)
class FragTable:
    """The target workload arranged for the vectorised F.

    F = total × Σ_k freq_k − Σ_k [satisfied_k] freq_k (total − below_k): the satisfied types' own part is
    what a type can use. Types asking for the same (milli, cards, models) — a *group* — differ only in cpu,
    so their satisfied shares sum to W_g(cpu) = Σ {freq_k : k in g, cpu_k ≤ cpu}, a step function of the
    node's cpu read from a table by the cpu's level among the types' cpu values. Per node only the cards
    with at least each distinct milli matter (`milli`: count and free milli of such cards), so a node's F
    costs O(groups) however many types the workload has.
    """

    workload: TargetWorkload
    freq_sum: float
    milli: IntArray
    """The distinct milli per card of the GPU types, ascending: the columns of `RowFrag.fit` / `usable`."""
    group_column: IntArray
    """Per group, its column of `milli`."""
    group_count: IntArray
    """Per group, the cards its types ask for."""
    cpu_levels: IntArray
    """The GPU types' distinct cpu requests, ascending."""
    share: FloatArray
    """(levels + 1) × groups: W_g at each level (level j: exactly j of `cpu_levels` are ≤ the cpu)."""
    group_models: tuple[str, ...]
    vocab: dict[str, int]
    """The model ids the access table was built from (the snapshot's vocabulary)."""
    _access: BoolArray
    """(1 + model ids) × groups: row 0 is a node without a model."""
    _vocab_size: int

    @classmethod
    def build(cls, workload: TargetWorkload, vocab: dict[str, int]) -> FragTable:
        groups: dict[tuple[int, int, str], int] = {}
        members: list[tuple[int, int, float]] = []  # (group, cpu, freq) of the GPU types, workload order
        for kind, freq in zip(workload.types, workload.freq, strict=True):
            if kind.milli <= 0:
                continue
            key = (kind.milli, kind.count, kind.models)
            members.append((groups.setdefault(key, len(groups)), kind.cpu, freq))
        keys = list(groups)
        milli = np.array(sorted({m for m, _, _ in keys}), dtype=np.int64)
        column = np.searchsorted(milli, np.array([m for m, _, _ in keys], dtype=np.int64))
        count = np.array([c for _, c, _ in keys], dtype=np.int64)
        levels = np.array(sorted({cpu for _, cpu, _ in members}), dtype=np.int64)
        share = np.zeros((len(levels) + 1, len(keys)))
        # Each type adds its share from its cpu's level up, in workload order (deterministic sums).
        for group, cpu, freq in members:
            share[int(np.searchsorted(levels, cpu, side="right")) :, group] += freq
        freq_sum = 0.0
        for freq in workload.freq:
            freq_sum += freq
        table = cls(
            workload,
            freq_sum,
            milli,
            column.astype(np.int64),
            count,
            levels,
            share,
            tuple(models for _, _, models in keys),
            vocab,
            np.zeros((0, 0), dtype=np.bool_),
            -1,
        )
        table.sync_models(vocab)
        return table

    def sync_models(self, vocab: dict[str, int]) -> bool:
        """Rebuild the access table when new models appeared; True when it did."""
        self.vocab = vocab
        if len(vocab) == self._vocab_size:
            return False
        by_id = sorted(vocab.items(), key=lambda item: item[1])
        access = np.ones((len(by_id) + 1, len(self.group_models)), dtype=np.bool_)
        for g, models in enumerate(self.group_models):
            if not models:
                continue
            kind = PodType(0, 1, 1, models)
            access[:, g] = [_accessible(model, kind) for model in ["", *(name for name, _ in by_id)]]
        self._access = access
        self._vocab_size = len(vocab)
        return True

    def access(self, model_ids: IntArray) -> BoolArray:
        """Rows (of `model_ids`) × groups: whether the node's model is one the group accepts."""
        result: BoolArray = self._access[model_ids + 1]
        return result

    def part(self, fit: IntArray, usable: IntArray, model: IntArray) -> FloatArray:
        """States × groups: the free milli a group's types can use where their cards fit (cpu aside), else
        0 — what F subtracts, weighed by the group's satisfied share."""
        column = self.group_column
        satisfied = (fit[:, column] >= self.group_count[None, :]) & self.access(model)
        result: FloatArray = np.where(satisfied, usable[:, column], 0).astype(np.float64)
        return result

    def frag(self, cpu: IntArray, total: IntArray, part: FloatArray) -> FloatArray:
        """F of states given by their cpu left, total free milli and `part`."""
        base: FloatArray = total.astype(np.float64) * self.freq_sum
        if len(self.group_count) == 0:
            return base
        own = self.share[np.searchsorted(self.cpu_levels, cpu, side="right")] * part
        # A running sum is strictly left to right (numpy's sum pairs terms up), so equal parts give equal F.
        result: FloatArray = base - np.cumsum(own, axis=1)[:, -1]
        return result


@dataclass(slots=True)
class RowFrag:
    """Per node, what its fragmentation is made of: cpu left, total free milli, card model, per `milli`
    column of the table the cards with that much free and their free milli; and F itself."""

    cpu: IntArray
    total: IntArray
    fit: IntArray
    usable: IntArray
    model: IntArray
    part: FloatArray
    """Rows × groups: `FragTable.part`."""
    frag: FloatArray

    @classmethod
    def empty(cls, table: FragTable, rows: int) -> RowFrag:
        width = len(table.milli)
        return cls(
            np.zeros(rows, dtype=np.int64),
            np.zeros(rows, dtype=np.int64),
            np.zeros((rows, width), dtype=np.int64),
            np.zeros((rows, width), dtype=np.int64),
            np.full(rows, -1, dtype=np.int64),
            np.zeros((rows, len(table.group_count))),
            np.zeros(rows),
        )

    @classmethod
    def compute(
        cls, table: FragTable, cpu: IntArray, free: IntArray, cards: IntArray, model: IntArray
    ) -> RowFrag:
        """From cpu left, free milli per card (rows × cards), card counts and model ids of some rows."""
        valid = np.arange(free.shape[1], dtype=np.int64)[None, :] < cards[:, None]
        usable_cards = np.where(valid, free, 0)
        total = usable_cards.sum(axis=1)
        at_least = (usable_cards[:, :, None] >= table.milli[None, None, :]) & valid[:, :, None]
        fit = np.count_nonzero(at_least, axis=1).astype(np.int64)
        usable = np.where(at_least, usable_cards[:, :, None], 0).sum(axis=1)
        part = table.part(fit, usable, model)
        return cls(cpu.copy(), total, fit, usable, model.copy(), part, table.frag(cpu, total, part))

    def take(self, rows: IntArray) -> RowFrag:
        return RowFrag(
            self.cpu[rows],
            self.total[rows],
            self.fit[rows],
            self.usable[rows],
            self.model[rows],
            self.part[rows],
            self.frag[rows],
        )

    def update(self, rows: IntArray, other: RowFrag) -> None:
        self.cpu[rows] = other.cpu
        self.total[rows] = other.total
        self.fit[rows] = other.fit
        self.usable[rows] = other.usable
        self.model[rows] = other.model
        self.part[rows] = other.part
        self.frag[rows] = other.frag

    def reweigh(self, table: FragTable) -> None:
        """F again under another workload whose `milli` columns are the same (the parts still hold)."""
        self.part = table.part(self.fit, self.usable, self.model)
        self.frag = table.frag(self.cpu, self.total, self.part)


def _int_scores(before: FloatArray, after: FloatArray) -> IntArray:
    x = (before - after) / 1000.0
    scores: IntArray = (1.0 / (1.0 + np.exp(-x)) * float(MAX_NODE_SCORE)).astype(np.int64)
    return scores


def fgd_cpu_scores(table: FragTable, rows_frag: RowFrag, which: IntArray, pod_cpu: int) -> IntArray:
    """FGD's score for a pod without GPUs on rows `which` of `rows_frag`: only the cpu changes, so F after
    is one weighing of the rows' `part` at their new cpu (what `fgd_scores` computes, without copying the
    rows' card columns)."""
    cpu = rows_frag.cpu[which]
    after = table.frag(cpu - pod_cpu, rows_frag.total[which], rows_frag.part[which])
    return _int_scores(rows_frag.frag[which], after)


def fgd_scores(
    table: FragTable,
    rows_frag: RowFrag,
    free: IntArray,
    cards: IntArray,
    pod_cpu: int,
    milli: int,
    count: int,
) -> tuple[IntArray, IntArray]:
    """FGD's score for a pod of (cpu, milli per card, cards) on each of some rows — `rows_frag` and `free`
    (rows × cards) describe them — and, for a share, the card it takes there (-1 where none fits; whole-card
    and cpu-only pods get -1: their cards are the lowest-indexed free ones, the default)."""
    n = len(rows_frag.cpu)
    cpu_after = rows_frag.cpu - pod_cpu
    none = np.full(n, -1, dtype=np.int64)
    if milli <= 0 or count <= 0:
        after = table.frag(cpu_after, rows_frag.total, rows_frag.part)
        return _int_scores(rows_frag.frag, after), none
    if milli >= MILLI_PER_CARD:
        # Whole cards are free cards: each counts in every column (no type asks more than a card).
        taken = MILLI_PER_CARD * count
        part = table.part(rows_frag.fit - count, rows_frag.usable - taken, rows_frag.model)
        after = table.frag(cpu_after, rows_frag.total - taken, part)
        return _int_scores(rows_frag.frag, after), none
    # A share: one after-state per card with room, cards of equal free milli on a row scored once (the
    # first of them would win the tie anyway).
    width = free.shape[1]
    index = np.arange(width, dtype=np.int64)
    valid = index[None, :] < cards[:, None]
    room = valid & (free >= milli)
    if width > 1:
        same = (free[:, :, None] == free[:, None, :]) & (index[None, None, :] < index[None, :, None])
        room &= ~same.any(axis=2)
    pair_row, pair_card = np.nonzero(room)
    scores = np.zeros(n, dtype=np.int64)
    if len(pair_row) == 0:
        return scores, none
    f = free[pair_row, pair_card][:, None]
    g = f - milli
    m = table.milli[None, :]
    was, stays = f >= m, g >= m
    fit_after = rows_frag.fit[pair_row] - was + stays
    usable_after = rows_frag.usable[pair_row] - np.where(was, f, 0) + np.where(stays, g, 0)
    part = table.part(fit_after, usable_after, rows_frag.model[pair_row])
    after = table.frag(cpu_after[pair_row], rows_frag.total[pair_row] - milli, part)
    pair_scores = _int_scores(rows_frag.frag[pair_row], after)
    # Best score per row, the lowest card among equal scores: order pairs by (row, -score, card).
    order = np.lexsort((pair_card, -pair_scores, pair_row))
    first = np.ones(len(order), dtype=np.bool_)
    sorted_rows = pair_row[order]
    first[1:] = sorted_rows[1:] != sorted_rows[:-1]
    winners = order[first]
    scores[pair_row[winners]] = pair_scores[winners]
    none[pair_row[winners]] = pair_card[winners]
    return scores, none
