"""The local Kubernetes control plane: a kube-apiserver of the pinned release that stores Nodes and Pods
for the admin token, refuses everyone else through RBAC, and an `eyrie kube up|status|down` that scripts
can rely on (the kubeconfig's path as up's last stdout line, exit codes, idempotent up)."""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from streams.local.broker import free_port
from streams.local.controlplane import (
    KUBERNETES_VERSION,
    ClusterAccess,
    build_binaries,
    read_access,
)
from tests.commands import run_module

pytestmark = pytest.mark.kube

# ------------------------------------------------------------------------------------------- builders

# Names carry the pid so that a session pointed at a long-lived cluster (KUBECONFIG) does not collide
# with objects an earlier session left behind.
SUFFIX = f"eyrie-kube-test-{os.getpid()}"


def node(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"eyrie.test/suite": "controlplane"}},
        "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
    }


def pod(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "schedulerName": "eyrie",
            "containers": [{"name": "main", "image": "registry.invalid/pause:1", "resources": {}}],
        },
    }


def binding(pod_name: str, node_name: str) -> dict[str, object]:
    """What a scheduler posts to place a pod: the pods/binding subresource."""
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": pod_name, "namespace": "default"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def decoded(answer: tuple[int, bytes]) -> tuple[int, dict[str, object]]:
    status, body = answer
    return status, json.loads(body)


def cli_environment(**extra: str) -> dict[str, str]:
    """The user's environment without KUBECONFIG (which would select an existing cluster), plus `extra`."""
    env = {key: value for key, value in os.environ.items() if key != "KUBECONFIG"}
    return env | extra


def kube(*args: object, env: dict[str, str] | None = None, timeout: float = 300.0):
    return run_module("streams.cli", "kube", *args, env=env or cli_environment(), timeout=timeout)


def pids(data_dir: Path) -> tuple[str, str]:
    return tuple(  # type: ignore[return-value]
        (data_dir / f"{name}.pid").read_text().strip() for name in ("etcd", "kube-apiserver")
    )


def gone(pid: int) -> bool:
    """Exited: no such process, or a zombie that init has not reaped yet (it was `up`'s child, and `up`
    exited long ago)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def unanswered_kubeconfig(directory: Path) -> Path:
    """A kubeconfig naming https://127.0.0.1:PORT where nothing listens."""
    path = directory / "nobody.kubeconfig"
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{free_port()}"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def access(kube_config: str) -> ClusterAccess:
    return read_access(kube_config)


@pytest.fixture(scope="module")
def cli_plane(tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config) -> Iterator[dict]:
    """A control plane of its own, started by `eyrie kube up` in a child process (the session's may be an
    existing cluster); its first answer is kept for the tests to read, and it is stopped at the end."""
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    # The build (minutes on first use) happens here with its progress shown, not inside a captured child.
    build_binaries(progress=reporter.write_line if reporter is not None else print)
    data_dir = tmp_path_factory.mktemp("cli-kube")
    port = free_port()
    first = kube("up", "--data-dir", data_dir, "--port", port)
    try:
        yield {"data_dir": data_dir, "port": port, "first": first}
    finally:
        kube("down", "--data-dir", data_dir, timeout=60.0)


# ---------------------------------------------------------------------------------------------- cases


def test_the_api_server_reports_the_pinned_kubernetes_release(access):
    status, version = decoded(access.request("GET", "/version"))
    assert status == 200, version
    if os.environ.get("KUBECONFIG"):
        assert str(version["gitVersion"]).startswith("v1."), version
        pytest.skip(f"KUBECONFIG names an existing cluster, of release {version['gitVersion']}")
    assert version["gitVersion"] == KUBERNETES_VERSION, version
    assert (version["major"], version["minor"]) == ("1", KUBERNETES_VERSION.split(".")[1]), version


def test_a_node_and_a_pod_are_created_and_the_pod_is_bound_to_the_node_with_the_admin_token(access):
    node_name, pod_name = f"node-{SUFFIX}", f"pod-{SUFFIX}"
    try:
        status, created = decoded(access.request("POST", "/api/v1/nodes", node(node_name)))
        assert status == 201, created
        status, created = decoded(access.request("POST", "/api/v1/namespaces/default/pods", pod(pod_name)))
        assert status == 201, created
        assert created["spec"].get("nodeName") is None, created  # type: ignore[union-attr]
        status, bound = decoded(
            access.request(
                "POST", f"/api/v1/namespaces/default/pods/{pod_name}/binding", binding(pod_name, node_name)
            )
        )
        assert status == 201, bound
        status, fetched = decoded(access.request("GET", f"/api/v1/namespaces/default/pods/{pod_name}"))
        assert status == 200, fetched
        assert fetched["spec"]["nodeName"] == node_name, fetched  # type: ignore[index]
    finally:
        access.request("DELETE", f"/api/v1/namespaces/default/pods/{pod_name}?gracePeriodSeconds=0")
        access.request("DELETE", f"/api/v1/nodes/{node_name}")


@pytest.mark.parametrize(
    ("token", "method", "path", "expected"),
    [
        pytest.param(
            None,
            "GET",
            "/api/v1/namespaces/default/pods",
            403,
            id="listing pods without a token is forbidden by RBAC to system:anonymous",
        ),
        pytest.param(
            None,
            "POST",
            "/api/v1/nodes",
            403,
            id="creating a node without a token is forbidden by RBAC to system:anonymous",
        ),
        pytest.param(
            "not-the-admin-token",
            "GET",
            "/api/v1/nodes",
            401,
            id="an unknown token is refused before authorization",
        ),
    ],
)
def test_requests_without_the_admin_token_are_refused(access, token, method, path, expected):
    caller = dataclasses.replace(access, token=token)
    status, answer = decoded(
        caller.request(method, path, node(f"denied-{SUFFIX}") if method == "POST" else None)
    )
    assert status == expected, answer
    if expected == 403:
        assert "system:anonymous" in str(answer["message"]), answer


def test_up_prints_progress_on_stderr_and_the_kubeconfig_path_as_its_last_stdout_line(cli_plane):
    first, data_dir = cli_plane["first"], cli_plane["data_dir"]
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert lines[-1] == str(data_dir / "kubeconfig"), first.stdout
    assert not any(line.startswith("kube:") for line in lines), first.stdout
    assert "kube: starting kube-apiserver" in first.stderr, first.stderr
    answer = read_access(lines[-1]).request("GET", "/version")
    assert answer[0] == 200 and json.loads(answer[1])["gitVersion"] == KUBERNETES_VERSION, answer


def test_up_on_a_running_control_plane_starts_nothing_and_prints_the_same_kubeconfig(cli_plane):
    data_dir = cli_plane["data_dir"]
    before = pids(data_dir)
    again = kube("up", "--data-dir", data_dir, timeout=120.0)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines()[-1] == str(data_dir / "kubeconfig"), again.stdout
    assert "control plane already up" in again.stdout, again.stdout
    assert "kube: starting" not in again.stderr, again.stderr
    assert pids(data_dir) == before


def test_up_with_kubeconfig_set_uses_that_cluster_and_starts_nothing(kube_config, tmp_path):
    env = cli_environment(KUBECONFIG=kube_config, EYRIE_HOME=str(tmp_path / "home"))
    done = kube("up", env=env, timeout=120.0)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("existing cluster answers: https://") and lines[-1] == kube_config, lines
    assert not (tmp_path / "home").exists(), "a local control plane was prepared"


@pytest.mark.parametrize(
    ("case", "expected_code", "expected_start"),
    [
        pytest.param("running", 0, "control plane up: ", id="a running control plane exits 0"),
        pytest.param("empty", 1, "control plane down: ", id="an empty data directory exits 1"),
        pytest.param(
            "silent",
            1,
            "existing cluster not answering: ",
            id="a KUBECONFIG whose cluster does not answer exits 1",
        ),
        pytest.param(
            "conflict",
            2,
            "error: --data-dir: KUBECONFIG names",
            id="a KUBECONFIG of another cluster beside --data-dir is an error, exit 2",
        ),
    ],
)
def test_status_exit_codes(cli_plane, tmp_path, case, expected_code, expected_start):
    if case == "running":
        done = kube("status", "--data-dir", cli_plane["data_dir"], timeout=60.0)
    elif case == "empty":
        done = kube("status", "--data-dir", tmp_path, timeout=60.0)
    else:
        env = cli_environment(KUBECONFIG=str(unanswered_kubeconfig(tmp_path)))
        args = ("--data-dir", tmp_path) if case == "conflict" else ()
        done = kube("status", *args, env=env, timeout=60.0)
    output = (done.stdout + done.stderr).splitlines()
    assert done.returncode == expected_code and len(output) == 1, (done.stdout, done.stderr)
    assert output[0].startswith(expected_start), output


def test_down_stops_both_processes_then_status_exits_1_and_a_second_down_is_not_an_error(cli_plane):
    data_dir = cli_plane["data_dir"]
    etcd_pid, apiserver_pid = pids(data_dir)
    done = kube("down", "--data-dir", data_dir, timeout=60.0)
    assert done.returncode == 0 and done.stdout.startswith("control plane down: "), done
    for pid in (etcd_pid, apiserver_pid):
        assert gone(int(pid)), pid
    status = kube("status", "--data-dir", data_dir, timeout=60.0)
    assert status.returncode == 1 and status.stdout.startswith("control plane down: "), status
    again = kube("down", "--data-dir", data_dir, timeout=60.0)
    assert again.returncode == 0 and again.stdout.startswith("control plane was not running: "), again
