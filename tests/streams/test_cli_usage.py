"""Usage mistakes that Click catches before a command runs get eyrie's contract too: one line, exit 2."""

from __future__ import annotations

import pytest
import typer
from typer._click import exceptions as click_errors

from tests.commands import run_module

CASES = [
    pytest.param(("decisions", "--bogus"), "No such option: --bogus", id="An unknown option is one line."),
    pytest.param(
        ("broker", "status", "--port", "0"), "--port", id="A value outside an option's range is one line."
    ),
    pytest.param(("nosuch",), "No such command 'nosuch'", id="An unknown command is one line."),
    pytest.param(("schema", "export"), "Missing argument 'directory'", id="A missing argument is one line."),
]


@pytest.mark.parametrize(("args", "named"), CASES)
def test_a_usage_mistake_is_one_line_and_exit_2(args: tuple[str, ...], named: str) -> None:
    done = run_module("streams.cli", *args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: ") and named in lines[0]
    assert "--help" in lines[0]


def test_help_still_exits_0() -> None:
    done = run_module("streams.cli", "--help")
    assert done.returncode == 0 and "Usage" in done.stdout


def test_the_vendored_click_errors_are_the_ones_typer_raises() -> None:
    """Canary for the one private import in streams/cli/main.py: a typer upgrade that moves Click fails
    here."""
    assert issubclass(typer.BadParameter, click_errors.UsageError)
    assert issubclass(click_errors.UsageError, click_errors.ClickException)
    assert issubclass(click_errors.NoArgsIsHelpError, click_errors.UsageError)


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("--log-level", "loud", "schema", "export", "OUT"), id="Before the subcommand."),
        pytest.param(("schema", "export", "OUT", "--log-level", "loud"), id="After the subcommand."),
        pytest.param(("schema", "export", "OUT", "--log-level=loud"), id="After it, with an equals sign."),
    ],
)
def test_the_logging_options_are_read_wherever_they_stand(args: tuple[str, ...], tmp_path) -> None:
    done = run_module("streams.cli", *(str(tmp_path) if a == "OUT" else a for a in args))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: --log-level: unknown level 'loud' (one of debug, info, warning, error)"
    ]
