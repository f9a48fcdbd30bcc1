"""Shard checkpoints: how long `encode_checkpoint` and `decode_checkpoint` take, and how many bytes they
write, for a shard of the size one worker holds (5,000 nodes, ~20,000 live pods).

The shard is built the way the pipeline builds it: every envelope goes through `Shard.feed`. Nodes come
from `bench.placement.make_nodes` (CPU and GPU shapes, taints, cordons), each with a measured window and
some with an hourly portrait; pods from `bench.placement.make_pod` under several profiles (default,
binpack, trimaran and portrait, which read the measured load), most of them bound by the applier's
results, some deleted, some left queued as unschedulable (a node selector no node has), and pods bound
by others. The baseline, measured in the same run, is a full replay of the same envelopes into a fresh
shard: what a takeover does without a checkpoint. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

import orjson

from bench.placement import make_nodes, make_pod
from schemas.events import Binding, BindingResult
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted
from streams.core.checkpoint import decode_checkpoint, encode_checkpoint
from streams.core.metrics import NodeSummary
from streams.core.sequencer import Envelope, Kind
from streams.core.shard import Shard

__all__ = ["build_envelopes", "build_shard", "main"]

T = TypeVar("T")
PROFILES = ("default", "default", "default", "binpack", "trimaran", "portrait")


def _summary(name: str, ts: float, rng: random.Random, portrait: bool) -> NodeSummary:
    cores = rng.uniform(0.5, 20)
    window = {"cpu": (cores, rng.uniform(0, 1)), "memory": (rng.uniform(1e9, 6e10), 1e8)}
    cells: dict[str, list[tuple[float, float] | None]] | None = None
    seen: list[float] | None = None
    if portrait:
        hours = [(rng.uniform(0.5, 20), rng.uniform(0, 2)) if rng.random() < 0.8 else None for _ in range(24)]
        cells = {"cpu": hours}
        seen = [ts if cell is not None else -math.inf for cell in hours]
    return NodeSummary.from_json(NodeSummary(name, ts, window, ts, cells, seen).to_json())


def build_envelopes(nodes: int, pods: int, seed: int = 7) -> list[Envelope]:
    """The envelopes of a steady shard: `nodes` nodes, then `pods` pods arriving (every tenth deleted
    later, every fiftieth unschedulable, every hundredth bound by another scheduler), and the applier's
    results for the bindings, fed back as the pipeline feeds them."""
    rng = random.Random(seed)
    specs = make_nodes(nodes, rng)
    now = 1_000.0
    feed: list[Envelope] = []
    offsets: dict[str, int] = {}

    def forwarded(kind: Kind, value: Any, source: str) -> Envelope:
        offsets[source] = offsets.get(source, -1) + 1
        return Envelope(kind, now, value, source, offset=offsets[source])

    for spec in specs:
        feed.append(forwarded(Kind.NODE, NodeEvent(type="upsert", node=spec, ts=now), "node-events/0"))
    for spec in specs:
        summary = _summary(spec.name, now, rng, rng.random() < 0.3)
        feed.append(Envelope(Kind.SUMMARY, now, summary, "metrics/0"))
    names = [spec.name for spec in specs]
    for i in range(pods):
        now += 0.01
        pod = make_pod(i, rng, PROFILES[i % len(PROFILES)])
        if i % 50 == 7:
            pod = pod.model_copy(update={"node_selector": {"nowhere": "true"}})
        if i % 100 == 3:
            bound = PodBound(
                uid=f"foreign-{i}",
                node=rng.choice(names),
                pod=pod.model_copy(update={"uid": f"foreign-{i}"}),
                ts=now,
            )
            feed.append(forwarded(Kind.BOUND, bound, "pod-requests/0"))
        feed.append(forwarded(Kind.POD, pod, "pod-requests/0"))
        if i % 10 == 9:
            gone = f"pod-{i - 5:06d}"
            feed.append(forwarded(Kind.DELETE, PodDeleted(uid=gone, ts=now), "pod-requests/0"))
        if i % 500 == 499:
            feed.append(Envelope(Kind.TICK, now, None, "tick"))
    return feed


def build_shard(nodes: int, pods: int, seed: int = 7) -> tuple[Shard, list[Envelope]]:
    """The shard after `build_envelopes`, with the applier's results fed back for its bindings (most
    applied, a few conflicts); returns the shard and every envelope it was fed."""
    shard = Shard()
    fed: list[Envelope] = []
    results = 0
    for envelope in build_envelopes(nodes, pods, seed):
        fed.append(envelope)
        for output in shard.feed(envelope):
            if isinstance(output, Binding):
                results += 1
                status = "conflict" if results % 97 == 0 else "applied"
                result = {
                    "uid": output.uid,
                    "node": output.node,
                    "status": status,
                    "attempt": output.attempt,
                    "reasons": [],
                    "at": envelope.ts,
                }
                answer = Envelope(
                    Kind.RESULT, envelope.ts, BindingResult.model_validate(result), "bindings/0"
                )
                fed.append(answer)
                shard.feed(answer)
    return shard, fed


def _timed(run: Callable[[], T]) -> tuple[float, float, T]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=24000, help="pods arriving (a tenth are deleted)")
    parser.add_argument("--quick", action="store_true", help="500 nodes, 2,400 pods")
    args = parser.parse_args()
    nodes, pods = (500, 2400) if args.quick else (args.nodes, args.pods)
    started = time.perf_counter()
    shard, fed = build_shard(nodes, pods)
    built = time.perf_counter() - started
    snapshot = shard.scheduler.snapshot
    print(
        f"built {nodes:,} nodes, {len(snapshot.pods):,} pods placed, {len(fed):,} envelopes in {built:.1f} s"
    )

    # Wall and CPU seconds: on a machine shared with other jobs the wall time includes waiting for a core.
    encode_s, encode_cpu, data = _timed(lambda: encode_checkpoint(shard, len(fed)))
    decode_s, decode_cpu, (restored, _) = _timed(lambda: decode_checkpoint(data))
    assert encode_checkpoint(restored, len(fed)) == data, "the restored shard writes other bytes"

    replay_s, replay_cpu, _ = _timed(lambda: Shard().feed_all(fed))
    row = {
        "nodes": nodes,
        "pods_placed": len(snapshot.pods),
        "pods_queued": len(shard.pods) - sum(1 for uid in shard.pods if uid in snapshot.pods),
        "envelopes": len(fed),
        "bytes": len(data),
        "encode_s": round(encode_s, 3),
        "encode_cpu_s": round(encode_cpu, 3),
        "decode_s": round(decode_s, 3),
        "decode_cpu_s": round(decode_cpu, 3),
        "replay_s": round(replay_s, 3),
        "replay_cpu_s": round(replay_cpu, 3),
        "decode_vs_replay": round(replay_s / decode_s, 1),
    }
    print(
        f"checkpoint {len(data):,} bytes; encode {encode_s:.3f} s ({encode_cpu:.3f} s CPU), "
        f"decode {decode_s:.3f} s ({decode_cpu:.3f} s CPU); "
        f"full replay of the same envelopes {replay_s:.2f} s ({row['decode_vs_replay']}x the decode)"
    )
    print(orjson.dumps(row).decode())


if __name__ == "__main__":
    main()
