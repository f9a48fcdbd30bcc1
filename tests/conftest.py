"""Fixtures shared by the whole suite.

Only tests that request `kafka_bootstrap` cause a broker to exist, and the whole session shares that
one broker: starting Kafka costs seconds, and tests isolate themselves by topic and group names instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from streams.local.broker import describe_resolution, resolved_broker

log = logging.getLogger("tests.kafka")
_BROKER_USED = pytest.StashKey[str]()


@pytest.fixture(scope="session")
def kafka_bootstrap(pytestconfig: pytest.Config) -> Iterator[str]:
    """Bootstrap servers of this session's broker, picked by `streams.local.broker.resolved_broker`."""
    with resolved_broker() as bootstrap:
        description = describe_resolution()
        log.info("kafka_bootstrap: %s", description)
        pytestconfig.stash[_BROKER_USED] = description
        yield bootstrap


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    # Output during fixture setup is captured, so which broker ran is reported once, after the run.
    if _BROKER_USED in config.stash:
        terminalreporter.write_line(f"kafka_bootstrap: {config.stash[_BROKER_USED]}")


@pytest.fixture(scope="session")
def kube_config(pytestconfig: pytest.Config) -> Iterator[str]:
    """The kubeconfig of this session's cluster, picked by
    `streams.local.controlplane.resolved_control_plane`: KUBECONFIG's, else a local control plane started once
    for the session (and built on first use)."""
    from streams.local.controlplane import resolved_control_plane

    # Output is captured during fixture setup, but a first build takes minutes: show its progress.
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")

    def progress(message: str) -> None:
        log.info("%s", message)
        if reporter is not None:
            reporter.write_line(message)

    with resolved_control_plane(progress=progress) as kubeconfig:
        yield kubeconfig
