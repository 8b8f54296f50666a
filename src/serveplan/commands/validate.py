"""``validate``: the whole validation against the bundled measured figures (``serveplan validate``).

:class:`ValidateOptions` is the question (which rows: ``--source``, ``--engine``, ``--kind``, each
a comma-separated list); :func:`prepare` checks it and selects the rows before any work;
:func:`run` answers it (:class:`ValidateResult`): every row predicted out of the box, the errors
per kind, engine, source, accelerator and model class, the leave-one-source-out band coverage
(:mod:`serveplan.validate.suite`), and on request the generated summary page
(``--write-docs``) and the residual table the bands of ``simulate``, ``optimize`` and
``estimate`` read (``--write-residuals``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from serveplan.commands.options import CommandOptions, opt
from serveplan.errors import SpecError, check_int
from serveplan.units import json_safe
from serveplan.validate.confidence import residuals_document, residuals_text
from serveplan.validate.rows import KINDS, MODELLED_ENGINES, MeasuredRow, load_rows, load_sources
from serveplan.validate.suite import ValidationReport, run_validation, select_rows
from serveplan.validate.summary import summary_markdown

#: the engines ``--engine`` takes (``other``: the systems the tool does not model)
ENGINE_CHOICES = (*MODELLED_ENGINES, "other")


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidateOptions(CommandOptions):
    """The question ``serveplan validate`` answers (module doc)."""

    source: str | None = opt(None, "--source", help=(
        "Only these sources (comma-separated ids, e.g. trtllm-docs-perf-overview-v0.14; default: all)."))
    engine: str | None = opt(None, "--engine", "-e", help=(
        "Only rows of these engines: vllm, sglang, trtllm, other (comma-separated; default: all)."))
    kind: str | None = opt(None, "--kind", help=(
        "Only these kinds of figure: TTFT, TPOT, E2E, throughput, goodput, speedup, power (comma-separated; default: "
        "all)."))
    jobs: int | None = opt(None, "--jobs", "-j", help="Parallel workers (default: all cores).")
    write_docs: Path | None = opt(None, "--write-docs", help=(
        "Write the summary page (docs/validation.md) generated from this run to this path; needs every row."),
        page=False)
    write_residuals: Path | None = opt(None, "--write-residuals", help=(
        "Write the residual table the bands of simulate, optimize and estimate read "
        "(src/serveplan/validate/data/residuals.json) to this path; needs every row."), page=False)

    def __post_init__(self) -> None:
        if self.jobs is not None:
            check_int("jobs", self.jobs, low=1, high=1024)
        _ = (self.sources, self.engines, self.kinds)   # parsed here: a bad value fails before any work
        if (self.write_docs or self.write_residuals) and (self.source or self.engine or self.kind):
            flag = "--write-docs" if self.write_docs else "--write-residuals"
            raise SpecError(f"{flag} writes the whole validation; drop --source, --engine and --kind")

    @property
    def sources(self) -> tuple[str, ...]:
        return _choices("source", self.source, tuple(load_sources()))

    @property
    def engines(self) -> tuple[str, ...]:
        return _choices("engine", self.engine, ENGINE_CHOICES)

    @property
    def kinds(self) -> tuple[str, ...]:
        return _choices("kind", self.kind, KINDS)


def _choices(name: str, text: str | None, choices: Sequence[str]) -> tuple[str, ...]:
    """``text`` (comma-separated, case-insensitive) as values of ``choices``, or a one-line error
    naming the option, the value and the choices."""
    if text is None:
        return ()
    by_lower = {c.lower(): c for c in choices}
    out = []
    for part in (p.strip() for p in text.split(",")):
        if part.lower() not in by_lower:
            shown = part if part else text
            raise SpecError(f"{name}={shown!r} is not one of the choices; expected one of: {', '.join(choices)}")
        out.append(by_lower[part.lower()])
    return tuple(out)


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedValidation:
    """A checked validation: its options and the rows it will predict."""

    options: ValidateOptions
    rows: tuple[MeasuredRow, ...]


def prepare(o: ValidateOptions) -> PreparedValidation:
    """Check ``o`` and select its rows."""
    rows = select_rows(load_rows(), sources=o.sources, engines=o.engines, kinds=o.kinds)
    if not rows:
        raise SpecError(f"no bundled row matches {' '.join(o.argv())}; drop a filter (serveplan validate --json "
                        "lists every row)")
    return PreparedValidation(options=o, rows=tuple(rows))


@dataclass(frozen=True, slots=True, kw_only=True)
class ValidateResult:
    """The answer: the validation report and the files written."""

    prepared: PreparedValidation
    report: ValidationReport
    files: tuple[Path, ...] = field(default_factory=tuple)

    @property
    def options(self) -> ValidateOptions:
        return self.prepared.options

    def document(self) -> dict[str, Any]:
        """What ``serveplan validate --json`` prints."""
        doc: dict[str, Any] = json_safe(self.report.to_dict() | {"command": self.options.command_line("validate")})
        return doc


def run(o: ValidateOptions | PreparedValidation, *,
        on_progress: Callable[[int, int], None] | None = None) -> ValidateResult:
    """Answer the validate question (module doc)."""
    prep = o if isinstance(o, PreparedValidation) else prepare(o)
    opts = prep.options
    filters = {k: list(v) for k, v in (("source", opts.sources), ("engine", opts.engines), ("kind", opts.kinds)) if v}
    report = run_validation(prep.rows, jobs=opts.jobs, on_progress=on_progress, filters=filters)
    files: list[Path] = []
    command = "serveplan validate"
    if opts.write_docs is not None:
        opts.write_docs.parent.mkdir(parents=True, exist_ok=True)
        opts.write_docs.write_text(summary_markdown(report, command=command))
        files.append(opts.write_docs)
    if opts.write_residuals is not None:
        opts.write_residuals.parent.mkdir(parents=True, exist_ok=True)
        doc = residuals_document(report.residuals(), command=f"{command} --write-residuals")
        opts.write_residuals.write_text(residuals_text(json_safe(doc)))
        files.append(opts.write_residuals)
    return ValidateResult(prepared=prep, report=report, files=tuple(files))
