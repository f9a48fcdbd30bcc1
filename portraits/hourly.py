"""Hourly resource portraits: per key (a workload or a node), hour of day and metric, a weighted
Welford accumulator (weight w, mean μ, M2), aged by exponential decay.

Ageing: a sample's weight halves every ``days / 2`` days, so the portrait is dominated by the last ``days``
days (a sample ``days`` old weighs 1/4, two ``days`` old 1/16). Decay rather than a ring of daily
accumulators because it keeps one accumulator per cell: 24 hours × 6 metrics × (w, μ, M2) in float64 is
3.4 KiB per key, where a 7-day ring would be seven times that.

Decay without touching every cell on every sample: weights are stored *inflated* relative to a per-key
epoch, a sample at time t weighing 2^((t − epoch)/half_life). Welford's update is linear in the weights, so
a common factor changes neither μ nor σ² = M2 / w; only when a key's samples run 30 half-lives past its
epoch is the key rescaled (one multiply over its cells) and the epoch moved, which keeps weights ≤ 2^30.

Accumulators merge exactly (Chan et al.), so partial portraits from partitions combine into the portrait a
single pass over all samples would give (up to float rounding). Clock and time zone are explicit: the hour of
a sample is that of ``ts + utc_offset`` seconds; nothing here reads the wall clock.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from portraits.validation import SampleCounters, clean_batch, sample_matrix

__all__ = [
    "DEFAULT_DAYS",
    "DEFAULT_METRICS",
    "DEFAULT_Z",
    "HOURS",
    "HourlyPortraits",
    "Portrait",
    "hour_of_day",
    "key_rows",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

HOURS: Final = 24
DEFAULT_DAYS: Final = 7.0
DEFAULT_Z: Final = 1.645
"""The one-sided 95 % point of a Gaussian: cap = μ + z·σ is exceeded about one hour in twenty."""
DEFAULT_METRICS: Final = ("cpu", "memory", "bandwidth", "disk", "llcmiss", "crpki")
_RESCALE_HALF_LIVES: Final = 30.0
_MAGIC: Final = b"EYP1"
_HEADER: Final = struct.Struct("<4sHHdd")  # magic, metrics, hours, epoch, half_life


def key_rows(index: dict[str, int], keys: Iterable[str], add: Callable[[str], int]) -> IntArray:
    # map() over the dict for the common case, Python only for the keys never seen.
    names = list(keys)
    rows = list(map(index.get, names))
    for position, row in enumerate(rows):
        if row is None:
            # The same new key may come twice in one batch: look again before adding.
            found = index.get(names[position])
            rows[position] = add(names[position]) if found is None else found
    return np.asarray(rows, dtype=np.int64)


def hour_of_day(ts: npt.ArrayLike, utc_offset: float = 0.0) -> IntArray:
    """Hour of day 0..23 of Unix timestamps seen from a zone `utc_offset` seconds east of UTC."""
    seconds = np.mod(np.asarray(ts, dtype=np.float64) + utc_offset, 86400.0)
    hours: IntArray = np.minimum((seconds // 3600.0).astype(np.int64), HOURS - 1)
    return hours


@dataclass(frozen=True, slots=True)
class Portrait:
    """One key's portrait: arrays (24, metrics) of mean and std, and whether each cell has data."""

    metrics: tuple[str, ...]
    mean: FloatArray
    std: FloatArray
    has_data: npt.NDArray[np.bool_]

    def cap(self, z: float = DEFAULT_Z) -> FloatArray:
        """Capacity recommendation μ + z·σ per hour and metric."""
        result: FloatArray = self.mean + z * self.std
        return result

    def column(self, metric: str) -> int:
        return self.metrics.index(metric)


class HourlyPortraits:
    """Portraits of many keys, as arrays (keys, 24, metrics); keys get rows on first sight."""

    def __init__(
        self,
        metrics: Sequence[str] = DEFAULT_METRICS,
        *,
        days: float = DEFAULT_DAYS,
        utc_offset: float = 0.0,
        max_future: float | None = 3600.0,
    ) -> None:
        if days <= 0 or not math.isfinite(days):
            raise ValueError("days must be a positive number")
        self.metrics = tuple(metrics)
        self.metric_column = {name: i for i, name in enumerate(self.metrics)}
        self.half_life = days * 86400.0 / 2.0
        self.utc_offset = utc_offset
        self.max_future = max_future
        """Samples more than this many seconds past the `now` given to an update are rejected (None: no
        check). A clock far in the future would otherwise rescale a key and wipe its history."""
        self.keys: dict[str, int] = {}
        self.names: list[str] = []
        width = len(self.metrics)
        self.weight = np.zeros((0, HOURS, width))
        self.mean = np.zeros((0, HOURS, width))
        self.m2 = np.zeros((0, HOURS, width))
        self.epoch = np.zeros(0)
        self.counters = SampleCounters()

    # --------------------------------------------------------------------------------------- keys

    def __len__(self) -> int:
        return len(self.names)

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def key_rows(self, keys: Iterable[str]) -> IntArray:
        """Rows of `keys`, adding rows for keys never seen."""
        return key_rows(self.keys, keys, self._add_key)

    def _add_key(self, key: str) -> int:
        row = len(self.names)
        if row == len(self.epoch):
            grown = max(16, 2 * row)
            shape = (grown, HOURS, len(self.metrics))
            for name in ("weight", "mean", "m2"):
                array = np.zeros(shape)
                array[:row] = getattr(self, name)
                setattr(self, name, array)
            epoch = np.full(grown, np.nan)
            epoch[:row] = self.epoch
            self.epoch = epoch
        self.keys[key] = row
        self.names.append(key)
        return row

    # ------------------------------------------------------------------------------------ updates

    def update(self, key: str, ts: float, values: Mapping[str, float], *, now: float | None = None) -> bool:
        """Add one sample; False (and counted) when it is rejected. Metrics this store does not keep are
        counted as ignored."""
        row = self.key_rows((key,))
        matrix = sample_matrix(self.metric_column, values, self.counters)
        return self.update_batch(row, np.array([ts], dtype=np.float64), matrix, now=now) == 1

    def update_batch(
        self, rows: npt.ArrayLike, ts: npt.ArrayLike, values: npt.ArrayLike, *, now: float | None = None
    ) -> int:
        """Add samples given as arrays: key rows (n,), timestamps (n,), values (n, metrics) with NaN where a
        sample lacks a metric. Returns how many samples were accepted. Vectorised: per-cell partial
        accumulators are built with bincount and merged into the store (Chan et al.)."""
        rows_a, ts_a, values_a = clean_batch(
            rows, ts, values, len(self.names), now=now, max_future=self.max_future, counters=self.counters
        )
        if len(rows_a) == 0:
            return 0
        self._move_epochs(rows_a, ts_a)
        weight = np.exp2((ts_a - self.epoch[rows_a]) / self.half_life)
        width = len(self.metrics)
        cells = (rows_a * HOURS + hour_of_day(ts_a, self.utc_offset)) * width
        present = ~np.isnan(values_a)
        flat = (cells[:, None] + np.arange(width)[None, :])[present]
        w = np.broadcast_to(weight[:, None], values_a.shape)[present]
        x = values_a[present]
        # Partial accumulators over the cells this batch touches only (a store-sized bincount would cost
        # O(keys) per batch).
        touched, position = np.unique(flat, return_inverse=True)
        batch_w: FloatArray = np.bincount(position, weights=w, minlength=len(touched)).astype(np.float64)
        with np.errstate(invalid="ignore", divide="ignore"):  # zero weights are dropped below (`keep`)
            batch_mean: FloatArray = np.bincount(position, weights=w * x, minlength=len(touched)) / batch_w
        # Second pass around the batch mean: Σ w(x − x̄)² without the cancellation of Σwx² − (Σwx)²/Σw.
        deviation = x - batch_mean[position]
        squares = w * deviation * deviation
        batch_m2: FloatArray = np.bincount(position, weights=squares, minlength=len(touched)).astype(
            np.float64
        )
        keep = batch_w > 0  # samples so old that their weight underflows add nothing
        if not keep.all():
            touched, batch_w, batch_mean, batch_m2 = (
                touched[keep],
                batch_w[keep],
                batch_mean[keep],
                batch_m2[keep],
            )
        self._merge_cells(touched, batch_w, batch_mean, batch_m2)
        return int(present.any(axis=1).sum())

    def _move_epochs(self, rows: IntArray, ts: FloatArray) -> None:
        """Give new keys an epoch, and rescale keys whose samples run too far past theirs."""
        keys, position = np.unique(rows, return_inverse=True)
        latest = np.full(len(keys), -np.inf)
        np.maximum.at(latest, position, ts)
        epoch = self.epoch[keys]
        moving = np.flatnonzero(
            np.isnan(epoch) | (latest - np.nan_to_num(epoch) > _RESCALE_HALF_LIVES * self.half_life)
        )
        for index in moving.tolist():
            row = int(keys[index])
            if not np.isnan(self.epoch[row]):
                factor = math.exp2(-(latest[index] - self.epoch[row]) / self.half_life)
                self.weight[row] *= factor
                self.m2[row] *= factor
            self.epoch[row] = latest[index]

    def _merge_cells(self, cells: IntArray, w_b: FloatArray, mean_b: FloatArray, m2_b: FloatArray) -> None:
        weight = self.weight.reshape(-1)
        mean = self.mean.reshape(-1)
        m2 = self.m2.reshape(-1)
        w_a, mean_a = weight[cells], mean[cells]
        total = w_a + w_b
        delta = mean_b - mean_a
        mean[cells] = mean_a + delta * (w_b / total)
        m2[cells] = m2[cells] + m2_b + delta * delta * (w_a * w_b / total)
        weight[cells] = total

    def merge(self, other: HourlyPortraits) -> None:
        """Fold another store's accumulators in (partial portraits of partitions, or a restored state)."""
        if other.metrics != self.metrics or other.half_life != self.half_life:
            raise ValueError("portraits merge only with the same metrics and ageing")
        for key, their_row in other.keys.items():
            self._merge_row(
                key,
                other.epoch[their_row],
                other.weight[their_row],
                other.mean[their_row],
                other.m2[their_row],
            )

    def _merge_row(
        self, key: str, epoch: float, weight: FloatArray, mean: FloatArray, m2: FloatArray
    ) -> None:
        if np.isnan(epoch):
            return
        row = int(self.key_rows((key,))[0])
        mine = self.epoch[row]
        if np.isnan(mine):
            self.epoch[row] = epoch
            scale = 1.0
        elif epoch > mine:
            # Bring this row to the later epoch (weights shrink), then fold theirs in as is.
            factor = math.exp2(-(epoch - mine) / self.half_life)
            self.weight[row] *= factor
            self.m2[row] *= factor
            self.epoch[row] = epoch
            scale = 1.0
        else:
            scale = math.exp2(-(mine - epoch) / self.half_life)
        base = row * HOURS * len(self.metrics)
        cells = base + np.arange(HOURS * len(self.metrics))
        w = weight.reshape(-1) * scale
        has = w > 0
        self._merge_cells(cells[has], w[has], mean.reshape(-1)[has], m2.reshape(-1)[has] * scale)

    # -------------------------------------------------------------------------------------- reads

    def portrait(self, key: str) -> Portrait | None:
        row = self.keys.get(key)
        if row is None:
            return None
        return self.portrait_of_row(row)

    def portrait_of_row(self, row: int) -> Portrait:
        weight = self.weight[row]
        has = weight > 0
        safe = np.where(has, weight, 1.0)
        variance = np.maximum(np.where(has, self.m2[row] / safe, 0.0), 0.0)
        return Portrait(self.metrics, self.mean[row].copy(), np.sqrt(variance), has)

    def effective_count(self, key: str, now: float) -> FloatArray:
        """Decayed sample counts (24, metrics) as of `now`: how much evidence each cell rests on."""
        row = self.keys[key]
        count: FloatArray = self.weight[row] * math.exp2(-(now - self.epoch[row]) / self.half_life)
        return count

    # ------------------------------------------------------------------------------ serialisation

    def to_bytes(self, key: str) -> bytes:
        """One key's accumulators, compactly (for a state table): a 24-byte header and three float64
        arrays, 3,480 bytes for the default six metrics."""
        row = self.keys[key]
        header = _HEADER.pack(_MAGIC, len(self.metrics), HOURS, float(self.epoch[row]), self.half_life)
        return header + np.stack((self.weight[row], self.mean[row], self.m2[row])).astype("<f8").tobytes()

    def load_bytes(self, key: str, data: bytes) -> None:
        """Merge a serialised portrait of `key` into this store (into an empty row it is a plain restore)."""
        if len(data) < _HEADER.size:
            raise ValueError("portrait bytes: truncated header")
        magic, width, hours, epoch, half_life = _HEADER.unpack_from(data)
        if magic != _MAGIC or width != len(self.metrics) or hours != HOURS:
            raise ValueError("portrait bytes: not a portrait of this store's metrics")
        if half_life != self.half_life:
            raise ValueError("portrait bytes: a different ageing half-life")
        expected = _HEADER.size + 3 * HOURS * width * 8
        if len(data) != expected:
            raise ValueError(f"portrait bytes: expected {expected} bytes, got {len(data)}")
        arrays = np.frombuffer(data, dtype="<f8", offset=_HEADER.size).reshape(3, HOURS, width)
        if not np.isfinite(arrays).all() or (arrays[0] < 0).any() or (arrays[2] < 0).any():
            raise ValueError("portrait bytes: non-finite or negative accumulators")
        self._merge_row(key, epoch, arrays[0], arrays[1], arrays[2])

    def nbytes_per_key(self) -> int:
        """In-memory bytes one key takes (the three accumulator arrays and its epoch)."""
        return 3 * HOURS * len(self.metrics) * 8 + 8
