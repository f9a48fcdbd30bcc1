"""What the local services (`streams.local.broker`'s Kafka broker, `streams.local.controlplane`'s etcd and
kube-apiserver) share: where they keep state and caches, finding their tools, locking a directory, waiting
for a condition, running a tool to completion, free ports on 127.0.0.1, private files, and the life of a
background process that outlives the command which started it.

Such a process is known by its pid file only. A pid is trusted while the process's command line still holds
the markers its service names (its data directory, say), so a stale pid file after a reboot or pid reuse
reads as "not running".

Every function that can fail takes the service's own error class (`BrokerError`, `ControlPlaneError`), so
each service keeps raising its own error.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "HOST",
    "cache_dir",
    "eyrie_home",
    "file_lock",
    "find_tool",
    "free_port",
    "free_ports",
    "last_lines",
    "launch",
    "poll_until",
    "port_taken",
    "process_alive",
    "require_free_ports",
    "run_captured",
    "run_tool",
    "running_pid",
    "stop_process",
    "write_private",
    "write_replacing",
]

log = logging.getLogger(__name__)

HOST = "127.0.0.1"
"""Every local service listens on loopback only."""

_KILL_GRACE_S = 5.0

ErrorClass = Callable[[str], Exception]


# --------------------------------------------------------------------------------------------- paths


def eyrie_home() -> Path:
    """Where the services keep their data directories unless told otherwise (``EYRIE_HOME``)."""
    return Path(os.environ.get("EYRIE_HOME") or Path.home() / ".local" / "share" / "eyrie").expanduser()


def cache_dir(name: str) -> Path:
    """A per-user cache directory; outside the repository so a clean clone or `make clean` keeps it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser()
    return cache / "eyrie" / name


def write_replacing(path: Path, text: str) -> None:
    """Write `text` beside `path`, then move it over: a reader sees the old text or the new, never half."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_private(path: Path, text: str) -> None:
    """Write `text` readable by its owner only, never briefly world-readable."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
    tmp.replace(path)


# --------------------------------------------------------------------------------------------- tools


def find_tool(name: str, hint: str, error: ErrorClass) -> str:
    """`name` on PATH; else `error` saying so, with `hint` on how to install it."""
    found = shutil.which(name)
    if found is None:
        raise error(f"{name} not found on PATH: {hint}")
    return found


def run_captured(
    command: list[str], *, timeout: float, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `command` to completion with no input and its output captured as text; its exit status is the
    caller's to judge. `subprocess.TimeoutExpired` after `timeout` s."""
    return subprocess.run(
        command,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def last_lines(text: str, count: int = 1) -> str:
    """The last `count` non-blank lines of a tool's output on one line, the likeliest to name its failure."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return " | ".join(lines[-count:]) if lines else "no output"


def run_tool(
    command: list[str],
    what: str,
    error: ErrorClass,
    *,
    timeout: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    reason: Callable[[subprocess.CompletedProcess[str]], str] | None = None,
) -> str:
    """Run a tool to completion and return its stdout. A failure is one line of `error` naming `what`: its
    exit status and `reason` (by default the last line it printed), or that it did not finish in time."""
    try:
        done = run_captured(command, timeout=timeout, cwd=cwd, env=env)
    except subprocess.TimeoutExpired:
        raise error(f"{what} did not finish within {timeout:g} s") from None
    if done.returncode != 0:
        cause = reason(done) if reason is not None else last_lines(done.stdout + done.stderr)
        raise error(f"{what} failed (exit {done.returncode}): {cause}")
    return done.stdout


# ----------------------------------------------------------------------------------------- waiting


def poll_until(done: Callable[[], bool], timeout: float, poll: float) -> bool:
    """Call `done` every `poll` s until it is true (True) or `timeout` s have passed (False). `done` is
    always called at least once, and may raise to stop the wait early."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)
    return True


@contextlib.contextmanager
def file_lock(path: Path, timeout: float, what: str, error: ErrorClass, *, poll: float) -> Iterator[None]:
    """An exclusive advisory lock; polled rather than blocking so a stuck holder cannot hang us forever."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:

        def locked() -> bool:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False
            return True

        if not poll_until(locked, timeout, poll):
            raise error(f"{what}: another process has held {path} for {timeout:g} s; is it stuck?")
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# ------------------------------------------------------------------------------------------- ports


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing was bound to a moment ago."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports on 127.0.0.1 that nothing was bound to a moment ago."""
    # All sockets stay open until every port is picked, so the kernel cannot hand out one port twice.
    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(count):
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind((HOST, 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def port_taken(port: int) -> bool:
    """Whether another process holds `port` on 127.0.0.1 (listening or bound)."""
    # SO_REUSEADDR mirrors what the JVM and Go servers set, so sockets left in TIME_WAIT by a service that
    # just stopped do not count as taken, while a live listener or bound socket does.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
        return False


def require_free_ports(ports: Iterable[tuple[int, str, str]], error: ErrorClass) -> None:
    """`error` naming the first of `ports` ``(port, what it is, the option that moves it)`` that another
    process holds on 127.0.0.1."""
    for port, what, option in ports:
        if port_taken(port):
            raise error(f"{what} {port} on {HOST} is in use by another process; pass {option}")


# --------------------------------------------------------------------------------------- processes


def launch(
    command: list[str],
    output: IO[bytes],
    pid_file: Path,
    *,
    cwd: Path | None = None,
    process_group: int | None = None,
    start_new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start `command` in the background, its stdout and stderr into `output`, and record its pid."""
    proc = subprocess.Popen(
        command,
        stdin=subprocess.DEVNULL,
        stdout=output,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        process_group=process_group,
        start_new_session=start_new_session,
    )
    write_replacing(pid_file, f"{proc.pid}\n")
    return proc


def _command_line(pid: int) -> str | None:
    """The command line of `pid`, words joined by spaces; None when it cannot be read."""
    if Path("/proc/self/cmdline").exists():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return None
        # A zombie has an empty command line, so it reads as gone, which is what it is.
        return " ".join(part.decode(errors="replace") for part in argv)
    # No /proc (macOS): ps prints the same command line.
    done = subprocess.run(
        ["ps", "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    return done.stdout


def process_alive(pid: int, child: subprocess.Popen[bytes] | None, markers: Iterable[str]) -> bool:
    """Whether `pid` runs and is the service's: `child` when this process started it (the Popen of that
    pid), else a process whose command line holds every one of `markers`."""
    if child is not None:
        # Reaps our own child; otherwise it would linger as a zombie that still "exists".
        return child.poll() is None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    command = _command_line(pid)
    return command is not None and all(marker in command for marker in markers)


def running_pid(pid_file: Path, alive: Callable[[int], bool]) -> int | None:
    """The pid in `pid_file` while `alive` says it runs; None for no file, garbage in it, or a dead pid."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if alive(pid) else None


def stop_process(
    pid: int, what: str, alive: Callable[[int], bool], timeout: float, error: ErrorClass, *, poll: float
) -> None:
    """SIGTERM, then SIGKILL if `pid` still runs after `timeout` s; `error` if it survives that too."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    if poll_until(lambda: not alive(pid), timeout, poll):
        return
    log.warning("%s pid %d ignored SIGTERM for %g s; killing it", what, pid, timeout)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    if not poll_until(lambda: not alive(pid), _KILL_GRACE_S, poll):
        raise error(f"{what} pid {pid} survived SIGKILL; check it with ps")
