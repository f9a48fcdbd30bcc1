"""Prometheus metrics and a health check, served on a worker's or applier's web port (``--web-port``).

``GET /metrics`` (Prometheus text format):

- ``eyrie_scheduling_attempt_duration_seconds{result}``: one placement attempt (a pod envelope through the
  shard), ``result`` = ``scheduled`` | ``unschedulable`` | ``waiting`` (queued, batched or held in Permit);
- ``eyrie_scheduling_latency_seconds``: from the producer timestamp of the sequencer record that carried
  the pod to the decision sent (queueing in the sequencer topic plus placement);
- ``eyrie_decisions_total{decision}``: bindings and unschedulable verdicts placement sent;
- ``eyrie_unschedulable_total``: unschedulable verdicts (a pod retried after one counts again);
- ``eyrie_binding_results_total{status}`` (applier): ``applied`` | ``conflict`` | ``rejected``;
- ``eyrie_conflicts_total`` (applier): bindings refused by optimistic concurrency or hard limits;
- ``eyrie_dead_letters_total{topic}``: records sent to the dead-letter topic, by the topic they came from;
- ``eyrie_consumer_lag{topic,partition}``: end offset minus the offset read, per assigned partition, from
  the Faust monitor's offsets at scrape time (no extra broker round trips).

``GET /health``: 200 ``{"status": "ok", "role", "crashed_agents": [], "rebalancing", "assigned": {topic:
[partitions]}, "replay_sessions": [...]}`` while every agent runs; 503 with the crashed agents named
otherwise. ``replay_sessions`` lists, per placement shard of this worker that holds input for a live replay,
``{"shard", "session", "since_watermark_s", "held", "stale"}``. A stale session (no watermark for half of
``replay_session_timeout_s``: its replayer is gone) makes the status ``degraded``, still with 200: the worker
itself is sound, a restart would rebuild the same hold, and the timeout ends it; a liveness probe that
restarted workers on it would only add rebuilds. Each app has its own registry, so several apps in one
process (tests) do not collide.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Final

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["LATENCY_BUCKETS", "Observability", "consumer_lag", "install"]

LATENCY_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


def consumer_lag(read: Mapping[Any, int], end: Mapping[Any, int]) -> dict[tuple[str, int], int]:
    """(topic, partition) → end − next offset to read, for partitions with both known. Faust's monitor
    records the offset of the last message read, so the next one to read is one more."""
    lag: dict[tuple[str, int], int] = {}
    for tp, end_offset in end.items():
        last = read.get(tp)
        if last is not None:
            lag[(str(tp.topic), int(tp.partition))] = max(0, int(end_offset) - (int(last) + 1))
    return lag


class _LagCollector(Collector):
    def __init__(self, app: Any) -> None:
        self.app = app

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "eyrie_consumer_lag",
            "Records not yet read, per assigned partition",
            labels=["topic", "partition"],
        )
        monitor = getattr(self.app, "monitor", None)
        read = getattr(monitor, "tp_read_offsets", None) or {}
        end = getattr(monitor, "tp_end_offsets", None) or {}
        for (topic, partition), lag in sorted(consumer_lag(read, end).items()):
            family.add_metric([topic, str(partition)], lag)
        yield family


class Observability:
    """The counters and histograms agents update; one per app."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        registry = self.registry
        self.attempts = Histogram(
            "eyrie_scheduling_attempt_duration_seconds",
            "One placement attempt of a pod",
            ["result"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.latency = Histogram(
            "eyrie_scheduling_latency_seconds",
            "From the sequencer record's timestamp to the decision sent",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.decisions = Counter(
            "eyrie_decisions", "Decisions placement sent", ["decision"], registry=registry
        )
        self.unschedulable = Counter("eyrie_unschedulable", "Unschedulable verdicts", registry=registry)
        self.results = Counter(
            "eyrie_binding_results", "Binding results of the applier", ["status"], registry=registry
        )
        self.conflicts = Counter("eyrie_conflicts", "Bindings the ledger refused", registry=registry)
        self.dead_letters = Counter(
            "eyrie_dead_letters", "Records sent to dead letters", ["topic"], registry=registry
        )
        # Children bound once: `labels()` on every decision would cost more than the increment.
        self.scheduled = self.attempts.labels("scheduled")
        self.failed = self.attempts.labels("unschedulable")
        self.waiting = self.attempts.labels("waiting")
        self.bindings_sent = self.decisions.labels("binding")
        self.verdicts_sent = self.decisions.labels("unschedulable")
        self.by_status = {
            status: self.results.labels(status) for status in ("applied", "conflict", "rejected")
        }
        self.replay_sessions: Callable[[], list[dict[str, Any]]] = list
        """The replay sessions this process's placement shards hold input for (the placement agent sets it;
        each entry has a boolean ``stale``)."""

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


def _crashed(agents: Iterable[Any]) -> list[str]:
    return sorted(str(agent.name) for agent in agents if getattr(agent, "crashed", False))


def _assigned(app: Any) -> dict[str, list[int]]:
    """Topic → partitions this process consumes as the active owner (standbys not included): which worker
    owns a placement shard right now."""
    assigned: dict[str, list[int]] = {}
    for tp in app.assignor.assigned_actives() if app.assignor is not None else ():
        assigned.setdefault(str(tp.topic), []).append(int(tp.partition))
    return {topic: sorted(partitions) for topic, partitions in sorted(assigned.items())}


def install(app: Any, observability: Observability, role: str) -> None:
    """Register the lag collector and the two pages on `app` (served only when its web server runs)."""
    from aiohttp.web import Response, json_response

    observability.registry.register(_LagCollector(app))

    @app.page("/metrics")  # type: ignore[untyped-decorator]
    async def metrics(self: Any, request: Any) -> Any:
        return Response(body=observability.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    @app.page("/health")  # type: ignore[untyped-decorator]
    async def health(self: Any, request: Any) -> Any:
        crashed = _crashed(app.agents.values())
        sessions = observability.replay_sessions()
        stale = any(session["stale"] for session in sessions)
        body = {
            "status": "failing" if crashed else "degraded" if stale else "ok",
            "role": role,
            "crashed_agents": crashed,
            "rebalancing": bool(getattr(app, "rebalancing", False)),
            "assigned": _assigned(app),
            "replay_sessions": sessions,
        }
        return json_response(body, status=200 if not crashed else 503)
