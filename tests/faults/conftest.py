"""Prints the fault table after the session (`make test-faults`, and CI's `make test`)."""

from __future__ import annotations

import pytest

from tests.faults.table import ROWS, render


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if ROWS:
        terminalreporter.section("faults")
        terminalreporter.write_line(render(ROWS))
