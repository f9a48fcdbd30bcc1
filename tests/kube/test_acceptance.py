"""eyrie schedules real Kubernetes pods: a worker, ``eyrie applier --target kubernetes`` and ``eyrie kube
bridge`` as processes against a control plane of this module's own (so that it can be stopped and started
again without disturbing other tests; its data directory is kept, so its state survives) and the session's
broker. Every judgement is made from the API server's objects: each pod ends bound (``spec.nodeName``) or
explained (``PodScheduled=False``), no node's bound pods ask for more than its allocatable, whoever bound
them, and faults (processes killed, the API server away) lose nothing and bind nothing twice.

The module shares one pipeline; each test has a pool of nodes of its own (label ``eyrie.test/pool``) that
its pods select, so the tests do not crowd each other."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from schemas.events import Binding, BindingResult, DeadLetter
from schemas.pod import PodBound, PodRequest
from streams.client import EyrieClient
from streams.demo.kube import (
    kubectl,
    kubectl_binary,
    node_manifests,
    pod_manifests,
    pod_state,
    untaint_not_ready,
    wait_ready,
)
from streams.demo.processes import start_role, stop_all
from streams.kube.api import KubeApi
from streams.local.controlplane import LocalControlPlane
from streams.local.services import free_ports
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.commands import run_module
from tests.kube.objects import (
    RUN,
    RUN_LABEL,
    bound_requests,
    create,
    create_all,
    get,
    listed,
    node,
    over_allocatable,
    patch,
    pod,
    scheduled_false,
    selector,
    would_fit,
)

pytestmark = [pytest.mark.kube, pytest.mark.kafka]

TEST = "acceptance"
SELECTOR = selector(TEST)
POOL = "eyrie.test/pool"
SETTLE_S = 120.0
READY_S = 120.0


# ------------------------------------------------------------------------------------------ the stack


@dataclass
class Stack:
    """The control plane, and the three processes that make eyrie a Kubernetes scheduler."""

    plane: LocalControlPlane
    kubeconfig: str
    env: dict[str, str]
    settings: Settings
    logs: Path
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    starts: Counter[str] = field(default_factory=Counter)

    ROLES: ClassVar[dict[str, tuple[str, list[str]]]] = {
        "worker": ("worker", []),
        "applier": ("applier", ["--target", "kubernetes"]),
        "bridge": ("kube", ["bridge", "-l", SELECTOR]),
    }

    def start(self, *roles: str) -> None:
        """Start each role and return once every one has logged its ready line (its log: ROLE-N.log)."""
        waiting = {}
        for role in roles:
            command, args = self.ROLES[role]
            self.starts[role] += 1
            suffix = f"-{role}-{self.starts[role]}" if command == "kube" else f"-{self.starts[role]}"
            self.processes[role] = start_role(command, self.env, self.logs, args=args, suffix=suffix)
            waiting[role] = (self.processes[role], self.logs / f"{command}{suffix}.log")
        wait_ready(waiting, READY_S)

    def kill(self, role: str) -> None:
        """SIGKILL: nothing flushed, committed or said on the way out."""
        process = self.processes[role]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def log(self, role: str) -> str:
        command, _ = self.ROLES[role]
        suffix = f"-{role}-{self.starts[role]}" if command == "kube" else f"-{self.starts[role]}"
        return (self.logs / f"{command}{suffix}.log").read_text(encoding="utf-8", errors="replace")


def labelled(objs: list[dict[str, Any]], **labels: str) -> list[dict[str, Any]]:
    for obj in objs:
        obj["metadata"]["labels"].update(labels)
    return objs


def pool(name: str) -> dict[str, str]:
    return {RUN_LABEL: f"{RUN}-{TEST}", POOL: name}


@pytest.fixture(scope="module")
def stack(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("acceptance")
    plane = LocalControlPlane(data_dir=work / "plane", port=free_ports(1)[0])
    kubeconfig = str(plane.up())
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "KUBECONFIG": kubeconfig,
        "EYRIE_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "EYRIE_DATA_DIR": str(work / "faust"),
        # A killed applier's group membership lapses after this: its successor waits no longer.
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }
    settings = load_settings(env=env)
    asyncio.run(ensure_topics(settings))
    nodes = [
        *node_manifests(50, seed=31, prefix=f"{RUN}-cap", labels=pool("capacity")),
        *node_manifests(24, seed=32, prefix=f"{RUN}-flt", labels=pool("faults")),
        *labelled([node(TEST, f"in-{i}") for i in range(2)], **pool("input")),
    ]
    manifest = work / "nodes.json"
    manifest.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "List", "items": nodes}))
    binary = kubectl_binary()
    kubectl(binary, kubeconfig, "create", "-f", str(manifest))
    untaint_not_ready(binary, kubeconfig, SELECTOR)
    running = Stack(plane, kubeconfig, env, settings, work)
    try:
        running.start("worker", "applier", "bridge")
        yield running
    finally:
        stop_all(list(running.processes.values()))
        plane.down()


@pytest.fixture(scope="module")
async def api(stack: Stack) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(stack.kubeconfig, seed=3) as client:
        yield client


# ------------------------------------------------------------------------------------------ helpers


@dataclass
class Topics:
    """What the pipeline wrote: results and bindings by uid, pods' records, dead letters."""

    results: dict[str, list[BindingResult]] = field(default_factory=lambda: defaultdict(list))
    bindings: dict[str, list[Binding | PodBound]] = field(default_factory=lambda: defaultdict(list))
    requests: dict[str, list[PodRequest | PodBound]] = field(default_factory=lambda: defaultdict(list))
    letters: list[DeadLetter] = field(default_factory=list)


async def read(settings: Settings) -> Topics:
    found = Topics()
    async with EyrieClient(settings, create_topics=False) as client:
        async for short, decoded in client.records(
            ["binding-results", "bindings", "pod-requests", "dead-letters"]
        ):
            value = decoded.value
            if isinstance(value, DeadLetter):
                found.letters.append(value)
            elif short == "binding-results" and isinstance(value, BindingResult):
                found.results[value.uid].append(value)
            elif short == "bindings" and isinstance(value, Binding | PodBound):
                found.bindings[value.uid].append(value)
            elif short == "pod-requests" and isinstance(value, PodRequest | PodBound):
                found.requests[value.uid].append(value)
    return found


async def pods_named(api: KubeApi, prefix: str) -> list[dict[str, Any]]:
    return [p for p in await listed(api, "pods", SELECTOR) if p["metadata"]["name"].startswith(prefix)]


def nodes_of(nodes: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [n for n in nodes if n["metadata"]["labels"].get(POOL) == name]


async def until(
    probe: Callable[[], Any],
    done: Callable[[Any], bool],
    what: str,
    timeout: float = SETTLE_S,
    detail: Callable[[Any], object] = lambda _: "",
) -> Any:
    """Poll `probe` (a coroutine function) until `done` says yes of its value; that value. On timeout, an
    error with `detail` of the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s {detail(value)}")
        await asyncio.sleep(0.5)


def unsettled(pods: list[dict[str, Any]]) -> list[str]:
    """Pods neither bound nor explained."""
    return [p["metadata"]["name"] for p in pods if not pod_state(p).settled]


async def settled(api: KubeApi, prefix: str, count: int, timeout: float = SETTLE_S) -> list[dict[str, Any]]:
    """The `count` pods named `prefix`*, once every one is bound or explained."""
    pods: list[dict[str, Any]] = await until(
        lambda: pods_named(api, prefix),
        lambda pods: len(pods) == count and not unsettled(pods),
        f"every pod {prefix}* bound or explained",
        timeout,
        lambda pods: f"({len(pods)} pods; neither: {unsettled(pods)[:5]} of {len(unsettled(pods))})",
    )
    return pods


def bound_on(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Pod uid → the node it is bound to, for the bound ones."""
    return {p["metadata"]["uid"]: p["spec"]["nodeName"] for p in pods if p["spec"].get("nodeName")}


async def no_pending_pod_fits(api: KubeApi, prefix: str, pool_name: str) -> list[str]:
    """The pending pods named `prefix`* that would fit a node of the pool as the cluster stands."""
    nodes = nodes_of(await listed(api, "nodes", SELECTOR), pool_name)
    every = await listed(api, "pods", SELECTOR)
    used = bound_requests(every)
    return [
        p["metadata"]["name"]
        for p in every
        if p["metadata"]["name"].startswith(prefix)
        and not p["spec"].get("nodeName")
        and any(would_fit(p, n, used.get(n["metadata"]["name"], Counter())) for n in nodes)
    ]


async def events_about(api: KubeApi, uid: str) -> list[tuple[str, str, str]]:
    found = await get(api, f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid={uid}")
    return [(e["type"], e["reason"], e["message"]) for e in found["items"]]


# ------------------------------------------------------------------------------------------ capacity


async def test_five_hundred_pods_on_fifty_nodes_end_bound_or_explained_and_never_over_a_nodes_allocatable(
    stack: Stack, api: KubeApi
) -> None:
    nodes = nodes_of(await listed(api, "nodes", SELECTOR), "capacity")
    names = sorted(n["metadata"]["name"] for n in nodes)
    assert len(names) == 50

    # Pods bound by others first: kube-scheduler's and another scheduler's, nodeName set by hand. eyrie
    # counts them where they are (the shard passes each on to the applier's ledger on the bindings topic).
    others = [
        labelled(
            [
                pod(
                    TEST,
                    f"cap-other-{i:02d}",
                    scheduler="default-scheduler" if i % 3 else "someone-else",
                    node_name=names[(i * 7) % len(names)],
                    requests={"cpu": "1500m", "memory": "3Gi"},
                )
            ],
            **pool("capacity"),
        )[0]
        for i in range(30)
    ]
    other_uids = {p["metadata"]["uid"] for p in await create_all(api, others)}
    await until(
        lambda: read(stack.settings),
        lambda t: (
            other_uids
            <= {u for u, records in t.bindings.items() if any(isinstance(r, PodBound) for r in records)}
        ),
        "the others' pods counted by placement",
        60.0,
    )

    # Half of eyrie's pods, then a cordon of the node holding most of them, then the other half: more than
    # the pool holds.
    labels = pool("capacity")
    first = pod_manifests(
        250, seed=41, prefix=f"{RUN}-cap-a", labels=labels, node_selector={POOL: "capacity"}
    )
    second = pod_manifests(
        250, seed=42, prefix=f"{RUN}-cap-b", labels=labels, node_selector={POOL: "capacity"}
    )
    started = time.monotonic()
    await create_all(api, first)
    before = await settled(api, f"{RUN}-cap-a", 250)
    per_node = Counter(p["spec"]["nodeName"] for p in before if p["spec"].get("nodeName"))
    plain = {n["metadata"]["name"] for n in nodes if not n["spec"].get("taints")}
    cordoned = next(name for name, _ in per_node.most_common() if name in plain)
    await patch(api, f"/api/v1/nodes/{cordoned}", {"spec": {"unschedulable": True}})
    held = {
        p["metadata"]["uid"]
        for p in await listed(api, "pods", SELECTOR)
        if p["spec"].get("nodeName") == cordoned
    }
    # A pod that could only go there is turned away for the cordon: placement has seen it.
    probe = pod(TEST, "cap-probe", requests={"cpu": "10m", "memory": "1Mi"})
    probe["spec"]["nodeSelector"] = {"kubernetes.io/hostname": cordoned}
    await create(api, labelled([probe], **labels)[0])
    (explained,) = await until(
        lambda: pods_named(api, f"{RUN}-cap-probe"),
        lambda pods: bool(pods) and scheduled_false(pods[0]) is not None,
        "the probe's explanation",
    )
    assert "node(s) were unschedulable" in (scheduled_false(explained) or ""), scheduled_false(explained)

    await create_all(api, second)
    everything = await settled(api, f"{RUN}-cap-", len(others) + 501)
    elapsed = time.monotonic() - started
    all_pods = await listed(api, "pods", SELECTOR)
    every_node = await listed(api, "nodes", SELECTOR)

    bound = bound_on(everything)
    pending = [p for p in everything if not p["spec"].get("nodeName")]
    assert len(bound) + len(pending) == len(others) + 501 and not unsettled(everything)
    assert len(pending) > 20, "the pool should be saturated"  # 500 pods ask for more than 50 nodes hold
    assert all(scheduled_false(p) for p in pending)
    reasons = Counter(scheduled_false(p) for p in pending)
    assert any("Insufficient" in (message or "") for message in reasons), reasons
    assert over_allocatable(every_node, all_pods) == {}
    on_cordoned = {p["metadata"]["uid"] for p in all_pods if p["spec"].get("nodeName") == cordoned}
    assert on_cordoned <= held, "a cordoned node got new pods"
    assert await no_pending_pod_fits(api, f"{RUN}-cap-", "capacity") == []
    # Eyrie bound none of the others' pods, and they stayed where they were put.
    assert all(p["spec"]["nodeName"] for p in all_pods if p["metadata"]["uid"] in other_uids)

    # Deleting pods makes room: the pending pods that now fit get bound, and still nothing is over.
    victims = [p for p in before if p["spec"].get("nodeName") and p["spec"]["nodeName"] != cordoned][:80]
    for victim in victims:
        status, body = await api.request(
            "DELETE",
            f"/api/v1/namespaces/default/pods/{victim['metadata']['name']}",
            params={"gracePeriodSeconds": "0"},
        )
        assert status == 200, body
    was_pending = {p["metadata"]["uid"] for p in pending}
    await until(
        lambda: no_pending_pod_fits(api, f"{RUN}-cap-", "capacity"),
        lambda fitting: fitting == [],
        "every pending pod that fits bound after the deletions",
        60.0,
    )
    after = await listed(api, "pods", SELECTOR)
    newly = {u for u in bound_on(after) if u in was_pending}
    assert newly, "no pending pod was bound after the deletions"
    assert over_allocatable(await listed(api, "nodes", SELECTOR), after) == {}
    print(
        f"capacity: {len(bound)} bound, {len(pending)} explained in {elapsed:.1f} s; "
        f"{len(newly)} bound after deletions"
    )


# ------------------------------------------------------------------------------------------ bad input


def with_volume(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return obj


@pytest.mark.parametrize(
    ("case", "build", "culprit"),
    [
        pytest.param(
            "quantity",
            lambda name: pod(TEST, name, requests={"cpu": "100m", "memory": "16Ei"}),
            "spec.containers[0].resources.requests.memory",
            id="A pod whose memory eyrie cannot represent gets a dead letter and a Warning naming it.",
        ),
        pytest.param(
            "volume",
            lambda name: with_volume(pod(TEST, name)),
            "spec.volumes[0].persistentVolumeClaim",
            id="A pod with a volume eyrie cannot honour gets a dead letter and a Warning naming it.",
        ),
        pytest.param(
            "stranger",
            lambda name: pod(TEST, name, scheduler="someone-else"),
            None,
            id="A pod for another scheduler is left alone: pending, no event, nothing on the topics.",
        ),
    ],
)
async def test_bad_input_from_the_cluster_is_reported_where_it_belongs_and_the_bridge_goes_on(
    stack: Stack, api: KubeApi, case: str, build: Callable[[str], dict[str, Any]], culprit: str | None
) -> None:
    where = {POOL: "input"}
    bad = build(f"in-{case}-bad")
    bad["spec"]["nodeSelector"] = where
    bad = await create(api, labelled([bad], **pool("input"))[0])
    good = pod(TEST, f"in-{case}-good")
    good["spec"]["nodeSelector"] = where
    good = await create(api, labelled([good], **pool("input"))[0])
    bad_uid = bad["metadata"]["uid"]

    (bound,) = await until(
        lambda: pods_named(api, good["metadata"]["name"]),
        lambda pods: bool(pods and pods[0]["spec"].get("nodeName")),
        "the good pod after the bad one bound",
        60.0,
    )
    assert bound["spec"]["nodeName"] in {
        n["metadata"]["name"] for n in nodes_of(await listed(api, "nodes", SELECTOR), "input")
    }
    if culprit is None:
        await asyncio.sleep(2.0)  # time for anything that should not come
        (pending,) = await pods_named(api, bad["metadata"]["name"])
        assert not pending["spec"].get("nodeName") and scheduled_false(pending) is None
        assert await events_about(api, bad_uid) == []
        topics = await read(stack.settings)
        assert bad_uid not in topics.requests and bad_uid not in topics.results
        assert [letter for letter in topics.letters if letter.key == bad_uid] == []
        return
    topics = await until(
        lambda: read(stack.settings),
        lambda t: any(letter.key == bad_uid for letter in t.letters),
        "the dead letter",
        30.0,
    )
    letters = [letter for letter in topics.letters if letter.key == bad_uid]
    assert all(culprit in letter.error for letter in letters), letters
    warnings = await until(lambda: events_about(api, bad_uid), bool, "the Warning event", 30.0)
    assert [(kind, reason) for kind, reason, _ in warnings] == [("Warning", "FailedScheduling")]
    assert culprit in warnings[0][2]
    # Nothing for placement: no request, so no verdict and no binding.
    assert bad_uid not in topics.requests and bad_uid not in topics.results


# ------------------------------------------------------------------------------------------ faults


async def test_a_killed_bridge_a_killed_applier_and_an_api_server_away_lose_no_pod_and_bind_none_twice(
    stack: Stack, api: KubeApi
) -> None:
    labels, where = pool("faults"), {POOL: "faults"}
    waves = [
        pod_manifests(count, seed=50 + index, prefix=f"{RUN}-flt-{index}", labels=labels, node_selector=where)
        for index, count in enumerate((60, 40, 60, 40))
    ]
    # With the third wave, pods no node can take: their explanations are being written when the applier is
    # killed, which must not lose any of them.
    nowhere = {**where, "eyrie.test/disk": "none"}
    waves[2] += pod_manifests(200, seed=60, prefix=f"{RUN}-flt-2x", labels=labels, node_selector=nowhere)
    prefix = f"{RUN}-flt-"

    async def bound_count() -> int:
        return len(bound_on(await pods_named(api, prefix)))

    started = time.monotonic()
    # The bridge, killed once pods are being bound; pods come while it is down; it starts again.
    await create_all(api, waves[0])
    await until(bound_count, lambda n: n >= 20, "20 pods bound")
    stack.kill("bridge")
    await create_all(api, waves[1])
    await asyncio.to_thread(stack.start, "bridge")

    # The applier, killed while it answers a wave.
    await create_all(api, waves[2])
    await until(
        lambda: pods_named(api, f"{RUN}-flt-2x-"),
        lambda pods: len(pods) - len(unsettled(pods)) >= 100,
        "the third wave being explained",
    )
    stack.kill("applier")
    await asyncio.sleep(1.0)
    await asyncio.to_thread(stack.start, "applier")

    # The API server (and its etcd), stopped for 10 s while the last wave is on its way.
    await create_all(api, waves[3])
    await asyncio.to_thread(stack.plane.down)
    await asyncio.sleep(10.0)
    await asyncio.to_thread(stack.plane.up)

    total = sum(len(wave) for wave in waves)
    final = await settled(api, prefix, total, timeout=180.0)
    elapsed = time.monotonic() - started
    topics = await read(stack.settings)
    where_now = bound_on(final)

    lost = unsettled(final)
    assert lost == [], f"{len(lost)} pods neither bound nor explained: {lost[:5]}"
    # Bound twice: an applied result, or a report of the pod on a node, that is not where the pod is.
    twice = {
        uid: sorted(
            {str(r.node) for r in topics.results[uid] if r.status == "applied"} - {where_now.get(uid)}
        )
        for uid in {p["metadata"]["uid"] for p in final}
        if any(r.status == "applied" and r.node != where_now.get(uid) for r in topics.results[uid])
    }
    assert twice == {}, twice
    moved = {
        uid: sorted({r.node for r in records if isinstance(r, PodBound)})
        for uid, records in topics.requests.items()
        if uid in where_now and {r.node for r in records if isinstance(r, PodBound)} - {where_now[uid]}
    }
    assert moved == {}, moved
    assert over_allocatable(await listed(api, "nodes", SELECTOR), await listed(api, "pods", SELECTOR)) == {}
    assert await no_pending_pod_fits(api, prefix, "faults") == []
    print(f"faults: {len(where_now)} bound, {total - len(where_now)} explained, {elapsed:.1f} s")


# ------------------------------------------------------------------------------------------ the demo


def test_the_kube_demo_binds_or_explains_every_pod_it_creates_and_leaves_nothing_behind(
    stack: Stack, tmp_path: Path
) -> None:
    done = run_module(
        "streams.demo.kube",
        "--nodes",
        "6",
        "--pods",
        "40",
        "--out",
        str(tmp_path / "out"),
        env=stack.env,
        timeout=240.0,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "kubectl get pods -o wide: pods bound per node" in done.stdout
    assert "Placement outcomes" in done.stdout and "Utilisation at the end" in done.stdout
    summary = orjson.loads(done.stdout.strip().splitlines()[-1])
    cluster = summary["cluster"]
    assert cluster["pods"] == 40 and cluster["unsettled"] == 0
    assert cluster["bound"] + cluster["pending"] == 40 and cluster["explained"] == cluster["pending"]
    assert summary["placed"] == cluster["bound"]
    # A cluster the demo did not start keeps none of its objects.
    binary = kubectl_binary()
    left = kubectl(binary, stack.kubeconfig, "get", "pods,nodes", "-l", "eyrie.io/demo", "-o", "name")
    assert left.strip() == ""


@pytest.mark.parametrize(
    ("args", "error"),
    [
        pytest.param(["--pods", "0"], "error: --pods: must be positive, got 0", id="No pods is refused."),
        pytest.param(
            ["--nodes", "-3"], "error: --nodes: must be positive, got -3", id="Negative nodes are refused."
        ),
        pytest.param(
            ["--seed", "x"],
            "error: argument --seed: invalid int value: 'x'",
            id="A seed that is not a number is refused.",
        ),
    ],
)
def test_bad_arguments_stop_the_kube_demo_with_one_line_and_status_2(
    args: list[str], error: str, tmp_path: Path
) -> None:
    done = run_module("streams.demo.kube", *args, "--out", str(tmp_path / "out"), timeout=60.0)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(error), done.stderr
