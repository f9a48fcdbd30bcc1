"""The ``eyrie`` command: `main` is its entry point, `app` the Typer application (one module per group of
subcommands beside `main`)."""

from streams.cli.main import app, main

__all__ = ["app", "main"]
