"""The lines a worker or an applier writes about itself: one when it is ready (what it owns), one each time
its partitions change hands, one when it loses the Kafka broker and one when the broker is back, one when it
stops. Each is logged by ``eyrie.<role>`` with ``extra={"fields": {"event": ...}}``, so ``--log-format json``
gives machines the same facts as fields (`streams.runtime.logs.JsonFormatter`).

The broker is probed about once a second through the consumer's own Kafka client (`probe_broker`): a
connection to any broker of the cluster that is open, or that opens, means the broker is there. A broker
that stops closes the connections, so a loss shows within a second or two; one that hangs with its
connections open shows once the client's requests time out (``request_timeout_ms``) and it closes them.
"""

from __future__ import annotations

import asyncio
import logging
import math
import signal
import time
from collections.abc import Coroutine, Mapping
from typing import Any, Final

from streams.faust_overrides.clients import consumer_client
from streams.runtime.topics import TOPICS
from streams.settings import Settings

__all__ = ["PROBE_S", "BrokerWatch", "Lifecycle", "owned", "probe_broker", "run_until_signal"]

PROBE_S: Final = 1.0
"""How often a running worker or applier checks the broker (and its assignment, and collapsed log repeats)."""

PROBE_TIMEOUT_S: Final = 10.0


def owned(app: Any, settings: Settings) -> dict[str, list[int]]:
    """eyrie topic (short name) → the partitions this process consumes as their active owner (standbys
    and the tables' changelogs, which follow their topics' partitions, left out)."""
    shorts = {settings.topic(spec.short): spec.short for spec in TOPICS}
    assignor = getattr(app, "assignor", None)
    owns: dict[str, set[int]] = {}
    for tp in assignor.assigned_actives() if assignor is not None else ():
        short = shorts.get(str(tp.topic))
        if short is not None:
            owns.setdefault(short, set()).add(int(tp.partition))
    return {short: sorted(partitions) for short, partitions in sorted(owns.items())}


def _describe(owns: Mapping[str, list[int]]) -> str:
    if not owns:
        return "no partitions"
    return ", ".join(f"{short} {list(partitions)}" for short, partitions in owns.items())


async def probe_broker(app: Any) -> bool | None:
    """Whether the app's Kafka consumer can reach any broker of its cluster (None: not known yet, before the
    consumer has started or read the cluster's metadata)."""
    client = consumer_client(app)
    if client is None:
        return None
    brokers = list(client.cluster.brokers())
    if not brokers:
        return None
    for broker in brokers:
        try:
            if await asyncio.wait_for(client.ready(broker.nodeId), PROBE_TIMEOUT_S):
                return True
        except (TimeoutError, OSError):
            continue
    return False


class BrokerWatch:
    """Turns probe results into the two events an operator needs: ``lost`` on the first failed probe after
    a good one (or since the start), ``back`` on the first good one after that. Unknown results change
    nothing."""

    __slots__ = ("back_at", "lost_at", "reachable")

    def __init__(self) -> None:
        self.reachable = True
        self.lost_at: float | None = None
        self.back_at = -math.inf

    def settled(self, now: float, for_s: float) -> bool:
        """Whether the broker has answered for at least `for_s` (or since the start): what a check for a
        stalled fetch needs before it can blame the process."""
        return self.reachable and now - self.back_at >= for_s

    def observe(self, reachable: bool | None, now: float) -> tuple[str, float] | None:
        """("lost", 0) or ("back", seconds it was lost), or None when nothing changed."""
        if reachable is None or reachable == self.reachable:
            return None
        self.reachable = reachable
        if not reachable:
            self.lost_at = now
            return ("lost", 0.0)
        lost_for = now - (self.lost_at if self.lost_at is not None else now)
        self.lost_at, self.back_at = None, now
        return ("back", lost_for)


class Lifecycle:
    """The lifecycle lines of one worker or applier process."""

    def __init__(self, role: str, settings: Settings, web_port: int | None) -> None:
        self.role = role
        self.settings = settings
        self.web_port = web_port
        self.log = logging.getLogger(f"eyrie.{role}")
        self.started = time.monotonic()
        self.owns: dict[str, list[int]] | None = None
        self.broker = BrokerWatch()

    def _fields(self, event: str, **fields: Any) -> dict[str, Any]:
        return {"fields": {"event": event, "role": self.role, **fields}}

    def _shards(self, owns: Mapping[str, list[int]]) -> str:
        shards = owns.get("sequencer")
        return f"; placement shards {shards}" if self.role == "worker" and shards else ""

    def ready(self, app: Any) -> None:
        owns = self.owned_now(app)
        self.owns = owns
        web = f"web port {self.web_port}" if self.web_port is not None else "no web server"
        self.log.info(
            "ready: %s on Kafka %s in %.1f s; owns %s%s; %s",
            self.role,
            self.settings.bootstrap_servers,
            time.monotonic() - self.started,
            _describe(owns),
            self._shards(owns),
            web,
            extra=self._fields(
                "ready",
                broker=self.settings.bootstrap_servers,
                topic_prefix=self.settings.topic_prefix,
                assigned=owns,
                shards=owns.get("sequencer", []) if self.role == "worker" else [],
                web_port=self.web_port,
            ),
        )

    def owned_now(self, app: Any) -> dict[str, list[int]]:
        return owned(app, self.settings)

    def check_assignment(self, app: Any) -> None:
        """Logs the assignment when a rebalance has changed it (once ready, and not mid-rebalance)."""
        if self.owns is None or getattr(app, "rebalancing", False):
            return
        owns = self.owned_now(app)
        if owns != self.owns:
            self.owns = owns
            self.log.info(
                "assigned: %s now owns %s%s",
                self.role,
                _describe(owns),
                self._shards(owns),
                extra=self._fields(
                    "assigned",
                    assigned=owns,
                    shards=owns.get("sequencer", []) if self.role == "worker" else [],
                ),
            )

    def check_broker(self, reachable: bool | None) -> None:
        change = self.broker.observe(reachable, time.monotonic())
        if change is None:
            return
        event, seconds = change
        broker = self.settings.bootstrap_servers
        if event == "lost":
            self.log.warning(
                "broker lost: cannot reach Kafka at %s; retrying until it is back",
                broker,
                extra=self._fields("broker_lost", broker=broker),
            )
        else:
            self.log.info(
                "broker back: Kafka at %s answers again after %.1f s",
                broker,
                seconds,
                extra=self._fields("broker_back", broker=broker, lost_s=round(seconds, 1)),
            )

    def stopped(self, code: int, reason: str) -> None:
        level = logging.INFO if code == 0 else logging.ERROR
        self.log.log(
            level,
            "stopped: %s (%s) after %.1f s, exit status %d",
            self.role,
            reason,
            time.monotonic() - self.started,
            code,
            extra=self._fields("stopped", reason=reason, exit_code=code),
        )


async def run_until_signal(coroutine: Coroutine[Any, Any, object]) -> signal.Signals | None:
    """Run `coroutine` to its end, or until SIGINT or SIGTERM cancels it (it cleans up when cancelled; a
    second signal cancels the clean-up): the signal, or None."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(coroutine)
    received: list[signal.Signals] = []

    def stop(signum: signal.Signals) -> None:
        received.append(signum)
        task.cancel()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop, signum)
    try:
        await task
    except asyncio.CancelledError:
        if not received:
            raise
        return received[0]
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
    return None
