"""Multi-cluster estimates and summary updates at scale.

    python -m bench.clusters [--clusters C] [--nodes N] [--event-sizes M,N,...] [--requests R] [--events E]
                             [--seed S]

Builds C clusters of N nodes each (seeded machine shapes from 8 to 128 cores, 20-90 % of each node in use,
so nodes spread over the default grades 0..8), then measures:

* estimates per second, one estimate being one cluster's answer to one per-replica request: the model
  estimator with resource modeling on (per-grade counts), and off (the summary: Karmada's general estimate);
  R seeded requests × C clusters, each timed pass over all clusters as a scheduler would make it;
* the cost of one pod event (assume, confirm or forget on a random node) on the incremental summary, with
  modeling on and off, on clusters of each of the event sizes (default 500, 5,000 and 50,000 nodes): a pod
  event touches one node, so the cost should not grow with the cluster (what remains is the memory
  hierarchy: random nodes of a larger cluster miss the caches more often);
* what recomputing a cluster's summary from its nodes would cost instead (`ClusterSummary.recount`).

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import sys
import time

import orjson

from policies.clusters.estimators import model_estimate
from policies.clusters.models import DEFAULT_MODELS
from policies.clusters.summary import ClusterSummary
from schemas.node import NodeSpec
from schemas.quantity import Resources

GIB = 2**30
MIB = 2**20
TARGET_ESTIMATES_PER_S = 10_000.0
# (cores, memory GiB, relative frequency)
SHAPES = ((8, 32, 2), (16, 64, 3), (32, 128, 4), (64, 256, 2), (96, 384, 2), (128, 1024, 1))


def node_specs(count: int, rng: random.Random) -> list[NodeSpec]:
    shapes = [shape for shape in SHAPES for _ in range(shape[2])]
    specs = []
    for i in range(count):
        cores, memory, _ = rng.choice(shapes)
        capacity = Resources(cpu=cores * 1000, memory=memory * GIB, pods=110)
        specs.append(NodeSpec(name=f"node-{i:05d}", capacity=capacity))
    return specs


def build(name: str, specs: list[NodeSpec], rng: random.Random, *, modeling: bool) -> ClusterSummary:
    """A cluster with every node 20-90 % used (as totals) and a few pods assumed."""
    summary = ClusterSummary(name, modeling=modeling)
    for spec in specs:
        summary.upsert_node(spec)
        share = rng.uniform(0.2, 0.9)
        used = {
            "cpu": int(spec.allocatable["cpu"] * share),
            "memory": int(spec.allocatable["memory"] * rng.uniform(0.2, 0.9)),
        }
        summary.add_usage(spec.name, used, rng.randint(5, 60))
    return summary


def requests(count: int, rng: random.Random) -> list[dict[str, int]]:
    return [
        {
            "cpu": rng.choice((100, 250, 500, 1000, 2000, 4000, 8000, 16000)),
            "memory": rng.randint(1, 512) * 128 * MIB,
        }
        for _ in range(count)
    ]


def estimates_per_s(
    clusters: list[ClusterSummary], wanted: list[dict[str, int]], *, modeling: bool
) -> dict[str, float]:
    """Every request against every cluster; per pass (one request, all clusters) timed on its own."""
    DEFAULT_MODELS._capacity_cache.clear()  # each distinct request pays for its per-grade capacities once
    passes = []
    checksum = 0
    for request in wanted:
        start = time.perf_counter()
        for cluster in clusters:
            checksum += model_estimate(cluster, request, modeling=modeling)
        passes.append(time.perf_counter() - start)
    total = sum(passes)
    return {
        "estimates": len(wanted) * len(clusters),
        "seconds": total,
        "estimates_per_s": len(wanted) * len(clusters) / total,
        "pass_ms_p50": statistics.median(passes) * 1000,
        "pass_ms_max": max(passes) * 1000,
        "checksum": checksum,
    }


def event_cost(summary: ClusterSummary, events: int, rng: random.Random, hot: int | None = None) -> float:
    """Microseconds per pod event: assume, confirm, forget on random nodes (of the first `hot` only, when
    given), in a steady mix; the median of three runs, the machine being shared."""
    return statistics.median(_event_run(summary, events, rng, hot) for _ in range(3))


def _event_run(summary: ClusterSummary, events: int, rng: random.Random, hot: int | None) -> float:
    nodes = [f"node-{i:05d}" for i in range(min(summary.nodes, hot or summary.nodes))]
    live: list[str] = []
    ops = []
    for i in range(events):
        roll = rng.random()
        if roll < 0.4 or not live:
            uid = f"bench-{i}"
            ops.append(
                ("assume", uid, rng.choice(nodes), {"cpu": rng.choice((100, 500, 2000)), "memory": 512 * MIB})
            )
            live.append(uid)
        elif roll < 0.7:
            ops.append(("confirm", rng.choice(live), "", {}))
        else:
            ops.append(("forget", live.pop(rng.randrange(len(live))), "", {}))
    assume, confirm, forget = summary.assume, summary.confirm, summary.forget
    gc.collect()
    gc.disable()  # a collection's cost depends on the whole heap, not on the summary
    try:
        start = time.perf_counter()
        for kind, uid, node, amounts in ops:
            if kind == "assume":
                assume(uid, node, amounts)
            elif kind == "confirm":
                confirm(uid)
            else:
                forget(uid)
        elapsed = time.perf_counter() - start
    finally:
        gc.enable()
    for uid in live:
        forget(uid)
    return elapsed / events * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clusters", type=int, default=100)
    parser.add_argument("--nodes", type=int, default=5000, help="nodes per cluster")
    parser.add_argument(
        "--event-sizes",
        default="500,5000,50000",
        help="cluster sizes (nodes) the pod-event cost is measured on",
    )
    parser.add_argument("--requests", type=int, default=100, help="requests estimated against every cluster")
    parser.add_argument("--events", type=int, default=100_000, help="pod events per event-cost run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    sizes = [int(size) for size in args.event_sizes.split(",") if size.strip()]
    costs: dict[str, float] = {}  # measured first, on a heap not yet holding the C large clusters
    for size in sizes:
        for modeling in (True, False):
            cluster = build(f"events-{size}", node_specs(size, rng), rng, modeling=modeling)
            costs[f"{size}_{'on' if modeling else 'off'}"] = event_cost(cluster, args.events, rng)
            if modeling:
                costs[f"{size}_on_hot"] = event_cost(cluster, args.events, rng, hot=sizes[0])
    del cluster

    started = time.perf_counter()
    specs = node_specs(args.nodes, rng)
    modeled = [build(f"cluster-{c:03d}", specs, rng, modeling=True) for c in range(args.clusters)]
    build_s = time.perf_counter() - started
    plain = []
    for summary in modeled:  # the same clusters with modeling off: no per-grade counts
        copy = ClusterSummary(summary.name, modeling=False)
        copy.allocatable, copy.allocated, copy.allocating = (
            summary.allocatable,
            summary.allocated,
            summary.allocating,
        )
        plain.append(copy)
    wanted = requests(args.requests, rng)

    on = estimates_per_s(modeled, wanted, modeling=True)
    off = estimates_per_s(plain, wanted, modeling=False)

    start = time.perf_counter()
    modeled[0].recount()
    recount_ms = (time.perf_counter() - start) * 1000

    grades = [0] * len(DEFAULT_MODELS)
    for summary in modeled:
        for position, count in enumerate(summary.grade_counts or ()):
            grades[position] += count

    print(f"bench.clusters: {args.clusters} clusters × {args.nodes:,} nodes, {args.requests} requests")
    python = sys.version.split()[0]
    print(f"  seed {args.seed}, python {python}, {os.cpu_count()} cpus; built in {build_s:.1f} s")
    print(f"  nodes per default grade 0..8 (all clusters): {grades}")
    print()
    print(f"  {'estimator':<34}{'estimates':>10}{'est/s':>12}{'pass p50 ms':>13}{'pass max ms':>13}")
    for label, run in (("model, modeling on (grades)", on), ("model, modeling off (summary)", off)):
        print(
            f"  {label:<34}{run['estimates']:>10,}{run['estimates_per_s']:>12,.0f}"
            f"{run['pass_ms_p50']:>13.3f}{run['pass_ms_max']:>13.3f}"
        )
    met = on["estimates_per_s"] >= TARGET_ESTIMATES_PER_S
    print(f"  target {TARGET_ESTIMATES_PER_S:,.0f} estimates/s with models: {'met' if met else 'NOT met'}")
    print()
    hot = f"on, {sizes[0]:,} hot"
    print(f"  {'summary update per pod event':<34}{'modeling on':>14}{'modeling off':>14}{hot:>16}")
    for size in sizes:
        print(
            f"  {f'{size:,} nodes':<34}{costs[f'{size}_on']:>12.2f}µs{costs[f'{size}_off']:>12.2f}µs"
            f"{costs[f'{size}_on_hot']:>14.2f}µs"
        )
    growth = costs[f"{sizes[-1]}_on"] / costs[f"{sizes[0]}_on"]
    scale = sizes[-1] / sizes[0]
    print(
        f"  ratio {sizes[-1]:,} / {sizes[0]:,} nodes (modeling on): {growth:.2f} for {scale:,.0f}x the nodes"
    )
    hot_growth = costs[f"{sizes[-1]}_on_hot"] / costs[f"{sizes[0]}_on_hot"]
    print(f"  the same with events on {sizes[0]:,} nodes of each cluster (cache-warm): {hot_growth:.2f}")
    print(f"  recomputing one {args.nodes:,}-node summary instead: {recount_ms:.1f} ms")
    figures = {
        "clusters": args.clusters,
        "nodes_per_cluster": args.nodes,
        "requests": args.requests,
        "estimates_per_s_modeling_on": round(on["estimates_per_s"]),
        "estimates_per_s_modeling_off": round(off["estimates_per_s"]),
        "all_clusters_pass_ms_modeling_on": round(on["pass_ms_p50"], 3),
        "all_clusters_pass_ms_modeling_off": round(off["pass_ms_p50"], 3),
        "event_us": {key: round(value, 3) for key, value in costs.items()},
        "event_cost_ratio_large_vs_small": round(growth, 3),
        "event_cost_ratio_large_vs_small_hot": round(hot_growth, 3),
        "recount_ms": round(recount_ms, 2),
        "build_s": round(build_s, 1),
        "target_estimates_per_s": TARGET_ESTIMATES_PER_S,
        "target_met": met,
    }
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
