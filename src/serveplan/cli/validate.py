"""``serveplan validate``: the validation command (:mod:`serveplan.commands.validate`) rendered as tables."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from serveplan.cli.base import console, count_bar, emit_json, options_command
from serveplan.commands import validate as command

_EXTRA = (
    ("json_out", bool, typer.Option(False, "--json", help="Print JSON: every row with its prediction, band and "
                                                           "error, and every row not mapped with the reason.")),
    ("progress", bool | None, typer.Option(None, "--progress/--no-progress", help=(
        "Progress bar on stderr (default: when stderr is a terminal)."))),
)


@options_command("validate", command.ValidateOptions, extra=_EXTRA)
def validate_cmd(opts: command.ValidateOptions, *, json_out: bool = False, progress: bool | None = None) -> None:
    """Rerun the whole validation: every bundled published measurement predicted out of the box from the
    settings its source states, the errors per kind, engine, source, accelerator and model class, and the
    confidence bands checked with each row's own source left out (a few minutes on two cores)."""
    prep = command.prepare(opts)
    enabled = sys.stderr.isatty() if progress is None else progress
    with count_bar(len(prep.rows), enabled, unit="row", desc="validate") as update:
        result = command.run(prep, on_progress=update)
    if json_out:
        emit_json(result.document())
        return
    _print(result)


def _pct(x: float, signed: bool = False) -> str:
    if x != x:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _print(result: command.ValidateResult) -> None:
    from serveplan.validate.suite import GROUPS, HELD_OUT

    rep = result.report
    con = console()
    o = rep.overall()
    con.print(f"{o.rows} of {len(rep.outcomes)} rows predicted ({len(rep.unmapped)} not mapped) from {o.sources} "
              f"sources in {rep.seconds:.0f} s with {rep.jobs} processes; error = predicted / measured - 1: median "
              f"|error| {_pct(o.median_abs_error)}, bias {_pct(o.bias, True)}, {o.within_25:.0%} within 25%, "
              f"{o.within_2x:.0%} within 2x")
    for key, title in GROUPS:
        t = Table(title=f"by {title}", title_justify="left")
        for col in (title, "rows", "sources", "median |err|", "bias", "within 25%", "within 2x"):
            t.add_column(col, justify="left" if col == title else "right")
        for name, s in rep.table(key):
            t.add_row(name, str(s.rows), str(s.sources), _pct(s.median_abs_error), _pct(s.bias, True),
                      f"{s.within_25:.0%}", f"{s.within_2x:.0%}")
        con.print(t)
    cov = Table(title="confidence bands, leave one source out: measured values inside their P10-P90 band "
                      "(target 75-85%)", title_justify="left")
    for col in ("kind", "rows with a band", "inside", "coverage", "no band from other sources"):
        cov.add_column(col, justify="left" if col == "kind" else "right")
    for c in rep.coverage():
        cov.add_row(c.kind, str(c.banded), str(c.inside), _pct(c.share), str(c.extrapolated))
    con.print(cov)
    con.print(f"held out: {HELD_OUT}")
    reasons = rep.unmapped_reasons()
    if reasons:
        con.print(f"{len(rep.unmapped)} rows not mapped (each listed with its reason in --json):")
        for reason, n in reasons[:12]:
            con.print(f"  {n:3d} {reason}")
        if len(reasons) > 12:
            con.print(f"  ... {len(reasons) - 12} more reasons")
    for p in result.files:
        con.print(f"wrote {p}")
