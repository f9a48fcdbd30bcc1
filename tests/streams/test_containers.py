"""The container files, read as Docker would read them (Docker does not run here), and the web server's
listen address that a container needs.

- docker-compose.yml: every eyrie service's command parses as the CLI's and names only flags its `--help`
  lists, every long-running service has a health check that the image can run (no curl), and state lives
  in named volumes that `docker compose down` keeps and `down -v` drops all together.
- Dockerfile: the dependencies are installed from pyproject.toml alone, before any source is copied.
- `--web-host`: a worker started with `--web-host 0.0.0.0 --web-port P` answers /health on an address
  other than loopback.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
import typer
import yaml

from streams.cli import app as cli_app
from streams.local.broker import free_port
from streams.runtime.app import create_app
from streams.settings import Settings, load_settings
from tests.commands import REPO, run_module

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text(encoding="utf-8"))
SERVICES: dict[str, dict[str, Any]] = COMPOSE["services"]
EYRIE_SERVICES = sorted(name for name, service in SERVICES.items() if service.get("build") == ".")
ONE_SHOT = sorted(
    {
        dependency
        for service in SERVICES.values()
        for dependency, condition in (service.get("depends_on") or {}).items()
        if condition.get("condition") == "service_completed_successfully"
    }
)
LONG_RUNNING = sorted(set(SERVICES) - set(ONE_SHOT))
STATEFUL = ["applier", "kafka", "worker"]

# ------------------------------------------------------------------------------------------- builders


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) per instruction, continuation lines joined, comments dropped."""
    text = (REPO / "Dockerfile").read_text(encoding="utf-8")
    joined = re.sub(r"\\\n", " ", text)
    instructions = []
    for raw in joined.splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def dockerfile_env() -> dict[str, str]:
    return dict(
        arguments.split("=", 1) for keyword, arguments in dockerfile_instructions() if keyword == "ENV"
    )


def command_words(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return list(command) if isinstance(command, list) else shlex.split(command)


def resolve(words: list[str]) -> tuple[Any, list[str], list[str]]:
    """(the subcommand as the CLI builds it, its path such as ["topics", "create"], the arguments after
    it). Groups are told by their `get_command`: this Typer has its own copy of Click's classes."""
    command: Any = typer.main.get_command(cli_app)
    path: list[str] = []
    rest = list(words)
    while hasattr(command, "get_command") and rest and not rest[0].startswith("-"):
        found = command.get_command(command.context_class(command), rest[0])
        assert found is not None, f"eyrie has no command {' '.join([*path, rest[0]])}"
        path.append(rest.pop(0))
        command = found
    return command, path, rest


def health_url(service: dict[str, Any]) -> str:
    test = service["healthcheck"]["test"]
    script = " ".join(test) if isinstance(test, list) else test
    match = re.search(r"https?://[^'\" ]+", script)
    assert match, script
    return match[0]


def option_value(words: list[str], flag: str) -> str | None:
    return words[words.index(flag) + 1] if flag in words else None


def other_address() -> str:
    """An address of this machine other than 127.0.0.1, on which a server bound to loopback does not
    answer: the machine's own address where it has one, else 127.0.0.2 (on Linux all of 127/8 is
    loopback, and a socket bound to 127.0.0.1 does not accept on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # a UDP connect only picks the route; nothing is sent
            address = str(probe.getsockname()[0])
        except OSError:
            address = "127.0.0.1"
    return "127.0.0.2" if address.startswith("127.") else address


def get_health(host: str, port: int, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/health", timeout=2) as response:
                return dict(json.loads(response.read()))
        except (OSError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


# ------------------------------------------------------------------------------------- docker-compose


def test_the_compose_file_has_the_services_these_checks_are_about():
    assert EYRIE_SERVICES == ["applier", "topics", "worker"]
    assert ONE_SHOT == ["topics"]
    assert LONG_RUNNING == ["applier", "kafka", "worker"]


@pytest.mark.parametrize("name", EYRIE_SERVICES)
def test_every_eyrie_service_command_names_only_flags_that_the_command_help_lists(name):
    command, path, arguments = resolve(command_words(SERVICES[name]))
    assert not hasattr(command, "get_command"), f"{name}: {' '.join(path)} is a group, not a command"
    flags = [word.split("=", 1)[0] for word in arguments if word.startswith("--")]
    shown = run_module("streams.cli", *path, "--help", env={**os.environ, "COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    for flag in flags:
        assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", shown.stdout), (name, flag)
    # And the whole argument list parses, values included, as the container's `eyrie` would parse it.
    command.make_context(" ".join(["eyrie", *path]), list(arguments))


@pytest.mark.parametrize("name", ["applier", "worker"])
def test_the_worker_and_the_applier_serve_their_web_pages_on_every_interface_of_their_container(name):
    words = command_words(SERVICES[name])
    port = option_value(words, "--web-port")
    assert port is not None, f"{name}: no --web-port, so no /health for its health check"
    assert option_value(words, "--web-host") == "0.0.0.0", f"{name}: loopback is unreachable from outside"
    published = [str(mapping).rsplit(":", 1)[-1] for mapping in SERVICES[name].get("ports", [])]
    assert port in published, f"{name}: port {port} is not published"


@pytest.mark.parametrize("name", LONG_RUNNING)
def test_every_long_running_service_has_a_health_check(name):
    check = SERVICES[name].get("healthcheck")
    assert check and check.get("test"), name
    assert not check.get("disable"), name


@pytest.mark.parametrize("name", ["applier", "worker"])
def test_the_eyrie_health_checks_ask_their_own_health_page_with_python_not_curl(name):
    service = SERVICES[name]
    test = service["healthcheck"]["test"]
    script = " ".join(test) if isinstance(test, list) else test
    # python:3.11-slim ships neither curl nor wget.
    assert "curl" not in script and "wget" not in script, script
    assert test[:3] == ["CMD", "python", "-c"], test
    url = health_url(service)
    assert url == f"http://127.0.0.1:{option_value(command_words(service), '--web-port')}/health", url
    compile(test[3], f"{name} health check", "exec")  # the script is valid Python


def test_every_eyrie_setting_the_compose_file_sets_exists():
    for name in EYRIE_SERVICES:
        for variable in SERVICES[name].get("environment") or {}:
            if variable.startswith("EYRIE_"):
                assert variable.removeprefix("EYRIE_").lower() in Settings.model_fields, (name, variable)


@pytest.mark.parametrize("name", STATEFUL)
def test_every_stateful_service_keeps_its_state_on_a_declared_named_volume(name):
    service = SERVICES[name]
    mounts = [str(volume).split(":") for volume in service.get("volumes", [])]
    assert mounts, f"{name}: state inside the container would be dropped by `down` alone"
    declared = set(COMPOSE.get("volumes") or {})
    for mount in mounts:
        assert len(mount) >= 2 and mount[0] in declared, f"{name}: {mount} is not a declared named volume"
    targets = {mount[1] for mount in mounts}
    environment = service.get("environment") or {}
    if name == "kafka":
        assert environment["KAFKA_LOG_DIRS"] in targets, "the broker's log directory is not on the volume"
    else:
        assert environment.get("EYRIE_STORE") == "rocksdb://", name
        data_dir = environment.get("EYRIE_DATA_DIR") or dockerfile_env()["EYRIE_DATA_DIR"]
        assert data_dir in targets, f"{name}: its tables ({data_dir}) are not on the volume"


def test_every_declared_volume_is_used_so_down_and_down_v_treat_all_state_alike():
    used = {
        str(volume).split(":")[0] for service in SERVICES.values() for volume in service.get("volumes", [])
    }
    assert used == set(COMPOSE["volumes"])
    # None of them is external: `down -v` drops every one, `down` keeps every one.
    for name, volume in COMPOSE["volumes"].items():
        assert not (volume or {}).get("external"), name


# ------------------------------------------------------------------------------------------ Dockerfile


def test_the_dockerfile_installs_dependencies_from_pyproject_alone_before_copying_the_sources():
    instructions = dockerfile_instructions()
    packages = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    sources = {pattern.rstrip("*") for pattern in packages["packages"]["find"]["include"]}
    copies = [(i, args.split()) for i, (keyword, args) in enumerate(instructions) if keyword == "COPY"]
    installs = [
        i for i, (keyword, args) in enumerate(instructions) if keyword == "RUN" and "pip install" in args
    ]
    assert len(installs) == 2, installs

    dependencies, package = installs
    copied_before = [word for i, words in copies if i < dependencies for word in words[:-1]]
    assert copied_before == ["pyproject.toml"], copied_before
    assert "--no-deps" not in instructions[dependencies][1]

    source_copies = {words[0]: i for i, words in copies if words[0] in sources}
    assert set(source_copies) == sources, f"not copied: {sources - set(source_copies)}"
    assert all(dependencies < i < package for i in source_copies.values())
    assert "--no-deps" in instructions[package][1], "the package's install would redo the dependencies"
    readme = next(i for i, words in copies if "README.md" in words[:-1])  # pyproject's `readme`
    assert readme < package


def test_the_dockerfile_dependency_layer_reads_exactly_the_project_dependencies(tmp_path):
    instructions = dockerfile_instructions()
    run = next(args for keyword, args in instructions if keyword == "RUN" and "tomllib" in args)
    script = shlex.split(run)[2]  # python -c SCRIPT > ...
    (tmp_path / "pyproject.toml").write_bytes((REPO / "pyproject.toml").read_bytes())
    printed = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert printed == project["dependencies"]


def test_the_docker_build_context_keeps_the_sources():
    ignored = (REPO / ".dockerignore").read_text(encoding="utf-8").split()
    for needed in ("pyproject.toml", "README.md", "schemas", "portraits", "policies", "streams"):
        assert needed not in ignored, needed


# ------------------------------------------------------------------------------------------ web host


@pytest.mark.parametrize(
    ("case", "env", "expected"),
    [
        ("Without a setting the web server listens on loopback only.", {}, "127.0.0.1"),
        ("EYRIE_WEB_HOST sets the address.", {"EYRIE_WEB_HOST": "0.0.0.0"}, "0.0.0.0"),
    ],
)
def test_the_web_server_listens_on_the_web_host_setting(case, env, expected, tmp_path):
    app = create_app(load_settings(env=env, data_dir=str(tmp_path)), "worker", web_port=free_port())
    assert app.conf.web_bind == expected, case


@pytest.mark.parametrize(
    ("case", "args", "error"),
    [
        (
            "A web host without a web port is refused: no web server would run.",
            ["--web-host", "0.0.0.0"],
            "error: --web-host: only with --web-port (without it no web server runs)",
        ),
        (
            "A web host that is neither an address nor a host name is refused, naming the option.",
            ["--web-host", "every interface", "--web-port", "6066"],
            "error: --web-host: 'every interface' is neither an IP address nor a host name",
        ),
        (
            "A web port outside 1-65535 is refused, naming the option.",
            ["--web-port", "0"],
            "error: --web-port: 0 is not a TCP port (1-65535)",
        ),
    ],
)
@pytest.mark.parametrize("role", ["worker", "applier"])
def test_bad_web_options_stop_the_worker_and_the_applier_with_one_line(case, args, error, role):
    # An unroutable broker: the check must come before anything connects.
    done = run_module("streams.cli", role, *args, "-b", "127.0.0.1:1", timeout=60.0)
    lines = done.stderr.strip().splitlines()
    assert (done.returncode, len(lines)) == (2, 1), (case, done.stderr)
    assert lines[0].startswith(error), (case, lines[0])


@pytest.mark.kafka
def test_a_worker_started_with_web_host_0_0_0_0_answers_health_on_a_non_loopback_address(
    kafka_bootstrap, tmp_path
):
    port = free_port()
    env = {
        **os.environ,
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "EYRIE_TOPIC_PREFIX": f"web{uuid.uuid4().hex[:8]}.",
        "EYRIE_PARTITIONS": "1",
        "EYRIE_DATA_DIR": str(tmp_path / "faust"),
    }
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [sys.executable, "-m", "streams.cli", "worker", "--web-host", "0.0.0.0", "--web-port", str(port)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        address = other_address()
        try:
            health = get_health(address, port, timeout=120.0)
        except OSError:
            pytest.fail(f"no /health on {address}:{port}: {log.read_text(errors='replace')[-2000:]}")
        assert (health["status"], health["role"]) == ("ok", "worker")
        assert get_health("127.0.0.1", port, timeout=5.0)["role"] == "worker"
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
