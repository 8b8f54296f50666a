"""Fuzz test: generated CLI arguments and mutated input files never end in a traceback, a hang,
memory exhaustion or a silent answer to nonsense (see :mod:`fuzz_cases` and :mod:`fuzz_harness`).

The default run draws a few hundred cases (derandomised: the same cases on every run, so a
failure reproduces); ``pytest -m slow tests/fuzz`` draws a few thousand with fresh randomness.
Inputs that once failed are kept as ``@example`` regression cases.
"""

from __future__ import annotations

import tempfile

import pytest
from fuzz_cases import (
    GPU,
    SMALL_MODEL,
    Case,
    cli_case,
    config_case,
    hardware_case,
    host_case,
    profile_case,
    trace_case,
)
from fuzz_harness import run_forked, run_subprocess
from hypothesis import HealthCheck, given, settings

DEFAULT = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                   suppress_health_check=list(HealthCheck))
MANY = settings(max_examples=1500, deadline=None, database=None, suppress_health_check=list(HealthCheck))

pytestmark = pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs os.fork (POSIX)")


def check(case: Case) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = run_forked(case.materialise(tmp))
    verdict = out.verdict(case.nonsense)
    assert verdict == "ok", f"{verdict} ({case.label}): {out.describe()}\n{out.stderr[-2000:]}"
    if out.code == 2:  # a refusal is one line naming what was wrong
        lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
        assert lines and lines[-1].startswith("error: "), out.stderr


# ---------------------------------------------------------------- regression corpus (found by the fuzzer)
SIM = ["simulate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "1", "--json"]
REGRESSIONS = [
    Case("cli", SIM + ["--seed", "-1"], True, "negative seed"),
    Case("cli", SIM + ["--cv", "1e308", "--arrival", "gamma", "-n", "40"], False, "huge cv"),
    Case("cli", SIM + ["-n", "10000000000"], False, "10^10 requests"),
    Case("cli", SIM + ["-n", "40", "--strategy", "999999999m"], False, "10^9 instances"),
    Case("cli", ["optimize", "-m", SMALL_MODEL, "-H", GPU, "--devices", "100000", "-j", "1", "--no-progress"], False,
         "100000 devices"),
    Case("cli", ["optimize", "-m", SMALL_MODEL, "-H", GPU, "--devices", "1", "--num-requests", "15", "-j", "1",
                 "--no-progress", "--json"], False, "optimize 15 requests"),
    Case("cli", ["offload", "-m", "opt-6.7b", "-s", "64", "-n", "8", "--max-latency", "inf"], False,
         "infinite latency bound"),
    Case("cli", ["estimate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "1", "-s", "100000000"], False, "10^8 prompt"),
    Case("cli", ["estimate", "-H", GPU, "--json", "--op", "gemm", "--m", "16", "--n", "4096", "--k", "4096",
                 "--kv-heads", "64", "--heads", "32"], True, "KV heads above query heads, unused by the op"),
    Case("cli", SIM + ["-n", "40", "--engine", ""], True, "empty engine name"),
    Case("cli", ["estimate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "2", "--json", "--band-samples", "-1"], True,
         "negative band samples without --band"),
    Case("cli", SIM + ["-n", "40", "--scenario", ""], True, "empty scenario"),
]


@pytest.mark.parametrize("case", REGRESSIONS, ids=lambda c: c.label)
def test_regression_corpus(case: Case) -> None:
    check(case)


@DEFAULT
@given(cli_case())
def test_cli_arguments(case: Case) -> None:
    check(case)


@DEFAULT
@given(config_case())
def test_config_json(case: Case) -> None:
    check(case)


@DEFAULT
@given(hardware_case())
def test_hardware_yaml(case: Case) -> None:
    check(case)


@settings(DEFAULT, max_examples=30)
@given(profile_case())
def test_profile_yaml(case: Case) -> None:
    check(case)


@settings(DEFAULT, max_examples=30)
@given(host_case())
def test_host_yaml(case: Case) -> None:
    check(case)


@DEFAULT
@given(trace_case())
def test_trace_files(case: Case) -> None:
    check(case)


SUBPROCESS_SAMPLE = [
    ["simulate", "-m", SMALL_MODEL, "-H", GPU, "--seed", "-1"],
    ["estimate", "-m", SMALL_MODEL, "-H", GPU, "--tp", "0"],
    ["simulate", "-m", SMALL_MODEL, "-H", GPU, "-n", "1e10"],
    ["offload", "-m", "opt-6.7b", "--max-latency", "nan"],
]


@pytest.mark.parametrize("args", SUBPROCESS_SAMPLE, ids=lambda a: " ".join(a[:1] + a[-2:]))
def test_subprocess_sample_prints_one_line(args: list[str]) -> None:
    """What a user's shell sees: exit 2, one ``error:`` line, no traceback."""
    out = run_subprocess(args)
    assert out.verdict(nonsense=True) == "ok", out.describe()
    assert out.code == 2 and out.stderr.strip().startswith("error: ") and len(out.stderr.strip().splitlines()) == 1, \
        out.stderr


@pytest.mark.slow
@pytest.mark.fuzz_many
@MANY
@given(cli_case())
def test_cli_arguments_many(case: Case) -> None:
    check(case)


@pytest.mark.slow
@pytest.mark.fuzz_many
@MANY
@given(config_case() | hardware_case() | profile_case() | host_case() | trace_case())
def test_files_many(case: Case) -> None:
    check(case)
