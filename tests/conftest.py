"""Fixtures shared by the whole suite.

Only tests that request `kafka_bootstrap` cause a broker to exist, and the whole session shares that
one broker: starting Kafka costs seconds, and tests isolate themselves by topic and group names instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from streams.broker import describe_resolution, resolved_broker

log = logging.getLogger("tests.kafka")


@pytest.fixture(scope="session")
def kafka_bootstrap(pytestconfig: pytest.Config) -> Iterator[str]:
    """Bootstrap servers of this session's broker, picked by `streams.broker.resolved_broker`."""
    with resolved_broker() as bootstrap:
        description = describe_resolution()
        log.info("kafka_bootstrap: %s", description)
        # Also on the terminal, not only in captured logs: which broker ran matters when a test fails.
        reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(f"kafka_bootstrap: {description}")
        yield bootstrap
