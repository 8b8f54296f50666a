"""Comma-separated option values (``--tp 1,2,4``, ``--rate-sweep 1,2``), parsed with one-line errors
naming the option, as every front end types them."""

from __future__ import annotations

from serveplan.errors import SpecError


def parse_int_list(value: str, field: str) -> list[int]:
    """``"1,2,4"`` -> ``[1, 2, 4]`` with a one-line error naming ``field``."""
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"{field}={value!r} must be a comma-separated list of integers, e.g. 1,2,4") from None
    if not out:
        raise SpecError(f"{field}={value!r} is empty; give at least one value, e.g. 1,2,4")
    if any(v < 1 for v in out):
        raise SpecError(f"{field}={value!r}: every value must be a positive integer")
    return out


def parse_spec_tokens(text: str | None) -> list[int] | None:
    """``--spec-tokens 0,1,2,3`` as draft lengths (non-negative integers)."""
    if text is None:
        return None
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"spec-tokens={text!r} must be comma-separated integers >= 0, e.g. 0,1,2,3") from None
    if not out or any(v < 0 for v in out):
        raise SpecError(f"spec-tokens={text!r}: every draft length K must be an integer >= 0, e.g. 0,1,2,3")
    return out


def parse_rates(text: str) -> list[float]:
    """``--rate-sweep 0.5,1,2`` as positive rates (requests/s)."""
    try:
        out = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"rate-sweep={text!r} must be comma-separated rates, e.g. 0.5,1,2") from None
    if not out or any(not r > 0 for r in out):
        raise SpecError(f"rate-sweep={text!r}: every rate must be a positive number of requests per second")
    return out


def parse_concurrency(text: str) -> list[int]:
    """``--concurrency 1,4,16`` as client counts (positive integers)."""
    try:
        out = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise SpecError(f"concurrency={text!r} must be comma-separated positive integers, e.g. 1,4,16,64") from None
    if not out or any(c < 1 for c in out):
        bad = next((c for c in out if c < 1), text)
        raise SpecError(f"concurrency={bad!r} must be a positive integer number of clients (e.g. 1,4,16,64)")
    return out
