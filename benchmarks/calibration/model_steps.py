"""Measure step times of a small Llama-architecture model run with Hugging Face transformers.

The model is built from ``llama-small-config.json`` with random weights (no download; set
``HF_HUB_OFFLINE=1``), in fp32 with SDPA attention, on the CPU with a fixed thread count.

* Prefill step: ``batch`` prompts of ``prompt`` tokens, logits of the last token only
  (``logits_to_keep=1``, as ``generate`` does), a fresh dynamic KV cache per call.
* Timing: CPU time of the process (``time.process_time``), as ``serveplan profile`` measures
  with one thread, so other processes on a shared machine do not inflate the steps.
* Decode step: one new token per sequence on top of ``context - 1`` cached tokens, in a static
  cache of exactly ``context`` slots (Hugging Face's in-place cache, ``StaticCache``), so the step
  attends ``context`` keys and writes one slot, as a paged serving engine does. The cache is
  filled with random keys and values, not by a prefill run, to keep the benchmark short.

These runs are the *validation* data of the calibration: nothing here is used by the fit.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "llama-small-config.json"


def build_model(threads: int, seed: int = 0, config_path: Path = CONFIG) -> tuple[Any, Any]:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    raw = json.loads(config_path.read_text())
    raw.pop("architectures", None)
    raw.pop("torch_dtype", None)
    cfg = LlamaConfig(**raw)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(torch.float32).eval()
    return model, cfg


def _timed(fn: Any, reset: Any, min_total_s: float, min_reps: int, max_reps: int,
           clock: Any = time.process_time) -> tuple[float, float, int]:
    reset()
    t0 = clock()
    fn()  # warm-up
    if clock() - t0 > 5.0:   # long prefills: two timed calls keep the run within ~15 minutes
        min_reps = min(min_reps, 2)
    samples: list[float] = []
    start = clock()
    while len(samples) < min_reps or (clock() - start < min_total_s and len(samples) < max_reps):
        reset()
        t0 = clock()
        fn()
        samples.append(clock() - t0)
    return statistics.median(samples), min(samples), len(samples)


def measure_steps(model: Any, cfg: Any, prefill: Iterable[tuple[int, int]], decode: Iterable[tuple[int, int]], *,
                  min_total_s: float = 1.0, min_reps: int = 3, max_reps: int = 30,
                  progress: bool = True) -> list[dict[str, Any]]:
    """Median seconds per step for each ``(batch, prompt)`` prefill and ``(batch, context)`` decode."""
    import torch
    from tqdm import tqdm
    from transformers import DynamicCache, StaticCache

    cases = [("prefill", b, s) for b, s in prefill] + [("decode", b, c) for b, c in decode]
    rows = []
    gen = torch.Generator().manual_seed(1)
    hkv = cfg.num_key_value_heads
    d = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    with torch.inference_mode():
        for phase, b, n in tqdm(cases, desc="model steps", unit="step", disable=not progress):
            if phase == "prefill":
                ids = torch.randint(0, cfg.vocab_size, (b, n), generator=gen)

                def fn(ids: Any = ids) -> Any:   # bound now: the loop rebinds ids
                    return model(input_ids=ids, past_key_values=DynamicCache(config=cfg), use_cache=True,
                                 logits_to_keep=1)

                def reset() -> None:
                    return None
            else:
                cache = StaticCache(config=cfg, max_cache_len=n)
                for li in range(cfg.num_hidden_layers):
                    k = torch.randn(b, hkv, n - 1, d, generator=gen) * 0.1
                    cache.update(k, k.clone(), li)
                ids = torch.randint(0, cfg.vocab_size, (b, 1), generator=gen)
                pos = torch.tensor([n - 1])

                def fn(ids: Any = ids, cache: Any = cache, pos: Any = pos) -> Any:
                    return model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=pos,
                                 position_ids=pos.expand(ids.shape[0], 1), logits_to_keep=1)

                def reset(cache: Any = cache, n: int = n) -> None:
                    for layer in cache.layers:   # rewind: every timed call writes slot n-1
                        layer.cumulative_length.fill_(n - 1)
            med, mn, reps = _timed(fn, reset, min_total_s, min_reps, max_reps)
            rows.append({"phase": phase, "batch": b, "tokens": n, "time_s": med, "time_min_s": mn, "repeats": reps})
            if phase == "decode":
                del cache
    return rows
