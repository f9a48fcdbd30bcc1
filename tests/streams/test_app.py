"""How `run_app` sets a worker's process up: logging at the level asked for, not Faust's DEBUG."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from streams.app import _Worker, create_app
from streams.settings import load_settings

# ------------------------------------------------------------------------------------------- builders


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger, restored afterwards (Faust's logging set-up replaces its handlers)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)


# ---------------------------------------------------------------------------------------------- tests


def test_a_worker_logs_at_the_level_asked_for_and_builds_no_debug_records(
    tmp_path: Path, root_logger: logging.Logger
) -> None:
    app = create_app(load_settings(env={}, data_dir=str(tmp_path)), "worker")
    worker = _Worker(app, loglevel="warning", quiet=True)
    worker._setup_logging()
    assert root_logger.level == logging.WARNING
    # Faust logs every record it sends at DEBUG; with the terminal spinner's handler, the root logger went
    # to DEBUG and each of those calls built a record.
    assert not logging.getLogger("faust.topics").isEnabledFor(logging.DEBUG)
