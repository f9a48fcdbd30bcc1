"""bench.kube against a real API server and the real kube-scheduler: a tiny run finishes, prints its figures
as one JSON object on its last line, and leaves none of its nodes or pods behind."""

from __future__ import annotations

import asyncio
import os
import subprocess

import orjson
import pytest

from bench.kube import node_objects, pod_object
from streams.kube.api import NODES, PODS, KubeApi
from tests.commands import run_module


def _leftovers(kubeconfig: str, run: str) -> int:
    async def count() -> int:
        async with KubeApi.from_kubeconfig(kubeconfig) as api:
            selector = f"eyrie.bench/run={run}"
            nodes = await api.list(NODES, label_selector=selector)
            pods = await api.list(PODS, label_selector=selector)
            return len(nodes.items) + len(pods.items)

    return asyncio.run(count())


def _check(done: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert done.returncode == 0, done.stderr[-2000:] + done.stdout[-2000:]
    figures: dict[str, object] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return figures


@pytest.mark.kube
def test_kube_scheduler_alone_binds_every_pod_and_cleans_up(kube_config: str, tmp_path: object) -> None:
    done = run_module(
        "bench.kube",
        "--only",
        "kube-scheduler",
        "--nodes",
        5,
        "--pods",
        20,
        "--timeout",
        120,
        "--out",
        tmp_path,
        env={**os.environ, "KUBECONFIG": kube_config},
        timeout=600.0,
    )
    figures = _check(done)
    phase = figures["schedulers"]["kube-scheduler"]  # type: ignore[index]
    assert phase["status"] == "measured", phase
    assert phase["pods_per_s"] > 0, phase
    assert (phase["bound"], phase["missing"]) == (20, 0), phase
    assert figures["eyrie_vs_kube_scheduler"] is None
    run = next(line.split()[1].rstrip(":") for line in done.stdout.splitlines() if line.startswith("run "))
    assert _leftovers(kube_config, run) == 0


@pytest.mark.kube
@pytest.mark.kafka
def test_eyrie_alone_binds_every_pod_through_its_pipeline(
    kube_config: str, kafka_bootstrap: str, tmp_path: object
) -> None:
    done = run_module(
        "bench.kube",
        "--only",
        "eyrie",
        "--nodes",
        5,
        "--pods",
        20,
        "--timeout",
        120,
        "--out",
        tmp_path,
        env={**os.environ, "KUBECONFIG": kube_config, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap},
        timeout=600.0,
    )
    figures = _check(done)
    phase = figures["schedulers"]["eyrie"]  # type: ignore[index]
    assert phase["status"] == "measured", phase
    assert (phase["bound"], phase["missing"]) == (20, 0), phase
    assert phase["pods_per_s"] > 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "0"], "--nodes and --pods must be 1 or more"),
        (["--timeout", "0"], "--timeout must be more than 0"),
        (["--kube-scheduler-qps", "0"], "--kube-scheduler-qps must be 1 or more"),
    ],
    ids=[
        "No nodes at all is refused before anything starts.",
        "A timeout of zero is refused.",
        "A client rate of zero is refused.",
    ],
)
def test_bad_options_end_in_one_error_line(args: list[str], message: str) -> None:
    done = run_module("bench.kube", *args)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == f"error: {message}"


def test_objects_are_seeded_and_ready_for_both_schedulers() -> None:
    def shapes(seed: int) -> list[object]:
        # The Ready condition's timestamps are the moment of the call; everything else is the seed's.
        return [
            {**node, "status": {**node["status"], "conditions": None}} for node in node_objects(50, seed, "r")
        ]

    first = node_objects(50, 3, "r")
    assert shapes(3) == shapes(3) != shapes(4)
    assert all(node["status"]["conditions"][0]["type"] == "Ready" for node in first)
    assert len({node["metadata"]["labels"]["node.kubernetes.io/instance-type"] for node in first}) > 1
    pod = pod_object("p", "r", "eyrie", {"cpu": "1", "memory": "1Gi"})
    assert pod["spec"]["schedulerName"] == "eyrie"
    assert pod["metadata"]["labels"] == {"eyrie.bench/run": "r"}
