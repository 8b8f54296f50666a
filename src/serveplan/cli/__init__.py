"""Command-line interface: ``serveplan estimate | simulate | optimize | sweep | day-plan | offload | profile |
calibrate | compare | validate | models | hardware``.

Each subcommand builds a config, calls one public function and renders the result; no modelling
logic lives here. Exit codes: 0 ok, 2 bad input (:class:`SpecError`), 3 infeasible
(:class:`InfeasibleError`), 4 solver failure.
"""

from __future__ import annotations

import functools
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import typer

from serveplan.commands.parsing import parse_int_list
from serveplan.errors import InfeasibleError, PlannerError, SolverError, SpecError

__all__ = ["app", "console", "emit_json", "fail", "handle_errors", "main", "options_command", "parse_int_list"]

app = typer.Typer(
    name="serveplan",
    help="Plan LLM serving: predict TTFT, TPOT, throughput and goodput of serving strategies, and rank them.",
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish and PowerShell
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

F = TypeVar("F", bound=Callable[..., Any])


class _NoteHandler(logging.Handler):
    """Prints the library's notes (how a name was read, :mod:`serveplan.specs.catalog`) on stderr as
    ``note: ...``, so ``--json`` output stays clean."""

    def emit(self, record: logging.LogRecord) -> None:
        typer.echo(f"note: {record.getMessage()}", err=True)


def _show_notes() -> None:
    logger = logging.getLogger("serveplan.specs")
    logger.setLevel(logging.INFO)
    if not any(isinstance(h, _NoteHandler) for h in logger.handlers):
        logger.addHandler(_NoteHandler())


def package_version() -> str:
    """The installed package's version (its metadata), or ``"unknown"`` when run from a source tree
    that was never installed."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("serveplan")
    except PackageNotFoundError:
        return "unknown (not installed: pip install -e .)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"serveplan {package_version()}")
        raise typer.Exit(0)


@app.callback()
def _main_options(
    version: bool = typer.Option(False, "--version", help="Print the version and exit.", is_eager=True,
                                 callback=_print_version),
) -> None:
    """Plan LLM serving: predict TTFT, TPOT, throughput and goodput of serving strategies, and rank them."""
    _show_notes()


def fail(message: str, code: int = 2) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


def handle_errors(fn: F) -> F:
    """Turn planner errors into one line on stderr and an exit code (2 input, 3 infeasible)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SpecError as exc:
            raise fail(str(exc), 2) from None
        except InfeasibleError as exc:
            raise fail(f"infeasible: {exc}", 3) from None
        except SolverError as exc:
            raise fail(f"solver: {exc}", 4) from None
        except BrokenPipeError:  # the reader went away (`| head`): not an error, main() ends quietly
            raise
        except PlannerError as exc:  # pragma: no cover - every subclass is handled above
            raise fail(str(exc), 2) from None
        except OSError as exc:  # an output directory that cannot be written, a file that vanished
            where = f" {exc.filename!r}" if exc.filename else ""
            raise fail(f"cannot access{where}: {exc.strerror or exc}", 2) from None

    return cast(F, wrapper)


def options_command(name: str, options: type[Any], *, extra: Sequence[tuple[str, Any, Any]] = (),
                    help: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register command ``name`` whose options are the fields of ``options`` (a
    :class:`~serveplan.commands.options.CommandOptions`): each field's flags, default and help make
    one Typer option, so the CLI and the web page read one definition. ``extra`` adds front-end
    options as ``(name, type, typer.Option(...))`` (``--json``, ``--progress``). The decorated
    function is called with the options value and the extra options as keywords; errors become one
    line and an exit code (:func:`handle_errors`)."""
    import inspect

    params = []
    for f in options.fields():
        flags = list(f.opt.flags)
        if f.is_switch:
            kind: Any = bool | None if f.optional else bool
            if f.opt.off_flag:
                flags[0] = f"{flags[0]}/{f.opt.off_flag}"
            default = typer.Option(f.default, *flags, help=f.opt.help)
        else:
            # text in, converted by the options value itself: the page and the CLI share one parser,
            # so a bad value gets the same message through both
            kind = str | None
            shown = None if f.default is None else str(getattr(f.default, "value", f.default))
            if f.opt.argument:  # positional; required when it has no default
                default = typer.Argument(... if shown is None else shown, help=f.opt.help,
                                         metavar=f.opt.name.upper(), show_default=False)
                kind = str
            else:
                default = typer.Option(shown, *flags, help=f.opt.help)
        params.append(inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default))
    for ename, etype, eopt in extra:
        params.append(inspect.Parameter(ename, inspect.Parameter.KEYWORD_ONLY, annotation=etype, default=eopt))

    def deco(render: Callable[..., Any]) -> Callable[..., Any]:
        extra_names = {e[0] for e in extra}

        def command(**kwargs: Any) -> Any:
            opts = options.parse({k: v for k, v in kwargs.items() if k not in extra_names and v is not None},
                                 blank_is_default=False)
            return render(opts, **{k: v for k, v in kwargs.items() if k in extra_names})

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        command.__doc__ = help or render.__doc__
        command.__name__ = f"{name.replace('-', '_')}_cmd"
        app.command(name)(handle_errors(command))
        return render

    return deco


def console() -> Any:
    """A rich console: the terminal's width, or ``COLUMNS`` when set; 160 columns when output is not
    a terminal, so tables stay readable in files."""
    import os

    from rich.console import Console

    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return Console(width=int(cols))
    return Console() if sys.stdout.isatty() else Console(width=160)


def emit_json(obj: Any) -> None:
    """Print ``obj`` as strict JSON (a statistic of nothing is ``null``, never NaN or Infinity)."""
    from serveplan.report.documents import strict

    typer.echo(json.dumps(strict(json.loads(json.dumps(obj, default=_json_default))), indent=2, allow_nan=False))


@contextmanager
def count_bar(total: int, enabled: bool, *, unit: str, desc: str) -> Iterator[Callable[[int, int], None] | None]:
    """A tqdm bar on stderr for a command that reports ``(done, total)``: yields the callback a
    command's ``run(..., on_progress=)`` takes, or ``None`` when ``enabled`` is false."""
    if not enabled:
        yield None
        return
    from tqdm import tqdm

    with tqdm(total=total, unit=unit, desc=desc, file=sys.stderr, leave=False, dynamic_ncols=True) as bar:
        def update(done: int, _total: int) -> None:
            if done > bar.n:
                bar.update(done - bar.n)

        yield update


def _json_default(o: Any) -> Any:
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if hasattr(o, "item"):
        return o.item()
    if hasattr(o, "value"):
        return o.value
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def main() -> None:
    """Console entry point: usage errors (unknown option, value of the wrong type) print one line
    naming the option, like every other bad input, and exit with code 2."""
    try:
        rv = app(standalone_mode=False)
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
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # pragma: no cover - stdout already closed
        pass
    sys.exit(0)


# subcommands register themselves on ``app``
from serveplan.cli import calibrate as _calibrate  # noqa: E402,F401
from serveplan.cli import catalog as _catalog  # noqa: E402,F401
from serveplan.cli import day as _day  # noqa: E402,F401
from serveplan.cli import estimate as _estimate  # noqa: E402,F401
from serveplan.cli import offload as _offload  # noqa: E402,F401
from serveplan.cli import optimize as _optimize  # noqa: E402,F401
from serveplan.cli import simulate as _simulate  # noqa: E402,F401
from serveplan.cli import sweep as _sweep  # noqa: E402,F401
from serveplan.cli import ui as _ui  # noqa: E402,F401
from serveplan.cli import validate as _validate  # noqa: E402,F401
