"""Scheduling throughput on a real API server: eyrie's pipeline against kube-scheduler, in the same run.

    python -m bench.kube [--nodes N] [--pods M] [--seed S] [--timeout S] [--only kube-scheduler|eyrie]
                         [--kube-scheduler-qps Q] [--out DIR]

Uses the cluster that KUBECONFIG names, else starts a local control plane (etcd and kube-apiserver of the
pinned release, `streams.local.controlplane`) for the run. Every object of the run carries the label
``eyrie.bench/run=<run id>`` and is deleted at the end.

1. **Nodes**: N Node objects of bench.placement's seeded shapes (16-96 cores, 64-512 GiB, a fifth with
   GPUs, about 10 % with NoSchedule taints, 2 % cordoned), each with capacity, allocatable and a Ready
   condition, created by concurrent POSTs. A guard pod per phase, left unbound for 2 s before its
   scheduler starts, makes sure no other scheduler in the cluster answers for that scheduler name.
2. **kube-scheduler**: the binary of the same release (`build_binaries`), its default configuration
   (``--kubeconfig`` with the admin token, ``--leader-elect=false``; ``--secure-port=0`` only turns off its
   health endpoint, whose fixed port another run on the machine may hold; ``--kube-scheduler-qps`` raises
   its client rate, 50 requests/s by default, which bounds its bindings). A probe pod, not measured, says
   it is up and has synced the nodes. Then M pods for ``default-scheduler`` are created as fast as
   concurrent POSTs go; pods per second = M / (the last pod seen with ``spec.nodeName`` − the first create
   sent), as a watch of bound pods (``spec.nodeName!=``) in this process sees them. Its pods are deleted
   after.
3. **eyrie**: the same M pod shapes for ``schedulerName: eyrie``, through a broker (KAFKA_BOOTSTRAP_SERVERS,
   else a local one), ``eyrie worker``, ``eyrie applier --target kubernetes`` and ``eyrie kube bridge``,
   each its own process, topics under a fresh prefix; a probe pod first, measured the same way. When this
   checkout has no ``eyrie kube bridge`` or no ``eyrie applier --target``, the phase says "not available
   yet" instead of a figure.

Pods ask for cpu and memory only (100m-2 cores, 128 MiB-4 GiB), so both schedulers run their whole default
profile and every pod fits. Everything (API server, etcd, the schedulers, the broker, this process) shares
the machine's cores; the table shows how busy each process kept them over each measured phase.

Prints a table, then as its last line a JSON object with the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NoReturn

import orjson

from bench.pipeline import CpuMeter, local_broker_pid
from bench.placement import make_nodes
from schemas.exceptions import ControlPlaneError, KubeApiError
from streams.demo.processes import start_role, stop_all
from streams.kube.api import PODS, KubeApi, Listed, WatchEvent
from streams.local.broker import resolved_broker
from streams.local.controlplane import (
    KUBERNETES_VERSION,
    LocalControlPlane,
    build_binaries,
    resolved_control_plane,
)
from streams.runtime.topics import ensure_topics
from streams.settings import load_settings

__all__ = [
    "EYRIE",
    "KUBE_SCHEDULER",
    "Phase",
    "eyrie_missing",
    "main",
    "make_pod_shapes",
    "node_objects",
    "pod_object",
    "run",
]

Scheduler = Literal["kube-scheduler", "eyrie"]
KUBE_SCHEDULER: Scheduler = "kube-scheduler"
EYRIE: Scheduler = "eyrie"
SCHEDULER_NAMES: dict[Scheduler, str] = {KUBE_SCHEDULER: "default-scheduler", EYRIE: "eyrie"}
"""``spec.schedulerName`` of each phase's pods: kube-scheduler's default profile, and the name eyrie's bridge
sends to its ``default`` profile (kube-scheduler's defaults)."""

RUN_LABEL = "eyrie.bench/run"
NAMESPACE = "default"
CONCURRENCY = 64
"""Requests in flight while creating or deleting: far below the API server's 200 mutating requests in
flight, yet enough that creating pods outpaces both schedulers (the table shows the creation rate)."""
RETRIES = 6
STOP_GRACE_S = 15.0
POLL_S = 0.25
GUARD_S = 2.0
"""How long a pod must stay unbound before a phase's scheduler starts, to tell that no other one runs."""
KUBE_SCHEDULER_QPS = 50
"""kube-scheduler's default client rate (``clientConnection.qps``, burst 100): its bindings are requests
too, so this bounds it unless a configuration raises it. Shown in the table, not changed here."""

CPU_CHOICES = (("100m", 30), ("250m", 30), ("500m", 20), ("1", 15), ("2", 5))
MEMORY_CHOICES = (("128Mi", 20), ("256Mi", 25), ("512Mi", 25), ("1Gi", 15), ("2Gi", 10), ("4Gi", 5))


# ------------------------------------------------------------------------------------------ objects


def node_objects(count: int, seed: int, run: str) -> list[dict[str, Any]]:
    """bench.placement's seeded node shapes as Node objects, named and labelled for `run`."""
    objects = []
    for spec in make_nodes(count, random.Random(seed)):
        dumped = spec.model_dump(mode="json")
        name = f"{run}-{spec.name}"
        labels = {**dumped["labels"], "kubernetes.io/hostname": name, RUN_LABEL: run}
        taints = [
            {key: taint[key] for key in ("key", "value", "effect") if taint.get(key)}
            for taint in dumped["taints"]
        ]
        node_spec: dict[str, Any] = {"taints": taints} if taints else {}
        if spec.unschedulable:
            node_spec["unschedulable"] = True
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": node_spec,
                "status": {
                    "capacity": {key: str(value) for key, value in dumped["capacity"].items()},
                    "allocatable": {key: str(value) for key, value in dumped["allocatable"].items()},
                    # No kubelet heartbeats; no node lifecycle controller runs on the local control plane
                    # to turn the condition stale either.
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "benchmark node",
                            "lastHeartbeatTime": now,
                            "lastTransitionTime": now,
                        }
                    ],
                },
            }
        )
    return objects


def make_pod_shapes(count: int, seed: int) -> list[dict[str, str]]:
    """Each pod's requests, seeded apart from the nodes, so the same seed gives the same pods whatever N."""
    rng = random.Random(f"bench.kube pods {seed}")
    cpus, cpu_weights = [c for c, _ in CPU_CHOICES], [w for _, w in CPU_CHOICES]
    memories, memory_weights = [m for m, _ in MEMORY_CHOICES], [w for _, w in MEMORY_CHOICES]
    return [
        {"cpu": rng.choices(cpus, cpu_weights)[0], "memory": rng.choices(memories, memory_weights)[0]}
        for _ in range(count)
    ]


def pod_object(name: str, run: str, scheduler_name: str, requests: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {RUN_LABEL: run}},
        "spec": {
            "schedulerName": scheduler_name,
            "containers": [
                {"name": "main", "image": "registry.invalid/pause:1", "resources": {"requests": requests}}
            ],
        },
    }


# ------------------------------------------------------------------------------------------ requests


async def _pool(items: Iterable[Any], call: Callable[[Any], Awaitable[None]], concurrency: int) -> None:
    """`call` on every item, at most `concurrency` at a time, in order of starting."""
    iterator = iter(items)

    async def worker() -> None:
        # One iterator shared by the workers: the event loop runs one at a time, so each item goes once.
        for item in iterator:
            await call(item)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def _send(
    api: KubeApi,
    method: str,
    path: str,
    body: Any = None,
    ok: Sequence[int] = (200, 201),
    content_type: str = "application/json",
) -> None:
    """One request, asked again after a short backoff when the server is busy or does not answer."""
    for attempt in range(RETRIES):
        try:
            status, reply = await api.request(
                method,
                path,
                body=body,
                params={"gracePeriodSeconds": "0"} if method == "DELETE" else None,
                content_type=content_type,
            )
        except KubeApiError:
            status, reply = 0, b"no reply"
        if status in ok:
            return
        if (status not in (0, 429) and status < 500) or attempt == RETRIES - 1:
            detail = " ".join(reply[:300].decode("utf-8", "replace").split())
            raise KubeApiError(f"{method} {path}: HTTP {status}: {detail}", status=status)
        await asyncio.sleep(0.2 * 2**attempt)


async def create_node(api: KubeApi, node: dict[str, Any]) -> None:
    """POST the node, then set its taints again: the API server's admission adds
    ``node.kubernetes.io/not-ready:NoSchedule`` to every new node, which the node lifecycle controller
    lifts once the node reports Ready; no such controller runs on the local control plane, so this
    request does its part."""
    await _send(api, "POST", "/api/v1/nodes", node, ok=(201,))
    patch = {"spec": {"taints": node["spec"].get("taints")}}
    path = f"/api/v1/nodes/{node['metadata']['name']}"
    await _send(api, "PATCH", path, patch, ok=(200,), content_type="application/merge-patch+json")


async def create_nodes(api: KubeApi, nodes: Sequence[dict[str, Any]]) -> float:
    started = time.perf_counter()
    await _pool(nodes, lambda node: create_node(api, node), CONCURRENCY)
    return time.perf_counter() - started


async def delete_all(api: KubeApi, paths: Iterable[str]) -> None:
    await _pool(paths, lambda path: _send(api, "DELETE", path, ok=(200, 202, 404)), CONCURRENCY)


def _pod_path(name: str) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods/{name}"


# ------------------------------------------------------------------------------------------ measuring


class BoundWatch:
    """Watches the run's bound pods (``spec.nodeName!=``: one event per pod, when it gets its node) and
    notes when this process saw each."""

    def __init__(self, api: KubeApi, run: str) -> None:
        self.bound_at: dict[str, float] = {}
        self.nodes: dict[str, str] = {}
        self._listed = asyncio.Event()
        self._changed = asyncio.Event()
        self._stream = api.list_and_watch(
            PODS, label_selector=f"{RUN_LABEL}={run}", field_selector="spec.nodeName!="
        )
        self._task = asyncio.create_task(self._follow())

    async def _follow(self) -> None:
        async for item in self._stream:
            now = time.perf_counter()
            objects = item.items if isinstance(item, Listed) else [item.object]
            for obj in objects:
                if isinstance(item, WatchEvent) and item.type == "DELETED":
                    continue
                name = str(obj.get("metadata", {}).get("name", ""))
                if name not in self.bound_at:
                    self.bound_at[name] = now
                    self.nodes[name] = str(obj.get("spec", {}).get("nodeName", ""))
            if isinstance(item, Listed):
                self._listed.set()
            self._changed.set()

    async def listed(self, timeout: float) -> None:
        """Return once the list is in: from then on, the watch delivers every pod bound after it."""
        await self._guarded(self._listed.wait(), timeout, "the watch of bound pods did not start")

    async def wait_for(self, names: Iterable[str], deadline: float, alive: Callable[[], str | None]) -> bool:
        """Whether every pod in `names` was seen bound by `deadline` (perf_counter). Raises when a process
        the phase needs has exited (`alive` says why) or the watch failed."""
        waiting = {name for name in names if name not in self.bound_at}
        while waiting:
            if self._task.done():
                self._task.result()
                raise RuntimeError("the watch of bound pods ended")
            if (reason := alive()) is not None:
                raise RuntimeError(reason)
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=min(left, POLL_S * 4))
            waiting = {name for name in waiting if name not in self.bound_at}
        return True

    async def _guarded(self, waiter: Awaitable[Any], timeout: float, what: str) -> None:
        future = asyncio.ensure_future(waiter)
        done, _ = await asyncio.wait(
            {future, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if future not in done:
            future.cancel()
        if self._task in done:
            self._task.result()
        if not done:
            raise RuntimeError(f"{what} within {timeout:g} s")

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        with contextlib.suppress(RuntimeError):
            await self._stream.aclose()  # type: ignore[attr-defined]


@dataclass
class Phase:
    """One scheduler's run over the same pods."""

    scheduler: Scheduler
    pods: int
    bound: int = 0
    seconds: float = 0.0
    """From the first create sent to the last pod seen bound (or to giving up, when some never were)."""
    create_seconds: float = 0.0
    """From the first create sent to the last create answered."""
    probe_seconds: float = 0.0
    """From starting the scheduler to its probe pod bound: start-up, sync of the nodes, first decision."""
    cpu: dict[str, dict[str, float]] = field(default_factory=dict)
    load_before: float = 0.0
    """The one-minute load average when the phase started."""
    qps: int | None = None
    """kube-scheduler's client rate when not its default (`KUBE_SCHEDULER_QPS`)."""
    status: str = "measured"
    """``measured``, ``incomplete`` (some pods never bound within --timeout) or why there is no figure."""

    @property
    def measured(self) -> bool:
        return self.status in ("measured", "incomplete")

    @property
    def pods_per_s(self) -> float:
        return self.bound / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        if not self.measured:
            return {"status": self.status}
        client = {"client_qps": self.qps or KUBE_SCHEDULER_QPS} if self.scheduler == KUBE_SCHEDULER else {}
        return {
            "status": self.status,
            **client,
            "pods_per_s": round(self.pods_per_s, 1),
            "seconds": round(self.seconds, 2),
            "bound": self.bound,
            "missing": self.pods - self.bound,
            "created_per_s": round(self.pods / self.create_seconds, 1) if self.create_seconds > 0 else 0.0,
            "probe_s": round(self.probe_seconds, 2),
            "load_before": round(self.load_before, 2),
            "cpu": {name: {k: round(v, 3) for k, v in shares.items()} for name, shares in self.cpu.items()},
        }


async def measure(
    kubeconfig: str,
    run: str,
    phase: Phase,
    shapes: Sequence[dict[str, str]],
    timeout: float,
    started: float,
    alive: Callable[[], str | None],
    meter: CpuMeter,
) -> None:
    """Probe, then create the pods flat out and wait for all of them to be bound; fills in `phase`.
    `started`: when the scheduler's processes were started (perf_counter), for the probe's time."""
    prefix = f"{run}-{'ks' if phase.scheduler == KUBE_SCHEDULER else 'ey'}"
    scheduler_name = SCHEDULER_NAMES[phase.scheduler]
    probe = pod_object(f"{prefix}-probe", run, scheduler_name, {"cpu": "100m", "memory": "64Mi"})
    pods = [pod_object(f"{prefix}-{i:05d}", run, scheduler_name, shape) for i, shape in enumerate(shapes)]
    names = [pod["metadata"]["name"] for pod in pods]
    create_path = f"/api/v1/namespaces/{NAMESPACE}/pods"
    async with KubeApi.from_kubeconfig(kubeconfig, request_timeout=60.0) as api:
        watch = BoundWatch(api, run)
        try:
            await watch.listed(timeout)
            await _send(api, "POST", create_path, probe, ok=(201,))
            if not await watch.wait_for([probe["metadata"]["name"]], time.perf_counter() + timeout, alive):
                raise RuntimeError(f"{phase.scheduler} did not bind its probe pod within {timeout:g} s")
            phase.probe_seconds = time.perf_counter() - started
            print(f"{phase.scheduler}: probe pod bound after {phase.probe_seconds:.1f} s", flush=True)
            phase.load_before = os.getloadavg()[0]
            meter.start()
            first = time.perf_counter()
            creating = asyncio.create_task(
                _pool(pods, lambda pod: _send(api, "POST", create_path, pod, ok=(201,)), CONCURRENCY)
            )
            creating.add_done_callback(
                lambda _: setattr(phase, "create_seconds", time.perf_counter() - first)
            )
            complete = await watch.wait_for(
                names, first + timeout, lambda: _create_failed(creating) or alive()
            )
            phase.cpu = meter.stop()
            await creating
            bound = [watch.bound_at[name] for name in names if name in watch.bound_at]
            phase.bound = len(bound)
            phase.seconds = (max(bound) if complete and bound else time.perf_counter()) - first
            phase.status = "measured" if complete else "incomplete"
            print(
                f"{phase.scheduler}: {phase.bound:,} pods bound in {phase.seconds:.1f} s; deleting them",
                flush=True,
            )
        finally:
            await watch.close()
            # Deleted now, so the next phase starts on empty nodes (and a failed phase leaves nothing
            # behind); no kubelet runs to finish a graceful delete, hence gracePeriodSeconds=0.
            await delete_all(api, [_pod_path(name) for name in [probe["metadata"]["name"], *names]])


async def ensure_no_other_scheduler(kubeconfig: str, run: str, scheduler: Scheduler, wait: float) -> None:
    """Raise when something in the cluster already binds this phase's pods before its scheduler starts
    (a cluster's own kube-scheduler, an eyrie left running): the phase would measure that instead."""
    prefix = f"{run}-{'ks' if scheduler == KUBE_SCHEDULER else 'ey'}"
    guard = pod_object(f"{prefix}-guard", run, SCHEDULER_NAMES[scheduler], {"cpu": "100m", "memory": "64Mi"})
    async with KubeApi.from_kubeconfig(kubeconfig, request_timeout=60.0) as api:
        watch = BoundWatch(api, run)
        try:
            await watch.listed(wait * 10)
            await _send(api, "POST", f"/api/v1/namespaces/{NAMESPACE}/pods", guard, ok=(201,))
            if await watch.wait_for([guard["metadata"]["name"]], time.perf_counter() + wait, lambda: None):
                raise RuntimeError(
                    f"a pod for {SCHEDULER_NAMES[scheduler]} was bound before the benchmark started "
                    f"{scheduler}: another one runs in this cluster; use a cluster without it"
                )
        finally:
            await watch.close()
            await delete_all(api, [_pod_path(guard["metadata"]["name"])])


def _create_failed(task: asyncio.Task[None]) -> str | None:
    if task.done() and not task.cancelled() and task.exception() is not None:
        return f"creating pods failed: {task.exception()}"
    return None


# ------------------------------------------------------------------------------------------ processes


def _apiserver_pids(kubeconfig: str) -> dict[str, int]:
    """kube-apiserver's and etcd's pids when the cluster is a local control plane on this machine (its
    kubeconfig sits in its data directory), for their CPU; none for any other cluster."""
    status = LocalControlPlane(data_dir=Path(kubeconfig).parent).status()
    pids = {"kube-apiserver": status.apiserver_pid, "etcd": status.etcd_pid}
    return {name: pid for name, pid in pids.items() if pid is not None}


def _exited(processes: dict[str, subprocess.Popen[bytes]], logs: Path) -> Callable[[], str | None]:
    def check() -> str | None:
        for name, process in processes.items():
            if process.poll() is not None:
                return f"{name} exited with {process.returncode}; see {logs}"
        return None

    return check


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def kube_scheduler_command(binary: Path, kubeconfig: str, qps: int | None, out: Path) -> list[str]:
    """The default configuration, or with `qps` a configuration file that changes only the client's rate
    (``clientConnection.qps``, burst twice that): a file replaces the flags it covers, so the kubeconfig and
    leader election are in it too."""
    # --secure-port=0: no health endpoint, whose fixed port (10259) another run on the machine may hold.
    if qps is None:
        return [str(binary), f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--secure-port=0"]
    config = {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(Path(kubeconfig).resolve()), "qps": qps, "burst": 2 * qps},
        "leaderElection": {"leaderElect": False},
    }
    path = out / "kube-scheduler.yaml"
    path.write_text(orjson.dumps(config).decode() + "\n")  # JSON is YAML
    return [str(binary), f"--config={path}", "--secure-port=0"]


def run_kube_scheduler(
    kubeconfig: str, run: str, shapes: Sequence[dict[str, str]], timeout: float, out: Path, qps: int | None
) -> Phase:
    binary = build_binaries(lambda message: print(message, flush=True)) / "kube-scheduler"
    asyncio.run(ensure_no_other_scheduler(kubeconfig, run, KUBE_SCHEDULER, GUARD_S))
    phase = Phase(KUBE_SCHEDULER, len(shapes), qps=qps)
    log_path = out / "kube-scheduler.log"
    command = kube_scheduler_command(binary, kubeconfig, qps, out)
    print(f"kube-scheduler: starting {KUBERNETES_VERSION} (log {log_path})", flush=True)
    started = time.perf_counter()
    with log_path.open("ab") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    try:
        pids = {"kube-scheduler": process.pid, **_apiserver_pids(kubeconfig), "benchmark": os.getpid()}
        alive = _exited({"kube-scheduler": process}, log_path)
        asyncio.run(measure(kubeconfig, run, phase, shapes, timeout, started, alive, CpuMeter(pids)))
    finally:
        _stop(process)
    return phase


def _help(*args: str) -> subprocess.CompletedProcess[str]:
    # Wide, so that the help's table does not wrap an option's name.
    env = {**os.environ, "COLUMNS": "200", "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "streams.cli", *args, "--help"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def eyrie_missing() -> str | None:
    """What this checkout lacks to run eyrie against Kubernetes, or None when it has it all."""
    lacking = []
    if _help("kube", "bridge").returncode != 0:
        lacking.append("`eyrie kube bridge`")
    applier = _help("applier")
    if applier.returncode != 0 or "--target" not in applier.stdout:
        lacking.append("`eyrie applier --target kubernetes`")
    return f"no {' and no '.join(lacking)} in this checkout" if lacking else None


def run_eyrie(
    kubeconfig: str, run: str, shapes: Sequence[dict[str, str]], timeout: float, out: Path
) -> Phase:
    phase = Phase(EYRIE, len(shapes))
    if (missing := eyrie_missing()) is not None:
        phase.status = f"not available yet: {missing}"
        print(f"eyrie: {phase.status}", flush=True)
        return phase
    asyncio.run(ensure_no_other_scheduler(kubeconfig, run, EYRIE, GUARD_S))
    with resolved_broker() as bootstrap:
        env = {
            **os.environ,
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "EYRIE_TOPIC_PREFIX": f"{run}.",
            "EYRIE_DATA_DIR": str(out / "faust"),
            "KUBECONFIG": kubeconfig,
        }
        asyncio.run(ensure_topics(load_settings(env=env)))
        print(
            f"eyrie: starting worker, applier and bridge on {bootstrap}, topics {run}.* (logs in {out})",
            flush=True,
        )
        started = time.perf_counter()
        processes = {
            "worker": start_role("worker", {**env, "EYRIE_DATA_DIR": str(out / "faust-0")}, out),
            "applier": start_role(
                "applier", env, out, args=["--target", "kubernetes", "--kubeconfig", kubeconfig]
            ),
            "bridge": start_role(
                "kube",
                {**env, "EYRIE_DATA_DIR": str(out / "faust-bridge")},
                out,
                args=["bridge", "--kubeconfig", kubeconfig],
                suffix="-bridge",
            ),
        }
        try:
            pids = {name: process.pid for name, process in processes.items()}
            pids |= _apiserver_pids(kubeconfig)
            if (broker := local_broker_pid(bootstrap)) is not None:
                pids["broker"] = broker
            pids["benchmark"] = os.getpid()
            alive = _exited(processes, out)
            asyncio.run(measure(kubeconfig, run, phase, shapes, timeout, started, alive, CpuMeter(pids)))
        finally:
            stop_all(list(processes.values()))
    return phase


# ------------------------------------------------------------------------------------------ the run


@dataclass
class Figures:
    nodes: int
    pods: int
    seed: int
    run: str
    cluster: str
    node_create_s: float
    phases: dict[Scheduler, Phase]

    def ratio(self) -> float | None:
        ours, theirs = self.phases.get(EYRIE), self.phases.get(KUBE_SCHEDULER)
        if (
            ours is None
            or theirs is None
            or not (ours.measured and theirs.measured)
            or theirs.pods_per_s <= 0
        ):
            return None
        return ours.pods_per_s / theirs.pods_per_s

    def to_json(self) -> dict[str, Any]:
        ratio = self.ratio()
        return {
            "nodes": self.nodes,
            "pods": self.pods,
            "seed": self.seed,
            "kubernetes": KUBERNETES_VERSION,
            "cluster": self.cluster,
            "cores": os.cpu_count(),
            "cpu_model": cpu_model(),
            "date": datetime.now(UTC).strftime("%Y-%m-%d"),
            "node_create_s": round(self.node_create_s, 2),
            "schedulers": {name: phase.to_json() for name, phase in self.phases.items()},
            "eyrie_vs_kube_scheduler": round(ratio, 3) if ratio is not None else None,
        }


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run(args: argparse.Namespace) -> Figures:
    out = Path(args.out)
    run_id = f"bench-{uuid.uuid4().hex[:6]}"
    logs = out / run_id
    logs.mkdir(parents=True, exist_ok=True)
    shapes = make_pod_shapes(args.pods, args.seed)
    nodes = node_objects(args.nodes, args.seed, run_id)
    phases: dict[Scheduler, Phase] = {}
    with resolved_control_plane(progress=lambda message: print(message, flush=True)) as kubeconfig:
        cluster = "KUBECONFIG" if os.environ.get("KUBECONFIG", "").strip() else "local control plane"
        print(f"run {run_id}: creating {args.nodes:,} nodes", flush=True)
        try:
            node_seconds = asyncio.run(_with_api(kubeconfig, lambda api: create_nodes(api, nodes)))
            print(f"nodes created in {node_seconds:.1f} s", flush=True)
            if args.only in (None, KUBE_SCHEDULER):
                phases[KUBE_SCHEDULER] = run_kube_scheduler(
                    kubeconfig, run_id, shapes, args.timeout, logs, args.kube_scheduler_qps
                )
            if args.only in (None, EYRIE):
                phases[EYRIE] = run_eyrie(kubeconfig, run_id, shapes, args.timeout, logs)
        finally:
            paths = [f"/api/v1/nodes/{node['metadata']['name']}" for node in nodes]
            asyncio.run(_with_api(kubeconfig, lambda api: delete_all(api, paths)))
    return Figures(args.nodes, args.pods, args.seed, run_id, cluster, node_seconds, phases)


async def _with_api(kubeconfig: str, call: Callable[[KubeApi], Awaitable[Any]]) -> Any:
    async with KubeApi.from_kubeconfig(kubeconfig, request_timeout=60.0) as api:
        return await call(api)


def _rate(phase: Phase) -> str:
    if not phase.measured:
        return phase.status
    text = f"{phase.pods_per_s:,.0f} pods/s  ({phase.bound:,} bound in {phase.seconds:.1f} s"
    if phase.status == "incomplete":
        text += f", {phase.pods - phase.bound:,} NOT bound within --timeout"
    created = phase.pods / phase.create_seconds if phase.create_seconds > 0 else 0.0
    return text + f"; created at {created:,.0f}/s; probe after {phase.probe_seconds:.1f} s)"


def render(figures: Figures) -> str:
    qps = figures.phases[KUBE_SCHEDULER].qps if KUBE_SCHEDULER in figures.phases else None
    labels: dict[Scheduler, str] = {
        KUBE_SCHEDULER: f"kube-scheduler {KUBERNETES_VERSION}, "
        + ("defaults (client QPS 50)" if qps is None else f"client QPS {qps}, else defaults"),
        EYRIE: "eyrie (bridge + worker + applier, default profile)",
    }
    rows = [(labels[name], _rate(phase)) for name, phase in figures.phases.items()]
    ratio = figures.ratio()
    if len(figures.phases) == 2:
        rows.append(("eyrie / kube-scheduler", f"{ratio:.2f}" if ratio is not None else "-"))
    for name, phase in figures.phases.items():
        if phase.measured:
            rows.append(
                (
                    f"cores busy, {name} phase (load {phase.load_before:.1f} before)",
                    ", ".join(f"{process} {share['on_cpu']:.2f}" for process, share in phase.cpu.items()),
                )
            )
    width = max(len(name) for name, _ in rows)
    header = (
        f"{figures.nodes:,} nodes ({figures.node_create_s:.1f} s to create), {figures.pods:,} pods, seed "
        f"{figures.seed}, {figures.cluster}, {os.cpu_count()} cores ({cpu_model()})"
    )
    return "\n".join([header] + [f"  {name:<{width}}  {value}" for name, value in rows])


def _usage_error(message: str) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(2)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.kube", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="Seconds each phase may take to bind its pods"
    )
    parser.add_argument("--only", choices=(KUBE_SCHEDULER, EYRIE), default=None, help="Run one phase only")
    parser.add_argument(
        "--kube-scheduler-qps",
        type=int,
        default=None,
        help=f"kube-scheduler's client rate, burst twice that (default: its own, {KUBE_SCHEDULER_QPS}, "
        "which bounds its bindings per second)",
    )
    parser.add_argument("--out", default="bench-out/kube", help="Logs and the eyrie processes' data")
    args = parser.parse_args()
    if args.nodes < 1 or args.pods < 1:
        _usage_error("error: --nodes and --pods must be 1 or more")
    if args.timeout <= 0:
        _usage_error("error: --timeout must be more than 0")
    if args.kube_scheduler_qps is not None and args.kube_scheduler_qps < 1:
        _usage_error("error: --kube-scheduler-qps must be 1 or more")
    try:
        figures = run(args)
    except (ControlPlaneError, KubeApiError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    print(render(figures))
    print(orjson.dumps(figures.to_json()).decode())


if __name__ == "__main__":
    main()
