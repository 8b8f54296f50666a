"""``import serveplan`` (and so every CLI call) must not load the heavy optional libraries: they are
imported where they are used (scipy for the LP and the fits, matplotlib for plots, Ray, torch and
transformers for their backends). Time is measured in benchmarks/bench_startup.py, not here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import serveplan

HEAVY = ("scipy", "matplotlib", "ray", "torch", "transformers")


def _env() -> dict[str, str]:
    """This environment with the tree under test first on the import path."""
    src = str(Path(serveplan.__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _modules_after(code: str) -> set[str]:
    env = _env()
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sys.modules))"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return {m.split(".")[0] for m in out.split()}


def test_import_serveplan_loads_no_heavy_library():
    loaded = _modules_after("import serveplan")
    assert "serveplan" in loaded
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_cli_loads_no_heavy_library_before_a_command_runs():
    loaded = _modules_after("import serveplan.cli")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def _modules_after_command(*argv: str) -> set[str]:
    """The full names of the modules loaded by a whole CLI call (its output discarded)."""
    code = (f"import sys\nsys.argv = ['serveplan', *{argv!r}]\nfrom serveplan.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\nsys.stderr.write('\\n'.join(sys.modules))")
    env = _env()
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stderr
    return set(out.split())


def test_import_serveplan_loads_its_layers_only_when_a_name_is_used():
    """The package root re-exports lazily (serveplan.lazy): ``import serveplan`` loads no layer, and
    a name loads its own module (the catalog), not the simulator."""
    env = _env()
    code = ("import sys, serveplan\nbare = set(sys.modules)\nserveplan.get_model('llama-3.1-8b')\n"
            "print(' '.join(m for m in bare if m.startswith('serveplan.')), '|', ' '.join(sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    bare, _, after = out.partition("|")
    assert set(bare.split()) <= {"serveplan.lazy"}, bare
    assert "serveplan.specs.catalog" in after.split() and "serveplan.sim.engine" not in after.split()


def test_estimate_loads_neither_the_simulator_nor_the_optimizer_nor_the_page():
    """``serveplan estimate`` imports its own command only (serveplan.cli.load_commands): the engine
    loop, the optimizer's search, the validation suite and the web page stay unloaded."""
    loaded = _modules_after_command("estimate", "--model", "llama-3.1-8b", "--hardware", "h100-sxm", "--tp", "2",
                                    "--input-len", "128", "-n", "8")
    assert "serveplan.commands.estimate" in loaded
    unwanted = {"serveplan.sim.engine", "serveplan.optimize.search", "serveplan.optimize.goodput",
                "serveplan.validate.suite", "serveplan.ui", "serveplan.cli.optimize", "serveplan.cli.simulate"}
    assert not loaded & unwanted, sorted(loaded & unwanted)


def test_every_subcommand_is_named_in_the_lazy_table():
    """main() loads the module COMMANDS names for a subcommand: one missing would be 'No such command'."""
    from serveplan.cli import COMMANDS, app

    registered = {c.name for c in app.registered_commands}
    assert registered == set(COMMANDS), sorted(registered ^ set(COMMANDS))
