"""Inter-token latency over tokens (``simulate(itl=True)``, :class:`serveplan.sim.metrics.GapLog`).

The invariant every test leans on (hand derivation): a request's gaps after its first token add up to
``finish - first_token``, so over all completed requests the tokens' gaps number ``sum(output - 1)``
and their mean is the TPOT mean weighted by ``output - 1``. It holds only when each gap is measured
from that request's own previous token, whatever the engine, the layout or the load.
"""

from __future__ import annotations

import numpy as np
import pytest

from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import SimulationConfig, Workload, simulate
from serveplan.sim.metrics import GapLog
from serveplan.sim.workload import LengthDist


def _config(engine: str, strategy: str, *, tp: int = 1, pp: int = 1, n: int = 300, **load) -> SimulationConfig:
    wl = Workload.from_dataset("sharegpt", n, seed=3)
    return SimulationConfig(model=get_model("llama-3.1-8b"), hardware=get_hardware("h100-sxm"),
                            profile=get_profile(None, "h100-sxm"), engine=engine, strategy=strategy, tp=tp, pp=pp,
                            workload=wl, **({"rate": 20.0} | load))


def _tight(engine: str, rate: float) -> SimulationConfig:
    """A KV cache of a few dozen requests (Llama-3.1-70B on two H100s): vLLM preempts at 8 req/s."""
    wl = Workload.from_distributions(LengthDist(kind="uniform", low=100, high=3000),
                                     LengthDist(kind="uniform", low=2, high=600), 300, seed=7)
    return SimulationConfig(model=get_model("llama-3.1-70b"), hardware=get_hardware("h100-sxm"),
                            profile=get_profile(None, "h100-sxm"), engine=engine, strategy="1m", tp=2, rate=rate,
                            workload=wl)


CASES = {
    "vllm": lambda: _config("vllm", "1m"),
    "sglang": lambda: _config("sglang", "1m"),              # prefill steps pause the decodes
    "trtllm": lambda: _config("trtllm", "1m"),
    "vllm-1p1d": lambda: _config("vllm", "1p1d", rate=10.0),  # the gap before the first decode spans the transfer
    "vllm-pp2": lambda: _config("vllm", "1m", pp=2, rate=10.0),
    "vllm-closed-loop": lambda: _config("vllm", "1m", rate=None, concurrency=32),
    "vllm-offline": lambda: _config("vllm", "2m", rate=None, offline=True),
    "vllm-preempting": lambda: _tight("vllm", 8.0),
    "sglang-tight": lambda: _tight("sglang", 1.0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_itl_counts_every_token_once_from_its_own_previous_token(case):
    cfg = CASES[case]()
    clients = cfg.concurrency
    with_itl = simulate(cfg, itl=True)
    plain = simulate(cfg)
    for f in ("first_token", "finish", "ttft", "tpot"):     # recording changes nothing the run does
        np.testing.assert_array_equal(getattr(with_itl.requests, f), getattr(plain.requests, f))
    assert plain.itl_s is None and with_itl.itl_s is not None
    rec = with_itl.requests
    assert with_itl.num_completed == with_itl.num_requests   # (an unfinished request's tokens count too)
    done = np.isfinite(rec.finish) & (rec.output_len > 1)
    gaps = rec.output_len[done] - 1
    itl = with_itl.itl_s
    assert itl.count == int(gaps.sum())
    weighted_tpot = float(np.sum(rec.tpot[done] * gaps) / gaps.sum())
    assert itl.mean == pytest.approx(weighted_tpot, rel=1e-9)
    assert 0 < itl.p50 <= itl.p90 <= itl.p99 <= itl.max
    if case == "vllm-preempting":
        assert with_itl.num_preemptions > 0
    assert clients is None or case == "vllm-closed-loop"


def test_gap_log_percentiles_are_numpys_over_the_expanded_tokens():
    rng = np.random.default_rng(1)
    log, tokens = GapLog(), []
    for _ in range(50):
        steps = rng.random(int(rng.integers(1, 20)))
        w = int(rng.integers(1, 9))
        log.add(steps, w)
        tokens += [x for x in steps for _ in range(w)]
    for _ in range(30):
        x, w = float(rng.random()), int(rng.integers(0, 5))   # a step with no decodes weighs nothing
        log.add_one(x, w)
        tokens += [x] * w
    s, v = GapLog.stats([log]), np.array(tokens)
    assert s.count == v.size and s.mean == pytest.approx(v.mean(), rel=1e-12)
    for p, got in ((50, s.p50), (90, s.p90), (99, s.p99)):
        assert got == pytest.approx(float(np.percentile(v, p)), rel=1e-12)
    assert np.isnan(GapLog.stats([GapLog()]).p50)


def test_the_median_gap_of_a_chunked_prefill_run_is_a_decoding_step_not_a_request_average():
    # vLLM under load: most gaps are decode-only steps, a few carry a prompt chunk; a request's TPOT
    # averages its gaps, so the token median sits below the request median and the token P99 above
    res = simulate(_config("vllm", "1m", rate=25.0, n=400), itl=True)
    assert res.itl_s.p50 < res.tpot_s.p50 and res.itl_s.p99 > res.tpot_s.p99
    assert res.to_dict()["itl_s"]["count"] == res.itl_s.count
