"""A local Kubernetes control plane (etcd and kube-apiserver) for development and tests, and the rule that
picks which cluster to use.

The binaries are built from source with the Go toolchain, from the Go module ``k8s.io/kubernetes`` at one
pinned release, into a cache outside the repository: only the first use pays for the build, and nothing
needs Docker, kind or a release download. The same build makes kube-scheduler (the real scheduler of the
same release, to compare eyrie against) and kubectl, and etcd at the version that release's go.mod pins.

`LocalControlPlane` listens on 127.0.0.1 only, over TLS with a self-signed certificate, and accepts one
static bearer token (an admin user in ``system:masters``); authorization is Node,RBAC, so a request
without the token is refused like on a real cluster. Its kubeconfig is written into its data directory.
No controller manager and no kubelet run: objects are stored and served, nothing reconciles them.

`resolved_kubeconfig` picks a cluster for tests and scripts, first match wins:

1. ``--kubeconfig`` / ``KUBECONFIG`` when set: an existing cluster, used as is, nothing is started;
2. a `LocalControlPlane`.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import logging
import os
import re
import secrets
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from schemas.exceptions import ControlPlaneError
from streams.local import services
from streams.local.services import HOST

__all__ = [
    "BINARIES",
    "DEFAULT_PORT",
    "ETCD_MODULE",
    "HOST",
    "KUBERNETES_VERSION",
    "ClusterAccess",
    "ControlPlaneError",
    "ControlPlaneStatus",
    "LocalControlPlane",
    "build_binaries",
    "default_data_dir",
    "external_answers",
    "kube_cache_dir",
    "read_access",
    "resolved_control_plane",
    "resolved_kubeconfig",
]

log = logging.getLogger(__name__)

KUBERNETES_VERSION = "v1.36.3"
"""The Kubernetes release every binary is built from; its staging modules are the matching v0.x.y."""
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
"""etcd's main package; its version is whatever `KUBERNETES_VERSION`'s go.mod requires."""
DEFAULT_PORT = 6443
ADMIN_USER = "eyrie-admin"
BINARIES = ("kube-apiserver", "kube-scheduler", "kubectl", "etcd")
"""Build order: the API server first, so the packages it shares with the others are compiled once."""

_KUBERNETES_MODULE = "k8s.io/kubernetes"
_COMMANDS = {name: f"{_KUBERNETES_MODULE}/cmd/{name}" for name in BINARIES if name != "etcd"} | {
    "etcd": ETCD_MODULE
}
_SERVICE_RANGE = "10.0.0.0/24"
_GO_TIMEOUT_S = 3 * 3600.0  # a cold build took 5 min on two idle cores; far longer beside a busy test run
_DOWNLOAD_TIMEOUT_S = 900.0
_OPENSSL_TIMEOUT_S = 60.0
_STOP_TIMEOUT_S = 15.0
_PROBE_TIMEOUT_S = 2.0
_POLL_S = 0.25
# Every go build runs at the lowest priority with two threads unless GOMAXPROCS says otherwise: the first
# `up` often happens beside a test run or an editor on a two-core laptop or CI runner, which must stay usable.
_GO_NICE = "19"
_DEFAULT_GO_PROCS = "2"
_KLOG_ERROR = re.compile(r"^[EF]\d{4} ")  # klog's severity letter and month-day: E0722, F0722
_STAGING_REQUIRE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+v0\.0\.0\s*$", re.MULTILINE)
_STAGING_REPLACE = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", re.MULTILINE)
_ETCD_REQUIRE = re.compile(rf"^\s*{re.escape(ETCD_MODULE)}\s+(v[\w.+-]+)", re.MULTILINE)
_GO_DIRECTIVE = re.compile(r"^go\s+(\d+)\.(\d+)(?:\.(\d+))?\s*$", re.MULTILINE)
_GO_VERSION = re.compile(r"^go(\d+)\.(\d+)(?:\.(\d+))?")


Progress = Callable[[str], None]


# --------------------------------------------------------------------------------------------- paths


def default_data_dir() -> Path:
    """Where `LocalControlPlane` keeps etcd's data, keys, logs and the kubeconfig unless told otherwise."""
    return services.eyrie_home() / "kube"


def kube_cache_dir(version: str = KUBERNETES_VERSION) -> Path:
    """The per-user build cache, kept across clones and `make clean`."""
    return services.cache_dir(f"kubernetes-{version}")


# --------------------------------------------------------------------------------------------- tools


def _go() -> str:
    hint = "install Go 1.26+ (https://go.dev/dl); it builds Kubernetes once"
    return services.find_tool("go", hint, ControlPlaneError)


def _openssl() -> str:
    hint = "install OpenSSL 1.1.1+ (apt-get install openssl); it makes the TLS keys"
    return services.find_tool("openssl", hint, ControlPlaneError)


def _run(command: list[str], what: str, *, cwd: Path, env: dict[str, str], timeout: float) -> str:
    """A Go or OpenSSL step: they write their errors to stderr (Go's stdout is data, e.g. JSON)."""
    return services.run_tool(
        command,
        what,
        ControlPlaneError,
        timeout=timeout,
        cwd=cwd,
        env=env,
        reason=lambda done: services.last_lines(done.stderr, 3),
    )


# --------------------------------------------------------------------------------------------- build


def _go_environment() -> dict[str, str]:
    env = dict(os.environ)
    flags = [flag for flag in env.get("GOFLAGS", "").split() if not flag.startswith("-mod=")]
    # The generated go.mod has no go.sum yet: -mod=mod lets the build fill it in from the checksum database.
    env["GOFLAGS"] = " ".join([*flags, "-mod=mod"])
    env.setdefault("GOMAXPROCS", _DEFAULT_GO_PROCS)
    # Kubernetes builds its server binaries without cgo too; it also spares a C compiler.
    env["CGO_ENABLED"] = "0"
    return env


def _version_tuple(match: re.Match[str] | None) -> tuple[int, int, int] | None:
    if match is None:
        return None
    return int(match[1]), int(match[2]), int(match[3] or 0)


def _staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The staging modules: required at v0.0.0 and replaced by a directory of the kubernetes repository,
    which a module build does not have, so each must be replaced by its published release instead."""
    required = set(_STAGING_REQUIRE.findall(kubernetes_go_mod))
    replaced = set(_STAGING_REPLACE.findall(kubernetes_go_mod))
    return sorted(required & replaced)


def _build_go_mod(kubernetes_go_mod: str, version: str) -> str:
    staging = "v0." + version.removeprefix("v").split(".", 1)[1]  # v1.36.3 -> v0.36.3
    directive = _GO_DIRECTIVE.search(kubernetes_go_mod)
    go_line = f"go {directive[1]}.{directive[2]}.{directive[3] or 0}" if directive else "go 1.26.0"
    replaces = "".join(
        f"\t{module} => {module} {staging}\n" for module in _staging_modules(kubernetes_go_mod)
    )
    # etcd's main package is not imported by Kubernetes, so it is required here by name, at the version
    # Kubernetes pins (left out, `go build` would add the line itself and the file would change on disk).
    etcd = _ETCD_REQUIRE.search(kubernetes_go_mod)
    if etcd is None:
        raise ControlPlaneError(f"{_KUBERNETES_MODULE} {version}'s go.mod does not require {ETCD_MODULE}")
    return (
        "// Generated by streams/local/controlplane.py; rewritten whenever the pin changes.\n"
        f"module eyrie.local/kubernetes-build\n\n{go_line}\n\n"
        f"require (\n\t{_KUBERNETES_MODULE} {version}\n\t{ETCD_MODULE} {etcd[1]}\n)\n\n"
        f"replace (\n{replaces})\n"
    )


def _ldflags(name: str, version: str, build_date: str) -> str:
    """Stripped binaries; Kubernetes' own version stamp, which its release scripts set the same way
    (a module build has no git tree to read it from, and /version would say v0.0.0-master otherwise)."""
    flags = ["-s", "-w"]
    if name != "etcd":
        major, minor = version.removeprefix("v").split(".")[:2]
        for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
            flags += [
                f"-X {package}.gitVersion={version}",
                f"-X {package}.gitMajor={major}",
                f"-X {package}.gitMinor={minor}",
                f"-X {package}.gitTreeState=clean",
                f"-X {package}.buildDate={build_date}",
            ]
    return " ".join(flags)


def build_binaries(progress: Progress = log.info, version: str = KUBERNETES_VERSION) -> Path:
    """Return the directory holding `BINARIES`, building them with Go the first time only.

    The marker records a digest of everything the build depends on (go.mod, flags, Go version), written
    after the last binary, so an interrupted build or a changed pin builds again. The lock keeps two
    processes from building into the same directory; the loser finds the marker and returns.
    """
    cache = kube_cache_dir(version)
    bin_dir, marker = cache / "bin", cache / ".built"
    go = _go()
    env = _go_environment()
    go_version = _run([go, "env", "GOVERSION"], "go env", cwd=Path.home(), env=env, timeout=60.0).strip()

    def built(digest: str) -> bool:
        return (
            marker.is_file()
            and marker.read_text().strip() == digest
            and all(os.access(bin_dir / name, os.X_OK) for name in BINARIES)
        )

    with services.file_lock(
        cache / ".lock", _GO_TIMEOUT_S, f"building Kubernetes {version}", ControlPlaneError, poll=_POLL_S
    ):
        started = time.monotonic()
        source_dir = cache / "build"
        source_dir.mkdir(parents=True, exist_ok=True)
        # Once in the module cache this answers offline in a fraction of a second, so every call can
        # recompute the digest and notice a changed recipe.
        download = env | {"GOFLAGS": env["GOFLAGS"].replace("-mod=mod", "").strip()}
        info = json.loads(
            _run(
                [go, "mod", "download", "-json", f"{_KUBERNETES_MODULE}@{version}"],
                f"go mod download {_KUBERNETES_MODULE}@{version}",
                cwd=cache,
                env=download,
                timeout=_DOWNLOAD_TIMEOUT_S,
            )
        )
        kubernetes_go_mod = Path(info["GoMod"]).read_text()
        needed, have = (
            _version_tuple(_GO_DIRECTIVE.search(kubernetes_go_mod)),
            _version_tuple(_GO_VERSION.match(go_version)),
        )
        if needed is not None and have is not None and have < needed:
            raise ControlPlaneError(
                f"{go_version} is older than the Go {'.'.join(map(str, needed))} that Kubernetes {version} "
                "needs: install a newer Go"
            )
        # The release's own timestamp, so two builds of the pin report the same build date.
        build_date = json.loads(Path(info["Info"]).read_text())["Time"]
        go_mod = _build_go_mod(kubernetes_go_mod, version)
        digest = hashlib.sha256(
            json.dumps(
                {
                    "go.mod": go_mod,
                    "go": go_version,
                    "ldflags": {name: _ldflags(name, version, build_date) for name in BINARIES},
                    "commands": _COMMANDS,
                },
                sort_keys=True,
            ).encode()
        ).hexdigest()
        if built(digest):
            return bin_dir
        progress(f"kube: building Kubernetes {version} from the Go module proxy's {_KUBERNETES_MODULE}")
        marker.unlink(missing_ok=True)
        if not (source_dir / "go.mod").is_file() or (source_dir / "go.mod").read_text() != go_mod:
            (source_dir / "go.mod").write_text(go_mod)
            (source_dir / "go.sum").unlink(missing_ok=True)
        bin_dir.mkdir(parents=True, exist_ok=True)
        for index, name in enumerate(BINARIES, 1):
            progress(
                f"kube: building {name} ({index}/{len(BINARIES)}) with {go_version} into {bin_dir} "
                "(first use only: 5-10 min on 2 cores)"
            )
            target = bin_dir / f".{name}.tmp"
            _run(
                [
                    "nice",
                    "-n",
                    _GO_NICE,
                    go,
                    "build",
                    "-trimpath",
                    f"-ldflags={_ldflags(name, version, build_date)}",
                    "-o",
                    str(target),
                    _COMMANDS[name],
                ],
                f"go build {_COMMANDS[name]}",
                cwd=source_dir,
                env=env,
                timeout=_GO_TIMEOUT_S,
            )
            target.replace(bin_dir / name)
        services.write_replacing(marker, digest + "\n")
        progress(f"kube: built {', '.join(BINARIES)} in {time.monotonic() - started:.0f} s")
    return bin_dir


# ------------------------------------------------------------------------------------------- access


@dataclass(frozen=True, slots=True)
class ClusterAccess:
    """How to reach a cluster's API server: its URL, the CA to verify it with, and a bearer token."""

    server: str
    ca_pem: str | None
    insecure: bool
    token: str | None

    def ssl_context(self) -> ssl.SSLContext:
        if self.insecure:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            return context
        return ssl.create_default_context(cadata=self.ca_pem) if self.ca_pem else ssl.create_default_context()

    def request(
        self, method: str, path: str, body: Any = None, *, token: bool = True, timeout: float = 10.0
    ) -> tuple[int, bytes]:
        """One HTTP request; the status and body, also for 4xx/5xx answers. Without `token`, anonymous."""
        headers = {"Accept": "application/json"}
        if token and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.server + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=timeout, context=self.ssl_context()) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())


def read_access(kubeconfig: str | Path) -> ClusterAccess:
    """The current context's cluster and user (`streams.kube.api.KubeConfig` reads the kubeconfig, a
    KUBECONFIG list too); a token file is read once, here."""
    from streams.kube.api import KubeConfig

    config = KubeConfig.from_kubeconfig(kubeconfig)
    token = config.token
    if token is None and config.token_file is not None:
        try:
            token = config.token_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ControlPlaneError(f"kubeconfig {kubeconfig}: token file: {exc}") from None
    return ClusterAccess(server=config.server, ca_pem=config.ca_pem, insecure=config.insecure, token=token)


def _ready(access: ClusterAccess, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    try:
        status, body = access.request("GET", "/readyz", timeout=timeout)
    except (OSError, ssl.SSLError):
        return False
    return status == 200 and body.strip() == b"ok"


def _answers(access: ClusterAccess, timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """Any HTTP answer from /readyz: a cluster that refuses anonymous health checks still answers."""
    try:
        status, body = access.request("GET", "/readyz", timeout=timeout)
    except (OSError, ssl.SSLError):
        return False
    return (status == 200 and body.strip() == b"ok") or status in (401, 403)


def resolved_kubeconfig(explicit: str | Path | None = None) -> str | None:
    """The kubeconfig of an existing cluster when one is named (`explicit`, else ``KUBECONFIG``), else None:
    the local control plane."""
    if explicit is not None and str(explicit).strip():
        return str(explicit)
    return os.environ.get("KUBECONFIG", "").strip() or None


def external_answers(kubeconfig: str) -> bool:
    return _answers(read_access(kubeconfig))


# -------------------------------------------------------------------------------------- local plane


@dataclass(frozen=True, slots=True)
class ControlPlaneStatus:
    """What `LocalControlPlane.status` found. `ready` is only ever true while both processes run."""

    server: str
    etcd_pid: int | None
    apiserver_pid: int | None
    ready: bool

    @property
    def running(self) -> bool:
        return self.etcd_pid is not None and self.apiserver_pid is not None

    @property
    def partly_running(self) -> bool:
        return (self.etcd_pid is None) != (self.apiserver_pid is None)


class LocalControlPlane:
    """etcd and kube-apiserver whose state lives in `data_dir`.

    ``state.json`` records the ports chosen by the first `up`, so `status` and `down` in another process
    find the same server; pid files link the processes, and a pid is trusted only while its command line
    still names this data directory, so a stale file after a reboot or pid reuse reads as "not running".
    """

    def __init__(self, data_dir: Path | str | None = None, port: int | None = None) -> None:
        """`port` is the API server's; None keeps the one recorded by an earlier `up` (else 6443)."""
        self.data_dir = Path(data_dir if data_dir is not None else default_data_dir()).expanduser().resolve()
        recorded = self._state().get("port")
        self.port = port if port is not None else int(recorded) if recorded else DEFAULT_PORT
        self._procs: dict[int, subprocess.Popen[bytes]] = {}

    def __repr__(self) -> str:
        return f"LocalControlPlane(data_dir='{self.data_dir}', port={self.port})"

    @property
    def server(self) -> str:
        return f"https://{HOST}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.data_dir / "kubeconfig"

    @property
    def pki_dir(self) -> Path:
        return self.data_dir / "pki"

    def log_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.log"

    def _pid_file(self, name: str) -> Path:
        return self.data_dir / f"{name}.pid"

    @property
    def _token_file(self) -> Path:
        return self.pki_dir / "tokens.csv"

    @property
    def _etcd_dir(self) -> Path:
        return self.data_dir / "etcd"

    # ------------------------------------------------------------------------------------- public

    def status(self) -> ControlPlaneStatus:
        etcd, apiserver = self._running_pid("etcd"), self._running_pid("kube-apiserver")
        ready = etcd is not None and apiserver is not None and self._ready()
        return ControlPlaneStatus(server=self.server, etcd_pid=etcd, apiserver_pid=apiserver, ready=ready)

    def up(self, timeout: float = 120.0, progress: Progress = log.info) -> Path:
        """Start etcd and kube-apiserver unless they run; return the kubeconfig once /readyz says ok.

        `timeout` bounds the wait for readiness after launch; building the binaries on first use is not
        counted. Processes this call launched that then fail to get ready are stopped again, so a failed
        `up` leaves nothing behind.
        """
        starting = f"starting the control plane in {self.data_dir}"
        with services.file_lock(
            self.data_dir / ".lock", timeout + 60.0, starting, ControlPlaneError, poll=_POLL_S
        ):
            state = self.status()
            if state.running:
                if (running_port := self._state().get("port")) != self.port:
                    raise ControlPlaneError(
                        f"the control plane in {self.data_dir} already runs on port {running_port}; "
                        f"stop it with `eyrie kube down` to move it to {self.port}"
                    )
                if not state.ready:
                    self._wait_ready(timeout, launched=False)
                return self.kubeconfig
            if state.partly_running:
                # Half a control plane (one process died) is restarted whole rather than patched.
                progress(f"kube: restarting the half-running control plane in {self.data_dir}")
                self.down()
            services.require_free_ports([(self.port, "port", "--port")], ControlPlaneError)
            bin_dir = build_binaries(progress)
            self.data_dir.mkdir(parents=True, exist_ok=True)
            progress(f"kube: preparing keys and the kubeconfig in {self.data_dir}")
            self._ensure_keys()
            etcd_client, etcd_peer = self._etcd_ports()
            self._write_state(etcd_client, etcd_peer)
            self._write_kubeconfig()
            try:
                progress(f"kube: starting etcd on {HOST}:{etcd_client}")
                self._launch("etcd", self._etcd_command(bin_dir, etcd_client, etcd_peer))
                self._wait_etcd(etcd_client, timeout)
                progress(f"kube: starting kube-apiserver {KUBERNETES_VERSION} on {self.server}")
                self._launch("kube-apiserver", self._apiserver_command(bin_dir, etcd_client))
                self._wait_ready(timeout, launched=True)
            except BaseException:
                self.down()
                raise
            progress(f"kube: control plane ready on {self.server}")
            return self.kubeconfig

    def down(self, timeout: float = _STOP_TIMEOUT_S) -> bool:
        """Stop kube-apiserver, then etcd (SIGTERM, SIGKILL after `timeout` s). False if neither ran."""
        stopped = False
        for name in ("kube-apiserver", "etcd"):
            pid = self._running_pid(name)
            if pid is not None:
                alive = functools.partial(self._alive, name)
                services.stop_process(pid, name, alive, timeout, ControlPlaneError, poll=_POLL_S)
                stopped = True
            self._pid_file(name).unlink(missing_ok=True)
        return stopped

    # ------------------------------------------------------------------------------------ state

    def _state(self) -> dict[str, Any]:
        try:
            state = json.loads((self.data_dir / "state.json").read_text())
        except (OSError, ValueError):
            return {}
        return state if isinstance(state, dict) else {}

    def _write_state(self, etcd_client: int, etcd_peer: int) -> None:
        state = {"port": self.port, "etcd_client_port": etcd_client, "etcd_peer_port": etcd_peer}
        (self.data_dir / "state.json").write_text(json.dumps(state, indent=2) + "\n")

    def _etcd_ports(self) -> tuple[int, int]:
        """etcd's ports of the last start when still free: etcd keeps its peer address in its data, so
        moving it is avoided; otherwise two fresh ones (a single member never dials its peers)."""
        state = self._state()
        client, peer = state.get("etcd_client_port"), state.get("etcd_peer_port")
        if (
            isinstance(client, int)
            and isinstance(peer, int)
            and self.port not in (client, peer)
            and not services.port_taken(client)
            and not services.port_taken(peer)
        ):
            return client, peer
        ports = [port for port in services.free_ports(3) if port != self.port]
        return ports[0], ports[1]

    # --------------------------------------------------------------------------------------- keys

    def _ensure_keys(self) -> None:
        """A self-signed serving certificate, service-account signing keys and the admin token, made once
        per data directory; the certificate last, as the sign that the set is complete."""
        pki = self.pki_dir
        pki.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not self._token_file.is_file():
            token = secrets.token_urlsafe(32)
            # token,user,uid,"groups": system:masters is bound to cluster-admin by the bootstrap RBAC policy.
            services.write_private(self._token_file, f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        crt, key = pki / "serving.crt", pki / "serving.key"
        if crt.is_file() and key.is_file() and (pki / "sa.pub").is_file():
            return
        openssl = _openssl()
        env = dict(os.environ)
        _run(
            [openssl, "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "sa.key"],
            "openssl genpkey (service-account signing key)",
            cwd=pki,
            env=env,
            timeout=_OPENSSL_TIMEOUT_S,
        )
        _run(
            [openssl, "pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"],
            "openssl pkey (service-account public key)",
            cwd=pki,
            env=env,
            timeout=_OPENSSL_TIMEOUT_S,
        )
        _run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "serving.key.tmp",
                "-out",
                "serving.crt.tmp",
                "-days",
                "3650",
                "-subj",
                "/CN=eyrie local kube-apiserver",
                "-addext",
                f"subjectAltName=IP:{HOST},DNS:localhost",
                # Its own CA too, so the kubeconfig can name it as the one to trust; strict verifiers
                # (Python 3.13's default) want the key usages spelled out for that.
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,digitalSignature,keyCertSign",
                "-addext",
                "extendedKeyUsage=serverAuth",
            ],
            "openssl req (serving certificate)",
            cwd=pki,
            env=env,
            timeout=_OPENSSL_TIMEOUT_S,
        )
        for name in ("sa.key", "serving.key.tmp"):
            os.chmod(pki / name, 0o600)
        (pki / "serving.key.tmp").replace(key)
        (pki / "serving.crt.tmp").replace(crt)

    def _token(self) -> str:
        return self._token_file.read_text(encoding="ascii").split(",", 1)[0].strip()

    def _access(self) -> ClusterAccess:
        ca = (self.pki_dir / "serving.crt").read_text(encoding="ascii")
        return ClusterAccess(server=self.server, ca_pem=ca, insecure=False, token=self._token())

    def _write_kubeconfig(self) -> None:
        ca = base64.b64encode((self.pki_dir / "serving.crt").read_bytes()).decode("ascii")
        name = "eyrie-local"
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": name, "cluster": {"server": self.server, "certificate-authority-data": ca}}
            ],
            "users": [{"name": ADMIN_USER, "user": {"token": self._token()}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": ADMIN_USER}}],
            "current-context": name,
        }
        services.write_private(self.kubeconfig, yaml.safe_dump(config, sort_keys=False))

    # ------------------------------------------------------------------------------------ process

    def _etcd_command(self, bin_dir: Path, client: int, peer: int) -> list[str]:
        client_url, peer_url = f"http://{HOST}:{client}", f"http://{HOST}:{peer}"
        return [
            str(bin_dir / "etcd"),
            "--name=eyrie",
            f"--data-dir={self._etcd_dir}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=eyrie={peer_url}",
            "--initial-cluster-state=new",
            # One member, loopback only: nothing else to secure or to talk to.
            "--log-level=warn",
        ]

    def _apiserver_command(self, bin_dir: Path, etcd_client: int) -> list[str]:
        pki = self.pki_dir
        return [
            str(bin_dir / "kube-apiserver"),
            f"--bind-address={HOST}",
            f"--advertise-address={HOST}",
            f"--secure-port={self.port}",
            f"--etcd-servers=http://{HOST}:{etcd_client}",
            f"--tls-cert-file={pki / 'serving.crt'}",
            f"--tls-private-key-file={pki / 'serving.key'}",
            f"--token-auth-file={self._token_file}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={self.server}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={_SERVICE_RANGE}",
            # Endpoints may not hold a loopback address, so the reconciler that publishes the API server's
            # own address would fail every few seconds; nothing in-cluster needs to reach it anyway.
            "--endpoint-reconciler-type=none",
            # No controller manager runs, so no namespace ever gets its "default" service account, and this
            # plugin would refuse every pod that does not name one.
            "--disable-admission-plugins=ServiceAccount",
        ]

    def _launch(self, name: str, command: list[str]) -> int:
        with self.log_file(name).open("ab") as out:
            # A session of its own: a Ctrl-C in the shell that ran `up` must not stop it.
            proc = services.launch(
                command, out, self._pid_file(name), cwd=self.data_dir, start_new_session=True
            )
        self._procs[proc.pid] = proc
        return proc.pid

    def _alive(self, name: str, pid: int) -> bool:
        marker = f"--data-dir={self._etcd_dir}" if name == "etcd" else f"--token-auth-file={self._token_file}"
        return services.process_alive(pid, self._procs.get(pid), (name, marker))

    def _running_pid(self, name: str) -> int | None:
        return services.running_pid(self._pid_file(name), functools.partial(self._alive, name))

    # ---------------------------------------------------------------------------------- readiness

    def _ready(self) -> bool:
        try:
            return _ready(self._access())
        except OSError:
            return False

    def _wait_etcd(self, port: int, timeout: float) -> None:
        if not services.poll_until(
            lambda: _etcd_healthy(port) or self._check_alive("etcd"), timeout, _POLL_S
        ):
            raise ControlPlaneError(
                f"etcd did not become healthy on {HOST}:{port} within {timeout:g} s; "
                f"see {self.log_file('etcd')}"
            )

    def _wait_ready(self, timeout: float, *, launched: bool) -> None:
        if not services.poll_until(
            lambda: self._ready() or self._check_alive("etcd", "kube-apiserver"), timeout, _POLL_S
        ):
            verb = "did not become ready" if launched else "runs but is not ready"
            raise ControlPlaneError(
                f"kube-apiserver on {self.server} {verb} within {timeout:g} s: "
                f"{self._log_reason('kube-apiserver')}; see {self.log_file('kube-apiserver')}"
            )

    def _check_alive(self, *names: str) -> bool:
        """False, for a readiness poll to go on waiting; `ControlPlaneError` if one of `names` has exited."""
        for name in names:
            if self._running_pid(name) is None:
                raise ControlPlaneError(
                    f"{name} exited while starting: {self._log_reason(name)}; see {self.log_file(name)}"
                )
        return False

    def _log_reason(self, name: str) -> str:
        """The last error line of this start's log (klog's E/F lines, etcd's JSON error records)."""
        try:
            with self.log_file(name).open("rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - 64 * 1024))
                lines = handle.read().decode(errors="replace").splitlines()
        except OSError:
            return "no log"
        for line in reversed(lines):
            if _KLOG_ERROR.match(line) or line.startswith("Error:"):
                return line.strip()[:400]
            if line.startswith("{"):
                with contextlib.suppress(ValueError):
                    record = json.loads(line)
                    if record.get("level") in ("error", "fatal", "panic"):
                        return f"{record.get('msg')}: {record.get('error', '')}".strip(": ")[:400]
        return services.last_lines("\n".join(lines))[:400]


# ------------------------------------------------------------------------------------------ helpers


def _etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://{HOST}:{port}/health", timeout=_PROBE_TIMEOUT_S) as reply:
            health = json.loads(reply.read())
    except (OSError, ValueError):
        return False
    return isinstance(health, dict) and health.get("health") == "true"


@contextlib.contextmanager
def resolved_control_plane(timeout: float = 180.0, progress: Progress = log.info) -> Iterator[str]:
    """Yield a kubeconfig for a working cluster, the way `resolved_kubeconfig` picks it: ``KUBECONFIG``'s,
    used as is, else a `LocalControlPlane` on a free port in a temporary directory, built on first use and
    stopped and removed on exit."""
    if (existing := resolved_kubeconfig()) is not None:
        progress(f"kube: using the existing cluster of KUBECONFIG={existing}")
        yield existing
        return
    with tempfile.TemporaryDirectory(prefix="eyrie-kube-") as tmp:
        plane = LocalControlPlane(data_dir=tmp, port=services.free_ports(1)[0])
        try:
            yield str(plane.up(timeout=timeout, progress=progress))
        finally:
            plane.down()
