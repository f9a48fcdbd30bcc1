"""Soak: a million metric samples and 100,000 pod requests through one worker and one applier.

    python -m bench.soak [--nodes 2000] [--pods 100000] [--samples 1000000] [--rounds 20] [--out DIR]

The input goes in `rounds` equal rounds; each round publishes its samples (20 of a node per record, as
`EyrieClient.publish_metrics` sends them), its pods, and deletions of the pods of two rounds before (so the
cluster holds about two rounds of pods and stays schedulable), then waits for every pod of the round to get
a final result. After each round it records the round's pods/s, samples/s and the worker's and applier's
RSS. Verdicts, after a warm-up of `--warm-up` rounds: RSS growth below 10 % for the worker, and
throughput that does not decay (the median pods/s of the last quarter of rounds at least 90 % of the first
quarter's). Writes soak.png (RSS and throughput by round) and soak.json; the last stdout line is the JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench.pipeline import Results, bench_producer, make_workload, probe
from schemas.codec import encode
from schemas.node import NodeEvent
from schemas.pod import PodDeleted
from streams.demo.processes import resident_bytes, start_role, stop_all
from streams.local.broker import resolved_broker
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

__all__ = ["Round", "SoakFigures", "main"]

PER_RECORD = 20
RSS_GROWTH_LIMIT = 0.10
DECAY_LIMIT = 0.90


@dataclass
class Round:
    index: int
    pods_per_s: float
    samples_per_s: float
    seconds: float
    worker_rss: int
    applier_rss: int


@dataclass
class SoakFigures:
    nodes: int
    pods: int
    samples: int
    rounds: list[Round] = field(default_factory=list)
    warm_up_rounds: int = 2
    worker_rss_growth: float = 0.0
    applier_rss_growth: float = 0.0
    throughput_ratio: float = 0.0
    """Median pods/s of the last quarter of rounds over the first quarter's (after the warm-up)."""
    missing: int = 0

    @property
    def passed(self) -> bool:
        return (
            self.worker_rss_growth < RSS_GROWTH_LIMIT
            and self.throughput_ratio >= DECAY_LIMIT
            and self.missing == 0
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["passed"] = self.passed
        data["cores"] = os.cpu_count()
        return data


async def _soak(args: argparse.Namespace, settings: Settings, pids: dict[str, int]) -> SoakFigures:
    workload = make_workload(args.nodes, args.pods, 0, "default", args.seed)
    figures = SoakFigures(args.nodes, args.pods, args.samples, warm_up_rounds=args.warm_up)
    results = Results(settings)
    await results.start()
    producer = bench_producer(settings)
    await producer.start()
    try:
        for spec in workload.nodes:
            await producer.send(
                settings.topic("node-events"),
                encode(NodeEvent(type="upsert", node=spec)),
                key=spec.name.encode(),
            )
        await producer.flush()
        await probe(settings, results, args.timeout, "warm-up")
        pods_per_round = args.pods // args.rounds
        samples_per_round = args.samples // args.rounds
        names = [spec.name for spec in workload.nodes]
        for index in range(args.rounds):
            pods = workload.pods[index * pods_per_round : (index + 1) * pods_per_round]
            started = time.perf_counter()
            # Samples: `samples_per_round` in event time order, every node in turn, 20 of a node per record.
            base = index * samples_per_round
            per_node: dict[str, list[dict[str, Any]]] = {}
            for i in range(samples_per_round):
                n = (base + i) % len(names)
                ts = float((base + i) // len(names))
                per_node.setdefault(names[n], []).append(
                    {"ts": ts, "node": names[n], "values": {"cpu": 1.0 + (i % 7) * 0.1, "memory": 2.0e9}}
                )
            for node, samples in per_node.items():
                for i in range(0, len(samples), PER_RECORD):
                    await producer.send(
                        settings.topic("metrics"),
                        orjson.dumps(samples[i : i + PER_RECORD]),
                        key=node.encode(),
                    )
            for pod in pods:
                await producer.send(settings.topic("pod-requests"), encode(pod), key=pod.uid.encode())
            if index >= 2:
                gone = workload.pods[(index - 2) * pods_per_round : (index - 1) * pods_per_round]
                for pod in gone:
                    deleted = PodDeleted(uid=pod.uid, ts=time.time())
                    await producer.send(settings.topic("pod-requests"), encode(deleted), key=pod.uid.encode())
            await producer.flush()
            uids = [pod.uid for pod in pods]
            await results.wait_for(uids, args.timeout)
            seconds = time.perf_counter() - started
            figures.missing += sum(1 for uid in uids if uid not in results.final_at)
            figures.rounds.append(
                Round(
                    index=index,
                    pods_per_s=len(pods) / seconds,
                    samples_per_s=samples_per_round / seconds,
                    seconds=seconds,
                    worker_rss=resident_bytes(pids["worker"]),
                    applier_rss=resident_bytes(pids["applier"]),
                )
            )
            last = figures.rounds[-1]
            print(
                f"round {index + 1}/{args.rounds}: {last.pods_per_s:,.0f} pods/s, "
                f"{last.samples_per_s:,.0f} samples/s, worker {last.worker_rss / 2**20:,.0f} MiB, "
                f"applier {last.applier_rss / 2**20:,.0f} MiB",
                flush=True,
            )
    finally:
        await producer.stop()
        await results.stop()
    return figures


def _verdicts(figures: SoakFigures) -> None:
    after = figures.rounds[figures.warm_up_rounds :]
    if len(after) < 4:
        raise SystemExit("error: --rounds: need at least warm-up + 4 rounds")
    first, last = after[0], after[-1]
    figures.worker_rss_growth = last.worker_rss / first.worker_rss - 1
    figures.applier_rss_growth = last.applier_rss / first.applier_rss - 1
    quarter = max(1, len(after) // 4)
    early = statistics.median(r.pods_per_s for r in after[:quarter])
    late = statistics.median(r.pods_per_s for r in after[-quarter:])
    figures.throughput_ratio = late / early if early > 0 else 0.0


def _plot(figures: SoakFigures, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r.index + 1 for r in figures.rounds]
    figure, (memory, speed) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    memory.plot(rounds, [r.worker_rss / 2**20 for r in figures.rounds], marker="o", label="worker")
    memory.plot(rounds, [r.applier_rss / 2**20 for r in figures.rounds], marker="o", label="applier")
    memory.axvline(figures.warm_up_rounds + 0.5, color="grey", linewidth=0.8, linestyle="--")
    memory.set_ylabel("RSS (MiB)")
    memory.legend(fontsize=8)
    memory.grid(alpha=0.3)
    speed.plot(rounds, [r.pods_per_s for r in figures.rounds], marker="o", label="pods/s")
    speed.set_ylabel("pods/s")
    other = speed.twinx()
    other.plot(
        rounds, [r.samples_per_s for r in figures.rounds], marker="s", color="tab:green", label="samples/s"
    )
    other.set_ylabel("samples/s")
    speed.set_xlabel(
        f"round ({figures.pods // len(rounds):,} pods and {figures.samples // len(rounds):,} samples each)"
    )
    speed.grid(alpha=0.3)
    figure.suptitle(f"Soak: {figures.samples:,} samples and {figures.pods:,} pods, {figures.nodes:,} nodes")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def run(args: argparse.Namespace) -> SoakFigures:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with resolved_broker() as bootstrap:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "EYRIE_TOPIC_PREFIX": f"soak-{uuid.uuid4().hex[:6]}.",
            "EYRIE_PARTITIONS": "4",
            "EYRIE_DATA_DIR": str(out / "faust"),
        }
        settings = load_settings(env=env)
        asyncio.run(ensure_topics(settings))
        processes = {"applier": start_role("applier", env, out), "worker": start_role("worker", env, out)}
        try:
            figures = asyncio.run(_soak(args, settings, {name: p.pid for name, p in processes.items()}))
        finally:
            stop_all(list(processes.values()))
    _verdicts(figures)
    _plot(figures, out / "soak.png")
    (out / "soak.json").write_bytes(orjson.dumps(figures.to_json(), option=orjson.OPT_INDENT_2))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--pods", type=int, default=100_000)
    parser.add_argument("--samples", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--warm-up", type=int, default=2, help="Rounds before RSS and throughput are compared"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--out", default="bench-out/soak")
    args = parser.parse_args()
    figures = run(args)
    print(
        f"worker RSS growth {figures.worker_rss_growth:+.1%}, applier {figures.applier_rss_growth:+.1%}, "
        f"throughput last/first quarter {figures.throughput_ratio:.2f}, missing {figures.missing}: "
        + ("passed" if figures.passed else "FAILED")
    )
    print(orjson.dumps(figures.to_json()).decode())
    if not figures.passed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
