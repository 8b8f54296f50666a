"""Synthetic measurements generated from the estimator with known factors."""

from __future__ import annotations

import numpy as np

from serveplan import Estimator, StepBatch, get_hardware, get_model, get_profile, model_from_hf_config
from serveplan.calibrate.fit import FAMILIES, op_kind
from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.ops.base import FEATURE_INDEX
from serveplan.specs.profile import Module, PhaseEfficiency

TRUE_PREFILL = (0.62, 0.81)
TRUE_DECODE = (0.47, 0.66)
TRUE_DISPATCH = {Module.NORM: 8e-6, Module.ATTENTION: 35e-6, Module.MLP: 20e-6, Module.LM_HEAD: 12e-6}
TRUE_LAUNCH = 2e-6
FAMILY_KIND = {"matmul": "gemm", "attention": "attention", "stream": "elementwise"}

TINY = model_from_hf_config({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
                             "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
                             "vocab_size": 256, "torch_dtype": "float16"}, name="tiny")


#: A made-up GEMM size curve (time over peak roofline by rows, a slow band at 8-64 rows) and
#: attention factors, for data that a constant-factor model cannot fit.
TRUE_CURVE = {"prefill": ((1.0, 128.0, 2048.0, 8192.0), (2.0, 1.6, 1.3, 1.25)),
              "decode": ((1.0, 8.0, 64.0, 512.0), (1.3, 3.0, 2.2, 1.4))}
TRUE_ATTENTION = {"prefill": (0.35, 0.5), "decode": (0.3, 0.45)}


def true_profile(curve: bool = False):
    att = ({f"attention_{k}": v for k, v in zip(("compute", "memory"), TRUE_ATTENTION[ph], strict=True)}
           if curve else {}
           for ph in ("prefill", "decode"))
    pa, da = att
    return get_profile("default-gpu").with_(
        prefill=PhaseEfficiency(compute=TRUE_PREFILL[0], memory=TRUE_PREFILL[1], comm=0.7, **pa),
        decode=PhaseEfficiency(compute=TRUE_DECODE[0], memory=TRUE_DECODE[1], comm=0.5, **da),
        dispatch_s=dict(TRUE_DISPATCH), dispatch_hidden_in_decode=False,
        matmul_size_curve=dict(TRUE_CURVE) if curve else {})


def synthetic(noise: float = 0.05, seed: int = 0, curve: bool = False) -> MeasurementSet:
    """Op rows of llama-2-7b on an A100 (times from the estimator with the true factors, and
    with ``curve`` the true GEMM size curve and attention factors), launch rows, and tiny-module
    rows, each with ``noise`` relative Gaussian noise. GEMM rows carry their row counts."""
    rng = np.random.default_rng(seed)
    hw = get_hardware("a100-80g")
    prof = true_profile(curve)
    rows = []
    steps = ([StepBatch.prefill(b, s) for b, s in ((1, 128), (1, 512), (2, 1024), (4, 2048), (8, 256))]
             + [StepBatch.decode(b, c) for b, c in ((1, 512), (8, 1024), (64, 2048), (256, 512), (512, 256))])
    for model, batches in ((get_model("llama-2-7b"), steps),):
        est = Estimator(model, hw, prof)
        spec_ops = [op for g in est.groups for blk in g.blocks for op in blk.ops]
        for b in batches:
            e = est.estimate(b)
            x = est.features(b)
            for op, spec in zip(e.ops, spec_ops, strict=True):
                if op.time_s <= 0:
                    continue
                fam = op_kind(spec)
                m = (sum(c * x[FEATURE_INDEX[k]] for k, c in spec.rows.items()) if spec.rows is not None
                     else float("nan"))
                # GEMMs under a size curve: the curve's time is the whole kernel (launch included)
                launch = 0.0 if (curve and fam == "matmul") else TRUE_LAUNCH
                t = (op.time_s + launch) * (1 + noise * rng.standard_normal())
                rows.append(Measurement(kind=FAMILY_KIND[fam], phase=e.phase, flops=op.flops, bytes=op.bytes,
                                        time_s=t, name=op.name, launches=1, rows=m))
    for _ in range(5):
        rows.append(Measurement(kind="launch", phase="any", flops=1.0, bytes=6.0, name="launch",
                                time_s=TRUE_LAUNCH * (1 + noise * rng.standard_normal())))
    tiny = Estimator(TINY, hw, prof)
    e = tiny.estimate(StepBatch.decode(1, 16))
    for m in e.modules:
        ops = [o for o in e.ops if o.group == m.group and o.module == m.name]
        for _ in range(3):
            rows.append(Measurement(kind="module", phase="any", module=m.name, name=f"{m.name} tiny",
                                    flops=sum(o.flops for o in ops), bytes=sum(o.bytes for o in ops),
                                    time_s=(m.dispatch_s + m.compute_s) * (1 + noise * rng.standard_normal())))
    return MeasurementSet(tuple(rows), {"device": "synthetic", "dtype": "fp16"})


assert set(FAMILY_KIND) == set(FAMILIES)
