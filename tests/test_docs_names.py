"""Guard: the commands, options, files and links the docs name exist.

Read: ``README.md`` and every ``docs/**/*.md``. Checked:

* in code (inline spans and fenced blocks), every ``serveplan <command>`` is a command of the CLI
  (so is an inline span that starts with a command and an option, ``simulate --band N``),
  and every option written after it, up to the end of that command (a closing backtick, the end of
  a line not continued by ``\\``, ``|``, ``&&``, ``;`` or a ``#`` comment), is one of that command's
  options (introspected from the Typer app, so a renamed flag fails here until its docs follow);
* every repository file named by path (``src/...py``, ``benchmarks/...py``, ``tests/...py``,
  ``docs/...md``, and under ``src/serveplan/`` ``specs/data/...yaml``, ``sim/...py`` and the other
  packages; globs and ``<placeholders>`` must match a file) exists;
* every relative Markdown link points to a file that exists and, with ``#anchor``, to a heading
  of that page (GitHub's anchors);
* every option written after a benchmark script (``python benchmarks/validate_silicon.py --no-docs``,
  ``benchmarks/silicon_variants.py --frontend-us``) is one of that script's options (the option
  strings in its source), or one of its :data:`REMOVED_FLAGS` that an experiment record names;
* every option a code span starts with (```--max-batch```, ```--num-clients 10 --max-active-...```)
  exists: an option of a ``serveplan`` command (or of ``serveplan`` itself), of a benchmark
  script, an engine's option named in the knob table (``docs/glossary.md``) or an engine file, or
  an option of another program the docs quote (:data:`EXTERNAL_FLAGS`);
* ``docs/simulator.md`` and ``docs/glossary.md`` name every registered scheduler, and every
  "``mechanism`` (alias ``x``)" in the docs is an alias the scheduler registry has.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer.main

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *ROOT.glob("docs/**/*.md")])

#: options of other programs that the docs quote on their own (an engine's option for a knob is in
#: the knob table of docs/glossary.md or in an engine file's ``flags`` instead), by program
EXTERNAL_FLAGS = {
    "serving benchmark clients (vllm bench serve, aiconfigurator's bench_serving_runner.py)": {
        "--num-prompts", "--max-concurrency", "--random-range-ratio", "--warmup-requests", "--save-result",
        "--save-detailed"},
    "genai-perf (aiconfigurator's genai_perf_runner.py)": {"--request-count", "--warmup-request-count"},
    "vLLM's benchmarks/multi_turn (benchmark_serving_multi_turn.py)": {
        "--num-clients", "--max-active-conversations", "--no-early-stop"},
    "SGLang's server (python -m sglang.launch_server)": {"--schedule-policy", "--deepep-mode",
                                                         "--moe-runner-backend"},
}
#: options a benchmark script no longer has, which the records of experiments run with them name
REMOVED_FLAGS = {
    # docs/validation/overlap-scheduling.md: "those flags are gone (both are the defaults)"
    "validate_silicon.py": {"--benchmark-lengths", "--as-launched"},
}

#: paths of other projects' repositories that the docs quote; they look like ours
EXTERNAL_PATHS = {
    "docs/source/performance/perf-overview.md",   # TensorRT-LLM's performance overview
    "docs/legacy.md",                              # DeepEP's kernel timings
    "docs/design/prefix_caching.md",               # vLLM's design notes
}

_FENCE = re.compile(r"^\s*(```|~~~)")
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)
# ``serveplan`` as a program: at the start, after whitespace, a path or "$ ", not ``from serveplan import``
_COMMAND = re.compile(r"(?:^|(?<=[\s/(]))(?<!from )(?<!import )serveplan[ \t]+([A-Za-z][\w-]*)")
_COMMAND_END = re.compile(r"`|\|| && |;| #|(?<!\\)\n")
_OPTION = re.compile(r"(?<![\w./-])(--?[A-Za-z][\w-]*)")
#: packages of src/serveplan/, named in the docs without that prefix (``sim/instance.py``)
LAYERS = ("specs", "ops", "estimator", "calibrate", "sim", "optimize", "offload", "validate", "report", "cli", "ui")
_PATH = re.compile(r"(?<![\w./-])((?:src|benchmarks|tests)/[\w./*<>-]*\.py|docs/[\w./*<>-]*\.md"
                   rf"|(?:{'|'.join(LAYERS)})/[\w./*<>-]*\.(?:py|yaml))(?![\w/])")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_SCRIPT = re.compile(r"(?:^|(?<=[\s(]))(?:python3? )?benchmarks/([\w/]+\.py)")
_SCRIPT_OPTION = re.compile(r"[\"'](--?[A-Za-z][\w-]*)[\"']")
_ALIAS = re.compile(r"`([a-z][a-z-]*)`,? \(?alias `([^`]+)`")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


@dataclass(frozen=True)
class Code:
    """A piece of code in a page: an inline span or a fenced block, with the line it starts on."""

    text: str
    line: int


@functools.cache
def cli_options() -> dict[str, frozenset[str]]:
    """Every ``serveplan`` command and the options it accepts (``--help`` included)."""
    from serveplan.cli import app

    group = typer.main.get_command(app)
    return {name: frozenset(o for p in cmd.params for o in (*p.opts, *p.secondary_opts) if o.startswith("-"))
            | {"--help"} for name, cmd in group.commands.items()}


@functools.cache
def program_options() -> frozenset[str]:
    """The options of ``serveplan`` itself (``--version``, ``--show-completion``)."""
    from serveplan.cli import app

    return frozenset(o for p in typer.main.get_command(app).params for o in (*p.opts, *p.secondary_opts)
                     if o.startswith("-"))


@functools.cache
def script_options() -> dict[str, frozenset[str]]:
    """Benchmark script (path under ``benchmarks/``) -> the option strings in its source (its
    ``argparse`` options)."""
    base = ROOT / "benchmarks"
    return {str(p.relative_to(base)): frozenset(_SCRIPT_OPTION.findall(p.read_text())) | {"--help", "-h"}
            for p in base.rglob("*.py")}


@functools.cache
def known_flags() -> frozenset[str]:
    """Every option a code span may start with (module doc)."""
    import yaml

    from test_glossary_knobs import knobs  # the knob table's parser

    engine = {n for k in knobs() for n in k.engine_names if n.startswith("-")}
    for f in (ROOT / "src" / "serveplan" / "specs" / "data" / "engines").glob("*.yaml"):
        for setup in (yaml.safe_load(f.read_text()).get("comm") or {}).values():
            engine |= {w for w in setup.get("flags", ()) if w.startswith("-")}
    return (frozenset().union(*cli_options().values(), *script_options().values(), *EXTERNAL_FLAGS.values(),
                              *REMOVED_FLAGS.values())
            | program_options() | engine)


def code_pieces(text: str) -> list[Code]:
    """The fenced blocks and inline spans of a Markdown page, in page order."""
    return sorted(_blocks_and_spans(text), key=lambda c: c.line)


def _blocks_and_spans(text: str) -> Iterator[Code]:
    lines = text.split("\n")
    prose: list[tuple[int, str]] = []
    block: list[str] | None = None
    start = 0
    for n, line in enumerate(lines, 1):
        if _FENCE.match(line):
            if block is None:
                block, start = [], n + 1
            else:
                yield Code("\n".join(block), start)
                block = None
        elif block is not None:
            block.append(line)
        else:
            prose.append((n, line))
    yield from _spans(prose)


def _spans(prose: list[tuple[int, str]]) -> Iterator[Code]:
    """Inline code spans, which may run over the lines of one paragraph but never past it."""
    para: list[tuple[int, str]] = []
    for n, line in [*prose, (0, "")]:
        if line.strip():
            para.append((n, line))
            continue
        if para:
            joined = "\n".join(s for _, s in para)
            for m in _SPAN.finditer(joined):
                yield Code(m.group(2).replace("\n", " "), para[0][0] + joined.count("\n", 0, m.start()))
        para = []


def command_problems(code: Code, where: str) -> list[str]:
    """Unknown ``serveplan`` commands and options in one piece of code."""
    known = cli_options()
    bad = []
    text = code.text
    first = text.split(" ", 1)[0]
    if first in known and re.match(rf"{first} +-", text):   # `simulate --band N`: serveplan left out
        text = "serveplan " + text
    for m in _COMMAND.finditer(text):
        name, line = m.group(1), code.line + text.count("\n", 0, m.start())
        if name not in known:
            bad.append(f"{where}:{line}: `serveplan {name}` is not a command; commands: {', '.join(sorted(known))}")
            continue
        rest = text[m.end():]
        end = _COMMAND_END.search(rest)
        for opt in _OPTION.findall(rest[: end.start() if end else len(rest)]):
            if opt not in known[name]:
                bad.append(f"{where}:{line}: `serveplan {name}` has no option {opt}; its options: "
                           f"{', '.join(sorted(known[name]))}")
    return bad


def script_problems(code: Code, where: str) -> list[str]:
    """Options written after a benchmark script that the script does not have."""
    scripts = script_options()
    bad = []
    for m in _SCRIPT.finditer(code.text):
        name, line = m.group(1), code.line + code.text.count("\n", 0, m.start())
        if name not in scripts:
            continue  # a missing script is path_problems'
        rest = code.text[m.end():]
        end = _COMMAND_END.search(rest)
        for opt in _OPTION.findall(rest[: end.start() if end else len(rest)]):
            if opt not in scripts[name] | REMOVED_FLAGS.get(name, set()):
                bad.append(f"{where}:{line}: benchmarks/{name} has no option {opt}")
    return bad


def flag_problems(code: Code, where: str) -> list[str]:
    """Options in a code span that starts with one (```--max-batch```) that nothing has."""
    text = code.text.strip()
    if not text.startswith("--"):
        return []
    end = _COMMAND_END.search(text)
    known = known_flags()
    return [f"{where}:{code.line}: `{opt}` is no option of serveplan, of a benchmark script, of an engine in the "
            "knob table or an engine file, or of a program in EXTERNAL_FLAGS"
            for opt in _OPTION.findall(text[: end.start() if end else len(text)]) if opt not in known]


def path_problems(text: str, where: str) -> list[str]:
    """Repository paths in a page (prose and code) that name no file."""
    bad = []
    for n, line in enumerate(text.split("\n"), 1):
        for path in _PATH.findall(line):
            if path in EXTERNAL_PATHS:
                continue
            base = ROOT / "src" / "serveplan" if path.startswith(LAYERS) else ROOT
            pattern = re.sub(r"<[^>]*>", "*", path)
            found = any(base.glob(pattern)) if "*" in pattern else (base / pattern).is_file()
            if not found:
                bad.append(f"{where}:{n}: no file {path}" + (" (under src/serveplan/)" if base != ROOT else ""))
    return bad


def anchors(text: str) -> set[str]:
    """GitHub's heading anchors of a page: lower case, punctuation dropped, spaces as hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in text.split("\n"):
        if _FENCE.match(line):
            fenced = not fenced
        m = None if fenced else _HEADING.match(line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(2)).lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        out.add(slug if count == 0 else f"{slug}-{count}")
    return out


def link_problems(text: str, page: Path) -> list[str]:
    """Relative Markdown links whose file or heading does not exist."""
    bad = []
    where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for n, line in enumerate(text.split("\n"), 1):
        for target in _LINK.findall(line):
            if re.match(r"[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                bad.append(f"{where}:{n}: link to {target}: no file {file}")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text()):
                bad.append(f"{where}:{n}: link to {target}: {file or where.name} has no heading #{anchor}")
    return bad


def page_problems(page: Path) -> list[str]:
    text = page.read_text()
    where = str(page.relative_to(ROOT))
    bad = [p for code in code_pieces(text) for check in (command_problems, script_problems, flag_problems)
           for p in check(code, where)]
    return bad + path_problems(text, where) + link_problems(text, page) + alias_problems(text, where)


def alias_problems(text: str, where: str) -> list[str]:
    """"``mechanism`` (alias ``x``)" where the scheduler registry has no such alias."""
    from serveplan.sim.schedulers import ALIASES, SCHEDULERS

    bad = []
    for n, line in enumerate(text.split("\n"), 1):
        for name, alias in _ALIAS.findall(line):
            if name in SCHEDULERS and ALIASES.get(alias) != name:
                bad.append(f"{where}:{n}: `{alias}` is no alias of the scheduler `{name}`; its aliases: "
                           f"{', '.join(sorted(a for a, m in ALIASES.items() if m == name)) or 'none'}")
    return bad


def test_docs_are_found():
    assert ROOT / "README.md" in DOCS and ROOT / "docs" / "concepts.md" in DOCS


@pytest.mark.parametrize("page", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_name_only_real_commands_options_files_and_links(page):
    bad = page_problems(page)
    assert not bad, "\n".join(bad)


def _problems_of(text: str) -> list[str]:
    return [p for code in code_pieces(text) for p in command_problems(code, "x.md")] + path_problems(text, "x.md")


def test_checker_accepts_real_names():
    text = ("Run `serveplan simulate --engine vllm -n 20 --json` or\n`serveplan estimate --model m\n--tp 2`:\n\n"
            "```bash\nserveplan optimize --devices 8 \\\n    --tp 2,4   # --not-checked in a comment\n```\n"
            "See `src/serveplan/sim/schedulers/base.py`, `benchmarks/bench_*.py`, `specs/data/engines/<id>.yaml`,\n"
            "`python benchmarks/validate_silicon.py --no-docs`, `from serveplan import simulate`, `sim/kv.py`\n"
            "and `simulate --band N`.\n")
    assert _problems_of(text) == []


def test_checker_rejects_a_made_up_flag_command_and_file():
    text = ("`serveplan simulate --engine vllm --made-up-flag 3`\n\n"
            "```\nserveplan optimize --devices 8 \\\n  --no-such-thing\nserveplan frobnicate\n```\n"
            "and `benchmarks/no_such_script.py`, `sim/no_such_module.py`, `optimize --no-such-option`.\n")
    bad = _problems_of(text)
    assert len(bad) == 6, bad
    assert bad[0].startswith("x.md:1: `serveplan simulate` has no option --made-up-flag; its options: ")
    assert "--engine" in bad[0]
    assert bad[1].startswith("x.md:4: `serveplan optimize` has no option --no-such-thing")
    assert bad[2].startswith("x.md:6: `serveplan frobnicate` is not a command; commands: ")
    assert bad[3].startswith("x.md:8: `serveplan optimize` has no option --no-such-option")
    assert bad[4:] == ["x.md:8: no file benchmarks/no_such_script.py",
                       "x.md:8: no file sim/no_such_module.py (under src/serveplan/)"]


def test_anchors_follow_github():
    text = ("# Validation\n## Tile quantization: Sarathi §4.4, LLaMA-13B\n## `fidelity=\"bestserve\"` run\n"
            "## Run\n## Run\n")
    assert anchors(text) == {"validation", "tile-quantization-sarathi-44-llama-13b", "fidelitybestserve-run",
                             "run", "run-1"}


def test_checker_rejects_a_missing_page_or_heading(tmp_path):
    page = tmp_path / "a.md"
    (tmp_path / "b.md").write_text("# B\n## Eager prefill steps\n")
    page.write_text("[ok](b.md#eager-prefill-steps) [here](#a) [web](https://x.org/y.md)\n"
                    "[gone](c.md) [moved](b.md#uncaptured-vllm-steps)\n# A\n")
    bad = link_problems(page.read_text(), page)
    assert bad == [f"{page}:2: link to c.md: no file c.md",
                   f"{page}:2: link to b.md#uncaptured-vllm-steps: b.md has no heading #uncaptured-vllm-steps"]


@pytest.mark.parametrize("page", ["docs/simulator.md", "docs/glossary.md"])
def test_the_scheduler_pages_name_every_scheduler(page):
    from serveplan.sim.schedulers import SCHEDULERS

    named = {m.group(2) for m in _SPAN.finditer((ROOT / page).read_text())}
    assert set(SCHEDULERS) <= named, sorted(set(SCHEDULERS) - named)


def test_checker_rejects_a_flag_no_program_has_and_a_wrong_alias():
    text = ("Set `--max-batch` (vLLM's `--max-num-seqs`, the client's `--num-prompts 10`), not `--max-prompts`;\n"
            "`python benchmarks/validate_silicon.py --no-docs --made-up` and `benchmarks/silicon_variants.py "
            "--frontend-us 0`.\n\n`chunked-prefill` (alias `sarathi`) and `prefill-first` (alias `vllm`).\n")
    page = "x.md"
    bad = [p for code in code_pieces(text) for check in (command_problems, script_problems, flag_problems)
           for p in check(code, page)] + alias_problems(text, page)
    assert bad == [
        "x.md:1: `--max-prompts` is no option of serveplan, of a benchmark script, of an engine in the knob table "
        "or an engine file, or of a program in EXTERNAL_FLAGS",
        "x.md:2: benchmarks/validate_silicon.py has no option --made-up",
        "x.md:4: `vllm` is no alias of the scheduler `prefill-first`; its aliases: none",
    ], bad
