"""Exception hierarchy.

::

    PlannerError
     ├─ SpecError(ValueError)     unknown or inconsistent model / hardware / config / input file
     ├─ InfeasibleError           nothing fits memory or meets the SLO (an answer, not a crash)
     └─ SolverError               an optimisation (LP, fit) is infeasible, unbounded or failed

The CLI turns ``SpecError`` into exit code 2 and ``InfeasibleError`` into exit code 3, printing
one line without a traceback. Messages name the field, the value, what was expected and the options.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from typing import Any


class PlannerError(Exception):
    """Base class of every error serveplan raises on purpose."""


class SpecError(PlannerError, ValueError):
    """Bad input: unknown name, inconsistent configuration or malformed file."""


class InfeasibleError(PlannerError):
    """The question has no answer under the constraints (memory, SLO)."""


class SolverError(PlannerError):
    """A numerical solver (LP, least squares) failed or did not converge."""


#: Longest list of names an error prints whole; a longer one shows the best suggestions and a count.
MAX_LISTED_NAMES = 8
#: Suggestions a folded list shows.
MAX_SUGGESTIONS = 5


def suggest_names(value: str, known: Iterable[str], *, limit: int = MAX_SUGGESTIONS) -> list[str]:
    """The names of ``known`` closest to ``value``, best first (case-insensitive).

    Ranked by kind of match, then by :class:`difflib.SequenceMatcher` ratio: a name that starts with
    ``value`` (``h100`` -> ``h100-sxm``), one that ``value`` starts with (``llama-3.1-70b-instruct``
    -> ``llama-3.1-70b``), one containing it or contained in it, one sharing its first ``-`` part
    (``h100-pcie`` -> ``h100-sxm``), then the difflib close matches (ratio >= 0.5). Plain difflib
    ranks ``h800`` before ``h100-sxm`` for ``h100``: one edit beats a missing suffix.
    """
    import difflib  # only when a name is wrong: keeps it out of every start-up

    v = value.strip().lower()
    head = v.split("-")[0]
    ranked: list[tuple[int, float, str]] = []
    for name in set(known):
        n = name.lower()
        ratio = difflib.SequenceMatcher(None, v, n).ratio()
        if not v:
            tier = 5
        elif n.startswith(v):
            tier = 0
        elif v.startswith(n):
            tier = 1
        elif v in n or n in v:
            tier = 2
        elif head and n.split("-")[0] == head:
            tier = 3
        elif ratio >= 0.5:
            tier = 4
        else:
            continue
        ranked.append((tier, -ratio, name))
    return [name for _, _, name in sorted(ranked)[:limit]]


def unknown_name(kind: str, value: str, known: Iterable[str], *, listing: str | None = None) -> SpecError:
    """Build the 'unknown X; known: ... (did you mean ...?)' error.

    Up to :data:`MAX_LISTED_NAMES` names are listed whole; a longer list is folded to the best
    :func:`suggest_names` and a count of the rest, with ``listing`` (the command that lists them
    all, e.g. ``"serveplan models"``): ``unknown model 'qwen3-235b' (did you mean 'qwen3-235b-a22b'?);
    closest: qwen3-235b-a22b, qwen3-235b-a22b-fp8; 50 more: serveplan models``.
    """
    known = sorted(set(known))
    close = suggest_names(value, known)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if len(known) <= MAX_LISTED_NAMES:
        return SpecError(f"unknown {kind} {value!r}; known: {', '.join(known)}{hint}")
    shown = close or known[:MAX_SUGGESTIONS]
    rest = len(known) - len(shown)
    where = f": {listing}" if listing else ""
    label = "closest" if close else "known"
    return SpecError(f"unknown {kind} {value!r}{hint}; {label}: {', '.join(shown)}; {rest} more{where}")


# ------------------------------------------------------------------------------------ boundary checks
# Every value read from the command line, a file or the Python API is checked once, where it enters
# (the specs' constructors and loaders, the CLI's parsers), with these helpers: the message names
# the field, the value, what was expected and why a limit exists; inner loops then trust their types.


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(field: str, value: Any, *, low: int = 1, high: int | None = None, why: str = "") -> int:
    """``value`` as an int in ``[low, high]`` (a bool, float or string is refused), else SpecError."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise SpecError(f"{field}={_show(value)} must be an integer >= {low}"
                        + (f" and <= {high:,}" if high is not None else ""))
    number: int = int(value)
    if number < low or (high is not None and number > high):
        if low == 1:
            rng = "a positive integer" + (f" (1..{high:,})" if high is not None else "")
        else:
            rng = f"an integer in {low}..{high:,}" if high is not None else f"an integer >= {low}"
        raise SpecError(f"{field}={number:,} must be {rng}" + (f"; {why}" if why else ""))
    return number


def check_number(field: str, value: Any, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, unit: str = "", why: str = "",
                 allow_inf: bool = False) -> float:
    """``value`` as a finite float in the given range (``allow_inf``: ``+inf`` too), else SpecError.

    ``low_open``/``high_open`` exclude the bound itself: ``low=0, low_open=True`` is "positive".
    """
    if isinstance(value, bool):
        raise SpecError(f"{field}={_show(value)} must be a number{f' ({unit})' if unit else ''}")
    try:
        v = float(value)
    except (TypeError, ValueError, OverflowError):
        raise SpecError(f"{field}={_show(value)} must be a number{f' ({unit})' if unit else ''}") from None
    if low == 0 and low_open and high is None:
        expected = "a positive number"
    elif low is not None and high is not None:
        expected = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
    elif low is not None:
        expected = f"a number {'>' if low_open else '>='} {low:g}"
    elif high is not None:
        expected = f"a number {'<' if high_open else '<='} {high:g}"
    else:
        expected = "a number"
    finite = not (math.isnan(v) or math.isinf(v))
    note = "" if finite else (", not NaN" if math.isnan(v) else ", finite")
    if allow_inf and v == math.inf:
        note = ""
    where = (f"{field}={_show(value)} must be {expected}{note}{f' ({unit})' if unit else ''}"
             f"{f'; {why}' if why else ''}")
    if math.isnan(v) or (math.isinf(v) and not (allow_inf and v > 0)):
        raise SpecError(where)
    if low is not None and (v < low or (low_open and v == low)):
        raise SpecError(where)
    if high is not None and (v > high or (high_open and v == high)):
        raise SpecError(where)
    return v


def check_name(field: str, value: Any) -> str:
    """A non-empty name without surrounding blanks only."""
    if not isinstance(value, str) or not value.strip():
        raise SpecError(f"{field}={_show(value)} must be a non-empty name")
    return value
