"""FlexGen's policy LP (Eq. 1): build it, solve it with HiGHS, round the relaxed fractions.

For a fixed GPU batch size, number of GPU batches, compression and CPU-attention setting, every term
of :mod:`serveplan.offload.cost` is affine in the placement, and the ``max(...)`` terms become linear
in epigraph form: introduce ``Tpre`` and ``Tgen`` with ``Tpre >= each prefill stage`` and
``Tgen >= each decode stage``, and minimize ``T = Tpre*l + Tgen*(n-1)*l`` (the block latency; the
block size is fixed, so this is FlexGen's ``min T/bls``). A peak ``base + max(work_i) <= capacity``
is the set of rows ``base + work_i <= capacity``.

Symbol table (LP column order):

====  ==========  ===========================================
col   symbol      meaning
====  ==========  ===========================================
0-2   wg wc wd    weight fractions on GPU, CPU, disk
3-5   cg cc cd    KV-cache fractions on GPU, CPU, disk
6-8   hg hc hd    activation fractions on GPU, CPU, disk
9     Tpre        seconds per layer in prefill (epigraph)
10    Tgen        seconds per layer per decode step (epigraph)
====  ==========  ===========================================
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from serveplan.errors import InfeasibleError, SolverError
from serveplan.offload.cost import CostTerms
from serveplan.offload.policy import PLACEMENT_FIELDS

NUM_PLACEMENT = len(PLACEMENT_FIELDS)
COLUMNS = PLACEMENT_FIELDS + ("Tpre", "Tgen")
_TIER_POS = {"gpu": 0, "cpu": 1, "disk": 2}


@dataclass(frozen=True, slots=True, kw_only=True)
class LinearProgram:
    """``min c.x`` s.t. ``A_ub x <= b_ub``, ``A_eq x = b_eq``, bounds; rows carry names."""

    c: np.ndarray
    A_ub: np.ndarray
    b_ub: np.ndarray
    A_eq: np.ndarray
    b_eq: np.ndarray
    bounds: tuple[tuple[float, float | None], ...]
    row_names: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class LPSolution:
    """Relaxed optimum: placement fractions ``x`` (9), per-layer ``Tpre``/``Tgen`` and ``T``."""

    x: np.ndarray
    prefill_layer_s: float
    decode_layer_s: float
    latency_s: float


def build_lp(terms: CostTerms, *, max_latency_s: float | None = None,
             runtime_limits: bool = True, allow_disk: bool = True,
             fixed: Mapping[int, float] | None = None) -> LinearProgram:
    """The LP of FlexGen Eq. 1 for one batch shape (see the module docstring for the columns).

    ``runtime_limits`` restricts the placement to what FlexGen runs: no activations on disk, and
    under compression nothing on disk.
    ``allow_disk=False`` keeps everything off the disk (FlexGen's "No disk" ablation, Tables 4 and 23).
    ``fixed`` pins placement columns (index -> fraction), e.g. to a placement of the KV cache and
    activations that FlexGen's runtime can allocate (:func:`runtime_roundings`).
    """
    nv = NUM_PLACEMENT + 2
    l, n = terms.num_layers, terms.output_len
    c = np.zeros(nv)
    c[9], c[10] = l, (n - 1) * l  # T = Tpre*l + Tgen*(n-1)*l
    rows, rhs, names = [], [], []
    for phase, col in (("prefill", 9), ("decode", 10)):
        for i, a in enumerate(terms.stage_affines(phase)):
            # epigraph: a.x + a0 <= T_phase
            r = np.zeros(nv)
            r[:NUM_PLACEMENT] = a.coef
            r[col] = -1.0
            rows.append(r)
            rhs.append(-a.const)
            names.append(f"{phase}_stage_{i}")
    for tier, mem in terms.memory.items():
        cap = terms.capacity[tier]
        scale = 1.0 / cap if cap > 0 else 1.0  # rows in units of capacity, for conditioning
        for i, w in enumerate(mem.work):
            r = np.zeros(nv)
            r[:NUM_PLACEMENT] = (mem.base.coef + w.coef) * scale
            rows.append(r)
            rhs.append((cap - mem.base.const - w.const) * scale)
            names.append(f"mem_{tier}_{i}")
    if max_latency_s is not None:
        r = np.zeros(nv)
        r[9], r[10] = l, (n - 1) * l
        rows.append(r)
        rhs.append(max_latency_s)
        names.append("max_latency")
    A_eq = np.zeros((3, nv))
    for g in range(3):
        A_eq[g, 3 * g:3 * g + 3] = 1.0  # wg+wc+wd = cg+cc+cd = hg+hc+hd = 1
    upper = [1.0] * NUM_PLACEMENT
    if runtime_limits:
        upper[8] = 0.0  # hd = 0: FlexGen's runtime keeps activations off the disk (its cost_model.py
        # pins hg + hc = 1; no table of the paper puts activations on disk)
        if terms.compress:
            upper[2] = upper[5] = 0.0  # compressed weights and KV stay off the disk: no compressed
            # run of Tables 12-20 uses the disk, and Table 19's FlexGen (c) frontier ends where CPU
            # memory is full
    if not allow_disk:
        upper[2] = upper[5] = upper[8] = 0.0
    lower = [0.0] * NUM_PLACEMENT
    for i, v in (fixed or {}).items():
        lower[i] = upper[i] = float(v)
    bounds = tuple(list(zip(lower, upper)) + [(0.0, None)] * 2)
    return LinearProgram(c=c, A_ub=np.array(rows), b_ub=np.array(rhs), A_eq=A_eq, b_eq=np.ones(3),
                         bounds=bounds, row_names=tuple(names))


def solve(lp: LinearProgram) -> LPSolution:
    """Solve with ``scipy.optimize.linprog(method="highs")``.

    Raises
    ------
    InfeasibleError
        No placement fits the memory (and latency) constraints.
    SolverError
        HiGHS failed or reported the LP unbounded.
    """
    res = linprog(lp.c, A_ub=lp.A_ub, b_ub=lp.b_ub, A_eq=lp.A_eq, b_eq=lp.b_eq,
                  bounds=lp.bounds, method="highs")
    if res.status == 2:
        raise InfeasibleError("no placement of weights, KV cache and activations fits the constraints")
    if res.status != 0 or res.x is None:
        raise SolverError(f"HiGHS status {res.status}: {res.message}")
    x = np.clip(res.x[:NUM_PLACEMENT], 0.0, 1.0)
    return LPSolution(x=x, prefill_layer_s=float(res.x[9]), decode_layer_s=float(res.x[10]),
                      latency_s=float(res.fun))


def memory_violations(terms: CostTerms, x: np.ndarray, *, rtol: float = 1e-9) -> dict[str, float]:
    """Tiers whose peak exceeds capacity, mapped to the bytes over."""
    out = {}
    for tier, mem in terms.memory.items():
        over = mem.at(x) - terms.capacity[tier]
        if over > rtol * max(terms.capacity[tier], 1.0):
            out[tier] = over
    return out


def kv_split_step(terms: CostTerms) -> float:
    """Smallest share of the KV cache FlexGen's runtime can place on one tier.

    The runtime splits each GPU batch's cache tensor ``(s + n - 1, gbs * num_head, head_dim)`` over
    the tiers along its second axis and rounds each share down to a multiple of ``num_head`` rows,
    i.e. to whole sequences (``TorchMixedDevice.init_cache_one_gpu_batch`` in FlexGen's
    ``flexgen/pytorch_backend.py``): the step is ``1/gbs``. A compressed cache cannot be split at
    all (``SelfAttention.init_cache_one_gpu_batch`` in ``flexgen/flex_opt.py`` asserts that the
    compressed cache is not on the mixed device): the step is 1.
    """
    return 1.0 if terms.compress else 1.0 / terms.gpu_batch_size


def _floor_units(v: float, step: float) -> int:
    return math.floor(v / step + 1e-6)


def runtime_roundings(terms: CostTerms, x: np.ndarray) -> list[dict[int, float]]:
    """Placements of the KV cache and activations near ``x`` that FlexGen's runtime can allocate.

    The runtime keeps all activations on one tier (``OptLM.__init__`` in ``flexgen/flex_opt.py``
    raises ``NotImplementedError`` otherwise) and splits the KV cache in whole sequences of a GPU
    batch (:func:`kv_split_step`). Returns the combinations of rounding each share down or up, as
    column -> fraction maps for ``build_lp(fixed=...)``; a single empty map if ``x`` already is such
    a placement.
    """
    step = kv_split_step(terms)
    units = round(1.0 / step)
    cg, cc = float(x[3]), float(x[4])
    g_opts = sorted({min(units, _floor_units(cg, step)), min(units, math.ceil(cg / step - 1e-6))})
    gc_opts = sorted({min(units, _floor_units(cg + cc, step)), min(units, math.ceil((cg + cc) / step - 1e-6))})
    kv = []
    for g in g_opts:
        for gc in gc_opts:
            if gc >= g:
                kv.append((g * step, (gc - g) * step, (units - gc) * step))
    hg = float(x[6])
    h_opts = [(1.0, 0.0, 0.0)] if hg >= 1 - 1e-6 else [(0.0, 1.0, 0.0)] if hg <= 1e-6 else \
        [(0.0, 1.0, 0.0), (1.0, 0.0, 0.0)]
    integral = (len(kv) == 1 and np.allclose(kv[0], x[3:6], atol=1e-6)
                and len(h_opts) == 1 and np.allclose(h_opts[0], x[6:9], atol=1e-6))
    if integral:
        return [{}]
    out = []
    for c3 in kv:
        for h3 in h_opts:
            out.append({3: c3[0], 4: c3[1], 5: c3[2], 6: h3[0], 7: h3[1], 8: h3[2]})
    return out


def round_placement(terms: CostTerms, x: np.ndarray, *, step: float = 0.01,
                    kv_step: float | None = None, whole_activations: bool = False,
                    allocate: Callable[[np.ndarray], np.ndarray] | None = None) -> np.ndarray:
    """Round relaxed fractions to whole percent that still fit, as FlexGen's runtime needs.

    Each kind is floored cumulatively (GPU share, then GPU+CPU share), which only moves data to
    slower tiers; if a tier still overflows, one step of the kind using most of that tier moves
    to the next slower tier until everything fits. ``kv_step`` (default ``step``) is the KV cache's
    step (:func:`kv_split_step`); ``whole_activations`` moves the activations only as a whole.
    ``allocate`` maps the rounded (nominal) fractions to what the runtime allocates
    (:func:`serveplan.offload.cost.runtime_allocation`); memory is checked on that allocation.

    Raises
    ------
    InfeasibleError
        If the disk overflows (nothing slower to move to).
    """
    xr = np.array(x, dtype=float)
    steps = (step, kv_step or step, step)
    for g in range(3):
        a, b = xr[3 * g], xr[3 * g + 1]
        st = steps[g]
        pg = _floor_units(a, st)
        pgc = max(_floor_units(a + b, st), pg)
        top = round(1 / st)
        xr[3 * g:3 * g + 3] = (pg * st, (pgc - pg) * st, (top - pgc) * st)
    alloc = allocate or (lambda v: v)
    max_moves = sum(3 * round(1 / st) for st in steps) + 1
    for _ in range(max_moves):
        xa = alloc(xr)
        over = memory_violations(terms, xa)
        if not over:
            return xr
        tier_phase = next(iter(over))
        tier = tier_phase.split("_")[0]
        if tier == "disk":
            raise InfeasibleError(f"rounded placement overflows the disk by {over[tier_phase]:.3g} bytes")
        pos = _TIER_POS[tier]
        mem = terms.memory[tier_phase]
        best, best_bytes = None, 0.0
        for g in range(3):
            i = 3 * g + pos
            contrib = mem.base.coef[i] * max(xa[i], 1e-9 * xr[i])
            if xr[i] > 1e-12 and contrib > best_bytes:
                best, best_bytes = g, contrib
        if best is None:
            raise InfeasibleError(f"{tier_phase} overflows by {over[tier_phase]:.3g} bytes with nothing left to move")
        i = 3 * best + pos
        d = xr[i] if (best == 2 and whole_activations) else min(steps[best], xr[i])
        xr[i] -= d
        xr[i + 1] += d
    raise InfeasibleError("rounding did not converge to a placement that fits")
