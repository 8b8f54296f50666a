"""Multi-turn sessions: conversations drawn from a bundled session dataset, and a shared system prompt.

Sessions (:func:`session_workload`): ``num_sessions`` conversations of ``turns`` turns. Turn
``k``'s prompt is the conversation so far plus its new input,
``system + sum_{j<k} (new_j + out_j) + new_k`` tokens; the first turn's input, a follow-up's new
input and every output are drawn from a bundled session dataset (quantile tables,
``specs/data/sessions``; ``mooncake-conversation`` from the Mooncake FAST'25 conversation trace,
``benchmarks/build_sessions.py``). Sessions start at the arrival process's times (``rate`` is
then sessions per second), all at t=0 offline, or back to back on ``concurrency`` clients; each
next turn is sent ``think_s`` after the previous answer ends (:class:`~serveplan.sim.cluster.SessionLoop`,
the closed loop of :class:`~serveplan.sim.cluster.ClosedLoop` per session). The fleet's router
places a session's first turn; its later turns go to the same instance (session affinity, as the
vLLM production stack's session router and SGLang's cache-aware router keep a conversation where
its cache is).

A shared system prompt (:func:`with_system_prompt`) puts the same tokens before every prompt of a
workload. Mooncake traces, whose block hashes say which prompt blocks are shared, are read by
:func:`~serveplan.sim.workload.mooncake_workload`; the prefix cache that reuses what these
workloads share is :mod:`serveplan.sim.prefix_cache`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from serveplan.errors import SpecError
from serveplan.sim.workload import LENGTH_STREAM, Workload
from serveplan.specs.catalog import get_session_dataset

__all__ = ["DEFAULT_SESSION_DATASET", "session_workload", "with_system_prompt"]

#: the bundled session dataset used when none is named
DEFAULT_SESSION_DATASET = "mooncake-conversation"


def _quantiles(raw: dict[str, Any], key: str, name: str) -> np.ndarray:
    try:
        q = np.asarray(raw[key], dtype=float)
    except (KeyError, ValueError, TypeError):
        raise SpecError(f"session dataset {name!r}: {key} missing or not numbers; "
                        "rebuild with benchmarks/build_sessions.py") from None
    if q.ndim != 1 or q.size < 2 or np.any(np.diff(q) < 0) or q[0] < 1:
        raise SpecError(f"session dataset {name!r}: {key} must be non-decreasing positive quantiles")
    return q


def session_workload(num_sessions: int, turns: int, *, think_s: float = 0.0, dataset: str | None = None,
                     system_prompt_len: int = 0, seed: int = 0, arrival: str = "poisson",
                     cv: float = 1.0, max_context: int | None = None) -> Workload:
    """``num_sessions`` conversations of ``turns`` turns each (module docstring).

    Lengths are drawn by inverse transform from the dataset's quantile tables (linear
    interpolation), from the same seeded length stream as
    :meth:`Workload.from_distributions`; request ``s * turns + k`` is session ``s``'s turn ``k``.

    ``max_context`` (tokens; the model's context length): a turn whose prompt plus answer would
    exceed it drops the conversation's oldest turns until it fits, as chat clients truncate their
    history (OpenAI's and vLLM's chat front ends send what the client sends; ChatGPT-style clients
    and LangChain's ``trim_messages`` keep the newest messages). Once turns are dropped the prompt
    no longer starts with the earlier prompt, so the prefix cache finds only the system prompt
    until the conversation grows again from its new first turn (``Workload.context_start``). A
    single turn longer than the context keeps the newest tokens of its input. The workload's
    ``dropped_turns`` counts the turns that dropped history.

    Raises
    ------
    SpecError
        ``num_sessions`` or ``turns`` below 1, a negative think time or system prompt, or an
        unknown dataset.
    """
    for fname, v in (("sessions", num_sessions), ("turns", turns)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise SpecError(f"{fname}={v!r} must be a positive integer")
    if not (isinstance(think_s, (int, float)) and math.isfinite(think_s) and think_s >= 0):
        raise SpecError(f"think_time={think_s!r} must be a non-negative number of seconds")
    if isinstance(system_prompt_len, bool) or not isinstance(system_prompt_len, int) or system_prompt_len < 0:
        raise SpecError(f"system_prompt_len={system_prompt_len!r} must be a non-negative integer number of tokens")
    name = dataset or DEFAULT_SESSION_DATASET
    raw = get_session_dataset(name)
    q_first, q_new, q_out = (_quantiles(raw, k, name) for k in
                             ("first_input_quantiles", "new_input_quantiles", "output_quantiles"))
    rng = np.random.default_rng([int(seed), LENGTH_STREAM])
    S, T = int(num_sessions), int(turns)

    def draw(q: np.ndarray, size: tuple[int, ...]) -> np.ndarray:
        x = np.interp(rng.random(size), np.linspace(0.0, 1.0, len(q)), q)
        out: np.ndarray = np.maximum(np.rint(x), 1).astype(np.int64)
        return out

    new = draw(q_new, (S, T))
    new[:, 0] = draw(q_first, (S,))
    out = draw(q_out, (S, T))
    start, dropped = _keep_within(new, out, system_prompt_len, max_context)
    # prompt of turn k: system + the kept earlier turns' inputs and answers (from turn start[k]) + this input
    before = np.zeros((S, T + 1), dtype=np.int64)
    before[:, 1:] = np.cumsum(new + out, axis=1)
    k = np.arange(T)
    history = before[:, k] - np.take_along_axis(before, start, axis=1)
    prompt = system_prompt_len + history + new
    label = f"{name}: {S} sessions x {T} turns" + (f", {dropped} turns dropped older turns to fit the "
                                                      f"{max_context:,}-token context" if dropped else "")
    return Workload(input_lengths=prompt.ravel(), output_lengths=out.ravel(), arrival=arrival, cv=cv,
                    name=label, session=np.repeat(np.arange(S, dtype=np.int64), T),
                    turn=np.tile(np.arange(T, dtype=np.int64), S), think_s=float(think_s),
                    system_prompt_len=int(system_prompt_len),
                    context_start=start.ravel() if dropped else None, dropped_turns=int(dropped))


def _keep_within(new: np.ndarray, out: np.ndarray, system: int, max_context: int | None) -> tuple[np.ndarray, int]:
    """Per session and turn, the first turn its prompt keeps so that system prompt, kept history,
    input and answer fit ``max_context`` tokens (the oldest turns dropped first, and never taken
    back: a client that trimmed its history does not restore it); and how many turns dropped
    any. A turn too long on its own is shortened in place (``new``, then ``out``), newest tokens kept."""
    S, T = new.shape
    start = np.zeros((S, T), dtype=np.int64)
    if max_context is None:
        return start, 0
    if system + 2 > max_context:
        raise SpecError(f"system_prompt_len={system} leaves no room in the {max_context:,}-token context")
    before = np.zeros((S, T + 1), dtype=np.int64)
    before[:, 1:] = np.cumsum(new + out, axis=1)
    j = np.zeros(S, dtype=np.int64)
    rows = np.arange(S)
    for k in range(T):
        room = max_context - system
        alone = new[:, k] + out[:, k]
        over = alone > room
        if over.any():   # one turn longer than the context: keep its newest input tokens, then cut the answer
            out[over, k] = np.minimum(out[over, k], room - 1)
            new[over, k] = np.maximum(room - out[over, k], 1)
            before[:, 1:] = np.cumsum(new + out, axis=1)
        need = before[:, k] - before[rows, j] + new[:, k] + out[:, k]
        while True:
            move = (need > room) & (j < k)
            if not move.any():
                break
            j = j + move
            need = before[:, k] - before[rows, j] + new[:, k] + out[:, k]
        start[:, k] = j
    return start, int(np.count_nonzero(start))


def with_system_prompt(wl: Workload, tokens: int) -> Workload:
    """``wl`` with a shared system prompt of ``tokens`` tokens before every prompt."""
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise SpecError(f"system_prompt_len={tokens!r} must be a non-negative integer number of tokens")
    if not tokens:
        return wl
    if wl.system_prompt_len:
        raise SpecError("the workload already has a system prompt")
    return Workload(input_lengths=wl.input_lengths + tokens, output_lengths=wl.output_lengths, arrival=wl.arrival,
                    cv=wl.cv, trace_times=wl.trace_times, name=wl.name, session=wl.session, turn=wl.turn,
                    think_s=wl.think_s, hash_ids=wl.hash_ids, hash_block=wl.hash_block, system_prompt_len=tokens)
