"""Energy model against MLPerf Inference v4.1 power measurements (whole-system wall power).

For each row of ``src/serveplan/validate/data/mlperf-inference-v4.1-power.yaml`` the power model
(:mod:`serveplan.estimator.power`, :mod:`serveplan.optimize.economics`) predicts the system's
average power at the measured operating point, with only what the submission states:

* model, device, FP8 weights and KV cache, TP 1 with one instance per GPU, the max batch
  (``gpu_batch_size``), TensorRT-LLM's engine profile;
* the GPU power limit of the MaxQ run as the board power (``power_limit_w``), every other power
  figure the device file's (idle 80 W, host 350 W per GPU) and the model's constants;
* the request rate the run sustained (Offline: samples/s; Server: scheduled samples/s) and the
  run's own output tokens per sample (Offline tokens/s / samples/s).

Nothing is fitted to these rows. Mean input lengths are not stated by the logs or the dataset
notes read, so the input length is swept over ``--input-lens`` (default 256, 512 and 1024 tokens;
OpenOrca prompts are capped at 1,024) and the median error is reported for each; GPT-J's output
length is not printed either (capped at 128 tokens), so it is swept over 64 and 128.

    PYTHONPATH=src python benchmarks/validate_energy.py            # writes nothing
    PYTHONPATH=src python benchmarks/validate_energy.py --out benchmarks/results/energy-validation.md
"""

from __future__ import annotations

import argparse
import statistics
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from serveplan.optimize.economics import economics
from serveplan.optimize.goodput import GoodputResult, GoodputSettings, GoodputStatus
from serveplan.sim import SLO, Fleet, Workload
from serveplan.specs.catalog import get_hardware, get_model, get_profile
from serveplan.units import DType

DATA = "mlperf-inference-v4.1-power.yaml"
#: GPT-J output lengths tried (its logs print no token count; TensorRT-LLM's max_output_len is 128)
GPTJ_OUTPUTS = (64, 128)


def rows() -> list[dict[str, Any]]:
    f = resources.files("serveplan.validate").joinpath("data").joinpath(DATA)
    return list(yaml.safe_load(f.read_text())["rows"])


def predict(row: dict[str, Any], input_len: int, output_len: int) -> dict[str, Any]:
    """Predicted system power (W) of ``row``'s run at its measured rate."""
    st = row["settings_stated"]
    hw = get_hardware(row["hardware"]).with_(board_power_w=float(st["power_limit_w"]))
    rate = float(row["also"].get("samples_per_s") or row["load"]["value"])
    n = row["layout"]["instances"]
    wl = Workload.fixed(input_len, output_len, 1000)
    settings = GoodputSettings(model=get_model(row["model"]), hardware=hw, profile=get_profile(hardware="h200"),
                               workload=wl, slo=SLO(ttft_s=10.0, tpot_s=1.0), dtype=DType.parse(row["dtype"]),
                               engine="trtllm", kv_dtype=DType.parse(row["kv_dtype"]) if row["kv_dtype"] else None)
    fleet = Fleet.build(f"{n}m", tp=row["layout"]["tp"], max_batch=int(st["gpu_batch_size"]),
                        scheduler="inflight-no-evict")
    res = GoodputResult(candidate=fleet, goodput_rps=rate, goodput_per_device=rate / n, status=GoodputStatus.OK)
    e = economics(res, settings)
    assert e.fleet_power_w is not None
    roles = e.roles[0]
    return {"power_w": e.fleet_power_w, "busy_prefill": roles.busy_prefill, "busy_decode": roles.busy_decode,
            "activity_decode": roles.activity_decode,
            "decode_batch": roles.decode_batch,
            "accelerator_w": roles.accelerator_w}


def run(input_lens: list[int]) -> tuple[list[dict[str, Any]], dict[int, float]]:
    out = []
    for row in rows():
        outs = [round(row["workload"]["output_tokens_mean"])] if row["workload"]["output_tokens_mean"] else \
            list(GPTJ_OUTPUTS)
        for s_in in input_lens:
            for s_out in outs:
                p = predict(row, s_in, s_out)
                out.append({"id": row["id"], "input_len": s_in, "output_len": s_out, "measured_w": row["value"],
                            **p, "error": p["power_w"] / row["value"] - 1.0})
    med = {}
    for s_in in input_lens:
        errs = [abs(r["error"]) for r in out if r["input_len"] == s_in
                and (r["output_len"] == 128 or not r["id"].startswith("nvidia-h200x8-maxq-gptj"))]
        med[s_in] = statistics.median(errs)
    return out, med


def report(out: list[dict[str, Any]], med: dict[int, float], command: str) -> str:
    lines = ["# Energy model vs MLPerf Inference v4.1 power runs", "",
             f"Command: `{command}`", "",
             "Rows: `src/serveplan/validate/data/mlperf-inference-v4.1-power.yaml` (NVIDIA H200-SXM-141GBx8 MaxQ: "
             "the LLM power runs of v4.1, read from a full snapshot of the results repository; average wall power "
             "of the whole system over loadgen's power window; v4.0's DGX-H100 MaxQ GPT-J run and any v5.0 power runs "
             "were not read, their repositories too large to bring here whole). Prediction: "
             "`serveplan.optimize.economics` at the run's measured request rate with the stated layout, FP8, max "
             "batch and GPU power limit; nothing fitted to these rows.",
             "", "| row | input | output | measured W | predicted W | error | decode batch | busy prefill / decode "
             "| GPU W |", "|---|---|---|---|---|---|---|---|---|"]
    for r in out:
        lines.append(f"| {r['id'].removeprefix('nvidia-h200x8-maxq-')} | {r['input_len']} | {r['output_len']} | "
                     f"{r['measured_w']:.0f} | {r['power_w']:.0f} | {r['error']:+.1%} | {r['decode_batch']:.0f} | "
                     f"{r['busy_prefill']:.2f} / {r['busy_decode']:.2f} | {r['accelerator_w']:.0f} |")
    lines += ["", "Median absolute error over the 6 runs (GPT-J at its 128-token output cap), by the assumed mean "
              "input length (the logs state none):", ""]
    lines += [f"* input {k} tokens: {v:.1%}" for k, v in med.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input-lens", default="256,512,1024", help="mean input lengths to try (tokens)")
    ap.add_argument("--out", type=Path, default=None, help="write the markdown report here")
    a = ap.parse_args()
    lens = [int(x) for x in a.input_lens.split(",")]
    out, med = run(lens)
    cmd = "PYTHONPATH=src python benchmarks/validate_energy.py" + (f" --out {a.out}" if a.out else "")
    text = report(out, med, cmd)
    print(text)
    if a.out is not None:
        a.out.write_text(text)
    assert all(np.isfinite(r["power_w"]) for r in out)


if __name__ == "__main__":
    main()
