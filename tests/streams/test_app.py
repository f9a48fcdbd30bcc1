"""How `run_app` sets a worker's process up: eyrie's logging kept, not Faust's, and never at DEBUG."""

from __future__ import annotations

import logging
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
