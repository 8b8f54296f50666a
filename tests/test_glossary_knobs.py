"""Guard: one name per knob (docs/glossary.md, "Knobs").

Every flag of every ``serveplan`` command (walked from the Typer app) must be accounted for:

* a flag that sets a knob (its destination is a keyword of ``Fleet.build`` or one of the engine
  settings in :data:`ENGINE_SETTINGS`) must be named in the knob table's serveplan column;
* any other flag must be a field of the command's options value (``commands/``), of
  ``SimulationConfig``, or of the library call a command without an options value makes
  (:func:`calls`), or be one of :data:`NOT_SETTINGS` (output, display and inputs that are not
  settings), each with its reason;
* no flag may carry an engine's name for a knob (``--max-num-seqs``) that is not serveplan's own
  name in the same row.

And every serveplan name in the table exists: each flag is a flag of some command, each Python
name a field or keyword above, each engine-file key a key the engine-file parser reads.

The check can fail: add ``frob: int = typer.Option(0, "--frob")`` to ``serveplan ui``, or a field
``decode_ep: int = opt(1, "--decode-ep", help="...")`` to ``SimulateOptions`` (a knob without a
row), or rename ``--max-batch`` to ``--max-num-seqs``: :func:`flag_problems` then names the flag
(``test_the_checker_names_a_flag_without_a_field_or_row`` does this on a copy of the app).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import typer
import typer.main

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
ENGINES = ("vLLM", "SGLang", "TensorRT-LLM")

#: what the engine is told beyond the fleet's settings (``Fleet.build``): formats, memory share,
#: SGLang's device count, speculative decoding and the prefix cache's tiers
ENGINE_SETTINGS = frozenset({"dtype", "kv_dtype", "memory_fraction", "enable_dp_attention", "spec_method",
                             "spec_tokens", "spec_draft_model", "kv_tiers", "kv_cpu_gb", "kv_disk_gb", "kv_load",
                             "kv_connector"})
#: fleet settings that are not knobs of an instance: how many instances (the strategy) and the
#: speculative-decoding value (set through the ``spec_*`` settings)
NOT_KNOBS = frozenset({"strategy", "spec", "redundant_experts"})

#: flags that choose output, display or an input that is not a setting, by destination
NOT_SETTINGS = {
    "json_out": "output format",
    "out": "output file or directory",
    "progress": "display",
    "version": "display",
    "install_completion": "shell set-up",
    "show_completion": "shell set-up",
    "hardware_out": "profile: output file",
    "measurements_out": "calibrate --from: output file",
    "template": "hardware: prints a template",
    "new": "hardware: the new device's name (new_hardware_yaml's name)",
    "base_profile": "calibrate: the profile whose modelling choices are kept (calibrate(base=...))",
    "prefill_batches": "calibrate: projection grid (calibrate(prefill_grid=...))",
    "prefill_lengths": "calibrate: projection grid (calibrate(prefill_grid=...))",
    "decode_batches": "calibrate: projection grid (calibrate(decode_grid=...))",
    "decode_lengths": "calibrate: projection grid (calibrate(decode_grid=...))",
    "source": "calibrate --from: which tables to import",
    "fp32_tflops": "hardware --new: datasheet peak (new_hardware_yaml(flops=...))",
    "bf16_tflops": "hardware --new: datasheet peak (new_hardware_yaml(flops=...))",
    "fp16_tflops": "hardware --new: datasheet peak (new_hardware_yaml(flops=...))",
    "fp8_tflops": "hardware --new: datasheet peak (new_hardware_yaml(flops=...))",
    "int8_tops": "hardware --new: datasheet peak (new_hardware_yaml(flops=...))",
    "port": "ui: where the page listens (uvicorn.run(port=...))",
}


def _names(*things: Any) -> frozenset[str]:
    """Field names of dataclasses, parameter names of callables and attributes of classes."""
    out: set[str] = set()
    for t in things:
        if dataclasses.is_dataclass(t):
            out |= {f.name for f in dataclasses.fields(t)}
        if callable(t):
            out |= set(inspect.signature(t).parameters)
        if isinstance(t, type):
            out |= {n for n in vars(t) if not n.startswith("_")}
    return frozenset(out)


@functools.cache
def calls() -> dict[str, frozenset[str]]:
    """The library call behind each command that has no options value: its flags are that call's
    parameters or its configuration's fields."""
    from serveplan.calibrate.fit import calibrate
    from serveplan.calibrate.importers import import_aiconfigurator, import_vidur
    from serveplan.calibrate.profile import (
        ProfileConfig,
        hardware_yaml_from_measurements,
        profile_device,
        shape_from_model,
    )
    from serveplan.cli.catalog import new_hardware_yaml
    from serveplan.sim import simulation_config
    from serveplan.specs.profile import EfficiencyProfile

    return {
        "profile": _names(ProfileConfig, profile_device, hardware_yaml_from_measurements, shape_from_model),
        "calibrate": _names(calibrate, import_aiconfigurator, import_vidur, EfficiencyProfile),
        "compare": _names(simulation_config),
        "hardware": _names(new_hardware_yaml),
        "ui": _parameters_in_source(ROOT / "src" / "serveplan" / "ui" / "app.py", "create_app"),
    }


def _parameters_in_source(path: Path, function: str) -> frozenset[str]:
    """The parameters of ``function`` read from its source, not imported: the page's module needs
    the ``ui`` extra (FastAPI), which the README's test install (``.[test]``) does not bring."""
    import ast

    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name == function:
            a = node.args
            return frozenset(x.arg for x in (*a.posonlyargs, *a.args, *a.kwonlyargs))
    raise AssertionError(f"{path} defines no {function}")


@functools.cache
def options_fields() -> frozenset[str]:
    """Fields of every options value (``commands/``) and of ``SimulationConfig``."""
    from serveplan.commands.day import DayOptions
    from serveplan.commands.estimate import EstimateOptions
    from serveplan.commands.offload import OffloadOptions
    from serveplan.commands.options import CommandOptions
    from serveplan.commands.plan import PlanOptions
    from serveplan.commands.simulate import SimulateOptions
    from serveplan.commands.sweep import SweepOptions
    from serveplan.commands.validate import ValidateOptions
    from serveplan.sim import SimulationConfig

    known = {DayOptions, EstimateOptions, OffloadOptions, PlanOptions, SimulateOptions, SweepOptions, ValidateOptions}
    # by name: a slotted dataclass is a new class, its first draft stays among the subclasses
    every = {f"{c.__module__}.{c.__qualname__}" for c in _subclasses(CommandOptions)}
    listed = {f"{c.__module__}.{c.__qualname__}" for c in known}
    assert every <= listed, f"options values not listed here: {sorted(every - listed)}"
    return frozenset(f.name for c in known for f in c.fields()) | _names(SimulationConfig)


def _subclasses(cls: type) -> Iterable[type]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


@functools.cache
def knob_destinations() -> frozenset[str]:
    """Destinations that set a knob: the fleet's settings and :data:`ENGINE_SETTINGS`."""
    from serveplan.sim import Fleet

    return frozenset(inspect.signature(Fleet.build).parameters) - NOT_KNOBS | ENGINE_SETTINGS


@dataclass(frozen=True)
class Knob:
    """One row of the knob table."""

    name: str
    flags: frozenset[str]           # serveplan's CLI flags
    fields: frozenset[str]          # serveplan's Python names
    file_keys: frozenset[str]       # keys of an engine file
    engine_names: frozenset[str]    # the engines' names, as written and as flags (``--max-num-seqs``)


_TICKED = re.compile(r"`([^`]+)`")


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def parse_knobs(text: str) -> list[Knob]:
    """The rows of the table under ``## Knobs`` (header ``| knob | serveplan | vLLM ...``)."""
    section = text.split("\n## Knobs", 1)[1] if "\n## Knobs" in text else ""
    lines = [ln for ln in section.split("\n") if ln.startswith("|")]
    if len(lines) < 3:
        return []
    head = _cells(lines[0])
    col = {h.split()[0]: i for i, h in enumerate(head)}
    out = []
    for ln in lines[2:]:
        cells = _cells(ln)
        flags, fields, keys = set(), set(), set()
        for part in cells[col["serveplan"]].split(";"):
            names = _TICKED.findall(part)
            if part.strip().startswith("file"):
                keys |= set(names)
                continue
            for n in names:
                (flags if n.startswith("--") else fields).add(n.split()[0])
        engine: set[str] = set()
        for e in ENGINES:
            for n in _TICKED.findall(cells[col[e]]):
                word = n.split()[0]
                engine.add(word)
                if re.fullmatch(r"--?[A-Za-z][\w-]*", word):
                    engine.add(word.replace("_", "-"))
                elif re.fullmatch(r"[a-z][a-z0-9_]*", word):
                    engine.add("--" + word.replace("_", "-"))
        out.append(Knob(cells[0], frozenset(flags), frozenset(fields), frozenset(keys), frozenset(engine)))
    return out


@functools.cache
def knobs() -> tuple[Knob, ...]:
    return tuple(parse_knobs(GLOSSARY.read_text()))


def cli_flags(app: typer.Typer) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(command, destination, long flags)`` of every option of every command (``""``: the
    program's own options)."""
    group = typer.main.get_command(app)
    out = []
    for name, cmd in [("", group), *getattr(group, "commands", {}).items()]:
        for p in cmd.params:
            if p.param_type_name == "option":
                longs = tuple(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
                out.append((name, str(p.name), longs))
    return out


def flag_problems(flags: Iterable[tuple[str, str, tuple[str, ...]]], rows: Iterable[Knob],
                  fields_of: Callable[[str], frozenset[str]]) -> list[str]:
    """Flags that map to no field and no row, knobs without a row, and engines' names taken."""
    rows = list(rows)
    named = {f for k in rows for f in k.flags}
    bad = []
    for command, dest, longs in flags:
        where = f"serveplan {command} {longs[0]}".replace("  ", " ") if longs else f"serveplan {command} {dest}"
        taken = [(f, k.name) for f in longs for k in rows if f in k.engine_names and f not in k.flags]
        if taken:
            bad += [f"{where}: {f} is an engine's name for the knob '{name}'; use serveplan's name "
                    "(docs/glossary.md, Knobs)" for f, name in taken[:1]]
            continue
        if any(f in named for f in longs):
            continue
        knob = dest in knob_destinations() or dest.removesuffix("s") in knob_destinations()
        if knob:
            bad.append(f"{where} sets the knob {dest!r} but no row of the knob table in docs/glossary.md names "
                       f"{longs[0] if longs else dest}")
        elif dest not in fields_of(command) and dest not in NOT_SETTINGS:
            bad.append(f"{where} (destination {dest!r}) is no field of an options value or SimulationConfig, no "
                       "parameter of its command's call (calls()) and no row of the knob table in docs/glossary.md")
    return bad


def _fields_of(command: str) -> frozenset[str]:
    return options_fields() | calls().get(command, frozenset())


def test_the_knob_table_is_there():
    rows = knobs()
    assert len(rows) >= 30, len(rows)
    names = {k.name.split(":")[0] for k in rows}
    assert {"max batch", "prefill max batch", "token budget", "chunk size", "memory fraction"} <= names
    by = {k.name.split(":")[0]: k for k in rows}
    assert by["max batch"].fields == {"max_batch"} and "--max-num-seqs" in by["max batch"].engine_names
    assert "max_running" not in {f for k in rows for f in k.fields}   # not a knob (the word table says so)


def test_every_flag_maps_to_a_field_or_a_knob_row():
    from serveplan.cli import app

    bad = flag_problems(cli_flags(app), knobs(), _fields_of)
    assert not bad, "\n".join(bad)


def _policy_option_keys() -> set[str]:
    """Every option name a policy's ``Options`` reads from an engine file (nested ones too)."""
    import dataclasses

    from serveplan.sim.schedulers import SCHEDULERS, Options

    keys: set[str] = set()
    todo: list[type] = [cls.Options for cls in SCHEDULERS.values()]
    while todo:
        opts = todo.pop()
        for f in dataclasses.fields(opts):
            keys.add(f.name)
            if isinstance(f.default, Options):
                todo.append(type(f.default))
    return keys


def test_every_serveplan_name_in_the_knob_table_exists():
    from serveplan.cli import app

    flags = {f for _, _, longs in cli_flags(app) for f in longs}
    python = options_fields() | knob_destinations()
    parser = "\n".join(p.read_text() for p in (ROOT / "src" / "serveplan" / "specs").glob("*.py"))
    # the keys under an engine file's scheduler.options: the fields of each policy's Options
    parser += "\n".join(f'"{key}"' for key in _policy_option_keys())
    bad = []
    for k in knobs():
        bad += [f"{k.name}: no command has the flag {f}" for f in sorted(k.flags - flags)]
        bad += [f"{k.name}: {f} is no field of an options value, SimulationConfig or Fleet.build"
                for f in sorted(k.fields - python)]
        bad += [f"{k.name}: the engine-file parser reads no key {key!r}" for key in sorted(k.file_keys)
                if f'"{key}"' not in parser]
        if not (k.flags or k.fields or k.file_keys):
            bad.append(f"{k.name}: no serveplan name")
    assert not bad, "\n".join(bad)


def test_the_lists_above_name_real_things():
    """The hand-written sets name fields that exist (so they cannot silently go stale)."""
    fields = options_fields()
    assert ENGINE_SETTINGS <= fields, sorted(ENGINE_SETTINGS - fields)
    from serveplan.cli import app

    dests = {d for _, d, _ in cli_flags(app)}
    assert set(NOT_SETTINGS) <= dests, sorted(set(NOT_SETTINGS) - dests)
    assert set(calls()) <= {c for c, _, _ in cli_flags(app)}


def test_the_checker_names_a_flag_without_a_field_or_row():
    """A made-up flag on a command without options value, a knob without a row and an engine's
    name each fail, naming the flag."""
    from serveplan.cli import app

    flags = cli_flags(app)
    fake = [("ui", "frob", ("--frob",)), ("simulate", "decode_ep", ("--decode-ep",)),
            ("simulate", "max_batch", ("--max-num-seqs",))]
    bad = flag_problems([*flags, *fake], knobs(), _fields_of)
    assert len(bad) == 3, bad
    assert bad[0].startswith("serveplan ui --frob (destination 'frob') is no field of an options value")
    assert bad[1].startswith("serveplan simulate --decode-ep sets the knob 'decode_ep' but no row")
    assert bad[2].startswith("serveplan simulate --max-num-seqs: --max-num-seqs is an engine's name for the knob "
                             "'max batch")


def test_the_parser_reads_the_columns():
    text = ("# G\n\n## Knobs\n\n| knob | serveplan | vLLM 0.33.0 | SGLang 0.5.23 | TensorRT-LLM 1.2 | unit |\n"
            "|---|---|---|---|---|---|\n"
            "| max batch | `max_batch`, `--max-batch`; file `tiers` `max_num_seqs` | `max_num_seqs` (`--max-num-seqs`) "
            "| `max_running_requests` | `max_batch_size` (`--max_batch_size`) | sequences |\n")
    (k,) = parse_knobs(text)
    assert k.flags == {"--max-batch"} and k.fields == {"max_batch"} and k.file_keys == {"tiers", "max_num_seqs"}
    assert {"max_num_seqs", "--max-num-seqs", "--max-running-requests", "--max_batch_size",
            "--max-batch-size"} <= k.engine_names
