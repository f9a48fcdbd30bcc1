"""Batch placement speed: BES and TBESK against the sequential LRA baseline, in the same process.

    python -m bench.tbesk [--seed S] [--population P] [--iterations I] [--large-pods N] [--large-nodes M]
                          [--cores C] [--skip-large]

1. The paper experiment's instance: 1,800 pods on the paper's 31 nodes (the experiment's pod generator),
   population 30, 100 iterations. Timed: LRA (the paper's baseline, one pod at a time), BES, TBESK, TBESK
   finished by the Z local search, and the Z reference (greedy + local search); Z_avg of each is printed
   alongside.
2. A large instance: 10,000 pods on 1,000 nodes (the paper's three node types in its 11:10:10 proportion,
   pods from the same generator scaled to the same load levels), same population and iterations. Timed:
   LRA and TBESK.

The process is pinned to `--cores` CPUs (default 1; the optimisers use no BLAS calls), so the figures are
single-core ones. Memory is the process's peak resident set size (ru_maxrss),
which includes the interpreter and numpy. Targets: ≤ 5 s and ≤ 60 s for TBESK, ≤ 2 GiB.

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import orjson

from evaluation.experiments.tbesk import (
    PAPER_NODE_COUNTS,
    PAPER_NODE_TYPES,
    PAPER_RESOURCES,
    generate_pods,
    paper_cluster,
    paper_pods,
)
from policies.batch import (
    BesParams,
    least_requested,
    local_search_z,
    make_problem,
    optimise,
    reference,
    utilisation,
    z_avg,
)

TARGET_PAPER_S = 5.0
TARGET_LARGE_S = 60.0
TARGET_RSS_MIB = 2048.0


def _pin(cores: int) -> list[int]:
    available = sorted(os.sched_getaffinity(0))
    chosen = available[: max(1, cores)]
    os.sched_setaffinity(0, set(chosen))
    return chosen


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _timed(function: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = function()
    return value, time.perf_counter() - started


def large_cluster(nodes: int) -> np.ndarray:
    """`nodes` nodes of the paper's three types in its 11:10:10 proportion."""
    shares = np.array(PAPER_NODE_COUNTS, dtype=np.float64) / sum(PAPER_NODE_COUNTS)
    counts = np.floor(shares * nodes).astype(int)
    counts[0] += nodes - counts.sum()
    return np.repeat(np.array(PAPER_NODE_TYPES), counts, axis=0)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--population", type=int, default=30)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--large-pods", type=int, default=10_000)
    parser.add_argument("--large-nodes", type=int, default=1_000)
    parser.add_argument("--cores", type=int, default=1, help="CPUs to pin the process to (default 1)")
    parser.add_argument("--skip-large", action="store_true", help="only the 1,800 × 31 instance")
    args = parser.parse_args()
    pinned = _pin(args.cores)
    params = BesParams(population=args.population, iterations=args.iterations)

    capacity, _ = paper_cluster()
    pods = paper_pods(1800, args.seed)
    problem = make_problem(capacity, pods, resources=PAPER_RESOURCES)
    print(
        f"batch placement benchmark: {len(pods)} pods × {len(capacity)} nodes, "
        f"population {params.population}, {params.iterations} iterations, seed {args.seed}, "
        f"pinned to CPU {pinned}"
    )
    paper: dict[str, tuple[np.ndarray, float]] = {}
    paper["LRA"] = _timed(lambda: least_requested(problem))
    bes, bes_s = _timed(lambda: optimise(problem, "bes", params, seed=args.seed))
    paper["BES"] = (bes.assignment, bes_s)
    tbesk, tbesk_s = _timed(lambda: optimise(problem, "tbesk", params, seed=args.seed))
    paper["TBESK"] = (tbesk.assignment, tbesk_s)
    finished, finish_s = _timed(lambda: local_search_z(problem, tbesk.assignment))
    paper["TBESK+LS"] = (finished, tbesk_s + finish_s)
    paper["reference"] = _timed(lambda: reference(problem))
    z = {name: z_avg(utilisation(problem, a)) for name, (a, _) in paper.items()}
    print()
    print(f"  {'algorithm':<12}{'seconds':>10}{'Z_avg':>10}{'below LRA':>12}{'evaluations':>14}")
    evaluations = {"BES": bes.evaluations, "TBESK": tbesk.evaluations}
    for name, (_, seconds) in paper.items():
        below = (1 - z[name] / z["LRA"]) * 100
        count = evaluations.get(name)
        print(
            f"  {name:<12}{seconds:>10.3f}{z[name]:>10.4f}{below:>11.1f}%"
            + (f"{count:>14,}" if count else f"{'':>14}")
        )
    per_eval_ms = tbesk_s / tbesk.evaluations * params.population * 1000
    print(
        f"  TBESK: {per_eval_ms:.2f} ms per population evaluation ({params.population} assignments at once)"
    )
    rss_paper = _rss_mib()

    figures: dict[str, Any] = {
        "pods": len(pods),
        "nodes": len(capacity),
        "population": params.population,
        "iterations": params.iterations,
        "cores": len(pinned),
        "tbesk_1800x31_s": round(tbesk_s, 3),
        "bes_1800x31_s": round(bes_s, 3),
        "lra_1800x31_s": round(paper["LRA"][1], 4),
        "tbesk_ls_1800x31_s": round(paper["TBESK+LS"][1], 3),
        "reference_1800x31_s": round(paper["reference"][1], 3),
        "z_avg_1800x31": {name: round(value, 4) for name, value in z.items()},
        "peak_rss_mib_after_1800x31": round(rss_paper, 1),
    }
    met = tbesk_s <= TARGET_PAPER_S
    if not args.skip_large:
        big = large_cluster(args.large_nodes)
        big_pods = generate_pods(args.large_pods, big, args.seed)
        (big_problem, build_s) = _timed(lambda: make_problem(big, big_pods, resources=PAPER_RESOURCES))
        lra, lra_s = _timed(lambda: least_requested(big_problem))
        result, big_s = _timed(lambda: optimise(big_problem, "tbesk", params, seed=args.seed))
        z_big = {
            "LRA": z_avg(utilisation(big_problem, lra)),
            "TBESK": z_avg(utilisation(big_problem, result.assignment)),
        }
        rss = _rss_mib()
        print()
        print(f"  {args.large_pods:,} pods × {args.large_nodes:,} nodes (problem built in {build_s:.2f} s)")
        print(f"  {'LRA':<12}{lra_s:>10.3f}{z_big['LRA']:>10.4f}")
        print(
            f"  {'TBESK':<12}{big_s:>10.3f}{z_big['TBESK']:>10.4f}"
            f"   {int((result.assignment < 0).sum())} pods left to one-by-one placement, "
            f"{result.repaired} repaired"
        )
        figures.update(
            {
                "large_pods": args.large_pods,
                "large_nodes": args.large_nodes,
                "tbesk_10000x1000_s": round(big_s, 3),
                "lra_10000x1000_s": round(lra_s, 3),
                "problem_build_10000x1000_s": round(build_s, 3),
                "z_avg_10000x1000": {name: round(value, 4) for name, value in z_big.items()},
                "peak_rss_mib": round(rss, 1),
            }
        )
        met = met and big_s <= TARGET_LARGE_S and rss <= TARGET_RSS_MIB
    else:
        figures["peak_rss_mib"] = round(rss_paper, 1)
        met = met and rss_paper <= TARGET_RSS_MIB
    figures["targets"] = {
        "1800x31_s": TARGET_PAPER_S,
        "10000x1000_s": TARGET_LARGE_S,
        "rss_mib": TARGET_RSS_MIB,
    }
    figures["targets_met"] = met
    print()
    print(
        f"  targets: TBESK ≤ {TARGET_PAPER_S:g} s (1,800 × 31), ≤ {TARGET_LARGE_S:g} s (10,000 × 1,000), "
        f"peak RSS ≤ {TARGET_RSS_MIB:,.0f} MiB: {'met' if met else 'NOT met'} "
        f"(peak RSS {figures['peak_rss_mib']:,.0f} MiB)"
    )
    print(orjson.dumps(figures).decode())


if __name__ == "__main__":
    main()
