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
from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog

from serveplan.errors import InfeasibleError, SolverError
from serveplan.offload.cost import CostTerms
from serveplan.offload.policy import PLACEMENT_FIELDS

NUM_PLACEMENT = len(PLACEMENT_FIELDS)
COLUMNS = PLACEMENT_FIELDS + ("Tpre", "Tgen")
_SLOWER = {"gpu": "cpu", "cpu": "disk"}
_GROUP_OF = {"w": ("wg", "wc", "wd"), "c": ("cg", "cc", "cd"), "h": ("hg", "hc", "hd")}
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
             runtime_limits: bool = True, allow_disk: bool = True) -> LinearProgram:
    """The LP of FlexGen Eq. 1 for one batch shape (see the module docstring for the columns).

    ``runtime_limits`` restricts the placement to what FlexGen runs: no activations on disk, and
    under compression nothing on disk.
    ``allow_disk=False`` keeps everything off the disk (FlexGen's "No disk" ablation, Tables 4 and 23).
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
    bounds = tuple([(0.0, u) for u in upper] + [(0.0, None)] * 2)
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


def round_placement(terms: CostTerms, x: np.ndarray, *, step: float = 0.01) -> np.ndarray:
    """Round relaxed fractions to whole percent that still fit, as FlexGen's runtime needs.

    Each kind is floored cumulatively (GPU share, then GPU+CPU share), which only moves data to
    slower tiers; if a tier still overflows, one percent of the kind using most of that tier moves
    to the next slower tier until everything fits.

    Raises
    ------
    InfeasibleError
        If the disk overflows (nothing slower to move to).
    """
    xr = np.array(x, dtype=float)
    for g in range(3):
        a, b = xr[3 * g], xr[3 * g + 1]
        pg = math.floor(a / step + 1e-6)
        pgc = max(math.floor((a + b) / step + 1e-6), pg)
        top = round(1 / step)
        xr[3 * g:3 * g + 3] = (pg * step, (pgc - pg) * step, (top - pgc) * step)
    for _ in range(3 * 3 * round(1 / step) + 1):
        over = memory_violations(terms, xr)
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
            contrib = mem.base.coef[i] * xr[i]
            if xr[i] > 1e-12 and contrib > best_bytes:
                best, best_bytes = g, contrib
        if best is None:
            raise InfeasibleError(f"{tier_phase} overflows by {over[tier_phase]:.3g} bytes with nothing left to move")
        i = 3 * best + pos
        d = min(step, xr[i])
        xr[i] -= d
        xr[i + 1] += d
    raise InfeasibleError("rounding did not converge to a placement that fits")
