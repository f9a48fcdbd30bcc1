"""The demo's workload (a synthetic openb-like log, a slice of the real trace) and its report.

The real traces live in ``../shared/traces`` beside the repository; the slice tests skip when it is absent.
The synthetic generator needs no files.
"""

from collections import Counter
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest

from evaluation.traces.alibaba_gpu2023 import iter_alibaba_gpu2023
from evaluation.traces.common import Report
from schemas.codec import decode_topic_value
from schemas.eventlog import LogEvent, read_events
from schemas.events import MetricSample
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from streams.demo.report import DemoSummary, deleted_uids, render_table, summarize, write_plots
from streams.demo.workload import (
    NODE_MIX,
    POD_SHAPES,
    WorkloadInfo,
    generate_gpu_like_log,
    slice_gpu_trace,
)
from tests.paths import ALIBABA_GPU_2023

GPU = "nvidia.com/gpu"
MIB = 2**20
GIB = 2**30
TOPIC_TYPES = {
    "metrics": (MetricSample,),
    "node-events": (NodeEvent,),
    "pod-requests": (PodRequest, PodDeleted),
}

# --- builders ------------------------------------------------------------------------------------------


def generate(tmp_path: Path, name: str = "log.jsonl", **options) -> tuple[WorkloadInfo, Path]:
    options = {"nodes": 40, "pods": 300, **options}
    path = tmp_path / name
    return generate_gpu_like_log(path, **options), path


def events_of(path: Path) -> list[LogEvent]:
    return list(read_events(path))


def raw_values(path: Path, topic: str) -> list[dict[str, Any]]:
    """One topic's values as plain JSON: a fraction of the cost of validating thousands of them."""
    records = (orjson.loads(line) for line in path.read_bytes().splitlines())
    return [record["value"] for record in records if record["topic"] == topic]


def raw_requests(path: Path) -> list[dict[str, Any]]:
    return [value for value in raw_values(path, "pod-requests") if value.get("kind") != "PodDeleted"]


def node(name: str, cpu_milli: int, memory: int, gpus: int = 0) -> NodeSpec:
    capacity: dict[str, str | int] = {"cpu": f"{cpu_milli}m", "memory": memory, "pods": 110}
    if gpus:
        capacity[GPU] = gpus
    return NodeSpec(name=name, capacity=capacity)


def decision(
    uid: str, node_name: str | None, status: str, requests: dict[str, Any] | None = None
) -> dict[str, Any]:
    made: dict[str, Any] = {
        "uid": uid,
        "node": node_name,
        "cluster": "default",
        "status": status,
        "reasons": [],
    }
    if requests is not None:
        made["requests"] = requests
    return made


def gpu_class(gpu: dict[str, int] | None) -> str:
    """The kind of a pod by its `gpu` request (as JSON): none, a share of one card, one or several cards."""
    if not gpu:
        return "cpu-only"
    if gpu.get("count", 1) > 1:
        return "multi-gpu"
    return "shared-gpu" if gpu.get("milli", 1000) < 1000 else "whole-gpu"


def need_traces() -> None:
    if not ALIBABA_GPU_2023.is_dir():
        pytest.skip(
            f"the real openb trace is not at {ALIBABA_GPU_2023} (it lives in shared/traces beside the repo)"
        )


# --- the synthetic log ---------------------------------------------------------------------------------


def test_the_same_seed_writes_byte_identical_logs(tmp_path):
    first_info, first = generate(tmp_path, "first.jsonl", seed=7)
    second_info, second = generate(tmp_path, "second.jsonl", seed=7)
    assert first.read_bytes() == second.read_bytes()
    assert first_info == second_info


def test_a_different_seed_writes_a_different_log(tmp_path):
    _, first = generate(tmp_path, "first.jsonl", seed=7)
    _, second = generate(tmp_path, "second.jsonl", seed=8)
    assert first.read_bytes() != second.read_bytes()


def test_events_are_in_ts_order_with_every_node_before_any_pod_or_sample(tmp_path):
    _, path = generate(tmp_path)
    events = events_of(path)  # read_events itself rejects a ts going backwards
    assert all(a.ts <= b.ts for a, b in pairwise(events))
    topics = [event.topic for event in events]
    last_node = max(index for index, topic in enumerate(topics) if topic == "node-events")
    assert all(topic == "node-events" for topic in topics[: last_node + 1])


def test_every_line_decodes_as_its_topics_model(tmp_path):
    _, path = generate(tmp_path)
    seen: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        record = orjson.loads(line)
        value = decode_topic_value(record["topic"], orjson.dumps(record["value"]))
        assert isinstance(value, TOPIC_TYPES[record["topic"]])
        seen[type(value).__name__] += 1
    assert set(seen) == {"NodeEvent", "PodRequest", "PodDeleted", "MetricSample"}


def test_the_info_counts_what_the_log_holds(tmp_path):
    info, path = generate(tmp_path)
    events = events_of(path)
    kinds = Counter(type(event.value).__name__ for event in events)
    assert info == WorkloadInfo(
        nodes=kinds["NodeEvent"],
        pods=kinds["PodRequest"],
        deletions=kinds["PodDeleted"],
        samples=kinds["MetricSample"],
        span_seconds=events[-1].ts,
    )
    assert (info.nodes, info.pods) == (40, 300)
    assert 0 < info.deletions < info.pods


def test_pod_uids_are_unique_and_numbered_in_creation_order(tmp_path):
    _, path = generate(tmp_path)
    uids = [event.key for event in events_of(path) if isinstance(event.value, PodRequest)]
    assert uids == [f"pod-{index:05d}" for index in range(300)]


def test_every_deletion_follows_the_creation_of_its_pod_and_no_pod_is_deleted_twice(tmp_path):
    _, path = generate(tmp_path)
    created: dict[str, float] = {}
    deleted: set[str] = set()
    for event in events_of(path):
        assert event.key is not None
        if isinstance(event.value, PodRequest):
            created[event.key] = event.ts
            assert event.value.created_at == event.ts
        elif isinstance(event.value, PodDeleted):
            assert event.key in created and event.value.ts == event.ts > created[event.key]
            assert event.key not in deleted
            deleted.add(event.key)
    assert deleted


def test_the_node_mix_follows_the_hard_coded_table_for_a_large_cluster(tmp_path):
    _, path = generate(tmp_path, nodes=3000, pods=0, metrics=False)
    counts = Counter(
        (
            spec.capacity["cpu"],
            spec.capacity["memory"] // MIB,
            spec.capacity.get(GPU, 0),
            spec.labels.get("gpu-model", ""),
        )
        for spec in (event.value.node for event in events_of(path))
    )
    total = sum(kind.nodes for kind in NODE_MIX)
    assert sum(counts.values()) == 3000
    for kind in NODE_MIX:
        share = counts[(kind.cpu_milli, kind.memory_mib, kind.gpus, kind.model)] / 3000
        assert share == pytest.approx(kind.nodes / total, abs=0.005), kind


def test_the_pod_mix_follows_the_hard_coded_shapes_for_a_large_sample(tmp_path):
    _, path = generate(tmp_path, nodes=10, pods=6000, metrics=False)
    pods = raw_requests(path)
    observed = Counter(gpu_class(pod.get("gpu")) for pod in pods)
    expected: Counter[str] = Counter()
    for shape in POD_SHAPES:
        gpu = {"milli": shape.gpu_milli, "count": shape.gpus} if shape.gpus else None
        expected[gpu_class(gpu)] += shape.pods
    whole = sum(expected.values())
    for kind, count in expected.items():
        # Binomial noise over 6,000 draws is under 0.5 pp for these shares; 2 pp leaves room.
        assert observed[kind] / len(pods) == pytest.approx(count / whole, abs=0.02), kind
    qos = Counter(pod["labels"]["qos"] for pod in pods)
    assert qos["LS"] > qos["BE"] > qos["Burstable"] > 0


def test_generated_nodes_and_pods_are_what_the_converter_makes_of_the_same_rows(tmp_path):
    """The generator builds models itself; writing its nodes and pods back as trace rows and converting
    them must give the same models (priority aside: the trace has none, the generator derives it)."""
    # Guaranteed pods are rare (5 in the 8,018 of the table); these 2,000 pods of seed 42 have two.
    _, path = generate(tmp_path, nodes=30, pods=2000, metrics=False)
    specs = [NodeEvent.model_validate(value).node for value in raw_values(path, "node-events")]
    raw = raw_requests(path)
    chosen = {gpu_class(pod.get("gpu")): pod for pod in raw}
    chosen["guaranteed"] = next(pod for pod in raw if pod["labels"]["qos"] == "Guaranteed")
    pods = sorted(
        (PodRequest.model_validate(pod) for pod in chosen.values()), key=lambda pod: pod.created_at or 0.0
    )
    assert len(pods) == 5
    folder = tmp_path / "trace"
    folder.mkdir()
    node_rows = ["sn,cpu_milli,memory_mib,gpu,model"] + [
        f"{s.name},{s.capacity['cpu']},{s.capacity['memory'] // MIB},{s.capacity.get(GPU, 0)},"
        f"{s.labels.get('gpu-model', '')}"
        for s in specs
    ]
    (folder / "openb_node_list_all_node.csv").write_text("\n".join(node_rows) + "\n")
    pod_rows = [
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time"
    ]
    for pod in pods:
        asked = pod.effective_requests
        cards, milli = (pod.gpu.count, pod.gpu.milli) if pod.gpu else (0, 0)
        pod_rows.append(
            f"{pod.uid},{asked['cpu']},{asked['memory'] // MIB},{cards},{milli},,"
            f"{pod.labels['qos']},,{pod.created_at},"
        )
    (folder / "openb_pod_list_default.csv").write_text("\n".join(pod_rows) + "\n")

    report = Report()
    converted = list(iter_alibaba_gpu2023(folder, report))
    assert report.bad_row_count == 0
    assert [value.node for _, _, _, value in converted if isinstance(value, NodeEvent)] == specs
    converted_pods = [value for _, _, _, value in converted if isinstance(value, PodRequest)]
    assert converted_pods == [pod.model_copy(update={"priority": 0}) for pod in pods]
    assert {pod.priority for pod in pods} > {0}


def test_node_samples_start_at_zero_and_stay_within_each_nodes_capacity(tmp_path):
    info, path = generate(tmp_path)
    events = events_of(path)
    specs = {event.value.node.name: event.value.node for event in events if event.topic == "node-events"}
    samples = [event.value for event in events if event.topic == "metrics"]
    assert {sample.node for sample in samples if sample.ts == 0.0} == set(specs)
    per_node = Counter(sample.node for sample in samples)
    assert min(per_node.values()) >= 2
    for sample in samples:
        assert sample.pod is None and set(sample.values) == {"cpu", "memory"}
        assert 0 <= sample.values["cpu"] <= specs[sample.node].capacity["cpu"] / 1000
        assert 0 <= sample.values["memory"] <= specs[sample.node].capacity["memory"]
        assert sample.ts <= info.span_seconds


def test_without_metrics_the_log_has_no_samples(tmp_path):
    info, path = generate(tmp_path, metrics=False)
    assert info.samples == 0
    assert not any(event.topic == "metrics" for event in events_of(path))


@pytest.mark.parametrize(
    ("options", "field"),
    [
        pytest.param({"pods": -1}, "pods", id="A negative pod count is refused, naming pods."),
        pytest.param({"nodes": -5}, "nodes", id="A negative node count is refused, naming nodes."),
        pytest.param({"seed": -1}, "seed", id="A negative seed is refused, naming seed."),
        pytest.param(
            {"mean_interarrival_s": 0.0},
            "mean_interarrival_s",
            id="A zero mean gap between arrivals is refused, naming mean_interarrival_s.",
        ),
    ],
)
def test_bad_generator_arguments_are_refused(tmp_path, options, field):
    with pytest.raises(InvalidInput) as error:
        generate(tmp_path, **options)
    assert error.value.field == field


# --- a slice of the real trace -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pods", "nodes", "node_count"),
    [
        pytest.param(250, None, 1523, id="The first 250 pods come with all 1,523 nodes of the trace."),
        pytest.param(40, 200, 200, id="The first 40 pods come with 200 nodes spread over the node list."),
        pytest.param(0, 10, 10, id="No pods still gives the nodes asked for."),
    ],
)
def test_a_slice_of_the_real_trace_has_exactly_the_pods_asked_for(tmp_path, pods, nodes, node_count):
    need_traces()
    path = tmp_path / "slice.jsonl"
    info = slice_gpu_trace(ALIBABA_GPU_2023, path, pods=pods, nodes=nodes)
    events = events_of(path)
    created = [event.key for event in events if isinstance(event.value, PodRequest)]
    deleted = [event.key for event in events if isinstance(event.value, PodDeleted)]
    specs = [event.value.node for event in events if event.topic == "node-events"]
    # The default pod list is in creation order and named in file order, so the first pods are 0000...
    assert created == [f"openb-pod-{index:04d}" for index in range(pods)]
    assert set(deleted) <= set(created) and len(deleted) == len(set(deleted))
    assert (info.pods, info.nodes, info.deletions, info.samples) == (pods, node_count, len(deleted), 0)
    assert len(specs) == node_count
    if pods:
        assert info.span_seconds == events[-1].ts
    if nodes == 200:
        # The node list starts with ~230 CPU-only machines; a spread pick still has the trace's GPU share.
        with_gpus = sum(1 for spec in specs if GPU in spec.capacity)
        assert with_gpus / len(specs) == pytest.approx(1213 / 1523, abs=0.05)


# --- the report ----------------------------------------------------------------------------------------

NODES = [node("a", 4000, 8 * GIB, gpus=2), node("b", 2000, 4 * GIB)]
DECISIONS = [
    decision("p1", "a", "pending", {"cpu": 1000, "memory": 2 * GIB, GPU: 1}),
    decision("p1", "a", "applied", {"cpu": 1000, "memory": 2 * GIB, GPU: 1}),  # the later one counts
    decision(
        "p2", "a", "applied", {"cpu": "1", "memory": "2Gi"}
    ),  # quantity strings, as a Binding writes them
    decision("p3", "b", "applied"),  # requests from the separate mapping
    decision("p4", None, "unschedulable"),
    decision("p5", "b", "conflict", {"cpu": 2000}),
    decision("p6", "a", "pending", {"cpu": 2000}),
    decision("p7", "b", "applied", {"cpu": 1500, "memory": GIB}),  # deleted: holds nothing at the end
]
PUBLISHED = {"p1": 10.0, "p2": 10.0, "p3": 10.0, "p4": 10.0, "p6": 10.0}
DECIDED = {"p1": 10.010, "p2": 10.020, "p3": 10.030, "p4": 10.040, "p5": 11.0}


@pytest.fixture(scope="module")
def hand_summary() -> DemoSummary:
    return summarize(
        NODES,
        DECISIONS,
        published_at=PUBLISHED,
        decided_at=DECIDED,
        wall_seconds=3.5,
        requests={"p3": {"cpu": 500, "memory": GIB}},
        deleted={"p7"},
    )


# Worked out by hand. cpu: a holds p1 + p2 = 2000m of 4000m, b holds p3 = 500m of 2000m; memory: a 4 of
# 8 GiB, b 1 of 4 GiB; GPUs: a 1 of 2, b has none. Latencies of the pods with both times: 10, 20, 30, 40 ms.
HAND_CASES = [
    pytest.param(lambda s: s.pods, 7, id="Seven distinct pods were decided, p1 counted once."),
    pytest.param(
        lambda s: (s.placed, s.unschedulable, s.conflicts, s.rejected, s.pending),
        (4, 1, 1, 0, 1),
        id="Outcomes count each pod by its last decision.",
    ),
    pytest.param(lambda s: s.released, 1, id="One applied pod was deleted and holds nothing."),
    pytest.param(
        lambda s: s.utilisation["cpu"], {"a": 0.5, "b": 0.25}, id="cpu: a is half full, b a quarter."
    ),
    pytest.param(
        lambda s: s.utilisation["memory"], {"a": 0.5, "b": 0.25}, id="memory: a is half full, b a quarter."
    ),
    pytest.param(
        lambda s: s.utilisation[GPU], {"a": 0.5}, id="GPUs: only a has any, and one of its two is taken."
    ),
    pytest.param(
        lambda s: (s.spread["cpu"].mean, s.spread["cpu"].std, s.spread["cpu"].max_minus_min),
        (0.375, 0.125, 0.25),
        id="cpu spread over two nodes at 0.5 and 0.25: mean 0.375, std 0.125, range 0.25.",
    ),
    pytest.param(
        lambda s: s.spread["cpu"].cluster, 2500 / 6000, id="cpu over the cluster is 2500m of 6000m."
    ),
    pytest.param(
        lambda s: (s.spread[GPU].nodes, s.spread[GPU].std, s.spread[GPU].max_minus_min),
        (1, 0.0, 0.0),
        id="The GPU spread counts only the one node with GPUs.",
    ),
    pytest.param(lambda s: s.decisions_per_s, 2.0, id="Seven pods in 3.5 s are two decisions a second."),
    pytest.param(
        lambda s: sorted(s.latencies_ms),
        [10.0, 20.0, 30.0, 40.0],
        id="Latencies are kept for pods with both times.",
    ),
    pytest.param(
        lambda s: (s.p50_ms, s.p90_ms, s.p99_ms),
        (25.0, 37.0, 39.7),
        id="Percentiles interpolate linearly: p50 25, p90 37, p99 39.7 ms.",
    ),
    pytest.param(lambda s: s.notes, (), id="Nothing odd is noted in a clean case."),
]


@pytest.mark.parametrize(("measure", "expected"), HAND_CASES)
def test_summarize_a_hand_built_case(hand_summary, measure, expected):
    assert measure(hand_summary) == pytest.approx(expected)


def test_summary_json_is_one_serialisable_object_with_the_counts(hand_summary):
    line = orjson.dumps(hand_summary.to_json())
    data = orjson.loads(line)
    assert (data["pods"], data["placed"], data["unschedulable"], data["released"]) == (7, 4, 1, 1)
    assert data["latency_ms"] == {"count": 4, "p50": 25.0, "p90": 37.0, "p99": 39.7}
    assert data["utilisation"]["cpu"]["cluster"] == round(2500 / 6000, 4)


def test_the_table_shows_outcomes_and_utilisation_as_plain_text(hand_summary):
    text = render_table(hand_summary)
    assert "\x1b[" not in text
    for expected in (
        "applied",
        "4 (57.1%)",
        "unschedulable",
        "nvidia.com/gpu",
        "25.0 ms / 37.0 ms / 39.7 ms",
    ):
        assert expected in text


def test_odd_decisions_are_noted_not_fatal():
    summary = summarize(
        NODES,
        [
            decision("x", "a", "applied"),
            decision("y", "nowhere", "applied", {"cpu": 1}),
            decision("z", "a", "lost"),
        ],
        wall_seconds=1.0,
    )
    assert summary.placed == 2 and summary.utilisation["cpu"] == {"a": 0.0, "b": 0.0}
    assert len(summary.notes) == 3
    assert summary.p50_ms is None and summary.latencies_ms == ()


@pytest.mark.parametrize(
    "wall_seconds",
    [
        pytest.param(0.0, id="A zero wall time is refused."),
        pytest.param(float("nan"), id="A NaN wall time is refused."),
    ],
)
def test_bad_wall_time_is_refused(wall_seconds):
    with pytest.raises(InvalidInput):
        summarize(NODES, [], wall_seconds=wall_seconds)


@pytest.mark.parametrize(
    ("with_latency", "names"),
    [
        pytest.param(
            True,
            ["utilisation.png", "latency.png", "outcomes.png"],
            id="With latencies there are three plots.",
        ),
        pytest.param(
            False, ["utilisation.png", "outcomes.png"], id="Without latencies the histogram is skipped."
        ),
    ],
)
def test_write_plots_writes_non_empty_pngs(tmp_path, with_latency, names):
    summary = summarize(
        NODES,
        DECISIONS,
        published_at=PUBLISHED if with_latency else None,
        decided_at=DECIDED if with_latency else None,
        wall_seconds=1.0,
        requests={"p3": {"cpu": 500}},
    )
    written = write_plots(summary, tmp_path / "plots")
    assert [path.name for path in written] == names
    for path in written:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 5000


def test_deleted_uids_of_a_generated_log_are_its_deletions(tmp_path):
    info, path = generate(tmp_path)
    uids = deleted_uids(path)
    assert len(uids) == info.deletions
    assert uids == {event.key for event in events_of(path) if isinstance(event.value, PodDeleted)}
