"""Trace adapters: real trace slices become valid, time-ordered event logs; bad rows are reported, not fatal.

The real traces live in ``../shared/traces`` beside the repository (never copied into it); tests that need
them skip with a message when that folder is absent. Slices are small temporary copies of the first lines.
"""

import random
from itertools import islice, pairwise
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from evaluation.traces import CONVERTERS, read_vm, vm_files
from evaluation.traces.common import ConversionSummary, Report, ordered_rows, scan_runs
from schemas.eventlog import LogEvent, read_events
from schemas.events import MetricSample
from schemas.gpu import GpuCards, GpuRequest
from schemas.node import NodeEvent
from schemas.pod import PodDeleted, PodRequest, whole_cards
from streams.cli.trace import trace_app
from tests.paths import ALIBABA_2018, ALIBABA_GPU_2023, BITBRAINS, TRACES

TOPIC_TYPES = {
    "metrics": (MetricSample,),
    "node-events": (NodeEvent,),
    "pod-requests": (PodRequest, PodDeleted),
}
GIB = 2**30


@pytest.fixture
def traces() -> Path:
    if not TRACES.is_dir():
        pytest.skip(
            f"the real trace samples are not at {TRACES} (they live in shared/traces beside the repo)"
        )
    return TRACES


def head(source: Path, target: Path, lines: int) -> Path:
    """Copy the first `lines` lines of a real trace file into a temporary one."""
    with source.open("rb") as stream:
        target.write_bytes(b"".join(islice(stream, lines)))
    return target


def lines_matching(source: Path, target: Path, prefixes: tuple[str, ...], per_prefix: int) -> Path:
    """The first `per_prefix` lines starting with each prefix, in file order."""
    taken = dict.fromkeys(prefixes, 0)
    kept = []
    with source.open(encoding="utf-8") as stream:
        for line in stream:
            prefix = next((p for p in prefixes if line.startswith(p)), None)
            if prefix is not None and taken[prefix] < per_prefix:
                taken[prefix] += 1
                kept.append(line)
    target.write_text("".join(kept), encoding="utf-8")
    return target


def convert(kind: str, src: Path, tmp_path: Path, **options: Any) -> tuple[ConversionSummary, list[LogEvent]]:
    out = tmp_path / "log.jsonl"
    summary = CONVERTERS[kind](src, out, **options)
    return summary, list(read_events(out))  # read_events checks the order and validates every value


# --- slices of the real traces ---------------------------------------------------------------------------


def bitbrains_slice(tmp_path: Path) -> Path:
    folder = tmp_path / "vms"
    folder.mkdir()
    for vm in ("1", "2", "10"):
        head(BITBRAINS / f"{vm}.csv", folder / f"{vm}.csv", 101)
    return folder


def alibaba2018_slice(tmp_path: Path) -> Path:
    folder = tmp_path / "alibaba"
    folder.mkdir()
    (folder / "machine_meta.csv").symlink_to(ALIBABA_2018 / "machine_meta.csv")
    # Two machines' blocks, each sorted, the second starting earlier: the merge must interleave them.
    lines_matching(
        ALIBABA_2018 / "machine_usage.csv", folder / "machine_usage.csv", ("m_1932,", "m_1933,"), 150
    )
    return folder


def gpu_slice(tmp_path: Path) -> Path:
    folder = tmp_path / "gpu"
    folder.mkdir()
    (folder / "openb_node_list_all_node.csv").symlink_to(ALIBABA_GPU_2023 / "openb_node_list_all_node.csv")
    head(ALIBABA_GPU_2023 / "openb_pod_list_default.csv", folder / "openb_pod_list_default.csv", 301)
    return folder


SLICES = [
    pytest.param(
        "bitbrains",
        bitbrains_slice,
        {"metrics": 300},
        id="Three Bitbrains VMs of 100 rows each become 300 pod samples merged by time.",
    ),
    pytest.param(
        "alibaba-2018",
        alibaba2018_slice,
        {"node-events": 2, "metrics": 300},
        id="Two Alibaba 2018 machines become one node upsert each and 300 node samples in time order.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        gpu_slice,
        {"node-events": 1523, "pod-requests": 600},
        id="The first 300 GPU-trace pods become 300 requests and 300 deletions after 1,523 node upserts.",
    ),
]


@pytest.mark.parametrize(("kind", "make_slice", "expected"), SLICES)
def test_a_slice_of_each_trace_becomes_a_valid_ordered_log(traces, tmp_path, kind, make_slice, expected):
    summary, events = convert(kind, make_slice(tmp_path), tmp_path)
    assert summary.bad_row_count == 0, summary.bad_rows
    assert summary.events == expected
    assert len(events) == summary.total_events
    for event in events:
        assert isinstance(event.value, TOPIC_TYPES[event.topic])
    # A node is announced before anything refers to it.
    announced: set[str] = set()
    for event in events:
        if event.topic == "node-events":
            announced.add(event.value.node.name)
        elif event.topic == "metrics" and kind != "bitbrains":
            assert event.value.node in announced


LIMITED = [
    pytest.param("bitbrains", BITBRAINS, {}, id="Bitbrains stops after the limit while merging 30 VMs."),
    pytest.param(
        "alibaba-2018", ALIBABA_2018, {}, id="Alibaba 2018 stops after the limit of the real sample."
    ),
    pytest.param(
        "alibaba-gpu-2023",
        ALIBABA_GPU_2023,
        {"pods": "gpushare40"},
        id="A shuffled GPU pod list stops after the limit too.",
    ),
]


@pytest.mark.parametrize(("kind", "src", "options"), LIMITED)
def test_limit_stops_the_conversion_after_that_many_events(traces, tmp_path, kind, src, options):
    summary, events = convert(kind, src, tmp_path, limit=40, **options)
    assert len(events) == 40
    assert summary.truncated


# --- units worked out by hand ----------------------------------------------------------------------------


def test_the_first_bitbrains_row_is_converted_to_cores_bytes_and_bits(traces, tmp_path):
    # 1.csv line 2: 2 cores, 5851.9989 MHz provisioned, 87.7799835 MHz used, 1034592.8 KB memory used,
    # disk 160.86666666666667 + 21.733333333333334 KB/s,
    # network 0.26666666666666666 + 1.4666666666666666 KB/s.
    head(BITBRAINS / "1.csv", tmp_path / "1.csv", 2)
    _, events = convert("bitbrains", tmp_path / "1.csv", tmp_path, node="host-a")
    (event,) = events
    sample = event.value
    assert (event.ts, event.key, sample.node, sample.pod, sample.workload) == (
        1372629804.0,
        "host-a",
        "host-a",
        "bitbrains-1",
        "bitbrains-1",
    )
    assert sample.values["cpu"] == pytest.approx(87.7799835 / (5851.9989 / 2))  # 0.03 cores
    assert sample.values["memory"] == pytest.approx(1034592.8 * 1024)
    assert sample.values["disk"] == pytest.approx((160.86666666666667 + 21.733333333333334) * 1024)
    assert sample.values["bandwidth"] == pytest.approx((0.26666666666666666 + 1.4666666666666666) * 1024 * 8)


def test_read_vm_loads_a_whole_vm_as_numpy_arrays(traces):
    series = read_vm(BITBRAINS / "1.csv")
    assert len(series) == 8260 and series.ts.dtype.name == "float64"
    assert series.ts[0] == 1372629804.0 and series.ts[-1] == 1375221457.0
    assert series.cpu_cores[0] == pytest.approx(0.03)
    assert series.provisioned_cores == 2
    assert series.provisioned_memory_bytes == 8 * GIB  # the largest value of the column is 8,388,608 KB
    assert series.bad_rows == []
    assert all(len(column) == 8260 for column in (series.memory_bytes, series.disk_bps, series.bandwidth_bps))


def test_a_powered_off_bitbrains_vm_uses_zero_cores(traces):
    # VM 14's first rows have 0 cores and 0 MHz provisioned and nothing used.
    series = read_vm(BITBRAINS / "14.csv")
    assert series.bad_rows == [] and series.cpu_cores[0] == 0.0


def test_vm_files_are_in_numeric_order(tmp_path):
    for name in ("10.csv", "2.csv", "1.csv", "notes.csv", "readme.txt"):
        (tmp_path / name).write_text("")
    assert [path.name for path in vm_files(tmp_path)] == ["1.csv", "2.csv", "10.csv", "notes.csv"]


def test_alibaba_2018_node_capacity_and_first_sample_by_hand(traces, tmp_path):
    _, events = convert("alibaba-2018", alibaba2018_slice(tmp_path), tmp_path)
    upsert = next(event for event in events if event.topic == "node-events" and event.key == "m_1932")
    # machine_meta: m_1932 has 96 cores and mem_size 100, i.e. the default full scale of 512 GiB.
    assert upsert.value.node.capacity == {"cpu": 96_000, "memory": 512 * GIB}
    assert upsert.value.node.labels == {
        "alibaba.com/failure-domain-1": "91",
        "alibaba.com/failure-domain-2": "18",
    }
    first = next(event for event in events if event.topic == "metrics" and event.key == "m_1932")
    # machine_usage line 1: m_1932,386640,41,92,,,43.04,33.08,5
    assert upsert.ts == first.ts == 386640.0
    assert events.index(upsert) < events.index(first)
    assert first.value.pod is None
    assert first.value.values == pytest.approx(
        {
            "cpu": 0.41 * 96,
            "memory": 0.92 * 512 * GIB,
            "bandwidth": (43.04 + 33.08) / 100 * 10e9,
            "disk_io_percent": 5,
        }
    )


def test_alibaba_2018_memory_and_bandwidth_scales_are_options(traces, tmp_path):
    folder = alibaba2018_slice(tmp_path)
    _, events = convert(
        "alibaba-2018", folder, tmp_path, memory_full_scale="100Gi", bandwidth_full_scale="1G"
    )
    upsert = next(event for event in events if event.topic == "node-events")
    sample = next(event for event in events if event.topic == "metrics" and event.key == upsert.key)
    assert upsert.value.node.capacity["memory"] == 100 * GIB
    assert sample.value.values["memory"] <= 100 * GIB
    assert sample.value.values["bandwidth"] <= 2e9


def test_gpu_trace_nodes_and_fractional_gpu_pods_by_hand(traces, tmp_path):
    _, events = convert("alibaba-gpu-2023", gpu_slice(tmp_path), tmp_path)
    nodes = {event.key: event.value.node for event in events if event.topic == "node-events"}
    # openb-node-0000,32000,262144,0,   and   openb-node-0229,96000,786432,8,V100M32
    assert nodes["openb-node-0000"].capacity == {"cpu": 32_000, "memory": 262_144 * 2**20, "pods": 110}
    assert nodes["openb-node-0000"].labels == {}
    assert nodes["openb-node-0229"].capacity["nvidia.com/gpu"] == 8
    assert nodes["openb-node-0229"].labels == {"gpu-model": "V100M32"}
    assert nodes["openb-node-0229"].gpus == GpuCards(count=8, model="V100M32")
    assert nodes["openb-node-0000"].gpus is None
    # openb-pod-0001,6000,12288,1,460,,LS,Running,427061,12902960,427061: a shared GPU, 460/1000 of a card,
    # which holds no whole nvidia.com/gpu.
    pod = next(event for event in events if event.key == "openb-pod-0001" and event.topic == "pod-requests")
    assert pod.ts == 427061.0 and pod.value.created_at == 427061.0
    assert pod.value.effective_requests == {"cpu": 6000, "memory": 12288 * 2**20}
    assert pod.value.gpu == GpuRequest(milli=460, count=1)
    assert pod.value.labels == {"qos": "LS", "pod-phase": "Running", "gpu-milli": "460"}
    assert pod.value.qos_class == "Burstable"


@pytest.fixture(scope="module")
def default_gpu_log(tmp_path_factory):
    """The whole default pod list, converted once for the tests that need all of it."""
    if not TRACES.is_dir():
        pytest.skip(
            f"the real trace samples are not at {TRACES} (they live in shared/traces beside the repo)"
        )
    return convert("alibaba-gpu-2023", ALIBABA_GPU_2023, tmp_path_factory.mktemp("gpu-default"))


def test_gpu_counts_become_nvidia_gpu_requests_and_capacity(default_gpu_log):
    _, events = default_gpu_log
    nodes = [event.value.node for event in events if event.topic == "node-events"]
    gpu_nodes = [node for node in nodes if "nvidia.com/gpu" in node.capacity]
    # SOURCES.md: 1,523 nodes, 1,213 with GPUs, 6,212 GPUs in all.
    assert (len(nodes), len(gpu_nodes)) == (1523, 1213)
    assert sum(node.capacity["nvidia.com/gpu"] for node in gpu_nodes) == 6212
    pods = [event.value for event in events if isinstance(event.value, PodRequest)]
    gpus: dict[int, list[PodRequest]] = {}
    for pod in pods:
        gpus.setdefault(pod.effective_requests.get("nvidia.com/gpu", 0), []).append(pod)
    assert sorted(gpus) == [0, 1, 2, 4, 8]
    # Shares (3,078 pods) hold no whole GPU; the 1,088 without GPUs have no `gpu` request.
    assert len(gpus[0]) == 1088 + 3078 and len(gpus[8]) == 44
    assert sum(pod.gpu is None for pod in pods) == 1088
    assert sum(pod.gpu is not None and pod.gpu.is_share for pod in pods) == 3078
    whole = [(count, pod.gpu) for count in (1, 2, 4, 8) for pod in gpus[count]]
    assert all(gpu is not None and gpu.count == count and not gpu.is_share for count, gpu in whole)
    assert all("gpu-milli" not in pod.labels for count in (1, 2, 4, 8) for pod in gpus[count])
    assert sum(node.gpus.count for node in nodes if node.gpus is not None) == 6212
    guaranteed = [pod for pod in pods if pod.labels["qos"] == "Guaranteed"]
    assert len(guaranteed) == 7 and all(pod.qos_class == "Guaranteed" for pod in guaranteed)


@pytest.mark.parametrize(
    "pods",
    [
        pytest.param(
            "default", id="In the default pod list, sorted by creation, every deletion follows its pod."
        ),
        pytest.param(
            "gpushare40",
            id="In a pod list shuffled out of creation order, every deletion still follows its pod.",
        ),
    ],
)
def test_deletions_come_after_creations(default_gpu_log, tmp_path, pods):
    if pods == "default":
        summary, events = default_gpu_log
    else:
        summary, events = convert("alibaba-gpu-2023", ALIBABA_GPU_2023, tmp_path, pods=pods)
    created: dict[str, float] = {}
    deleted = 0
    for event in events:
        if isinstance(event.value, PodRequest):
            created[event.key] = event.ts
        elif isinstance(event.value, PodDeleted):
            assert event.key in created and event.value.ts > created[event.key]
            deleted += 1
    assert len(created) == 8152
    # Every pod has a deletion time; the few not after the creation time are noted, not emitted.
    assert deleted + sum(summary.notes.values()) == 8152


def test_gpu_spec_becomes_a_node_affinity_and_a_sanitised_label(traces, tmp_path):
    pods = head(
        ALIBABA_GPU_2023 / "openb_pod_list_gpuspec33.csv", tmp_path / "openb_pod_list_gpuspec33.csv", 40
    )
    _, events = convert(
        "alibaba-gpu-2023", pods, tmp_path, nodes=ALIBABA_GPU_2023 / "openb_node_list_all_node.csv"
    )
    pod = next(
        event.value for event in events if event.key == "openb-pod-0009" and event.topic == "pod-requests"
    )
    assert pod.labels["gpu-spec"] == "V100M16_V100M32"
    (term,) = pod.node_affinity
    (requirement,) = term.match_expressions
    assert (requirement.key, requirement.operator, requirement.values) == (
        "gpu-model",
        "In",
        ["V100M16", "V100M32"],
    )


# --- bad rows --------------------------------------------------------------------------------------------

BB_HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
    "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
    "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\t"
    "Network transmitted throughput [KB/s]\n"
)


def bb_row(ts="1372629804", cores="2", cap="5000", usage="100", memory="1024") -> str:
    return ";\t".join([ts, cores, cap, usage, "2.0", "8388608", memory, "1", "1", "1", "1"]) + "\n"


GPU_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)
GPU_NODES = "sn,cpu_milli,memory_mib,gpu,model\nopenb-node-0000,32000,262144,8,T4\n"


def gpu_row(name="p", cpu="1000", gpus="1", qos="LS", created="10", deleted="20") -> str:
    return f"{name},{cpu},1024,{gpus},1000,,{qos},Running,{created},{deleted},{created}\n"


META = "m_1,0,1,2,96,100,USING\nm_2,0,1,2,96,100,USING\n"


def usage_row(machine="m_1", ts="10", cpu="50") -> str:
    return f"{machine},{ts},{cpu},50,,,10,10,5\n"


def write_case(folder: Path, kind: str, lines: list[str]) -> Path:
    if kind == "bitbrains":
        (folder / "7.csv").write_text(BB_HEADER + "".join(lines))
        return folder / "7.csv"
    if kind == "alibaba-2018":
        (folder / "machine_meta.csv").write_text(META)
        (folder / "machine_usage.csv").write_text("".join(lines))
        return folder
    (folder / "openb_node_list_all_node.csv").write_text(GPU_NODES)
    (folder / "openb_pod_list_default.csv").write_text(GPU_HEADER + "".join(lines))
    return folder


BAD_ROWS = [
    pytest.param(
        "bitbrains",
        [bb_row(), bb_row(ts="1372630104", cap="lots"), bb_row(ts="1372630404")],
        "7.csv:3: CPU capacity provisioned: not a number",
        2,
        id="A non-numeric Bitbrains cell is reported on line 3 and the next row is still converted.",
    ),
    pytest.param(
        "bitbrains",
        [bb_row(), "1372630104;\t2;\t5000\n", bb_row(ts="1372630404")],
        "7.csv:3: expected 11 columns, got 3",
        2,
        id="A truncated Bitbrains row is reported with its column count.",
    ),
    pytest.param(
        "bitbrains",
        [bb_row(memory="nan"), bb_row(ts="1372630104")],
        "7.csv:2: Memory usage: not finite",
        1,
        id="A NaN memory usage is a bad row, not a NaN sample.",
    ),
    pytest.param(
        "bitbrains",
        [bb_row(ts="1372629804000"), bb_row(ts="1372630104")],
        "7.csv:2: timestamp: out of range",
        1,
        id="A timestamp in milliseconds is out of range.",
    ),
    pytest.param(
        "bitbrains",
        [bb_row(ts="1372630104"), bb_row(ts="1372629804"), bb_row(ts="1372630404")],
        "7.csv:3: timestamp 1372629804 goes back",
        2,
        id="A Bitbrains row going back in time is dropped so the merge stays ordered.",
    ),
    pytest.param(
        "bitbrains",
        [bb_row(memory="1e307"), bb_row(ts="1372630104")],
        "7.csv:2: a value overflows once converted to base units",
        1,
        id="A memory usage that overflows once scaled to bytes is a bad row, not an infinite sample.",
    ),
    pytest.param(
        "alibaba-2018",
        [usage_row(), usage_row(ts="20", cpu="-3"), usage_row(ts="30")],
        "machine_usage.csv:2: cpu_util_percent: negative",
        1 + 2,
        id="A negative Alibaba 2018 cpu percentage is reported on line 2.",
    ),
    pytest.param(
        "alibaba-2018",
        [usage_row(), usage_row(ts="20", cpu="150"), usage_row(ts="30")],
        "machine_usage.csv:2: cpu_util_percent: above 100",
        1 + 2,
        id="A cpu percentage above 100 is a bad row.",
    ),
    pytest.param(
        "alibaba-2018",
        [usage_row(), "m_1,20,5\n", usage_row(ts="30")],
        "machine_usage.csv:2: expected 9 columns, got 3",
        1 + 2,
        id="A short Alibaba 2018 row is reported with its column count.",
    ),
    pytest.param(
        "alibaba-2018",
        [usage_row(), usage_row(ts="soon"), usage_row(ts="30")],
        "machine_usage.csv:2: timestamp: not a number",
        1 + 2,
        id="An Alibaba 2018 row without a valid time is reported once, not once per pass.",
    ),
    pytest.param(
        "alibaba-2018",
        [usage_row(), usage_row(machine="m_9", ts="20"), usage_row(ts="30")],
        "machine_usage.csv:2: machine 'm_9' has no valid row in machine_meta.csv",
        1 + 2,
        id="A sample of a machine missing from machine_meta is a bad row.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        [gpu_row("a"), gpu_row("b", gpus="two"), gpu_row("c")],
        "openb_pod_list_default.csv:3: num_gpu: not a number",
        1 + 2 * 2,
        id="A non-numeric GPU count is reported on line 3 and the other pods still come and go.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        [gpu_row("a"), gpu_row("b", cpu="-1000"), gpu_row("c")],
        "openb_pod_list_default.csv:3: cpu_milli: negative",
        1 + 2 * 2,
        id="A negative cpu request is a bad row.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        [gpu_row("a"), gpu_row("b", cpu="9" * 30), gpu_row("c")],
        "openb_pod_list_default.csv:3: cpu_milli: too large",
        1 + 2 * 2,
        id="A request too large for a quantity is a bad row, so the log stays readable.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        [gpu_row("a"), gpu_row("b", qos="VIP"), gpu_row("c")],
        "openb_pod_list_default.csv:3: qos: expected one of",
        1 + 2 * 2,
        id="An unknown QoS is a bad row.",
    ),
    pytest.param(
        "alibaba-gpu-2023",
        [gpu_row("a"), "b,1000,1024\n", gpu_row("c")],
        "openb_pod_list_default.csv:3: expected more than 8 columns, got 3",
        1 + 2 * 2,
        id="A truncated pod row is reported by the time-ordering pass.",
    ),
]


@pytest.mark.parametrize(("kind", "lines", "reported", "events"), BAD_ROWS)
def test_malformed_rows_are_reported_with_their_line_and_the_conversion_goes_on(
    tmp_path, kind, lines, reported, events
):
    src = write_case(tmp_path, kind, lines)
    summary, logged = convert(kind, src, tmp_path)
    assert summary.bad_row_count == 1
    assert str(summary.bad_rows[0]).startswith(reported), summary.bad_rows[0]
    assert summary.total_events == len(logged) == events


def test_bad_rows_beyond_the_kept_ones_are_only_counted(tmp_path):
    lines = [bb_row(ts=str(1372629804 + 300 * index), usage="x") for index in range(150)]
    summary, logged = convert("bitbrains", write_case(tmp_path, "bitbrains", lines), tmp_path)
    assert (summary.bad_row_count, len(summary.bad_rows), len(logged)) == (150, 100, 0)


def test_a_deletion_not_after_the_creation_is_noted_and_not_emitted(tmp_path):
    src = write_case(tmp_path, "alibaba-gpu-2023", [gpu_row("a", created="10", deleted="10"), gpu_row("b")])
    summary, logged = convert("alibaba-gpu-2023", src, tmp_path)
    assert [type(event.value).__name__ for event in logged] == [
        "NodeEvent",
        "PodRequest",
        "PodRequest",
        "PodDeleted",
    ]
    assert summary.notes == {"deletion not after creation (no PodDeleted)": 1}


def test_a_pod_list_without_times_is_an_arrival_sequence_at_time_zero(tmp_path):
    (tmp_path / "openb_node_list_all_node.csv").write_text(GPU_NODES)
    pods = tmp_path / "openb_pod_list_multigpu20.csv"
    pods.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\nb,1000,1024,2,1000\na,1000,1024,0,0\n")
    _, logged = convert("alibaba-gpu-2023", pods, tmp_path)
    assert [(event.ts, event.key) for event in logged[1:]] == [(0.0, "b"), (0.0, "a")]


def test_deletions_due_at_or_before_a_creation_are_emitted_first(tmp_path):
    rows = [
        gpu_row("a", created="10", deleted="15"),
        gpu_row("b", created="15", deleted="30"),
        gpu_row("c", created="20", deleted="25"),
    ]
    _, logged = convert("alibaba-gpu-2023", write_case(tmp_path, "alibaba-gpu-2023", rows), tmp_path)
    assert [(type(event.value).__name__, event.key, event.ts) for event in logged[1:]] == [
        ("PodRequest", "a", 10.0),
        ("PodDeleted", "a", 15.0),
        ("PodRequest", "b", 15.0),
        ("PodRequest", "c", 20.0),
        ("PodDeleted", "c", 25.0),
        ("PodDeleted", "b", 30.0),
    ]


# --- ordering of unsorted files --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scan_limit", "merge_limit"),
    [
        pytest.param(64, 64, id="Few sorted runs are merged with one reader per run."),
        pytest.param(64, 1, id="Too many runs fall back to sorting time and offset pairs."),
        pytest.param(2, 64, id="A scan that stopped recording run starts is ordered by sorting."),
    ],
)
def test_an_unsorted_file_is_read_back_in_time_order_ties_in_file_order(tmp_path, scan_limit, merge_limit):
    rng = random.Random(7)
    rows = [(rng.randrange(50), index) for index in range(400)]
    blocks = [sorted(rows[start : start + 100]) for start in range(0, 400, 100)]
    path = tmp_path / "rows.csv"
    path.write_text("".join(f"x{index},{ts}\n" for block in blocks for ts, index in block))
    report = Report()
    scan = scan_runs(path, 1, report, max_runs=scan_limit)
    assert scan.runs == 4 and len(scan.starts) == min(4, scan_limit + 1)
    got = [(ts, fields[0]) for ts, _, fields in ordered_rows(scan, 1, report, max_runs=merge_limit)]
    file_order = [(ts, index) for block in blocks for ts, index in block]
    expected = sorted(range(len(file_order)), key=lambda position: (file_order[position][0], position))
    assert got == [(float(file_order[p][0]), f"x{file_order[p][1]}") for p in expected]
    assert all(a[0] <= b[0] for a, b in pairwise(got))


# --- the command -----------------------------------------------------------------------------------------

RUNNER = CliRunner()


def test_the_command_writes_the_log_and_prints_a_summary_and_the_bad_rows(tmp_path):
    src = write_case(tmp_path, "bitbrains", [bb_row(), bb_row(ts="1372630104", cap="lots")])
    out = tmp_path / "out.jsonl"
    result = RUNNER.invoke(trace_app, ["convert", "bitbrains", str(src), "-o", str(out), "--node", "n1"])
    assert result.exit_code == 0, result.output
    assert "bitbrains: 1 events (metrics 1)" in result.stderr
    assert "bad row 7.csv:3: CPU capacity provisioned: not a number" in result.stderr
    assert result.stdout == ""
    assert [event.key for event in read_events(out)] == ["n1"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["convert", "google", "x", "-o", "o"],
            "unknown trace kind 'google'",
            id="An unknown kind exits 2.",
        ),
        pytest.param(
            ["convert", "alibaba-2018", ".", "-o", "o", "--pods", "cpu050"],
            "--pods applies to alibaba-gpu-2023, not alibaba-2018",
            id="An option of another kind exits 2 and says which kind it belongs to.",
        ),
        pytest.param(
            ["convert", "bitbrains", "/nonexistent/vms", "-o", "o"],
            "no such file or directory",
            id="A missing source exits 2 with one line.",
        ),
    ],
)
def test_bad_arguments_exit_2_with_one_line(tmp_path, args, message):
    result = RUNNER.invoke(trace_app, args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


def _gpu_pod(milli: int, count: int, whole: int) -> PodRequest:
    requests: dict[str, Any] = {"cpu": "1", "memory": "1Gi"}
    if whole:
        requests["nvidia.com/gpu"] = whole
    return PodRequest.model_validate(
        {"uid": "p", "requests": requests, "gpu": {"milli": milli, "count": count}}
    )


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        pytest.param(_gpu_pod(300, 1, 0), 1, id="A share of a card asks for one whole GPU."),
        pytest.param(_gpu_pod(1000, 2, 2), 2, id="Whole cards keep their count."),
        pytest.param(
            PodRequest.model_validate({"uid": "p", "requests": {"cpu": "1"}}),
            0,
            id="A pod without GPUs asks for none.",
        ),
    ],
)
def test_whole_cards_is_the_pod_a_scheduler_without_gpu_sharing_sees(pod: PodRequest, expected: int) -> None:
    seen = whole_cards(pod)
    assert seen.effective_requests.get("nvidia.com/gpu", 0) == expected
    assert seen.gpu == pod.gpu
    assert seen.effective_requests.get("cpu") == pod.effective_requests.get("cpu")
