"""Recovery bounded by state, not history: the applier's ledger after long churn, its changelog's topic
settings, and `python -m bench.recovery --quick` against the session's broker."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from schemas.events import Binding
from schemas.node import NodeSpec
from schemas.quantity import Resources
from streams.core.ledger import NODES_TABLE, PODS_TABLE, Ledger
from streams.faust_overrides.tables import CHANGELOG_CONFIG
from streams.runtime.app import create_app
from streams.settings import Settings
from tests.commands import run_module

# ------------------------------------------------------------------------------------------- builders

NODES = 20


def node(index: int) -> NodeSpec:
    return NodeSpec(name=f"n{index}", allocatable=Resources({"cpu": 8000, "pods": 110}))


def binding(index: int, attempt: int = 0, on: str | None = None) -> Binding:
    return Binding(
        uid=f"p{index}",
        node=on or f"n{index % NODES}",
        requests=Resources({"cpu": 100}),
        attempt=attempt,
        cluster="c1",
    )


def churned(pods: int, live: int, rate: float, retention: float) -> tuple[Ledger, dict[str, bytes], int]:
    """`pods` bound one after another at `rate` a second, each deleted once `live` newer ones are bound,
    the deleted entries forgotten after `retention` as the applier forgets them after every batch. Returns
    the ledger, its pod mapping and the most entries the mapping ever held."""
    nodes: dict[str, bytes] = {}
    entries: dict[str, bytes] = {}
    ledger = Ledger(nodes, entries)
    for index in range(NODES):
        ledger.upsert_node(node(index))
    most = 0
    for index in range(pods):
        now = index / rate
        if index >= live:
            ledger.delete(f"p{index - live}", now)
        assert ledger.apply(binding(index), now).status == "applied"
        ledger.forget_deleted(now - retention)
        most = max(most, len(entries))
    return ledger, entries, most


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize(
    ("pods", "live", "rate", "retention"),
    [
        pytest.param(20_000, 200, 10.0, 10.0, id="Twenty thousand pods through a live set of 200."),
        pytest.param(20_000, 50, 20.0, 2.0, id="A faster churn with a shorter retention."),
    ],
)
def test_the_ledger_holds_the_live_pods_and_the_retention_window_whatever_the_history(
    pods: int, live: int, rate: float, retention: float
) -> None:
    ledger, entries, most = churned(pods, live, rate, retention)
    window = int(rate * retention) + 1  # deletions still remembered at any moment
    assert most <= live + window + 1
    assert len(entries) <= live + window
    assert sum(ledger.allocated(f"n{i}")["pods"] for i in range(NODES)) == live


def test_a_deleted_entry_keeps_only_what_answers_a_late_binding() -> None:
    _, entries, _ = churned(30, 10, 1.0, 100.0)
    entry = orjson.loads(entries["p0"])
    assert entry == {"node": "n0", "requests": {}, "attempt": 0, "state": "deleted", "at": 10.0}


@pytest.mark.parametrize(
    ("case", "late", "status", "reasons"),
    [
        pytest.param(
            "redelivered",
            binding(3),
            "applied",
            [],
            id="The binding committed before the deletion, delivered again, gets its first answer again.",
        ),
        pytest.param(
            "stale",
            binding(3, attempt=0, on="n9"),
            "rejected",
            ["pod deleted"],
            id="An older binding of the deleted pod to another node is refused.",
        ),
    ],
)
def test_within_the_retention_a_late_binding_of_a_deleted_pod_books_nothing_even_after_a_restart(
    case: str, late: Binding, status: str, reasons: list[str]
) -> None:
    ledger, entries, _ = churned(30, 10, 1.0, 100.0)
    before = {f"n{i}": ledger.allocated(f"n{i}") for i in range(NODES)}
    recovered = Ledger({}, dict(entries))  # from the changelogs' last values, as after a restart
    for index in range(NODES):
        recovered.upsert_node(node(index))
    for current in (ledger, recovered):
        result = current.apply(late, 40.0)
        assert (result.status, result.reasons) == (status, reasons)
        assert {f"n{i}": current.allocated(f"n{i}") for i in range(NODES)} == before


def test_every_table_changelog_is_created_to_compact_within_minutes(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)), "applier")
    tables = {table.name: table for table in app.tables.values()}
    assert {NODES_TABLE, PODS_TABLE} <= set(tables)
    for table in tables.values():
        config = table.changelog_topic.config
        assert {key: config[key] for key in CHANGELOG_CONFIG} == CHANGELOG_CONFIG
        assert int(config["segment.ms"]) <= 3_600_000


@pytest.mark.kafka
def test_the_recovery_benchmark_measures_a_fresh_worker_and_applier_and_ends_with_its_json(
    tmp_path: Path, kafka_bootstrap: str
) -> None:
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap}
    done = run_module("bench.recovery", "--quick", "--out", tmp_path, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = orjson.loads(done.stdout.strip().splitlines()[-1])
    rows = figures["histories"]
    assert rows[0]["checkpoints"] is False
    for row in rows:
        assert row["pods"] == 600
        assert 0 < row["takeover_s"] < 300 and 0 < row["applier_s"] < 300
        assert row["sequencer_bytes"] > 0 and row["ledger_bytes"] > 0
    # With checkpoints (every 50 records in --quick) the worker restored one, and the sequencer kept only
    # the records from the older checkpoint on.
    assert [row["checkpoints"] for row in rows] == [False, True]
    assert rows[1]["sequencer_records"] < rows[0]["sequencer_records"]
