"""Speculative decoding against published speedups (docs/validation/speculative-decoding.md).

Each case simulates the published setup twice, without and with speculation, in a closed loop at
the published batch (clients), and compares the predicted speedup of output tokens per second
with the published one. Acceptance rates are the method defaults of
:mod:`serveplan.specs.speculative` (published measurements, cited there); nothing is fitted to
these figures.

Run: ``PYTHONPATH=src python benchmarks/validate_spec.py`` (about 30 s on 2 cores).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from machine_info import describe, report  # noqa: E402
from serveplan import get_hardware, get_model, get_profile  # noqa: E402
from serveplan.sim import Workload, simulate  # noqa: E402
from serveplan.sim.config import simulation_config  # noqa: E402
from serveplan.specs.speculative import SpecDecodeConfig  # noqa: E402


@dataclass(frozen=True)
class Case:
    name: str
    figure: str          # where the published number is
    published: float     # published speedup (x)
    model: str
    hardware: str
    dtype: str | None
    engine: str
    fleet: dict[str, int]
    spec: SpecDecodeConfig
    clients: int
    input_len: int
    output_len: int
    acceptance_source: str


CASES = [
    Case("EAGLE-3, Llama-3.1-8B-Instruct, MT-bench, 1x H100, SGLang, batch 1",
         "SGLang docs, Speculative Decoding, Performance Highlights (from the EAGLE-3 paper, arXiv:2503.01840): "
         "158.34 -> 373.25 tokens/s", 373.25 / 158.34, "llama-3.1-8b", "h100-sxm", None, "sglang", {"tp": 1},
         SpecDecodeConfig(method="eagle", num_tokens=5), 1, 128, 512,
         "eagle default 0.651 per position: tau 2.77 at K=7 on MT-bench measured by Nebius (another source); "
         "K = 5 = SGLang's speculative_num_steps default"),
    Case("MTP, DeepSeek-V3, 1000/1000, 16x H800 (TP8 x DP2, EP16), FP8, SGLang, 1 client",
         "DeepSeek-V3 Technical Report (arXiv:2412.19437) §5.4.3: 1.8x TPS", 1.8, "deepseek-v3", "h800", None,
         "sglang", {"tp": 8, "dp": 2, "ep": 16}, SpecDecodeConfig(method="mtp", num_tokens=1), 1, 1000, 1000,
         "mtp default 0.875: the same report's 85-90 % (same source as the speedup)"),
    Case("MTP, DeepSeek-V3, 1000/1000, 16x H800 (TP8 x DP2, EP16), FP8, SGLang, 64 clients",
         "DeepSeek-V3 Technical Report (arXiv:2412.19437) §5.4.3: 1.8x TPS", 1.8, "deepseek-v3", "h800", None,
         "sglang", {"tp": 8, "dp": 2, "ep": 16}, SpecDecodeConfig(method="mtp", num_tokens=1), 64, 1000, 1000,
         "mtp default 0.875: the same report's 85-90 % (same source as the speedup)"),
]


def tokens_per_s(case: Case, spec: SpecDecodeConfig | None) -> float:
    n = max(3 * case.clients, 20)
    cfg = simulation_config(engine=case.engine, fleet_options=dict(case.fleet), model=get_model(case.model),
                            hardware=get_hardware(case.hardware), profile=get_profile(), dtype=case.dtype,
                            workload=Workload.fixed(case.input_len, case.output_len, n), rate=None,
                            concurrency=case.clients, spec=spec)
    cl = simulate(cfg).closed_loop
    assert cl is not None
    return cl.output_tokens_per_s


def main() -> None:
    t0 = time.perf_counter()
    lines = [f"# speculative decoding validation; {describe()}", "",
             "| case | published | base tok/s | spec tok/s | predicted | error | acceptance |",
             "|---|---|---|---|---|---|---|"]
    for c in CASES:
        base = tokens_per_s(c, None)
        sp = tokens_per_s(c, c.spec)
        pred = sp / base
        err = pred / c.published - 1
        lines.append(f"| {c.name} | {c.published:.2f}x ({c.figure}) | {base:,.1f} | {sp:,.1f} | {pred:.2f}x | "
                     f"{err:+.1%} | {c.acceptance_source} |")
    lines += ["", f"{time.perf_counter() - t0:.1f} s"]
    report(lines, "spec-validation.md")


if __name__ == "__main__":
    main()
