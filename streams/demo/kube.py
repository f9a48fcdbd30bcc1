"""`make demo-kube`: eyrie schedules real Kubernetes pods.

    python -m streams.demo.kube [--nodes 50] [--pods 300] [--seed 7] [--timeout 180] [--out demo-kube-out]

A Kubernetes API server (``KUBECONFIG``'s cluster, else the local control plane of ``eyrie kube up`` when it
runs, else a throwaway one of `streams.local.controlplane`), a broker (resolved as ``make demo`` does,
reusing one already answering on 127.0.0.1:9092), a worker, ``eyrie applier --target kubernetes`` and
``eyrie kube bridge``. ``kubectl create -f`` then makes `--nodes` heterogeneous Nodes (seeded shapes, Ready,
with allocatable; the GPU ones tainted) and `--pods` Pods with ``schedulerName: eyrie`` (seeded shapes, a
tenth asking for GPUs). The demo waits until every pod is bound (``spec.nodeName``) or explained
(``PodScheduled=False`` with eyrie's reasons), prints what ``kubectl get pods -o wide`` shows (pods bound per
node shape, pending pods and why) and the summary table of ``make demo``, and stops what it started. Every
object carries the label ``eyrie.io/demo=<run>`` and the bridge watches only those, so on a cluster the demo
did not start it touches nothing else, and deletes its objects at the end. The last stdout line is the
summary as one JSON object.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from schemas.events import Binding, BindingResult
from schemas.exceptions import ControlPlaneError, EyrieError
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodRequest
from streams.client import EyrieClient, latest_decisions
from streams.core.decoders import decode_records
from streams.demo.command import OneLineParser, print_result
from streams.demo.processes import start_role, stop_all
from streams.demo.report import render_table, summarize
from streams.kube.translate import node_record
from streams.local.broker import resolved_broker
from streams.local.controlplane import (
    LocalControlPlane,
    build_binaries,
    kube_cache_dir,
    resolved_control_plane,
    resolved_kubeconfig,
)
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings

__all__ = [
    "DEMO_LABEL",
    "GPU",
    "GPU_TAINT",
    "NODE_SHAPES",
    "NOT_READY_TAINT",
    "POD_SHAPES",
    "NodeShape",
    "PodShape",
    "PodState",
    "bound_per_node",
    "kubectl",
    "kubectl_binary",
    "main",
    "node_manifests",
    "pod_manifests",
    "pod_state",
    "pod_states",
    "run_demo_kube",
    "untaint_not_ready",
    "wait_ready",
    "why_kinds",
]

DEMO_LABEL = "eyrie.io/demo"
SHAPE_LABEL = "eyrie.io/demo-shape"
GPU = "nvidia.com/gpu"
GPU_TAINT = {"key": GPU, "value": "present", "effect": "NoSchedule"}
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
"""The taint the API server gives every new Node until a kubelet reports it ready; none runs here."""
POLL_S = 2.0
READY_TIMEOUT_S = 120.0
_KUBECTL_TIMEOUT_S = 180.0


# ------------------------------------------------------------------------------------------ shapes


@dataclass(frozen=True, slots=True)
class NodeShape:
    name: str
    weight: float
    cpu: int  # cores
    memory_gi: int
    gpus: int = 0


@dataclass(frozen=True, slots=True)
class PodShape:
    name: str
    weight: float
    cpu_m: tuple[int, ...]  # millicores, one picked at random
    memory_mi: tuple[int, ...]
    gpus: tuple[int, ...] = (0,)


NODE_SHAPES = (
    NodeShape("cpu-small", 0.35, 4, 16),
    NodeShape("cpu-medium", 0.30, 8, 32),
    NodeShape("cpu-large", 0.20, 16, 64),
    NodeShape("gpu", 0.15, 32, 128, gpus=4),
)
POD_SHAPES = (
    PodShape("web", 0.60, (250, 500, 750, 1000), (256, 512, 1024)),
    PodShape("batch", 0.30, (1000, 2000, 3000, 4000), (2048, 4096, 8192)),
    PodShape("gpu", 0.10, (4000,), (16384,), gpus=(1, 2)),
)
_RESERVED_CPU_M = 100  # what a kubelet keeps for the system: allocatable is capacity minus it
_RESERVED_MEMORY_MI = 512
_ZONES = ("zone-a", "zone-b", "zone-c")


def _pick(rng: random.Random, shapes: Sequence[Any]) -> Any:
    return rng.choices(shapes, weights=[shape.weight for shape in shapes])[0]


def node_manifests(
    count: int, *, seed: int, prefix: str, labels: Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """`count` Nodes of `NODE_SHAPES` drawn with `seed`, named PREFIX-NNN: Ready, with capacity and
    allocatable (capacity minus a system reservation), a zone each; GPU nodes tainted `GPU_TAINT`."""
    rng = random.Random(seed)
    nodes = []
    for index in range(count):
        shape: NodeShape = _pick(rng, NODE_SHAPES)
        name = f"{prefix}-{index:03d}"
        capacity = {"cpu": str(shape.cpu), "memory": f"{shape.memory_gi}Gi", "pods": "110"}
        allocatable = {
            "cpu": f"{shape.cpu * 1000 - _RESERVED_CPU_M}m",
            "memory": f"{shape.memory_gi * 1024 - _RESERVED_MEMORY_MI}Mi",
            "pods": "110",
        }
        if shape.gpus:
            capacity[GPU] = allocatable[GPU] = str(shape.gpus)
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {
                        **(labels or {}),
                        "kubernetes.io/hostname": name,
                        "topology.kubernetes.io/zone": _ZONES[index % len(_ZONES)],
                        SHAPE_LABEL: shape.name,
                    },
                },
                "spec": {"taints": [dict(GPU_TAINT)]} if shape.gpus else {},
                "status": {
                    "capacity": capacity,
                    "allocatable": allocatable,
                    "conditions": [
                        {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "eyrie demo"}
                    ],
                },
            }
        )
    return nodes


def pod_manifests(
    count: int,
    *,
    seed: int,
    prefix: str,
    labels: Mapping[str, str] | None = None,
    scheduler: str = "eyrie",
    node_selector: Mapping[str, str] | None = None,
    namespace: str = "default",
) -> list[dict[str, Any]]:
    """`count` Pods of `POD_SHAPES` drawn with `seed`, named PREFIX-NNNN, for `scheduler`; GPU pods
    tolerate `GPU_TAINT` and limit their GPUs to their request (the API server wants both equal)."""
    rng = random.Random(seed)
    pods = []
    for index in range(count):
        shape: PodShape = _pick(rng, POD_SHAPES)
        requests: dict[str, str] = {
            "cpu": f"{rng.choice(shape.cpu_m)}m",
            "memory": f"{rng.choice(shape.memory_mi)}Mi",
        }
        limits: dict[str, str] = {}
        gpus = rng.choice(shape.gpus)
        if gpus:
            requests[GPU] = limits[GPU] = str(gpus)
        resources: dict[str, Any] = {"requests": requests}
        if limits:
            resources["limits"] = limits
        spec: dict[str, Any] = {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": resources}],
        }
        if gpus:
            spec["tolerations"] = [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}]
        if node_selector:
            spec["nodeSelector"] = dict(node_selector)
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{prefix}-{index:04d}",
                    "namespace": namespace,
                    "labels": {**(labels or {}), "app": shape.name},
                },
                "spec": spec,
            }
        )
    return pods


# ------------------------------------------------------------------------------------------ kubectl


def kubectl_binary() -> str:
    """kubectl of the local control plane's build, else the one on PATH, else built (first use only)."""
    cached = kube_cache_dir() / "bin" / "kubectl"
    if os.access(cached, os.X_OK):
        return str(cached)
    if found := shutil.which("kubectl"):
        return found
    return str(build_binaries(lambda message: print(message, flush=True)) / "kubectl")


def kubectl(binary: str, kubeconfig: str, *args: str, timeout: float = _KUBECTL_TIMEOUT_S) -> str:
    """Run kubectl; its stdout. A failure is one `ControlPlaneError` line naming the command."""
    command = [binary, "--kubeconfig", kubeconfig, *args]
    what = "kubectl " + " ".join(args[:2])
    try:
        done = subprocess.run(
            command, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired:
        raise ControlPlaneError(f"{what} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise ControlPlaneError(f"{what} failed (exit {done.returncode}): {' | '.join(lines[-2:])}")
    return done.stdout


def untaint_not_ready(binary: str, kubeconfig: str, selector: str) -> None:
    """Take `NOT_READY_TAINT` off the selected Nodes, as a kubelet reporting them ready would."""
    try:
        kubectl(binary, kubeconfig, "taint", "nodes", "-l", selector, f"{NOT_READY_TAINT}:NoSchedule-")
    except ControlPlaneError as exc:
        # A cluster whose admission plugins gave no such taint has nothing to remove.
        if "not found" not in str(exc):
            raise


@dataclass(frozen=True, slots=True)
class PodState:
    """A pod as the API server has it: bound (`node`), explained (`why`: the message of PodScheduled=False),
    or neither yet."""

    name: str
    uid: str
    node: str | None
    why: str | None

    @property
    def settled(self) -> bool:
        return self.node is not None or self.why is not None


def pod_state(obj: Mapping[str, Any]) -> PodState:
    metadata, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    why = None
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = str(condition.get("message") or condition.get("reason") or "PodScheduled=False")
    return PodState(
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid")),
        node=spec.get("nodeName") or None,
        why=why,
    )


def pod_states(binary: str, kubeconfig: str, selector: str) -> list[PodState]:
    listed = orjson.loads(kubectl(binary, kubeconfig, "get", "pods", "-l", selector, "-o", "json"))
    return [pod_state(item) for item in listed.get("items") or []]


def why_kinds(message: str) -> str:
    """A PodScheduled=False message without its node counts, so that pods turned away for the same reasons
    count together: "...: 4 Insufficient cpu, 2 Insufficient memory." -> "Insufficient cpu; Insufficient
    memory"."""
    _, found, reasons = message.partition(": ")
    if not found:
        return message
    kinds = []
    for reason in reasons.rstrip(".").split(", "):
        count, _, rest = reason.partition(" ")
        kinds.append(rest if count.isdigit() and rest else reason)
    return "; ".join(sorted(set(kinds)))


def bound_per_node(wide: str) -> tuple[Counter[str], int]:
    """From ``kubectl get pods -o wide``: pods per node, and pods without one (``<none>``)."""
    lines = wide.splitlines()
    if not lines:
        return Counter(), 0
    header = lines[0]
    # kubectl aligns its columns; NODE is the first column of that name (NOMINATED NODE comes later).
    start = next(i for i in range(len(header)) if header.startswith("NODE ", i) and header[i - 1] == " ")
    per_node: Counter[str] = Counter()
    pending = 0
    for line in lines[1:]:
        value = line[start:].split(maxsplit=1)[0] if line[start:].strip() else "<none>"
        if value == "<none>":
            pending += 1
        else:
            per_node[value] += 1
    return per_node, pending


# ------------------------------------------------------------------------------------------ processes


def wait_ready(logs: Mapping[str, tuple[subprocess.Popen[bytes], Path]], timeout: float) -> None:
    """Until each process has logged its ``ready:`` line; a `EyrieError` naming the first that exits, with
    its last line, or that is not ready in time."""
    deadline = time.monotonic() + timeout
    waiting = dict(logs)
    while waiting:
        for role, (process, log) in list(waiting.items()):
            text = log.read_text(encoding="utf-8", errors="replace") if log.is_file() else ""
            if "ready: " in text:
                del waiting[role]
            elif process.poll() is not None:
                last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
                raise EyrieError(f"{role} exited with status {process.returncode}: {last[0]} (log {log})")
        if waiting and time.monotonic() > deadline:
            raise EyrieError(f"{', '.join(waiting)} not ready within {timeout:g} s (logs in {log.parent})")
        time.sleep(0.2)


@contextlib.contextmanager
def _cluster(progress: Any) -> Iterator[tuple[str, str, bool]]:
    """A kubeconfig, where it came from, and whether the demo started it: KUBECONFIG's cluster, the running
    `eyrie kube up` plane, else a throwaway local control plane (stopped and removed on exit)."""
    if (existing := resolved_kubeconfig()) is not None:
        yield existing, f"KUBECONFIG={existing}", False
        return
    local = LocalControlPlane()
    if local.status().ready:
        yield str(local.kubeconfig), f"the local control plane of `eyrie kube up` ({local.server})", False
        return
    with resolved_control_plane(progress=progress) as kubeconfig:
        yield kubeconfig, "a local control plane started for the demo", True


# ------------------------------------------------------------------------------------------ the run


async def _collect(
    settings: Settings,
) -> tuple[dict[str, Binding], dict[str, BindingResult], dict[str, float], dict[str, float]]:
    """Bindings and results by uid, when each pod was first applied, and when the bridge published each pod
    request (the record's timestamp, the bridge's clock)."""
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    applied_at: dict[str, float] = {}
    published_at: dict[str, float] = {}
    async with EyrieClient(settings, create_topics=False) as client:
        async for short, item in client.records(
            ["bindings", "binding-results", "pod-requests"], raw=("pod-requests",)
        ):
            if short == "pod-requests":
                for decoded in decode_records(short, item.partition, item.offset, item.key, item.value):
                    if isinstance(decoded.value, PodRequest):
                        published_at.setdefault(decoded.value.uid, item.timestamp / 1000.0)
                continue
            value = item.value
            if isinstance(value, Binding):
                bindings[value.uid] = value
            elif isinstance(value, BindingResult):
                results[value.uid] = value
                if value.status == "applied":
                    applied_at.setdefault(value.uid, value.at)
    return bindings, results, applied_at, published_at


def _write_list(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_bytes(
        orjson.dumps({"apiVersion": "v1", "kind": "List", "items": items}, option=orjson.OPT_INDENT_2)
    )
    return path


def _placement_table(
    nodes: list[dict[str, Any]], per_node: Counter[str], pending: int, why: Counter[str]
) -> str:
    shapes: dict[str, list[str]] = {}
    for node in nodes:
        shapes.setdefault(node["metadata"]["labels"][SHAPE_LABEL], []).append(node["metadata"]["name"])
    table = Table(title="kubectl get pods -o wide: pods bound per node", title_justify="left")
    for column in ("node shape", "nodes", "pods bound", "per node min", "median", "max"):
        table.add_column(column, justify="left" if column == "node shape" else "right")
    for shape, names in sorted(shapes.items()):
        counts = [per_node.get(name, 0) for name in names]
        table.add_row(
            shape,
            str(len(names)),
            str(sum(counts)),
            str(min(counts)),
            f"{statistics.median(counts):g}",
            str(max(counts)),
        )
    table.add_row("all", str(len(nodes)), str(sum(per_node.values())), "", "", "")
    console = Console(file=io.StringIO(), record=True, width=100, color_system=None)
    console.print(table)
    console.print(f"pending (no node): {pending}; why, by PodScheduled=False:", highlight=False)
    for message, count in why.most_common(5):
        console.print(f"  {count} × {message}", highlight=False)
    if len(why) > 5:
        console.print(
            f"  ... and {sum(why.values()) - sum(c for _, c in why.most_common(5))} more", highlight=False
        )
    return "\n".join(line.rstrip() for line in console.export_text().splitlines()) + "\n"


def run_demo_kube(nodes: int, pods: int, seed: int, out: Path, timeout: float) -> dict[str, object]:
    for name, value in (("--nodes", nodes), ("--pods", pods), ("--timeout", timeout)):
        if not value > 0:
            raise EyrieError(f"{name}: must be positive, got {value}")
    out.mkdir(parents=True, exist_ok=True)
    run = f"kdemo-{uuid.uuid4().hex[:6]}"
    selector = f"{DEMO_LABEL}={run}"
    labels = {DEMO_LABEL: run}
    node_objects = node_manifests(nodes, seed=seed, prefix=f"{run}-node", labels=labels)
    pod_objects = pod_manifests(pods, seed=seed, prefix=f"{run}-pod", labels=labels)
    nodes_file = _write_list(out / "nodes.json", node_objects)
    pods_file = _write_list(out / "pods.json", pod_objects)
    binary = kubectl_binary()

    def progress(message: str) -> None:
        print(message, flush=True)

    with _cluster(progress) as (kubeconfig, where, owned), resolved_broker(reuse_local=True) as bootstrap:
        print(f"cluster: {where}; broker {bootstrap}; objects labelled {selector}", flush=True)
        prefix = f"{run}."
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "KUBECONFIG": kubeconfig,
            "EYRIE_TOPIC_PREFIX": prefix,
            "EYRIE_DATA_DIR": str(out / "faust"),
        }
        settings = load_settings(env=env)
        asyncio.run(ensure_topics(settings))
        processes: list[subprocess.Popen[bytes]] = []
        created = False
        try:
            kubectl(binary, kubeconfig, "create", "-f", str(nodes_file))
            created = True
            untaint_not_ready(binary, kubeconfig, selector)
            print(f"kubectl create -f {nodes_file}: {nodes} nodes", flush=True)
            processes = [
                start_role("worker", env, out),
                start_role("applier", env, out, args=["--target", "kubernetes"]),
                start_role("kube", env, out, args=["bridge", "-l", selector], suffix="-bridge"),
            ]
            roles = ("worker", "applier", "kube-bridge")
            wait_ready(
                {role: (p, out / f"{role}.log") for role, p in zip(roles, processes, strict=True)},
                READY_TIMEOUT_S,
            )
            print(f"worker, applier --target kubernetes and bridge ready (topics {prefix}*, logs in {out})")
            started = time.monotonic()
            kubectl(binary, kubeconfig, "create", "-f", str(pods_file))
            print(f"kubectl create -f {pods_file}: {pods} pods with schedulerName eyrie", flush=True)
            deadline = started + timeout
            while True:
                states = pod_states(binary, kubeconfig, selector)
                settled = sum(1 for state in states if state.settled)
                if settled >= len(states) or time.monotonic() > deadline:
                    break
                time.sleep(POLL_S)
            wall = time.monotonic() - started
            wide = kubectl(binary, kubeconfig, "get", "pods", "-l", selector, "-o", "wide")
            bindings, results, applied_at, published_at = asyncio.run(_collect(settings))
        finally:
            stop_all(processes)
            if created and not owned:
                # A cluster the demo did not start keeps nothing of it.
                with contextlib.suppress(ControlPlaneError):
                    kubectl(
                        binary, kubeconfig, "delete", "pods", "-l", selector, "--grace-period=0", "--force"
                    )
                    kubectl(binary, kubeconfig, "delete", "nodes", "-l", selector)

    per_node, pending = bound_per_node(wide)
    why = Counter(why_kinds(state.why) for state in states if state.node is None and state.why is not None)
    print(_placement_table(node_objects, per_node, pending, why), end="")
    uids = {state.uid for state in states}
    specs: list[NodeSpec] = []
    for obj in node_objects:
        record = node_record(obj, cluster="default", now=0.0)
        if isinstance(record, NodeEvent):
            specs.append(record.node)
    decisions = [d.to_json() for d in latest_decisions(bindings, results) if d.uid in uids]
    summary = summarize(
        specs,
        decisions,
        published_at={uid: at for uid, at in published_at.items() if uid in uids},
        decided_at=applied_at,
        wall_seconds=wall,
        requests={uid: binding.requests for uid, binding in bindings.items()},
    )
    print(render_table(summary), end="")
    unsettled = len(states) - settled
    if unsettled:
        print(f"warning: {unsettled} pods neither bound nor explained after {timeout:g} s", file=sys.stderr)
    return {
        **summary.to_json(),
        "cluster": {
            "pods": len(states),
            "bound": sum(per_node.values()),
            "nodes_used": len(per_node),
            "pending": pending,
            "explained": sum(why.values()),
            "unsettled": unsettled,
        },
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m streams.demo.kube", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--pods", type=int, default=300)
    parser.add_argument("--seed", type=int, default=7, help="Seeds the node and pod shapes")
    parser.add_argument("--out", type=Path, default=Path("demo-kube-out"))
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="Seconds to wait for every pod to be bound or explained"
    )
    args = parser.parse_args(argv)
    print_result(lambda: run_demo_kube(args.nodes, args.pods, args.seed, args.out, args.timeout))


if __name__ == "__main__":
    main()
