"""Arithmetic the load-aware and portrait plugins share."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np
import numpy.typing as npt

from policies.framework.contract import BoolArray, IntArray
from policies.snapshot import RowCursor, Snapshot

if TYPE_CHECKING:
    from portraits.assume import PodLoad

T = TypeVar("T")

Check = tuple[str, BoolArray]
"""A filter's reason and, per row, whether the row fails for it."""

Rows = IntArray | slice | int
"""What a `RowTable`'s derive function is asked for: every row (a slice), some (an index array) or one."""

__all__ = [
    "Check",
    "RowTable",
    "Rows",
    "min_max",
    "passing",
    "pick",
    "rejections",
    "round_half_away",
    "round_half_away_scalar",
]

_FEW_ROWS = 16
"""Up to this many changed rows, a `RowTable` derives them one by one on numpy scalars: at a row or two (what
one placement changes) numpy's cost per call is most of the cost, and a scalar operation costs a tenth."""


class PerLoad(Generic[T]):
    """What a plugin derives from a pod load, kept by the load's arrays: the pods of one workload share
    them (`NodeUsage.pod_load`), and deriving costs more than a cheap cycle's plugin. The newest `size` loads
    are kept (a few KiB each)."""

    __slots__ = ("_derive", "_known", "_size")

    def __init__(self, derive: Callable[[PodLoad], T], size: int = 1024) -> None:
        self._derive = derive
        self._size = size
        self._known: dict[tuple[int, int], tuple[PodLoad, T]] = {}

    def get(self, load: PodLoad) -> T:
        key = (id(load.mean), id(load.var))
        found = self._known.get(key)
        # The kept load holds its arrays alive, so their ids cannot be reused while it is here.
        if found is not None and found[0].mean is load.mean and found[0].var is load.var:
            return found[1]
        value = self._derive(load)
        if len(self._known) >= self._size:
            del self._known[next(iter(self._known))]  # oldest first
        self._known[key] = (load, value)
        return value


def pick(condition: Any, chosen: Any, other: Any) -> Any:
    """np.where, also for one row's scalars (where np.where would cost as much as all the rest)."""
    if isinstance(condition, np.ndarray):
        return np.where(condition, chosen, other)
    return chosen if condition else other


class RowTable:
    """Per-row values a plugin derives from the rows alone (not from the pod), one array per column, kept for
    every row and recomputed only for the rows changed since (`RowCursor`, by the given kinds of change).

    `derive(snapshot, rows)` returns the columns for `rows`: a slice or an index array, and, unless `scalar`
    is off, one row as an int, where it gets numpy scalars and must give the same values as the arrays would
    (the same operations, with `pick` for np.where; leave it off for functions such as np.power, whose
    array loops need not round as the scalar ones do)."""

    __slots__ = ("columns", "cursor", "derive", "scalar")

    def __init__(
        self, derive: Callable[[Snapshot, Rows], tuple[Any, ...]], *kinds: str, scalar: bool = True
    ) -> None:
        self.derive = derive
        self.cursor = RowCursor(*kinds)
        self.scalar = scalar
        self.columns: tuple[npt.NDArray[Any], ...] = ()

    def refresh(self, snapshot: Snapshot) -> bool:
        """Bring the columns up to date; True when any row was recomputed."""
        changed = self.cursor.stale(snapshot)
        if changed is None:
            # Copies: a column over every row may be a view of the snapshot's own arrays.
            self.columns = tuple(
                np.array(column) for column in self.derive(snapshot, slice(0, snapshot.rows))
            )
        elif len(changed) > _FEW_ROWS or (len(changed) and not self.scalar):
            for column, values in zip(self.columns, self.derive(snapshot, changed), strict=True):
                column[changed] = values
        elif len(changed):
            for row in set(changed.tolist()):
                for column, value in zip(self.columns, self.derive(snapshot, row), strict=True):
                    column[row] = value
        else:
            return False
        return True


def round_half_away(values: npt.ArrayLike) -> IntArray:
    """Go's math.Round (half away from zero), exactly. np.rint is exact (it rounds to nearest, ties to even),
    and x − rint(x) is exact too, so only the ties need another look; ⌊x + 0.5⌋ would not be exact
    (0.49999999999999994 + 0.5 rounds to 1.0)."""
    given = np.asarray(values, dtype=np.float64)
    x = given.reshape(-1)
    rounded = np.rint(x)
    fraction = x - rounded
    tie = np.abs(fraction, out=fraction) == 0.5
    if tie.any():
        away = tie & (np.abs(rounded) < np.abs(x))
        rounded[away] += np.sign(x[away])
    result: IntArray = rounded.astype(np.int64).reshape(given.shape)
    return result[()] if result.ndim == 0 else result


def round_half_away_scalar(value: float) -> int:
    """`round_half_away` of one number in plain Python: the same arithmetic, without numpy's cost per call."""
    magnitude = abs(value)
    whole = math.floor(magnitude)
    rounded = whole + 1 if magnitude - whole >= 0.5 else whole
    return -rounded if value < 0 else rounded


def min_max(values: npt.NDArray[np.float64], low: float | None = None) -> npt.NDArray[np.float64]:
    """Min-max normalisation to [0, 1]; all equal (or a single value) → 1 everywhere. `low`: the minimum,
    when the caller has it already."""
    if len(values) == 0:
        return values
    low, high = float(values.min()) if low is None else low, float(values.max())
    if high - low <= 1e-12 * max(1.0, abs(high)):
        return np.ones_like(values)
    result: npt.NDArray[np.float64] = (values - low) / (high - low)
    return result


def passing(checks: list[Check]) -> BoolArray | None:
    """True where a row fails none of the checks; None (all pass) when there are no checks."""
    if not checks:
        return None
    failed = checks[0][1].copy()
    for _, more in checks[1:]:
        failed |= more
    result: BoolArray = ~failed
    return result


def rejections(checks: list[Check], count: int) -> list[list[str]]:
    """Per row, the reasons of the checks it fails."""
    # Plain lists first: indexing a numpy array one element at a time costs ten times more.
    columns = [(reason, failed.tolist()) for reason, failed in checks]
    return [[reason for reason, failed in columns if failed[i]] for i in range(count)]
