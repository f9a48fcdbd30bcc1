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

Keys come and go (pods without a workload are keys of their own, nodes are deleted), and this core never
hears of a deletion, only of samples. So a key is forgotten once it falls `state_ttl` behind, in event time:
the core's clock is the newest ``ts`` it accepted, and a key whose own newest sample is `state_ttl` or more
older is expired (window, portrait, bookkeeping; samples not yet summarised are dropped with it). As for
summaries, that is defined sample by sample: before each sample, every key that has fallen behind is gone,
so a key back after a longer silence starts afresh, whatever the batches. A key sampled within `state_ttl`
is never touched: its summaries are those of a core that forgets nothing. `take_expired` tells the agent
which keys to delete from its state tables. Each workload forgotten is also returned among the summaries,
as a `WorkloadSummary` with ``expired``, right after the sample whose clock expired it (as feeding samples
one at a time would place it, whatever the batches), so placement drops its portrait at that point too.
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
    "state_clock",
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
_COMPACT_SLACK: Final = 64
"""Expired rows are left in place (out of the key index) until they outnumber both the live rows and this:
copying the live rows then costs about as much as the expiries it follows, so memory stays within twice
the live keys plus this, at a constant cost per expiry."""


def state_clock(data: bytes) -> float | None:
    """The clock (newest sample ts) of a `MetricsCore.node_state` or `workload_state`, read from its header
    without restoring it; None when `data` is neither."""
    for magic, layout, field in ((_NODE_MAGIC, _NODE_STATE, 3), (_WORKLOAD_MAGIC, _WORKLOAD_STATE, 2)):
        if data[:4] == magic and len(data) >= layout.size:
            clock = float(layout.unpack_from(data)[field])
            return None if math.isnan(clock) else clock
    return None


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
    """A workload's hourly portrait, learnt from its pods' samples; or, with `expired`, word that the core
    forgot the workload (`state_ttl` without a sample), so placement forgets its portrait too."""

    workload: str
    ts: float
    """Event time of the newest sample included; of an expiry, the core's clock when the key expired (the
    time it travels at, after every summary of the samples before it)."""
    portrait: dict[str, HourCells] | None
    """None exactly when `expired` is given."""
    expired: float | None = None
    """The expired key's own newest sample time. Placement drops the portrait it holds only if that
    portrait is no newer: another metrics partition still sampling the workload (pods on nodes of other
    partitions) sent a newer one, well within the ttl, and that one stays."""

    def to_json(self) -> dict[str, Any]:
        if self.expired is not None or self.portrait is None:
            return {
                "kind": "workload",
                "workload": self.workload,
                "ts": self.ts,
                "portrait": None,
                "expired": self.expired,
            }
        return {
            "kind": "workload",
            "workload": self.workload,
            "ts": self.ts,
            "portrait": _cells_to_json(self.portrait),
        }

    @classmethod
    def from_json(cls, data: object) -> WorkloadSummary:
        expiry = isinstance(data, dict) and "expired" in data
        names = ("workload", "ts", "portrait", "expired") if expiry else ("workload", "ts", "portrait")
        fields = _fields(data, "workload", names)
        workload, ts = _name(fields["workload"], "workload"), _number(fields["ts"], "ts")
        if expiry:
            if fields["portrait"] is not None:
                raise InvalidInput("must be null in an expiry", field="portrait")
            return cls(workload, ts, None, _number(fields["expired"], "expired"))
        return cls(workload, ts, _cells_from_json(fields["portrait"], "portrait"))

    def to_portrait(self) -> Portrait | None:
        """The portrait as `NodeUsage.set_workload_portrait` takes it (None: an expiry)."""
        return None if self.portrait is None else _portrait(self.portrait)


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
        state_ttl: float = math.inf,
    ) -> None:
        if not state_ttl > 0:
            raise ConfigError(f"state_ttl must be a number > 0 (inf: never), got {state_ttl}")
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
        self.state_ttl = float(state_ttl)
        """A key whose newest sample is this much or more behind `clock` is forgotten (inf: never)."""
        self.clock = -math.inf
        """Event time: the newest ``ts`` among the samples this core accepted (or `advance_clock` set)."""
        self._expired: tuple[list[str], list[str]] = ([], [])
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
        self._alive = np.zeros(0, dtype=np.bool_)
        """Rows still in the key index (False: expired, awaiting compaction)."""
        self._taken = np.zeros(0)
        """The clock of each row when its state was last taken (`node_state`) or restored."""
        # Per workload row of `workload_portraits`.
        self._w_clock = np.zeros(0)
        self._w_last = np.zeros(0)
        self._w_unsent = np.zeros(0, dtype=np.bool_)
        self._w_alive = np.zeros(0, dtype=np.bool_)
        self._w_taken = np.zeros(0)

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
            self._alive = _grown(self._alive, size, False)
            self._taken = _grown(self._taken, size, -math.inf)
        self._alive[rows] = True
        return rows

    def _workload_rows(self, names: Sequence[str]) -> IntArray:
        rows = self.workload_portraits.key_rows(names)
        size = len(self.workload_portraits)
        if size > len(self._w_clock):
            self._w_clock = _grown(self._w_clock, size, -math.inf)
            self._w_last = _grown(self._w_last, size, -math.inf)
            self._w_unsent = _grown(self._w_unsent, size, False)
            self._w_alive = _grown(self._w_alive, size, False)
            self._w_taken = _grown(self._w_taken, size, -math.inf)
        self._w_alive[rows] = True
        return rows

    def has_node(self, node: str) -> bool:
        """Whether this core holds state of `node` (learnt from samples or restored, not expired)."""
        return node in self.windows.keys

    def has_workload(self, workload: str) -> bool:
        return workload in self.workload_portraits.keys

    def node_names(self) -> list[str]:
        """The nodes this core holds state of, in the order it learnt them."""
        return [self.windows.names[row] for row in np.flatnonzero(self._alive[: len(self.windows)]).tolist()]

    def workload_names(self) -> list[str]:
        size = len(self.workload_portraits)
        return [self.workload_portraits.names[row] for row in np.flatnonzero(self._w_alive[:size]).tolist()]

    def states_behind(self, lag: float) -> tuple[list[str], list[str]]:
        """Nodes and workloads whose clock is `lag` or more past the clock of their last taken state: a
        table entry written only with summaries would otherwise look older than its key is (a workload's
        summary goes out once per `portrait_interval`), and be swept while the key is live."""
        size = len(self.windows)
        nodes = np.flatnonzero(self._alive[:size] & (self._clock[:size] - self._taken[:size] >= lag))
        size = len(self.workload_portraits)
        workloads = np.flatnonzero(
            self._w_alive[:size] & (self._w_clock[:size] - self._w_taken[:size] >= lag)
        )
        return (
            [self.windows.names[row] for row in nodes.tolist()],
            [self.workload_portraits.names[row] for row in workloads.tolist()],
        )

    # ----------------------------------------------------------------------------------------- expiry

    def advance_clock(self, ts: float) -> list[WorkloadSummary]:
        """Move the clock to `ts` if that is later (a restarted agent sets it from its tables' newest state,
        which the samples it had accepted left there), and expire what falls behind it (see `expire`)."""
        if ts > self.clock:
            self.clock = float(ts)
        return self.expire()

    def expire(self) -> list[WorkloadSummary]:
        """Forget every key `state_ttl` or more behind the clock (`take_expired` then names them). Returns
        an expiry (`WorkloadSummary.expired`) per workload forgotten, for placement, whose portraits must
        be bounded by live workloads as this core's are; `ingest` returns them among its summaries."""
        if self.state_ttl == math.inf:
            return []
        expiries: list[WorkloadSummary] = []
        limit = self.clock - self.state_ttl
        size = len(self.windows)
        gone = np.flatnonzero(self._alive[:size] & (self._clock[:size] <= limit))
        if len(gone):
            names = [self.windows.names[row] for row in gone.tolist()]
            for name in names:
                del self.windows.keys[name]
                del self.node_portraits.keys[name]
            self._alive[gone] = False
            self._unsent[gone] = self._unsent_portrait[gone] = False
            self._expired[0].extend(names)
            if size - int(self._alive[:size].sum()) > max(len(self.windows.keys), _COMPACT_SLACK):
                self._compact_nodes()
        size = len(self.workload_portraits)
        gone = np.flatnonzero(self._w_alive[:size] & (self._w_clock[:size] <= limit))
        if len(gone):
            names = [self.workload_portraits.names[row] for row in gone.tolist()]
            expiries = [
                WorkloadSummary(name, self.clock, None, float(last))
                for name, last in zip(names, self._w_clock[gone].tolist(), strict=True)
            ]
            for name in names:
                del self.workload_portraits.keys[name]
            self._w_alive[gone] = False
            self._w_unsent[gone] = False
            self._expired[1].extend(names)
            if size - int(self._w_alive[:size].sum()) > max(
                len(self.workload_portraits.keys), _COMPACT_SLACK
            ):
                self._compact_workloads()
        return expiries

    def take_expired(self) -> tuple[list[str], list[str]]:
        """The nodes and workloads expired since the last call (a key may since have come back)."""
        taken, self._expired = self._expired, ([], [])
        return taken

    def _compact_nodes(self) -> None:
        keep = np.flatnonzero(self._alive[: len(self.windows)])
        windows, portraits = self.windows, self.node_portraits
        names = [windows.names[row] for row in keep.tolist()]
        for store in (windows, portraits):
            store.names = list(names)
            store.keys = {name: row for row, name in enumerate(names)}
        windows.slots, windows.totals = windows.slots[keep], windows.totals[keep]
        windows.head, windows.newest = windows.head[keep], windows.newest[keep]
        _keep_portrait_rows(portraits, keep)
        self._clock, self._last, self._last_portrait = (
            self._clock[keep],
            self._last[keep],
            self._last_portrait[keep],
        )
        self._last_means, self._seen = self._last_means[keep], self._seen[keep]
        self._unsent, self._unsent_portrait = self._unsent[keep], self._unsent_portrait[keep]
        self._alive, self._taken = self._alive[keep], self._taken[keep]

    def _compact_workloads(self) -> None:
        store = self.workload_portraits
        keep = np.flatnonzero(self._w_alive[: len(store)])
        store.names = [store.names[row] for row in keep.tolist()]
        store.keys = {name: row for row, name in enumerate(store.names)}
        _keep_portrait_rows(store, keep)
        self._w_clock, self._w_last = self._w_clock[keep], self._w_last[keep]
        self._w_unsent, self._w_alive = self._w_unsent[keep], self._w_alive[keep]
        self._w_taken = self._w_taken[keep]

    def _first_stale(self, is_node: BoolArray, names: list[str], ts: FloatArray) -> int | None:
        """The first position whose key has state yet is `state_ttl` or more behind the clock as of just
        before it (the clock then: the core's, raised by the samples before it): there the key must be
        forgotten before its sample goes in. None when no sample of the batch finds its key so."""
        count = len(ts)
        index: dict[tuple[bool, str], int] = {}
        ids = np.fromiter(
            (index.setdefault(key, len(index)) for key in zip(is_node.tolist(), names, strict=True)),
            dtype=np.int64,
            count=count,
        )
        stored = np.full(len(index), -math.inf)
        node_keys, workload_keys = self.windows.keys, self.workload_portraits.keys
        for (node, name), key in index.items():
            row = (node_keys if node else workload_keys).get(name)
            if row is not None:
                stored[key] = (self._clock if node else self._w_clock)[row]
        groups = _Groups.of(ids)
        through = groups.running_max(ts[groups.order], stored[groups.keys])
        before_sorted = np.empty(count)
        before_sorted[1:] = through[:-1]
        before_sorted[groups.starts] = stored[groups.keys]
        key_before = np.empty(count)
        key_before[groups.order] = before_sorted
        clock_before = np.maximum.accumulate(np.r_[self.clock, ts])[:-1]
        stale = (key_before > -math.inf) & (key_before <= clock_before - self.state_ttl)
        return int(np.argmax(stale)) if stale.any() else None

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
        names = [
            samples[i].node if pod is None else (samples[i].workload or pod)
            for i, pod in zip(kept_list, pods, strict=True)
        ]
        found: list[tuple[float, Summary]] = []
        start = 0
        while start < len(kept):
            # A key back after `state_ttl` of silence must start afresh: the batch is cut before its sample
            # and what fell behind by then expired (rare: a batch is milliseconds of a live stream).
            cut = None
            if self.state_ttl < math.inf:
                stale = self._first_stale(is_node[start:], names[start:], ts[start:])
                cut = None if stale is None else start + stale
            end = len(kept) if cut is None else cut
            before = self.clock
            if end > start:
                part = slice(start, end)
                found += self._ingest_part(is_node[part], names[part], ts[part], values[part], kept[part])
                self.clock = max(self.clock, float(ts[part].max()))
            found += self._place_expiries(self.expire(), before, ts[start:end], kept[start:end])
            start = end
        found.sort(key=lambda item: item[0])
        return [summary for _, summary in found]

    def _place_expiries(
        self, expiries: list[WorkloadSummary], before: float, ts: FloatArray, origin: IntArray
    ) -> list[tuple[float, WorkloadSummary]]:
        """Each expiry where feeding the part one sample at a time would have made it: right after the
        first sample that moved the clock `state_ttl` past the key (after that sample's summaries), at the
        clock then. So which expiries go out, where and when does not depend on how the stream was cut."""
        if not expiries:
            return []
        if len(ts) == 0:
            return [(-0.5 if len(origin) == 0 else float(origin[0]) - 0.5, e) for e in expiries]
        through = np.maximum.accumulate(np.r_[before, ts])[1:]
        limits = through - self.state_ttl  # as `expire` compares: key clock <= clock - ttl
        placed: list[tuple[float, WorkloadSummary]] = []
        for expiry in expiries:
            last = expiry.expired if expiry.expired is not None else -math.inf
            at = min(int(np.searchsorted(limits, last, side="left")), len(ts) - 1)
            moved = WorkloadSummary(expiry.workload, float(through[at]), None, last)
            placed.append((float(origin[at]) + 0.5, moved))
        return placed

    def _ingest_part(
        self, is_node: BoolArray, names: list[str], ts: FloatArray, values: FloatArray, origin: IntArray
    ) -> list[tuple[int, Summary]]:
        found: list[tuple[int, Summary]] = []
        for nodes in (True, False):
            picked = np.flatnonzero(is_node == nodes)
            if len(picked) == 0:
                continue
            keys = [names[i] for i in picked.tolist()]
            if nodes:
                found += self._ingest_nodes(self._node_rows(keys), ts[picked], values[picked], origin[picked])
            else:
                rows = self._workload_rows(keys)
                found += self._ingest_workloads(rows, ts[picked], values[picked], origin[picked])
        return found

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
        window is not included: it is an hour deep and refills by itself, and would double the size.
        Remembers the clock it was taken at (`states_behind`)."""
        row = self.windows.keys.get(node)
        if row is None:
            return None
        self._taken[row] = self._clock[row]
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
        self._taken[row] = clock
        self._last_means[row] = means
        self._seen[row] = seen
        self._unsent[row], self._unsent_portrait[row] = bool(unsent), bool(unsent_portrait)

    def workload_state(self, workload: str) -> bytes | None:
        """The workload's portrait accumulators and summary bookkeeping, for a state table (remembering the
        clock it was taken at)."""
        row = self.workload_portraits.keys.get(workload)
        if row is None:
            return None
        self._w_taken[row] = self._w_clock[row]
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
        self._w_taken[row] = clock

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


def _keep_portrait_rows(store: HourlyPortraits, keep: IntArray) -> None:
    """Only the accumulators of rows `keep` (in that order) left in `store`; its keys are renumbered by the
    caller."""
    store.weight, store.mean, store.m2 = store.weight[keep], store.mean[keep], store.m2[keep]
    store.epoch = store.epoch[keep]


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
