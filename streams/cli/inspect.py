"""What the pipeline holds, read from its topics: `eyrie profiles` (publish, list, show),
`eyrie dead-letters`, `eyrie nodes` and `eyrie pending`.

Every reader takes the records as the workers do: a profile record is judged by the forwarders' own check
(`streams.core.ingress`), node allocations are summed by the applier's own `Ledger` from its tables'
changelogs. They only read (no consumer group, no offsets committed, nothing dead-lettered again), so
running them beside a live pipeline changes nothing. Each prints JSON lines by default, or a table with
``--output table``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from aiokafka import AIOKafkaConsumer, TopicPartition

from schemas.documents import Document, load_documents
from schemas.events import Binding, BindingResult, DeadLetter
from schemas.exceptions import InvalidInput
from schemas.node import NodeEvent, NodeSpec
from schemas.pod import PodDeleted, PodRequest
from schemas.quantity import format_quantity
from streams.cli.common import (
    BootstrapOption,
    ConfigOption,
    UntilIdleOption,
    check_follow,
    check_output,
    json_line,
    kafka_options,
    one_line_errors,
    print_table,
    run,
    settings_from,
)
from streams.client import EyrieClient, latest_decisions
from streams.core.decoders import decode_records
from streams.core.ingress import envelope_from_record
from streams.faust_overrides.clients import refresh_metadata
from streams.runtime.security import client_security, consumer_limits, kafka_errors
from streams.runtime.topics import ensure_topics
from streams.settings import Settings

__all__ = [
    "dead_letters",
    "nodes",
    "pending",
    "profile_refusal",
    "profiles_app",
    "send_documents",
    "validated_documents",
]

profiles_app = typer.Typer(
    help="Scheduler profiles: publish them (validated first) and see the ones workers hold.",
    no_args_is_help=True,
)

OutputOption = Annotated[
    str, typer.Option("--output", "-o", help="json (one object per line) or table (a readable table)")
]

FINAL = frozenset({"applied", "unschedulable", "rejected"})
"""Statuses after which placement does nothing more for a pod until the cluster or the pod changes."""


# ------------------------------------------------------------------------------------------ output


def _table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str | None = None) -> None:
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*row)
    print_table(table)


def _time(at: float | None) -> str:
    if not at:
        return ""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _wire(resources: dict[str, int]) -> dict[str, str | int]:
    """Base units as the wire writes them (cpu ``"2500m"``, the rest plain integers)."""
    return {name: format_quantity(amount, name) for name, amount in sorted(resources.items())}


def _human(name: str, amount: int) -> str:
    if name == "cpu":
        return f"{amount / 1000:g}"
    if name in ("memory", "ephemeral-storage", "disk"):
        for unit, size in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount >= size:
                return f"{amount / size:.4g}{unit}"
    return str(amount)


def _resources_text(resources: dict[str, int]) -> str:
    return ", ".join(f"{name}={_human(name, amount)}" for name, amount in sorted(resources.items()))


# ---------------------------------------------------------------------------------------- reading


def _reader(settings: Settings) -> EyrieClient:
    # Never started: its consumers need no producer, and without one a record that does not decode is
    # yielded as a dead letter but not published again (the workers already did).
    return EyrieClient(settings, create_topics=False)


async def _read_changelog(settings: Settings, topic: str) -> dict[str, bytes] | None:
    """A table's changelog read to its end: each key's last value (a tombstone removes the key). None when
    the topic does not exist (the applier never ran with these settings)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        client_id=settings.client_id,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=settings.request_timeout_ms,
        **consumer_limits(settings),
        **client_security(settings),
    )
    with kafka_errors(settings, "read from"):
        await consumer.start()
        try:
            found = consumer.partitions_for_topic(topic)
            if not found:
                await refresh_metadata(consumer)
                found = consumer.partitions_for_topic(topic)
            if not found:
                return None
            partitions = [TopicPartition(topic, p) for p in sorted(found)]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            table: dict[str, bytes] = {}
            unread = {tp for tp in partitions if await consumer.position(tp) < ends[tp]}
            while unread:
                for messages in (await consumer.getmany(*unread, timeout_ms=500, max_records=5000)).values():
                    for message in messages:
                        key = bytes(message.key or b"").decode("utf-8", errors="backslashreplace")
                        if message.value is None:
                            table.pop(key, None)
                        else:
                            table[key] = bytes(message.value)
                # Positions, not the last offsets seen: compaction leaves gaps below the end.
                unread = {tp for tp in unread if await consumer.position(tp) < ends[tp]}
            return table
        finally:
            await consumer.stop()


# --------------------------------------------------------------------------------------- profiles


def profile_refusal(name: str | None, document: object) -> str | None:
    """Why the workers would refuse this profile record (keyed `name`), or None: the forwarders' own check,
    on the bytes the client would send."""
    try:
        raw = orjson.dumps(document)
    except TypeError as exc:
        return f"profile {name}: cannot be written as JSON: {exc}"
    verdict = envelope_from_record("config", 0, None, name.encode() if name else None, raw)
    return verdict.error if isinstance(verdict, DeadLetter) else None


def validated_documents(path: Path) -> Iterator[Document]:
    """`load_documents`, with every profile checked as the workers will check it: a broken profile is an
    error here, before anything is sent, not a dead letter later."""
    for document in load_documents(path):
        if document.topic == "config":
            reason = profile_refusal(document.key, document.value)
            if reason is not None:
                raise InvalidInput(f"{path}: {reason}")
        for warning in document.warnings:
            print(f"warning: {warning}", file=sys.stderr)
        yield document


def send_documents(
    settings: Settings, documents: Iterable[Document], on_sent: Callable[[], None] | None = None
) -> int:
    """Publish `documents` through one client, flushed; how many were sent."""

    async def send_all() -> int:
        async with EyrieClient(settings) as client:
            return await client.publish_documents(documents, on_sent)

    return run(send_all())


@dataclass(slots=True)
class LoadedProfile:
    """A profile as the workers hold it: built in, or the last valid record of its name on ``config``."""

    name: str
    source: str
    loaded: bool
    document: dict[str, Any] | None
    offset: int | None = None
    published_at: float | None = None
    refused: str | None = None
    """Why the latest record of this name was refused (the workers kept the profile they had)."""

    def summary(self) -> dict[str, Any]:
        document = asdict(self)
        del document["document"]
        return document


async def _loaded_profiles(settings: Settings) -> dict[str, LoadedProfile]:
    from policies.framework.profile import BUILTIN_PROFILES

    found = {
        name: LoadedProfile(name, "built-in", True, dict(document))
        for name, document in BUILTIN_PROFILES.items()
    }
    await ensure_topics(settings)
    async for _, message in _reader(settings).records(["config"], raw=True):
        verdict = envelope_from_record(
            "config",
            message.partition,
            message.offset,
            message.key,
            message.value,
            message.headers,
            full_topic=message.topic,
            now=message.timestamp / 1000,
        )
        if isinstance(verdict, DeadLetter):
            if verdict.key:
                entry = found.setdefault(verdict.key, LoadedProfile(verdict.key, "config", False, None))
                entry.refused = verdict.error
            continue
        if verdict is None or verdict.value["document"] is None:
            continue  # a tombstone: workers never drop a profile at run time, they keep the one they hold
        name = verdict.value["name"]
        found[name] = LoadedProfile(
            name, "config", True, verdict.value["document"], message.offset, message.timestamp / 1000
        )
    return dict(sorted(found.items()))


@profiles_app.command("publish")
@kafka_options
@one_line_errors
def profiles_publish(
    files: Annotated[
        list[Path],
        typer.Argument(help="YAML or JSON: a profile (schedulerName), or a KubeSchedulerConfiguration"),
    ],
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate only; publish nothing")] = False,
) -> None:
    """Publish scheduler profiles on the config topic, keyed by name; workers use them for later pods.

    Every profile is validated first, as the workers will validate it, so a broken one publishes nothing:
    exit 2 with one line naming the profile, the plugin and the field.
    """
    documents: list[Document] = []
    for path in files:
        for document in validated_documents(path):
            if document.topic != "config":
                raise InvalidInput(
                    f"{path}: a {document.topic} record (key {document.key!r}), not a scheduler profile; "
                    "publish it with `eyrie publish`"
                )
            documents.append(document)
    names = ", ".join(str(document.key) for document in documents)
    if dry_run:
        typer.echo(f"{len(documents)} profile{'' if len(documents) == 1 else 's'} valid: {names}")
        return
    settings = settings_from(bootstrap, config)
    sent = send_documents(settings, documents)
    typer.echo(
        f"published {sent} profile{'' if sent == 1 else 's'} ({names}) to {settings.topic('config')} "
        f"at {settings.bootstrap_servers}"
    )


@profiles_app.command("list")
@kafka_options
@one_line_errors
def profiles_list(
    output: OutputOption = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """The profiles workers hold: the built-in ones, and the last valid record of each name on the config
    topic (which replaces a built-in of its name).

    Per profile: name, source (built-in or config), loaded, the record's offset and time, and why the latest
    record of the name was refused, if it was (workers keep the profile they had). A name whose records were
    all refused is listed with loaded false.
    """
    check_output(output)
    found = run(_loaded_profiles(settings_from(bootstrap, config)))
    if output == "json":
        for entry in found.values():
            json_line(entry.summary())
        return
    _table(
        ("NAME", "SOURCE", "LOADED", "PUBLISHED", "OFFSET", "REFUSED"),
        (
            (
                e.name,
                e.source,
                "yes" if e.loaded else "no",
                _time(e.published_at),
                "" if e.offset is None else str(e.offset),
                e.refused or "",
            )
            for e in found.values()
        ),
    )


@profiles_app.command("show")
@kafka_options
@one_line_errors
def profiles_show(
    name: Annotated[str, typer.Argument(help="The profile's name (a pod's scheduler_name)")],
    output: OutputOption = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """One profile as workers hold it: its document (JSON), or with --output table its plugins per
    extension point, with score weights and plugin args."""
    check_output(output)
    found = run(_loaded_profiles(settings_from(bootstrap, config)))
    entry = found.get(name)
    if entry is None or entry.document is None:
        known = ", ".join(n for n, e in found.items() if e.loaded)
        why = f"; its records were refused: {entry.refused}" if entry is not None else ""
        raise InvalidInput(f"no profile named {name!r} is loaded (loaded: {known}){why}", field="NAME")
    if output == "json":
        json_line({**entry.summary(), "document": entry.document})
        return
    _profile_table(entry)


def _profile_table(entry: LoadedProfile) -> None:
    from policies.framework.profile import parse_profile

    assert entry.document is not None
    profile = parse_profile(entry.document)
    points: list[tuple[str, list[str]]] = [
        ("queueSort", [profile.queue_sort.name]),
        ("preFilter", [p.name for p in profile.pre_filter]),
        ("filter", [p.name for p in profile.filter]),
        ("postFilter", [p.name for p in profile.post_filter]),
        ("preScore", [p.name for p in profile.pre_score]),
        ("score", [f"{p.name} ×{weight}" for p, weight in profile.score]),
        ("reserve", [p.name for p in profile.reserve]),
        ("permit", [p.name for p in profile.permit]),
    ]
    rows = [(point, ", ".join(plugins)) for point, plugins in points if plugins]
    rows += [
        (f"args {item['name']}", orjson.dumps(item.get("args") or {}).decode())
        for item in entry.document.get("pluginConfig") or []
    ]
    if profile.batch is not None:
        rows.append(("mode", "batch"))
    where = "built in" if entry.source == "built-in" else f"config offset {entry.offset}"
    if entry.published_at:
        where += f", published {_time(entry.published_at)}"
    title = f"profile {entry.name} ({where})"
    if entry.refused:
        title += f"; latest record refused: {entry.refused}"
    _table(("EXTENSION POINT", "PLUGINS"), rows, title=title)


# ----------------------------------------------------------------------------------- dead letters


@kafka_options
@one_line_errors
def dead_letters(
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing dead letters as they arrive")
    ] = False,
    from_beginning: Annotated[
        bool,
        typer.Option(
            "--from-beginning", help="With --follow: start at the beginning of the topic instead of its end"
        ),
    ] = False,
    until_idle: UntilIdleOption = None,
    output: OutputOption = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Records the pipeline refused, with the reason.

    Per record: its source topic, partition and offset, key, the reason (error), the time it was refused
    (at) and its first bytes (raw).

    Without --follow: every dead letter, up to the topic's current end. With --follow: each one as it comes.
    """
    check_output(output, follow=follow)
    check_follow("dead-letters", follow=follow, from_beginning=from_beginning, until_idle=until_idle)
    settings = settings_from(bootstrap, config)

    async def letters() -> AsyncIterator[DeadLetter]:
        await ensure_topics(settings)
        async for _, decoded in _reader(settings).records(
            ["dead-letters"],
            from_beginning=from_beginning or not follow,
            follow=follow,
            until_idle=until_idle,
        ):
            # A record on this topic that is not a dead letter is shown as what it is: refused too.
            yield decoded.value if decoded.dead_letter is None else decoded.dead_letter

    async def show() -> None:
        if output == "table":
            found = [letter async for letter in letters()]
            _table(
                ("TIME", "TOPIC", "PARTITION", "OFFSET", "KEY", "REASON"),
                (
                    (
                        _time(letter.at),
                        letter.topic,
                        "" if letter.partition is None else str(letter.partition),
                        "" if letter.offset is None else str(letter.offset),
                        letter.key or "",
                        letter.error,
                    )
                    for letter in found
                ),
            )
            return
        async for letter in letters():
            json_line(letter, flush=follow)

    run(show())


# ------------------------------------------------------------------------------------------ nodes


@dataclass(slots=True)
class _PublishedNode:
    spec: NodeSpec
    cordoned: bool


async def _published_nodes(settings: Settings) -> dict[str, _PublishedNode]:
    """Each node's latest state on node-events (deleted nodes dropped)."""
    found: dict[str, _PublishedNode] = {}
    async for _, decoded in _reader(settings).records(["node-events"]):
        event = decoded.value
        if not isinstance(event, NodeEvent):
            continue
        name = event.node.name
        if event.type == "upsert":
            found[name] = _PublishedNode(event.node, event.node.unschedulable)
        elif event.type == "delete":
            found.pop(name, None)
        elif name in found:
            found[name].cordoned = event.type == "cordon"
    return found


@kafka_options
@one_line_errors
def nodes(
    output: OutputOption = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Each node's allocatable against what the applier has allocated on it.

    Allocations are the applier's ledger, read from its tables' changelog topics and summed as the applier
    sums them; nodes come from the ledger and from the node-events topic (`applier: false` for a node the
    applier has not taken in yet). Amounts in JSON as on the wire (cpu in millicores, "2500m"; memory in
    bytes); `allocated.pods` counts the pods bound.
    """
    from streams.core.ledger import NODES_TABLE, PODS_TABLE, Ledger
    from streams.runtime.app import app_id

    check_output(output)
    settings = settings_from(bootstrap, config)

    async def read() -> tuple[dict[str, bytes] | None, dict[str, bytes] | None, dict[str, _PublishedNode]]:
        await ensure_topics(settings)
        group = app_id(settings, "applier")
        node_table = await _read_changelog(settings, f"{group}-{NODES_TABLE}-changelog")
        pod_table = await _read_changelog(settings, f"{group}-{PODS_TABLE}-changelog")
        return node_table, pod_table, await _published_nodes(settings)

    node_table, pod_table, published = run(read())
    if node_table is None:
        typer.echo(
            f"note: no applier ledger for topic prefix {settings.topic_prefix!r} yet (its changelog "
            "topics do not exist): nothing is allocated",
            err=True,
        )
    ledger = Ledger(node_table or {}, pod_table or {})
    rows: list[dict[str, Any]] = []
    for name in sorted(set(ledger.node_names()) | set(published)):
        entry = orjson.loads(node_table[name]) if node_table and name in node_table else None
        node = published.get(name)
        allocatable = (
            entry["allocatable"] if entry is not None else dict(node.spec.allocatable) if node else {}
        )
        cordoned = entry["cordoned"] if entry is not None else bool(node and node.cordoned)
        rows.append(
            {
                "node": name,
                "cluster": node.spec.cluster if node is not None else None,
                "cordoned": cordoned,
                "allocatable": allocatable,
                "allocated": ledger.allocated(name) if entry is not None else {},
                "applier": entry is not None,
            }
        )
    if output == "json":
        for row in rows:
            json_line({**row, "allocatable": _wire(row["allocatable"]), "allocated": _wire(row["allocated"])})
        return
    _table(
        ("NODE", "CLUSTER", "CORDONED", "PODS", "ALLOCATED", "ALLOCATABLE"),
        (
            (
                row["node"],
                row["cluster"] or "",
                "yes" if row["cordoned"] else "",
                f"{row['allocated'].get('pods', 0)}/{row['allocatable'].get('pods', '-')}",
                _resources_text({k: v for k, v in row["allocated"].items() if k != "pods"}),
                _resources_text({k: v for k, v in row["allocatable"].items() if k != "pods"}),
            )
            for row in rows
        ),
    )


# ---------------------------------------------------------------------------------------- pending


@dataclass(slots=True)
class Pending:
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    state: str
    """``waiting``: no decision yet; ``bound``: a binding, not yet answered by the applier; ``conflict``:
    the applier refused the binding for lack of room and placement tries again; ``placing``: a workload
    with fewer replicas applied than it asks for."""
    node: str | None
    attempt: int
    requested_at: float | None
    replicas: int = 1
    applied: int = 0


async def _pending(settings: Settings) -> list[Pending]:
    requested: dict[str, tuple[PodRequest, float]] = {}
    bindings: dict[str, Binding] = {}
    results: dict[str, BindingResult] = {}
    await ensure_topics(settings)
    topics = ["pod-requests", "bindings", "binding-results"]
    async for short, message in _reader(settings).records(topics, raw=True):
        at = message.timestamp / 1000
        for decoded in decode_records(
            short, message.partition, message.offset, message.key, message.value, full_topic=message.topic
        ):
            value = decoded.value  # None for a record that does not decode: the workers dead-letter it
            if isinstance(value, PodRequest):
                requested[value.uid] = (value, value.created_at or at)
            elif isinstance(value, PodDeleted) and short == "pod-requests":
                # Only the user's deletion: placement's release of it on bindings may be read first.
                requested.pop(value.uid, None)
            elif isinstance(value, Binding):
                bindings[value.uid] = value
            elif isinstance(value, BindingResult):
                results[value.uid] = value
    decisions = {d.uid: d for d in latest_decisions(bindings, results)}
    found: list[Pending] = []
    for uid, (pod, at) in requested.items():
        decision = decisions.get(uid)
        common = (uid, pod.namespace, pod.name, pod.scheduler_name)
        if pod.replicas > 1:
            # Replica i of a workload is placed as `<uid>-<i>`; a verdict on the workload's own uid says no
            # replica could be divided, which ends the wait as it does for a pod.
            if decision is not None and decision.status in FINAL:
                continue
            applied = sum(
                1
                for other, d in decisions.items()
                if d.status == "applied" and other.startswith(f"{uid}-") and other[len(uid) + 1 :].isdigit()
            )
            if applied < pod.replicas:
                found.append(Pending(*common, "placing", None, 0, at, pod.replicas, applied))
            continue
        if decision is None:
            found.append(Pending(*common, "waiting", None, 0, at))
        elif decision.status not in FINAL:
            state = "bound" if decision.status == "pending" else decision.status
            found.append(Pending(*common, state, decision.node, decision.attempt, at))
    found.sort(key=lambda p: (p.requested_at or 0.0, p.uid))
    return found


@kafka_options
@one_line_errors
def pending(
    output: OutputOption = "json",
    bootstrap: BootstrapOption = None,
    config: ConfigOption = None,
) -> None:
    """Pods requested and not deleted that have no final decision yet.

    Final: applied, unschedulable or rejected. Listed: pods never answered (waiting), bound and not yet
    applied (bound), or refused by the applier for lack of room and being placed again (conflict); a
    workload while fewer of its replicas are applied than it asks for (placing).

    Derived from the pod-requests, bindings and binding-results topics, read from the beginning. A pod found
    unschedulable is not listed: placement retries it when the cluster changes (`eyrie decisions` shows it).
    """
    check_output(output)
    found = run(_pending(settings_from(bootstrap, config)))
    if output == "json":
        for item in found:
            json_line(asdict(item))
        return
    _table(
        ("NAMESPACE", "NAME", "UID", "PROFILE", "STATE", "NODE", "REQUESTED"),
        (
            (
                p.namespace,
                p.name,
                p.uid,
                p.scheduler_name,
                p.state if p.replicas == 1 else f"{p.state} ({p.applied}/{p.replicas} applied)",
                p.node or "",
                _time(p.requested_at),
            )
            for p in found
        ),
    )
