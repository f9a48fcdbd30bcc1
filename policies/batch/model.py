"""The TBESK placement model (Geng and Wang 2023, section 4): pod classes, node scores, batch fitness, Z_avg.

A batch problem is arrays only: nodes × resources (capacity, what is requested on them, what they use) and
pods × resources (requests), plus which nodes each pod may use. Everything below works on whole arrays; the
batch fitness takes a population of assignments (population × pods node indices) and answers for all of them
at once.

Model, for pod P on node N, resource r with node total N_r, used S_r (everything else on the node: what was
there before the batch, plus the other batch pods assigned to it) and request P_r:

- class: C_r = P_r / N_r; C_cpu > C_mem and C_bandwidth > C_disk → compressible, both < → incompressible,
  otherwise balanced (a tie is balanced). When one pair is not in the model (the Alibaba GPU trace has no
  bandwidth or disk), the other pair decides alone.
- R_r = 1 − P_r / (N_r − S_r), R_N = Σ μ_r R_r; L_r = (P_r + S_r) / N_r, L_N = Σ ν_r (T_r − L_r);
  S_N = R_N + L_N. μ and ν are the pod's class's weights, T_r the critical loads.
- batch fitness = Σ over pods of S_N at the pod's node. An assignment that puts more on a node than it has
  (requests, not peak usage, are what must fit) is infeasible: its cost is worse than any feasible one's.

Documented handling of awkward input (never a NaN):

- a node with zero capacity of a resource: the resource is skipped for that node (its weights are spread
  over the node's other resources, R_r and L_r are not computed), and no pod requesting a positive amount
  of it may go there. A resource that no node has and no pod requests is simply never used.
- R_r is clamped to [0, 1]: a node whose peak usage already reaches its capacity gives R_r = 0 rather than a
  division by zero or a negative free amount.
- a pod with no candidate node (its filters passed none, or it fits alone on none) is left out of the
  optimisation and reported as unassigned (-1); the scheduler sends it through one-by-one placement, which
  explains why it fits nowhere.
- weights that are negative, not finite or do not sum to 1 (per class, for μ and for ν), critical loads
  outside (0, 1], and negative or non-finite amounts are `InvalidInput` errors naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from schemas.exceptions import InvalidInput

__all__ = [
    "BALANCED",
    "CLASSES",
    "COMPRESSIBLE",
    "DEFAULT_CRITICAL_LOAD",
    "DEFAULT_MU",
    "DEFAULT_NU",
    "INCOMPRESSIBLE",
    "OBJECTIVES",
    "RESOURCES",
    "BatchProblem",
    "ClassWeights",
    "Evaluation",
    "Evaluator",
    "Objective",
    "class_weights",
    "classify",
    "evaluate",
    "feasible",
    "make_problem",
    "node_scores",
    "pod_scores",
    "total_fitness",
    "utilisation",
    "z_avg",
    "z_per_node",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

RESOURCES: Final = ("cpu", "memory", "bandwidth", "disk")
"""The paper's four resources, in its order."""

COMPRESSIBLE: Final = 0
INCOMPRESSIBLE: Final = 1
BALANCED: Final = 2
CLASSES: Final = ("compressible", "incompressible", "balanced")

DEFAULT_MU: Final[dict[str, tuple[float, float, float, float]]] = {
    "compressible": (0.4, 0.1, 0.4, 0.1),
    "incompressible": (0.1, 0.4, 0.1, 0.4),
    "balanced": (0.25, 0.25, 0.25, 0.25),
}
"""μ per class over `RESOURCES` (eyrie's choice: the paper does not publish its values)."""
DEFAULT_NU: Final = DEFAULT_MU
DEFAULT_CRITICAL_LOAD: Final = 0.8
EXTENDED_WEIGHT: Final = 0.25
"""Default weight, before normalisation, of a resource outside the paper's four (e.g. GPUs)."""

_PAIRS: Final = (("cpu", "memory"), ("bandwidth", "disk"))
_CLASSIFY_CHUNK: Final = 1 << 20
"""Pod × node pairs classified at a time."""
_SUM_TOLERANCE: Final = 1e-6
INFEASIBLE_PENALTY: Final = 4.0
"""Added to the cost (which is −fitness / pods, within [−2, 1] when feasible) of an infeasible assignment,
on top of its overflow, so that every infeasible assignment costs more than every feasible one."""


@dataclass(frozen=True, slots=True)
class ClassWeights:
    """μ and ν per class: arrays (3 classes, resources), each row summing to 1."""

    mu: FloatArray
    nu: FloatArray


def _finite_non_negative(array: FloatArray, name: str) -> FloatArray:
    if array.size and (not np.isfinite(array).all() or (array < 0).any()):
        raise InvalidInput("must be finite and not negative", field=name)
    return array


def _weight_rows(
    given: Mapping[str, Mapping[str, float] | Sequence[float]] | None,
    defaults: Mapping[str, Sequence[float]],
    resources: tuple[str, ...],
    name: str,
) -> FloatArray:
    rows = np.zeros((len(CLASSES), len(resources)))
    if given is None:
        # The paper's vector restricted to the model's resources, extended resources at EXTENDED_WEIGHT,
        # normalised to sum to 1.
        for c, cls in enumerate(CLASSES):
            paper = dict(zip(RESOURCES, defaults[cls], strict=True))
            row = np.array([paper.get(r, EXTENDED_WEIGHT) for r in resources])
            total = row.sum()
            rows[c] = row / total if total > 0 else np.full(len(resources), 1.0 / max(len(resources), 1))
        return rows
    unknown = set(given) - set(CLASSES)
    if unknown:
        raise InvalidInput(
            f"unknown class {sorted(unknown)[0]!r} (classes: {', '.join(CLASSES)})", field=name
        )
    for c, cls in enumerate(CLASSES):
        where = f"{name}.{cls}"
        if cls not in given:
            raise InvalidInput("missing", field=where)
        value = given[cls]
        if isinstance(value, Mapping):
            extra = set(value) - set(resources)
            if extra:
                raise InvalidInput(f"unknown resource {sorted(extra)[0]!r}", field=where)
            row = np.array([float(value.get(r, 0.0)) for r in resources])
        else:
            row = np.asarray(value, dtype=np.float64)
            if row.shape != (len(resources),):
                raise InvalidInput(f"expected {len(resources)} weights ({', '.join(resources)})", field=where)
        _finite_non_negative(row, where)
        if abs(row.sum() - 1.0) > _SUM_TOLERANCE:
            raise InvalidInput(f"weights must sum to 1, got {row.sum():.6g}", field=where)
        rows[c] = row
    return rows


def class_weights(
    resources: Sequence[str],
    mu: Mapping[str, Mapping[str, float] | Sequence[float]] | None = None,
    nu: Mapping[str, Mapping[str, float] | Sequence[float]] | None = None,
) -> ClassWeights:
    """Per-class weights for `resources`: given ones validated (each class's μ and ν sum to 1), else the
    defaults (`DEFAULT_MU`, `DEFAULT_NU`)."""
    names = tuple(resources)
    return ClassWeights(
        _weight_rows(mu, DEFAULT_MU, names, "weights.mu"), _weight_rows(nu, DEFAULT_NU, names, "weights.nu")
    )


def classify(requests: FloatArray, capacity: FloatArray, resources: Sequence[str]) -> npt.NDArray[np.int8]:
    """The class of every pod relative to every node: (pods, nodes) of COMPRESSIBLE, INCOMPRESSIBLE, BALANCED.

    C_a / C_b > 1 is decided as P_a·N_b > P_b·N_a (no division: a pod asking nothing of b but something of a
    has an infinite ratio, one asking nothing of either a ratio of 1). A resource a node lacks counts C = 0.
    """
    names = list(resources)
    shape = (requests.shape[0], capacity.shape[0])
    classes = np.full(shape, BALANCED, dtype=np.int8)
    factors = []
    for a, b in _PAIRS:
        if a in names and b in names:
            ia, ib = names.index(a), names.index(b)
            na, nb = capacity[:, ia], capacity[:, ib]
            # sign(C_a − C_b) as sign(P_a·x − P_b·y) with per-node x, y: (N_b, N_a) where the node has both;
            # (1, 0) where it lacks b (C_b = 0); (0, 1) where it lacks a; (0, 0) where it lacks both.
            x = np.where(na > 0, np.where(nb > 0, nb, 1.0), 0.0)
            y = np.where(nb > 0, np.where(na > 0, na, 1.0), 0.0)
            factors.append((ia, ib, x, y))
    if not factors:
        return classes
    step = max(1, _CLASSIFY_CHUNK // max(shape[1], 1))
    for start in range(0, shape[0], step):  # in chunks of pods: a few (pods, nodes) floats at a time
        part = slice(start, start + step)
        signs = []
        for ia, ib, x, y in factors:
            cross = np.multiply.outer(requests[part, ia], x)
            cross -= np.multiply.outer(requests[part, ib], y)
            signs.append(np.sign(cross))
        first = signs[0]
        second = signs[1] if len(signs) > 1 else first
        chunk = classes[part]
        chunk[(first > 0) & (second > 0)] = COMPRESSIBLE
        chunk[(first < 0) & (second < 0)] = INCOMPRESSIBLE
    return classes


@dataclass(frozen=True, slots=True)
class BatchProblem:
    """One batch: build it with `make_problem`, which validates and derives the lookup arrays."""

    resources: tuple[str, ...]
    capacity: FloatArray
    """(nodes, resources) N_r."""
    requested: FloatArray
    """(nodes, resources) requests already on the node (what must fit together with the batch)."""
    used: FloatArray
    """(nodes, resources) S_r before the batch: peak-period usage where known, else requests."""
    requests: FloatArray
    """(pods, resources) P_r."""
    allowed: BoolArray
    """(pods, nodes): nodes the pod's filters passed (as given)."""
    candidates: BoolArray
    """(pods, nodes): allowed nodes where the pod also fits alone: the ones the optimisers choose from."""
    weights: ClassWeights
    critical: FloatArray
    """(resources,) T_crit,r."""
    classes: npt.NDArray[np.int8]
    """(pods, nodes) class of the pod relative to the node."""
    applicable: BoolArray
    """(nodes, resources): capacity > 0."""
    counts: IntArray
    """(pods,) number of candidate nodes."""
    table: npt.NDArray[np.int32] | None
    """(pods, max count) candidate nodes of each pod in node order, padded; None when every pod may use
    every node (the encoding then maps straight to node indices)."""
    overflow_scale: FloatArray = field(repr=False)
    """(nodes, resources) what an overflow is measured against: the capacity, or 1 where it is 0."""

    @property
    def pods(self) -> int:
        return int(self.requests.shape[0])

    @property
    def nodes(self) -> int:
        return int(self.capacity.shape[0])

    @property
    def all_applicable(self) -> bool:
        return bool(self.applicable.all())

    def subset(
        self, pods: IntArray | slice, requested: FloatArray | None = None, used: FloatArray | None = None
    ) -> BatchProblem:
        """The same nodes with only the given pods (in that order), optionally on other node loads."""
        return _derive(
            self.resources,
            self.capacity,
            self.requested if requested is None else requested,
            self.used if used is None else used,
            self.requests[pods],
            self.allowed[pods],
            self.weights,
            self.critical,
        )


def _matrix(value: npt.ArrayLike, shape: tuple[int, int], name: str) -> FloatArray:
    array = np.array(value, dtype=np.float64)
    if array.ndim == 1 and shape[0] == 0 and array.size == 0:
        array = array.reshape(shape)
    if array.shape != shape:
        raise InvalidInput(f"expected shape {shape}, got {array.shape}", field=name)
    return _finite_non_negative(array, name)


def make_problem(
    capacity: npt.ArrayLike,
    requests: npt.ArrayLike,
    *,
    resources: Sequence[str] = RESOURCES,
    requested: npt.ArrayLike | None = None,
    used: npt.ArrayLike | None = None,
    candidates: npt.ArrayLike | None = None,
    weights: ClassWeights | None = None,
    critical: float | Sequence[float] = DEFAULT_CRITICAL_LOAD,
) -> BatchProblem:
    """Validate a batch and derive what the fitness needs.

    `requested` (what must fit, default nothing) and `used` (S_r for the scores, default `requested`) are
    per node; `candidates` (default every node) is restricted further to nodes where the pod fits alone.
    """
    names = tuple(resources)
    if not names or len(set(names)) != len(names):
        raise InvalidInput("must be distinct resource names, at least one", field="resources")
    width = len(names)
    cap = np.array(capacity, dtype=np.float64)
    if cap.ndim != 2 or cap.shape[1] != width:
        raise InvalidInput(f"expected (nodes, {width}) amounts, got shape {cap.shape}", field="capacity")
    _finite_non_negative(cap, "capacity")
    nodes = cap.shape[0]
    pods_array = np.array(requests, dtype=np.float64)
    if pods_array.size == 0:
        pods_array = pods_array.reshape(0, width)
    if pods_array.ndim != 2 or pods_array.shape[1] != width:
        raise InvalidInput(
            f"expected (pods, {width}) amounts, got shape {pods_array.shape}", field="requests"
        )
    _finite_non_negative(pods_array, "requests")
    pods = pods_array.shape[0]
    base = np.zeros_like(cap) if requested is None else _matrix(requested, cap.shape, "requested")
    peak = base if used is None else _matrix(used, cap.shape, "used")
    if candidates is None:
        allowed = np.ones((pods, nodes), dtype=np.bool_)
    else:
        allowed = np.array(candidates, dtype=np.bool_)
        if allowed.shape != (pods, nodes):
            raise InvalidInput(f"expected shape {(pods, nodes)}, got {allowed.shape}", field="candidates")
    crit = np.broadcast_to(np.asarray(critical, dtype=np.float64), (width,)).copy()
    if not np.isfinite(crit).all() or (crit <= 0).any() or (crit > 1).any():
        raise InvalidInput("critical loads must be in (0, 1]", field="critical")
    weights = weights or class_weights(names)
    for which, matrix in (("mu", weights.mu), ("nu", weights.nu)):
        if matrix.shape != (len(CLASSES), width):
            raise InvalidInput(f"expected {len(CLASSES)} × {width} weights", field=f"weights.{which}")
        _finite_non_negative(matrix, f"weights.{which}")
        sums = matrix.sum(axis=1)
        # A row of zeros: none of the weighted resources is in this model (its term is then 0).
        if (np.abs(sums - 1.0) > _SUM_TOLERANCE)[sums > 0].any():
            raise InvalidInput("each class's weights must sum to 1", field=f"weights.{which}")
    return _derive(names, cap, base, peak, pods_array, allowed, weights, crit)


def _derive(
    resources: tuple[str, ...],
    capacity: FloatArray,
    requested: FloatArray,
    used: FloatArray,
    requests: FloatArray,
    candidates: BoolArray,
    weights: ClassWeights,
    critical: FloatArray,
) -> BatchProblem:
    free = capacity - requested
    fits_alone = np.ones(candidates.shape, dtype=np.bool_)
    for r in range(len(resources)):
        fits_alone &= requests[:, r, None] <= free[None, :, r]
    usable = candidates & fits_alone
    counts = usable.sum(axis=1).astype(np.int64)
    table: npt.NDArray[np.int32] | None = None
    if not usable.all():
        width = int(counts.max(initial=0))
        table = np.zeros((len(requests), max(width, 1)), dtype=np.int32)
        step = max(1, _CLASSIFY_CHUNK // max(usable.shape[1], 1))
        for start in range(0, len(requests), step):
            # A stable sort of "not usable" puts each pod's usable nodes first, in node order.
            order = np.argsort(~usable[start : start + step], axis=1, kind="stable")
            table[start : start + step] = order[:, : table.shape[1]]
    return BatchProblem(
        resources=resources,
        capacity=capacity,
        requested=requested,
        used=used,
        requests=requests,
        allowed=candidates,
        candidates=usable,
        weights=weights,
        critical=critical,
        classes=classify(requests, capacity, resources),
        applicable=capacity > 0,
        counts=counts,
        table=table,
        overflow_scale=np.where(capacity > 0, capacity, 1.0),
    )


@dataclass(frozen=True, slots=True)
class Evaluation:
    """Per member of a population: cost (what the optimisers minimise), fitness (Σ S_N for the ``score``
    objective, Z_avg for ``z``), and overflow (Σ over nodes and resources of the amount over capacity,
    relative to capacity; 0 when feasible)."""

    cost: FloatArray
    fitness: FloatArray
    overflow: FloatArray


def pod_scores(
    problem: BatchProblem, assign: IntArray, load_used: FloatArray, pod_index: IntArray | None = None
) -> FloatArray:
    """S_N of each pod at its assigned node, straight from the formulas, where `load_used` (population,
    nodes, resources) is S_r + P_r summed per node (everything on the node, the pod included). Shape
    (population, pods). `Evaluator` computes the same sums faster."""
    population, pods = assign.shape
    nodes, width = problem.capacity.shape
    rows = pod_index if pod_index is not None else np.arange(pods, dtype=np.int64)
    flat = (assign + (np.arange(population, dtype=np.int64) * nodes)[:, None]).ravel()
    total = load_used.reshape(population * nodes, width)[flat].reshape(population, pods, width)
    cap = problem.capacity[assign]
    request = np.broadcast_to(problem.requests[rows], (population, pods, width))
    # R_r = 1 − P / (N − S) with S = total − P, clamped to [0, 1]; 1 when nothing is requested.
    free = np.maximum(cap - total + request, request)
    ratio = np.divide(request, free, out=np.zeros_like(free), where=free > 0)
    load = np.divide(total, cap, out=np.zeros_like(total), where=cap > 0)
    classes = problem.classes[rows[None, :], assign]
    mu = problem.weights.mu[classes]
    nu = problem.weights.nu[classes]
    if not problem.all_applicable:
        applicable = problem.applicable[assign]
        mu = mu * applicable
        nu = nu * applicable
        for w in (mu, nu):
            total_w = w.sum(axis=2, keepdims=True)
            np.divide(w, total_w, out=w, where=total_w > 0)
    return np.asarray((mu * (1.0 - ratio) + nu * (problem.critical - load)).sum(axis=2))


Objective = Literal["score", "z"]
OBJECTIVES: Final = ("score", "z")


class Evaluator:
    """Costs of populations of assignments ((population, pods) node indices, each a candidate of its pod),
    all members at once.

    ``score`` (the paper's): fitness Σ S_N, cost −fitness / pods. ``z``: fitness Z_avg of the requests'
    utilisation after the batch (the paper's evaluation metric), cost Z_avg. Either way an assignment that
    overfills a node costs INFEASIBLE_PENALTY + its overflow more, so it is worse than every feasible one.

    The S_N sum is regrouped so that only one term is per pod and resource: with weights per (class, node)
    (μ and ν spread over the resources the node has), S_N = Σμ − Σ_r μ_r P_r / free_r + Σ_r ν_r (T_r − u_r),
    where the load term depends on the node and the class only and is computed per node.
    """

    def __init__(self, problem: BatchProblem, population: int, objective: Objective = "score") -> None:
        if objective not in OBJECTIVES:
            raise InvalidInput(f"unknown {objective!r} (known: {', '.join(OBJECTIVES)})", field="objective")
        self.problem = problem
        self.population = population
        self.objective = objective
        nodes, width = problem.capacity.shape
        pods = problem.pods
        self._offsets = (np.arange(population, dtype=np.int64) * nodes)[:, None]
        self._weights = [np.tile(problem.requests[:, r], population) for r in range(width)]
        self._requests = np.tile(problem.requests, (population, 1))
        self._floor = np.maximum(self._requests, 1e-300)
        self._rows = (np.arange(pods, dtype=np.int64) * nodes)[None, :]
        self._classes = problem.classes.ravel()
        self._uniform = problem.all_applicable
        applicable = problem.applicable[None, :, :]  # (1, nodes, resources)
        tables = []
        for weights in (problem.weights.mu, problem.weights.nu):
            table = weights[:, None, :] * applicable  # (classes, nodes, resources)
            total = table.sum(axis=2, keepdims=True)
            np.divide(table, total, out=table, where=total > 0)
            tables.append(table)
        self._mu, self._nu = tables
        self._mu_sum = self._mu.sum(axis=2)  # (classes, nodes): 1, or 0 where no weighted resource applies
        self._nu_critical = (self._nu * problem.critical).sum(axis=2)
        self._cap = problem.capacity
        self._safe_cap = problem.overflow_scale
        self._base_z: FloatArray | None = None
        self._base_z_sum = 0.0

    def loads(self, assign: IntArray) -> FloatArray:
        """(population, nodes, resources): the batch's requests summed per node."""
        population = assign.shape[0]
        nodes, width = self._cap.shape
        flat = (assign + self._offsets[:population]).ravel()
        loads = np.empty((population * nodes, width))
        size = flat.size
        for r in range(width):
            loads[:, r] = np.bincount(flat, weights=self._weights[r][:size], minlength=population * nodes)
        return loads.reshape(population, nodes, width)

    def __call__(self, assign: IntArray) -> Evaluation:
        problem = self.problem
        assign = np.asarray(assign, dtype=np.int64)
        population, pods = assign.shape
        if population > self.population:
            raise InvalidInput(f"at most {self.population} members", field="population")
        if pods == 0:
            zero = np.zeros(population)
            return Evaluation(zero, zero.copy(), zero.copy())
        if self.objective == "z":
            return self._z(assign)
        loads = self.loads(assign)
        requested = problem.requested + loads
        overflow = (np.maximum(requested - self._cap, 0.0) / self._safe_cap).sum(axis=(1, 2))
        penalty = np.where(overflow > 0, INFEASIBLE_PENALTY + overflow, 0.0)

        nodes, width = self._cap.shape
        total = problem.used + loads
        util = total / self._safe_cap
        # Load term per (member, class, node): Σ_r ν (T_r − u_r).
        load_term = (self._nu_critical[None] - np.einsum("cjr,kjr->kcj", self._nu, util)).ravel()
        classes = np.take(self._classes, self._rows + assign).astype(np.int64)
        node_class = (classes * nodes + assign).ravel()
        member = np.arange(population, dtype=np.int64)[:, None] * (len(CLASSES) * nodes)
        per_pod = np.take(load_term, (classes * nodes + assign + member).ravel())
        per_pod += np.take(self._mu_sum, node_class)
        # Remaining-rate term per (pod, resource): μ_r P_r / free_r, free = N − S = what is free + P.
        flat = (assign + self._offsets[:population]).ravel()
        free = np.take((self._cap - total).reshape(population * nodes, width), flat, axis=0)
        size = population * pods
        request = self._requests[:size]
        free += request
        np.maximum(free, self._floor[:size], out=free)
        ratio = np.divide(request, free, out=free)
        if self._uniform:
            # Σ_r μ_r ratio_r for every class (a few multiply-adds per pod), then the pod's class.
            mu = problem.weights.mu
            by_class = ratio[:, :1] * mu[:, 0]
            for r in range(1, width):
                by_class += ratio[:, r : r + 1] * mu[:, r]
            per_pod -= np.take_along_axis(by_class, classes.reshape(-1, 1), axis=1)[:, 0]
        else:
            per_pod -= (ratio * np.take(self._mu.reshape(-1, width), node_class, axis=0)).sum(axis=1)
        fitness = per_pod.reshape(population, pods).sum(axis=1)
        return Evaluation(-fitness / pods + penalty, fitness, overflow)

    def _z(self, assign: IntArray) -> Evaluation:
        """Z_avg after the batch, from the nodes the batch touches only: a window of 20 pods on 1,500 nodes
        changes at most 20 of them, and recomputing Z of every node for every member cost ~75× more.
        Each (member, pod) entry stands for its node; a node holding k of the member's pods appears k
        times, so its entries count 1/k each."""
        problem = self.problem
        population, pods = assign.shape
        nodes = self._cap.shape[0]
        if self._base_z is None:
            self._base_z = z_per_node(problem.requested / self._safe_cap, problem.applicable)
            self._base_z_sum = float(self._base_z.sum())
        flat = (assign + self._offsets[:population]).ravel()
        node = assign.ravel()
        # Group the entries by (member, node): sorting a few hundred keys beats bincounts over every node.
        order = np.argsort(flat, kind="stable")
        ordered = flat[order]
        first = np.empty(ordered.size, dtype=np.bool_)
        first[0] = True
        np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
        starts = np.flatnonzero(first)
        group = np.empty(ordered.size, dtype=np.int64)
        group[order] = np.cumsum(first) - 1
        sums = np.add.reduceat(self._requests[: ordered.size][order], starts, axis=0)
        requested = sums[group] + problem.requested[node]
        share = 1.0 / np.diff(np.append(starts, ordered.size))[group]
        scale = self._safe_cap[node]
        over = (np.maximum(requested - self._cap[node], 0.0) / scale).sum(axis=1) * share
        overflow = over.reshape(population, pods).sum(axis=1)
        changed = (z_per_node(requested / scale, problem.applicable[node]) - self._base_z[node]) * share
        z = (self._base_z_sum + changed.reshape(population, pods).sum(axis=1)) / nodes
        penalty = np.where(overflow > 0, INFEASIBLE_PENALTY + overflow, 0.0)
        return Evaluation(z + penalty, z, overflow)


def evaluate(problem: BatchProblem, assign: IntArray, objective: Objective = "score") -> Evaluation:
    """`Evaluator` for one call."""
    assign = np.asarray(assign, dtype=np.int64)
    if assign.ndim == 1:
        assign = assign[None, :]
    return Evaluator(problem, assign.shape[0], objective)(assign)


def total_fitness(problem: BatchProblem, assignment: IntArray) -> float:
    """Σ S_N over the assigned pods of one assignment (-1 = not placed; those count nothing)."""
    assignment = np.asarray(assignment, dtype=np.int64)
    placed = np.flatnonzero(assignment >= 0)
    if len(placed) == 0:
        return 0.0
    loads = np.zeros_like(problem.capacity)
    np.add.at(loads, assignment[placed], problem.requests[placed])
    scores = pod_scores(problem, assignment[placed][None, :], (problem.used + loads)[None], placed)
    return float(scores.sum())


def feasible(problem: BatchProblem, assignment: IntArray) -> bool:
    """No node over capacity, every assigned pod on a candidate node (-1 = unassigned is allowed)."""
    assignment = np.asarray(assignment, dtype=np.int64)
    placed = assignment >= 0
    if not problem.candidates[np.flatnonzero(placed), assignment[placed]].all():
        return False
    loads = np.zeros_like(problem.capacity)
    np.add.at(loads, assignment[placed], problem.requests[placed])
    return bool((problem.requested + loads <= problem.capacity * (1 + 1e-12)).all())


def node_scores(problem: BatchProblem, pod: int, used: FloatArray) -> FloatArray:
    """S_N of placing pod `pod` on every node, given each node's S_r `used` (nodes, resources) without it.
    Nodes that are not candidates, or where the pod does not fit beside `requested`, are not excluded
    here: the caller masks them."""
    nodes = problem.nodes
    assign = np.arange(nodes, dtype=np.int64)[None, :]
    total = used + problem.requests[pod]
    rows = np.full(nodes, pod, dtype=np.int64)
    scores: FloatArray = pod_scores(problem, assign, total[None], rows)[0]
    return scores


def utilisation(problem: BatchProblem, assignment: IntArray) -> FloatArray:
    """(nodes, resources) requested / capacity after the assignment (-1 = not placed); 0 where the node has
    none of a resource."""
    assignment = np.asarray(assignment, dtype=np.int64)
    placed = assignment >= 0
    loads = problem.requested.copy()
    np.add.at(loads, assignment[placed], problem.requests[placed])
    return np.divide(loads, problem.capacity, out=np.zeros_like(loads), where=problem.applicable)


def z_per_node(util: FloatArray, applicable: BoolArray | None = None) -> FloatArray:
    """Paper eq. 32–33: Z(i) = sqrt(Σ_j (A(i,j) − mean_j A(i,·))²) over the resources the node has."""
    applicable = (
        np.ones(util.shape, dtype=np.bool_) if applicable is None else np.broadcast_to(applicable, util.shape)
    )
    count = applicable.sum(axis=-1, keepdims=True)
    total = (util * applicable).sum(axis=-1, keepdims=True)
    mean = np.divide(total, count, out=np.zeros(total.shape), where=count > 0)
    deviation = np.where(applicable, util - mean, 0.0)
    return np.asarray(np.sqrt((deviation**2).sum(axis=-1)))


def z_avg(util: FloatArray, applicable: BoolArray | None = None) -> float:
    """Paper eq. 34: the mean of Z(i) over nodes. Lower is better."""
    per_node = z_per_node(util, applicable)
    return float(per_node.mean()) if per_node.size else 0.0
