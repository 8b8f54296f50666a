"""CPU time of two chunked-prefill / in-flight runs with speculation off, for comparing two trees
(the speculative-decoding change must leave the plain path's cost unchanged).

    PYTHONPATH=/tmp/base/src .venv/bin/python benchmarks/bench_spec_off.py   # git archive 6c2f17b src
    PYTHONPATH=src .venv/bin/python benchmarks/bench_spec_off.py

Llama-3.1-8B on one H100, 4,000 requests of 1024/256: vLLM engine at 30 req/s, TensorRT-LLM at
25 req/s; minimum CPU time of 3 warm repetitions each. Result: benchmarks/results/spec-off-speed.txt.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling bench_sim_pair module
from bench_sim_pair import cpu_times  # noqa: E402
from serveplan import get_hardware, get_model, get_profile
from serveplan.sim import Workload
from serveplan.sim.config import simulation_config

RUNS = (("vllm", 30.0), ("trtllm", 25.0))
cfgs = [simulation_config(engine=e, fleet_options={"tp": 1}, model=get_model("llama-3.1-8b"),
                          hardware=get_hardware("h100-sxm"), profile=get_profile(),
                          workload=Workload.fixed(1024, 256, 4000), rate=r) for e, r in RUNS]
ts = cpu_times(cfgs, repeats=3)
print(" ".join(f"{t:.4f}" for t in ts), f"sum {sum(ts):.4f}")

