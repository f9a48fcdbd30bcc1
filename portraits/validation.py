"""Screening of sample batches before they touch an accumulator: bad samples are counted by reason and
left out, never raised, so one hostile record cannot stop an ingest loop or poison a portrait."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import numpy.typing as npt

from schemas.base import MAX_TIMESTAMP

__all__ = ["ABSURD_VALUE", "SampleCounters", "clean_batch", "sample_matrix"]

ABSURD_VALUE: Final = 1e18
"""Larger than any real metric in base units (an exabyte, a billion cores): such a value is a unit error or
garbage, and one of them would dominate a mean for days."""

REASON_NOT_FINITE: Final = "value not finite"
REASON_NEGATIVE: Final = "negative value"
REASON_ABSURD: Final = "absurd value"
REASON_BAD_TIME: Final = "timestamp not finite, negative or after year 9999"
REASON_FUTURE: Final = "timestamp in the future"
REASON_UNKNOWN_KEY: Final = "unknown key row"
REASON_EMPTY: Final = "no metric values"


@dataclass(slots=True)
class SampleCounters:
    accepted: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    ignored_metrics: int = 0
    """Values of metrics the store does not keep (not an error: other consumers may want them)."""
    dropped_old: int = 0
    """Samples older than a sliding window when they arrived."""

    @property
    def rejected_total(self) -> int:
        return sum(self.rejected.values())


def clean_batch(
    rows: npt.ArrayLike,
    ts: npt.ArrayLike,
    values: npt.ArrayLike,
    key_count: int,
    *,
    now: float | None,
    max_future: float | None,
    counters: SampleCounters,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The samples of a batch that may be used: (rows, ts, values) with every rejected sample removed and
    counted. NaN in `values` means "metric absent"; ±inf is rejected."""
    rows_a = np.asarray(rows, dtype=np.int64).reshape(-1)
    ts_a = np.asarray(ts, dtype=np.float64).reshape(-1)
    values_a = np.asarray(values, dtype=np.float64)
    if values_a.ndim != 2 or not (len(rows_a) == len(ts_a) == values_a.shape[0]):
        raise ValueError("rows (n,), ts (n,) and values (n, metrics) must describe the same n samples")
    bad = np.zeros(len(rows_a), dtype=np.bool_)

    def reject(mask: npt.ArrayLike, reason: str) -> None:
        new = np.asarray(mask, dtype=np.bool_) & ~bad
        count = int(new.sum())
        if count:
            counters.rejected[reason] += count
            bad[:] |= new

    reject((rows_a < 0) | (rows_a >= key_count), REASON_UNKNOWN_KEY)
    reject(~np.isfinite(ts_a) | (ts_a < 0) | (ts_a > MAX_TIMESTAMP), REASON_BAD_TIME)
    if now is not None and max_future is not None:
        reject(ts_a > now + max_future, REASON_FUTURE)
    present = ~np.isnan(values_a)
    reject(np.isinf(values_a).any(axis=1), REASON_NOT_FINITE)
    with np.errstate(invalid="ignore"):
        reject((values_a < 0).any(axis=1), REASON_NEGATIVE)
        reject((values_a > ABSURD_VALUE).any(axis=1), REASON_ABSURD)
    reject(~present.any(axis=1), REASON_EMPTY)
    if bad.any():
        keep = ~bad
        rows_a, ts_a, values_a = rows_a[keep], ts_a[keep], values_a[keep]
    counters.accepted += len(rows_a)
    return rows_a, ts_a, values_a


def sample_matrix(
    metric_column: Mapping[str, int], values: Mapping[str, float], counters: SampleCounters
) -> npt.NDArray[np.float64]:
    """One sample's values as a (1, metrics) row, NaN where absent; metrics the store does not keep are
    counted as ignored."""
    matrix = np.full((1, len(metric_column)), np.nan)
    for name, value in values.items():
        column = metric_column.get(name)
        if column is None:
            counters.ignored_metrics += 1
        else:
            matrix[0, column] = value
    return matrix
