"""Ingest throughput: sliding windows and hourly portraits fed in batches against one sample at a time, in the
same process, on one core.

    python -m bench.ingest [--samples N] [--one-by-one K] [--nodes N] [--workloads W] [--chunk C]
                           [--days D] [--seed S] [--cprofile TOP]

A seeded synthetic metric stream, as the `eyrie.metrics` topic carries it: node samples (no pod) feed the
node's sliding window (cpu, memory, bandwidth) and the node's hourly portrait (the six default metrics); pod
samples feed their workload's portrait. Values follow a per-key daily cycle with noise; pod samples often
lack some metrics (NaN = absent). Timestamps spread over `--days` days, mostly in order, with jitter and a
few late samples.

- batch: per chunk of `--chunk` samples, `key_rows` for the chunk's keys and one `update_batch` per store.
- one-by-one: `update(key, ts, values)` per sample and store, over the first `--one-by-one` samples (the
  baseline the ratios are against).

Both paths start from the samples already decoded (key names, timestamps, a values matrix or dict per
sample): decoding is bench.codec's subject. The process is pinned to one core and numpy's thread pools to one
thread, so the figures are single-core figures. At the end, stores fed the one-by-one prefix in batches are
checked against the one-by-one stores (same portraits and windows within 1e-9 relative).

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import os

# Before numpy loads: one thread per pool, so nothing here runs on more than one core.
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["MKL_NUM_THREADS"] = "1"

import argparse
import cProfile
import gc
import io
import math
import pstats
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import orjson

from portraits.hourly import DEFAULT_METRICS, HourlyPortraits
from portraits.window import SlidingWindows

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

METRICS: Final = DEFAULT_METRICS  # cpu, memory, bandwidth, disk, llcmiss, crpki
WINDOW_METRICS: Final = ("cpu", "memory", "bandwidth")
START: Final = 1_700_000_000.0
GIB: Final = 2.0**30
TARGET_SAMPLES_PER_S: Final = 200_000
TARGET_BYTES: Final = 8 * 1024
TOLERANCE: Final = 1e-9


# ------------------------------------------------------------------------------------------ the stream


@dataclass(slots=True)
class Stream:
    is_node: BoolArray
    key: IntArray
    """Node index for node samples, workload index for pod samples."""
    ts: FloatArray
    values: FloatArray
    """(n, metrics), NaN where the sample lacks the metric."""
    node_names: list[str]
    workload_names: list[str]

    def __len__(self) -> int:
        return len(self.ts)


def _loguniform(rng: np.random.Generator, low: float, high: float, size: int) -> FloatArray:
    result: FloatArray = np.exp(rng.uniform(math.log(low), math.log(high), size))
    return result


def make_stream(samples: int, nodes: int, workloads: int, days: float, seed: int) -> Stream:
    rng = np.random.default_rng(seed)
    node_share = 0.3
    is_node = rng.random(samples) < node_share
    # Pods per workload are skewed: a few big deployments, a long tail of small ones.
    popularity = rng.lognormal(0.0, 1.2, workloads)
    workload_of = rng.choice(workloads, size=samples, p=popularity / popularity.sum())
    key = np.where(is_node, rng.integers(0, nodes, samples), workload_of).astype(np.int64)

    # Mostly in order: a sorted clock, ±15 s of jitter, and 1 % of samples 1-15 minutes late.
    span = days * 86400.0
    ts = START + np.sort(rng.uniform(0.0, span, samples)) + rng.normal(0.0, 15.0, samples)
    late = rng.random(samples) < 0.01
    ts[late] -= rng.uniform(60.0, 900.0, int(late.sum()))

    # Per key and metric: a level, a daily amplitude and phase. Node levels are 20-70 % of a machine;
    # pod levels span small sidecars to big jobs.
    cores = rng.choice(np.array([16.0, 32.0, 64.0, 96.0]), nodes)
    node_level = np.stack(
        [
            cores * rng.uniform(0.2, 0.7, nodes),  # cpu, cores
            cores * 4 * GIB * rng.uniform(0.2, 0.7, nodes),  # memory, bytes
            1.25e9 * rng.uniform(0.2, 0.7, nodes),  # bandwidth, bytes/s of 10 Gbit/s
            _loguniform(rng, 1e11, 1e12, nodes),  # disk, bytes
            rng.uniform(0.05, 3.0, nodes),  # LLC misses per kilo-instruction
            rng.uniform(0.2, 3.0, nodes),  # cache references per kilo-instruction
        ],
        axis=1,
    )
    workload_level = np.stack(
        [
            _loguniform(rng, 0.05, 8.0, workloads),
            _loguniform(rng, 128 * 2.0**20, 32 * GIB, workloads),
            _loguniform(rng, 1e5, 1e8, workloads),
            _loguniform(rng, 1e8, 1e10, workloads),
            rng.uniform(0.01, 1.0, workloads),
            rng.uniform(0.05, 1.0, workloads),
        ],
        axis=1,
    )
    width = len(METRICS)
    amplitude = rng.uniform(0.1, 0.6, (nodes + workloads, width))
    phase = rng.uniform(0.0, 24.0, (nodes + workloads, width))
    level = np.concatenate([node_level, workload_level])
    who = np.where(is_node, key, nodes + key)
    hour = np.mod(ts, 86400.0) / 3600.0
    cycle = 1.0 + amplitude[who] * np.sin(2 * np.pi * (hour[:, None] - phase[who]) / 24.0)
    values = level[who] * cycle * rng.lognormal(0.0, 0.15, (samples, width))

    # What samples carry: nodes all six metrics (10 % of nodes without perf counters); pods always cpu and
    # memory, bandwidth 80 %, disk 50 %, the perf counters 30 %.
    no_perf = rng.random(nodes) < 0.10
    present = np.ones((samples, width), dtype=np.bool_)
    pod = ~is_node
    present[is_node, 4:] = ~no_perf[key[is_node], None]
    present[pod, 2] = rng.random(int(pod.sum())) < 0.8
    present[pod, 3] = rng.random(int(pod.sum())) < 0.5
    present[pod, 4:] = (rng.random(int(pod.sum())) < 0.3)[:, None]
    values[~present] = np.nan
    return Stream(
        is_node,
        key,
        ts,
        values,
        [f"node-{i:05d}" for i in range(nodes)],
        [f"team-{i % 97:02d}/app-{i:05d}" for i in range(workloads)],
    )


@dataclass(slots=True)
class Chunk:
    """One chunk, decoded and split by kind (what a consumer of the topic has before it updates)."""

    now: float
    node_names: list[str]
    node_ts: FloatArray
    node_values: FloatArray
    window_values: FloatArray
    pod_names: list[str]
    pod_ts: FloatArray
    pod_values: FloatArray


def chunks(stream: Stream, start: int, stop: int, size: int) -> list[Chunk]:
    result = []
    window_columns = [METRICS.index(m) for m in WINDOW_METRICS]
    for first in range(start, stop, size):
        part = slice(first, min(first + size, stop))
        is_node, key, ts = stream.is_node[part], stream.key[part], stream.ts[part]
        values = stream.values[part]
        node_values = np.ascontiguousarray(values[is_node])
        result.append(
            Chunk(
                now=float(ts.max()),
                node_names=[stream.node_names[k] for k in key[is_node].tolist()],
                node_ts=ts[is_node],
                node_values=node_values,
                window_values=np.ascontiguousarray(node_values[:, window_columns]),
                pod_names=[stream.workload_names[k] for k in key[~is_node].tolist()],
                pod_ts=ts[~is_node],
                pod_values=np.ascontiguousarray(values[~is_node]),
            )
        )
    return result


# ------------------------------------------------------------------------------------------ the stores


@dataclass(slots=True)
class Stores:
    windows: SlidingWindows
    nodes: HourlyPortraits
    workloads: HourlyPortraits

    @classmethod
    def fresh(cls) -> Stores:
        return cls(SlidingWindows(WINDOW_METRICS), HourlyPortraits(METRICS), HourlyPortraits(METRICS))


STAGES: Final = ("keys", "window", "node portraits", "workload portraits")


def run_batch(stores: Stores, batches: list[Chunk]) -> tuple[float, dict[str, float]]:
    """Seconds for every chunk, and their split over the stages."""
    clock = time.perf_counter
    split = dict.fromkeys(STAGES, 0.0)
    windows, nodes, workloads = stores.windows, stores.nodes, stores.workloads
    for chunk in batches:
        t0 = clock()
        window_rows = windows.key_rows(chunk.node_names)
        node_rows = nodes.key_rows(chunk.node_names)
        pod_rows = workloads.key_rows(chunk.pod_names)
        t1 = clock()
        windows.update_batch(window_rows, chunk.node_ts, chunk.window_values, now=chunk.now)
        t2 = clock()
        nodes.update_batch(node_rows, chunk.node_ts, chunk.node_values, now=chunk.now)
        t3 = clock()
        workloads.update_batch(pod_rows, chunk.pod_ts, chunk.pod_values, now=chunk.now)
        t4 = clock()
        for stage, seconds in zip(STAGES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            split[stage] += seconds
    return sum(split.values()), split


Sample = tuple[bool, str, float, dict[str, float], float]
"""is_node, key name, ts, values present, now."""


def one_by_one_samples(stream: Stream, count: int, chunk: int) -> list[Sample]:
    result: list[Sample] = []
    for first in range(0, count, chunk):
        stop = min(first + chunk, count)
        now = float(stream.ts[first:stop].max())
        for i in range(first, stop):
            row = stream.values[i]
            values = {m: float(v) for m, v in zip(METRICS, row.tolist(), strict=True) if not math.isnan(v)}
            names = stream.node_names if stream.is_node[i] else stream.workload_names
            result.append((bool(stream.is_node[i]), names[stream.key[i]], float(stream.ts[i]), values, now))
    return result


def run_one_by_one(stores: Stores, samples: list[Sample]) -> float:
    windows, nodes, workloads = stores.windows, stores.nodes, stores.workloads
    start = time.perf_counter()
    for is_node, key, ts, values, now in samples:
        if is_node:
            windows.update(key, ts, values, now=now)
            nodes.update(key, ts, values, now=now)
        else:
            workloads.update(key, ts, values, now=now)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------------------ correctness


def _relative(a: FloatArray, b: FloatArray, scale: FloatArray) -> float:
    """Largest |a − b| relative to max(|a|, |b|, scale); 0 for empty arrays."""
    if a.size == 0:
        return 0.0
    denominator = np.maximum(np.maximum(np.abs(a), np.abs(b)), scale)
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(denominator > 0, np.abs(a - b) / denominator, 0.0)
    return float(ratio.max())


def compare_portraits(a: HourlyPortraits, b: HourlyPortraits) -> tuple[int, float, int]:
    """Keys compared, largest relative error of μ and of σ (σ relative to max(|μ|, σ): what cap = μ + zσ
    sees), and cells whose presence differs."""
    worst, presence = 0.0, 0
    if set(a.keys) != set(b.keys):
        raise AssertionError(f"different keys: {len(a.keys)} against {len(b.keys)}")
    for key, row in a.keys.items():
        mine, theirs = a.portrait_of_row(row), b.portrait_of_row(b.keys[key])
        presence += int((mine.has_data != theirs.has_data).sum())
        has = mine.has_data & theirs.has_data
        worst = max(
            worst,
            _relative(mine.mean[has], theirs.mean[has], np.zeros(1)),
            _relative(mine.std[has], theirs.std[has], np.abs(mine.mean[has])),
        )
    return len(a.keys), worst, presence


def compare_windows(a: SlidingWindows, b: SlidingWindows, now: float) -> tuple[int, float, int]:
    """Keys compared, largest relative error of mean and std, and key-metrics whose count differs."""
    first, second = a.stats(now), b.stats(now)
    order = np.array([b.keys[name] for name in a.names], dtype=np.int64)
    count_b, mean_b, std_b = second.count[order], second.mean[order], second.std[order]
    counts = int((np.rint(first.count) != np.rint(count_b)).sum())
    worst = max(
        _relative(first.mean, mean_b, np.zeros(1)),
        _relative(first.std, std_b, np.abs(first.mean)),
    )
    return len(a.names), worst, counts


# ------------------------------------------------------------------------------------------ report


def _pin_one_core() -> str:
    """Pin the process to one cpu (where the platform allows it)."""
    affinity: Callable[..., Any] | None = getattr(os, "sched_setaffinity", None)
    if affinity is None:
        return "not pinned (no sched_setaffinity)"
    allowed = sorted(os.sched_getaffinity(0))
    affinity(0, {allowed[0]})
    return f"pinned to cpu {allowed[0]}"


def profile_batch(batches: list[Chunk], top: int) -> str:
    profiler = cProfile.Profile()
    stores = Stores.fresh()
    profiler.enable()
    run_batch(stores, batches)
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--one-by-one", type=int, default=20_000, help="samples the one-by-one path runs")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--workloads", type=int, default=20_000)
    parser.add_argument("--chunk", type=int, default=10_000, help="samples per update_batch")
    parser.add_argument("--days", type=float, default=3.0, help="the timestamps' span")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--cprofile", type=int, default=0, help="profile the batch path; print the top N")
    args = parser.parse_args()
    one_by_one = min(args.one_by_one, args.samples)

    pinned = _pin_one_core()
    started = time.perf_counter()
    stream = make_stream(args.samples, args.nodes, args.workloads, args.days, args.seed)
    batches = chunks(stream, 0, len(stream), args.chunk)
    singles = one_by_one_samples(stream, one_by_one, args.chunk)
    prefix = chunks(stream, 0, one_by_one, args.chunk)
    setup_s = time.perf_counter() - started

    gc.collect()
    gc.freeze()
    batch_stores = Stores.fresh()
    batch_s, split = run_batch(batch_stores, batches)
    single_stores = Stores.fresh()
    single_s = run_one_by_one(single_stores, singles)

    batch_rate = len(stream) / batch_s
    single_rate = one_by_one / single_s
    workloads = batch_stores.workloads
    some_workload = workloads.names[0]
    serialised = len(workloads.to_bytes(some_workload))
    in_memory = workloads.nbytes_per_key()
    allocated = sum(int(getattr(workloads, a).nbytes) for a in ("weight", "mean", "m2", "epoch"))

    # Correctness: the one-by-one prefix fed again in batches must give the same stores.
    check = Stores.fresh()
    run_batch(check, prefix)
    end = max(c.now for c in prefix)
    portrait_checks = [
        compare_portraits(single_stores.nodes, check.nodes),
        compare_portraits(single_stores.workloads, check.workloads),
    ]
    window_check = compare_windows(single_stores.windows, check.windows, end)
    worst = max(w for _, w, _ in (*portrait_checks, window_check))
    mismatched = sum(m for _, _, m in (*portrait_checks, window_check))
    same = worst <= TOLERANCE and mismatched == 0

    node_samples = int(stream.is_node.sum())
    pod_samples = len(stream) - node_samples
    print(
        f"ingest benchmark: {len(stream):,} samples ({node_samples:,} node, {pod_samples:,} pod) "
        f"over {args.days:g} days, {args.nodes:,} nodes, {args.workloads:,} workloads, seed {args.seed}"
    )
    counters = batch_stores.windows.counters
    for label, text in (
        ("cores", f"{os.cpu_count()} on the machine; {pinned}, numpy threads 1"),
        ("setup", f"{setup_s:.2f} s (stream, chunks, per-sample dicts)"),
        (
            "stores",
            f"{len(batch_stores.windows):,} windows, {len(batch_stores.nodes):,} node portraits, "
            f"{len(workloads):,} workload portraits",
        ),
        (
            "window",
            f"{counters.accepted:,} samples in a window, {counters.dropped_old:,} dropped as too old",
        ),
    ):
        print(f"  {label:<19}{text}")
    print()
    print(f"  {'path':<12}{'samples':>11}{'seconds':>10}{'samples/s':>12}{'µs/sample':>11}")
    for name, count, seconds in (("batch", len(stream), batch_s), ("one-by-one", one_by_one, single_s)):
        rate, micros = count / seconds, 1e6 * seconds / count
        print(f"  {name:<12}{count:>11,}{seconds:>10.3f}{rate:>12,.0f}{micros:>11.2f}")
    print(f"  ratio {batch_rate / single_rate:,.1f}x (batch of {args.chunk:,} against one-by-one, one core)")
    print("  batch time by stage: " + ", ".join(f"{k} {100 * v / batch_s:.0f}%" for k, v in split.items()))
    print()
    print(
        f"  workload portrait  {serialised:,} bytes serialised, {in_memory:,} bytes in memory "
        f"({allocated / len(workloads):,.0f} bytes/key as allocated, growth slack included)"
    )
    print(
        f"  targets            batch {batch_rate:,.0f}/s vs {TARGET_SAMPLES_PER_S:,}/s: "
        f"{'met' if batch_rate >= TARGET_SAMPLES_PER_S else 'NOT met'}; "
        f"{serialised:,} bytes vs {TARGET_BYTES:,}: {'met' if serialised <= TARGET_BYTES else 'NOT met'}"
    )
    print(
        f"  same_results: {str(same).lower()} over the first {one_by_one:,} samples "
        f"({portrait_checks[0][0]:,} node and {portrait_checks[1][0]:,} workload portraits, "
        f"{window_check[0]:,} windows; worst relative difference {worst:.1e}, {mismatched} presence/count "
        "mismatches)"
    )
    if args.cprofile:
        print()
        print(profile_batch(batches, args.cprofile))
    figures = {
        "samples_per_s": {"batch": round(batch_rate), "one_by_one": round(single_rate)},
        "ratio": round(batch_rate / single_rate, 1),
        "batch_split": {k: round(v / batch_s, 3) for k, v in split.items()},
        "bytes_per_workload_portrait": serialised,
        "bytes_in_memory_per_workload_portrait": in_memory,
        "same_results": same,
        "worst_relative_difference": worst,
        "samples": len(stream),
        "one_by_one_samples": one_by_one,
        "chunk": args.chunk,
        "days": args.days,
        "cores": os.cpu_count(),
        "pinned": pinned,
    }
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
