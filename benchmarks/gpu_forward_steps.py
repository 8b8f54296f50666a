"""Measure a GPU: ``serveplan profile --device cuda`` and the forward steps of a Llama-class model.

Run on a machine with an NVIDIA GPU, PyTorch and transformers (nothing is downloaded: the model
is built from a ``config.json`` with random weights)::

    HF_HUB_OFFLINE=1 python benchmarks/gpu_forward_steps.py                 # H100/H200: ~10 min
    HF_HUB_OFFLINE=1 python benchmarks/gpu_forward_steps.py --quick         # a few steps, ~2 min
    python benchmarks/gpu_forward_steps.py --device cpu --quick --config benchmarks/calibration/llama-small-config.json
                                                                            # smoke test of the code path

Steps:

1. ``serveplan profile --device cuda --dtype bf16`` (kernel micro-benchmarks; its CUDA path is
   exercised end to end) -> ``benchmarks/data/<gpu>-<date>-profile.csv``;
2. the model of ``--config`` (default: Llama-3.1-8B's HF fields from the catalog) in bf16 with SDPA
   attention: prefill steps (batch x prompt, fresh dynamic cache, logits of the last token) and
   decode steps (one token over ``context`` cached tokens in a static cache of exactly that size),
   decode both eager (CUDA graphs off) and replayed from a captured CUDA graph (on), timed with
   CUDA events (median of repeats) -> ``benchmarks/data/<gpu>-<date>-forward.csv`` with the GPU,
   driver, CUDA, torch and transformers versions in its header;
3. the bundled profile of the GPU predicts every step (``Estimator``, tp 1; eager = dispatch
   visible, graphs = dispatch hidden in decode) -> ``benchmarks/results/<gpu>-forward.md``.
   These rows are a held-out check: nothing is fitted on them.
"""

from __future__ import annotations

import argparse
import csv
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

FULL_PREFILL = [(b, s) for b in (1, 4) for s in (512, 2048, 8192)] + [(8, 1024)]
FULL_DECODE = [(b, c) for b in (1, 8, 32, 128) for c in (512, 2048, 8192)]
QUICK_PREFILL = [(1, 512), (4, 2048)]
QUICK_DECODE = [(1, 512), (32, 2048)]
#: bundled hardware by substring of the CUDA device name
HARDWARE = {"H100": "h100-sxm", "H200": "h200", "B200": "b200", "A100": "a100-80g", "L40S": "l40s"}


def versions(device: str) -> dict[str, str]:
    import torch
    import transformers

    out = {"torch": torch.__version__, "transformers": transformers.__version__, "python": platform.python_version(),
           "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds")}
    if device.startswith("cuda"):
        out["gpu"] = torch.cuda.get_device_name(0)
        out["cuda"] = str(torch.version.cuda)
        try:
            smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version,clocks.max.sm,power.limit",
                                  "--format=csv,noheader"], capture_output=True, text=True, check=True)
            out["nvidia_smi"] = smi.stdout.strip()
        except (OSError, subprocess.CalledProcessError) as exc:
            out["nvidia_smi"] = f"unavailable ({exc})"
    else:
        out["gpu"] = "cpu"
    return out


def default_config() -> dict[str, Any]:
    """Llama-3.1-8B's Hugging Face fields from the bundled catalog entry (weights are random)."""
    import yaml

    raw = yaml.safe_load((ROOT / "src" / "serveplan" / "specs" / "data" / "models" / "llama-3.1-8b.yaml").read_text())
    keep = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
            "vocab_size", "rms_norm_eps", "rope_theta", "max_position_embeddings", "head_dim", "tie_word_embeddings")
    return {k: raw[k] for k in keep if k in raw}


def build(config: dict[str, Any], device: str) -> tuple[Any, Any]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**{k: v for k, v in config.items() if k not in ("architectures", "torch_dtype")})
    cfg._attn_implementation = "sdpa"
    dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
    with torch.device(device):
        model = LlamaForCausalLM(cfg).to(dtype).eval()
    return model, cfg


class Timer:
    """Median seconds of ``fn`` over repeats: CUDA events on a GPU, perf_counter on the CPU."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch, self.cuda = torch, device.startswith("cuda")

    def __call__(self, fn: Any, reset: Any, reps: int) -> tuple[float, float]:
        import time

        t = self.torch
        reset()
        fn()  # warm-up
        samples = []
        for _ in range(reps):
            reset()
            if self.cuda:
                t.cuda.synchronize()
                a, b = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
                a.record()
                fn()
                b.record()
                b.synchronize()
                samples.append(a.elapsed_time(b) * 1e-3)
            else:
                t0 = time.perf_counter()
                fn()
                samples.append(time.perf_counter() - t0)
        return statistics.median(samples), min(samples)


def measure(model: Any, cfg: Any, device: str, prefill: list[tuple[int, int]], decode: list[tuple[int, int]],
            reps: int) -> list[dict[str, Any]]:
    import torch
    from transformers import DynamicCache, StaticCache

    timer = Timer(device)
    rows: list[dict[str, Any]] = []
    dtype = next(model.parameters()).dtype
    hkv = cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    gen = torch.Generator(device=device).manual_seed(1)
    with torch.inference_mode():
        for b, s in prefill:
            ids = torch.randint(0, cfg.vocab_size, (b, s), device=device, generator=gen)

            def run_prefill(ids: Any = ids) -> Any:
                return model(input_ids=ids, past_key_values=DynamicCache(config=cfg), use_cache=True,
                             logits_to_keep=1)

            med, mn = timer(run_prefill, lambda: None, reps)
            rows.append({"phase": "prefill", "batch": b, "tokens": s, "graphs": "off", "time_s": med, "time_min_s": mn})
        for b, c in decode:
            kv_bytes = 2 * cfg.num_hidden_layers * b * hkv * c * d * torch.finfo(dtype).bits // 8
            if device.startswith("cuda") and kv_bytes > 0.8 * torch.cuda.mem_get_info()[0]:
                print(f"skipped decode batch {b} x {c} tokens: its cache ({kv_bytes / 1e9:.1f} GB) does not fit",
                      flush=True)
                continue
            # the cache layers take their device, dtype and batch from the first update
            cache = StaticCache(config=cfg, max_cache_len=c)
            for li in range(cfg.num_hidden_layers):
                k = torch.randn(b, hkv, c - 1, d, device=device, dtype=dtype, generator=gen) * 0.1
                cache.update(k, k.clone(), li)
            ids = torch.randint(0, cfg.vocab_size, (b, 1), device=device, generator=gen)
            pos = torch.tensor([c - 1], device=device)
            posid = pos.expand(b, 1).contiguous()

            def step(ids: Any = ids, cache: Any = cache, pos: Any = pos, posid: Any = posid) -> Any:
                return model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=pos,
                             position_ids=posid, logits_to_keep=1)

            def rewind(cache: Any = cache, c: int = c) -> None:
                for layer in cache.layers:   # every timed call writes slot c-1
                    if hasattr(layer, "cumulative_length"):
                        layer.cumulative_length.fill_(c - 1)

            med, mn = timer(step, rewind, reps)
            rows.append({"phase": "decode", "batch": b, "tokens": c, "graphs": "off", "time_s": med, "time_min_s": mn})
            if device.startswith("cuda"):
                # capture one decode step and replay it (what engines do with CUDA graphs in decode)
                s_ = torch.cuda.Stream()
                s_.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(s_):
                    for _ in range(2):
                        rewind()
                        step()
                torch.cuda.current_stream().wait_stream(s_)
                graph = torch.cuda.CUDAGraph()
                rewind()
                with torch.cuda.graph(graph):
                    step()
                med, mn = timer(graph.replay, rewind, reps)
                rows.append({"phase": "decode", "batch": b, "tokens": c, "graphs": "on", "time_s": med,
                             "time_min_s": mn})
                del graph
            del cache
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
    return rows


def predict(rows: list[dict[str, Any]], config: dict[str, Any], hardware: str, cfg_path: Path) -> list[dict[str, Any]]:
    from serveplan import ParallelConfig, get_hardware, get_profile
    from serveplan.estimator.batch import StepBatch
    from serveplan.estimator.step import Estimator
    from serveplan.specs.hf_config import load_model_file

    model = load_model_file(str(cfg_path))
    hw = get_hardware(hardware)
    prof = get_profile(None, hardware)
    est = {g: Estimator(model, hw, prof.with_(dispatch_hidden_in_decode=(g == "on")), ParallelConfig(tp=1),
                        dtype="bf16") for g in ("off", "on")}
    out = []
    for r in rows:
        b = (StepBatch.prefill(r["batch"], r["tokens"]) if r["phase"] == "prefill"
             else StepBatch.decode(r["batch"], r["tokens"]))
        p = est[r["graphs"]].time(b)
        out.append({**r, "predicted_s": p, "error": p / r["time_s"] - 1, "profile": prof.name})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", type=Path, default=None, help="HF config.json (default: Llama-3.1-8B's fields).")
    ap.add_argument("--hardware", default=None, help="Bundled hardware id (default: from the CUDA device name).")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--skip-profile", action="store_true", help="Do not run serveplan profile.")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    info = versions(args.device)
    hw = args.hardware or next((v for k, v in HARDWARE.items() if k in info["gpu"]), None)
    tag = ((hw or "gpu") if args.device.startswith("cuda") else "cpu-smoke") + "-" + info["date"][:10]
    data = ROOT / "benchmarks" / "data"
    data.mkdir(parents=True, exist_ok=True)
    if not args.skip_profile:
        cmd = [sys.executable, "-m", "serveplan", "profile", "--device", args.device, "--no-progress",
               "--out", str(data / f"{tag}-profile.csv")]
        cmd += ["--dtype", "bf16"] if args.device.startswith("cuda") else ["--threads", "1"]
        cmd += ["--quick"] if args.quick else []
        print("running:", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    config = json.loads(args.config.read_text()) if args.config else default_config()
    cfg_path = data / f"{tag}-config.json"
    cfg_path.write_text(json.dumps({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                                    "torch_dtype": "bfloat16", **config}, indent=1))
    model, cfg = build(config, args.device)
    prefill, decode = (QUICK_PREFILL, QUICK_DECODE) if args.quick else (FULL_PREFILL, FULL_DECODE)
    rows = measure(model, cfg, args.device, prefill, decode, reps=3 if args.quick else args.reps)
    if hw:
        rows = predict(rows, config, hw, cfg_path)
    out = data / f"{tag}-forward.csv"
    with out.open("w", newline="") as f:
        for k, v in info.items():
            f.write(f"# {k}: {v}\n")
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    print(f"wrote {out}")
    if hw:
        lines = [f"# Forward steps on {info['gpu']} ({info.get('nvidia_smi', '')}; CUDA {info.get('cuda', '-')}, "
                 f"torch {info['torch']}, transformers {info['transformers']}), {info['date']}", "",
                 f"Model: `{cfg_path.name}` (random weights, bf16, SDPA). Predicted with the bundled profile "
                 f"`{rows[0]['profile']}` (held out: nothing fitted on these rows).", "",
                 "| phase | batch | tokens | CUDA graphs | measured (ms) | predicted (ms) | error |",
                 "|---|---|---|---|---|---|---|"]
        lines += [f"| {r['phase']} | {r['batch']} | {r['tokens']} | {r['graphs']} | {r['time_s'] * 1e3:.3f} | "
                  f"{r['predicted_s'] * 1e3:.3f} | {r['error']:+.1%} |" for r in rows]
        errs = sorted(abs(r["error"]) for r in rows)
        lines += ["", f"median |error| {statistics.median(errs):.1%}, worst {errs[-1]:.1%} over {len(errs)} steps."]
        res = ROOT / "benchmarks" / "results" / f"{tag}-forward.md"
        res.write_text("\n".join(lines) + "\n")
        print("\n".join(lines))


if __name__ == "__main__":
    main()
