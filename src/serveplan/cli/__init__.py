"""Command-line interface: ``serveplan estimate | simulate | optimize | sweep | day-plan | offload | profile |
calibrate | compare | validate | models | hardware | engines | hosts | ui``.

Each subcommand builds a config, calls one public function and renders the result; no modelling
logic lives here. Exit codes: 0 ok, 2 bad input (:class:`SpecError`), 3 infeasible
(:class:`InfeasibleError`), 4 solver failure.

The shared parts are in :mod:`serveplan.cli.base`; each subcommand module registers on its Typer
application when imported. :func:`main` imports only the module of the subcommand named on the
command line (``serveplan estimate`` does not load the simulator, the optimizer or the web page),
and all of them for anything else (``--help``, completion, an unknown name, whose error then lists
them all). ``from serveplan.cli import app`` gives the application with every subcommand.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import typer

from serveplan.cli.base import (
    console,
    count_bar,
    emit_json,
    fail,
    handle_errors,
    options_command,
    package_version,
    parse_int_list,
)

if TYPE_CHECKING:
    from serveplan.cli.base import app

__all__ = ["COMMANDS", "app", "console", "count_bar", "emit_json", "fail", "handle_errors", "load_commands", "main",
           "options_command", "package_version", "parse_int_list"]

# subcommand -> the module of this package that registers it
COMMANDS: dict[str, str] = {
    "estimate": "estimate", "simulate": "simulate", "optimize": "optimize", "sweep": "sweep", "day-plan": "day",
    "offload": "offload", "profile": "calibrate", "calibrate": "calibrate", "compare": "calibrate",
    "validate": "validate", "models": "catalog", "hardware": "catalog", "engines": "catalog", "hosts": "catalog",
    "ui": "ui",
}


def load_commands(argv: Sequence[str] | None = None) -> typer.Typer:
    """The application with the subcommand ``argv`` names registered (the first argument that is not
    an option), or with all of them when it names none of them or ``argv`` is ``None``."""
    from serveplan.cli import base

    named = next((a for a in argv if not a.startswith("-")), None) if argv is not None else None
    modules = [COMMANDS[named]] if named in COMMANDS else sorted(set(COMMANDS.values()))
    for module in modules:
        importlib.import_module(f"serveplan.cli.{module}")
    return base.app


def __getattr__(name: str) -> Any:
    if name == "app":  # every subcommand, as the tests and the documentation's examples drive it
        return load_commands()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    """Console entry point: usage errors (unknown option, value of the wrong type) print one line
    naming the option, like every other bad input, and exit with code 2."""
    # one BLAS thread per process unless the user says otherwise: every array here is small (the
    # threaded kernels never start) and a search runs one process per core, while OpenBLAS starts a
    # thread per core when numpy is imported (about 0.1 s of CPU per process for nothing); set
    # before the commands import numpy
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    try:
        # shell completion (_SERVEPLAN_COMPLETE, set by the completion script) offers every subcommand
        completing = any(k.endswith("_COMPLETE") for k in os.environ)
        rv = load_commands(None if completing else sys.argv[1:])(standalone_mode=False)
    except KeyboardInterrupt:  # pragma: no cover
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except BrokenPipeError:
        _closed_pipe()
    except SystemExit as exc:
        # the CLI library and rich turn a closed pipe into exit 1; the reader had what it wanted
        if isinstance(exc.__context__, BrokenPipeError):
            _closed_pipe()
        raise
    except Exception as exc:
        # the CLI library's usage errors carry exit code 2 and a formatted message
        message = getattr(exc, "format_message", None)
        if type(exc).__name__ == "NoArgsIsHelpError" and message:  # bare `serveplan`: show the help
            typer.echo(message())
            sys.exit(0)
        if getattr(exc, "exit_code", None) == 2 and message:
            typer.echo(f"error: {' '.join(message().split())}", err=True)
            sys.exit(2)
        if type(exc).__name__ == "Abort":  # pragma: no cover - Ctrl-C at a prompt
            typer.echo("interrupted", err=True)
            sys.exit(130)
        raise
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _closed_pipe()
    sys.exit(rv if isinstance(rv, int) else 0)


def _closed_pipe() -> None:
    """The reader of our output closed it (``serveplan models | head``): what it wanted it has, so
    exit 0, and point stdout at /dev/null so the interpreter's final flush raises nothing."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout already closed
        pass
    sys.exit(0)
