"""Measured load per snapshot row, for the load-aware and portrait plugins: each node's sliding-window
statistics and hourly portrait (pushed in by whoever collects metrics: the metrics agent's summaries, a
replay, `eyrie explain`), and the pods placed since those were measured.

The hot path reads arrays only. Everything that depends on which pods the measurements have not caught up
with is kept per row and incrementally: a pod assumed on a row adds its estimate at once; a fresh
measurement of the row recomputes that row from its pending pods and prunes the ones now covered.

- Window side (Trimaran): a pod counts until the window's newest sample is `reporting_interval` past its
  placement (upstream's ScheduledPodsCache rule).
- Portrait side: hour h of a pod counts until the node has a sample of hour h taken after it.

A `Snapshot` creates this on first use (`Snapshot.usage`), so profiles that never read load pay nothing.
Every change to a row is recorded in the snapshot's change journal (`MEASURED`: a new measurement,
`PLACED`: a pod placed since), so plugins can keep what they derive per row and recompute only the rows that
changed (`RowCursor`).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

from policies.snapshot import MEASURED, PLACED
from portraits.assume import PodLoad, pod_load, uncovered_hours
from portraits.hourly import DEFAULT_METRICS, DEFAULT_Z, HOURS, Portrait

if TYPE_CHECKING:
    from policies.snapshot import PodRecord, Snapshot
    from schemas.pod import PodRequest

__all__ = [
    "PORTRAIT_METRICS",
    "REPORTING_INTERVAL",
    "WINDOW_METRICS",
    "NodeUsage",
    "PendingPod",
    "by_metric",
    "metric_scale",
    "pod_amounts",
    "unknown_metric",
]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

WINDOW_METRICS: Final = ("cpu", "memory", "bandwidth")
PORTRAIT_METRICS: Final = DEFAULT_METRICS
REPORTING_INTERVAL: Final = 60.0
"""scheduler-plugins' metricsAgentReportingIntervalSeconds: a pod placed less than this before the window's
newest sample may not be in it yet."""

_POD_LOAD_STATE: Final = "usage/pod_load"
"""CycleContext.state key under which plugins share the cycle's pod load (`NodeUsage.pod_load`)."""

_CPU_SCALE: Final = 1000.0  # millicores per core


def metric_scale(metric: str) -> float:
    """Quantity units per metric unit: cpu is measured in cores but requested and allocated in millicores;
    every other metric shares its quantity's base unit."""
    return _CPU_SCALE if metric == "cpu" else 1.0


_ALL_GAPS: Final = (True,) * len(PORTRAIT_METRICS)
_HOURS: Final = np.arange(HOURS)

_LOAD_CACHE: Final = 4096
"""Pod load estimates kept (a few KiB each): a cluster's live workloads, cold starts by request shape."""


def unknown_metric(names: Iterable[str], known: tuple[str, ...], kind: str) -> str | None:
    """The error for the first of `names` not in `known` (a `kind` metric: window or portrait), or None."""
    missing = next((name for name in names if name not in known), None)
    if missing is None:
        return None
    return f"no {kind} metric {missing!r} (known: {', '.join(known)})"


def pod_amounts(pod: PodRequest, metrics: tuple[str, ...]) -> FloatArray:
    """The pod's requests in metric units (cpu in cores, the rest in base units)."""
    requests = pod.effective_requests
    return np.array([requests.get(m, 0) / metric_scale(m) for m in metrics])


def _metric_major(shape: tuple[int, ...], dtype: type[np.generic] = np.float64, fill: float = 0.0) -> Any:
    """An array of `shape` (rows, ..., metrics) laid out metric by metric, so that one metric of every row
    (what the portrait plugins read: all rows, or a gather of some) is contiguous."""
    axes = (*range(1, len(shape)), 0)
    return np.full((shape[-1], *shape[:-1]), fill, dtype=dtype).transpose(axes)


def by_metric(array: FloatArray) -> FloatArray:
    """A (rows, HOURS, metrics) array of `NodeUsage` as (metrics, rows, HOURS): a contiguous view, so that
    `[metric].take(rows, axis=0)` gathers rows' hours in one block each."""
    view: FloatArray = array.transpose(2, 0, 1)
    return view


@dataclass(slots=True)
class PendingPod:
    """A pod on a row that the row's measurements may not include yet."""

    uid: str
    pod: PodRequest
    at: float
    requests: FloatArray
    """Window metrics' units."""
    load: PodLoad


PredictCpu = Callable[["PodRequest"], float]


class NodeUsage:
    def __init__(
        self,
        snapshot: Snapshot,
        *,
        z: float = DEFAULT_Z,
        reporting_interval: float = REPORTING_INTERVAL,
    ) -> None:
        self.snapshot = snapshot
        self.z = z
        self.reporting_interval = reporting_interval
        rows = len(snapshot.live)
        windows, metrics = len(WINDOW_METRICS), len(PORTRAIT_METRICS)
        self.window_mean = np.zeros((rows, windows))
        self.window_std = np.zeros((rows, windows))
        self.window_has = np.zeros((rows, windows), dtype=np.bool_)
        self.window_end = np.full(rows, -np.inf)
        self.window_assumed = np.zeros((rows, windows))
        """Requests of pods placed since the window's newest sample, plus totals given as such
        (`add_assumed`), in window metrics' units."""
        self.assumed_extra = np.zeros((rows, windows))
        """Requests known only as a total (`eyrie explain`'s ``assumed``), in window metrics' units."""
        self.assumed_cpu_extra = np.zeros(rows)
        """Predicted cpu (millicores) of pods known only as a total (`eyrie explain`'s ``assumed``)."""
        self.portrait_mean = np.zeros((rows, HOURS, metrics))
        self.portrait_var = np.zeros((rows, HOURS, metrics))
        self.portrait_has = np.zeros((rows, metrics), dtype=np.bool_)
        self.seen = np.full((rows, HOURS), -np.inf)
        self.base_mean = _metric_major((rows, HOURS, metrics))
        self.base_var = _metric_major((rows, HOURS, metrics))
        """Portrait plus pending pods: AssumePodOnNode's node side, per hour."""
        self._cap_max = _metric_major((rows, metrics))
        self._peak = _metric_major((rows, metrics))
        self._below_peak = _metric_major((rows, metrics), fill=-np.inf)
        self._peak_var = _metric_major((rows, metrics))
        self._stale: set[int] = set()
        """Rows whose `base_mean`/`base_var` changed since their bounds (`cap_max` …) were derived: derived
        when first read, so a placement costs no bounds where no plugin reads them (the default profile)."""
        self.pending: dict[int, dict[str, PendingPod]] = {}
        self.workloads: dict[str, Portrait] = {}
        self._predicted: dict[Hashable, tuple[PredictCpu, FloatArray]] = {}
        self._loads: dict[tuple[str | None, tuple[float | None, ...]], tuple[Portrait | None, PodLoad]] = {}
        self._portrait_gaps: dict[str, tuple[Portrait, tuple[bool, ...]]] = {}
        self._amounts: tuple[PodRequest | None, dict[tuple[str, ...], FloatArray]] = (None, {})
        self._last_load: tuple[PodRequest | None, Portrait | None, PodLoad] = (
            None,
            None,
            PodLoad(0.0, np.zeros((HOURS, metrics)), np.zeros((HOURS, metrics))),
        )
        for record in snapshot.pods.values():
            self.on_assume(record)
        # Plugins that derived values without measured load must derive them again.
        snapshot.all_changed()

    # ---------------------------------------------------------------------------------- shape

    def grow(self, rows: int) -> None:
        have = len(self.window_end)
        if rows <= have:
            return

        def grown(array: Any, fill: float | bool = 0) -> Any:
            result = np.full((rows, *array.shape[1:]), fill, dtype=array.dtype)
            result[:have] = array
            return result

        self.window_mean = grown(self.window_mean)
        self.window_std = grown(self.window_std)
        self.window_has = grown(self.window_has, False)
        self.window_end = grown(self.window_end, -np.inf)
        self.window_assumed = grown(self.window_assumed)
        self.assumed_extra = grown(self.assumed_extra)
        self.assumed_cpu_extra = grown(self.assumed_cpu_extra)
        self.portrait_mean = grown(self.portrait_mean)
        self.portrait_var = grown(self.portrait_var)
        self.portrait_has = grown(self.portrait_has, False)
        self.seen = grown(self.seen, -np.inf)
        for name in ("base_mean", "base_var", "_cap_max", "_peak", "_below_peak", "_peak_var"):
            array = getattr(self, name)
            fill = -np.inf if name == "_below_peak" else 0.0
            result = _metric_major((rows, *array.shape[1:]), array.dtype.type, fill)
            result[:have] = array
            setattr(self, name, result)
        for key, (predict, sums) in self._predicted.items():
            self._predicted[key] = (predict, grown(sums))

    def clear_row(self, row: int) -> None:
        """A node left (or a row is reused): forget its measurements."""
        self.window_mean[row] = self.window_std[row] = 0.0
        self.window_has[row] = False
        self.window_end[row] = -np.inf
        self.assumed_cpu_extra[row] = 0.0
        self.assumed_extra[row] = 0.0
        self.portrait_mean[row] = self.portrait_var[row] = 0.0
        self.portrait_has[row] = False
        self.seen[row] = -np.inf
        self.pending.pop(row, None)
        self.refresh_row(row)

    # ------------------------------------------------------------------------------- measurements

    def set_window(self, row: int, stats: Mapping[str, tuple[float, float]], end: float) -> None:
        """The row's window: (mean, std) per metric in base units (cpu in cores), newest sample at `end`.
        Metrics not given have no data."""
        self.window_has[row] = False
        self.window_mean[row] = self.window_std[row] = 0.0
        for column, metric in enumerate(WINDOW_METRICS):
            if metric in stats:
                mean, std = stats[metric]
                self.window_mean[row, column] = mean
                self.window_std[row, column] = std
                self.window_has[row, column] = True
        self.window_end[row] = end
        self.refresh_row(row)

    def add_assumed(self, row: int, requests: Mapping[str, int]) -> None:
        """Pods known only as a total of requests (quantities as parsed: cpu in millicores)."""
        for column, metric in enumerate(WINDOW_METRICS):
            amount = requests.get(metric, 0)
            self.assumed_extra[row, column] += amount / metric_scale(metric)
        self.assumed_cpu_extra[row] += requests.get("cpu", 0)
        self.refresh_row(row)

    def set_node_portrait(self, row: int, portrait: Portrait, seen: npt.ArrayLike) -> None:
        """The row's measured portrait, and per hour the time of the newest sample in it."""
        self._check(portrait)
        self.portrait_mean[row] = np.where(portrait.has_data, portrait.mean, 0.0)
        self.portrait_var[row] = np.where(portrait.has_data, portrait.std * portrait.std, 0.0)
        self.portrait_has[row] = portrait.has_data.any(axis=0)
        self.seen[row] = np.broadcast_to(np.asarray(seen, dtype=np.float64), (HOURS,))
        self.refresh_row(row)

    def set_workload_portrait(self, workload: str, portrait: Portrait) -> None:
        """Portraits of pods placed from now on (pods already pending keep the estimate they had)."""
        self._check(portrait)
        self.workloads[workload] = portrait

    def drop_workload_portrait(self, workload: str) -> bool:
        """Forget the workload's portrait (its metrics expired): its pods placed from now on are estimated
        by their requests, as a workload never measured; pods already pending keep their estimate. Whether
        there was one."""
        self._portrait_gaps.pop(workload, None)
        return self.workloads.pop(workload, None) is not None

    @staticmethod
    def _check(portrait: Portrait) -> None:
        if tuple(portrait.metrics) != PORTRAIT_METRICS:
            raise ValueError(f"portrait metrics must be {PORTRAIT_METRICS}, got {portrait.metrics}")

    # ------------------------------------------------------------------------------------ pods

    def amounts(self, pod: PodRequest, metrics: tuple[str, ...]) -> FloatArray:
        """`pod_amounts` (read-only), remembered for the last pod: several plugins ask per cycle, and
        assume again."""
        last, known = self._amounts
        if last is not pod:
            known = {}
            self._amounts = (pod, known)
        found = known.get(metrics)
        if found is None:
            found = known[metrics] = pod_amounts(pod, metrics)
            found.setflags(write=False)
        return found

    def pod_load(self, pod: PodRequest, at: float) -> PodLoad:
        """The pod's hourly load estimate: its workload's portrait, or its request (cold start).

        Pods of one workload share one estimate (read-only arrays) when their requests agree on the metrics
        the portrait lacks some hour of (only there does the request count): it is asked for by several
        plugins per cycle and again on assume, and building it dominates a cheap cycle."""
        workload = pod.workload or pod.uid
        portrait = self.workloads.get(workload)
        last, last_portrait, last_load = self._last_load
        if last is pod and last_portrait is portrait:
            # The same pod again (the cycle's plugins, then assume).
            return PodLoad(at, last_load.mean, last_load.var)
        load = self._pod_load(pod, workload, portrait, at)
        self._last_load = (pod, portrait, load)
        return load

    def _pod_load(self, pod: PodRequest, workload: str, portrait: Portrait | None, at: float) -> PodLoad:
        requests = pod.effective_requests
        amounts = [requests.get(metric, 0) / metric_scale(metric) for metric in PORTRAIT_METRICS]
        # Without a portrait the estimate is the request alone: pods of every workload share it by shape.
        key = (
            workload if portrait is not None else None,
            tuple(a if gap else None for a, gap in zip(amounts, self._gaps(workload), strict=True)),
        )
        cached = self._loads.get(key)
        if cached is not None and cached[0] is portrait:
            return PodLoad(at, cached[1].mean, cached[1].var)
        load = pod_load(portrait, dict(zip(PORTRAIT_METRICS, amounts, strict=True)), PORTRAIT_METRICS, at)
        load.mean.setflags(write=False)
        load.var.setflags(write=False)
        if len(self._loads) >= _LOAD_CACHE:
            # Oldest first: dicts keep insertion order.
            del self._loads[next(iter(self._loads))]
        self._loads[key] = (portrait, load)
        return load

    def _gaps(self, workload: str) -> tuple[bool, ...]:
        """Per metric, whether the workload's portrait lacks any hour of it (every metric without one)."""
        portrait = self.workloads.get(workload)
        if portrait is None:
            return _ALL_GAPS
        known = self._portrait_gaps.get(workload)
        if known is None or known[0] is not portrait:
            complete = np.all(portrait.has_data, axis=0).tolist()
            gaps = tuple(not full for full in complete)
            known = self._portrait_gaps[workload] = (portrait, gaps)
        return known[1]

    def cycle_pod_load(self, state: dict[str, Any], pod: PodRequest, now: float) -> PodLoad:
        """`pod_load`, once per scheduling cycle: plugins share it through the cycle's state."""
        load: PodLoad | None = state.get(_POD_LOAD_STATE)
        if load is None:
            load = state[_POD_LOAD_STATE] = self.pod_load(pod, now)
        return load

    def on_assume(self, record: PodRecord) -> None:
        pod, row, at = record.info.pod, record.row, record.at
        load = self.pod_load(pod, at)
        entry = PendingPod(pod.uid, pod, at, self.amounts(pod, WINDOW_METRICS), load)
        self.pending.setdefault(row, {})[pod.uid] = entry
        if self._in_window(row, at):
            self.window_assumed[row] += entry.requests
            for predict, sums in self._predicted.values():
                sums[row] += predict(pod)
        hours = uncovered_hours(self.seen[row], at)
        if hours.all():
            # A pod placed after every hour's measurement (the usual case): no hour to pick.
            self.base_mean[row] += load.mean
            self.base_var[row] += load.var
            self._stale.add(row)
        elif hours.any():
            self.base_mean[row, hours] += load.mean[hours]
            self.base_var[row, hours] += load.var[hours]
            self._stale.add(row)
        self.snapshot.row_changed(row, PLACED)

    def on_forget(self, record: PodRecord) -> None:
        pending = self.pending.get(record.row)
        if pending is not None and pending.pop(record.info.pod.uid, None) is not None:
            self.refresh_row(record.row)

    def predicted_cpu(self, key: Hashable, predict: PredictCpu) -> FloatArray:
        """Per row, Σ predict(pod) over pods placed since the window's newest sample (millicores), for
        one way of predicting a pod's cpu (TargetLoadPacking's args), kept incrementally from first use."""
        entry = self._predicted.get(key)
        if entry is None:
            sums = self.assumed_cpu_extra.copy()
            for row, pods in self.pending.items():
                sums[row] += sum(predict(p.pod) for p in pods.values() if self._in_window(row, p.at))
            entry = self._predicted[key] = (predict, sums)
        return entry[1]

    def _in_window(self, row: int, at: float) -> bool:
        return bool(at > self.window_end[row] - self.reporting_interval)

    # ------------------------------------------------------------------------------ bookkeeping

    def refresh_row(self, row: int) -> None:
        """Recompute the row's derived arrays from its measurements and pending pods; drop pods that every
        measurement now covers."""
        pods = self.pending.get(row, {})
        seen = self.seen[row]
        assumed = np.zeros(len(WINDOW_METRICS))
        mean = self.portrait_mean[row].copy()
        var = self.portrait_var[row].copy()
        covered = []
        predicted = {key: 0.0 for key in self._predicted}
        for uid, entry in pods.items():
            in_window = self._in_window(row, entry.at)
            hours = uncovered_hours(seen, entry.at)
            if in_window:
                assumed += entry.requests
                for key, (predict, _) in self._predicted.items():
                    predicted[key] += predict(entry.pod)
            if hours.any():
                mean[hours] += entry.load.mean[hours]
                var[hours] += entry.load.var[hours]
            elif not in_window:
                covered.append(uid)
        for uid in covered:
            del pods[uid]
        if not pods:
            self.pending.pop(row, None)
        self.window_assumed[row] = assumed + self.assumed_extra[row]
        for key, (_, sums) in self._predicted.items():
            sums[row] = predicted[key] + self.assumed_cpu_extra[row]
        self.base_mean[row] = mean
        self.base_var[row] = var
        self._stale.add(row)
        self.snapshot.row_changed(row, MEASURED)

    # ------------------------------------------------------------------ bounds, derived on read

    @property
    def cap_max(self) -> FloatArray:
        """max over hours of base μ + z·σ: an upper bound that lets the portrait filter skip most rows."""
        self._derive_bounds()
        return self._cap_max  # type: ignore[no-any-return]

    @property
    def peak(self) -> FloatArray:
        """max over hours of base μ (PeakReference)."""
        self._derive_bounds()
        return self._peak  # type: ignore[no-any-return]

    @property
    def below_peak(self) -> FloatArray:
        """max of base μ over the hours before the (first) hour of `peak`, −inf when that is hour 0: with a
        pod whose load is the same every hour, that hour stays the peak unless rounding ties an earlier
        one."""
        self._derive_bounds()
        return self._below_peak  # type: ignore[no-any-return]

    @property
    def peak_var(self) -> FloatArray:
        """base σ² at the (first) hour of `peak`."""
        self._derive_bounds()
        return self._peak_var  # type: ignore[no-any-return]

    def _derive_bounds(self) -> None:
        """The stale rows' bounds, all at once (the same elementwise arithmetic as one row at a time)."""
        if not self._stale:
            return
        rows = np.fromiter(self._stale, dtype=np.intp, count=len(self._stale))
        self._stale.clear()
        mean, var = self.base_mean[rows], self.base_var[rows]
        self._cap_max[rows] = (mean + self.z * np.sqrt(np.maximum(var, 0.0))).max(axis=1)
        hour = mean.argmax(axis=1)[:, None, :]
        self._peak[rows] = np.take_along_axis(mean, hour, axis=1)[:, 0, :]
        self._below_peak[rows] = np.where(_HOURS[None, :, None] < hour, mean, -np.inf).max(axis=1)
        self._peak_var[rows] = np.take_along_axis(var, hour, axis=1)[:, 0, :]

    def nbytes(self) -> int:
        arrays: list[npt.NDArray[np.generic]] = [
            self.window_mean,
            self.window_std,
            self.window_has,
            self.window_end,
            self.window_assumed,
            self.assumed_extra,
            self.assumed_cpu_extra,
            self.portrait_mean,
            self.portrait_var,
            self.portrait_has,
            self.seen,
            self.base_mean,
            self.base_var,
            self._cap_max,
            self._peak,
            self._below_peak,
            self._peak_var,
        ]
        return sum(int(a.nbytes) for a in arrays) + sum(int(s.nbytes) for _, s in self._predicted.values())
