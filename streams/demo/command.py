"""What both demos' command lines share: argparse errors and eyrie's errors as one line with exit 2, and
the run's figures as one JSON line last."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import orjson

from schemas.exceptions import EyrieError

__all__ = ["OneLineParser", "print_result"]


class OneLineParser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, as every other bad input gets, rather than argparse's usage and message."""
        print(f"error: {message}", file=sys.stderr)
        raise SystemExit(2)


def print_result(run: Callable[[], dict[str, Any]]) -> None:
    """Runs the demo and prints its figures as one JSON line; an `EyrieError` is one line and exit 2."""
    try:
        result = run()
    except EyrieError as exc:
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        raise SystemExit(2) from None
    print(orjson.dumps(result).decode())
