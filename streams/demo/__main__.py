"""`make demo`: a broker, a worker and an applier, a replayed workload, a summary table and plots.

    python -m streams.demo [--trace DIR_OR_LOG] [--pods 2000] [--nodes 200] [--rate N] [--out demo-out]

Uses the broker named by KAFKA_BOOTSTRAP_SERVERS, else the one already answering on 127.0.0.1:9092
(`eyrie broker up`, whatever its data directory), else starts one (testcontainers, or a local broker), and
stops everything it started. The workload is a seeded one shaped like the Alibaba GPU 2023 trace, or
the real trace (a directory: its first `--pods` pods) or any recorded event log. It is replayed flat out,
so latency includes the queue a burst builds, or at most `--rate` events per second (pods, node events,
deletions and samples alike), where latency is the pipeline's own. The last stdout line is the summary as
one JSON object.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import uuid
from pathlib import Path

from schemas.eventlog import read_events
from schemas.events import Binding, BindingResult
from schemas.exceptions import EyrieError
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.client import EyrieClient, latest_decisions
from streams.demo.command import OneLineParser, print_result
from streams.demo.processes import start_role, stop_all
from streams.demo.report import deleted_uids, render_table, summarize, write_plots
from streams.demo.workload import generate_gpu_like_log, slice_gpu_trace
from streams.local.broker import resolved_broker
from streams.recording.replay import replay_live
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

FINAL = {"applied", "unschedulable", "rejected"}


def _workload(trace: str | None, out: Path, pods: int, nodes: int) -> Path:
    if trace is None:
        generate_gpu_like_log(out / "workload.jsonl", nodes=nodes, pods=pods)
        return out / "workload.jsonl"
    source = Path(trace)
    if source.is_dir():
        slice_gpu_trace(source, out / "workload.jsonl", pods=pods, nodes=nodes)
        return out / "workload.jsonl"
    if not source.is_file():
        raise EyrieError(f"--trace: {trace} is neither a trace directory nor an event log")
    return source


async def _collect(
    settings: Settings,
) -> tuple[dict[str, Binding], dict[str, BindingResult], dict[str, float]]:
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    applied_at: dict[str, float] = {}
    async with EyrieClient(settings, create_topics=False) as client:
        async for _, decoded in client.records(["bindings", "binding-results"]):
            value = decoded.value
            if isinstance(value, Binding):
                bindings[value.uid] = value
            elif isinstance(value, BindingResult):
                results[value.uid] = value
                if value.status == "applied":
                    applied_at.setdefault(value.uid, value.at)
    return bindings, results, applied_at


async def _wait_for_worker(settings: Settings, timeout: float) -> float:
    """Latency figures should measure the pipeline, not a worker still joining its group: send a pod
    that fits nowhere and wait for its verdict."""
    started = time.monotonic()
    probe = PodRequest(uid=f"warm-up-{uuid.uuid4().hex[:6]}", node_selector={"eyrie.io/warm-up": "none"})
    async with EyrieClient(settings, create_topics=False) as client:
        await client.publish_pod(probe)
        await client.flush()
        async for decision in client.decisions(follow=True, from_beginning=True, until_idle=timeout):
            if decision.uid == probe.uid:
                break
    return time.monotonic() - started


def run_demo(
    trace: str | None, pods: int, nodes: int, out: Path, timeout: float, rate: float | None = None
) -> dict[str, object]:
    for name, value in (("--pods", pods), ("--nodes", nodes), ("--timeout", timeout), ("--rate", rate)):
        if value is not None and not value > 0:
            raise EyrieError(f"{name}: must be positive, got {value}")
    out.mkdir(parents=True, exist_ok=True)
    log = _workload(trace, out, pods, nodes)
    events = list(read_events(log))
    specs: dict[str, NodeSpec] = {
        e.value.node.name: e.value.node for e in events if isinstance(e.value, NodeEvent)
    }
    uids = {e.value.uid for e in events if isinstance(e.value, PodRequest)}
    print(f"workload: {log} — {len(specs)} nodes, {len(uids)} pods, {len(events)} events", flush=True)
    with resolved_broker(reuse_local=True) as bootstrap:
        prefix = f"demo-{uuid.uuid4().hex[:6]}."
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "EYRIE_TOPIC_PREFIX": prefix,
            "EYRIE_DATA_DIR": str(out / "faust"),
        }
        settings = load_settings(env=env)
        asyncio.run(ensure_topics(settings))
        processes = [start_role("worker", env, out), start_role("applier", env, out)]
        print(f"broker {bootstrap}; worker and applier started (topics {prefix}*, logs in {out})", flush=True)
        try:
            ready = asyncio.run(_wait_for_worker(settings, timeout))
            pace = "flat out" if rate is None else f"at {rate:g} events/s"
            print(f"worker ready in {ready:.1f} s; replaying {pace}", flush=True)
            started = time.monotonic()
            stats = asyncio.run(replay_live(log, settings, rate=rate))
            print(
                f"replayed {stats.events} events in {stats.seconds:.1f} s; waiting for decisions", flush=True
            )
            deadline = time.monotonic() + timeout
            while True:
                bindings, results, applied_at = asyncio.run(_collect(settings))
                decisions = latest_decisions(bindings, results)
                final = sum(1 for d in decisions if d.uid in uids and d.status in FINAL)
                if final >= len(uids) or time.monotonic() > deadline:
                    break
                time.sleep(1.0)
            wall = time.monotonic() - started
        finally:
            stop_all(processes)
    summary = summarize(
        list(specs.values()),
        [d.to_json() for d in decisions if d.uid in uids],
        published_at=stats.published_at,
        decided_at=applied_at,
        wall_seconds=wall,
        requests={uid: binding.requests for uid, binding in bindings.items()},
        deleted=deleted_uids(log),
    )
    print(render_table(summary))
    plots = write_plots(summary, out)
    print("plots: " + ", ".join(str(p) for p in plots))
    if final < len(uids):
        print(
            f"warning: {len(uids) - final} pods had no final decision after {timeout:.0f} s", file=sys.stderr
        )
    return summary.to_json()


def main() -> None:
    parser = OneLineParser(prog="python -m streams.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--trace", help="Alibaba GPU 2023 trace directory or an event log (default: generated)"
    )
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--out", type=Path, default=Path("demo-out"))
    parser.add_argument("--timeout", type=float, default=300.0, help="Seconds to wait for every decision")
    parser.add_argument(
        "--rate", type=float, default=None, help="At most this many events per second (default: flat out)"
    )
    args = parser.parse_args()
    print_result(
        lambda: run_demo(args.trace or None, args.pods, args.nodes, args.out, args.timeout, args.rate)
    )


if __name__ == "__main__":
    main()
