"""Trimaran sliding windows: per key (a node) and metric, a ring of `buckets` time buckets
covering `window` seconds, each holding count, sum and sum of squares, plus running totals, so a sample and a
query each cost O(1) (amortised: a bucket is cleared once per pass of the ring).

A key's *head* is the newest bucket it has seen. A sample in a bucket newer than the head moves the head
and clears the buckets that fall out; a sample inside the window (out of order or not) is added where it
belongs; a sample older than the window is dropped and counted. Queries take an explicit `now` and report
only buckets inside ``(now − window, now]``.

In a batch, the head moves to the batch's newest bucket first, so a sample that the same batch has already
pushed out of the window is counted as dropped (one by one it would have been added and then expired: the
window ends up the same either way).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from portraits.hourly import key_rows
from portraits.validation import SampleCounters, clean_batch, sample_matrix

__all__ = ["DEFAULT_BUCKETS", "DEFAULT_WINDOW", "SlidingWindows", "WindowStats"]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

DEFAULT_WINDOW: Final = 3600.0
DEFAULT_BUCKETS: Final = 60
_NO_HEAD: Final = np.iinfo(np.int64).min // 2


@dataclass(frozen=True, slots=True)
class WindowStats:
    """Per key and metric (arrays (keys, metrics)): samples in the window, their mean and population std;
    per key the time of the newest sample (Trimaran's window end: pods assumed after it are not in it)."""

    count: FloatArray
    mean: FloatArray
    std: FloatArray
    end: FloatArray


class SlidingWindows:
    def __init__(
        self,
        metrics: Sequence[str] = ("cpu", "memory", "bandwidth"),
        *,
        window: float = DEFAULT_WINDOW,
        buckets: int = DEFAULT_BUCKETS,
        max_future: float | None = 3600.0,
    ) -> None:
        if not (window > 0 and math.isfinite(window)) or buckets < 1:
            raise ValueError("window must be positive and buckets at least 1")
        self.metrics = tuple(metrics)
        self.metric_column = {name: i for i, name in enumerate(self.metrics)}
        self.window = float(window)
        self.buckets = int(buckets)
        self.width = self.window / self.buckets
        self.max_future = max_future
        self.keys: dict[str, int] = {}
        self.names: list[str] = []
        # (keys, metrics, buckets) × {count, sum, sum of squares}; totals (keys, metrics, 3).
        self.slots = np.zeros((0, len(self.metrics), self.buckets, 3))
        self.totals = np.zeros((0, len(self.metrics), 3))
        self.head = np.zeros(0, dtype=np.int64)
        self.newest = np.zeros(0)
        """Timestamp of the newest accepted sample per key."""
        self.counters = SampleCounters()

    def __len__(self) -> int:
        return len(self.names)

    def key_rows(self, keys: Iterable[str]) -> IntArray:
        return key_rows(self.keys, keys, self._add_key)

    def _add_key(self, key: str) -> int:
        row = len(self.names)
        if row == len(self.head):
            grown = max(16, 2 * row)
            slots = np.zeros((grown, *self.slots.shape[1:]))
            slots[:row] = self.slots
            totals = np.zeros((grown, *self.totals.shape[1:]))
            totals[:row] = self.totals
            head = np.full(grown, _NO_HEAD, dtype=np.int64)
            head[:row] = self.head
            newest = np.full(grown, -np.inf)
            newest[:row] = self.newest
            self.slots, self.totals, self.head, self.newest = slots, totals, head, newest
        self.keys[key] = row
        self.names.append(key)
        return row

    # ------------------------------------------------------------------------------------ updates

    def update(self, key: str, ts: float, values: Mapping[str, float], *, now: float | None = None) -> bool:
        row = self.key_rows((key,))
        matrix = sample_matrix(self.metric_column, values, self.counters)
        return self.update_batch(row, np.array([ts], dtype=np.float64), matrix, now=now) == 1

    def update_batch(
        self, rows: npt.ArrayLike, ts: npt.ArrayLike, values: npt.ArrayLike, *, now: float | None = None
    ) -> int:
        """Add samples (rows (n,), ts (n,), values (n, metrics), NaN = absent); returns how many landed in
        a window."""
        rows_a, ts_a, values_a = clean_batch(
            rows, ts, values, len(self.names), now=now, max_future=self.max_future, counters=self.counters
        )
        if len(rows_a) == 0:
            return 0
        bucket = np.floor(ts_a / self.width).astype(np.int64)
        touched, position = np.unique(rows_a, return_inverse=True)
        latest = np.full(len(touched), _NO_HEAD, dtype=np.int64)
        np.maximum.at(latest, position, bucket)
        self._advance(touched, latest)
        inside = bucket > self.head[rows_a] - self.buckets
        dropped = int((~inside).sum())
        if dropped:
            self.counters.dropped_old += dropped
            self.counters.accepted -= dropped
            rows_a, ts_a, bucket, values_a = rows_a[inside], ts_a[inside], bucket[inside], values_a[inside]
        np.maximum.at(self.newest, rows_a, ts_a)
        metrics = len(self.metrics)
        present = ~np.isnan(values_a)
        slot = bucket % self.buckets
        base = (rows_a[:, None] * metrics + np.arange(metrics)[None, :]) * self.buckets + slot[:, None]
        flat_slot = base[present]
        flat_total = (rows_a[:, None] * metrics + np.arange(metrics)[None, :])[present]
        x = values_a[present]
        moments = np.stack((np.ones_like(x), x, x * x), axis=1)
        # Scatter into the touched cells only (add.at accumulates repeated cells).
        np.add.at(self.slots.reshape(-1, 3), flat_slot, moments)
        np.add.at(self.totals.reshape(-1, 3), flat_total, moments)
        return len(rows_a)

    def _advance(self, rows: IntArray, new_head: IntArray) -> None:
        """Move the heads of `rows` forward to `new_head` where that is later, clearing (and subtracting
        from the totals) every bucket that falls out."""
        later = new_head > self.head[rows]
        moving = rows[later]
        if len(moving) == 0:
            return
        old = self.head[moving]
        new = new_head[later]
        slot_ids = np.arange(self.buckets)
        # Slot s holds the newest bucket ≡ s (mod buckets) not after the old head; it expires when that bucket
        # is at or before new − buckets. A key with no head yet has nothing to clear.
        held = old[:, None] - np.mod(old[:, None] - slot_ids[None, :], self.buckets)
        expired = (held <= (new - self.buckets)[:, None]) & (old != _NO_HEAD)[:, None]
        # A key that moves a whole window or more loses everything: clear it outright.
        whole = new - old >= self.buckets
        cleared = moving[whole]
        if len(cleared):
            self.slots[cleared] = 0.0
            self.totals[cleared] = 0.0
            expired &= ~whole[:, None]
        keys, slots = np.nonzero(expired)
        if len(keys):
            rows = moving[keys]
            # A key usually loses several buckets at once: subtract.at accumulates repeated rows.
            np.subtract.at(self.totals, rows, self.slots[rows, :, slots])
            self.slots[rows, :, slots] = 0.0
            self._tidy(moving)
        self.head[moving] = new

    def _tidy(self, rows: IntArray) -> None:
        # Subtraction leaves rounding dust: an empty window must read exactly empty.
        empty = self.totals[rows, :, 0] < 0.5
        if empty.any():
            r, m = np.nonzero(empty)
            self.totals[rows[r], m] = 0.0

    def advance_to(self, now: float) -> None:
        """Slide every window to end at `now` (buckets older than now − window are cleared)."""
        rows = np.flatnonzero(self.head[: len(self.names)] != _NO_HEAD)
        self._advance(rows, np.full(len(rows), math.floor(now / self.width), dtype=np.int64))

    # -------------------------------------------------------------------------------------- reads

    def stats(self, now: float) -> WindowStats:
        """Every key's window as of `now` (this slides the windows: time only moves forward)."""
        self.advance_to(now)
        size = len(self.names)
        count = self.totals[:size, :, 0]
        safe = np.maximum(count, 1.0)
        mean = np.where(count > 0, self.totals[:size, :, 1] / safe, 0.0)
        variance = np.where(count > 0, self.totals[:size, :, 2] / safe - mean * mean, 0.0)
        std = np.sqrt(np.maximum(variance, 0.0))
        return WindowStats(count.copy(), mean, std, self.newest[:size].copy())

    def key_stats(self, key: str, now: float) -> dict[str, tuple[float, float, int]]:
        """One key's (mean, std, count) per metric with data, as of `now`: O(1)."""
        row = self.keys[key]
        if self.head[row] != _NO_HEAD:
            self._advance(np.array([row]), np.array([math.floor(now / self.width)], dtype=np.int64))
        result = {}
        for column, metric in enumerate(self.metrics):
            count, total, squares = self.totals[row, column]
            if count >= 0.5:
                mean = total / count
                result[metric] = (mean, math.sqrt(max(squares / count - mean * mean, 0.0)), round(count))
        return result
