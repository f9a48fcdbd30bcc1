"""What the Kubernetes client makes of the API server's replies, of a kubeconfig, and of time: the parts
that need no server. (tests/kube/test_api.py sends the same kinds of requests to a real one.)"""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from schemas.exceptions import ControlPlaneError, KubeApiError
from schemas.node import NodeEvent, NodeSpec
from streams.kube.api import Backoff, KubeConfig, binding_outcome, is_expired
from streams.kube.bridge import record_digest


def status(code: int, reason: str, message: str, **details: object) -> bytes:
    body: dict[str, object] = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code}
    body |= {"reason": reason, "message": message}
    if details:
        body["details"] = details
    return orjson.dumps(body)


SUCCESS = orjson.dumps(
    {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
)
ALREADY = status(
    409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned'
)
RECREATED = status(
    409, "Conflict", 'Operation cannot be fulfilled on pods "p": Precondition failed: UID in precondition: a'
)


@pytest.mark.parametrize(
    ("code", "body", "expected"),
    [
        pytest.param(201, SUCCESS, ("bound", ""), id="a 201 with the server's Status body is bound"),
        pytest.param(201, b"", ("bound", ""), id="a 201 with an empty body is bound all the same"),
        pytest.param(201, b"<html>", ("bound", ""), id="a 201 with a body that is not JSON is bound"),
        pytest.param(200, b'{"kind": "Pod"}', ("bound", ""), id="a 200 with a Pod is bound"),
        pytest.param(
            409, ALREADY, ("conflict", "Conflict"), id="a 409 for a pod already assigned is a conflict"
        ),
        pytest.param(
            409,
            RECREATED,
            ("gone", "Conflict"),
            id="a 409 for a failed uid precondition means the pod is gone",
        ),
        pytest.param(
            404, status(404, "NotFound", 'pods "p" not found'), ("gone", "NotFound"), id="a 404 is gone"
        ),
        pytest.param(404, b"", ("gone", ""), id="a 404 without a body is gone too"),
    ],
)
def test_binding_replies(code, body, expected):
    outcome = binding_outcome(code, body)
    assert (outcome.status, outcome.reason) == expected
    if code == 409:
        assert "Operation cannot be fulfilled" in outcome.message


@pytest.mark.parametrize(
    ("code", "body", "reason"),
    [
        pytest.param(403, status(403, "Forbidden", "no"), "Forbidden", id="a 403 raises with the reason"),
        pytest.param(500, b"boom", "", id="a 500 with a plain body raises, quoting it"),
    ],
)
def test_other_binding_replies_raise_kube_api_error(code, body, reason):
    with pytest.raises(KubeApiError) as caught:
        binding_outcome(code, body, "bind default/p to n")
    assert caught.value.status == code and caught.value.reason == reason
    assert str(caught.value).startswith(f"bind default/p to n: HTTP {code}")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        pytest.param(
            {
                "code": 410,
                "reason": "Expired",
                "message": "The resourceVersion for the provided watch is too old.",
            },
            True,
            id="a 410 Expired status means list again",
        ),
        pytest.param(
            {"code": 500, "message": "too old resource version: 1 (4030)"},
            True,
            id="an error that says too old resource version means list again whatever its code",
        ),
        pytest.param(
            {
                "code": 504,
                "reason": "Timeout",
                "message": "Timeout: Too large resource version: 99, current: 3",
                "details": {"causes": [{"reason": "ResourceVersionTooLarge"}]},
            },
            True,
            id="a resource version the server has not reached means list again",
        ),
        pytest.param(
            {"code": 500, "reason": "InternalError", "message": "etcdserver: leader changed"},
            False,
            id="an internal error is retried, not relisted",
        ),
    ],
)
def test_expiry(reply, expected):
    assert is_expired(reply) is expected


def test_backoff_grows_to_its_cap_with_jitter_that_a_seed_repeats():
    first = Backoff(initial=1.0, cap=8.0, jitter=0.5, seed=7)
    delays = [first.next() for _ in range(6)]
    bounds = [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]
    assert all(bound / 2 <= delay <= bound for delay, bound in zip(delays, bounds, strict=True)), delays
    again = Backoff(initial=1.0, cap=8.0, jitter=0.5, seed=7)
    assert [again.next() for _ in range(6)] == delays
    again.reset()
    assert again.next() <= 1.0


def test_a_record_digest_ignores_when_it_was_made():
    spec = NodeSpec(name="n", capacity={"cpu": "1"})
    assert record_digest(NodeEvent(type="upsert", node=spec, ts=1.0)) == record_digest(
        NodeEvent(type="upsert", node=spec, ts=2.0)
    )
    cordoned = spec.model_copy(update={"unschedulable": True})
    assert record_digest(NodeEvent(type="upsert", node=spec, ts=1.0)) != record_digest(
        NodeEvent(type="upsert", node=cordoned, ts=1.0)
    )


# ---------------------------------------------------------------------------------------- kubeconfig


@pytest.fixture(scope="module")
def client_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    directory = tmp_path_factory.mktemp("client-cert")
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", "client.key", "-out", "client.crt", "-days", "1", "-subj", "/CN=eyrie-test",
        ],
        cwd=directory,
        check=True,
        capture_output=True,
    )  # fmt: skip
    return (directory / "client.crt").read_text(), (directory / "client.key").read_text()


def kubeconfig(path: Path, user: dict[str, object], cluster: dict[str, object] | None = None) -> Path:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster or {"server": "https://127.0.0.1:6443/"}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_kubeconfig_with_client_certificate_data_yields_a_context_that_presents_it(tmp_path, client_pair):
    cert, key = client_pair
    path = kubeconfig(
        tmp_path / "config",
        {"client-certificate-data": b64(cert), "client-key-data": b64(key)},
        {"server": "https://127.0.0.1:6443/", "certificate-authority-data": b64(cert)},
    )
    config = KubeConfig.from_kubeconfig(path)
    assert config.server == "https://127.0.0.1:6443" and config.token is None
    assert config.client_cert_pem == cert and config.client_key_pem == key and config.ca_pem == cert
    config.ssl_context()  # loads the pair, or raises


def test_a_kubeconfig_with_certificate_files_reads_them_relative_to_itself(tmp_path, client_pair):
    cert, key = client_pair
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "c.crt").write_text(cert)
    (tmp_path / "pki" / "c.key").write_text(key)
    (tmp_path / "token").write_text("secret\n")
    path = kubeconfig(
        tmp_path / "config",
        {"client-certificate": "pki/c.crt", "client-key": "pki/c.key", "tokenFile": "token"},
    )
    config = KubeConfig.from_kubeconfig(path)
    assert config.client_cert_pem == cert and config.token_file == tmp_path / "token"


@pytest.mark.parametrize(
    ("user", "words"),
    [
        pytest.param(
            {"exec": {"command": "aws"}}, "credential plugin", id="an exec credential plugin is refused"
        ),
        pytest.param(
            {"client-certificate-data": b64("x")}, "needs its key", id="a certificate without a key"
        ),
    ],
)
def test_unusable_kubeconfig_users_are_refused_with_the_reason(tmp_path, user, words):
    with pytest.raises(ControlPlaneError, match=words):
        KubeConfig.from_kubeconfig(kubeconfig(tmp_path / "config", user))


def test_the_first_kubeconfig_of_a_list_that_names_a_context_wins(tmp_path):
    empty = tmp_path / "empty"
    empty.write_text(json.dumps({"apiVersion": "v1", "kind": "Config"}))
    named = kubeconfig(tmp_path / "named", {"token": "t"})
    config = KubeConfig.from_kubeconfig(f"{empty}:{named}")
    assert config.token == "t"
