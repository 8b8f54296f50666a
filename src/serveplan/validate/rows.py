"""The bundled measured figures (``validate/data/*.yaml``, described in ``validate/data/README.md``):
one :class:`MeasuredRow` per published figure, with its source and every setting the source states.

Each data file holds a ``source`` block and ``rows``; the dataset files (``datasets-*.yaml``) hold
length statistics that rows refer to by name (:func:`dataset_lengths`). Nothing here predicts:
:mod:`~serveplan.validate.mapping` turns a row into a simulation, :mod:`~serveplan.validate.suite`
runs them all.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from serveplan.errors import SpecError

#: the measured metric of a row -> the kind of prediction it checks
METRIC_KIND = {
    "ttft_s": "TTFT", "tpot_s": "TPOT", "itl_s": "TPOT", "tokens_per_s_per_user": "TPOT", "e2e_s": "E2E",
    "output_tokens_per_s": "throughput", "output_tokens_per_s_per_gpu": "throughput",
    "input_tokens_per_s": "throughput", "input_tokens_per_s_per_gpu": "throughput",
    "total_tokens_per_s": "throughput", "total_tokens_per_s_per_gpu": "throughput", "requests_per_s": "throughput",
    "goodput_rps": "goodput", "goodput_rps_per_gpu": "goodput", "speedup": "speedup", "system_power_w": "power",
}
#: every kind, in table order
KINDS = ("TTFT", "TPOT", "E2E", "throughput", "goodput", "speedup", "power")
#: engines as the rows name them (``other:<name>`` is a system the tool does not model)
MODELLED_ENGINES = ("vllm", "sglang", "trtllm")


@dataclass(frozen=True, slots=True)
class Source:
    """Where a file's rows come from."""

    id: str
    title: str
    url: str
    date: str
    kind: str
    notes: str
    file: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MeasuredRow:
    """One published figure and the settings its source states (``validate/data/README.md``)."""

    source: str
    #: the independent publisher the source belongs to (the data file's ``source.group``; empty: the
    #: source is its own): pages of one lab and harness are one group, weighed and left out together
    group: str = ""
    id: str
    model: str
    hardware: str
    num_devices: int | None
    engine: str
    engine_version: str | None
    layout: Mapping[str, Any]
    dtype: str | None
    kv_dtype: str | None
    workload: Mapping[str, Any]
    load: Mapping[str, Any]
    slo: Mapping[str, Any] | None
    metric: str
    statistic: str | None
    value: float
    unit: str
    also: Mapping[str, Any] = field(default_factory=dict)
    stated: str = ""              # the row's settings_stated
    settings: str = ""            # settings_stated, then the source's notes (engine flags are read from here)
    where: str = ""
    #: another row printing the same run (``source/id`` of its figure): every figure of this run
    #: equals, to the last printed digit, a run published for another model or accelerator, so one of
    #: the two is a copy and which one was measured is unknown (the mapping uses neither)
    copy_of: str = ""

    @property
    def key(self) -> str:
        """``source/id``: unique over the bundled data."""
        return f"{self.source}/{self.id}"

    @property
    def publisher(self) -> str:
        """The independent publisher: the source's group, else the source itself."""
        return self.group or self.source

    @property
    def kind(self) -> str:
        """The kind of prediction the figure checks (:data:`KINDS`)."""
        return METRIC_KIND.get(self.metric, "other")

    @property
    def engine_family(self) -> str:
        """``vllm``, ``sglang``, ``trtllm`` or ``other``."""
        return self.engine if self.engine in MODELLED_ENGINES else "other"


def _data_dir() -> Any:
    return resources.files("serveplan.validate").joinpath("data")


@cache
def _files() -> tuple[tuple[str, dict[str, Any]], ...]:
    loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    out = []
    for f in sorted(_data_dir().iterdir(), key=lambda p: p.name):
        if f.name.endswith(".yaml"):
            out.append((f.name, yaml.load(f.read_text(), Loader=loader)))
    return tuple(out)


def _text(v: Any) -> str:
    return "" if v is None else str(v)


@cache
def load_sources() -> dict[str, Source]:
    """Source id -> :class:`Source`, for every data file with rows."""
    out = {}
    for name, raw in _files():
        if "rows" not in raw:
            continue
        s = raw["source"]
        out[s["id"]] = Source(id=s["id"], title=_text(s.get("title")), url=_text(s.get("url")),
                              date=_text(s.get("date")), kind=_text(s.get("kind")), notes=_text(s.get("notes")),
                              file=name)
    return out


@cache
def load_rows() -> tuple[MeasuredRow, ...]:
    """Every bundled row, in file order.

    Raises
    ------
    SpecError
        A row without a number or a metric (the data files are checked by a test).
    """
    rows = []
    for name, raw in _files():
        if "rows" not in raw:
            continue
        src = raw["source"]
        notes = _text(src.get("notes"))
        for r in raw["rows"]:
            value = r.get("value")
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise SpecError(f"{name}: row {r.get('id')!r} has value={value!r}; expected a number")
            stated = _text(r.get("settings_stated"))
            rows.append(MeasuredRow(
                source=src["id"], group=_text(src.get("group")), id=str(r["id"]), model=str(r["model"]),
                hardware=str(r["hardware"]),
                num_devices=r.get("num_devices"), engine=str(r["engine"]), engine_version=r.get("engine_version"),
                layout=r.get("layout") or {}, dtype=r.get("dtype"), kv_dtype=r.get("kv_dtype"),
                workload=r.get("workload") or {}, load=r.get("load") or {}, slo=r.get("slo"), metric=str(r["metric"]),
                statistic=r.get("statistic"), value=float(value), unit=_text(r.get("unit")), also=r.get("also") or {},
                stated=stated, settings=f"{stated} | {notes}" if stated else notes, where=_text(r.get("where")),
                copy_of=_text(r.get("copy_of"))))
    return tuple(rows)


@cache
def dataset_lengths() -> dict[str, dict[str, Any]]:
    """Dataset name -> its length statistics as the data files state them (``datasets-*.yaml``):
    ``{"input_mean": .., "output_mean": .., "source": .., "table": ..}`` (None where not stated;
    ``table``: the bundled length table of its per-sample lengths, ``length_table``)."""
    out: dict[str, dict[str, Any]] = {}
    for name, raw in _files():
        ds = raw.get("datasets")
        items = ds.items() if isinstance(ds, dict) else ((d.get("name"), d) for d in ds or ())
        for key, d in items:
            if not key or key in out:
                continue
            inp, outp = d.get("input_tokens") or {}, d.get("output_tokens") or {}
            out[str(key)] = {"input_mean": inp.get("mean"), "output_mean": outp.get("mean"),
                             "source": d.get("source_id") or raw.get("source", {}).get("id") or name,
                             "table": d.get("length_table")}
    return out
