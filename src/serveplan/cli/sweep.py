"""``serveplan sweep``: the sweep command (:mod:`serveplan.commands.sweep`) rendered as a table."""

from __future__ import annotations

import sys

import typer
from rich.table import Table

from serveplan.cli.base import console, count_bar, emit_json, options_command
from serveplan.commands import sweep as command

_EXTRA = (
    ("json_out", bool, typer.Option(False, "--json", help="Print JSON: the summary rows, the run's counts and time.")),
    ("progress", bool | None, typer.Option(None, "--progress/--no-progress", help=(
        "Progress bar on stderr (default: when stderr is a terminal)."))),
)


@options_command("sweep", command.SweepOptions, extra=_EXTRA)
def sweep_cmd(opts: command.SweepOptions, *, json_out: bool = False, progress: bool | None = None) -> None:
    """Answer a grid of optimize questions (models x accelerators x workloads x SLOs x engines), each one
    search, locally or on a Ray cluster, and print the best plan and its cost per question. With --out, a
    rerun skips the questions already answered."""
    prep = command.prepare(opts)
    enabled = sys.stderr.isatty() if progress is None else progress
    with count_bar(len(prep.questions), enabled, unit="question", desc="sweep") as update:
        result = command.run(prep, on_progress=update)
    if json_out:
        emit_json(result.document())
        return
    _print(result)


def _num(v: object, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _print(result: command.SweepResult) -> None:
    con = console()
    prep = result.prepared
    rows = result.rows()
    several = len({r["workload"] for r in rows if r["workload"] is not None}) > 1
    t = Table(title=f"{prep.path}: the best plan of each question (ranked by each question's objective)",
              title_justify="left")
    cols = ["#", *prep.axes, *(["workload"] if several else []), "best", "devices", "goodput req/s", "per device",
            "$/Mtok out", "$/month"]
    for c in cols:
        t.add_column(c, justify="right" if c in ("#", "devices", "goodput req/s", "per device", "$/Mtok out",
                                                 "$/month") else "left")
    for r in rows:
        ok = r["status"] == "ok"
        cells = [str(r["question"]), *(str(r[a]) for a in prep.axes), *([str(r["workload"])] if several else []),
                 r["best"] if ok else r["status"], _num(r["devices"], "d"), _num(r["goodput_rps"], ".2f"),
                 _num(r["goodput_per_device"], ".3f"), _num(r["usd_per_mtok_output"], ".3f"),
                 _num(r["usd_per_month"], ",.0f")]
        t.add_row(*cells, style=None if ok else "dim")
    con.print(t)
    for r in rows:
        if r["status"] != "ok":
            con.print(f"question {r['question']}: {r['status']}: {r['reason']}")
    o = prep.options
    where = "on Ray" + (f" at {o.ray_address}" if o.ray_address else "") if o.backend == "ray" else "locally"
    con.print(f"{len(result.records)} questions: {result.num_run} answered {where}, {result.num_resumed} resumed"
              + (f" from {o.out}" if o.out is not None else "") + f", {result.elapsed_s:.1f} s. $/month: the fleet "
              "run at its goodput for a month; each question's full ranking: serveplan optimize with its options"
              + (f" (in {o.out / command.QUESTIONS_DIR})" if o.out is not None else "") + ".")
    for p in result.files:
        con.print(f"wrote {p}")
