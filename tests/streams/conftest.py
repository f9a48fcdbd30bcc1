"""Fixtures shared by the streams tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest


@pytest.fixture
def root_logger() -> Iterator[logging.Logger]:
    """The root logger and the libraries' levels, restored afterwards (`configure_logging` replaces them)."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    libraries = {name: logging.getLogger(name).level for name in ("faust", "mode", "aiokafka")}
    yield root
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, saved in libraries.items():
        logging.getLogger(name).setLevel(saved)
