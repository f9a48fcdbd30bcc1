"""Security settings of every Kafka client: TLS, SASL (PLAIN, SCRAM), message size limits, no pickle.

The unit tests need no broker. The Kafka tests share ONE local broker for this module, started with a
SASL_SSL listener (`eyrie broker up --sasl-ssl-port`) on its own ports and data directory; they skip, with
the reason, only when Java, keytool or Maven is missing.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import ssl
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust
import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from typer.testing import CliRunner

from schemas.exceptions import BrokerError, ConfigError, InvalidInput
from schemas.pod import PodRequest
from streams.client import EyrieClient
from streams.demo.processes import start_role, stop_all
from streams.local.broker import HOST, LocalBroker, free_ports
from streams.runtime.security import (
    client_security,
    consumer_limits,
    describe_failure,
    faust_broker,
    producer_limits,
    ssl_context,
)
from streams.runtime.topics import topic_specs
from streams.settings import Settings, load_settings
from tests.commands import run_module

REPO = Path(__file__).resolve().parents[2]
ALICE = "alice-Pa55word-7f3c"  # distinctive, so a leak into a log or a message is found by search
CAROL = "carol-Pa55word-91ab"
WRONG = "not-alices-password"

# ------------------------------------------------------------------------------------------- builders


@dataclass
class SecuredBroker:
    broker: LocalBroker
    password_file: Path
    up_line: str

    @property
    def bootstrap(self) -> str:
        assert self.broker.sasl_ssl_bootstrap is not None
        return self.broker.sasl_ssl_bootstrap


def secured(
    bootstrap: str,
    *,
    protocol: str = "SASL_SSL",
    mechanism: str = "PLAIN",
    user: str = "alice",
    password: str | None = ALICE,
    cafile: Path | None = None,
    **overrides: Any,
) -> Settings:
    """Settings for one client of the secured listener, on a topic prefix of its own."""
    values: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "security_protocol": protocol,
        "topic_prefix": f"s{uuid.uuid4().hex[:8]}.",
        "partitions": 1,
        "request_timeout_ms": 5000,
    }
    if protocol.startswith("SASL_"):
        values.update(sasl_mechanism=mechanism, sasl_username=user, sasl_password=password)
    if protocol in ("SSL", "SASL_SSL"):
        values["ssl_cafile"] = cafile
    return load_settings(env={}, **{**values, **overrides})


def security_env(
    secured_broker: SecuredBroker, mechanism: str = "SCRAM-SHA-512", **extra: str
) -> dict[str, str]:
    """The environment of an `eyrie` process that talks to the secured listener only."""
    env = {name: value for name, value in os.environ.items() if not name.startswith(("EYRIE_", "KAFKA_"))}
    return {
        **env,
        "KAFKA_BOOTSTRAP_SERVERS": secured_broker.bootstrap,
        "EYRIE_SECURITY_PROTOCOL": "SASL_SSL",
        "EYRIE_SASL_MECHANISM": mechanism,
        "EYRIE_SASL_USERNAME": "alice",
        "EYRIE_SASL_PASSWORD_FILE": str(secured_broker.password_file),
        "EYRIE_SSL_CAFILE": str(secured_broker.broker.ca_file),
        **extra,
    }


def eyrie(*args: Any, env: dict[str, str], timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return run_module("streams.cli", *args, env=env, timeout=timeout)


def one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {lines!r}"
    return lines[0]


def topic_resource(topic: str) -> ConfigResource:
    return ConfigResource(ConfigResourceType.TOPIC, topic)


def openssl_pair(directory: Path, *, encrypted: bool = False) -> tuple[Path, Path]:
    """A self-signed client certificate and its key (PEM), made with the openssl command."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed")
    cert, key = directory / "client.pem", directory / "client.key"
    command = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"]
    command += ["-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=client"]
    command += ["-passout", "pass:key-secret"] if encrypted else ["-nodes"]
    subprocess.run(command, check=True, capture_output=True)
    return cert, key


# ---------------------------------------------------------------------------------- settings → clients


@pytest.mark.parametrize(
    ("case", "protocol", "keys"),
    [
        ("PLAINTEXT clients get no TLS and no SASL", "PLAINTEXT", {"security_protocol"}),
        ("SSL clients get a TLS context only", "SSL", {"security_protocol", "ssl_context"}),
        (
            "SASL_PLAINTEXT clients get SASL credentials without TLS",
            "SASL_PLAINTEXT",
            {"security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password"},
        ),
        (
            "SASL_SSL clients get both",
            "SASL_SSL",
            {
                "security_protocol",
                "ssl_context",
                "sasl_mechanism",
                "sasl_plain_username",
                "sasl_plain_password",
            },
        ),
    ],
)
def test_each_protocol_gives_aiokafka_exactly_the_options_it_needs(case, protocol, keys):
    options = client_security(secured("b:1", protocol=protocol, mechanism="SCRAM-SHA-512"))
    assert set(options) == keys
    assert options["security_protocol"] == protocol
    if "ssl_context" in keys:
        assert options["ssl_context"].verify_mode == ssl.CERT_REQUIRED
        assert options["ssl_context"].check_hostname
    if "sasl_mechanism" in keys:
        assert (options["sasl_mechanism"], options["sasl_plain_password"]) == ("SCRAM-SHA-512", ALICE)


@pytest.mark.parametrize(
    ("case", "protocol", "credentials", "faust_protocol"),
    [
        ("a PLAINTEXT app has no credentials", "PLAINTEXT", type(None), None),
        ("an SSL app gets SSL credentials", "SSL", faust.SSLCredentials, "SSL"),
        (
            "a SASL_PLAINTEXT app gets SASL credentials without a context",
            "SASL_PLAINTEXT",
            faust.SASLCredentials,
            "SASL_PLAINTEXT",
        ),
        (
            "a SASL_SSL app gets SASL credentials with a context",
            "SASL_SSL",
            faust.SASLCredentials,
            "SASL_SSL",
        ),
    ],
)
def test_each_protocol_gives_faust_the_matching_credentials(case, protocol, credentials, faust_protocol):
    conf = faust_broker(secured("a:1,b:2", protocol=protocol, mechanism="SCRAM-SHA-256"))
    assert conf["broker"] == ["kafka://a:1", "kafka://b:2"]
    assert isinstance(conf["broker_credentials"], credentials)
    if faust_protocol is not None:
        assert conf["broker_credentials"].protocol.value == faust_protocol
    if credentials is faust.SASLCredentials:
        assert conf["broker_credentials"].mechanism.value == "SCRAM-SHA-256"
        assert ALICE not in repr(conf["broker_credentials"])


def test_hostname_checks_can_be_turned_off_but_certificates_are_still_verified():
    context = ssl_context(secured("b:1", protocol="SSL", ssl_check_hostname=False))
    assert context is not None
    assert (context.check_hostname, context.verify_mode) == (False, ssl.CERT_REQUIRED)


@pytest.mark.parametrize(
    ("case", "field", "message"),
    [
        ("a CA file that is not PEM names ssl_cafile", "ssl_cafile", "ssl_cafile: cannot load"),
        ("a certificate that is not PEM names ssl_certfile", "ssl_certfile", "ssl_certfile: cannot load"),
    ],
)
def test_tls_files_that_do_not_load_fail_with_one_line_naming_the_field(tmp_path, case, field, message):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(ConfigError) as error:
        ssl_context(secured("b:1", protocol="SSL", **{field: garbage}))
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_a_client_certificate_and_key_load_into_the_tls_context(tmp_path):
    cert, key = openssl_pair(tmp_path)
    assert ssl_context(secured("b:1", protocol="SSL", ssl_certfile=cert, ssl_keyfile=key)) is not None


def test_an_encrypted_key_without_its_password_fails_instead_of_prompting_on_the_terminal(tmp_path):
    cert, key = openssl_pair(tmp_path, encrypted=True)
    with pytest.raises(ConfigError, match=r"ssl_keyfile: .* is encrypted; set ssl_key_password"):
        ssl_context(secured("b:1", protocol="SSL", ssl_certfile=cert, ssl_keyfile=key))
    with_password = secured(
        "b:1", protocol="SSL", ssl_certfile=cert, ssl_keyfile=key, ssl_key_password="key-secret"
    )
    assert ssl_context(with_password) is not None


def test_a_failure_message_never_carries_the_password_even_when_a_library_echoes_it():
    settings = secured("b:1", mechanism="SCRAM-SHA-512")
    message = describe_failure(
        settings, Exception("boom"), [f'Unable connect to "b:1": bad password {ALICE}']
    )
    assert ALICE not in message
    assert message.startswith(
        "cannot reach Kafka at b:1 (SASL_SSL, SCRAM-SHA-512 as alice): bad password ***"
    )


# ----------------------------------------------------------------------------------- message limits


@pytest.mark.parametrize(
    ("case", "limit", "producer", "consumer"),
    [
        (
            "the default limit keeps the usual batch and fetch sizes",
            1_048_576,
            {"max_request_size": 1_048_576, "max_batch_size": 262_144},
            {"fetch_max_bytes": 16_777_216, "max_partition_fetch_bytes": 4_194_304, "fetch_max_wait_ms": 200},
        ),
        (
            "a small limit shrinks batches so several records never add up past it",
            2048,
            {"max_request_size": 2048, "max_batch_size": 2048},
            {"fetch_max_bytes": 16_777_216, "max_partition_fetch_bytes": 4_194_304, "fetch_max_wait_ms": 200},
        ),
        (
            "a large limit grows fetches so one record always fits",
            50 * 1_048_576,
            {"max_request_size": 52_428_800, "max_batch_size": 262_144},
            {
                "fetch_max_bytes": 52_428_800,
                "max_partition_fetch_bytes": 52_428_800,
                "fetch_max_wait_ms": 200,
            },
        ),
    ],
)
def test_max_message_bytes_bounds_producers_consumers_and_topics_alike(case, limit, producer, consumer):
    settings = load_settings(env={}, max_message_bytes=limit)
    assert producer_limits(settings) == producer
    assert consumer_limits(settings) == consumer
    assert {spec.topic_configs["max.message.bytes"] for spec in topic_specs(settings)} == {str(limit)}


# ------------------------------------------------------------------------------------------ no pickle

PICKLE = re.compile(
    r"^\s*(import|from)\s+(c?pickle|dill|cloudpickle|shelve)\b|serializer\s*=\s*['\"]pickle", re.M
)


@pytest.mark.parametrize("package", ["schemas", "portraits", "policies", "streams", "bench"])
def test_no_module_imports_pickle_or_asks_faust_for_it(package):
    offenders = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / package).rglob("*.py"))
        if PICKLE.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == []


@pytest.mark.parametrize("role", ["worker", "applier"])
def test_every_faust_topic_table_and_default_codec_is_raw_bytes(tmp_path, monkeypatch, role):
    from streams.runtime.app import create_app

    # Faust reads its default codecs from the environment too; an explicit setting must win.
    monkeypatch.setenv("APP_VALUE_SERIALIZER", "pickle")
    monkeypatch.setenv("APP_KEY_SERIALIZER", "pickle")
    app = create_app(load_settings(env={}, data_dir=str(tmp_path)), role)
    assert (app.conf.key_serializer, app.conf.value_serializer) == ("raw", "raw")
    channels = [*app.topics, *(table.changelog_topic for table in app.tables.values())]
    assert len(channels) >= 2
    codecs = {(str(channel), channel.key_serializer, channel.value_serializer) for channel in channels}
    assert {(key, value) for _, key, value in codecs} == {("raw", "raw")}, codecs
    for table in app.tables.values():
        assert (table.key_serializer, table.value_serializer) == ("raw", "raw")


# ---------------------------------------------------------------------------------------- CLI flags

COMMANDS = [
    ("eyrie worker takes the security flags", ["worker"]),
    ("eyrie applier takes the security flags", ["applier"]),
    ("eyrie replay takes the security flags", ["replay", "LOG"]),
    ("eyrie record takes the security flags", ["record", "-o", "OUT"]),
    ("eyrie decisions takes the security flags", ["decisions"]),
    ("eyrie publish takes the security flags", ["publish", "POD"]),
    ("eyrie topics create takes the security flags", ["topics", "create"]),
    ("eyrie profiles publish takes the security flags", ["profiles", "publish", "PROFILE"]),
    ("eyrie profiles list takes the security flags", ["profiles", "list"]),
    ("eyrie profiles show takes the security flags", ["profiles", "show", "default"]),
    ("eyrie dead-letters takes the security flags", ["dead-letters"]),
    ("eyrie nodes takes the security flags", ["nodes"]),
    ("eyrie pending takes the security flags", ["pending"]),
]


@pytest.mark.parametrize(("case", "command"), COMMANDS)
def test_every_command_that_talks_to_kafka_takes_the_security_flags(tmp_path, monkeypatch, case, command):
    from streams.cli import app

    for name in [name for name in os.environ if name.startswith("EYRIE_")]:
        monkeypatch.delenv(name)
    (tmp_path / "pod.json").write_text('{"uid": "p"}')
    (tmp_path / "profile.json").write_text('{"schedulerName": "p"}')
    files = {
        "LOG": tmp_path / "log.jsonl",
        "OUT": tmp_path / "out.jsonl",
        "POD": tmp_path / "pod.json",
        "PROFILE": tmp_path / "profile.json",
    }
    args = [str(files.get(arg, arg)) for arg in command]
    flags = [
        "--security-protocol",
        "sasl_ssl",
        "--sasl-mechanism",
        "SCRAM-SHA-512",
        "--sasl-username",
        "alice",
    ]
    flags += ["--ssl-cafile", str(tmp_path / "missing-ca.pem")]
    result = CliRunner().invoke(app, [*args, *flags])
    # The flags reached the settings: the missing CA file is found before anything connects.
    assert result.exit_code == 2, result.output
    assert (
        one_line(result.output)
        == f"error: --ssl-cafile: {tmp_path / 'missing-ca.pem'} does not exist or is not a file"
    )


# ---------------------------------------------------------------------------------- the secured broker


@pytest.fixture(scope="module")
def secured_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredBroker]:
    """One broker for the module: PLAINTEXT as usual, plus SASL_SSL with the user alice (PLAIN, SCRAM)."""
    directory = tmp_path_factory.mktemp("secured-broker")
    password_file = directory / "alice.password"
    password_file.write_text(ALICE + "\n")
    port, controller, sasl_ssl = free_ports(3)
    command = ["up", "-p", port, "-d", directory / "data", "--controller-port", controller, "--timeout", 60]
    command += [
        "--sasl-ssl-port",
        sasl_ssl,
        "--sasl-username",
        "alice",
        "--sasl-password-file",
        password_file,
    ]
    started = run_module("streams.cli", "broker", *command, timeout=600)
    broker = LocalBroker(
        port, directory / "data", controller, sasl_ssl_port=sasl_ssl, sasl_users={"alice": ALICE}
    )
    if started.returncode != 0 and re.search(r"(java|mvn|keytool) not found", started.stderr):
        pytest.skip(f"no local broker: {started.stderr.strip()}")
    assert started.returncode == 0, started.stderr
    try:
        yield SecuredBroker(broker, password_file, one_line(started.stdout))
    finally:
        LocalBroker(port, directory / "data", controller).down()


@pytest.mark.kafka
def test_broker_up_reports_the_secured_listener_and_keeps_secrets_out_of_its_log(secured_broker):
    broker = secured_broker.broker
    assert secured_broker.up_line.endswith(
        f"; SASL_SSL: {HOST}:{broker.sasl_ssl_port} (user alice, "
        f"password file {secured_broker.password_file}, CA file {broker.ca_file})"
    )
    pid = broker.status().pid
    assert pid is not None
    assert ALICE not in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
    assert ALICE not in broker.log_file.read_text(errors="replace")
    assert os.stat(broker.data_dir / "server.properties").st_mode & 0o077 == 0
    assert ALICE.encode() not in broker.ca_file.read_bytes()


@pytest.mark.kafka
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512", "SCRAM-SHA-256"])
async def test_a_producer_and_a_consumer_round_trip_through_sasl_ssl(secured_broker, mechanism):
    settings = secured(secured_broker.bootstrap, mechanism=mechanism, cafile=secured_broker.broker.ca_file)
    topic = settings.topic("round-trip")
    options = client_security(settings)
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **options)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 1, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=settings.bootstrap_servers, **options)
    await producer.start()
    try:
        for index in range(3):
            await producer.send_and_wait(topic, f"{mechanism}-{index}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.bootstrap_servers, auto_offset_reset="earliest", **options
    )
    await consumer.start()
    try:
        received = [(await asyncio.wait_for(consumer.getone(), 20)).value for _ in range(3)]
    finally:
        await consumer.stop()
    assert received == [f"{mechanism}-{index}".encode() for index in range(3)]


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("case", "settings", "reason"),
    [
        (
            "a wrong PLAIN password names the user, never a password",
            {"mechanism": "PLAIN", "password": WRONG},
            "(SASL_SSL, PLAIN as alice): [Error 58] SaslAuthenticationFailed: Authentication failed: "
            "Invalid username or password; check the user name and password",
        ),
        (
            "a wrong SCRAM password names the user, never a password",
            {"mechanism": "SCRAM-SHA-512", "password": WRONG},
            "(SASL_SSL, SCRAM-SHA-512 as alice): [Error 58] SaslAuthenticationFailed:",
        ),
        (
            "an unknown SCRAM user fails like a wrong password",
            {"mechanism": "SCRAM-SHA-512", "user": "mallory"},
            "(SASL_SSL, SCRAM-SHA-512 as mallory): [Error 58] SaslAuthenticationFailed:",
        ),
        (
            "a client without TLS is told the listener expects it",
            {"protocol": "PLAINTEXT"},
            "(PLAINTEXT): KafkaConnectionError: Connection at 127.0.0.1:PORT closed; "
            "does this listener expect TLS",
        ),
        (
            "a SASL client without TLS is told the listener expects it",
            {"protocol": "SASL_PLAINTEXT"},
            "(SASL_PLAINTEXT, PLAIN as alice): KafkaConnectionError: Connection at 127.0.0.1:PORT closed; "
            "does this listener expect TLS",
        ),
        (
            "a TLS client without SASL is told the listener expects it",
            {"protocol": "SSL"},
            "does this listener expect SASL",
        ),
        (
            "a client that does not trust the broker's CA is told to set ssl_cafile",
            {"protocol": "SASL_SSL", "cafile": None},
            "CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate in certificate "
            "chain (_ssl.c",
        ),
    ],
)
async def test_a_client_the_listener_refuses_fails_fast_with_one_line(secured_broker, case, settings, reason):
    settings = {"cafile": "CA", **settings}
    if settings["cafile"] == "CA":
        settings["cafile"] = secured_broker.broker.ca_file
    client_settings = secured(secured_broker.bootstrap, **settings)
    started = time.monotonic()
    with pytest.raises(BrokerError) as error:
        async with EyrieClient(client_settings):
            pass
    message = str(error.value)
    assert time.monotonic() - started < 15
    assert message.startswith(f"cannot reach Kafka at {secured_broker.bootstrap} (")
    assert reason.replace("PORT", str(secured_broker.broker.sasl_ssl_port)) in message
    assert "\n" not in message
    assert WRONG not in message
    assert ALICE not in message


@pytest.mark.kafka
async def test_eyrie_client_publishes_and_reads_back_through_the_secured_listener(secured_broker):
    settings = secured(
        secured_broker.bootstrap,
        mechanism="SCRAM-SHA-512",
        cafile=secured_broker.broker.ca_file,
        partitions=2,
    )
    pods = [PodRequest(uid=f"pod-{index}", requests={"cpu": "100m"}) for index in range(20)]
    async with EyrieClient(settings) as client:
        for pod in pods:
            await client.publish_pod(pod)
        await client.flush()
        received = [pod async for pod in client.events("pod-requests")]
    assert sorted(received, key=lambda pod: pod.uid) == sorted(pods, key=lambda pod: pod.uid)


@pytest.mark.kafka
async def test_an_oversized_record_is_refused_with_one_line_and_topics_carry_the_limit(
    secured_broker, tmp_path
):
    settings = secured(
        secured_broker.bootstrap,
        mechanism="PLAIN",
        cafile=secured_broker.broker.ca_file,
        max_message_bytes=2048,
    )
    big = PodRequest(uid="big", labels={f"label-{index}": "x" * 50 for index in range(60)})
    async with EyrieClient(settings) as client:
        with pytest.raises(InvalidInput) as error:
            await client.publish_pod(big)
        await client.publish_pod(PodRequest(uid="small"))  # the client carries on
    assert re.fullmatch(
        rf"a record of [\d,]+ bytes for {re.escape(settings.topic('pod-requests'))} \(key 'big'\) is over "
        r"max_message_bytes \(2,048\)",
        str(error.value),
    )
    admin = AIOKafkaAdminClient(bootstrap_servers=settings.bootstrap_servers, **client_security(settings))
    await admin.start()
    try:
        described = await admin.describe_configs([topic_resource(settings.topic("pod-requests"))])
    finally:
        await admin.close()
    configs = {entry[0]: entry[1] for entry in described[0].resources[0][4]}
    assert configs["max.message.bytes"] == "2048"

    # The same from the command line: one line, exit 2, nothing published.
    document = tmp_path / "big.json"
    document.write_text(orjson.dumps(big.model_dump(mode="json")).decode())
    env = security_env(
        secured_broker, "PLAIN", EYRIE_TOPIC_PREFIX=settings.topic_prefix, EYRIE_MAX_MESSAGE_BYTES="2048"
    )
    result = eyrie("publish", document, env=env)
    assert result.returncode == 2, result.stderr
    assert one_line(result.stderr).startswith("error: a record of ")


@pytest.mark.kafka
@pytest.mark.slow
def test_a_worker_and_an_applier_place_a_pod_through_the_secured_listener(secured_broker, tmp_path):
    """`eyrie publish`, `eyrie worker`, `eyrie applier` and `eyrie decisions`, all over SASL_SSL; then a
    new worker, which rebuilds the shard from its partition (a consumer of its own) before the next pod."""
    prefix = f"w{uuid.uuid4().hex[:8]}."
    env = security_env(
        secured_broker,
        EYRIE_TOPIC_PREFIX=prefix,
        EYRIE_PARTITIONS="1",
        EYRIE_DATA_DIR=str(tmp_path / "faust"),
    )
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    node = {"type": "upsert", "node": {"name": "n1", "capacity": resources, "allocatable": resources}}

    def publish(*documents):
        path = tmp_path / "inputs.jsonl"
        path.write_text("".join(orjson.dumps(document).decode() + "\n" for document in documents))
        published = eyrie("publish", path, env=env)
        assert published.returncode == 0, published.stderr

    def decision_of(uid):
        deadline, decision = time.monotonic() + 120, None
        while time.monotonic() < deadline:
            # The flags, not the environment, carry the security settings here.
            flags = [
                "--security-protocol",
                "SASL_SSL",
                "--sasl-mechanism",
                "PLAIN",
                "--sasl-username",
                "alice",
            ]
            flags += [
                "--sasl-password-file",
                secured_broker.password_file,
                "--ssl-cafile",
                secured_broker.broker.ca_file,
            ]
            plain_env = {
                name: value for name, value in env.items() if not name.startswith(("EYRIE_S", "KAFKA_"))
            }
            result = eyrie("decisions", "-b", secured_broker.bootstrap, *flags, env=plain_env)
            assert result.returncode == 0, result.stderr
            decisions = [orjson.loads(line) for line in result.stdout.splitlines()]
            decision = next((d for d in decisions if d["uid"] == uid), None)
            if decision is not None and decision["status"] == "applied":
                break
            time.sleep(2)
        return decision

    def logs_text():
        return "".join(path.read_text(errors="replace") for path in sorted(tmp_path.glob("*.log")))

    running = [start_role("applier", env, tmp_path), start_role("worker", env, tmp_path)]
    try:
        publish(node, {"uid": "secure-pod", "requests": {"cpu": "1"}})
        decision = decision_of("secure-pod")
        assert decision is not None and decision["status"] == "applied", logs_text()[-3000:]
        assert decision["node"] == "n1"

        stop_all([running.pop()])
        running.append(start_role("worker", env, tmp_path, suffix="-2"))
        publish({"uid": "secure-pod-2", "requests": {"cpu": "1"}})
        decision = decision_of("secure-pod-2")
        assert decision is not None and decision["status"] == "applied", logs_text()[-3000:]
        restored = r"shard 0: (?:replayed sequencer records \d+\.\.\d+|restored from checkpoint)"
        assert re.search(restored, (tmp_path / "worker-2.log").read_text())
        assert ALICE not in logs_text()
    finally:
        stop_all(running)


@pytest.mark.kafka
@pytest.mark.slow
async def test_a_user_added_after_the_data_dir_was_formatted_gets_scram_credentials(secured_broker):
    """`up` on a data directory formatted without a user (or with an old password) adds it through the
    running broker. Runs last: it restarts the module's broker."""
    broker = secured_broker.broker
    assert broker.down()
    restarted = LocalBroker(
        broker.port,
        broker.data_dir,
        broker.controller_port,
        sasl_ssl_port=broker.sasl_ssl_port,
        sasl_users={"alice": ALICE, "carol": CAROL},
    )
    await asyncio.to_thread(restarted.up, 60.0)
    for mechanism in ("SCRAM-SHA-512", "PLAIN"):
        settings = secured(
            secured_broker.bootstrap, mechanism=mechanism, user="carol", password=CAROL, cafile=broker.ca_file
        )
        async with EyrieClient(settings) as client:
            await client.publish_pod(PodRequest(uid="carols-pod"))
            assert [pod.uid async for pod in client.events("pod-requests")] == ["carols-pod"]
    assert CAROL not in restarted.log_file.read_text(errors="replace")
    assert not list(restarted.security_dir.glob(".scram-*"))  # the request file with the password is gone
