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
  of that page (GitHub's anchors).
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
    bad = [p for code in code_pieces(text) for p in command_problems(code, where)]
    return bad + path_problems(text, where) + link_problems(text, page)


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
