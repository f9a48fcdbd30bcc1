"""Invocations that cannot do what they say: each exits 2 with one line naming the option, never 0, never a
traceback, and never after connecting to Kafka (the broker named here does not exist)."""

import json
import os
import socket
from pathlib import Path

import pytest

from tests.commands import run_module
from tests.paths import ALIBABA_2018, ALIBABA_GPU_2023, BITBRAINS

NO_BROKER = "127.0.0.1:1"  # nothing listens there: a command that connects fails with another message

BITBRAINS_HEADER = (
    "Timestamp [ms];\tCPU cores;\tCPU capacity provisioned [MHZ];\tCPU usage [MHZ];\tCPU usage [%];\t"
    "Memory capacity provisioned [KB];\tMemory usage [KB];\tDisk read throughput [KB/s];\t"
    "Disk write throughput [KB/s];\tNetwork received throughput [KB/s];\t"
    "Network transmitted throughput [KB/s]\n"
)
GPU_NODES = "sn,cpu_milli,memory_mib,gpu,model\nn1,32000,262144,2,T4\n"
GPU_PODS_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
    "scheduled_time\n"
)
ALIBABA_2018_LOOKALIKE = "m_1,0,1,96,100,USING,1\n"  # a machine_meta row, but machine_usage wants 9 columns


def three_clusters_of_three(path: Path) -> None:
    clusters = [{"name": n, "resourceSummary": {"allocatable": {"pods": "3"}}} for n in ("a", "b", "c")]
    path.write_text(json.dumps(clusters))


def write_files(tmp: Path) -> dict[str, Path]:
    """Every file the rows below name, by placeholder."""
    files = {
        "clusters": tmp / "clusters.json",
        "request": tmp / "req.json",
        "log": tmp / "empty.jsonl",
        "a_file": tmp / "report.txt",
        "wrong_bitbrains": tmp / "not-bitbrains",
        "empty_bitbrains": tmp / "header-only",
        "wrong_alibaba_2018": tmp / "not-alibaba-2018",
        "bad_gpu_pods": tmp / "bad-gpu",
        "no_usage": tmp / "no-usage",
        "out": tmp / "out.jsonl",
    }
    three_clusters_of_three(files["clusters"])
    files["request"].write_text("{}")
    files["log"].write_text("")
    files["a_file"].write_text("a report was here\n")
    files["wrong_bitbrains"].mkdir()
    (files["wrong_bitbrains"] / "1.csv").write_text("sn,cpu_milli\nn1,32000\n")
    files["empty_bitbrains"].mkdir()
    (files["empty_bitbrains"] / "1.csv").write_text(BITBRAINS_HEADER)
    files["wrong_alibaba_2018"].mkdir()
    (files["wrong_alibaba_2018"] / "machine_meta.csv").write_text(ALIBABA_2018_LOOKALIKE)
    (files["wrong_alibaba_2018"] / "machine_usage.csv").write_text(ALIBABA_2018_LOOKALIKE * 3)
    files["bad_gpu_pods"].mkdir()
    (files["bad_gpu_pods"] / "openb_node_list_all_node.csv").write_text(GPU_NODES)
    (files["bad_gpu_pods"] / "openb_pod_list_default.csv").write_text(
        GPU_PODS_HEADER + "p1,lots,1024,0,0,,LS,Running,10,,\np2,1000,1024,0,0,,VIP,Running,20,,\n"
    )
    files["no_usage"].mkdir()
    (files["no_usage"] / "1.csv").write_text(BITBRAINS_HEADER + "not;a;usage;row\n")
    return files


def listening_port() -> socket.socket:
    """A socket listening on a free loopback port: the port is busy while it is open."""
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    return busy


CLUSTERS = ["clusters", "divide", "--clusters", "{clusters}", "--request", "{request}"]
ESTIMATE = ["clusters", "estimate", "--clusters", "{clusters}", "--request", "{request}"]
TINY_TBESK = [
    "evaluate",
    "--experiment",
    "tbesk-paper",
    "--pods",
    "100",
    "--step",
    "100",
    "--iterations",
    "1",
]
SHARED = pytest.mark.skipif(
    not ALIBABA_GPU_2023.is_dir(), reason="the shared traces are not beside the project"
)

ROWS = [
    # --- clusters divide ---------------------------------------------------------------------------------
    pytest.param(
        [*CLUSTERS, "--replicas", "12", "--strategy", "dynamic"],
        "--replicas",
        "clusters resources are not enough to schedule: 12 replicas to place, the clusters can take 9",
        id="Twelve replicas divided dynamically over three clusters of three are refused, not printed as {}.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "12", "--strategy", "aggregated", "--current", "a=2"],
        "--replicas",
        "10 replicas to place, the clusters can take 9",
        id="An aggregated scale-up beyond the estimates says how many had to be placed and how many fit.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "3", "--strategy", "static", "--weights", "a=1,x=2"],
        "--weights",
        "'x' is not a cluster of",
        id="A weight for a cluster that is not in the file is refused.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "3", "--strategy", "dynamic", "--weights", "a=1"],
        "--weights",
        "only with --strategy static",
        id="Weights with the dynamic strategy, which divides by estimates, are refused.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "3", "--strategy", "static", "--current", "a=1"],
        "--current",
        "only with --strategy dynamic or aggregated",
        id="Current replicas with the static strategy, which does not scale from them, are refused.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "3", "--strategy", "duplicated", "--estimator", "general"],
        "--estimator",
        "reads no estimates",
        id="An estimator for the duplicated strategy, which reads no estimates, is refused.",
    ),
    pytest.param(
        [*CLUSTERS, "--replicas", "3", "--strategy", "dynamic", "--scheduler-name", "default"],
        "--scheduler-name",
        "only with --estimator accurate",
        id="A scheduler name for the model estimator, which runs no filters, is refused.",
    ),
    pytest.param(
        [*ESTIMATE, "--estimator", "general", "--no-modeling"],
        "--no-modeling",
        "only with --estimator model",
        id="Switching modeling off for the general estimator, which has none, is refused.",
    ),
    # --- options that only mean something with another ---------------------------------------------------
    pytest.param(
        ["decisions", "--until-idle", "2"],
        "--until-idle",
        "only with --follow",
        id="Decisions until idle without following is refused before connecting.",
    ),
    pytest.param(
        ["decisions", "--from-beginning"],
        "--from-beginning",
        "only with --follow",
        id="Decisions from the beginning without following is refused before connecting.",
    ),
    pytest.param(
        ["decisions", "--follow", "--output", "table"],
        "--output",
        "only without --follow",
        id="A decisions table while following is refused before connecting.",
    ),
    pytest.param(
        ["decisions", "--output", "yaml"],
        "--output",
        "expected json or table",
        id="An unknown decisions output is refused before connecting.",
    ),
    pytest.param(
        ["record", "--out", "{out}", "--until-idle", "2"],
        "--until-idle",
        "only with --follow",
        id="Recording until idle without following is refused before connecting.",
    ),
    pytest.param(
        ["replay", "{log}", "--offline", "--speed", "2"],
        "--speed",
        "only without --offline",
        id="An offline replay at a speed it would not keep is refused.",
    ),
    pytest.param(
        ["replay", "{log}", "--offline", "--rate", "100"],
        "--rate",
        "only without --offline",
        id="An offline replay at a rate it would not keep is refused.",
    ),
    # --- traces of the wrong kind ------------------------------------------------------------------------
    pytest.param(
        ["trace", "convert", "bitbrains", "{wrong_bitbrains}", "-o", "{out}"],
        "src",
        "no metrics events from",
        id="A folder of CSVs that are not Bitbrains VMs converts to nothing and fails.",
    ),
    pytest.param(
        ["trace", "convert", "bitbrains", "{empty_bitbrains}", "-o", "{out}"],
        "src",
        "it holds no data rows",
        id="A Bitbrains folder with headers only converts to nothing and fails.",
    ),
    pytest.param(
        ["trace", "convert", "alibaba-2018", "{wrong_alibaba_2018}", "-o", "{out}"],
        "src",
        "alibaba-2018 expects cluster-trace-v2018 machine_meta.csv",
        id="Alibaba 2018 file names holding other rows convert to nothing and fail.",
    ),
    pytest.param(
        ["trace", "convert", "alibaba-gpu-2023", "{bad_gpu_pods}", "-o", "{out}"],
        "src",
        "no pod-requests events from",
        id="A GPU trace whose nodes convert but whose every pod row is bad fails.",
    ),
    pytest.param(
        ["trace", "convert", "bitbrains", str(ALIBABA_GPU_2023), "-o", "{out}"],
        "src",
        "(201,959 bad rows",
        id="The Alibaba GPU 2023 folder converted as Bitbrains fails, naming its bad rows.",
        marks=SHARED,
    ),
    pytest.param(
        ["trace", "convert", "bitbrains", str(ALIBABA_2018 / "machine_meta.csv"), "-o", "{out}"],
        "src",
        "bitbrains expects GWA-T-12 per-VM CSVs",
        id="An Alibaba 2018 file converted as Bitbrains fails and says what Bitbrains looks like.",
        marks=SHARED,
    ),
    # --- no tracebacks -----------------------------------------------------------------------------------
    pytest.param(
        ["evaluate", "--experiment", "portrait", "--trace", "{no_usage}"],
        "trace",
        "holds Bitbrains usage rows",
        id="The portrait experiment on a folder without usage rows fails in one line.",
    ),
    pytest.param(
        ["evaluate", "--experiment", "portrait", "--trace", str(ALIBABA_GPU_2023)],
        "trace",
        "none of its",
        id="The portrait experiment on the GPU trace, which has no usage data, fails in one line.",
        marks=SHARED,
    ),
    pytest.param(
        [*TINY_TBESK, "--out", "{a_file}"],
        "--out",
        "is a file",
        id="An experiment whose --out is an existing file fails before it runs.",
    ),
    pytest.param(
        ["evaluate", "--all", "--out", "{a_file}/report"],
        "--out",
        "cannot be a directory",
        id="The evaluation report under a file fails before it runs.",
    ),
    pytest.param(
        ["worker", "--web-port", "0"],
        "--web-port",
        "not a TCP port",
        id="A worker on web port 0 is refused before connecting.",
    ),
    pytest.param(
        ["applier", "--web-port", "70000"],
        "--web-port",
        "not a TCP port",
        id="An applier on a web port above 65535 is refused before connecting.",
    ),
    pytest.param(
        ["worker", "--web-port", "{busy_port}"],
        "--web-port",
        "in use",
        id="A worker on a busy web port is refused before connecting.",
    ),
    pytest.param(
        ["applier", "--web-port", "{busy_port}"],
        "--web-port",
        "in use",
        id="An applier on a busy web port is refused before connecting.",
    ),
]


@pytest.mark.parametrize(("template", "option", "message"), ROWS)
def test_a_command_that_cannot_do_what_it_says_exits_2_with_one_line(tmp_path, template, option, message):
    files = write_files(tmp_path)
    with listening_port() as busy:
        values = {**{name: str(path) for name, path in files.items()}, "busy_port": busy.getsockname()[1]}
        args = [part.format(**values) for part in template]
        env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": NO_BROKER, "EYRIE_DATA_DIR": str(tmp_path / "data")}
        result = run_module("streams.cli", *args, env=env)
    assert result.returncode == 2, (result.returncode, result.stdout[-500:], result.stderr[-2000:])
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"error: {option}"), result.stderr
    assert message in result.stderr, result.stderr
    assert result.stdout == ""
    if template[:2] == ["trace", "convert"]:
        assert not files["out"].exists(), "a failed conversion leaves no log behind"


def test_current_replicas_of_a_cluster_not_in_the_file_are_counted_lost_and_said_so(tmp_path):
    files = write_files(tmp_path)
    args = ["clusters", "divide", "--clusters", files["clusters"], "--request", files["request"]]
    result = run_module(
        "streams.cli", *args, "--replicas", "4", "--strategy", "dynamic", "--current", "gone=3"
    )
    assert result.returncode == 0, result.stderr
    assert sum(json.loads(result.stdout).values()) == 4  # the lost 3 are placed again among a, b and c
    assert (
        result.stderr
        == f"note: --current: 'gone' is not a cluster of {files['clusters']}; its 3 replicas count as lost\n"
    )


@pytest.mark.skipif(not BITBRAINS.is_dir(), reason="the shared traces are not beside the project")
def test_a_real_trace_of_the_right_kind_still_converts(tmp_path):
    out = tmp_path / "vms.jsonl"
    result = run_module("streams.cli", "trace", "convert", "bitbrains", BITBRAINS, "-o", out, "--limit", "5")
    assert result.returncode == 0, result.stderr
    assert "5 events (metrics 5)" in result.stderr
    assert len(out.read_text().splitlines()) == 5
