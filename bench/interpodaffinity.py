"""InterPodAffinity's cost in a placement chain: the chain with the plugin against the same chain without it.

    python -m bench.interpodaffinity [--nodes N] [--pods P] [--apps A] [--existing E] [--seed S]

A seeded cluster of N nodes in three zones (each with its hostname label) and E pods already there, a tenth
of them with required hostname anti-affinity against their own app and a tenth with a preferred zone
affinity. The stream: P pods of A deployments, each pod with required anti-affinity against its own app on
the hostname and, when the registry has PodTopologySpread, spread constraints on zone (DoNotSchedule) and
hostname (ScheduleAnyway). The chain is the default profile plus InterPodAffinity (filter, score weight 2)
and PodTopologySpread when present; the baseline is the same chain without InterPodAffinity, run in the
same process on the same cluster and pods. It also times the plugin's filter and score alone per pod.

Prints a line per run, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
from typing import Any

import numpy as np
import orjson

from policies.drive import arrive, make_scheduler
from policies.framework.contract import CycleContext
from policies.framework.profile import parse_profile
from policies.framework.registry import registry
from policies.scheduler import Placed, Scheduler
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = ["app_stream", "existing_pods", "main", "plugin_cost", "timed_run", "zoned_nodes"]

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
NAME = "InterPodAffinity"
SPREAD = "PodTopologySpread"


def zoned_nodes(count: int) -> list[NodeSpec]:
    return [
        NodeSpec(
            name=f"node-{i:05d}",
            allocatable={"cpu": 64_000, "memory": 256 * 2**30, "pods": 110},
            labels={ZONE: f"zone-{i % 3}", HOST: f"node-{i:05d}"},
        )
        for i in range(count)
    ]


def _anti(app: str) -> dict[str, Any]:
    return {"required": [{"label_selector": {"match_labels": {"app": app}}, "topology_key": HOST}]}


def existing_pods(rng: random.Random, count: int, apps: int) -> list[PodRequest]:
    pods = []
    for i in range(count):
        app = f"old-{rng.randrange(apps * 4)}"
        fields: dict[str, Any] = {"uid": f"old-{i}", "labels": {"app": app}, "requests": {"cpu": "100m"}}
        roll = rng.random()
        if roll < 0.1:
            fields["pod_anti_affinity"] = _anti(app)
        elif roll < 0.2:
            term = {"label_selector": {"match_labels": {"app": app}}, "topology_key": ZONE}
            fields["pod_affinity"] = {"preferred": [{"weight": 10, "pod_affinity_term": term}]}
        pods.append(PodRequest.model_validate(fields))
    return pods


def app_stream(rng: random.Random, count: int, apps: int, spread: bool) -> list[PodRequest]:
    pods = []
    for i in range(count):
        app = f"app-{rng.randrange(apps)}"
        fields: dict[str, Any] = {
            "uid": f"pod-{i}",
            "labels": {"app": app},
            "requests": {"cpu": "250m", "memory": "256Mi"},
            "pod_anti_affinity": _anti(app),
        }
        if spread:
            selector = {"match_labels": {"app": app}}
            fields["topology_spread_constraints"] = [
                {
                    "max_skew": 1,
                    "topology_key": ZONE,
                    "when_unsatisfiable": "DoNotSchedule",
                    "label_selector": selector,
                },
                {
                    "max_skew": 1,
                    "topology_key": HOST,
                    "when_unsatisfiable": "ScheduleAnyway",
                    "label_selector": selector,
                },
            ]
        pods.append(PodRequest.model_validate(fields))
    return pods


def _profile(with_plugin: bool, spread: bool) -> dict[str, Any]:
    """The default profile plus the plugins measured; without InterPodAffinity it is disabled explicitly,
    in case the default set holds it."""
    enabled = ([NAME] if with_plugin else []) + ([SPREAD] if spread else [])
    disabled = [] if with_plugin else [{"name": NAME}]
    plugins = {
        "filter": {"enabled": [{"name": name} for name in enabled], "disabled": disabled},
        "score": {"enabled": [{"name": name, "weight": 2} for name in enabled], "disabled": disabled},
    }
    return {"schedulerName": "default", "plugins": plugins}


def _scheduler(
    nodes: list[NodeSpec], existing: list[PodRequest], with_plugin: bool, spread: bool
) -> Scheduler:
    profile = parse_profile(_profile(with_plugin, spread))
    scheduler = make_scheduler(nodes, profile)
    snapshot = scheduler.snapshot
    for i, pod in enumerate(existing):
        snapshot.assume(snapshot.pod_info(pod), i % snapshot.size, bound=True)
    return scheduler


def timed_run(scheduler: Scheduler, pods: list[PodRequest]) -> tuple[float, int]:
    gc.collect()
    placed = 0
    start = time.perf_counter()
    for pod in pods:
        placed += sum(isinstance(o, Placed) for o in arrive(scheduler, pod, 0.0))
    return time.perf_counter() - start, placed


def plugin_cost(scheduler: Scheduler, pods: list[PodRequest], name: str = NAME) -> float:
    """Seconds per pod for one plugin's filter and score alone, over every node, on the loaded cluster."""
    profile = next(iter(scheduler.profiles.get(profile) for profile in scheduler.profiles.names()))
    assert profile is not None
    plugin = profile.plugin(name)
    snapshot = scheduler.snapshot
    rows = snapshot.live_rows()
    start = time.perf_counter()
    for pod in pods:
        ctx = CycleContext(pod, snapshot.pod_info(pod), snapshot, 0.0)
        keep = plugin.filter(ctx, slice(0, snapshot.rows))
        nodes = rows if keep is None else np.flatnonzero(keep)
        plugin.score(ctx, nodes)
    return (time.perf_counter() - start) / max(len(pods), 1)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.interpodaffinity")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--existing", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args(argv)
    spread = SPREAD in registry()
    nodes = zoned_nodes(options.nodes)
    existing = existing_pods(random.Random(options.seed), options.existing, options.apps)
    pods = app_stream(random.Random(options.seed + 1), options.pods, options.apps, spread)
    figures: dict[str, Any] = {"nodes": options.nodes, "pods": options.pods, "spread": spread}
    for label, with_plugin in (("without", False), ("with", True)):
        scheduler = _scheduler(nodes, existing, with_plugin, spread)
        seconds, placed = timed_run(scheduler, pods)
        figures[f"{label}_pods_per_s"] = round(len(pods) / seconds, 1)
        figures[f"{label}_placed"] = placed
        print(f"{label:>8} {NAME}: {len(pods) / seconds:9.1f} pods/s, {placed} placed")
        if with_plugin:
            per_pod = plugin_cost(scheduler, pods[: min(len(pods), 500)])
            figures["plugin_us_per_pod"] = round(per_pod * 1e6, 1)
            print(f"{NAME} filter + score alone: {per_pod * 1e6:.1f} µs per pod")
    figures["ratio"] = round(figures["with_pods_per_s"] / figures["without_pods_per_s"], 3)
    print(orjson.dumps(figures).decode())
    return figures


if __name__ == "__main__":
    main()
