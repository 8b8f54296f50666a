"""``serveplan --version`` and shell completion (``--install-completion`` / ``--show-completion``)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from typer.testing import CliRunner

from serveplan.cli import app, package_version

runner = CliRunner()


def test_version_prints_the_installed_package_version_and_exits_0():
    r = runner.invoke(app, ["--version"], prog_name="serveplan")
    assert r.exit_code == 0, r.output
    assert r.stdout == f"serveplan {version('serveplan')}\n"
    assert package_version() == version("serveplan")


def test_version_through_the_console_entry_point():
    r = subprocess.run([sys.executable, "-m", "serveplan", "--version"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    name, number = r.stdout.split()
    assert name == "serveplan" and number == version("serveplan")


def test_help_lists_version_and_completion_options():
    r = runner.invoke(app, ["--help"], prog_name="serveplan")
    assert r.exit_code == 0
    for option in ("--version", "--install-completion", "--show-completion"):
        assert option in r.stdout


def test_show_completion_prints_a_bash_script_for_serveplan(monkeypatch):
    # Typer detects the calling shell from the process tree (shellingham) unless this variable is set,
    # and then takes the shell as the option's value; a run with no shell above it (a job, a CI
    # step) detects none, so the test names the shell
    monkeypatch.setenv("_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION", "1")
    r = runner.invoke(app, ["--show-completion", "bash"], prog_name="serveplan")
    assert r.exit_code == 0, r.output
    assert "_SERVEPLAN_COMPLETE=complete_bash" in r.stdout
    assert "complete -o default -F _serveplan_completion serveplan" in r.stdout


def test_completion_completes_subcommands_and_options():
    env = {"_SERVEPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "serveplan est", "COMP_CWORD": "1"}
    r = runner.invoke(app, [], prog_name="serveplan", env=env)
    assert r.exit_code == 0 and r.stdout.split() == ["estimate"]
    env = {"_SERVEPLAN_COMPLETE": "complete_bash", "COMP_WORDS": "serveplan estimate --hard", "COMP_CWORD": "2"}
    r = runner.invoke(app, [], prog_name="serveplan", env=env)
    assert "--hardware" in r.stdout.split()
