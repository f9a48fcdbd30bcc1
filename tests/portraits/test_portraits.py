"""Hourly portraits, sliding windows and AssumePodOnNode, against hand-computed values."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from portraits import HourlyPortraits, SlidingWindows, assume_pod_on_node, hour_of_day, node_base, pod_load
from portraits.assume import PodLoad
from portraits.hourly import HOURS, Portrait

METRICS = ("cpu", "memory")
DAY = 86400.0


def portraits(days: float = 7.0, **kwargs: float) -> HourlyPortraits:
    return HourlyPortraits(METRICS, days=days, **kwargs)


def flat_portrait(cpu: float, cpu_std: float = 0.0, metrics: tuple[str, ...] = METRICS) -> Portrait:
    mean = np.zeros((HOURS, len(metrics)))
    std = np.zeros_like(mean)
    mean[:, 0], std[:, 0] = cpu, cpu_std
    has = np.zeros(mean.shape, dtype=np.bool_)
    has[:, 0] = True
    return Portrait(metrics, mean, std, has)


# ------------------------------------------------------------------------------------- hourly


@dataclass(frozen=True)
class HourCase:
    name: str
    ts: float
    utc_offset: float
    hour: int


HOUR_CASES = [
    HourCase("Midnight UTC is hour 0.", 0.0, 0.0, 0),
    HourCase("One second before midnight is hour 23.", DAY - 1, 0.0, 23),
    HourCase("A zone eight hours east moves 20:00 UTC to hour 4.", 20 * 3600.0, 8 * 3600.0, 4),
    HourCase("A zone five hours west moves 03:00 UTC to hour 22.", 3 * 3600.0, -5 * 3600.0, 22),
]


@pytest.mark.parametrize("case", HOUR_CASES, ids=[c.name for c in HOUR_CASES])
def test_hour_of_day(case: HourCase) -> None:
    assert int(hour_of_day([case.ts], case.utc_offset)[0]) == case.hour


def test_samples_of_one_moment_give_their_mean_and_population_std() -> None:
    store = portraits()
    for value in (1.0, 2.0, 3.0, 6.0):
        store.update("w", 3600.0 * 5 + 10, {"cpu": value})
    portrait = store.portrait("w")
    assert portrait is not None
    assert portrait.mean[5, 0] == pytest.approx(3.0)
    assert portrait.std[5, 0] == pytest.approx(math.sqrt((4 + 1 + 0 + 9) / 4))
    assert portrait.has_data[5, 0] and not portrait.has_data[5, 1] and not portrait.has_data[4, 0]
    assert portrait.cap()[5, 0] == pytest.approx(3.0 + 1.645 * math.sqrt(3.5))


def test_a_sample_half_a_half_life_older_weighs_less_by_the_square_root_of_two() -> None:
    # days = 2 → half-life one day: a sample a day older counts half.
    store = portraits(days=2.0)
    store.update("w", 0.0, {"cpu": 0.0})
    store.update("w", DAY, {"cpu": 3.0})
    portrait = store.portrait("w")
    assert portrait is not None
    assert portrait.mean[0, 0] == pytest.approx(3.0 * 1.0 / 1.5)
    assert store.effective_count("w", DAY)[0, 0] == pytest.approx(1.5)
    assert store.effective_count("w", 2 * DAY)[0, 0] == pytest.approx(0.75)


def test_ageing_survives_a_rescale_far_into_the_future() -> None:
    store = portraits(days=2.0)
    store.update("w", 0.0, {"cpu": 100.0})
    store.update("w", 40 * DAY, {"cpu": 1.0})  # 40 half-lives later: a rescale, the old sample ~2^-40
    portrait = store.portrait("w")
    assert portrait is not None
    assert portrait.mean[0, 0] == pytest.approx(1.0, rel=1e-9)


def random_samples(count: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 5, count)
    ts = np.sort(rng.uniform(0, 9 * DAY, count))
    values = np.abs(rng.normal(4.0, 2.0, (count, 2)))
    values[rng.random((count, 2)) < 0.1] = np.nan  # some samples lack a metric
    return keys, ts, values


def assert_same_portraits(a: HourlyPortraits, b: HourlyPortraits) -> None:
    assert sorted(a.keys) == sorted(b.keys)
    for key in a.keys:
        pa, pb = a.portrait(key), b.portrait(key)
        assert pa is not None and pb is not None
        np.testing.assert_array_equal(pa.has_data, pb.has_data)
        np.testing.assert_allclose(pa.mean, pb.mean, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(pa.std, pb.std, rtol=1e-7, atol=1e-7)


def test_a_batch_update_equals_one_by_one_updates() -> None:
    keys, ts, values = random_samples(3000, seed=1)
    names = [f"w{k}" for k in keys]
    batch = portraits()
    batch.update_batch(batch.key_rows(names), ts, values)
    single = portraits()
    for name, t, row in zip(names, ts, values, strict=True):
        single.update(
            name, float(t), {m: float(v) for m, v in zip(METRICS, row, strict=True) if not np.isnan(v)}
        )
    assert_same_portraits(batch, single)


def test_merged_partial_portraits_equal_a_single_pass() -> None:
    keys, ts, values = random_samples(4000, seed=2)
    names = [f"w{k}" for k in keys]
    whole = portraits()
    whole.update_batch(whole.key_rows(names), ts, values)
    parts = [portraits(), portraits(), portraits()]
    for index, part in enumerate(parts):
        mine = np.arange(len(ts)) % 3 == index
        part.update_batch(
            part.key_rows([n for n, m in zip(names, mine, strict=True) if m]), ts[mine], values[mine]
        )
    merged = parts[0]
    merged.merge(parts[1])
    merged.merge(parts[2])
    assert_same_portraits(whole, merged)


def test_serialised_portraits_restore_exactly_and_stay_small() -> None:
    keys, ts, values = random_samples(500, seed=3)
    store = HourlyPortraits(days=7.0)  # the default six metrics
    rows = store.key_rows([f"w{k}" for k in keys])
    wide = np.full((len(ts), 6), np.nan)
    wide[:, :2] = values
    store.update_batch(rows, ts, wide)
    data = store.to_bytes("w0")
    assert len(data) <= 8 * 1024
    restored = HourlyPortraits(days=7.0)
    restored.load_bytes("w0", data)
    a, b = store.portrait("w0"), restored.portrait("w0")
    assert a is not None and b is not None
    np.testing.assert_array_equal(a.mean, b.mean)
    np.testing.assert_array_equal(a.std, b.std)


def other_metrics_bytes() -> bytes:
    store = HourlyPortraits(("cpu",))
    store.update("w", 0.0, {"cpu": 1.0})
    return store.to_bytes("w")


BAD_BYTES = [
    ("Bytes cut short are refused.", b"EYP1"),
    ("Bytes that are not a portrait are refused.", b"XXXX" + bytes(20)),
    ("A portrait of other metrics is refused.", other_metrics_bytes()),
]


@pytest.mark.parametrize(("name", "data"), BAD_BYTES, ids=[n for n, _ in BAD_BYTES])
def test_bad_portrait_bytes_are_refused(name: str, data: bytes) -> None:
    with pytest.raises(ValueError, match="portrait bytes"):
        portraits().load_bytes("w", data)


@dataclass(frozen=True)
class BadSample:
    name: str
    ts: float
    cpu: float
    reason: str


BAD_SAMPLES = [
    BadSample("A NaN-only sample has no values.", 10.0, math.nan, "no metric values"),
    BadSample("A negative value is refused.", 10.0, -1.0, "negative value"),
    BadSample("An infinite value is refused.", 10.0, math.inf, "value not finite"),
    BadSample("An absurd value is refused.", 10.0, 1e30, "absurd value"),
    BadSample("A timestamp far in the future is refused.", 1e9, 1.0, "timestamp in the future"),
    BadSample(
        "A negative timestamp is refused.", -5.0, 1.0, "timestamp not finite, negative or after year 9999"
    ),
    BadSample(
        "A timestamp after 9999 is refused.", 1e300, 1.0, "timestamp not finite, negative or after year 9999"
    ),
]


@pytest.mark.parametrize("case", BAD_SAMPLES, ids=[c.name for c in BAD_SAMPLES])
def test_bad_samples_are_counted_and_leave_the_portrait_alone(case: BadSample) -> None:
    for store in (portraits(), SlidingWindows(METRICS)):
        assert store.update("k", 0.0, {"cpu": 2.0}, now=100.0)
        assert not store.update("k", case.ts, {"cpu": case.cpu}, now=100.0)
        assert store.counters.rejected == {case.reason: 1}
        assert store.counters.accepted == 1


def test_an_unknown_key_row_in_a_batch_is_counted_not_raised() -> None:
    store = portraits()
    store.key_rows(["a"])
    accepted = store.update_batch([0, 7], [1.0, 2.0], [[1.0, 1.0], [1.0, 1.0]])
    assert accepted == 1
    assert store.counters.rejected == {"unknown key row": 1}


def test_metrics_the_store_does_not_keep_are_counted_as_ignored() -> None:
    store = portraits()
    assert store.update("w", 0.0, {"cpu": 1.0, "gpu_temp": 70.0})
    assert store.counters.ignored_metrics == 1


# -------------------------------------------------------------------------------------- window


def window(**kwargs: float) -> SlidingWindows:
    return SlidingWindows(("cpu",), window=60.0, buckets=6, **kwargs)


@dataclass(frozen=True)
class WindowCase:
    name: str
    samples: list[tuple[float, float]]
    now: float
    mean: float | None
    count: int
    dropped: int = 0


WINDOW_CASES = [
    WindowCase("Samples inside the window all count.", [(0, 1), (5, 3), (30, 5)], 30, 3.0, 3),
    WindowCase("Samples that fell out of the window are evicted.", [(0, 1), (5, 3), (61, 5)], 61, 5.0, 1),
    WindowCase(
        "An out-of-order sample inside the window is accepted.", [(0, 1), (61, 5), (30, 7)], 61, 6.0, 2
    ),
    WindowCase(
        "A sample older than the window is dropped and counted.", [(200, 2), (100, 9)], 200, 2.0, 1, dropped=1
    ),
    WindowCase("A query long after the last sample finds the window empty.", [(0, 1), (5, 3)], 500, None, 0),
    WindowCase(
        "A jump of many windows clears every bucket exactly.",
        [(0, 1), (10, 2), (20, 3), (1000, 4)],
        1000,
        4.0,
        1,
    ),
]


@pytest.mark.parametrize("case", WINDOW_CASES, ids=[c.name for c in WINDOW_CASES])
def test_sliding_window_one_by_one_and_batched(case: WindowCase) -> None:
    for batched in (False, True):
        store = window()
        if batched:
            rows = store.key_rows(["n"] * len(case.samples))
            store.update_batch(rows, [t for t, _ in case.samples], [[v] for _, v in case.samples])
        else:
            for t, v in case.samples:
                store.update("n", t, {"cpu": v})
        stats = store.key_stats("n", case.now)
        if case.mean is None:
            assert stats == {}
        else:
            mean, _, count = stats["cpu"]
            assert mean == pytest.approx(case.mean)
            assert count == case.count
        if not batched:
            # A batch moves the head first, so samples it pushes out count as dropped (documented).
            assert store.counters.dropped_old == case.dropped


def test_window_stats_give_mean_std_and_newest_sample_for_every_key() -> None:
    store = SlidingWindows(("cpu", "memory"), window=60.0, buckets=6)
    store.update("a", 10.0, {"cpu": 1.0, "memory": 100.0})
    store.update("a", 20.0, {"cpu": 3.0})
    store.update("b", 15.0, {"memory": 50.0})
    stats = store.stats(now=20.0)
    assert stats.mean[0].tolist() == [2.0, 100.0]
    assert stats.std[0, 0] == pytest.approx(1.0)
    assert stats.count[1].tolist() == [0.0, 1.0]
    assert stats.end.tolist() == [20.0, 15.0]


# -------------------------------------------------------------------------------------- assume


def test_assume_pod_on_node_adds_means_and_variances() -> None:
    node_mean = np.full((HOURS, 2), 2.0)
    node_var = np.full((HOURS, 2), 9.0)
    pod = PodLoad(10.0, np.full((HOURS, 2), 1.0), np.full((HOURS, 2), 16.0))
    result = assume_pod_on_node(node_mean, node_var, np.full(HOURS, 100.0), [], pod, z=2.0)
    assert result.mean[0, 0] == 3.0
    assert result.var[0, 0] == 25.0
    assert result.cap[0, 0] == 3.0 + 2.0 * 5.0


def test_a_pod_placed_after_the_node_was_measured_counts_until_its_hours_are_measured_again() -> None:
    seen = np.full(HOURS, 50.0)
    seen[:12] = 200.0  # hours 0..11 measured after the pod arrived at t = 100
    pod = PodLoad(100.0, np.full((HOURS, 2), 1.0), np.zeros((HOURS, 2)))
    mean, _ = node_base(np.zeros((HOURS, 2)), np.zeros((HOURS, 2)), seen, [pod])
    assert mean[:12, 0].tolist() == [0.0] * 12
    assert mean[12:, 0].tolist() == [1.0] * 12


def test_a_pod_without_a_workload_portrait_contributes_its_request() -> None:
    load = pod_load(None, {"cpu": 0.5, "memory": 1e9}, METRICS, at=0.0)
    assert load.mean[7].tolist() == [0.5, 1e9]
    assert load.var.max() == 0.0


def test_cells_missing_from_a_workload_portrait_fall_back_to_the_request() -> None:
    load = pod_load(flat_portrait(cpu=0.2, cpu_std=0.1), {"cpu": 2.0, "memory": 5.0}, METRICS, at=0.0)
    assert load.mean[0].tolist() == [0.2, 5.0]
    assert load.var[0].tolist() == pytest.approx([0.01, 0.0])
