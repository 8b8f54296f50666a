"""Checks of command options that no library constructor sees whole (a search's size, the
number of seeds or workers), each naming the option, the value, the range and why the range."""

from __future__ import annotations

import os
from pathlib import Path

from serveplan.errors import SpecError, check_int, check_number
from serveplan.optimize.space import SearchSpace

#: Most candidate strategies one search may hold: each is simulated several times (a bisection on
#: the arrival rate), about a second of CPU each at the default request count, so a larger space
#: runs for days; narrow it with --tp, --max-batch, --same-tp or --no-disaggregated.
MAX_SEARCH_CANDIDATES = 200_000
#: Requests per simulation of a search: each strategy runs several simulations of this many.
MAX_SEARCH_REQUESTS = 10**6
MAX_SEEDS = 100
MAX_JOBS = 1024
MAX_BAND_SAMPLES = 10_000


def count_candidates(space: SearchSpace) -> int:
    """An upper bound of the strategies :func:`~serveplan.optimize.space.enumerate_space` lists
    (every layout within the budget, before memory pruning), counted without building them."""
    layouts = [(tp, pp, dp, ep) for tp in space.tp_sizes for pp in space.pp_sizes for dp in space.dp_sizes
               for ep in space.ep_sizes if (tp * dp) % ep == 0 and tp * pp * dp <= space.devices]
    per_layout = 0
    for tp, pp, dp, ep in layouts:
        n_dev = tp * pp * dp
        if space.collocated:
            per_layout += (space.devices // n_dev) * len(space.schedulers) * len(space.chunk_sizes)
        if space.disaggregated:
            for tp_d, pp_d, dp_d, ep_d in layouts:
                if (pp_d, dp_d, ep_d) != (pp, dp, ep) or (tp_d != tp and not space.mixed_tp):
                    continue
                k = pp * dp
                budget = space.devices // k
                per_layout += sum(max((budget - p * tp) // tp_d, 0) for p in range(1, budget // tp + 1))
        if per_layout > MAX_SEARCH_CANDIDATES * 10:
            break  # far past the limit: the exact count does not matter
    return per_layout * len(space.max_batches)


def check_search(space: SearchSpace, *, num_requests: int, seeds: int, seed: int, jobs: int | None,
                 relaxation: float, tolerance: float, band: int, band_top: int) -> None:
    """Refuse a search that could not answer in reasonable time, or whose settings are out of range."""
    check_int("num-requests", num_requests, low=1, high=MAX_SEARCH_REQUESTS,
              why="requests per simulation; each strategy runs several simulations")
    check_int("seeds", seeds, low=1, high=MAX_SEEDS, why="each seed repeats every simulation")
    check_int("seed", seed, low=0)
    if jobs is not None:
        check_int("jobs", jobs, low=1, high=MAX_JOBS, why="worker processes")
    check_number("relaxation", relaxation, low=0, high=1, high_open=True,
                 why="BestServe Algorithm 9's relative SLO relaxation tau; 0 = hard check")
    check_number("tolerance", tolerance, low=0, high=1, low_open=True, high_open=True,
                 why="relative width of the final goodput bracket")
    check_int("band", band, low=0, high=MAX_BAND_SAMPLES, why="profiles sampled per strategy")
    check_int("band-top", band_top, low=1)
    n = count_candidates(space)
    if n > MAX_SEARCH_CANDIDATES:
        raise SpecError(
            f"the search space holds about {n:,} strategies (devices={space.devices:,}, tp={list(space.tp_sizes)}); "
            f"expected at most {MAX_SEARCH_CANDIDATES:,}: each is simulated several times, so this would run for "
            "days. Narrow it with --tp, --max-batch, --same-tp or --no-disaggregated")


def check_simulate(*, band: int, seed: int) -> None:
    check_int("band", band, low=0, high=MAX_BAND_SAMPLES, why="profiles sampled")
    check_int("seed", seed, low=0)


def check_output_file(path: Path, flag: str) -> None:
    """Refuse an output file that cannot be written, before any long work starts: its folder must
    exist and be writable, and the path must not be a folder."""
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise SpecError(f"{flag}={str(path)!r} is a folder; expected a file path, e.g. {str(path / 'out.csv')!r}")
    if not parent.is_dir():
        raise SpecError(f"{flag}={str(path)!r}: folder {str(parent)!r} does not exist; expected an existing "
                        f"folder (create it with: mkdir -p {parent})")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise SpecError(f"{flag}={str(path)!r}: folder {str(parent)!r} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise SpecError(f"{flag}={str(path)!r} exists and is not writable")
