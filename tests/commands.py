"""Running eyrie's programs as a user does: `python -m MODULE ARGS...` in a child process, from the
repository's root, with its output captured as text."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["REPO", "run_module"]

REPO = Path(__file__).resolve().parents[1]


def run_module(
    module: str, *args: object, env: dict[str, str] | None = None, timeout: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """The finished process; a non-zero exit is the caller's to assert on. `sys.executable` is absolute, so
    the interpreter is found even when a test empties PATH."""
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
