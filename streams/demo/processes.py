"""Worker and applier subprocesses for `make demo` and `bench.pipeline`: started with their logs in a
directory, stopped with SIGTERM (Faust's clean shutdown), killed only if they do not stop."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["resident_bytes", "start_role", "stop_all"]

STOP_GRACE_S = 30.0


def start_role(
    role: str,
    env: dict[str, str],
    logs: Path,
    *,
    args: Sequence[str] = (),
    cprofile: Path | None = None,
    suffix: str = "",
) -> subprocess.Popen[bytes]:
    """`eyrie ROLE ARGS...` in this interpreter, output to LOGS/ROLE[SUFFIX].log; under cProfile when
    asked."""
    command = [sys.executable]
    if cprofile is not None:
        command += ["-m", "cProfile", "-o", str(cprofile / f"{role}{suffix}.prof")]
    command += ["-m", "streams.cli", role, *args]
    # The child writes to its own copy of the descriptor; this process's copy is closed at once.
    with open(logs / f"{role}{suffix}.log", "ab") as log:
        return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def stop_all(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    for process in processes:
        process.send_signal(signal.SIGTERM)
    for process in processes:
        try:
            process.wait(STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            process.kill()


def resident_bytes(pid: int) -> int:
    """Resident set size of a process, from /proc (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")
