"""Recovery bounded by state, not history: the applier's ledger after long churn, its changelog's topic
settings, and `python -m bench.recovery --quick` against the session's broker."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson
import pytest

from schemas.events import Binding
from schemas.node import NodeSpec
from schemas.pod import PodBound, PodRequest
from schemas.quantity import Resources
from streams.core.ledger import NODES_TABLE, PODS_TABLE, Ledger
from streams.faust_overrides.tables import CHANGELOG_CONFIG, EyrieTableManager
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


def churned(
    pods: int, live: int, rate: float, retention: float, settle_after: float | None = None
) -> tuple[Ledger, dict[str, bytes], int]:
    """`pods` bound one after another at `rate` a second, each deleted once `live` newer ones are bound,
    the deleted entries settled `settle_after` later (None: never) and forgotten after `retention`, as the
    applier settles them after its commits and forgets them after every batch. Returns the ledger, its pod
    mapping and the most entries the mapping ever held."""
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
        if settle_after is not None:
            ledger.settle(now - settle_after)
        ledger.forget_deleted(now - retention)
        most = max(most, len(entries))
    return ledger, entries, most


def recovered(entries: dict[str, bytes]) -> Ledger:
    """A ledger from the changelogs' last values, as after a restart."""
    ledger = Ledger({}, dict(entries))
    for index in range(NODES):
        ledger.upsert_node(node(index))
    return ledger


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


@pytest.mark.parametrize(
    ("pods", "live", "rate", "settle_after", "retention"),
    [
        pytest.param(
            20_000, 200, 10.0, 2.0, 100.0, id="Deletions settle two seconds after, and are remembered 100 s."
        ),
        pytest.param(
            5_000,
            50,
            20.0,
            0.5,
            1e9,
            id="A retention longer than the history changes nothing in the mapping.",
        ),
    ],
)
def test_settled_deletions_leave_the_mapping_whatever_the_retention(
    pods: int, live: int, rate: float, settle_after: float, retention: float
) -> None:
    ledger, entries, most = churned(pods, live, rate, retention, settle_after)
    settling = int(rate * settle_after) + 1  # deletions not yet settled at any moment
    assert most <= live + settling + 1
    in_mapping, in_memory = ledger.deleted_held()
    assert in_mapping == sum(orjson.loads(raw)["state"] == "deleted" for raw in entries.values())
    assert in_mapping <= settling
    # Remembered, in the mapping or in memory: the deletions of the retention.
    assert abs(in_mapping + in_memory - min(pods - live, rate * retention)) <= 1
    assert sum(ledger.allocated(f"n{i}")["pods"] for i in range(NODES)) == live


@pytest.mark.parametrize(
    ("late", "live_answer", "restarted_answer"),
    [
        pytest.param(
            binding(3),
            ("applied", []),
            ("applied", []),
            id="The committed binding delivered again gets its first answer, before and after a restart.",
        ),
        pytest.param(
            binding(3, attempt=0, on="n9"),
            ("rejected", ["pod deleted"]),
            ("applied", []),
            id="An older binding of a settled pod is refused while the applier remembers it; after a restart "
            "nothing can deliver one any more, and a binding of the uid is a new pod's.",
        ),
    ],
)
def test_a_settled_deletion_is_remembered_in_memory_until_the_retention(
    late: Binding, live_answer: tuple[str, list[str]], restarted_answer: tuple[str, list[str]]
) -> None:
    ledger, entries, _ = churned(30, 10, 1.0, 100.0, settle_after=5.0)
    assert "p3" not in entries  # settled: a tombstone in the changelog
    before = {f"n{i}": ledger.allocated(f"n{i}") for i in range(NODES)}
    result = ledger.apply(late, 40.0)
    assert (result.status, result.reasons) == live_answer
    assert {f"n{i}": ledger.allocated(f"n{i}") for i in range(NODES)} == before
    assert ledger.delete("p3", 41.0) is None  # deleted again: nothing changes
    result = recovered(entries).apply(late, 40.0)
    assert (result.status, result.reasons) == restarted_answer


@pytest.mark.parametrize(
    ("before", "settled", "left"),
    [
        pytest.param(13.0, 3, ["p3"], id="Only deletions made strictly before the time settle."),
        pytest.param(0.0, 0, ["p0", "p1", "p2", "p3"], id="A time before every deletion settles none."),
        pytest.param(100.0, 4, [], id="A time after every deletion settles them all."),
    ],
)
def test_settle_moves_the_deletions_made_before_the_time(
    before: float, settled: int, left: list[str]
) -> None:
    ledger, entries, _ = churned(14, 10, 1.0, 1e9)  # p0..p3 deleted at 10..13 s, none settled yet
    assert ledger.settle(before) == settled
    assert sorted(uid for uid, raw in entries.items() if orjson.loads(raw)["state"] == "deleted") == left
    assert ledger.deleted_held() == (len(left), settled)
    assert ledger.forget_deleted(1e9) == 4
    assert ledger.deleted_held() == (0, 0)


def test_a_settled_pod_reported_bound_by_someone_else_is_not_booked_again() -> None:
    ledger, entries, _ = churned(14, 10, 1.0, 1e9, settle_after=0.0)
    assert "p0" not in entries
    report = PodBound(
        uid="p0", node="n1", ts=20.0, pod=PodRequest.model_validate({"uid": "p0", "containers": []})
    )
    assert ledger.book(report, 20.0) is False
    assert "p0" not in entries


def test_every_table_changelog_is_created_to_compact_within_minutes(tmp_path: Path) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)), "applier")
    tables = {table.name: table for table in app.tables.values()}
    assert {NODES_TABLE, PODS_TABLE} <= set(tables)
    for table in tables.values():
        config = table.changelog_topic.config
        assert {key: config[key] for key in CHANGELOG_CONFIG} == CHANGELOG_CONFIG
        assert int(config["segment.ms"]) <= 3_600_000


@pytest.mark.parametrize(
    "role",
    [
        pytest.param("worker", id="A worker's tables are registered as it starts, with no fixed wait."),
        pytest.param("applier", id="So are the applier's."),
    ],
)
def test_the_apps_register_their_tables_without_fausts_fixed_second(tmp_path: Path, role: str) -> None:
    app = create_app(Settings(data_dir=str(tmp_path)), role)
    assert isinstance(app.tables, EyrieTableManager)


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
    kinds = [(row["checkpoints"], row["standby"], row["spare"]) for row in rows]
    assert kinds == [(False, False, False), (True, False, False), (True, True, False), (True, False, True)]
    assert rows[1]["sequencer_records"] < rows[0]["sequencer_records"]
    assert {"start", "join", "read", "decode", "replay", "place"} <= set(rows[1]["phases"])
    # The hot standby took the shard over once the group had detected the kill, and placed within seconds
    # of that, not after a restore.
    standby = rows[2]
    assert 0 < standby["detection_s"] <= standby["takeover_s"]
    assert standby["takeover_s"] - standby["detection_s"] < 5.0
    assert "adopt" in standby["phases"]
    # A running worker that did not follow the shard restored it from the checkpoint once it was assigned.
    spare = rows[3]
    assert {"until restore", "read", "decode", "replay", "place"} == set(spare["phases"])
    assert spare["phases"]["until restore"] < spare["takeover_s"]
    # The fresh worker, stopped cleanly, checkpointed its shard on the way out (a handover), and the owner
    # that took the shard next replayed nothing.
    logs = "".join(path.read_text() for path in tmp_path.glob("*/worker*.log"))
    assert re.search(r"shard 0: checkpoint \w at offset \d+ \(handover\)", logs)
    assert re.search(r"restored from checkpoint \w at offset (\d+) \(0 records behind \1\)", logs)
