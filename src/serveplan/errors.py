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

from collections.abc import Iterable


class PlannerError(Exception):
    """Base class of every error serveplan raises on purpose."""


class SpecError(PlannerError, ValueError):
    """Bad input: unknown name, inconsistent configuration or malformed file."""


class InfeasibleError(PlannerError):
    """The question has no answer under the constraints (memory, SLO)."""


class SolverError(PlannerError):
    """A numerical solver (LP, least squares) failed or did not converge."""


def unknown_name(kind: str, value: str, known: Iterable[str]) -> SpecError:
    """Build the 'unknown X; known: ... (did you mean ...?)' error."""
    known = sorted(known)
    import difflib  # only when a name is wrong: keeps it out of every start-up

    close = difflib.get_close_matches(value, known, n=1, cutoff=0.5)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return SpecError(f"unknown {kind} {value!r}; known: {', '.join(known)}{hint}")
