"""Fit efficiency factors to micro-benchmark measurements (``serveplan calibrate``).

Two stages, both bounded nonlinear least squares on relative residuals
(``scipy.optimize.least_squares``, trust-region reflective):

1. **Kernel fit.** Each measured call is modelled as the adapted roofline of BestServe eq. (3)
   plus fixed costs::

       t = launches * t_launch + max(W / (e_c S_c), Q / (e_m S_m))        (kernel rows)
       t = d_module + max(W / (e_c S_c), Q / (e_m S_m))                   (tiny-module rows)

   with ``S_c``, ``S_m`` the hardware peaks and ``(e_c, e_m)`` per phase, either *tied* (one
   pair per phase, the estimator's form) or *per family* (matrix multiplies, attention and
   streaming kernels each get their own pair). K-fold cross-validation reports the held-out
   error of both forms; the per-family form is kept when it is clearly better, because kernel
   families differ on real hardware (e.g. CPU flash attention runs at a fraction of GEMM speed).
   Parameter covariance is ``s^2 (J^T J)^-1`` at the optimum (Gauss-Newton approximation).

   A third model, the *size curve* (:class:`SizeCurve`), describes each GEMM by the median
   ratio of its time to its roofline time at its row count, with the per-family constants for
   attention and streaming kernels; cross-validation on the same folds reports its held-out
   error too.

2. **Profile.** When the size curve's held-out error is clearly lower than the constants', the
   profile carries it as written (``matmul_size_curve``, per-phase ``attention_*`` factors and
   the streaming factors as ``compute``/``memory``), which the estimator evaluates operator by
   operator. Otherwise the estimator takes one ``(e_c, e_m)`` pair per phase
   (:class:`~serveplan.specs.profile.PhaseEfficiency`), fitted so that the estimator's step
   times match the step times composed from the kernel fit, operator by operator (same op
   tables, same Algorithm 1 overlap), over a grid of steps of a reference model. No model run
   is involved: the step times are predictions from micro-benchmarks only. Uncertainty of the
   constants combines the kernel-fit covariance (sampled and re-projected) with the
   projection's own residual scatter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from serveplan.calibrate.measurements import MODULES, MeasurementSet
from serveplan.errors import SolverError, SpecError
from serveplan.estimator import roofline
from serveplan.estimator.batch import StepBatch
from serveplan.estimator.step import Estimator
from serveplan.ops.base import Op
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import PHASES, EfficiencyProfile, Module, Phase, PhaseEfficiency
from serveplan.units import DType

FAMILIES = tuple(f.value for f in roofline.FAMILIES)
#: kernel kind -> family
KIND_FAMILY = {"gemm": "matmul", "gemv": "matmul", "attention": "attention", "copy": "stream",
               "elementwise": "stream", "norm": "stream", "launch": "stream", "module": "stream"}
#: kinds the factor fit prices as kernels (launch and module rows carry parameters of their own).
#: Kinds outside :data:`KIND_FAMILY` are left out of the fit (:func:`factor_rows`): collectives (a
#: single device's profile keeps the base communication factors) and the fused-MoE and DeepEP expert
#: rows (``moe``, ``moe_ep``: data of the kernel curves, :mod:`serveplan.calibrate.kernel_fit`)
KERNEL_KINDS = tuple(k for k in KIND_FAMILY if k not in ("module", "launch"))
EFF_BOUNDS = (1e-3, 1.0)
#: Minimum rows per fitted parameter before a fit is attempted (a fit with fewer is meaningless).
MIN_ROWS_PER_PARAM = 2
#: An op is a matrix multiply when its intensity at 4096 tokens exceeds this many FLOP/byte;
#: streaming kernels stay below ~1.5 FLOP/byte at any size (BestServe Tables 1, 6), GEMMs of
#: LLM layers are above ~100 there. assumed: any threshold between the two separates them.
MATMUL_INTENSITY = 16.0

#: Below this largest relative change of a step time per relative change of a factor, the
#: step grid does not constrain the factor. assumed: 2% per 100% is below timing noise.
MIN_SENSITIVITY = 0.02
#: Standard deviations are capped at this fraction of the value, so sampled factors stay
#: positive. assumed: a factor known to worse than +-50% is reported as +-50%.
MAX_REL_SD = 0.5
#: Standard error of a sample median over that of the mean for normal data, sqrt(pi/2)
#: (asymptotic; Kendall & Stuart, The Advanced Theory of Statistics vol. 1, §10.10).
MEDIAN_SE = math.sqrt(math.pi / 2)
#: A richer model replaces a simpler one when its held-out median error is at least this much
#: lower (relative). assumed: 10% is well above the fold-to-fold scatter of the medians.
CLEARLY_BETTER = 0.9

#: Default step grid of the projection: the usual operating range of a single device.
DEFAULT_PREFILL_GRID = tuple((b, s) for b in (1, 2, 4, 8) for s in (128, 256, 512, 1024, 2048))
DEFAULT_DECODE_GRID = tuple((b, c) for b in (1, 2, 4, 8, 16, 32, 64) for c in (128, 256, 512, 1024, 2048))


# ------------------------------------------------------------------------------ kernel model
class KernelForm(str, Enum):
    """How the kernel fit shares efficiency factors: TIED, one (e_c, e_m) per phase (the
    estimator's form); FAMILY, one per phase and kernel family (matmul, attention, stream)."""

    TIED = "tied"
    FAMILY = "family"

    def __str__(self) -> str:
        return str(self.value)


def _form(value: KernelForm | str, where: str = "form") -> KernelForm:
    try:
        return KernelForm(value)
    except ValueError:
        raise SpecError(f"{where}={value!r}; expected {' or '.join(f.value for f in KernelForm)}") from None


@dataclass(frozen=True, slots=True)
class KernelFit:
    """Result of the kernel fit.

    ``params`` maps names (``"prefill.matmul.compute"``, ``"decode.memory"`` in the tied form,
    ``"launch_s"``, ``"dispatch.attention"``) to values; ``sd`` to standard deviations (NaN when
    the parameter is not identified by the data: its roofline term never binds).
    """

    form: KernelForm
    params: Mapping[str, float]
    sd: Mapping[str, float]
    identified: Mapping[str, bool]
    cov: np.ndarray
    cov_names: tuple[str, ...]
    residuals: np.ndarray          # relative, (pred - t) / t, per row
    nfev: int

    def efficiency(self, phase: str, family: str) -> tuple[float, float]:
        """(e_c, e_m) of a phase and kernel family."""
        if self.form is KernelForm.TIED:
            return self.params[f"{phase}.compute"], self.params[f"{phase}.memory"]
        return self.params[f"{phase}.{family}.compute"], self.params[f"{phase}.{family}.memory"]


def _param_names(form: KernelForm, modules: Sequence[str]) -> list[str]:
    names = []
    for ph in PHASES:
        if form is KernelForm.TIED:
            names += [f"{ph}.compute", f"{ph}.memory"]
        else:
            for fam in FAMILIES:
                names += [f"{ph}.{fam}.compute", f"{ph}.{fam}.memory"]
    names.append("launch_s")
    names += [f"dispatch.{m}" for m in modules]
    return names


@dataclass
class _Design:
    names: list[str]
    ci: np.ndarray
    mi: np.ndarray
    di: np.ndarray       # dispatch param index or -1
    L: np.ndarray        # launch coefficient
    W: np.ndarray
    Q: np.ndarray
    t: np.ndarray
    sc: float
    sm: float
    li: int

    def predict(self, x: np.ndarray) -> np.ndarray:
        comp = self.W / (x[self.ci] * self.sc)
        mem = self.Q / (x[self.mi] * self.sm)
        disp = np.where(self.di >= 0, x[np.maximum(self.di, 0)], 0.0)
        return np.asarray(self.L * x[self.li] + disp + np.maximum(comp, mem))

    def residuals(self, x: np.ndarray) -> np.ndarray:
        return np.asarray((self.predict(x) - self.t) / self.t)


def factor_rows(ms: MeasurementSet) -> MeasurementSet:
    """The rows the factor fit prices (kinds of :data:`KIND_FAMILY`): collectives, fused-MoE and
    DeepEP expert rows left out (:data:`KERNEL_KINDS`)."""
    keep = np.isin(ms.arrays()["kind"], list(KIND_FAMILY))
    return ms if keep.all() else ms.subset(np.flatnonzero(keep))


def _design(ms: MeasurementSet, form: KernelForm, peak_flops: float, bandwidth: float) -> _Design:
    a = ms.arrays()
    kinds, phases = a["kind"], a["phase"]
    modules = [m for m in MODULES if np.any((kinds == "module") & (a["module"] == m))]
    names = _param_names(form, modules)
    idx = {n: i for i, n in enumerate(names)}
    ci, mi, di, L = [], [], [], []
    for k, ph, mod, la in zip(kinds, phases, a["module"], a["launches"], strict=True):
        p = ph if ph in PHASES else "decode"   # launch/module rows: tiny shapes, decode-like
        fam = KIND_FAMILY[k]
        key = p if form is KernelForm.TIED else f"{p}.{fam}"
        ci.append(idx[f"{key}.compute"])
        mi.append(idx[f"{key}.memory"])
        if k == "module":
            di.append(idx[f"dispatch.{mod}"])
            L.append(0.0)
        else:
            di.append(-1)
            L.append(la)
    return _Design(names, np.array(ci), np.array(mi), np.array(di), np.array(L, dtype=float),
                   a["flops"], a["bytes"], a["time_s"], peak_flops, bandwidth, idx["launch_s"])


def _check_enough(ms: MeasurementSet, d: _Design, where: str) -> None:
    a = ms.arrays()
    kernel = np.isin(a["kind"], KERNEL_KINDS)
    for ph in PHASES:
        n = int(np.sum(kernel & (a["phase"] == ph)))
        if n < 2 * MIN_ROWS_PER_PARAM:
            raise SpecError(f"{where}: too few points to fit: {n} {ph} kernel row(s); need at least "
                            f"{2 * MIN_ROWS_PER_PARAM} (rerun serveplan profile)")
    if not np.any(a["kind"] == "launch") and not np.any(d.L > 0):
        raise SpecError(f"{where}: too few points to fit: no launch rows")
    n, p = len(d.t), len(d.names)
    if n < MIN_ROWS_PER_PARAM * p:
        raise SpecError(f"{where}: too few points to fit: {n} rows for {p} parameters; "
                        f"need at least {MIN_ROWS_PER_PARAM * p}")


def fit_kernels(ms: MeasurementSet, hardware: DeviceSpec, *, dtype: DType | str = DType.FP32,
                form: KernelForm | str = KernelForm.FAMILY, start: KernelFit | None = None, max_nfev: int | None = None,
                where: str = "measurements") -> KernelFit:
    """Fit the kernel model (stage 1) to measurements.

    Parameters
    ----------
    form:
        ``"tied"``: one (e_c, e_m) per phase; ``"family"``: one per phase and kernel family.
    start:
        A previous fit whose values seed this one (and stand in for parameters the data do not
        identify).
    max_nfev:
        Cap on function evaluations (default: scipy's, 100 x parameters).

    Raises
    ------
    SpecError
        Too few rows to fit.
    SolverError
        The fit did not converge.
    """
    form = _form(form)
    dt = DType.parse(dtype)
    sc, sm = hardware.flops(dt), hardware.memory_bandwidth
    ms = factor_rows(ms)
    d = _design(ms, form, sc, sm)
    _check_enough(ms, d, where)
    x0 = np.empty(len(d.names))
    lo = np.empty(len(d.names))
    hi = np.empty(len(d.names))
    kinds = ms.arrays()["kind"]
    launch_rows = d.t[kinds == "launch"]
    for i, n in enumerate(d.names):
        if n == "launch_s":
            x0[i], lo[i], hi[i] = (float(np.min(launch_rows)) if launch_rows.size else 1e-6), 0.0, 1e-2
        elif n.startswith("dispatch."):
            rows = d.t[d.di == i]
            x0[i], lo[i], hi[i] = float(np.median(rows)), 0.0, 1.0
        else:
            x0[i], (lo[i], hi[i]) = 0.5, EFF_BOUNDS
            if start is not None:
                ph, *rest = n.split(".")
                fam = rest[0] if len(rest) == 2 else "matmul"
                x0[i] = start.efficiency(ph, fam)[0 if n.endswith("compute") else 1]
    if start is not None:
        for i, n in enumerate(d.names):
            if n in start.params and (n == "launch_s" or n.startswith("dispatch.")):
                x0[i] = start.params[n]
    x0 = np.clip(x0, lo + 1e-12, hi)
    kw: dict[str, Any] = {} if max_nfev is None else {"max_nfev": max_nfev}
    try:
        # times (1e-6 s) and efficiencies (~0.5) differ by orders of magnitude: scale by the start
        scale = np.where(np.abs(x0) > 0, np.abs(x0), 1e-6)
        res = least_squares(d.residuals, x0, bounds=(lo, hi), method="trf", x_scale=scale, **kw)
    except (ValueError, FloatingPointError) as exc:
        raise SolverError(f"calibration fit did not converge: {exc}") from None
    if res.status <= 0 or not np.all(np.isfinite(res.x)) or not np.all(np.isfinite(res.fun)):
        raise SolverError(f"calibration fit did not converge after {res.nfev} evaluations "
                          f"({res.message.rstrip('.')}); nothing was written")
    x = res.x.copy()
    J = res.jac
    colnorm = np.linalg.norm(J * np.maximum(np.abs(x), 1e-12)[None, :], axis=0)
    ident = colnorm > 1e-8 * max(float(colnorm.max()), 1e-300)
    # parameters whose roofline term never binds stay at their start value (the tied fit's)
    x[~ident] = x0[~ident]
    names = d.names
    r = res.fun
    n_id = int(ident.sum())
    dof = max(len(r) - n_id, 1)
    s2 = float(r @ r) / dof
    Jid = J[:, ident]
    cov = s2 * np.linalg.pinv(Jid.T @ Jid)
    sd = {n: float("nan") for n in names}
    for k, j in enumerate(np.flatnonzero(ident)):
        sd[names[j]] = float(math.sqrt(max(cov[k, k], 0.0)))
    return KernelFit(form, {n: float(v) for n, v in zip(names, x, strict=True)}, sd,
                     {n: bool(b) for n, b in zip(names, ident, strict=True)}, cov,
                     tuple(names[i] for i in np.flatnonzero(ident)), r, int(res.nfev))


def predict_rows(fit: KernelFit, ms: MeasurementSet, hardware: DeviceSpec, dtype: DType | str) -> np.ndarray:
    """Predicted seconds per row of ``ms`` under ``fit``."""
    dt = DType.parse(dtype)
    d = _design(ms, fit.form, hardware.flops(dt), hardware.memory_bandwidth)
    x = np.array([fit.params.get(n, 0.5 if n.endswith(("compute", "memory")) else 0.0) for n in d.names])
    return d.predict(x)


@dataclass(frozen=True, slots=True)
class CrossValidation:
    """Held-out relative errors of the kernel rows, per form.

    ``matmul_median_abs`` is the median over the GEMM rows alone: the rows on which the size-curve
    model differs from the per-family one (attention and streaming kernels are predicted alike), so
    the curve is judged on them (:func:`calibrate`); empty when no GEMM row was held out."""

    folds: int
    median_abs: Mapping[str, float]
    p90_abs: Mapping[str, float]
    errors: Mapping[str, np.ndarray] = field(repr=False)
    matmul_median_abs: Mapping[str, float] = field(default_factory=dict)


def cross_validate(ms: MeasurementSet, hardware: DeviceSpec, *, dtype: DType | str = DType.FP32,
                   folds: int = 5, seed: int = 0, curve: bool = True) -> CrossValidation:
    """K-fold held-out error of the tied and per-family kernel models, and (``curve``, when the
    GEMM rows carry their row counts) of the size-curve model: GEMMs by :class:`SizeCurve`,
    attention and streaming kernels by the per-family constants.

    Launch and tiny-module rows stay in every training set (they carry one parameter each);
    the kernel rows are split into ``folds`` groups at random (``seed``), the same groups for
    every model.
    """
    ms = factor_rows(ms)
    a = ms.arrays()
    kernel = np.flatnonzero(np.isin(a["kind"], KERNEL_KINDS))
    fixed = np.flatnonzero(np.isin(a["kind"], ("module", "launch")))
    rng = np.random.default_rng(seed)
    perm = rng.permutation(kernel)
    k = max(2, min(folds, len(kernel)))
    parts = np.array_split(perm, k)
    errs: dict[str, list[float]] = {"tied": [], "family": []}
    is_gemm: list[bool] = []     # per held-out row, in the order of errs
    with_curve = curve
    if with_curve:
        try:
            fit_size_curve(ms, hardware, dtype=dtype)
            errs["curve"] = []
        except SpecError:   # no GEMM row counts: no curve to validate
            with_curve = False
    dt = DType.parse(dtype)
    sc, sm = hardware.flops(dt), hardware.memory_bandwidth
    for part in parts:
        train = np.concatenate([fixed, np.setdiff1d(kernel, part)])
        tr, te = ms.subset(train), ms.subset(part)
        tied = fit_kernels(tr, hardware, dtype=dtype, form=KernelForm.TIED)
        fam = fit_kernels(tr, hardware, dtype=dtype, form=KernelForm.FAMILY, start=tied)
        t = te.arrays()["time_s"]
        sel, info = _matmul_rows(te)
        is_gemm += list(sel)
        for name, f in (("tied", tied), ("family", fam)):
            pred = predict_rows(f, te, hardware, dtype)
            errs[name] += list(np.abs(pred - t) / t)
        if with_curve:
            # GEMMs by the size curve of the training GEMMs; attention and streaming kernels by
            # the per-family constants: the model a profile with matmul_size_curve stands for
            pred = predict_rows(fam, te, hardware, dtype)
            c = fit_size_curve(tr, hardware, dtype=dtype)
            ta = te.arrays()
            for i, rows in zip(np.flatnonzero(sel), info["rows"], strict=True):
                if rows > 0:
                    ideal = max(ta["flops"][i] / sc, ta["bytes"][i] / sm)
                    pred[i] = ideal * float(c.ratio(ta["phase"][i], np.array([rows]))[0])
            errs["curve"] += list(np.abs(pred - t) / t)
    arr = {n: np.array(v) for n, v in errs.items()}
    gemm = np.array(is_gemm, dtype=bool)
    return CrossValidation(k, {n: float(np.median(v)) for n, v in arr.items()},
                           {n: float(np.percentile(v, 90)) for n, v in arr.items()}, arr,
                           {n: float(np.median(v[gemm])) for n, v in arr.items()} if gemm.any() else {})


# ------------------------------------------------------------------------------ projection
def op_kind(op: Op) -> str:
    """Kernel family of an estimator operator (:func:`serveplan.estimator.roofline.kernel_family`)."""
    return roofline.kernel_family(op).value


def op_family(flops: Mapping[str, float], nbytes: Mapping[str, float]) -> str:
    """Kernel family of an operator from the structure of its cost (never its name).

    Attention cores are the ops whose work grows with score elements or cached keys; matrix
    multiplies have high arithmetic intensity at large token counts; the rest stream memory.
    """
    if any(flops.get(k, 0.0) for k in ("ap", "apc", "kvd", "kvp")):
        return "attention"
    tokens = {"n": 4096.0, "ng": 4096.0, "np": 4096.0, "nd": 4096.0, "nout": 4096.0, "nall": 4096.0,
              "sp": 1.0, "one": 1.0, "eact": 1.0}
    w = sum(v * tokens.get(k, 0.0) for k, v in flops.items())
    q = sum(v * tokens.get(k, 0.0) for k, v in nbytes.items())
    return "matmul" if q > 0 and w / q > MATMUL_INTENSITY else "stream"


class StepComposer:
    """Step times of a model composed from per-family efficiencies.

    Times the estimator's own compiled operator tables with the shared roofline kernel
    (:mod:`serveplan.estimator.roofline`: per-op rates, size curve, Algorithm 1 overlap), giving
    each kernel family its own factors; with every family given the phase's factors it reproduces
    :meth:`Estimator.time` (tested).
    """

    def __init__(self, model: ModelSpec, hardware: DeviceSpec, profile: EfficiencyProfile,
                 batches: Sequence[StepBatch], *, dtype: DType | str | None = None) -> None:
        est = Estimator(model, hardware, profile, ParallelConfig(), dtype=dtype)
        self.compiled = est.compiled
        self.profile = profile
        self.sc, self.sm = est.peak_flops, hardware.memory_bandwidth
        self.batches = list(batches)
        self.phase = [Phase.PREFILL if b.is_prefill else Phase.DECODE for b in self.batches]
        X = np.column_stack([est.features(b) for b in self.batches]) if self.batches else np.zeros((0, 0))
        # one feature matrix per phase, and where its columns go
        self._X = {ph: (np.flatnonzero([p == ph for p in self.phase]), X[:, [p == ph for p in self.phase]])
                   for ph in Phase if any(p == ph for p in self.phase)}

    def times(self, eff: Mapping[tuple[str, str], tuple[float, float]], dispatch: Mapping[Module, float],
              matmul_curve: SizeCurve | None = None) -> np.ndarray:
        """Step time of every batch; ``eff[(phase, family)] = (e_c, e_m)``. With ``matmul_curve``
        the matrix multiplies take the measured time ratio of :class:`SizeCurve` instead."""
        out = np.empty(len(self.batches))
        p = self.profile
        for ph, (cols, X) in self._X.items():
            disp: Mapping[Module, float] = {} if ph is Phase.DECODE and p.dispatch_hidden_in_decode else dispatch

            def dispatch_of(kind: Module, d: Mapping[Module, float] = disp) -> float:
                return float(d.get(kind, 0.0))
            curve = (roofline.SizeCurve.from_points(matmul_curve.tokens[ph], matmul_curve.ratios[ph])
                     if matmul_curve is not None and ph in matmul_curve.tokens else None)
            rates = roofline.phase_rates(
                self.compiled, efficiency={f: eff[(ph.value, f.value)] for f in roofline.FAMILIES},
                comm=p.efficiency(ph).comm, peak_flops=self.sc, bandwidth=self.sm,
                kappas=(p.kappa_update, p.kappa_repeat_kv, p.kappa_upcast), size_curve=curve,
                dispatch=roofline.dispatch_times(self.compiled, dispatch_of),
            )
            *_, block, comm = roofline.op_terms(self.compiled, rates, X)
            out[cols] = roofline.layers_time(block, comm, rates.dispatch, self.compiled.counts)
        return out


@dataclass(frozen=True, slots=True)
class SizeCurve:
    """Measured GEMM time over its ideal roofline time, as a function of the GEMM's rows.

    ``ratio = t / max(W / S_c, Q / S_m)`` is the inverse of the attained fraction of the
    roofline; its median over the profiled projection shapes at each token count, interpolated
    in ``log(rows)`` (clamped outside the measured counts), is a per-size matmul efficiency. The
    estimator reads it from the profile's ``matmul_size_curve`` (:class:`EfficiencyProfile`)
    when :func:`calibrate` finds that it predicts held-out kernels clearly better than constants.

    ``scale_sd`` is, per phase, the relative standard deviation of the curve's level: the RMS
    over row counts of the standard error of each median, ``1.2533 s / sqrt(n)`` (asymptotic
    standard error of the median of normal data, e.g. Kendall & Stuart, *The Advanced Theory of
    Statistics* vol. 1, §10.10), with ``s`` the scatter of the shapes' ratios around it.
    """

    tokens: Mapping[str, np.ndarray]
    ratios: Mapping[str, np.ndarray]
    scale_sd: Mapping[str, float] = field(default_factory=dict)

    def ratio(self, phase: str, rows: Any) -> np.ndarray:
        t, r = self.tokens[phase], self.ratios[phase]
        return np.asarray(np.interp(np.log(np.maximum(rows, 1.0)), np.log(t), r))


def _matmul_rows(ms: MeasurementSet) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    a = ms.arrays()
    sel = np.isin(a["kind"], ("gemm", "gemv")) & np.isin(a["phase"], PHASES)
    rows = []
    for r in np.array(ms.rows, dtype=object)[sel]:
        if not math.isnan(r.rows):
            rows.append(r.rows)
            continue
        try:   # files without the rows column: the shape text of serveplan profile, "<proj> m=<rows> ..."
            rows.append(int(r.name.split("m=")[1].split()[0]))
        except (IndexError, ValueError):
            rows.append(-1)
    return sel, {"rows": np.array(rows, dtype=float)}


def fit_size_curve(ms: MeasurementSet, hardware: DeviceSpec, *, dtype: DType | str = DType.FP32,
                   exclude: Any = None) -> SizeCurve:
    """The :class:`SizeCurve` of the GEMM rows of ``ms`` (rows whose index is in ``exclude`` are
    left out, for cross-validation)."""
    dt = DType.parse(dtype)
    sc, sm = hardware.flops(dt), hardware.memory_bandwidth
    sel, info = _matmul_rows(ms)
    a = ms.arrays()
    idx = np.flatnonzero(sel)
    keep = np.array([i not in (exclude if exclude is not None else ()) for i in idx], dtype=bool)
    m = info["rows"][keep]
    idx = idx[keep]
    ratio = a["time_s"][idx] / np.maximum(a["flops"][idx] / sc, a["bytes"][idx] / sm)
    tokens, ratios, scale_sd = {}, {}, {}
    for ph in PHASES:
        ok = (a["phase"][idx] == ph) & (m > 0)
        if not np.any(ok):
            raise SpecError(f"no {ph} GEMM rows with a token count (m=...) to build a size curve")
        ts = np.unique(m[ok])
        tokens[ph] = ts
        ratios[ph] = np.array([np.median(ratio[ok & (m == t)]) for t in ts])
        se = []
        for t, med in zip(ts, ratios[ph], strict=True):
            r = ratio[ok & (m == t)] / med - 1.0
            if r.size >= 2:
                se.append(MEDIAN_SE * float(np.std(r, ddof=1)) / math.sqrt(r.size))
        if se:
            scale_sd[ph] = float(min(math.sqrt(float(np.mean(np.square(se)))), MAX_REL_SD))
    return SizeCurve(tokens, ratios, scale_sd)


def size_curve_cv(ms: MeasurementSet, hardware: DeviceSpec, *, dtype: DType | str = DType.FP32) -> dict[str, float]:
    """Held-out error of the size curve on GEMM rows: leave one projection shape (its ``k x n``)
    out at a time and predict its rows from the others."""
    dt = DType.parse(dtype)
    sc, sm = hardware.flops(dt), hardware.memory_bandwidth
    sel, info = _matmul_rows(ms)
    a = ms.arrays()
    idx = np.flatnonzero(sel)
    # a projection shape is its (k, n): the weight, which W and the weight bytes pin down per row
    shapes = np.array([f"{a['flops'][i] / max(rows_i, 1.0):.6g}"
                       for i, rows_i in zip(idx, info["rows"], strict=True)])
    errs = []
    for shp in np.unique(shapes):
        out = idx[shapes == shp]
        curve = fit_size_curve(ms, hardware, dtype=dt, exclude=set(out.tolist()))
        for i, mm in zip(out, info["rows"][shapes == shp], strict=True):
            ideal = max(a["flops"][i] / sc, a["bytes"][i] / sm)
            pred = ideal * float(curve.ratio(a["phase"][i], np.array([mm]))[0])
            errs.append(abs(pred / a["time_s"][i] - 1.0))
    e = np.array(errs)
    return {"median_abs": float(np.median(e)), "p90_abs": float(np.percentile(e, 90)), "n": int(e.size)}


def _family_eff(fit: KernelFit,
                params: Mapping[str, float] | None = None) -> dict[tuple[str, str], tuple[float, float]]:
    p = fit.params if params is None else params
    out = {}
    for ph in PHASES:
        for fam in FAMILIES:
            key = ph if fit.form is KernelForm.TIED else f"{ph}.{fam}"
            out[(ph, fam)] = (p[f"{key}.compute"], p[f"{key}.memory"])
    return out


def _dispatch_of(fit: KernelFit, params: Mapping[str, float] | None = None,
                 base: Mapping[Module, float] | None = None) -> dict[Module, float]:
    p = fit.params if params is None else params
    out = dict(base or {})
    for m in Module:
        if f"dispatch.{m.value}" in p:
            out[m] = p[f"dispatch.{m.value}"]
    return out


@dataclass(frozen=True, slots=True)
class Projection:
    """Constant per-phase factors fitted to composed step times."""

    factors: Mapping[str, tuple[float, float]]     # phase -> (e_c, e_m)
    sd: Mapping[str, tuple[float, float]]
    rel_error: Mapping[str, np.ndarray]            # phase -> (estimator - composed) / composed


def project(fit: KernelFit, composer: StepComposer, dispatch: Mapping[Module, float], *,
            fallback: Mapping[str, tuple[float, float]] | None = None, samples: int = 20, seed: int = 0,
            max_nfev: int | None = None) -> Projection:
    """Fit one (e_c, e_m) per phase to the composed step times of ``composer``'s grid (stage 2).

    A factor the grid does not constrain (no step time moves by :data:`MIN_SENSITIVITY` per
    relative change of it, e.g. MBU when every prefill step is compute bound) is set to
    ``fallback[phase]`` (the tied kernel fit's value) instead of an arbitrary least-squares value.
    """
    target = composer.times(_family_eff(fit), dispatch)
    rng = np.random.default_rng(seed)
    kw: dict[str, Any] = {} if max_nfev is None else {"max_nfev": max_nfev}

    def solve(target: np.ndarray, ph: str, fixed: dict[int, float]) -> tuple[np.ndarray, Any]:
        sel = np.array([p == ph for p in composer.phase])
        fam_eff = _family_eff(fit)
        free = [i for i in (0, 1) if i not in fixed]

        def full(z: np.ndarray) -> np.ndarray:
            x = np.empty(2)
            for i, v in fixed.items():
                x[i] = v
            x[free] = z
            return x

        def resid(z: np.ndarray) -> np.ndarray:
            x = full(z)
            eff = dict(fam_eff)
            for f in FAMILIES:
                eff[(ph, f)] = (x[0], x[1])
            return np.asarray((composer.times(eff, dispatch)[sel] - target[sel]) / target[sel])
        z0 = np.clip(np.array(fit.efficiency(ph, "matmul"))[free], *EFF_BOUNDS)
        res = least_squares(resid, z0, bounds=EFF_BOUNDS, method="trf", **kw)
        if res.status <= 0 or not np.all(np.isfinite(res.x)):
            raise SolverError(f"projection of the {ph} factors did not converge after {res.nfev} evaluations "
                              f"({res.message.rstrip('.')}); nothing was written")
        jac = np.zeros((len(res.fun), 2))
        jac[:, free] = res.jac
        return full(res.x), (res, jac)

    factors, sds, errs = {}, {}, {}
    for ph in PHASES:
        if not any(p == ph for p in composer.phase):
            continue
        x, (res, J) = solve(target, ph, {})
        sensitivity = np.max(np.abs(J) * x[None, :], axis=0)   # d(rel. error)/d(log factor)
        fixed = {i: float(fallback[ph][i]) for i in (0, 1)
                 if fallback is not None and ph in fallback and sensitivity[i] < MIN_SENSITIVITY}
        if len(fixed) == 2:
            x = np.array([fixed[0], fixed[1]])
        elif fixed:
            x, (res, J) = solve(target, ph, fixed)
        factors[ph] = (float(x[0]), float(x[1]))
        errs[ph] = res.fun.copy()
        # (a) the projection's own scatter, s^2 (J^T J)^-1, for the factors the grid constrains
        dof = max(len(res.fun) - 2, 1)
        cov = float(res.fun @ res.fun) / dof * np.linalg.pinv(J.T @ J)
        var = np.clip(np.diag(cov), 0.0, None)
        var = np.where(sensitivity < MIN_SENSITIVITY, 0.0, var)
        # (b) kernel-fit uncertainty: sample identified parameters, re-project
        if samples > 1 and len(fit.cov_names):
            draws = []
            mean = np.array([fit.params[n] for n in fit.cov_names])
            for z in rng.multivariate_normal(mean, fit.cov, size=samples, method="eigh"):
                p = dict(fit.params)
                for n, v in zip(fit.cov_names, z, strict=True):
                    p[n] = float(np.clip(v, *EFF_BOUNDS)) if n.endswith(("compute", "memory")) else max(float(v), 0.0)
                tgt = composer.times(_family_eff(fit, p), _dispatch_of(fit, p, dispatch))
                xs, _ = solve(tgt, ph, fixed)
                draws.append(xs)
            var = var + np.var(np.array(draws), axis=0, ddof=1)
        sd = np.minimum(np.sqrt(var), MAX_REL_SD * x)
        sds[ph] = (float(sd[0]), float(sd[1]))
    return Projection(factors, sds, errs)


# ------------------------------------------------------------------------------ calibration
@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    """Everything ``serveplan calibrate`` reports, and the profile it writes."""

    profile: EfficiencyProfile
    tied: KernelFit
    family: KernelFit
    chosen: KernelForm
    cv: CrossValidation | None
    projection: Projection
    metadata: Mapping[str, str]
    size_curve: SizeCurve | None = None
    size_curve_cv: Mapping[str, float] | None = None
    matmul: str = "constant"       # "curve": the profile carries matmul_size_curve and attention factors

    def summary(self) -> dict[str, Any]:
        """JSON-ready report (also stored under ``calibration`` in the profile YAML)."""
        chosen = self.family if self.chosen is KernelForm.FAMILY else self.tied
        def stats(v: np.ndarray) -> dict[str, float]:
            a = np.abs(v)
            return {"median_abs": float(np.median(a)), "p90_abs": float(np.percentile(a, 90)),
                    "max_abs": float(np.max(a)), "n": int(len(a))}
        out: dict[str, Any] = {
            "matmul_model": self.matmul,
            "kernel_model": self.chosen.value,
            "kernel_params": {k: v for k, v in chosen.params.items()},
            "kernel_sd": {k: v for k, v in chosen.sd.items() if not math.isnan(v)},
            "kernel_residuals": stats(chosen.residuals),
            "tied_residuals": stats(self.tied.residuals),
            "projection_error": {ph: stats(v) for ph, v in self.projection.rel_error.items()},
            "measurements": dict(self.metadata),
        }
        if self.cv is not None:
            out["cross_validation"] = {"folds": self.cv.folds, "median_abs": dict(self.cv.median_abs),
                                       "p90_abs": dict(self.cv.p90_abs),
                                       "matmul_median_abs": dict(self.cv.matmul_median_abs)}
        if self.size_curve is not None:
            # the fitted curve, whether or not the profile uses it (top-level matmul_size_curve)
            out["matmul_size_curve"] = {
                ph: {"rows": [float(v) for v in self.size_curve.tokens[ph]],
                     "time_over_roofline": [float(v) for v in self.size_curve.ratios[ph]]}
                for ph in PHASES}
            if self.size_curve_cv is not None:
                out["matmul_size_curve"]["held_out"] = dict(self.size_curve_cv)
        return out


def calibrate(ms: MeasurementSet, hardware: DeviceSpec, model: ModelSpec, *,
              base: EfficiencyProfile, name: str = "calibrated", dtype: DType | str | None = None,
              prefill_grid: Iterable[tuple[int, int]] = DEFAULT_PREFILL_GRID,
              decode_grid: Iterable[tuple[int, int]] = DEFAULT_DECODE_GRID,
              folds: int = 5, samples: int = 20, seed: int = 0, form: KernelForm | str = "auto", matmul: str = "auto",
              max_nfev: int | None = None, where: str = "measurements") -> Calibration:
    """Fit a profile to measurements (both stages); see the module docstring.

    Parameters
    ----------
    base:
        Profile whose modelling choices (attention_impl, include_lm_head, comm factors, kappas)
        the calibrated one keeps.
    model:
        Reference model whose step grid the constants are projected on.
    form:
        ``"auto"`` (per-family kernel model when its held-out error is at least 10% lower than
        the tied one), ``"tied"`` or ``"family"``: the kernel model the constant factors are
        projected from.
    matmul:
        ``"auto"``: write the size curve (``matmul_size_curve``) and per-phase attention factors
        when the size-curve model's held-out median error on the GEMM rows (the rows it predicts
        differently) is at least 10% lower than the chosen constant model's, else constants;
        ``"constant"`` or ``"curve"`` to force one.

    Raises
    ------
    SpecError
        Too few rows, or bad options.
    SolverError
        A fit did not converge.
    """
    dt = DType.parse(dtype or ms.metadata.get("dtype") or "fp32")
    if matmul not in ("auto", "constant", "curve"):
        raise SpecError(f"matmul={matmul!r}; expected auto, constant or curve")
    if form != "auto" and form not in {f.value for f in KernelForm}:
        raise SpecError(f"form={form!r}; expected auto, {' or '.join(f.value for f in KernelForm)}")
    tied = fit_kernels(ms, hardware, dtype=dt, form=KernelForm.TIED, max_nfev=max_nfev, where=where)
    family = fit_kernels(ms, hardware, dtype=dt, form=KernelForm.FAMILY, start=tied, max_nfev=max_nfev,
                         where=where)
    cv = cross_validate(ms, hardware, dtype=dt, folds=folds, seed=seed) if folds > 1 else None
    chosen = _choose_form(form, cv)
    kfit = family if chosen is KernelForm.FAMILY else tied
    dispatch = _dispatch_of(kfit, base=base.dispatch_s)
    batches = [StepBatch.prefill(b, s) for b, s in prefill_grid] + [StepBatch.decode(b, c) for b, c in decode_grid]
    composer = StepComposer(model, hardware, base, batches, dtype=dt)
    fallback = {ph: (tied.params[f"{ph}.compute"], tied.params[f"{ph}.memory"]) for ph in PHASES}
    proj = project(kfit, composer, dispatch, fallback=fallback, samples=samples, seed=seed, max_nfev=max_nfev)
    try:
        curve = fit_size_curve(ms, hardware, dtype=dt)
        curve_cv = size_curve_cv(ms, hardware, dtype=dt) if folds > 1 else None
    except SpecError:   # rows without "m=<rows>" shape text (e.g. hand-made files): no curve
        curve, curve_cv = None, None
    if matmul == "curve" and curve is None:
        raise SpecError(f"{where}: matmul=curve needs GEMM rows with their row counts (rows column)")
    use_curve = curve is not None and (matmul == "curve" or (
        matmul == "auto" and cv is not None and "curve" in cv.matmul_median_abs
        and cv.matmul_median_abs["curve"] < CLEARLY_BETTER * cv.matmul_median_abs[chosen]))
    size_curve: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    if use_curve:
        # GEMMs: the size curve; attention kernels: the attention family's factors; the phase
        # constants then apply to the streaming kernels only, so they take the stream family's
        assert curve is not None
        dispatch = _dispatch_of(family, base=base.dispatch_s)
        kfit = family
        phases, unc = _curve_phases(base, family, curve)
        size_curve = {ph: (tuple(float(v) for v in curve.tokens[ph]), tuple(float(v) for v in curve.ratios[ph]))
                      for ph in PHASES}
    else:
        phases, unc = _constant_phases(base, proj)
    unc.update(_dispatch_uncertainty(kfit, dispatch))
    md = ms.metadata
    profile = dataclasses.replace(
        base, name=name,
        source=f"serveplan calibrate: {md.get('device_name', 'device')} measured {md.get('date_utc', '?')}",
        description=(f"calibrated on {md.get('device', '?')} ({md.get('device_name', '?')}, torch "
                     f"{md.get('torch_version', '?')}, {md.get('threads', '?')} threads, {dt.value})"),
        hardware=hardware.name, prefill=phases["prefill"], decode=phases["decode"],
        dispatch_s=dispatch, uncertainty=unc, matmul_size_curve=size_curve,
    )
    return Calibration(profile=profile, tied=tied, family=family, chosen=chosen, cv=cv, projection=proj,
                       metadata=dict(md), size_curve=curve, size_curve_cv=curve_cv,
                       matmul="curve" if use_curve else "constant")


def _choose_form(form: KernelForm | str, cv: CrossValidation | None) -> KernelForm:
    """The kernel model the constants are projected from: ``form``, or with ``"auto"`` the
    per-family one when its held-out error is clearly lower (no cross-validation: tied)."""
    if form != "auto":
        return _form(form)
    better = cv is not None and cv.median_abs["family"] < CLEARLY_BETTER * cv.median_abs["tied"]
    return KernelForm.FAMILY if better else KernelForm.TIED


def _clip(v: float) -> float:
    return float(np.clip(v, *EFF_BOUNDS))


def _curve_phases(base: EfficiencyProfile, family: KernelFit,
                  curve: SizeCurve) -> tuple[dict[str, PhaseEfficiency], dict[str, float]]:
    """Per-phase factors of a size-curve profile (streaming constants, attention factors) and their
    standard deviations."""
    phases, unc = {}, {}
    for ph in PHASES:
        (sc_, sm_), (ac, am) = family.efficiency(ph, "stream"), family.efficiency(ph, "attention")
        phases[ph] = PhaseEfficiency(compute=_clip(sc_), memory=_clip(sm_), comm=base.efficiency(ph).comm,
                                     attention_compute=_clip(ac), attention_memory=_clip(am))
        for key, fld in ((f"{ph}.stream.compute", "compute"), (f"{ph}.stream.memory", "memory"),
                         (f"{ph}.attention.compute", "attention_compute"),
                         (f"{ph}.attention.memory", "attention_memory")):
            sd = family.sd.get(key, float("nan"))
            if not math.isnan(sd):
                unc[f"{ph}.{fld}"] = float(min(sd, MAX_REL_SD * family.params[key]))
        if ph in curve.scale_sd:
            unc[f"{ph}.matmul_size_curve"] = curve.scale_sd[ph]
    return phases, unc


def _constant_phases(base: EfficiencyProfile,
                     proj: Projection) -> tuple[dict[str, PhaseEfficiency], dict[str, float]]:
    """Per-phase projected constants (the base profile's where a phase has no steps) and their
    standard deviations."""
    phases, unc = {}, {}
    for ph in PHASES:
        base_eff = base.efficiency(ph)
        ec, em = proj.factors.get(ph, (base_eff.compute, base_eff.memory))
        phases[ph] = PhaseEfficiency(compute=_clip(ec), memory=_clip(em), comm=base_eff.comm)
        if ph in proj.sd:
            unc[f"{ph}.compute"], unc[f"{ph}.memory"] = proj.sd[ph]
    return phases, unc


def _dispatch_uncertainty(kfit: KernelFit, dispatch: Mapping[Module, float]) -> dict[str, float]:
    out = {}
    for m in dispatch:
        sd = kfit.sd.get(f"dispatch.{m.value}", float("nan"))
        if not math.isnan(sd):
            out[f"dispatch.{m.value}"] = sd
    return out


def profile_yaml(cal: Calibration, model_name: str) -> str:
    """The calibrated profile as YAML (loadable by ``--profile FILE``), with the fit report."""
    import yaml

    d = cal.profile.to_dict()
    d["calibration"] = {"reference_model": model_name, **cal.summary()}
    header = ("# Efficiency profile fitted by `serveplan calibrate` from micro-benchmarks.\n"
              + ("# matmul_size_curve: GEMM time over its roofline time by rows; prefill/decode: factors of\n"
                 "# the streaming kernels, attention_*: of the attention kernels (see `calibration`);\n"
                 if cal.matmul == "curve" else
                 "# prefill/decode: constant factors projected from the kernel fit (see `calibration`);\n")
              + "# uncertainty: one standard deviation of each fitted value.\n")
    return header + str(yaml.safe_dump(_plain(d), sort_keys=False))


def _plain(o: Any) -> Any:
    if isinstance(o, dict):
        return {str(k): _plain(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_plain(v) for v in o]
    if isinstance(o, (np.floating, float)):
        return float(o)
    if isinstance(o, (np.integer,)):
        return int(o)
    return o
