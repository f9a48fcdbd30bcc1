"""The ``gpu-share`` profile (GpuShareFit + FGD) places pods exactly as the FGD simulator's FGD does.

The expected decisions in ``vectors/fgd_simulator_small.json`` were produced by the simulator itself
(hkust-adsl/kubernetes-scheduler-simulator at commit 8f3d6417353c5083c6d56617f255fadd8dc306bc, ``simon
apply`` with its FGD scheduler configuration; the vector file says how): per pod the node it chose (or that it
failed) and the card(s) it took. The simulator measures fragmentation against the typical pods of the whole
pod list, so the FGD plugin is given that list here; among equal scores it takes the lowest node name, which
the profile's ``tieBreak: name`` reproduces. Pods that find no node are deleted, as the simulator gives up on
them.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from policies.framework.profile import BUILTIN_PROFILES, parse_profile
from policies.gpu.workload import PodType, typical_pods
from policies.scheduler import Placed, Scheduler, Unschedulable
from schemas.exceptions import ConfigError
from schemas.pod import PodRequest
from tests.policies.builders import node, pod, scheduler

CASE = json.loads((Path(__file__).parent / "vectors" / "fgd_simulator_small.json").read_text())


def gpu_node(spec: dict[str, Any]) -> Any:
    return node(
        spec["name"],
        cpu=f"{spec['cpuMilli']}m",
        memory=f"{spec['memoryMiB']}Mi",
        pods=1001,
        gpus={"count": spec["cards"], "model": spec["model"]},
    )


def trace_pod(spec: dict[str, Any], profile: str) -> PodRequest:
    gpu = {"milli": spec["gpuMilli"], "count": spec["gpuCount"]} if spec["gpuCount"] else None
    return pod(
        spec["name"],
        cpu=f"{spec['cpuMilli']}m",
        memory=f"{spec['memoryMiB']}Mi",
        scheduler_name=profile,
        gpu=gpu,
    )


def pod_kind(spec: dict[str, Any]) -> PodType:
    # Every pod of the case requests cpu, so its non-zero cpu is its request.
    if not spec["gpuCount"]:
        return PodType(spec["cpuMilli"], 0, 0, "")
    return PodType(spec["cpuMilli"], spec["gpuMilli"], spec["gpuCount"], "")


def fgd_profile(base: str, pods: list[dict[str, Any]]) -> dict[str, Any]:
    """The built-in profile with FGD given the typical pods of the whole list, as the simulator computes
    them up front."""
    counts: dict[PodType, float] = {}
    for spec in pods:
        kind = pod_kind(spec)
        counts[kind] = counts.get(kind, 0.0) + 1
    workload = typical_pods(counts)
    entries = [
        {"cpu": k.cpu, "gpuMilli": k.milli, "gpuCount": k.count, "weight": f}
        for k, f in zip(workload.types, workload.freq, strict=True)
    ]
    document = copy.deepcopy(BUILTIN_PROFILES[base])
    document["pluginConfig"] = [{"name": "FGD", "args": {"workload": entries}}]
    return document


def decide(s: Scheduler, p: PodRequest, now: float) -> tuple[str | None, list[int]]:
    s.add_pod(p, now)
    for outcome in s.schedule(now):
        if isinstance(outcome, Placed) and outcome.uid == p.uid:
            record = s.snapshot.pods[p.uid]
            return outcome.node, list(record.gpu_cards)
        if isinstance(outcome, Unschedulable) and outcome.uid == p.uid:
            s.delete_pod(p.uid, now)
            return None, []
    raise AssertionError(f"{p.uid}: no decision")


def test_gpu_share_places_every_pod_on_the_node_and_cards_the_simulator_chose() -> None:
    pods = CASE["pods"]
    s = scheduler([gpu_node(n) for n in CASE["nodes"]], fgd_profile("gpu-share", pods))
    got = []
    for i, spec in enumerate(pods):
        node_name, cards = decide(s, trace_pod(spec, "gpu-share"), float(i))
        got.append({"name": spec["name"], "node": node_name, "cards": cards if spec["gpuCount"] else []})
    expected = [{"name": p["name"], "node": p["node"], "cards": p["cards"]} for p in pods]
    assert got == expected


def test_the_case_exercises_shares_whole_cards_cpu_pods_and_failures() -> None:
    pods = CASE["pods"]
    assert any(p["gpuCount"] == 1 and p["gpuMilli"] < 1000 for p in pods)
    assert any(p["gpuCount"] > 1 and p["node"] for p in pods)
    assert any(p["gpuCount"] == 0 and p["node"] for p in pods)
    assert any(p["node"] is None for p in pods)


@pytest.mark.parametrize(
    "tie_break",
    [
        pytest.param("random", id="Without the simulator's tie-break the same scores pick other nodes."),
    ],
)
def test_the_lowest_name_tie_break_is_what_makes_the_decisions_agree(tie_break: str) -> None:
    pods = CASE["pods"]
    document = fgd_profile("gpu-share", pods)
    document["tieBreak"] = tie_break
    s = scheduler([gpu_node(n) for n in CASE["nodes"]], document)
    nodes = [decide(s, trace_pod(spec, "gpu-share"), float(i))[0] for i, spec in enumerate(pods)]
    assert nodes != [p["node"] for p in pods]


def test_a_profile_refuses_a_tie_break_it_does_not_know() -> None:
    document = {"schedulerName": "x", "tieBreak": "first"}
    with pytest.raises(ConfigError, match="tieBreak must be one of random, name, got 'first'"):
        parse_profile(document)


def test_the_lowest_name_wins_among_equal_totals_whatever_the_node_order() -> None:
    nodes = [node(name, cpu="4") for name in ("b", "c", "a")]
    s = scheduler(nodes, {"schedulerName": "x", "tieBreak": "name"})
    placed = {}
    for i in range(3):
        p = pod(f"p{i}", cpu="1", scheduler_name="x")
        s.add_pod(p, float(i))
        placed.update({o.uid: o.node for o in s.schedule(float(i)) if isinstance(o, Placed)})
    # The default scorers score the three empty nodes alike for p0; then "a" holds a pod and scores lower.
    assert placed["p0"] == "a"
