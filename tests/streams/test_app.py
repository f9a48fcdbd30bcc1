"""How `create_app` and `run_app` set a worker's process up: eyrie's logging kept, not Faust's, and never at
DEBUG; placement's plugins loaded while the worker joins its group, not at its first restore."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

from streams.faust_overrides.worker import EyrieWorker
from streams.runtime.app import create_app
from streams.runtime.logs import configure_logging
from streams.settings import load_settings

# ---------------------------------------------------------------------------------------------- tests


def test_a_worker_keeps_eyries_log_handler_and_builds_no_debug_records(
    tmp_path: Path, root_logger: logging.Logger
) -> None:
    handler = configure_logging(level=logging.INFO)
    app = create_app(load_settings(env={}, data_dir=str(tmp_path)), "worker")
    worker = EyrieWorker(app, quiet=True)
    # Faust's worker replaced the root logger's handlers with its own on start (coloured text, stdout
    # redirected into the log), so `--log-format json` did not hold for its lines.
    assert worker.override_logging is False
    assert worker.spinner is None
    assert root_logger.handlers == [handler]
    # Faust logs every record it sends at DEBUG; with the terminal spinner's handler, the root logger went
    # to DEBUG and each of those calls built a record.
    assert not logging.getLogger("faust.topics").isEnabledFor(logging.DEBUG)


WARMED = """
import sys, threading
import policies.framework.registry as registry
from streams.runtime.app import create_app
from streams.settings import load_settings

before = registry._REGISTRY is not None
create_app(load_settings(env={}, data_dir=sys.argv[1]), sys.argv[2])
for thread in threading.enumerate():
    if thread.name == "eyrie-warm":
        thread.join()
print(before, registry._REGISTRY is not None)
"""


def test_a_workers_app_loads_the_plugins_on_a_thread_of_its_own_and_an_appliers_does_not(
    tmp_path: Path,
) -> None:
    """Loading the plugins' registry (SciPy among them) took 0.2 s of a fresh worker's first restore, after
    its assignment; the app starts it on a thread when it is built, so that it overlaps the group's join."""
    loaded = {
        role: subprocess.run(
            [sys.executable, "-c", WARMED, str(tmp_path / role), role],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        for role in ("worker", "applier")
    }
    assert loaded == {"worker": ["False", "True"], "applier": ["False", "False"]}
