"""Measured load per snapshot row, for the load-aware and portrait plugins: each node's sliding-window
statistics and hourly portrait (pushed in by whoever collects metrics: the metrics agent's summaries, a
replay, `eyrie explain`), and the pods placed since those were measured.

The hot path reads arrays only. Everything that depends on which pods the measurements have not caught up
with is kept per row and incrementally: a pod assumed on a row adds its estimate at once; a fresh
measurement of the row recomputes that row from its pending pods and prunes the ones now covered.

- Window side (Trimaran): a pod counts until the window's newest sample is `reporting_interval` past its
  placement (upstream's ScheduledPodsCache rule).
- Portrait side (SPEC 3.2): hour h of a pod counts until the node has a sample of hour h taken after it.

A `Snapshot` creates this on first use (`Snapshot.usage`), so profiles that never read load pay nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import numpy.typing as npt

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


def _metric_major(rows: int, metrics: int) -> FloatArray:
    """A zero (rows, HOURS, metrics) array laid out metric by metric, so that one metric's hours of any row
    (what the portrait plugins gather per candidate) are contiguous."""
    view: FloatArray = np.zeros((metrics, rows, HOURS)).transpose(1, 2, 0)
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
        self.base_mean = _metric_major(rows, metrics)
        self.base_var = _metric_major(rows, metrics)
        """Portrait plus pending pods: AssumePodOnNode's node side, per hour."""
        self.cap_max = np.zeros((rows, metrics))
        """max over hours of base μ + z·σ: an upper bound that lets the portrait filter skip most rows."""
        self.peak = np.zeros((rows, metrics))
        """max over hours of base μ (PeakReference)."""
        self.version = np.zeros(rows, dtype=np.int64)
        """Bumped whenever the row's base changes, so plugins can cache what they derive from a row's base
        (together with the snapshot's own row version, which covers allocatable)."""
        self.pending: dict[int, dict[str, PendingPod]] = {}
        self.workloads: dict[str, Portrait] = {}
        self._predicted: dict[Hashable, tuple[PredictCpu, FloatArray]] = {}
        self._tick = 0
        self._loads: dict[tuple[str, tuple[float, ...]], tuple[Portrait | None, PodLoad]] = {}
        for record in snapshot.pods.values():
            self.on_assume(record)

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
        for name in ("base_mean", "base_var"):
            array = getattr(self, name)
            result = _metric_major(rows, array.shape[2])
            result[:have] = array
            setattr(self, name, result)
        self.cap_max = grown(self.cap_max)
        self.peak = grown(self.peak)
        self.version = grown(self.version)
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

    @staticmethod
    def _check(portrait: Portrait) -> None:
        if tuple(portrait.metrics) != PORTRAIT_METRICS:
            raise ValueError(f"portrait metrics must be {PORTRAIT_METRICS}, got {portrait.metrics}")

    # ------------------------------------------------------------------------------------ pods

    def pod_load(self, pod: PodRequest, at: float) -> PodLoad:
        """The pod's hourly load estimate: its workload's portrait, or its request (cold start).

        Pods of one workload with the same requests share one estimate (read-only arrays): it is asked for
        by several plugins per cycle and again on assume, and building it dominates a cheap cycle."""
        workload = pod.workload or pod.uid
        portrait = self.workloads.get(workload)
        amounts = tuple(pod_amounts(pod, PORTRAIT_METRICS).tolist())
        key = (workload, amounts)
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

    def cycle_pod_load(self, state: dict[str, Any], pod: PodRequest, now: float) -> PodLoad:
        """`pod_load`, once per scheduling cycle: plugins share it through the cycle's state."""
        load: PodLoad | None = state.get(_POD_LOAD_STATE)
        if load is None:
            load = state[_POD_LOAD_STATE] = self.pod_load(pod, now)
        return load

    def on_assume(self, record: PodRecord) -> None:
        pod, row, at = record.info.pod, record.row, record.at
        entry = PendingPod(pod.uid, pod, at, pod_amounts(pod, WINDOW_METRICS), self.pod_load(pod, at))
        self.pending.setdefault(row, {})[pod.uid] = entry
        if self._in_window(row, at):
            self.window_assumed[row] += entry.requests
            for predict, sums in self._predicted.values():
                sums[row] += predict(pod)
        hours = uncovered_hours(self.seen[row], at)
        if hours.any():
            self.base_mean[row, hours] += entry.load.mean[hours]
            self.base_var[row, hours] += entry.load.var[hours]
            self._bounds(row)

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
        self._bounds(row)

    def _bounds(self, row: int) -> None:
        self._tick += 1
        self.version[row] = self._tick
        mean, var = self.base_mean[row], self.base_var[row]
        self.cap_max[row] = (mean + self.z * np.sqrt(np.maximum(var, 0.0))).max(axis=0)
        self.peak[row] = mean.max(axis=0)

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
            self.cap_max,
            self.peak,
            self.version,
        ]
        return sum(int(a.nbytes) for a in arrays) + sum(int(s.nbytes) for _, s in self._predicted.values())
