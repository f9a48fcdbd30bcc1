"""The metrics agent's pure core: metric samples in, compact summaries for placement out.

Node-level samples (``pod`` absent) feed the node's sliding windows (cpu, memory, bandwidth) and hourly node
portrait; pod-level samples feed the portrait of their workload (the pod's name when it has none). Nothing
here imports Faust or Kafka or reads a clock: the agent, `eyrie replay --offline` and tests feed the same
code and get the same summaries.

When a summary goes out is defined sample by sample, in arrival order, per node, in event time:

- A node's clock is the newest ``ts`` among its accepted samples (an out-of-order sample does not move it).
- After each sample, a summary is due when the node never had one, when its clock is `summary_interval` or
  more past the last summary's, or when a window mean moved by more than `move_threshold` of the last
  summary's value (a metric appearing in or leaving the window counts as a move).
- A due summary carries the portrait and ``seen`` when the node never sent them or its clock is
  `portrait_interval` or more past the last ones; otherwise both are None.
- A workload summary (always with its portrait) is due on the workload's first sample and then whenever
  its clock is `portrait_interval` past the last one.

`ingest` computes what feeding the samples one at a time would (the window each sample would have seen, the
portrait as of the sample that triggers a summary), but vectorised over the batch, so *which* summaries go
out does not depend on how a stream was cut into batches (short of a mean within rounding of the threshold).
Their float values are bit-for-bit identical for identical batches and depend only on the key's own samples;
across different cuts they can differ in the last bits, because the stores add partial sums per batch.

Missing portrait cells (an hour in which a metric was never sampled) are None, not (0, 0): a workload cell
without data must fall back to the pod's request (AssumePodOnNode's rule), which a measured zero would hide.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from portraits.hourly import DEFAULT_METRICS, HOURS, HourlyPortraits, Portrait, hour_of_day
from portraits.validation import SampleCounters, clean_batch
from portraits.window import DEFAULT_BUCKETS, DEFAULT_WINDOW, SlidingWindows
from schemas.events import MetricSample
from schemas.exceptions import ConfigError, InvalidInput

__all__ = [
    "PORTRAIT_METRICS",
    "WINDOW_METRICS",
    "HourCells",
    "MetricsCore",
    "NodeSummary",
    "Summary",
    "WorkloadSummary",
    "summary_from_json",
]

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

WINDOW_METRICS: Final = ("cpu", "memory", "bandwidth")
"""The same as `policies.usage.WINDOW_METRICS` (a test holds them together; streams may not be imported by
policies, and importing policies here would pull the whole scheduler into the metrics worker)."""
PORTRAIT_METRICS: Final = DEFAULT_METRICS

HourCells = list[tuple[float, float] | None]
"""24 hourly (mean, std) pairs of one metric; None where the metric was never sampled in that hour."""

_NAME_LIMIT: Final = 253
_ABSENT: Final = -1.0
"""A window mean that has no data: metric values are never negative, so -1 cannot be a real mean."""
_COLUMN_CACHE: Final = 1024
"""Distinct value-name tuples whose column lists are remembered (bounded: names come from the wire)."""

_NODE_MAGIC: Final = b"EYN1"
_NODE_STATE: Final = struct.Struct(f"<4sBBddd{len(WINDOW_METRICS)}d{HOURS}d")
"""magic, unsent summary, unsent portrait, clock, last summary, last portrait, last means, seen."""
_WORKLOAD_MAGIC: Final = b"EYW1"
_WORKLOAD_STATE: Final = struct.Struct("<4sBdd")
"""magic, unsent portrait, clock, last summary."""


# ------------------------------------------------------------------------------------------- summaries


@dataclass(frozen=True, slots=True)
class NodeSummary:
    """What placement learns about a node: its window, and now and then its hourly portrait."""

    node: str
    ts: float
    """Event time of the newest sample included (the node's clock when the summary was decided)."""
    window: dict[str, tuple[float, float]]
    """metric → (mean, std) over the sliding window in base units (cpu in cores); no data: absent."""
    window_end: float
    """ts of the newest sample in the window; -inf when the node never sent a window metric."""
    portrait: dict[str, HourCells] | None
    """metric → 24 hourly (mean, std) or None per hour without data; None when not sent this time."""
    seen: list[float] | None
    """Per hour of day, the ts of the newest sample in `portrait` (-inf: never): a pod placed at ``at`` is
    in hour h of the portrait only once ``seen[h] > at`` (`NodeUsage.set_node_portrait`)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "node",
            "node": self.node,
            "ts": self.ts,
            "window": {metric: [mean, std] for metric, (mean, std) in self.window.items()},
            "window_end": None if self.window_end == -math.inf else self.window_end,
            "portrait": None if self.portrait is None else _cells_to_json(self.portrait),
            "seen": None if self.seen is None else [None if t == -math.inf else t for t in self.seen],
        }

    @classmethod
    def from_json(cls, data: object) -> NodeSummary:
        fields = _fields(data, "node", ("node", "ts", "window", "window_end", "portrait", "seen"))
        window_raw = fields["window"]
        if not isinstance(window_raw, dict):
            raise InvalidInput("expected an object {metric: [mean, std]}", field="window")
        window: dict[str, tuple[float, float]] = {}
        for metric, pair in window_raw.items():
            if metric not in WINDOW_METRICS:
                raise InvalidInput(
                    f"not a window metric (known: {', '.join(WINDOW_METRICS)})", field=f"window.{metric}"
                )
            window[metric] = _pair(pair, f"window.{metric}")
        end = fields["window_end"]
        window_end = -math.inf if end is None else _number(end, "window_end")
        portrait = None if fields["portrait"] is None else _cells_from_json(fields["portrait"], "portrait")
        seen_raw = fields["seen"]
        seen = None
        if seen_raw is not None:
            if not isinstance(seen_raw, list) or len(seen_raw) != HOURS:
                raise InvalidInput(f"expected {HOURS} timestamps or nulls", field="seen")
            seen = [-math.inf if t is None else _number(t, f"seen.{hour}") for hour, t in enumerate(seen_raw)]
        if (portrait is None) != (seen is None):
            raise InvalidInput("must be given exactly when portrait is", field="seen")
        return cls(
            node=_name(fields["node"], "node"),
            ts=_number(fields["ts"], "ts"),
            window=window,
            window_end=window_end,
            portrait=portrait,
            seen=seen,
        )

    def to_portrait(self) -> Portrait | None:
        """The portrait as `NodeUsage.set_node_portrait` takes it (with ``seen=self.seen``), or None."""
        return None if self.portrait is None else _portrait(self.portrait)


@dataclass(frozen=True, slots=True)
class WorkloadSummary:
    """A workload's hourly portrait, learnt from its pods' samples."""

    workload: str
    ts: float
    """Event time of the newest sample included."""
    portrait: dict[str, HourCells]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "workload",
            "workload": self.workload,
            "ts": self.ts,
            "portrait": _cells_to_json(self.portrait),
        }

    @classmethod
    def from_json(cls, data: object) -> WorkloadSummary:
        fields = _fields(data, "workload", ("workload", "ts", "portrait"))
        return cls(
            workload=_name(fields["workload"], "workload"),
            ts=_number(fields["ts"], "ts"),
            portrait=_cells_from_json(fields["portrait"], "portrait"),
        )

    def to_portrait(self) -> Portrait | None:
        """The portrait as `NodeUsage.set_workload_portrait` takes it (never None: kept for symmetry)."""
        return _portrait(self.portrait)


Summary = NodeSummary | WorkloadSummary


def summary_from_json(data: object) -> Summary:
    """A node or workload summary, told apart by ``kind``."""
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind == "node":
        return NodeSummary.from_json(data)
    if kind == "workload":
        return WorkloadSummary.from_json(data)
    raise InvalidInput("expected 'node' or 'workload'", field="kind")


def _fields(data: object, kind: str, names: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise InvalidInput(f"a {kind} summary must be a JSON object")
    for key in data:
        if key != "kind" and key not in names:
            raise InvalidInput("unknown field", field=str(key))
    if data.get("kind", kind) != kind:
        raise InvalidInput(f"expected {kind!r}", field="kind")
    missing = next((name for name in names if name not in data), None)
    if missing is not None:
        raise InvalidInput("field required", field=missing)
    return data


def _name(value: object, field: str) -> str:
    if not isinstance(value, str) or not 1 <= len(value) <= _NAME_LIMIT:
        raise InvalidInput(f"expected a non-empty string of at most {_NAME_LIMIT} characters", field=field)
    return value


def _number(value: object, field: str) -> float:
    """A finite number >= 0 (JSON ints included, booleans not)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
        raise InvalidInput("expected a finite number >= 0", field=field)
    return float(value)


def _pair(value: object, field: str) -> tuple[float, float]:
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise InvalidInput("expected [mean, std]", field=field)
    return _number(value[0], field), _number(value[1], field)


def _cells_to_json(portrait: Mapping[str, HourCells]) -> dict[str, list[list[float] | None]]:
    return {
        metric: [None if cell is None else [cell[0], cell[1]] for cell in cells]
        for metric, cells in portrait.items()
    }


def _cells_from_json(value: object, field: str) -> dict[str, HourCells]:
    if not isinstance(value, dict):
        raise InvalidInput(f"expected an object {{metric: [[mean, std] or null] x {HOURS}}}", field=field)
    portrait: dict[str, HourCells] = {}
    for metric, cells in value.items():
        where = f"{field}.{metric}"
        if metric not in PORTRAIT_METRICS:
            raise InvalidInput(f"not a portrait metric (known: {', '.join(PORTRAIT_METRICS)})", field=where)
        if not isinstance(cells, list) or len(cells) != HOURS:
            raise InvalidInput(f"expected {HOURS} entries [mean, std] or null", field=where)
        portrait[metric] = [
            None if cell is None else _pair(cell, f"{where}.{hour}") for hour, cell in enumerate(cells)
        ]
    return portrait


def _portrait(cells: Mapping[str, HourCells]) -> Portrait:
    width = len(PORTRAIT_METRICS)
    mean = np.zeros((HOURS, width))
    std = np.zeros((HOURS, width))
    has = np.zeros((HOURS, width), dtype=np.bool_)
    for metric, hours in cells.items():
        column = PORTRAIT_METRICS.index(metric)
        for hour, cell in enumerate(hours):
            if cell is not None:
                mean[hour, column], std[hour, column] = cell
                has[hour, column] = True
    return Portrait(PORTRAIT_METRICS, mean, std, has)


def _cells(portrait: Portrait) -> dict[str, HourCells]:
    """A stored portrait as summary cells: metrics with no data at all are left out."""
    result: dict[str, HourCells] = {}
    means, stds, has = portrait.mean.T.tolist(), portrait.std.T.tolist(), portrait.has_data.T.tolist()
    for metric, mean, std, present in zip(portrait.metrics, means, stds, has, strict=True):
        if any(present):
            result[metric] = [(m, s) if p else None for m, s, p in zip(mean, std, present, strict=True)]
    return result


# ---------------------------------------------------------------------------------------- array helpers


def _grown(array: npt.NDArray[Any], size: int, fill: float) -> npt.NDArray[Any]:
    """`array` with at least `size` rows (doubling), new rows set to `fill`."""
    have = len(array)
    if size <= have:
        return array
    result = np.full((max(16, 2 * have, size), *array.shape[1:]), fill, dtype=array.dtype)
    result[:have] = array
    return result


def _group_cummax(group: IntArray, rank: IntArray, size: int) -> IntArray:
    """Running maximum of `rank` (ints in -1..size-1, -1 for "nothing") within runs of equal, sorted `group`.
    Shifting each group above the previous one lets one accumulate serve every group."""
    span = size + 1
    shift = group * span
    result: IntArray = np.maximum.accumulate(shift + rank + 1) - shift - 1
    return result


def _group_cumsum(values: FloatArray, starts: IntArray, group: IntArray) -> FloatArray:
    """Running sum along axis 0 within groups (runs starting at `starts`), added left to right inside each
    group as a per-group cumsum would: one global cumsum would make a key's bits depend on the keys sorted
    before it. Round k adds the k-th entry of every group long enough, so rounds = the longest group."""
    result = values.copy()
    position = np.arange(len(values)) - starts[group]
    if len(values) == 0 or position.max() == 0:
        return result
    by_position = np.argsort(position, kind="stable")
    bounds = np.cumsum(np.bincount(position))
    for low, high in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        current = by_position[low:high]
        result[current] += result[current - 1]
    return result


@dataclass(frozen=True, slots=True)
class _Groups:
    """A batch's samples sorted by key row (stable, so each key's samples stay in arrival order)."""

    order: IntArray
    """Sorted position → position in the batch."""
    rows: IntArray
    """Per sorted sample, its key row."""
    group: IntArray
    """Per sorted sample, its group number."""
    starts: IntArray
    ends: IntArray
    keys: IntArray
    """Per group, its key row."""

    @classmethod
    def of(cls, rows: IntArray) -> _Groups:
        order = np.argsort(rows, kind="stable")
        ranked = rows[order]
        starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
        ends = np.r_[starts[1:], len(ranked)]
        group = np.repeat(np.arange(len(starts)), ends - starts)
        return cls(order, ranked, group, starts, ends, ranked[starts])

    def running_max(self, ts: FloatArray, start: FloatArray) -> FloatArray:
        """Per sorted sample, max(start of its group, ts of its group's samples so far); NaN ts is skipped
        (and gives -inf while a group has seen none)."""
        known = ~np.isnan(ts)
        unique, inverse = np.unique(ts[known], return_inverse=True)
        rank = np.full(len(ts), -1, dtype=np.int64)
        rank[known] = inverse
        running = _group_cummax(self.group, rank, len(unique))
        values = np.where(running >= 0, unique[np.maximum(running, 0)] if len(unique) else -np.inf, -np.inf)
        result: FloatArray = np.maximum(values, start[self.group])
        return result


# ------------------------------------------------------------------------------------------------ core


@dataclass(frozen=True, slots=True)
class _WindowPath:
    """Per sorted node sample: window count, sum and sum of squares per metric as of that sample."""

    moments: FloatArray
    """(samples, window metrics, 3): count, Σx, Σx²."""
    end: FloatArray
    """ts of the newest sample in the window."""
    dropped: int
    """Window samples already older than the window when they arrived."""

    def means(self) -> FloatArray:
        count = self.moments[:, :, 0]
        has = count >= 0.5
        mean = np.maximum(self.moments[:, :, 1] / np.maximum(count, 1.0), 0.0)  # see `_window_stats`
        result: FloatArray = np.where(has, mean, _ABSENT)
        return result


def _window_stats(moments: FloatArray) -> list[dict[str, tuple[float, float]]]:
    """(k, metrics, 3) moments → per entry {metric: (mean, std)}, computed as `SlidingWindows.key_stats`
    computes them (the same IEEE operations, so the same bits), but for k entries at once."""
    count, total, squares = moments[:, :, 0], moments[:, :, 1], moments[:, :, 2]
    has = count >= 0.5
    safe = np.where(has, count, 1.0)
    # Sums that samples left the window from are running totals less the buckets pushed out: with tiny values
    # (1e-300 next to 5e-324) the difference can round below zero, and a negative mean is refused on the
    # sequencer (`NodeSummary.from_json`), so the summary would be lost. Metric values are never negative.
    mean = np.maximum(total / safe, 0.0)
    std = np.sqrt(np.maximum(squares / safe - mean * mean, 0.0))
    return [
        {metric: (m, s) for metric, h, m, s in zip(WINDOW_METRICS, hs, ms, ss, strict=True) if h}
        for hs, ms, ss in zip(has.tolist(), mean.tolist(), std.tolist(), strict=True)
    ]


class MetricsCore:
    """Windows and portraits of one metrics partition, and the decisions of when to summarise them."""

    def __init__(
        self,
        *,
        summary_interval: float = 10.0,
        move_threshold: float = 0.05,
        portrait_interval: float = 300.0,
        window: float = DEFAULT_WINDOW,
        buckets: int = DEFAULT_BUCKETS,
        days: int = 7,
        utc_offset: float = 0.0,
        max_future: float | None = 3600.0,
    ) -> None:
        for name, value in (
            ("summary_interval", summary_interval),
            ("move_threshold", move_threshold),
            ("portrait_interval", portrait_interval),
        ):
            if not 0 <= value < math.inf:
                raise ConfigError(f"{name} must be a finite number >= 0, got {value}")
        if not math.isfinite(utc_offset):
            raise ConfigError(f"utc_offset must be finite, got {utc_offset}")
        self.summary_interval = float(summary_interval)
        self.move_threshold = float(move_threshold)
        self.portrait_interval = float(portrait_interval)
        self.utc_offset = float(utc_offset)
        self.max_future = max_future
        """Samples more than this past the `now` given to `ingest` are rejected (no `now`: no check)."""
        try:
            # The stores re-screen what they are given; this core screens first, once, with its own counters.
            self.windows = SlidingWindows(WINDOW_METRICS, window=window, buckets=buckets, max_future=None)
            self.node_portraits = HourlyPortraits(
                PORTRAIT_METRICS, days=days, utc_offset=utc_offset, max_future=None
            )
            self.workload_portraits = HourlyPortraits(
                PORTRAIT_METRICS, days=days, utc_offset=utc_offset, max_future=None
            )
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        self.counters = SampleCounters()
        """Every sample given to `ingest`: accepted, rejected by reason, metric values ignored (names no
        portrait keeps), and node samples too old for the window (still accepted: they feed the portrait)."""
        self._column = {metric: i for i, metric in enumerate(PORTRAIT_METRICS)}
        self._window_columns = np.array([self._column[m] for m in WINDOW_METRICS])
        self._columns: dict[tuple[str, ...], tuple[int, ...]] = {}
        # Per node row (rows shared by `windows` and `node_portraits`, which always learn keys together).
        self._clock = np.zeros(0)
        self._last = np.zeros(0)
        self._last_portrait = np.zeros(0)
        self._last_means = np.zeros((0, len(WINDOW_METRICS)))
        self._seen = np.zeros((0, HOURS))
        self._unsent = np.zeros(0, dtype=np.bool_)
        self._unsent_portrait = np.zeros(0, dtype=np.bool_)
        # Per workload row of `workload_portraits`.
        self._w_clock = np.zeros(0)
        self._w_last = np.zeros(0)
        self._w_unsent = np.zeros(0, dtype=np.bool_)

    # --------------------------------------------------------------------------------------------- keys

    def _node_rows(self, names: Sequence[str]) -> IntArray:
        rows = self.windows.key_rows(names)
        if self.node_portraits.key_rows(names).tolist() != rows.tolist():
            raise AssertionError("node rows of the windows and the portraits diverged")
        size = len(self.windows)
        if size > len(self._clock):
            self._clock = _grown(self._clock, size, -math.inf)
            self._last = _grown(self._last, size, -math.inf)
            self._last_portrait = _grown(self._last_portrait, size, -math.inf)
            self._last_means = _grown(self._last_means, size, _ABSENT)
            self._seen = _grown(self._seen, size, -math.inf)
            self._unsent = _grown(self._unsent, size, False)
            self._unsent_portrait = _grown(self._unsent_portrait, size, False)
        return rows

    def _workload_rows(self, names: Sequence[str]) -> IntArray:
        rows = self.workload_portraits.key_rows(names)
        size = len(self.workload_portraits)
        if size > len(self._w_clock):
            self._w_clock = _grown(self._w_clock, size, -math.inf)
            self._w_last = _grown(self._w_last, size, -math.inf)
            self._w_unsent = _grown(self._w_unsent, size, False)
        return rows

    # ------------------------------------------------------------------------------------------- ingest

    def ingest(self, samples: Sequence[MetricSample], *, now: float | None = None) -> list[Summary]:
        """Fold a batch of samples in (in arrival order) and return the summaries it triggers, in the order of
        the samples that triggered them. `now` (event time) only screens out samples from the future."""
        count = len(samples)
        if count == 0:
            return []
        ts, values = self._arrays(samples)
        kept, ts, values = clean_batch(
            np.arange(count),
            ts,
            values,
            count,
            now=now,
            max_future=self.max_future,
            counters=self.counters,
        )
        if len(kept) == 0:
            return []
        kept_list = kept.tolist()
        pods = [samples[i].pod for i in kept_list]
        is_node = np.fromiter((pod is None for pod in pods), dtype=np.bool_, count=len(pods))
        found: list[tuple[int, Summary]] = []
        if is_node.any():
            picked = np.flatnonzero(is_node)
            names = [samples[kept_list[i]].node for i in picked.tolist()]
            found += self._ingest_nodes(self._node_rows(names), ts[picked], values[picked], kept[picked])
        if not is_node.all():
            picked = np.flatnonzero(~is_node)
            keys = []
            for i in picked.tolist():
                sample = samples[kept_list[i]]
                keys.append(sample.workload or pods[i] or "")
            found += self._ingest_workloads(
                self._workload_rows(keys), ts[picked], values[picked], kept[picked]
            )
        found.sort(key=lambda item: item[0])
        return [summary for _, summary in found]

    def _arrays(self, samples: Sequence[MetricSample]) -> tuple[FloatArray, FloatArray]:
        """Timestamps (n,) and values (n, portrait metrics), NaN where absent. A value that is not a number
        is written as inf so that screening rejects its sample as not finite (NaN would read as absent)."""
        count = len(samples)
        column, cache = self._column, self._columns
        columns: list[int] = []
        numbers: list[object] = []
        sizes: list[int] = []
        stamps: list[object] = []
        for sample in samples:
            values = sample.values
            names = tuple(values)
            found = cache.get(names)
            if found is None:
                found = tuple(column.get(name, -1) for name in names)
                if len(cache) < _COLUMN_CACHE:
                    cache[names] = found
            columns.extend(found)
            numbers.extend(values.values())
            sizes.append(len(found))
            stamps.append(sample.ts)
        ts = _floats(stamps)
        flat = _floats(numbers)
        flat[np.isnan(flat)] = np.inf
        where = np.asarray(columns, dtype=np.int64)
        owner = np.repeat(np.arange(count), sizes)
        known = where >= 0
        self.counters.ignored_metrics += int((~known).sum())
        matrix = np.full((count, len(PORTRAIT_METRICS)), np.nan)
        matrix[owner[known], where[known]] = flat[known]
        return ts, matrix

    def _ingest_nodes(
        self, rows: IntArray, ts: FloatArray, values: FloatArray, origin: IntArray
    ) -> list[tuple[int, Summary]]:
        groups = _Groups.of(rows)
        ts_s, values_s = ts[groups.order], values[groups.order]
        clock = groups.running_max(ts_s, self._clock[groups.keys])
        path = self._window_path(groups, ts_s, values_s)
        self.counters.dropped_old += path.dropped
        emits, portraits = self._decide_nodes(groups, clock, path.means())

        # The stores take the batch in arrival order; the windows' end state is the one-at-a-time state.
        in_window = ~np.isnan(values[:, self._window_columns]).all(axis=1)
        if in_window.any():
            self.windows.update_batch(
                rows[in_window], ts[in_window], values[in_window][:, self._window_columns]
            )
        snapshots = self._segmented_portraits(
            self.node_portraits, groups, ts_s, values_s, portraits, self._seen
        )

        keys = groups.keys
        self._clock[keys] = clock[groups.ends - 1]
        chosen = np.asarray(emits, dtype=np.int64)
        names = self.windows.names
        found: list[tuple[int, Summary]] = [
            (
                origin_at,
                NodeSummary(names[row], now, window, end, *snapshots.get(position, (None, None))),
            )
            for position, origin_at, row, now, window, end in zip(
                emits,
                origin[groups.order[chosen]].tolist(),
                groups.rows[chosen].tolist(),
                clock[chosen].tolist(),
                _window_stats(path.moments[chosen]),
                path.end[chosen].tolist(),
                strict=True,
            )
        ]
        emitted = np.zeros(len(ts_s), dtype=np.bool_)
        emitted[emits] = True
        last = groups.ends - 1
        self._unsent[keys] = ~emitted[last]
        carried = np.zeros(len(ts_s), dtype=np.bool_)
        carried[portraits] = True
        self._unsent_portrait[keys] = ~carried[last]
        return found

    def _window_path(self, groups: _Groups, ts: FloatArray, values: FloatArray) -> _WindowPath:
        """The window each sorted sample would see if samples were added one at a time.

        With heads H (the newest bucket so far, a running max per node), a sample in bucket b is in the
        window at sample i when b > H_i − buckets. Heads only rise, so each in-batch sample counts from its
        arrival up to the first later sample whose head pushes it out: add it there, take it off at that
        sample, and a running sum per node gives the batch's part. The part from before the batch is the sum
        of the node's buckets that the head at sample i has not yet pushed out (suffix sums by bucket age).
        """
        windows = self.windows
        span = windows.buckets
        x = values[:, self._window_columns]
        present = ~np.isnan(x)
        in_window = present.any(axis=1)
        old_head = windows.head[groups.keys]
        bucket = np.floor(ts / windows.width).astype(np.int64)

        unique, inverse = np.unique(bucket[in_window], return_inverse=True)
        rank = np.full(len(ts), -1, dtype=np.int64)
        rank[in_window] = inverse
        running = _group_cummax(groups.group, rank, len(unique))
        head = old_head[groups.group].copy()
        moved = running >= 0
        head[moved] = np.maximum(head[moved], unique[running[moved]])

        limit = head - span  # a bucket at or before the limit is out
        accepted = in_window & (bucket > limit)
        dropped = int(in_window.sum() - accepted.sum())
        moments = np.stack(
            (present.astype(np.float64), np.where(present, x, 0.0), np.where(present, x * x, 0.0)), axis=2
        )

        # The sample, if any, that pushes each accepted sample out: the first whose limit reaches its bucket.
        which = np.flatnonzero(accepted)
        delta = np.zeros_like(moments)
        delta[which] = moments[which]
        if len(which):
            levels, level = np.unique(np.concatenate((limit, bucket[which])), return_inverse=True)
            size = len(levels)
            sorted_limits = groups.group * size + level[: len(ts)]
            queries = groups.group[which] * size + level[len(ts) :]
            out = np.searchsorted(sorted_limits, queries, side="left")
            inside = out < groups.ends[groups.group[which]]
            np.subtract.at(delta, out[inside], moments[which[inside]])
        batch_part = _group_cumsum(delta, groups.starts, groups.group)

        pushed = np.clip(head - old_head[groups.group], 0, span)
        before = self._kept(groups.keys, old_head, pushed, groups.group)

        window_ts = np.where(accepted, ts, np.nan)
        end = groups.running_max(window_ts, windows.newest[groups.keys])
        return _WindowPath(before + batch_part, end, dropped)

    def _kept(self, rows: IntArray, heads: IntArray, pushed: IntArray, group: IntArray) -> FloatArray:
        """(len(pushed), metrics, 3): what stays of each row's pre-batch window once its head has moved
        `pushed[i]` buckets (row `rows[group[i]]`): the running totals less the `pushed` oldest buckets. Heads
        rarely move more than a bucket or two per sample, so only that many buckets are gathered."""
        windows = self.windows
        span = windows.buckets
        totals = windows.totals[rows][group]
        deepest = int(pushed.max()) if len(pushed) else 0
        if deepest == 0:
            return totals
        slots = (heads[:, None] - span + 1 + np.arange(deepest)[None, :]) % span
        oldest = windows.slots[rows[:, None], :, slots]  # (rows, deepest, metrics, 3), oldest bucket first
        prefix = np.zeros((len(rows), deepest + 1, *oldest.shape[2:]))
        prefix[:, 1:] = np.cumsum(oldest, axis=1)
        kept: FloatArray = totals - prefix[group, pushed]
        # A window pushed out entirely is empty: exactly, not up to the subtraction's rounding.
        kept[pushed == span] = 0.0
        return kept

    def _decide_nodes(
        self, groups: _Groups, clock: FloatArray, means: FloatArray
    ) -> tuple[list[int], list[int]]:
        """Sorted positions of the samples that trigger a summary, and of those whose summary carries the
        portrait. Sequential per node (each decision depends on the last one), so plain Python on lists."""
        interval, portrait_interval, threshold = (
            self.summary_interval,
            self.portrait_interval,
            self.move_threshold,
        )
        keys = groups.keys
        last_all, last_portrait_all = self._last[keys].tolist(), self._last_portrait[keys].tolist()
        last_means_all = self._last_means[keys].tolist()
        clock_l, means_l = clock.tolist(), means.tolist()
        emits: list[int] = []
        portraits: list[int] = []
        for index, (start, end) in enumerate(zip(groups.starts.tolist(), groups.ends.tolist(), strict=True)):
            last, last_portrait, last_means = last_all[index], last_portrait_all[index], last_means_all[index]
            for position in range(start, end):
                now = clock_l[position]
                current = means_l[position]
                if now - last < interval:
                    for value, before in zip(current, last_means, strict=True):
                        if (value < 0) != (before < 0) or abs(value - before) > threshold * abs(before):
                            break
                    else:
                        continue
                emits.append(position)
                last, last_means = now, current
                if now - last_portrait >= portrait_interval:
                    portraits.append(position)
                    last_portrait = now
            last_all[index], last_portrait_all[index], last_means_all[index] = last, last_portrait, last_means
        self._last[keys] = last_all
        self._last_portrait[keys] = last_portrait_all
        self._last_means[keys] = last_means_all
        return emits, portraits

    def _segmented_portraits(
        self,
        store: HourlyPortraits,
        groups: _Groups,
        ts: FloatArray,
        values: FloatArray,
        marks: list[int],
        seen: FloatArray | None,
    ) -> dict[int, tuple[dict[str, HourCells], list[float] | None]]:
        """Add the sorted samples to `store`, stopping after each key's marked samples to take its portrait
        (and seen) as of that sample. Keys are independent, so segment s is every key's samples after its
        s-th mark up to its (s+1)-th: as many store updates as the most marks any one key has, plus one."""
        flags = np.zeros(len(ts), dtype=np.int64)
        flags[marks] = 1
        segment = (
            _group_cumsum(flags.astype(np.float64), groups.starts, groups.group).astype(np.int64) - flags
        )
        hours = hour_of_day(ts, self.utc_offset)
        taken: dict[int, tuple[dict[str, HourCells], list[float] | None]] = {}
        marked = np.asarray(marks, dtype=np.int64)
        for number in range(int(segment.max()) + 1 if len(ts) else 0):
            part = np.flatnonzero(segment == number)
            rows = groups.rows[part]
            store.update_batch(rows, ts[part], values[part])
            if seen is not None:
                np.maximum.at(seen, (rows, hours[part]), ts[part])
            for position in marked[segment[marked] == number].tolist():
                row = int(groups.rows[position])
                cells = _cells(store.portrait_of_row(row))
                taken[position] = (cells, None if seen is None else seen[row].tolist())
        return taken

    def _ingest_workloads(
        self, rows: IntArray, ts: FloatArray, values: FloatArray, origin: IntArray
    ) -> list[tuple[int, Summary]]:
        groups = _Groups.of(rows)
        ts_s, values_s = ts[groups.order], values[groups.order]
        clock = groups.running_max(ts_s, self._w_clock[groups.keys])
        interval = self.portrait_interval
        keys = groups.keys
        last_all = self._w_last[keys].tolist()
        clock_l = clock.tolist()
        emits: list[int] = []
        for index, (start, end) in enumerate(zip(groups.starts.tolist(), groups.ends.tolist(), strict=True)):
            last = last_all[index]
            for position in range(start, end):
                if clock_l[position] - last >= interval:
                    emits.append(position)
                    last = clock_l[position]
            last_all[index] = last
        self._w_last[keys] = last_all
        self._w_clock[keys] = clock[groups.ends - 1]
        snapshots = self._segmented_portraits(self.workload_portraits, groups, ts_s, values_s, emits, None)
        emitted = np.zeros(len(ts_s), dtype=np.bool_)
        emitted[emits] = True
        self._w_unsent[keys] = ~emitted[groups.ends - 1]
        names = self.workload_portraits.names
        return [
            (
                int(origin[groups.order[position]]),
                WorkloadSummary(names[int(groups.rows[position])], clock_l[position], snapshots[position][0]),
            )
            for position in emits
        ]

    # -------------------------------------------------------------------------------------------- flush

    def flush(self, now: float) -> list[Summary]:
        """A summary for every node and workload with samples not yet summarised (the portrait included when
        it has unsent samples), whatever the intervals: at the end of a replay, or on an idle timer. Windows
        are read as of `now` (event time; never before a node's own newest sample) without being moved. Nodes
        first, then workloads, each in the order they were first seen."""
        found: list[Summary] = []
        size = len(self.windows)
        rows = np.flatnonzero(self._unsent[:size] | self._unsent_portrait[:size])
        if len(rows):
            windows = self.windows
            heads = windows.head[rows]
            if math.isnan(now):
                raise ValueError("flush: now must be a time, got NaN")
            if math.isinf(now):
                pushed = np.full(len(rows), windows.buckets if now > 0 else 0)
            else:
                read_at = np.maximum(math.floor(now / windows.width), heads)
                pushed = np.clip(read_at - heads, 0, windows.buckets)
            stats = _window_stats(self._kept(rows, heads, pushed, np.arange(len(rows))))
            for row, window in zip(rows.tolist(), stats, strict=True):
                portrait = seen = None
                if self._unsent_portrait[row]:
                    portrait = _cells(self.node_portraits.portrait_of_row(row))
                    seen = self._seen[row].tolist()
                    self._last_portrait[row] = self._clock[row]
                clock = float(self._clock[row])
                found.append(
                    NodeSummary(windows.names[row], clock, window, float(windows.newest[row]), portrait, seen)
                )
                self._last[row] = clock
                self._last_means[row] = [window[m][0] if m in window else _ABSENT for m in WINDOW_METRICS]
            self._unsent[rows] = False
            self._unsent_portrait[rows] = False
        size = len(self.workload_portraits)
        for row in np.flatnonzero(self._w_unsent[:size]).tolist():
            portrait_cells = _cells(self.workload_portraits.portrait_of_row(row))
            found.append(
                WorkloadSummary(self.workload_portraits.names[row], float(self._w_clock[row]), portrait_cells)
            )
            self._w_last[row] = self._w_clock[row]
            self._w_unsent[row] = False
        return found

    # -------------------------------------------------------------------------------------------- state

    def node_state(self, node: str) -> bytes | None:
        """The node's portrait accumulators and summary bookkeeping (about 3.7 KB), for a state table. The
        window is not included: it is an hour deep and refills by itself, and would double the size."""
        row = self.windows.keys.get(node)
        if row is None:
            return None
        header = _NODE_STATE.pack(
            _NODE_MAGIC,
            bool(self._unsent[row]),
            bool(self._unsent_portrait[row]),
            float(self._clock[row]),
            float(self._last[row]),
            float(self._last_portrait[row]),
            *self._last_means[row].tolist(),
            *self._seen[row].tolist(),
        )
        return header + self.node_portraits.to_bytes(node)

    def restore_node(self, node: str, data: bytes) -> None:
        """Replace what this core knows of `node`'s portrait and summaries by `node_state` bytes. The live
        window, if any, is kept."""
        if len(data) < _NODE_STATE.size:
            raise InvalidInput(f"node state of {node!r}: truncated")
        magic, unsent, unsent_portrait, clock, last, last_portrait, *rest = _NODE_STATE.unpack_from(data)
        means, seen = rest[: len(WINDOW_METRICS)], rest[len(WINDOW_METRICS) :]
        if magic != _NODE_MAGIC or any(math.isnan(v) for v in (clock, last, last_portrait, *means, *seen)):
            raise InvalidInput(f"node state of {node!r}: not a node state")
        row = int(self._node_rows([node])[0])
        self._load_portrait(self.node_portraits, row, node, data[_NODE_STATE.size :])
        self._clock[row], self._last[row], self._last_portrait[row] = clock, last, last_portrait
        self._last_means[row] = means
        self._seen[row] = seen
        self._unsent[row], self._unsent_portrait[row] = bool(unsent), bool(unsent_portrait)

    def workload_state(self, workload: str) -> bytes | None:
        """The workload's portrait accumulators and summary bookkeeping, for a state table."""
        row = self.workload_portraits.keys.get(workload)
        if row is None:
            return None
        header = _WORKLOAD_STATE.pack(
            _WORKLOAD_MAGIC, bool(self._w_unsent[row]), float(self._w_clock[row]), float(self._w_last[row])
        )
        return header + self.workload_portraits.to_bytes(workload)

    def restore_workload(self, workload: str, data: bytes) -> None:
        if len(data) < _WORKLOAD_STATE.size:
            raise InvalidInput(f"workload state of {workload!r}: truncated")
        magic, unsent, clock, last = _WORKLOAD_STATE.unpack_from(data)
        if magic != _WORKLOAD_MAGIC or math.isnan(clock) or math.isnan(last):
            raise InvalidInput(f"workload state of {workload!r}: not a workload state")
        row = int(self._workload_rows([workload])[0])
        self._load_portrait(self.workload_portraits, row, workload, data[_WORKLOAD_STATE.size :])
        self._w_clock[row], self._w_last[row], self._w_unsent[row] = clock, last, bool(unsent)

    @staticmethod
    def _load_portrait(store: HourlyPortraits, row: int, key: str, data: bytes) -> None:
        # load_bytes merges; a restore replaces, so empty the row first (into an empty row a merge is a copy).
        saved = (store.weight[row].copy(), store.mean[row].copy(), store.m2[row].copy(), store.epoch[row])
        store.weight[row] = store.mean[row] = store.m2[row] = 0.0
        store.epoch[row] = np.nan
        try:
            store.load_bytes(key, data)
        except ValueError as exc:
            store.weight[row], store.mean[row], store.m2[row], store.epoch[row] = saved
            raise InvalidInput(f"state of {key!r}: {exc}") from None


def _floats(items: list[object]) -> FloatArray:
    """Numbers as float64; anything that is not one (a sample built without validation) becomes NaN."""
    try:
        return np.asarray(items, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        result = np.full(len(items), np.nan)
        for index, item in enumerate(items):
            if isinstance(item, int | float) and not isinstance(item, bool):
                result[index] = item
        return result
