"""``plan_serving(...)``: the optimizer in one call, from catalog names or specs to a ranked search."""

from __future__ import annotations

from pathlib import Path

from serveplan.estimator.api import resolve_specs
from serveplan.optimize.goodput import GoodputSettings
from serveplan.optimize.search import SearchResult, search
from serveplan.optimize.space import SearchSpace
from serveplan.sim import SLO, Fidelity, Workload
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.profile import EfficiencyProfile
from serveplan.units import DType


def plan_serving(model: str | ModelSpec, hardware: str | DeviceSpec, *, profile: str | EfficiencyProfile | None = None,
             space: SearchSpace | None = None, workload: Workload | None = None, slo: SLO | None = None,
             dtype: str | DType | None = None, relaxation: float = 0.1, tolerance: float = 0.05, seeds: int = 1,
             seed: int = 0, fidelity: str | Fidelity = Fidelity.ITERATION, jobs: int | None = 1,
             out_dir: str | Path | None = None, progress: bool = False, method: str = "exhaustive",
             target_rate: float | None = None) -> SearchResult:
    """Rank every fleet of ``space`` by goodput per device under ``slo`` (what ``serveplan
    optimize`` does).

    Parameters
    ----------
    model, hardware, profile:
        Catalog ids (or paths) or specs; ``profile`` defaults to the hardware's.
    space:
        Fleets to consider (default :class:`SearchSpace`: up to 8 devices, TP 1-8).
    workload, slo:
        Request stream (default BestServe's ``op2``, 2,000 requests) and latency targets
        (default P90 TTFT 1.5 s, TPOT 70 ms).
    dtype, relaxation, tolerance, seeds, seed, fidelity:
        As :class:`GoodputSettings` (``tolerance`` is its ``rel_tol``).
    jobs, out_dir, progress:
        Worker processes (1: in process), checkpoint directory (resumable), progress bar.
    method, target_rate:
        ``"exhaustive"`` (every fleet simulated) or ``"fast"`` (pools composed, the best fleets
        confirmed whole: what ``serveplan optimize`` runs); the fewest devices reaching
        ``target_rate`` req/s ranks first when given (:func:`~serveplan.optimize.search.search`).

    Raises
    ------
    SpecError
        Unknown names, or settings out of range.
    InfeasibleError
        Nothing fits the devices, or no fleet meets the SLO at any rate.

    Examples
    --------
    >>> from serveplan import SearchSpace, Workload, plan_serving
    >>> res = plan_serving("codellama-34b", "ascend-910b3", space=SearchSpace(devices=4, tp_sizes=(4,)),
    ...                    workload=Workload.scenario("op3", num_requests=300))
    >>> res.best.name
    '1m-tp4-b16-vllm'
    """
    m, hw, pr = resolve_specs(model, hardware, profile)
    settings = GoodputSettings(
        model=m, hardware=hw, profile=pr,
        workload=workload if workload is not None else Workload.scenario("op2", num_requests=2000),
        slo=slo if slo is not None else SLO(ttft_s=1.5, tpot_s=0.07, percentile=90),
        dtype=None if dtype is None else DType.parse(dtype), relaxation=relaxation, rel_tol=tolerance, seeds=seeds,
        seed=seed, fidelity=Fidelity.parse(fidelity))
    return search(space if space is not None else SearchSpace(), settings, jobs=jobs, out_dir=out_dir,
                  progress=progress, method=method, target_rate=target_rate)
