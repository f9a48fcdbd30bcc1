"""`eyrie kube bridge` as a process, against the session's API server and broker: what reaches the topics as
the cluster changes, what a restarted bridge publishes, the lines it logs; and the manifests of
deploy/kubernetes/: accepted by the API server, and their ClusterRole exactly what the bridge and the binder
need."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import pytest
import yaml
from typer.testing import CliRunner

from schemas.events import DeadLetter
from schemas.node import NodeEvent
from schemas.pod import PodBound, PodDeleted, PodRequest
from streams.cli.kube import kube_app
from streams.client import EyrieClient
from streams.demo.processes import start_role, stop_all
from streams.kube import binder
from streams.kube import bridge as kube_bridge
from streams.kube.api import KubeApi, KubeConfig, missing_permissions
from streams.local.controlplane import kube_cache_dir
from streams.local.services import free_ports
from streams.runtime.topics import ensure_topics
from streams.settings import Settings, load_settings
from tests.kube.objects import RUN, Proxy, create, delete, get, node, patch, pod, selector

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
SLOW_WAIT_S = 60.0  # a process start imports the Kafka client and reads the topics first


# ------------------------------------------------------------------------------------------ helpers


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=5) as client:
        yield client


@pytest.fixture
def topics(kafka_bootstrap: str, kube_config: str) -> tuple[Settings, dict[str, str]]:
    """Settings with topics of this test's own, and the environment a bridge process gets for them."""
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "2",
        "KUBECONFIG": kube_config,
    }
    return load_settings(env=env), env


class BridgeProcess:
    """`eyrie kube bridge ARGS` in this interpreter; stdout and stderr in one log file."""

    def __init__(self, env: dict[str, str], log: Path, *args: str) -> None:
        self.log = log
        with log.open("ab") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streams.cli", "kube", "bridge", *args],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def text(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace")

    async def logged(self, needle: str, timeout: float = SLOW_WAIT_S, *, after: int = 0) -> str:
        """The first line from character `after` on that contains `needle`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            text = self.text()[after:]
            for line in text.splitlines():
                if needle in line:
                    return line
            if self.process.poll() is not None:
                raise AssertionError(f"bridge exited {self.process.returncode} before {needle!r}:\n{text}")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"no {needle!r} within {timeout} s:\n{text}")
            await asyncio.sleep(0.1)

    async def exited(self, timeout: float = SLOW_WAIT_S) -> int:
        deadline = asyncio.get_running_loop().time() + timeout
        while self.process.poll() is None:
            if asyncio.get_running_loop().time() > deadline:
                self.process.kill()
                raise AssertionError(f"bridge still running after {timeout} s:\n{self.text()}")
            await asyncio.sleep(0.1)
        return self.process.returncode

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


@dataclass
class Topics:
    """Everything on node-events, pod-requests and dead-letters, in per-key order."""

    nodes: list[NodeEvent] = field(default_factory=list)
    pods: list[PodRequest | PodDeleted | PodBound] = field(default_factory=list)
    letters: list[DeadLetter] = field(default_factory=list)

    def of(self, uid: str) -> list[str]:
        """The kinds of record published for a pod, in order."""
        return [type(record).__name__ for record in self.pods if record.uid == uid]

    def node(self, name: str) -> list[NodeEvent]:
        return [event for event in self.nodes if event.node.name == name]

    def letters_for(self, uid: str) -> list[DeadLetter]:
        return [letter for letter in self.letters if letter.key == uid]


async def read(settings: Settings) -> Topics:
    found = Topics()
    async with EyrieClient(settings, create_topics=False) as client:
        async for _, decoded in client.records(["node-events", "pod-requests", "dead-letters"]):
            value = decoded.value
            assert decoded.dead_letter is None, decoded.dead_letter
            if isinstance(value, NodeEvent):
                found.nodes.append(value)
            elif isinstance(value, DeadLetter):
                found.letters.append(value)
            else:
                found.pods.append(value)
    return found


async def eventually(settings: Settings, condition: Callable[[Topics], bool], what: str) -> Topics:
    deadline = asyncio.get_running_loop().time() + SLOW_WAIT_S
    while True:
        found = await read(settings)
        if condition(found):
            return found
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"{what} not on the topics within {SLOW_WAIT_S} s: {found}")
        await asyncio.sleep(0.3)


def uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def with_volume(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]
    obj["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return obj


async def health(port: int) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/health") as page:
        body: dict[str, Any] = await page.json()
        assert page.status == 200, body
        return body


async def warnings_about(api: KubeApi, pod_uid: str) -> list[tuple[str, str, str]]:
    """(type, reason, message) of the events about a pod, as `kubectl describe pod` shows them."""
    found = await get(api, f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid={pod_uid}")
    return [(e["type"], e["reason"], e["message"]) for e in found["items"]]


# --------------------------------------------------------------------------------- the whole life


@pytest.mark.kube
@pytest.mark.kafka
async def test_a_bridge_process_feeds_the_topics_and_a_restarted_one_publishes_only_what_changed(
    api: KubeApi, topics: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    settings, env = topics
    test = "cli-life"
    await ensure_topics(settings)
    nodes = [
        await create(api, node(test, "cli-a")),
        await create(api, node(test, "cli-b")),
        await create(api, node(test, "cli-cordoned", unschedulable=True)),
    ]
    a, b, cordoned = (name(n) for n in nodes)
    args = ("--label-selector", selector(test), "--cluster", "edge")
    created: list[dict[str, Any]] = list(nodes)
    first = BridgeProcess(env, tmp_path / "first.log", *args)
    try:
        ready = await first.logged("ready: bridge")
        assert "remembered 0 nodes and 0 pods" in ready and "eyrie (profile default)" in ready, ready
        mine = await create(api, pod(test, "cli-mine"))
        theirs = await create(api, pod(test, "cli-theirs", scheduler="default-scheduler", node_name=a))
        huge = await create(api, pod(test, "cli-huge", requests={"memory": "16Ei"}))
        stored = await create(api, with_volume(pod(test, "cli-volume")))
        created += [mine, theirs, huge, stored]

        found = await eventually(
            settings,
            lambda t: bool(t.of(uid(mine)) and t.of(uid(theirs)) and len({x.key for x in t.letters}) >= 2),
            "the pods' records",
        )
        assert {
            n: [(e.type, e.node.cluster, e.node.unschedulable) for e in found.node(n)] for n in (a, b)
        } == {
            a: [("upsert", "edge", False)],
            b: [("upsert", "edge", False)],
        }
        assert [(e.type, e.node.unschedulable) for e in found.node(cordoned)] == [("upsert", True)]
        request = next(r for r in found.pods if r.uid == uid(mine))
        # The pod names the eyrie scheduler; the default profile places it, on the bridge's cluster only.
        assert isinstance(request, PodRequest) and request.scheduler_name == "default"
        assert request.labels["eyrie.io/cluster"] == "edge"
        assert request.node_selector == {"eyrie.io/cluster": "edge"}
        bound = next(r for r in found.pods if r.uid == uid(theirs))
        assert isinstance(bound, PodBound) and bound.node == a and bound.pod.name == name(theirs)
        assert bound.pod.labels["eyrie.io/cluster"] == "edge"  # counted in the shard of its node's cluster
        fields = {
            uid(huge): "spec.containers[0].resources.requests.memory",
            uid(stored): "spec.volumes[0].persistentVolumeClaim",
        }
        for bad, culprit in fields.items():
            letters = found.letters_for(bad)
            assert letters and all(culprit in letter.error for letter in letters), found.letters
            assert letters[0].topic == settings.topic("pod-requests")
            assert found.of(bad) == []  # nothing for placement
            warnings = await warnings_about(api, bad)
            assert [(kind, reason) for kind, reason, _ in warnings] == [("Warning", "FailedScheduling")]
            assert culprit in warnings[0][2]
            rejected = await first.logged(f"(uid {bad})")
            assert "WARNING eyrie.bridge: rejected: Pod default/" in rejected and culprit in rejected

        await delete(api, mine)
        await eventually(settings, lambda t: t.of(uid(mine)) == ["PodRequest", "PodDeleted"], "the deletion")

        # Down hard: nothing flushed on the way out. Meanwhile a bound pod goes, a node and a pod come,
        # and a pod eyrie never held goes too.
        first.kill()
        await delete(api, theirs)
        await delete(api, stored)
        late_node = await create(api, node(test, "cli-late"))
        late = await create(api, pod(test, "cli-late"))
        created += [late_node, late]
        second = BridgeProcess(env, tmp_path / "second.log", *args)
        try:
            ready = await second.logged("ready: bridge")
            assert "remembered 3 nodes and 1 pods" in ready, ready
            await eventually(
                settings,
                lambda t: bool(
                    t.node(name(late_node)) and t.of(uid(late)) and "PodDeleted" in t.of(uid(theirs))
                ),
                "what changed while the bridge was down",
            )
            await asyncio.sleep(1.0)  # time for anything that should not come
            second.process.send_signal(signal.SIGTERM)
            assert await second.exited() == 0
        finally:
            second.kill()
        stopped = [line for line in second.text().splitlines() if "stopped: bridge" in line]
        assert len(stopped) == 1 and "(SIGTERM)" in stopped[0] and "exit status 0" in stopped[0], stopped
    finally:
        first.kill()
        for obj in created:
            await delete(api, obj)

    found = await read(settings)
    # Nothing was published twice: one record per state of each pod and node, the restart included.
    assert {pod_uid: found.of(pod_uid) for pod_uid in {r.uid for r in found.pods}} == {
        uid(mine): ["PodRequest", "PodDeleted"],
        uid(theirs): ["PodBound", "PodDeleted"],
        uid(late): ["PodRequest"],
    }
    assert Counter(event.node.name for event in found.nodes) == {a: 1, b: 1, cordoned: 1, name(late_node): 1}


@pytest.mark.kube
@pytest.mark.kafka
async def test_a_pod_for_eyrie_is_placed_bound_and_reported_back_through_a_whole_pipeline(
    api: KubeApi, topics: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    settings, env = topics
    env = {**env, "EYRIE_DATA_DIR": str(tmp_path / "faust")}
    test = "cli-pipeline"
    await ensure_topics(settings)
    created = [await create(api, node(test, "cli-pipeline-n"))]
    # No kubelet runs, so the API server marks every new node not-ready; a real node loses the taint.
    await patch(api, f"/api/v1/nodes/{name(created[0])}", {"spec": {"taints": None}})
    roles = [
        start_role("worker", env, tmp_path),
        start_role("applier", env, tmp_path, args=["--target", "kubernetes"]),
    ]
    process = BridgeProcess(env, tmp_path / "bridge.log", "-l", selector(test))
    try:
        await process.logged("ready: bridge")
        mine = await create(api, pod(test, "cli-pipeline-p"))
        created.append(mine)
        found = await eventually(
            settings, lambda t: t.of(uid(mine)) == ["PodRequest", "PodBound"], "the binding"
        )
        bound = next(r for r in found.pods if isinstance(r, PodBound))
        fetched = await get(api, f"/api/v1/namespaces/default/pods/{name(mine)}")
        assert bound.node == fetched["spec"]["nodeName"] == name(created[0])
    finally:
        process.kill()
        stop_all(roles)
        for obj in created:
            await delete(api, obj)


@pytest.mark.kube
@pytest.mark.kafka
async def test_the_bridge_says_when_the_api_server_is_lost_and_back_and_catches_up(
    api: KubeApi, kube_config: str, topics: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    settings, env = topics
    test = "cli-lost"
    await ensure_topics(settings)
    server = urlsplit(api.config.server)
    proxy = Proxy(server.hostname or "127.0.0.1", server.port or 443)
    await proxy.start()
    relayed = tmp_path / "kubeconfig"
    config = yaml.safe_load(Path(kube_config).read_text(encoding="utf-8"))
    for entry in config["clusters"]:
        entry["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
    relayed.write_text(yaml.safe_dump(config), encoding="utf-8")
    created = [await create(api, node(test, "cli-lost-n"))]
    port = free_ports(1)[0]
    process = BridgeProcess(
        env,
        tmp_path / "bridge.log",
        "--kubeconfig",
        str(relayed),
        "-l",
        selector(test),
        "--web-port",
        str(port),
    )
    try:
        await process.logged("ready: bridge")
        assert (await health(port))["status"] == "ok"
        proxy.refusing = True
        proxy.cut()
        lost = await process.logged("API server lost")
        assert f"127.0.0.1:{proxy.port}" in lost, lost
        # Still serving, but not well: a restart would not bring the API server back.
        assert (await health(port))["status"] == "degraded"
        meanwhile = await create(api, pod(test, "cli-lost-p"))
        created.append(meanwhile)
        proxy.refusing = False
        back = await process.logged("API server back")
        assert "answers again after" in back, back
        await eventually(settings, lambda t: t.of(uid(meanwhile)) == ["PodRequest"], "the pod made meanwhile")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{port}/metrics") as page,
        ):
            metrics = await page.text()
        assert 'eyrie_bridge_records_total{kind="PodRequest"} 1.0' in metrics, metrics
        assert "eyrie_bridge_api_server_up 1.0" in metrics, metrics
        process.process.send_signal(signal.SIGINT)
        assert await process.exited() == 0
        assert "stopped: bridge (SIGINT)" in process.text()
    finally:
        process.kill()
        await proxy.close()
        for obj in created:
            await delete(api, obj)


# ---------------------------------------------------------------------------------------- options


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["--profile-for", "other=binpack"],
            "--profile-for: 'other' is not a --scheduler-name (these are: eyrie)",
            id="A profile for a scheduler name the bridge does not place is refused.",
        ),
        pytest.param(
            ["--profile-for", "eyrie"],
            "--profile-for: expected SCHEDULER=PROFILE, got 'eyrie'",
            id="A profile mapping without its profile is refused.",
        ),
        pytest.param(
            ["--cluster", " "],
            "--cluster: ' ' is not a name",
            id="An empty cluster name is refused.",
        ),
        pytest.param(
            ["--web-host", "0.0.0.0"],
            "--web-host: only with --web-port",
            id="A web host without a web port is refused.",
        ),
    ],
)
def test_bad_options_are_one_line_errors(args: list[str], message: str) -> None:
    result = CliRunner().invoke(kube_app, ["bridge", *args])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.output


# -------------------------------------------------------------------------------------- manifests


def documents() -> Iterator[dict[str, Any]]:
    for path in sorted(MANIFESTS.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if document:
                yield document


def cluster_role() -> dict[str, Any]:
    return next(d for d in documents() if d["kind"] == "ClusterRole")


def permissions(role: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    """(verb, group, resource, subresource) for every combination the rules grant."""
    granted = set()
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                base, _, sub = resource.partition("/")
                granted |= {(verb, group, base, sub) for verb in rule["verbs"]}
    return granted


def test_the_cluster_role_grants_exactly_what_the_bridge_and_the_binder_ask_for() -> None:
    needed = set(kube_bridge.PERMISSIONS) | set(binder.PERMISSIONS)
    assert permissions(cluster_role()) == needed


@pytest.mark.kube
async def test_the_manifests_pass_the_api_servers_dry_run(api: KubeApi, kube_config: str) -> None:
    # The namespaced objects need their namespace to exist, even in a dry run.
    status, _ = await api.request("GET", "/api/v1/namespaces/eyrie")
    made = status == 404
    if made:
        await api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": "eyrie"}})
    kubectl = kube_cache_dir() / "bin" / "kubectl"
    result = await asyncio.to_thread(
        subprocess.run,
        [str(kubectl), "--kubeconfig", kube_config, "apply", "--dry-run=server", "-f", str(MANIFESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # kubectl names each object kind.group/name: "deployment.apps/eyrie-bridge created (server dry run)".
    applied = {line.split()[0] for line in result.stdout.splitlines()}
    groups = {"Deployment": ".apps", "ClusterRole": ".rbac.authorization.k8s.io"}
    groups["ClusterRoleBinding"] = groups["ClusterRole"]
    expected = {
        f"{d['kind'].lower()}{groups.get(d['kind'], '')}/{d['metadata']['name']}" for d in documents()
    }
    assert applied == expected, result.stdout
    assert "server dry run" in result.stdout
    deployments = {d["metadata"]["name"]: d for d in documents() if d["kind"] == "Deployment"}
    args = {
        name: d["spec"]["template"]["spec"]["containers"][0]["args"][:3] for name, d in deployments.items()
    }
    assert args == {
        "eyrie-worker": ["worker", "--web-port", "6066"],
        "eyrie-applier": ["applier", "--target", "kubernetes"],
        "eyrie-bridge": ["kube", "bridge", "--cluster"],
    }


# ------------------------------------------------------------------------------------------- RBAC


@dataclass
class Account:
    """A service account in `default` bound to a copy of the manifest's ClusterRole (minus `without`), and
    a kubeconfig holding a token of it."""

    name: str
    kubeconfig: Path


async def bound_account(
    api: KubeApi, kube_config: str, tmp_path: Path, label: str, without: tuple[str, str] | None = None
) -> Account:
    account = f"{RUN}-{label}"
    role = cluster_role()
    rules = []
    for rule in role["rules"]:
        verbs = [v for v in rule["verbs"] if without is None or (v, rule["resources"][0]) != without]
        if verbs:
            rules.append({**rule, "verbs": verbs})
    for where, body in (
        ("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": account}}),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterroles",
            {"metadata": {"name": account}, "rules": rules},
        ),
        (
            "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
            {
                "metadata": {"name": account},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": account},
                "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": "default"}],
            },
        ),
    ):
        status, reply = await api.request("POST", where, body=body)
        assert status == 201, reply
    status, reply = await api.request(
        "POST",
        f"/api/v1/namespaces/default/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    )
    assert status == 201, reply
    token = orjson.loads(reply)["status"]["token"]
    config = yaml.safe_load(Path(kube_config).read_text(encoding="utf-8"))
    config["users"] = [{"name": "sa", "user": {"token": token}}]
    for context in config["contexts"]:
        context["context"]["user"] = "sa"
    path = tmp_path / f"{label}.kubeconfig"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return Account(account, path)


async def remove_account(api: KubeApi, account: Account) -> None:
    for path in (
        f"/api/v1/namespaces/default/serviceaccounts/{account.name}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{account.name}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{account.name}",
    ):
        await api.request("DELETE", path)


@pytest.mark.kube
@pytest.mark.kafka
async def test_a_token_of_the_cluster_role_runs_the_bridge_and_the_binder_and_nothing_else(
    api: KubeApi, kube_config: str, topics: tuple[Settings, dict[str, str]], tmp_path: Path
) -> None:
    settings, env = topics
    test = "cli-rbac"
    await ensure_topics(settings)
    account = await bound_account(api, kube_config, tmp_path, "rbac")
    created = [await create(api, node(test, "cli-rbac-n"))]
    process = BridgeProcess(
        env, tmp_path / "bridge.log", "--kubeconfig", str(account.kubeconfig), "-l", selector(test)
    )
    try:
        await process.logged("ready: bridge")
        mine = await create(api, pod(test, "cli-rbac-p"))
        bad = await create(api, with_volume(pod(test, "cli-rbac-bad")))
        created += [mine, bad]
        await eventually(
            settings,
            lambda t: t.of(uid(mine)) == ["PodRequest"] and bool(t.letters_for(uid(bad))),
            "the pods",
        )
        assert [w[:2] for w in await warnings_about(api, uid(bad))] == [("Warning", "FailedScheduling")]
        assert "cannot write the FailedScheduling event" not in process.text()
        process.process.send_signal(signal.SIGTERM)
        assert await process.exited() == 0

        # The binder's calls, with the same token.
        async with KubeApi(KubeConfig.from_kubeconfig(account.kubeconfig)) as scoped:
            assert await binder.check_access(scoped) == []
            assert await missing_permissions(scoped, kube_bridge.PERMISSIONS) == []
            outcome = await scoped.bind("default", name(mine), uid(mine), name(created[0]))
            assert outcome.status == "bound"
            assert await scoped.set_pod_condition("default", name(mine), uid=uid(mine), message="test")
            fetched, _ = await scoped.request("GET", f"/api/v1/namespaces/default/pods/{name(mine)}")
            assert fetched == 200
            # Anything else is refused, and says what was refused.
            for method, path, verb in (
                ("DELETE", f"/api/v1/namespaces/default/pods/{name(mine)}", 'cannot delete resource "pods"'),
                ("GET", f"/api/v1/nodes/{name(created[0])}", 'cannot get resource "nodes"'),
                ("GET", "/api/v1/namespaces/default/secrets", 'cannot list resource "secrets"'),
            ):
                status, body = await scoped.request(method, path)
                assert status == 403 and verb in orjson.loads(body)["message"], body
    finally:
        process.kill()
        for obj in created:
            await delete(api, obj)
        await remove_account(api, account)


@pytest.mark.kube
@pytest.mark.kafka
@pytest.mark.parametrize(
    ("without", "message"),
    [
        pytest.param(
            ("watch", "pods"), "may not watch pods", id="Without watch on pods the bridge refuses to start."
        ),
        pytest.param(
            ("create", "events"),
            "may not create events (events.k8s.io)",
            id="Without creating events the bridge refuses to start.",
        ),
    ],
)
async def test_a_role_that_lacks_a_verb_stops_the_bridge_with_one_clear_line(
    api: KubeApi,
    kube_config: str,
    topics: tuple[Settings, dict[str, str]],
    tmp_path: Path,
    without: tuple[str, str],
    message: str,
) -> None:
    _, env = topics
    account = await bound_account(api, kube_config, tmp_path, f"lacks-{without[0]}-{without[1]}", without)
    process = BridgeProcess(env, tmp_path / "bridge.log", "--kubeconfig", str(account.kubeconfig))
    try:
        assert await process.exited() == 2
    finally:
        process.kill()
        await remove_account(api, account)
    errors = [line for line in process.text().splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and message in errors[0] and "01-rbac.yaml" in errors[0], process.text()
    assert "stopped: bridge (error: " in process.text()
