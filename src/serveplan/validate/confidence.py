"""How far to trust a prediction: a P10-P90 band from the residuals of comparable validated rows.

``serveplan validate`` (:mod:`~serveplan.validate.suite`) compares each bundled measured figure
with the tool's prediction and keeps its residual, ``ln(measured / predicted)``, with what makes
two predictions comparable (:class:`Residual`): the engine, the accelerator family, the model
class, the kind of figure (TTFT, TPOT, E2E, throughput, goodput) and the regime (offline, closed
loop, open loop, static batch), and the context length (mean prompt plus output tokens). The
table of the whole validation is bundled (``validate/data/residuals.json``, written by
``serveplan validate --write-residuals``; the goodput residuals of ``benchmarks/validate_goodput.py``
in ``goodput-residuals.json`` beside it), and every TTFT, TPOT, throughput and goodput that
``simulate``, ``optimize`` and ``estimate`` print carries the band of its comparable rows
(:func:`band_for`), or says ``extrapolated: no comparable validation`` and why.

Comparable rows (:data:`LADDER`): the first of these groups with at least :data:`MIN_ROWS` rows
whose longest validated context reaches the prediction's:

1. same engine, accelerator family, model class, kind and regime;
2. same engine, accelerator family, model class and kind (any regime);
3. same accelerator family, model class, kind and regime (any engine);
4. same accelerator family, model class and kind.

The accelerator family and the model class are never relaxed: a new accelerator family or an
unseen model class is an extrapolation, and so is a context longer than every comparable row's.
Nor is the regime of a latency (:data:`LATENCY_KINDS`: TTFT, TPOT, E2E; steps 1 and 3 only): a
latency measures the load as much as the deployment (a burst's TTFT is mostly its wait in the
queue, an open loop's at its goodput mostly the prompt's own time), so a residual from another
regime says nothing of this one's error. Rates (throughput, goodput) keep the whole ladder: a
capacity is the deployment's whatever fills it. (Rule of 2026-11-30, written after the latency
bands' coverage had been measured, 50% of 6 rows each: a planner's open-loop TTFT had been
banded by burst rows, x1.30-58; docs/validation.md gives the coverage before and after.)

The band (:class:`Band`) is the 10th and 90th percentile of the comparable residuals with each
source weighted equally (a source of 100 rows counts as much as one of 5: sources differ by more
than rows within one do), applied to the prediction: ``[value x exp(q10), value x exp(q90)]``,
where the measured value should fall 8 times in 10. The rule (the ladder, :data:`MIN_ROWS`, the
equal source weights) was fixed before any coverage was measured; ``serveplan validate`` measures
it with each row's own source left out (:func:`band_for` ``exclude_source``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from serveplan.specs.model import LayerType, ModelSpec

#: catalog hardware id -> accelerator family (vendor and architecture): a band never crosses families
ACCELERATOR_FAMILY = {
    "t4": "NVIDIA Turing",
    "a100-40g": "NVIDIA Ampere", "a100-80g": "NVIDIA Ampere", "a100-pcie-80g": "NVIDIA Ampere",
    "a10": "NVIDIA Ampere", "a10g": "NVIDIA Ampere", "a6000": "NVIDIA Ampere", "rtx-3090": "NVIDIA Ampere",
    "l4": "NVIDIA Ada", "l40": "NVIDIA Ada", "l40s": "NVIDIA Ada", "rtx-4090": "NVIDIA Ada",
    "h100-sxm": "NVIDIA Hopper", "h100-nvl-94gb": "NVIDIA Hopper", "h200": "NVIDIA Hopper",
    "h200-nvl-141gb": "NVIDIA Hopper", "h800": "NVIDIA Hopper", "h20": "NVIDIA Hopper", "gh200": "NVIDIA Hopper",
    "b200": "NVIDIA Blackwell", "b300": "NVIDIA Blackwell", "gb200": "NVIDIA Blackwell", "gb300": "NVIDIA Blackwell",
    "rtx-pro-6000": "NVIDIA Blackwell",
    "mi300x": "AMD CDNA3", "mi325x": "AMD CDNA3", "mi355x": "AMD CDNA4",
    "ascend-910b3": "Huawei Ascend",
}
#: the regimes a figure is measured in
REGIMES = ("offline", "closed loop", "open loop", "static batch")
#: the kinds of figure that carry a band
BANDED_KINDS = ("TTFT", "TPOT", "E2E", "throughput", "goodput")
#: comparable groups, most specific first (module doc)
LADDER: tuple[tuple[str, ...], ...] = (
    ("engine", "family", "model_class", "kind", "regime"),
    ("engine", "family", "model_class", "kind"),
    ("family", "model_class", "kind", "regime"),
    ("family", "model_class", "kind"),
)
#: kinds whose band never leaves the prediction's regime (module doc): steps of :data:`LADDER` with "regime"
LATENCY_KINDS = ("TTFT", "TPOT", "E2E")
#: fewest comparable rows a band is drawn from (fixed a priori: a P10-P90 from fewer is noise)
MIN_ROWS = 5
EXTRAPOLATED = "extrapolated: no comparable validation"


def accelerator_family(hardware: str) -> str:
    """The family of a catalog hardware id (``"unknown"`` for a device outside the table)."""
    return ACCELERATOR_FAMILY.get(hardware.lower(), "unknown")


def model_class(model: ModelSpec) -> str:
    """Dense or MoE, and the attention: ``dense GQA``, ``MoE GQA``, ``MoE MLA``, ``MoE hybrid``
    (linear-attention layers), ``dense hybrid``."""
    ffn = "MoE" if model.is_moe else "dense"
    if model.kv_lora_rank > 0:
        return f"{ffn} MLA"
    if model.layer_types and model.count_layers(LayerType.LINEAR):
        return f"{ffn} hybrid"
    return f"{ffn} GQA"


@dataclass(frozen=True, slots=True)
class Residual:
    """One validated figure: ``log_ratio = ln(measured / predicted)`` and what makes it comparable."""

    key: str                 # source/row id
    source: str
    engine: str
    family: str
    model_class: str
    kind: str
    regime: str
    context_tokens: float    # mean prompt + output tokens of the row's requests
    log_ratio: float

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "source": self.source, "engine": self.engine, "family": self.family,
                "model_class": self.model_class, "kind": self.kind, "regime": self.regime,
                "context_tokens": self.context_tokens, "log_ratio": self.log_ratio}

    @staticmethod
    def from_dict(d: Mapping[str, Any]) -> Residual:
        return Residual(key=str(d["key"]), source=str(d["source"]), engine=str(d["engine"]),
                        family=str(d["family"]), model_class=str(d["model_class"]), kind=str(d["kind"]),
                        regime=str(d["regime"]), context_tokens=float(d["context_tokens"]),
                        log_ratio=float(d["log_ratio"]))


@dataclass(frozen=True, slots=True)
class Query:
    """What a prediction is: the same fields as a :class:`Residual` without a measurement."""

    engine: str
    family: str
    model_class: str
    kind: str
    regime: str
    context_tokens: float


@dataclass(frozen=True, slots=True)
class Band:
    """P10 and P90 factors (measured / predicted) and the rows behind them; no factors: extrapolated.
    A band of factors 1 with no rows (:meth:`exact`) is a figure the question fixes (an open loop
    that keeps up delivers its arrival rate)."""

    low: float | None
    high: float | None
    n: int
    sources: int
    basis: str

    @property
    def extrapolated(self) -> bool:
        return self.low is None or self.high is None

    @staticmethod
    def exact(basis: str) -> Band:
        """The band of a figure the question itself sets (``basis`` says how)."""
        return Band(1.0, 1.0, 0, 0, basis)

    def of(self, value: float | None) -> dict[str, Any]:
        """The band of ``value`` as the documents carry it: ``{"p10", "p90", "n", "sources",
        "basis"}`` with P10/P90 in the value's unit (null when extrapolated or no value)."""
        ok = value is not None and math.isfinite(value) and not self.extrapolated
        return {"p10": value * self.low if ok and self.low is not None else None,  # type: ignore[operator]
                "p90": value * self.high if ok and self.high is not None else None,  # type: ignore[operator]
                "n": self.n, "sources": self.sources, "basis": self.basis}

    def factors(self) -> str:
        """Compact text for a table cell: ``x0.82-1.31 (n=12)``, or ``extrapolated``."""
        if self.extrapolated or self.low is None or self.high is None:
            return "extrapolated"
        if self.n == 0:
            return "exact"
        return f"x{self.low:.2f}-{self.high:.2f} (n={self.n})"

    def contains(self, ratio: float) -> bool:
        """Whether a measured / predicted ratio lies in the band."""
        return not self.extrapolated and self.low is not None and self.high is not None and \
            self.low <= ratio <= self.high


def weighted_quantiles(values: Sequence[float], groups: Sequence[str], qs: Sequence[float]) -> list[float]:
    """Quantiles of ``values`` with each group (source) weighted equally: a row of a group of
    ``k`` rows weighs ``1/k``. The weighted empirical distribution is read at its midpoints
    (Hazen's rule, so one group of two rows gives their mean at the median)."""
    order = np.argsort(values)
    v = np.asarray(values, dtype=float)[order]
    counts: dict[str, int] = {}
    for g in groups:
        counts[g] = counts.get(g, 0) + 1
    w = np.array([1.0 / counts[groups[i]] for i in order])
    cum = (np.cumsum(w) - 0.5 * w) / w.sum()
    return [float(np.interp(q, cum, v)) for q in qs]


def _describe(q: Query, fields: Sequence[str]) -> str:
    names = {"engine": q.engine, "family": q.family, "model_class": q.model_class, "kind": q.kind,
             "regime": q.regime}
    return ", ".join(names[f] for f in fields)


def band_for(query: Query, residuals: Iterable[Residual], *, exclude_source: str | None = None) -> Band:
    """The band of a prediction from the comparable residuals (module doc); ``exclude_source``
    leaves out every row of that source (leave-one-source-out)."""
    table = [r for r in residuals if r.source != exclude_source]
    pool = [r for r in table if r.kind == query.kind and r.family == query.family
            and r.model_class == query.model_class]
    too_short = 0.0
    for fields in ladder(query.kind):
        rows = [r for r in pool if all(getattr(r, f) == getattr(query, f) for f in fields)]
        if len(rows) < MIN_ROWS:
            continue
        longest = max(r.context_tokens for r in rows)
        if query.context_tokens > longest:
            too_short = max(too_short, longest)
            continue
        lo, hi = weighted_quantiles([r.log_ratio for r in rows], [r.source for r in rows], (0.1, 0.9))
        k = len({r.source for r in rows})
        basis = (f"{len(rows)} validated rows from {k} source{'s' if k > 1 else ''} ({_describe(query, fields)}"
                 f"{'; own source left out' if exclude_source else ''})")
        return Band(math.exp(lo), math.exp(hi), len(rows), k, basis)
    return Band(None, None, 0, 0, f"{EXTRAPOLATED} ({_why(query, table, pool, too_short)})")


def ladder(kind: str) -> tuple[tuple[str, ...], ...]:
    """The steps of :data:`LADDER` a band of ``kind`` may take: those that keep the regime for a
    latency (:data:`LATENCY_KINDS`), every step for a rate."""
    return _REGIME_KEPT if kind in LATENCY_KINDS else LADDER


#: the steps of :data:`LADDER` that keep the regime (a latency's ladder)
_REGIME_KEPT = tuple(f for f in LADDER if "regime" in f)


def loso_bands(residuals: Sequence[Residual]) -> list[tuple[Residual, Band]]:
    """Each residual with the band the other sources' rows give it (leave one source out): how
    :func:`band_for` is calibrated on a table without its predictions being rerun."""
    out = []
    for r in residuals:
        q = Query(engine=r.engine, family=r.family, model_class=r.model_class, kind=r.kind, regime=r.regime,
                  context_tokens=r.context_tokens)
        out.append((r, band_for(q, residuals, exclude_source=r.source)))
    return out


def _why(q: Query, table: Sequence[Residual], pool: Sequence[Residual], too_short: float) -> str:
    if q.family == "unknown":
        return "an accelerator outside the known families"
    if not any(r.family == q.family for r in table):
        return f"a new accelerator family: nothing validated on {q.family}"
    if not any(r.family == q.family and r.model_class == q.model_class for r in table):
        return f"an unseen model class: no {q.model_class} model validated on {q.family}"
    if too_short:
        return f"context {q.context_tokens:,.0f} tokens beyond the validated {too_short:,.0f}"
    if not pool:
        return f"no {q.kind} validated for {q.model_class} models on {q.family}"
    if q.kind in LATENCY_KINDS:
        same = [r for r in pool if r.regime == q.regime]
        if len(same) < MIN_ROWS:
            have = (f"no {q.kind} validated" if not same else
                    f"{len(same)} {q.kind} row{'s' if len(same) != 1 else ''}, fewer than {MIN_ROWS},")
            return (f"{have} in {q.regime} for {q.model_class} on {q.family}; "
                    "a latency is compared within its regime only")
    return (f"{len(pool)} {q.kind} row{'s' if len(pool) != 1 else ''} for {q.model_class} on {q.family}, fewer than "
            f"{MIN_ROWS}")


#: the bundled residual tables: ``serveplan validate --write-residuals`` writes the first; the goodput check
#: (``benchmarks/validate_goodput.py --write-residuals``: MLPerf Server results and other SLO-bounded highest rates,
#: minutes per row, too slow for ``validate``) the second
RESIDUAL_FILES = ("residuals.json", "goodput-residuals.json")


@cache
def bundled_residuals() -> tuple[Residual, ...]:
    """The residual tables of the last full ``serveplan validate`` and goodput check
    (:data:`RESIDUAL_FILES` in ``validate/data/``); a table that is absent adds nothing (with both
    absent every band says extrapolated)."""
    out: list[Residual] = []
    for name in RESIDUAL_FILES:
        out += bundled_table(name)
    return tuple(out)


def bundled_table(name: str) -> tuple[Residual, ...]:
    """One bundled residual table of :data:`RESIDUAL_FILES`."""
    return read_residuals(resources.files("serveplan.validate").joinpath("data").joinpath(name))


def read_residuals(f: Any) -> tuple[Residual, ...]:
    """One residual table (:func:`residuals_text`'s format; also a list of records); empty when the
    file is absent or lists other fields."""
    if not f.is_file():
        return ()
    raw = json.loads(f.read_text())
    if "rows" in raw:   # one list per residual, in the order of ``fields`` (residuals_text)
        if tuple(raw.get("fields", ())) != RESIDUAL_FIELDS:
            return ()
        return tuple(Residual(str(k), str(s), str(e), str(fa), str(m), str(ki), str(rg), float(c), float(lr))
                     for k, s, e, fa, m, ki, rg, c, lr in raw["rows"])
    return tuple(Residual.from_dict(d) for d in raw.get("residuals", ()))


#: a residual's fields, in the order the bundled table lists them
RESIDUAL_FIELDS = ("key", "source", "engine", "family", "model_class", "kind", "regime", "context_tokens",
                   "log_ratio")


def residuals_document(residuals: Sequence[Residual], *, command: str) -> dict[str, Any]:
    """The bundled table's JSON: the command that wrote it, the field names and one list per
    residual (a table of 2,000+ rows parses in a third of the time records take: every command
    that prints a confidence reads it at start-up)."""
    return {"command": command, "rule": "ln(measured / predicted); band_for in serveplan/validate/confidence.py",
            "fields": list(RESIDUAL_FIELDS),
            "rows": [[getattr(r, f) for f in RESIDUAL_FIELDS] for r in residuals]}


def residuals_text(doc: Mapping[str, Any]) -> str:
    """:func:`residuals_document` as the file holds it: strict JSON, one residual per line."""
    head = {k: v for k, v in doc.items() if k != "rows"}
    lines = ",\n".join("  " + json.dumps(row, allow_nan=False) for row in doc["rows"])
    body = json.dumps(head, indent=1, allow_nan=False)[:-2]
    return f'{body},\n "rows": [\n{lines}\n ]\n}}\n'

