"""The Kubernetes binder against a real API server: bindings and what each refusal means, retries through
a network fault without a second binding, kube-scheduler's events and PodScheduled condition, and a real
`eyrie applier --target kubernetes` process between the session's broker and API server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import time
import urllib.parse
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from schemas.events import Binding, BindingResult
from schemas.exceptions import ControlPlaneError
from schemas.node import NodeEvent, NodeSpec
from streams.client import EyrieClient
from streams.core.ledger import Ledger
from streams.demo.processes import start_role, stop_all
from streams.kube.api import Backoff, KubeApi
from streams.kube.binder import Binder, check_access, failed_scheduling_message, resolve_kube_config
from streams.settings import load_settings
from tests.commands import run_module
from tests.kube.objects import RUN, WAIT_S, Proxy, create, delete, get, pod, until

pytestmark = pytest.mark.kube

NODE_A, NODE_B = f"{RUN}-bind-node-a", f"{RUN}-bind-node-b"
REQUESTS = {"cpu": "100m", "memory": "32Mi"}
BOOKED = {"pods": 1, "cpu": 100, "memory": 32 * 1024**2}
"""What one pod of `REQUESTS` holds of a node in the ledger (base units: millicores, bytes)."""


@pytest.fixture
async def api(kube_config: str) -> AsyncIterator[KubeApi]:
    async with KubeApi.from_kubeconfig(kube_config, seed=7) as client:
        yield client


@contextlib.asynccontextmanager
async def running(binder: Binder) -> AsyncIterator[Binder]:
    """The binder with its background writer of events and conditions."""
    task = asyncio.create_task(binder.run())
    try:
        yield binder
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def a_pod(api: KubeApi, name: str) -> AsyncIterator[dict[str, Any]]:
    created = await create(api, pod("binder", name))
    try:
        yield created
    finally:
        await delete(api, created)


def binding_for(obj: dict[str, Any], node: str, attempt: int = 0) -> Binding:
    metadata = obj["metadata"]
    return Binding(
        uid=metadata["uid"],
        namespace=metadata["namespace"],
        name=metadata["name"],
        node=node,
        requests=REQUESTS,
        attempt=attempt,
    )


async def events_about(api: KubeApi, uid: str) -> list[tuple[str, str, str]]:
    """(reason, type, message) of the core/v1 events about the pod: what `kubectl describe pod` shows."""
    found = await get(api, f"/api/v1/namespaces/default/events?fieldSelector=involvedObject.uid={uid}")
    return sorted((e["reason"], e["type"], e["message"]) for e in found["items"])


async def node_of(api: KubeApi, name: str) -> str | None:
    fetched = await get(api, f"/api/v1/namespaces/default/pods/{name}")
    node: str | None = fetched["spec"].get("nodeName")
    return node


def ledger_with_nodes() -> Ledger:
    ledger = Ledger({}, {})
    for name in (NODE_A, NODE_B):
        ledger.upsert_node(NodeSpec(name=name, capacity={"cpu": "4", "memory": "8Gi", "pods": "110"}))
    return ledger


# ------------------------------------------------------------------------------------------ binding


async def test_a_bind_sets_the_node_and_the_pod_gets_a_scheduled_event(api):
    async with a_pod(api, "placed") as created, running(Binder(api)) as binder:
        answer = await binder.bind(binding_for(created, NODE_A))
        assert (answer.status, answer.release) == ("applied", "none"), answer
        assert await node_of(api, created["metadata"]["name"]) == NODE_A
        await asyncio.wait_for(binder.drained(), WAIT_S)
        assert await events_about(api, created["metadata"]["uid"]) == [
            (
                "Scheduled",
                "Normal",
                f"Successfully assigned default/{created['metadata']['name']} to {NODE_A}",
            )
        ]
        assert binder.counters["bound"] == 1 and binder.counters["scheduled_events"] == 1, binder.counters


async def test_a_pod_bound_elsewhere_is_a_conflict_with_the_servers_reason_and_the_same_node_is_applied(api):
    async with a_pod(api, "twice") as created:
        binder = Binder(api)
        assert (await binder.bind(binding_for(created, NODE_A))).status == "applied"
        elsewhere = await binder.bind(binding_for(created, NODE_B, attempt=1))
        assert (elsewhere.status, elsewhere.release) == ("conflict", "released"), elsewhere
        assert elsewhere.reasons[0].startswith("Conflict: ") and "already assigned" in elsewhere.reasons[0]
        # A crash between the POST and the ledger's commit: the applier sends the same binding again.
        again = await binder.bind(binding_for(created, NODE_A))
        assert (again.status, again.release) == ("applied", "none"), again
        assert await node_of(api, created["metadata"]["name"]) == NODE_A
        assert (binder.counters["bound"], binder.counters["replayed"], binder.counters["conflicts"]) == (
            1,
            1,
            1,
        )


async def test_a_deleted_pod_and_a_pod_recreated_under_its_name_are_rejected_and_forgotten(api):
    first = await create(api, pod("binder", "gone"))
    await delete(api, first)
    binder = Binder(api)
    gone = await binder.bind(binding_for(first, NODE_A))
    assert (gone.status, gone.release) == ("rejected", "deleted") and "NotFound" in gone.reasons[0], gone
    async with a_pod(api, "gone") as second:
        replaced = await binder.bind(binding_for(first, NODE_A))
        assert (replaced.status, replaced.release) == ("rejected", "deleted"), replaced
        assert "Precondition failed: UID" in replaced.reasons[0], replaced
        assert await node_of(api, second["metadata"]["name"]) is None


async def test_a_binding_that_names_no_pod_is_rejected_without_asking_the_server(api):
    answer = await Binder(api).bind(Binding(uid="u-nameless", node=NODE_A))
    assert (answer.status, answer.release) == ("rejected", "released"), answer
    assert "names no pod" in answer.reasons[0]


async def test_the_ledger_keeps_an_applied_booking_frees_a_conflict_and_forgets_a_gone_pod(api):
    ledger = ledger_with_nodes()
    binder = Binder(api)
    async with a_pod(api, "ledger-a") as placed, a_pod(api, "ledger-b") as taken:
        placed_binding = binding_for(placed, NODE_A)
        result = await binder.answer(placed_binding, ledger.apply(placed_binding, time.time()), ledger)
        assert result.status == "applied"
        assert (await binder.bind(binding_for(taken, NODE_B))).status == "applied"
        # `taken` is bound to node B behind the ledger's back; eyrie's binding for node A then conflicts.
        taken_binding = binding_for(taken, NODE_A)
        result = await binder.answer(taken_binding, ledger.apply(taken_binding, time.time()), ledger)
        assert result.status == "conflict" and "already assigned" in result.reasons[0], result
        assert ledger.allocated(NODE_A) == BOOKED, "only the applied pod holds node A"
    gone = await create(api, pod("binder", "ledger-gone"))
    await delete(api, gone)
    gone_binding = binding_for(gone, NODE_A)
    result = await binder.answer(gone_binding, ledger.apply(gone_binding, time.time()), ledger)
    assert result.status == "rejected", result
    assert ledger.allocated(NODE_A) == BOOKED
    # Forgotten as deleted: the same binding redelivered is refused by the ledger itself now.
    assert ledger.apply(binding_for(gone, NODE_A, attempt=1), time.time()).status == "rejected"


async def test_an_api_server_that_refuses_connections_is_retried_and_the_pod_bound_exactly_once(api):
    server = urllib.parse.urlsplit(api.config.server)
    proxy = Proxy(server.hostname or "127.0.0.1", server.port or 443)
    await proxy.start()
    behind = dataclasses.replace(api.config, server=f"https://127.0.0.1:{proxy.port}")
    try:
        async with (
            a_pod(api, "refused") as created,
            KubeApi(behind) as relayed,
            running(Binder(relayed, backoff=Backoff(initial=0.05, cap=0.2, seed=3))) as binder,
        ):
            proxy.refusing = True
            binding = asyncio.create_task(binder.bind(binding_for(created, NODE_A)))
            await until(lambda: binder.counters["retries"] >= 3, what="three refused attempts")
            assert not binding.done() and await node_of(api, created["metadata"]["name"]) is None
            proxy.refusing = False
            answer = await asyncio.wait_for(binding, WAIT_S)
            assert answer.status == "applied", answer
            await asyncio.wait_for(binder.drained(), WAIT_S)
            assert await node_of(api, created["metadata"]["name"]) == NODE_A
            assert binder.counters["bound"] == 1 and binder.counters["replayed"] == 0, binder.counters
            assert [e[0] for e in await events_about(api, created["metadata"]["uid"])] == ["Scheduled"]
    finally:
        await proxy.close()


# ------------------------------------------------------------------------------------ unschedulable


def verdict(obj: dict[str, Any], *reasons: str) -> BindingResult:
    metadata = obj["metadata"]
    return BindingResult(
        uid=metadata["uid"],
        namespace=metadata["namespace"],
        name=metadata["name"],
        status="unschedulable",
        reasons=list(reasons),
    )


async def pod_scheduled(api: KubeApi, name: str) -> tuple[str, str, str] | None:
    fetched = await get(api, f"/api/v1/namespaces/default/pods/{name}")
    for condition in fetched.get("status", {}).get("conditions") or []:
        if condition["type"] == "PodScheduled":
            return condition["status"], condition.get("reason", ""), condition.get("message", "")
    return None


async def test_an_unschedulable_pod_is_told_once_per_change_of_reasons(api):
    async with a_pod(api, "waiting") as created, running(Binder(api)) as binder:
        name, uid = created["metadata"]["name"], created["metadata"]["uid"]
        first = ("3 Insufficient cpu",)
        assert binder.unschedulable(verdict(created, *first))
        await asyncio.wait_for(binder.drained(), WAIT_S)
        told = failed_scheduling_message(first)
        assert await pod_scheduled(api, name) == ("False", "Unschedulable", told)
        assert await events_about(api, uid) == [("FailedScheduling", "Warning", told)]
        # The same reasons again (a retry), in this binder or in a fresh one (an applier restarted since).
        assert not binder.unschedulable(verdict(created, *first))
        restarted = Binder(api)
        async with running(restarted):
            assert restarted.unschedulable(verdict(created, *first))
            await asyncio.wait_for(restarted.drained(), WAIT_S)
        assert restarted.counters["notices_repeated"] == 1 and restarted.counters["failed_scheduling"] == 0
        assert await events_about(api, uid) == [("FailedScheduling", "Warning", told)]
        # New reasons: told again.
        second = ("1 node(s) had untolerated taint {dedicated: gpu}", "2 Insufficient cpu")
        assert binder.unschedulable(verdict(created, *second))
        await asyncio.wait_for(binder.drained(), WAIT_S)
        retold = failed_scheduling_message(second)
        assert await pod_scheduled(api, name) == ("False", "Unschedulable", retold)
        assert await events_about(api, uid) == sorted(
            [("FailedScheduling", "Warning", told), ("FailedScheduling", "Warning", retold)]
        )
        assert binder.counters["failed_scheduling"] == 2, binder.counters


async def test_a_late_verdict_for_a_bound_or_unknown_pod_writes_nothing(api):
    async with a_pod(api, "late") as created, running(Binder(api)) as binder:
        await binder.bind(binding_for(created, NODE_A))
        await asyncio.wait_for(binder.drained(), WAIT_S)
        assert binder.unschedulable(verdict(created, "1 Insufficient cpu"))
        stranger = {"metadata": {"uid": f"u-{uuid.uuid4()}", "namespace": "default", "name": f"{RUN}-nobody"}}
        assert binder.unschedulable(verdict(stranger, "1 Insufficient cpu"))
        await asyncio.wait_for(binder.drained(), WAIT_S)
        assert binder.counters["notices_skipped"] == 2 and binder.counters["failed_scheduling"] == 0
        assert [e[0] for e in await events_about(api, created["metadata"]["uid"])] == ["Scheduled"]
        # The binding itself set PodScheduled=True (the API server does): the late verdict left it so.
        assert (await pod_scheduled(api, created["metadata"]["name"]) or ("",))[0] == "True"


async def test_notices_beyond_the_rate_wait_and_beyond_the_cap_drop_the_oldest(api):
    binder = Binder(api, notices_per_s=1000.0, notice_burst=1, max_pending=2)
    pods = [
        {"metadata": {"uid": f"u-cap-{i}", "namespace": "default", "name": f"{RUN}-cap-{i}"}}
        for i in range(3)
    ]
    for obj in pods:
        binder.unschedulable(verdict(obj, "1 Insufficient cpu"))
    assert binder.pending == 2 and binder.counters["notices_dropped"] == 1
    async with running(binder):
        await asyncio.wait_for(binder.drained(), WAIT_S)
    assert binder.counters["notices_skipped"] == 2  # no such pods: nothing written about them


# ------------------------------------------------------------------------------------ configuration


async def test_the_test_clusters_account_has_every_permission_the_binder_needs(api):
    assert await check_access(api) == []


def test_the_kubeconfig_comes_from_the_setting_then_kubeconfig_then_the_service_account(
    kube_config, tmp_path, monkeypatch
):
    explicit, source = resolve_kube_config(kube_config, env={})
    assert source == f"kubeconfig {kube_config}" and explicit.server.startswith("https://")
    from_env, source = resolve_kube_config(None, env={"KUBECONFIG": kube_config})
    assert source == f"KUBECONFIG {kube_config}" and from_env == explicit
    with pytest.raises(ControlPlaneError, match="no kubeconfig: give --kubeconfig"):
        resolve_kube_config(None, env={}, root=tmp_path)
    (tmp_path / "token").write_text("t")
    (tmp_path / "ca.crt").write_text("ca")
    # With a token, the service account is what is used: outside a pod, in_cluster says why it cannot be.
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ControlPlaneError, match="not in a cluster"):
        resolve_kube_config(None, env={}, root=tmp_path)


def _unused_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        pytest.param(
            ["--target", "scheduler"],
            "--target: expected ledger or kubernetes",
            id="An unknown target is refused.",
        ),
        pytest.param(
            ["--kubeconfig", "kc.yaml"],
            "--kubeconfig: only with --target kubernetes",
            id="A kubeconfig without the kubernetes target is refused.",
        ),
        pytest.param(
            ["--target", "kubernetes", "--kubeconfig", "/nonexistent/kc.yaml"],
            "kubeconfig /nonexistent/kc.yaml: cannot read it",
            id="A kubeconfig that cannot be read is named.",
        ),
        pytest.param(
            ["--target", "kubernetes"],
            "no kubeconfig: give --kubeconfig",
            id="No kubeconfig at all is named.",
        ),
        pytest.param(
            ["--target", "kubernetes", "--kubeconfig", "UNREACHABLE"],
            "unusable",
            id="A kubeconfig whose API server does not answer is named.",
        ),
    ],
)
def test_the_applier_refuses_a_kubernetes_target_it_cannot_use_in_one_line(
    args, expected, tmp_path, kube_config
):
    unreachable = tmp_path / "unreachable.yaml"
    if "UNREACHABLE" in args:
        # The session's kubeconfig, its credentials and all, pointed at a port nothing listens on.
        document = yaml.safe_load(Path(kube_config).read_text())
        for cluster in document["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{_unused_port()}"
        unreachable.write_text(yaml.safe_dump(document))
        args = [str(unreachable) if arg == "UNREACHABLE" else arg for arg in args]
    env = {
        key: value
        for key, value in os.environ.items()
        if key != "KUBECONFIG" and not key.startswith("EYRIE_")
    }
    finished = run_module("streams.cli", "applier", *args, env=env, timeout=60)
    lines = finished.stderr.strip().splitlines()
    assert finished.returncode == 2 and len(lines) == 1 and expected in lines[0], finished.stderr
    if "unusable" in expected:
        assert str(unreachable) in lines[0]


# ---------------------------------------------------------------------------------- the applier process


@pytest.mark.kafka
async def test_an_applier_with_the_kubernetes_target_binds_the_pod_and_reports_it_applied(
    api, kube_config, kafka_bootstrap, tmp_path
):
    env = {
        **{key: value for key, value in os.environ.items() if not key.startswith("EYRIE_")},
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"t{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "1",
        "EYRIE_DATA_DIR": str(tmp_path / "faust"),
        "EYRIE_SESSION_TIMEOUT_S": "6",
    }
    env.pop("KUBECONFIG", None)
    settings = load_settings(env=env)
    async with a_pod(api, "through-kafka") as created, a_pod(api, "through-kafka-waiting") as waiting:
        applier = start_role(
            "applier", env, tmp_path, args=["--target", "kubernetes", "--kubeconfig", kube_config]
        )
        try:
            result = await _bind_through_kafka(settings, created, waiting)
            assert result.status == "applied", (result, _logs(tmp_path))
            assert await node_of(api, created["metadata"]["name"]) == NODE_A
            # Events and conditions are written in the background: wait for both pods' to appear.
            expected = {"waiting": ["FailedScheduling"], "created": ["Scheduled"]}
            deadline = time.monotonic() + 60
            while True:
                seen = {
                    label: [e[0] for e in await events_about(api, obj["metadata"]["uid"])]
                    for label, obj in (("waiting", waiting), ("created", created))
                }
                if seen == expected:
                    break
                assert time.monotonic() < deadline and applier.poll() is None, (seen, _logs(tmp_path))
                await asyncio.sleep(0.5)
            told = failed_scheduling_message(["1 Insufficient cpu"])
            assert await pod_scheduled(api, waiting["metadata"]["name"]) == ("False", "Unschedulable", told)
        finally:
            stop_all([applier])
    assert applier.returncode == 0, _logs(tmp_path)


def _logs(workdir: Path) -> str:
    return "\n".join(path.read_text(errors="replace")[-4000:] for path in workdir.glob("*.log"))


async def _bind_through_kafka(
    settings: Any, created: dict[str, Any], waiting: dict[str, Any]
) -> BindingResult:
    """Feed the applier a node, an unschedulable verdict and a binding; the binding's final result. The
    node and the binding travel different topics, so a binding read first is answered "node not found":
    then it is sent again, as placement would, with the next attempt."""
    spec = NodeSpec(name=NODE_A, capacity={"cpu": "4", "memory": "8Gi", "pods": "110"})
    deadline = time.monotonic() + 90
    async with EyrieClient(settings) as client:
        await client.send("node-events", NODE_A, NodeEvent(type="upsert", node=spec))
        await client.send(
            "binding-results", waiting["metadata"]["uid"], verdict(waiting, "1 Insufficient cpu")
        )
        attempt = 0
        while time.monotonic() < deadline:
            binding = binding_for(created, NODE_A, attempt)
            await client.send("bindings", binding.uid, binding)
            await client.flush()
            result = await _result_for(client, binding, deadline)
            if result.status != "conflict":
                return result
            attempt += 1
            await asyncio.sleep(1.0)
    raise AssertionError("no result for the binding")


async def _result_for(client: EyrieClient, binding: Binding, deadline: float) -> BindingResult:
    while time.monotonic() < deadline:
        async for _, decoded in client.records(["binding-results"], follow=True, until_idle=5.0):
            value = decoded.value
            if (
                isinstance(value, BindingResult)
                and value.uid == binding.uid
                and value.attempt == binding.attempt
            ):
                return value
    raise AssertionError(f"no result for attempt {binding.attempt}")
