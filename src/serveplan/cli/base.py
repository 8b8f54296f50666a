"""The CLI's shared parts: the Typer application every subcommand registers on, and the helpers they
use (errors to exit codes, options values to Typer options, JSON and tables, progress bars).

The package :mod:`serveplan.cli` imports only the subcommand it is asked to run (:func:`serveplan.cli.main`).

Command-line interface: ``serveplan estimate | simulate | optimize | sweep | day-plan | offload | profile |
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

__all__ = ["app", "console", "count_bar", "emit_json", "fail", "handle_errors", "options_command", "package_version",
           "parse_int_list"]

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
    from serveplan.units import json_safe

    typer.echo(json.dumps(json_safe(json.loads(json.dumps(obj, default=_json_default))), indent=2, allow_nan=False))


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
