"""PodTopologySpread's cost in a placement chain: the chain with the plugin against the same chain without.

    python -m bench.podtopologyspread [--nodes N] [--pods P] [--apps A] [--existing E] [--seed S]

The cluster and stream of `bench.interpodaffinity`: N nodes in three zones, E pods already there, and P
pods of A deployments, each with required hostname anti-affinity against its own app and spread
constraints on zone (DoNotSchedule, maxSkew 1) and hostname (ScheduleAnyway, maxSkew 1). The chain is the
default profile plus InterPodAffinity and PodTopologySpread (filter, score weight 2); the baseline is the
same chain and pods without PodTopologySpread, run in the same process. It also times the plugin's
filter and score alone per pod on the loaded cluster.

Prints a line per run, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import random
from typing import Any

import orjson

from bench.interpodaffinity import app_stream, existing_pods, plugin_cost, timed_run, zoned_nodes
from policies.drive import make_scheduler
from policies.framework.profile import parse_profile
from policies.scheduler import Scheduler
from schemas.node import NodeSpec
from schemas.pod import PodRequest

__all__ = ["main"]

NAME = "PodTopologySpread"
AFFINITY = "InterPodAffinity"


def _scheduler(nodes: list[NodeSpec], existing: list[PodRequest], with_plugin: bool) -> Scheduler:
    enabled = [AFFINITY, NAME] if with_plugin else [AFFINITY]
    disabled = [] if with_plugin else [{"name": NAME}]
    plugins = {
        point: {
            "enabled": [{"name": name, **({"weight": 2} if point == "score" else {})} for name in enabled],
            "disabled": disabled,
        }
        for point in ("filter", "score")
    }
    scheduler = make_scheduler(nodes, parse_profile({"schedulerName": "default", "plugins": plugins}))
    snapshot = scheduler.snapshot
    for i, pod in enumerate(existing):
        snapshot.assume(snapshot.pod_info(pod), i % snapshot.size, bound=True)
    return scheduler


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="python -m bench.podtopologyspread")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--apps", type=int, default=50)
    parser.add_argument("--existing", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args(argv)
    nodes = zoned_nodes(options.nodes)
    existing = existing_pods(random.Random(options.seed), options.existing, options.apps)
    pods = app_stream(random.Random(options.seed + 1), options.pods, options.apps, True)
    figures: dict[str, Any] = {"nodes": options.nodes, "pods": options.pods}
    for label, with_plugin in (("without", False), ("with", True)):
        scheduler = _scheduler(nodes, existing, with_plugin)
        seconds, placed = timed_run(scheduler, pods)
        figures[f"{label}_pods_per_s"] = round(len(pods) / seconds, 1)
        figures[f"{label}_placed"] = placed
        print(f"{label:>8} {NAME}: {len(pods) / seconds:9.1f} pods/s, {placed} placed")
        if with_plugin:
            per_pod = plugin_cost(scheduler, pods[: min(len(pods), 500)], NAME)
            figures["plugin_us_per_pod"] = round(per_pod * 1e6, 1)
            print(f"{NAME} filter + score alone: {per_pod * 1e6:.1f} µs per pod")
    figures["ratio"] = round(figures["with_pods_per_s"] / figures["without_pods_per_s"], 3)
    print(orjson.dumps(figures).decode())
    return figures


if __name__ == "__main__":
    main()
