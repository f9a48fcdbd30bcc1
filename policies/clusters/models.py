"""Cluster resource models (Karmada's ``spec.resourceModels``): grades, validation, grading, defaults.

A model is a list of grades; each grade gives, per resource, a range ``[min, max)`` in the resource's base
unit (cpu in millicores, memory in bytes). The grades' resources are the same and in the same order; the
ranges of one resource are contiguous from 0 up to ``MaxInt64`` (Karmada's validation, one error per rule).

A node's grade is Karmada's ``getIndex``: per resource, the last grade whose min is at most the node's free
amount; the node's grade is the lowest of those. Clusters report how many nodes they have per grade
(``status.resourceSummary.allocatableModelings``), and the model estimator counts replicas from those.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from schemas.exceptions import InvalidInput
from schemas.quantity import parse_quantity, validate_resource_name

__all__ = [
    "DEFAULT_MODELS",
    "MAX_INT64",
    "MAX_PODS_PER_MODEL_NODE",
    "ResourceModels",
    "default_models",
    "parse_resource_models",
]

MAX_INT64 = 2**63 - 1
"""Go's math.MaxInt64: the last grade's max of every resource (unbounded)."""

MAX_PODS_PER_MODEL_NODE = 110
"""Karmada's ``maxPodsCountPerNode``: a virtual node of a grade holds at most this many replicas."""

_GI = 2**30
_DEFAULT_CPU_CORES = (0, 1, 2, 4, 8, 16, 32, 64, 128)
_DEFAULT_MEMORY_GI = (0, 4, 16, 32, 64, 128, 256, 512, 1024)


@dataclass(frozen=True, slots=True, eq=False)
class ResourceModels:
    """Validated grades. ``mins[g][r]`` and ``maxs[g][r]`` are the range of `resources[r]` in the grade at
    position g (`grades[g]` is its number); positions follow the declaration order, as Karmada's do."""

    grades: tuple[int, ...]
    resources: tuple[str, ...]
    mins: tuple[tuple[int, ...], ...]
    maxs: tuple[tuple[int, ...], ...]
    position: dict[int, int] = field(init=False, repr=False)
    """Grade number → position."""
    _by_resource: tuple[tuple[int, ...], ...] = field(init=False, repr=False)
    _capacity_cache: dict[tuple[tuple[str, int], ...], tuple[int, ...]] = field(
        init=False, repr=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "position", {grade: i for i, grade in enumerate(self.grades)})
        by_resource = tuple(tuple(row[r] for row in self.mins) for r in range(len(self.resources)))
        object.__setattr__(self, "_by_resource", by_resource)

    def __len__(self) -> int:
        return len(self.grades)

    def grade_position(self, free: Mapping[str, int]) -> int:
        """The position of a node's grade given its free amounts (a missing resource counts 0, a negative
        amount too: an overcommitted node is in the lowest grade)."""
        position = len(self.grades) - 1
        for r, name in enumerate(self.resources):
            amount = free.get(name, 0)
            found = bisect_right(self._by_resource[r], amount if amount > 0 else 0) - 1
            position = min(position, found)
        return position if position > 0 else 0

    def capacities(self, request: Mapping[str, int]) -> tuple[int, ...]:
        """Replicas of `request` one node of each grade holds (Karmada's model nodes: the grade's mins as
        allocatable, 110 pod slots): min(110, min over requested resources ⌊min / request⌋); a requested
        resource the model lacks gives 0; ``pods`` is not a request (a replica is one pod). Cached per
        request, since many clusters share one model."""
        key = tuple(
            sorted((name, amount) for name, amount in request.items() if amount > 0 and name != "pods")
        )
        cached = self._capacity_cache.get(key)
        if cached is not None:
            return cached
        per_grade = []
        columns = {name: r for r, name in enumerate(self.resources)}
        for g in range(len(self.grades)):
            fits = MAX_PODS_PER_MODEL_NODE
            for name, amount in key:
                r = columns.get(name)
                if r is None:
                    fits = 0
                    break
                fits = min(fits, self.mins[g][r] // amount)
            per_grade.append(fits)
        result = tuple(per_grade)
        if len(self._capacity_cache) > 4096:
            self._capacity_cache.clear()
        self._capacity_cache[key] = result
        return result

    def to_documents(self) -> list[dict[str, Any]]:
        """Karmada's JSON form (quantities in base units; cpu with the ``m`` suffix)."""

        def wire(value: int, name: str) -> str | int:
            if value == MAX_INT64:
                return str(MAX_INT64)
            return f"{value}m" if name == "cpu" else value

        return [
            {
                "grade": grade,
                "ranges": [
                    {"name": name, "min": wire(self.mins[g][r], name), "max": wire(self.maxs[g][r], name)}
                    for r, name in enumerate(self.resources)
                ],
            }
            for g, grade in enumerate(self.grades)
        ]


def default_models() -> ResourceModels:
    """Karmada's default grades 0..8: cpu 0, 1, 2, 4, … 128 cores; memory 0, 4, 16, … 1024 Gi."""
    cpu = [cores * 1000 for cores in _DEFAULT_CPU_CORES]
    memory = [gi * _GI for gi in _DEFAULT_MEMORY_GI]
    grades = len(cpu)
    return ResourceModels(
        grades=tuple(range(grades)),
        resources=("cpu", "memory"),
        mins=tuple((cpu[g], memory[g]) for g in range(grades)),
        maxs=tuple(
            (cpu[g + 1], memory[g + 1]) if g + 1 < grades else (MAX_INT64, MAX_INT64) for g in range(grades)
        ),
    )


DEFAULT_MODELS = default_models()
"""Shared by every cluster that declares no models (their capacity cache is shared too)."""


def _bound(raw: object, name: str, where: str) -> int:
    # MaxInt64 is written in whole units ("9223372036854775807"), beyond what a quantity may hold: it is
    # the unbounded sentinel, whatever the resource's unit.
    if raw == MAX_INT64 or (isinstance(raw, str) and raw.strip() == str(MAX_INT64)):
        return MAX_INT64
    return parse_quantity(raw, name, field=where)


def _show(value: int, name: str) -> str:
    if value == MAX_INT64:
        return "MaxInt64"
    return f"{value}m" if name == "cpu" else str(value)


def parse_resource_models(raw: object, *, field: str = "resourceModels") -> ResourceModels:
    """Karmada's ``resourceModels`` list → validated `ResourceModels`; the first broken rule is an
    `InvalidInput` naming the field, the grade and the resource."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise InvalidInput("expected a list of {grade, ranges}", field=field)
    if not raw:
        raise InvalidInput("no grades (omit the field to use the default grades)", field=field)
    grades: list[int] = []
    names: list[list[str]] = []
    mins: list[list[int]] = []
    maxs: list[list[int]] = []
    for i, model in enumerate(raw):
        where = f"{field}[{i}]"
        if not isinstance(model, Mapping):
            raise InvalidInput("expected an object {grade, ranges}", field=where)
        unknown = sorted(set(model) - {"grade", "ranges"})
        if unknown:
            raise InvalidInput("unknown field", field=f"{where}.{unknown[0]}")
        grade = model.get("grade")
        if isinstance(grade, bool) or not isinstance(grade, int) or grade < 0:
            raise InvalidInput(f"expected a whole number >= 0, got {grade!r}", field=f"{where}.grade")
        ranges = model.get("ranges")
        if not isinstance(ranges, Sequence) or isinstance(ranges, str | bytes) or not ranges:
            raise InvalidInput("expected a non-empty list of {name, min, max}", field=f"{where}.ranges")
        row_names: list[str] = []
        row_mins: list[int] = []
        row_maxs: list[int] = []
        for j, item in enumerate(ranges):
            at = f"{where}.ranges[{j}]"
            if not isinstance(item, Mapping):
                raise InvalidInput("expected an object {name, min, max}", field=at)
            unknown = sorted(set(item) - {"name", "min", "max"})
            if unknown:
                raise InvalidInput("unknown field", field=f"{at}.{unknown[0]}")
            for key in ("name", "min", "max"):
                if key not in item:
                    raise InvalidInput("field required", field=f"{at}.{key}")
            name = item["name"]
            if not isinstance(name, str):
                raise InvalidInput("expected a resource name", field=f"{at}.name")
            validate_resource_name(name, field=f"{at}.name")
            if name in row_names:
                raise InvalidInput(f"grade {grade} lists {name!r} twice", field=f"{at}.name")
            row_names.append(name)
            row_mins.append(_bound(item["min"], name, f"{at}.min"))
            row_maxs.append(_bound(item["max"], name, f"{at}.max"))
        grades.append(grade)
        names.append(row_names)
        mins.append(row_mins)
        maxs.append(row_maxs)
    _validate(grades, names, mins, maxs, field)
    return ResourceModels(
        grades=tuple(grades),
        resources=tuple(names[0]),
        mins=tuple(tuple(row) for row in mins),
        maxs=tuple(tuple(row) for row in maxs),
    )


def _validate(
    grades: list[int], names: list[list[str]], mins: list[list[int]], maxs: list[list[int]], field: str
) -> None:
    """Karmada's ValidateClusterResourceModels, rule by rule, in its order."""
    seen: dict[int, int] = {}
    last = len(grades) - 1
    for i, grade in enumerate(grades):
        where = f"{field}[{i}]"
        if grade in seen:
            raise InvalidInput(
                f"grade {grade} is declared twice ({field}[{seen[grade]}] and {where}): "
                "grades must be unique",
                field=f"{where}.grade",
            )
        seen[grade] = i
        if i and len(names[i]) != len(names[i - 1]):
            raise InvalidInput(
                f"grade {grade} has {len(names[i])} resources, grade {grades[i - 1]} has "
                f"{len(names[i - 1])}: every grade must list the same resources in the same order",
                field=f"{where}.ranges",
            )
        for j, name in enumerate(names[i]):
            at = f"{where}.ranges[{j}]"
            low, high = mins[i][j], maxs[i][j]
            if high <= low:
                raise InvalidInput(
                    f"grade {grade} {name}: max ({_show(high, name)}) must be greater than min "
                    f"({_show(low, name)})",
                    field=f"{at}.max",
                )
            if i == 0:
                if low != 0:
                    raise InvalidInput(
                        f"grade {grade} {name}: the first grade's min must be 0, got {_show(low, name)}",
                        field=f"{at}.min",
                    )
            elif names[i - 1][j] != name:
                raise InvalidInput(
                    f"grade {grade} lists {name!r} where grade {grades[i - 1]} lists {names[i - 1][j]!r}: "
                    "every grade must list the same resources in the same order",
                    field=f"{at}.name",
                )
            elif maxs[i - 1][j] != low:
                raise InvalidInput(
                    f"grade {grade} {name}: min ({_show(low, name)}) must equal the max of grade "
                    f"{grades[i - 1]} ({_show(maxs[i - 1][j], name)}): ranges must be contiguous and "
                    "must not overlap",
                    field=f"{at}.min",
                )
            if i == last and high != MAX_INT64:
                raise InvalidInput(
                    f"grade {grade} {name}: the last grade's max must be MaxInt64 ({MAX_INT64}), "
                    f"got {_show(high, name)}",
                    field=f"{at}.max",
                )
