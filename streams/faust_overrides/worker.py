"""Faust's worker, with eyrie's logging left in place, no terminal spinner, and what stopped it remembered."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import faust

__all__ = ["EyrieWorker"]


class EyrieWorker(faust.Worker):
    """Faust's worker, with the root logger's handlers left alone (eyrie's logging, set up by the CLI before
    it starts), no spinner, `stop_reason` naming the signal that stopped it, and `on_ready` called once it
    has started (unless it is shutting down at once)."""

    def __init__(
        self,
        app: faust.App,
        *args: Any,
        on_ready: Callable[[EyrieWorker], None] | None = None,
        **kwargs: Any,
    ) -> None:
        # Faust's worker would replace the root logger's handlers with its own (coloured text, stdout
        # redirected into the log), so `--log-format json` would not hold for Faust's lines.
        super().__init__(app, *args, override_logging=False, **kwargs)
        # No terminal spinner. Its handler set the root logger to DEBUG, so every debug call of Faust and mode
        # (one per record a table writes to its changelog) built a LogRecord, walked the stack for its caller
        # and went through the handlers: 3 % of the applier's samples at 500 pods/s.
        self.spinner = None
        self.on_ready = on_ready
        self.stop_reason = "stopped"

    def _schedule_shutdown(self, sig: signal.Signals) -> None:
        # Where mode's handlers of SIGINT and SIGTERM both go (`_on_sigint`, `_on_sigterm`): one override
        # for both.
        self.stop_reason = sig.name
        super()._schedule_shutdown(sig)

    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        if self.on_ready is not None and not self._shutdown_immediately:
            self.on_ready(self)
