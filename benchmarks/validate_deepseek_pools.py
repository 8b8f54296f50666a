"""DeepSeek-V3 prefill and decode pools across H800 nodes against DeepSeek's published per-node
throughput, and the all-to-all model against DeepEP's published kernel timings.

Published figures (none of them is used to set a constant here):

* "Each H800 node delivers an average throughput of ~73.7k tokens/s input (including cache hits)
  during prefilling or ~14.8k tokens/s output during decoding" over 24 hours of DeepSeek's online
  service; prefill units EP32/DP32 on 4 nodes, decode units EP144/DP144 on 18 nodes, 32 redundant
  experts; FP8 GEMMs and dispatch, BF16 MLA and combine; 56.3% of input tokens hit the KV cache;
  output speed 20-22 tokens/s; mean KV length per output token 4,989 ("DeepSeek-V3/R1 Inference
  System Overview", deepseek-ai/open-infra-index, 202502OpenSourceWeek/day_6).
* The profiled points of that system (deepseek-ai/profile-data README): prefill EP32, TP1, 4K
  prompts, 16K tokens per GPU; decode EP128, TP1, 4K prompts, 128 requests per GPU; balanced routing.
* DeepEP low-latency kernels on H800 + CX7 (deepseek-ai/DeepEP docs/legacy.md): 128 tokens per
  rank, hidden 7168, top-8, FP8 dispatch / BF16 combine. The DeepEP efficiency 0.78 of
  ``CommOptions.deepep()`` is the EP128-256 rows' 39 GB/s of 50; EP16-64 are held out.
* Multi-token prediction: "the acceptance rate of the second token prediction ranges between 85%
  and 90% ... enables a significantly improved decoding speed, delivering 1.8 times TPS" (DeepSeek-V3
  technical report, arXiv:2412.19437, §5.4.3); one MTP module (``num_nextn_predict_layers: 1``).
  The write-up itself does not say whether production decoding uses it: both are rows.
* Two further points of the same layout, used only as comparisons: LMSYS's throughput derived from
  DeepSeek's decode profile (EP128, 128 requests/GPU, KV 4,096: 18,598 output tokens/s per node,
  "Deploying DeepSeek with PD Disaggregation and Large-scale Expert Parallelism on 96 H100 GPUs",
  lmsys.org blog 2025-05-05, "Profile Results"), and RTP-LLM's EP144 H800 decode test (4K in / 2K
  out): "at 13,200 concurrency the 20 TPS per-user SLA is reached, 1,850 TPS per GPU" (RTP-LLM
  "DeepSeek Replay Tech Report", rtp-llm.ai, references/deepseek/reporter; InfoQ 2025-05-19), that
  is 91.7 sequences per GPU.

The decode gap to 14.8k is written term by term in its own section: each term is one variant
applied on top of the previous one (measured profile), so its size in tokens/s per node is the
difference of two rows of this script; docs/validation/deepseek-pools.md cites them.

Run: PYTHONPATH=src nice -n 10 .venv/bin/python benchmarks/validate_deepseek_pools.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling machine_info module
from machine_info import describe, report  # noqa: E402
from serveplan import Estimator, ParallelConfig, StepBatch, get_hardware, get_model, get_profile
from serveplan.estimator.collectives import collective_coefficients
from serveplan.estimator.pools import DecodePoolEstimate, decode_pool, prefill_pool
from serveplan.estimator.speculative import SpecEstimator
from serveplan.ops.base import Collective
from serveplan.specs.comm import A2ABuffer, CommOptions, deepep_buffer_bytes
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.model import ModelSpec
from serveplan.specs.profile import CommModel, EfficiencyProfile
from serveplan.specs.speculative import SpecDecodeConfig

PREFILL_PUBLISHED = 73.7e3
DECODE_PUBLISHED = 14.8e3
PROFILES = ("default-gpu", "measured-h100-sxm")   # H800 = GH100 compute and HBM3 of the H100 SXM
EP32 = ParallelConfig(tp=1, dp=32, ep=32, redundant_experts=32)
EP144 = ParallelConfig(tp=1, dp=144, ep=144, redundant_experts=32)
MTP_ACCEPTANCE = (0.85, 0.90)   # tech report §5.4.3 range
#: DeepSeek's own deployment runs the checkpoint's block-scaled FP8 (DeepSeek-V3 technical report,
#: arXiv:2412.19437, §3.3.2: 1 x 128 activation tiles and 128 x 128 weight blocks; the published
#: checkpoint's quantization_config has weight_block_size [128, 128]) with DeepGEMM's grouped GEMMs,
#: so the experts take the block-FP8 fused-MoE curve, not the per-tensor one
WEIGHTS = "fp8_block"
RTP_LLM_SEQS_PER_GPU = 13200 / 144   # RTP-LLM: 13,200 concurrent requests over 144 GPUs at 20 TPS per user
PUBLISHED_SPEED = 21.0               # midpoint of the write-up's "20-22 tokens per second"
LMSYS_PROFILE_DECODE = 18598         # LMSYS's per-node figure from DeepSeek's decode profile (EP128)
DEEPEP_LL = {16: (118e-6, 195e-6), 32: (155e-6, 273e-6), 64: (173e-6, 314e-6), 128: (192e-6, 369e-6),
             256: (194e-6, 360e-6)}   # (dispatch, combine) latency, docs/legacy.md


def _pct(x: float, ref: float) -> str:
    return f"{(x / ref - 1) * 100:+.0f}%"


def main() -> None:
    m, h800 = get_model("deepseek-v3"), get_hardware("h800")
    lines = [f"machine: {describe()}", "",
             "## Prefill unit: EP32 / DP-attention 32 on 4 H800 nodes (published 73.7k input tokens/s/node)", "",
             "| profile | comm | workload | step (s) | input tok/s/node | computed tok/s/node | vs 73.7k |",
             "|---|---|---|---|---|---|---|"]
    deepep = CommOptions.deepep()
    prefill_comm = CommOptions.deepep(A2ABuffer.NORMAL)     # prefill pools run DeepEP's normal kernels
    decode_comm = CommOptions.deepep(A2ABuffer.LOW_LATENCY)  # decode pools its low-latency kernels
    for prof in PROFILES:
        for label, comm in (("DeepEP + TBO", prefill_comm), ("NCCL-style, serial", None)):
            est = Estimator(m, h800, get_profile(prof), EP32, dtype=WEIGHTS, comm=comm)
            for wl, hit in (("4K prompts, 16K tok/GPU", 0.0), ("same, 56.3% cache hits", 0.563)):
                p = prefill_pool(est, input_len=4096, tokens_per_rank=16384, cache_hit_rate=hit)
                lines.append(f"| {prof} | {label} | {wl} | {p.step_s:.3f} | {p.input_tokens_per_s_per_node:,.0f} | "
                             f"{p.computed_tokens_per_s_per_node:,.0f} | "
                             f"{_pct(p.input_tokens_per_s_per_node, PREFILL_PUBLISHED)} |")
    lines += ["", "## Decode unit: EP144 / DP-attention 144 on 18 H800 nodes, mean KV 4,989 tokens "
              "(published 14.8k output tokens/s/node at 20-22 tokens/s/user)", "",
              "| profile | variant | batch/GPU | step (ms) | tok/s/user | output tok/s/node | vs 14.8k | bound |",
              "|---|---|---|---|---|---|---|---|"]
    gap: dict[str, list[tuple[str, float, str]]] = {}
    for prof in PROFILES:
        base = get_profile(prof)
        serial = CommOptions(dispatch_dtype="fp8", dedup_nodes=True, all_to_all_efficiency=0.78,
                             buffer=A2ABuffer.LOW_LATENCY)
        variants: list[tuple[str, EfficiencyProfile, CommOptions | None, float, float | None, int]] = [
            ("DeepEP + TBO, LL buffers, 20 tok/s/user", base, decode_comm, 20.0, None, 1024),
            ("same, no buffers reserved", base, deepep_no_buffer(), 20.0, None, 1024),
            ("same at 22 tok/s/user", base, decode_comm, 22.0, None, 1024),
            ("expert imbalance 1.3 (assumed EPLB residue)", base.with_(expert_imbalance=1.3), decode_comm, 20.0,
             None, 1024),
            *[(f"MTP K=1, acceptance {a:.2f}", base, decode_comm, 20.0, a, 1024) for a in MTP_ACCEPTANCE],
            ("batch <= 128/GPU (DeepSeek's profiled point)", base, decode_comm, 20.0, None, 128),
            ("no two-batch overlap", base, serial, 20.0, None, 1024),
            ("NCCL-style: BF16, serial, profile e_+", base, None, 20.0, None, 1024)]
        for label, pr, comm, rate, acc, cap in variants:
            try:
                d = _decode(m, h800, pr, comm, rate, acc, cap)
            except Exception as exc:  # an infeasible variant is a row too
                lines.append(f"| {prof} | {label} | - | - | - | 0 | - | {exc} |")
                continue
            lines.append(_decode_row(prof, label, d))
        gap[prof] = _gap_terms(m, h800, base, decode_comm)
    lines += ["", "## At the published concurrency: the same layout with a fixed batch per GPU", "",
              "RTP-LLM measured 91.7 sequences/GPU at the 20 tokens/s/user SLA on EP144 H800 (14.8k tok/s/node); "
              "the write-up's own figures give 14.8k / (8 x 21 tok/s/user) = 88 sequences/GPU on average. "
              "The model's speed and throughput at those batches:", "",
              "| profile | variant | batch/GPU | step (ms) | tok/s/user | output tok/s/node | vs 14.8k | bound |",
              "|---|---|---|---|---|---|---|---|"]
    for prof in PROFILES:
        base = get_profile(prof)
        for b in (round(RTP_LLM_SEQS_PER_GPU), round(DECODE_PUBLISHED / 8 / PUBLISHED_SPEED)):
            for label, acc in (("no MTP", None), ("MTP K=1, acceptance 0.85", 0.85)):
                d = _decode(m, h800, base, decode_comm, 1.0, acc, b)
                lines.append(_decode_row(prof, f"{label}, {b}/GPU", d))
    lines += ["", "## Decode gap to 14.8k, term by term (each row adds one term to the row above)", ""]
    for prof in PROFILES:
        lines += [f"### {prof}", "", "| term | output tok/s/node | change | vs 14.8k | source |",
                  "|---|---|---|---|---|"]
        prev = None
        for label, v, src in gap[prof]:
            change = "-" if prev is None else f"{v - prev:+,.0f}"
            lines.append(f"| {label} | {v:,.0f} | {change} | {_pct(v, DECODE_PUBLISHED)} | {src} |")
            prev = v
        lines.append("")
    bufs = [(label, deepep_buffer_bytes(c, hidden_size=m.hidden_size, num_experts=m.num_experts + 32, ep=ep))
            for label, c, ep in (("decode EP144, low-latency, 128 tokens/rank", decode_comm, 144),
                                 ("prefill EP32, normal", prefill_comm, 32),
                                 ("EP144, auto (both; SGLang's default deepep_mode)", deepep, 144))]
    lines += ["DeepEP buffers per GPU (DeepEP V1 size hints over 288 physical experts, hidden 7168): "
              + "; ".join(f"{lab}: {b / 1e9:.2f} GB" for lab, b in bufs) + ".", ""]
    lines += ["", "## DeepSeek's profiled decode point: EP128, 128 requests/GPU, 4K prompts, balanced routing", "",
              "| profile | step (ms) | compute stream (ms) | all-to-all stream (ms) | tok/s/user | output tok/s/node |",
              "|---|---|---|---|---|---|"]
    for prof in PROFILES:
        est = Estimator(m, h800, get_profile(prof), ParallelConfig(tp=1, dp=128, ep=128), dtype=WEIGHTS, comm=deepep)
        b = StepBatch.decode(128 * 128, 4096)
        step, comp, comm_s = est.overlap_streams(b)
        lines.append(f"| {prof} | {step * 1e3:.1f} | {comp * 1e3:.1f} | {comm_s * 1e3:.1f} | {1 / step:.1f} | "
                     f"{128 * 8 / step:,.0f} |")
    lines += ["", "## DeepEP low-latency all-to-all, 128 tokens/rank, H800 + CX7 (docs/legacy.md)", "",
              "The model's RDMA efficiency (0.78) is DeepEP's EP128-256 bandwidth; EP16-64 are held out. "
              "Low-latency kernels send every copy over RDMA (no node deduplication, no NVLink forwarding).", "",
              "| EP | dispatch model (us) | measured | combine model (us) | measured |", "|---|---|---|---|---|"]
    for ep, (t_d, t_c) in DEEPEP_LL.items():
        vals = []
        for dt in (1.03125, 2.0):  # FP8 with scales, BF16
            V = 128 * 8 * 7168 * dt
            row, lat = collective_coefficients(Collective.ALL_TO_ALL, ep, np.array([V]), np.array([V / dt]), h800,
                                               CommModel.ALPHA_BETA, copies=8)
            vals.append(float(row[0]) / deepep.all_to_all_efficiency + lat)
        lines.append(f"| {ep} | {vals[0] * 1e6:.0f} | {t_d * 1e6:.0f} ({_pct(vals[0], t_d)}) | {vals[1] * 1e6:.0f} | "
                     f"{t_c * 1e6:.0f} ({_pct(vals[1], t_c)}) |")
    report(lines, "deepseek-pools-h800.md")


def deepep_no_buffer() -> CommOptions:
    """DeepEP's timing without reserving its buffers (the memory-reserve term of the gap)."""
    return CommOptions.deepep(A2ABuffer.NONE)


def _decode(m: ModelSpec, hw: DeviceSpec, pr: EfficiencyProfile, comm: CommOptions | None, rate: float,
            mtp: float | None, cap: int) -> DecodePoolEstimate:
    """Decode pool at EP144 (with DeepSeek's MTP module at acceptance ``mtp`` when given)."""
    est: Estimator
    if mtp is None:
        est = Estimator(m, hw, pr, EP144, dtype=WEIGHTS, comm=comm)
    else:
        spec = SpecDecodeConfig(method="mtp", num_tokens=1, acceptance=mtp)
        est = SpecEstimator(m, hw, pr, EP144, spec=spec, dtype=WEIGHTS, comm=comm)
    return decode_pool(est, context_len=4989, tokens_per_s_per_user=rate, max_batch_per_rank=cap)


def _decode_row(prof: str, label: str, d: DecodePoolEstimate) -> str:
    return (f"| {prof} | {label} | {d.batch_per_rank} | {d.step_s * 1e3:.1f} | {d.tokens_per_s_per_user:.1f} | "
            f"{d.output_tokens_per_s_per_node:,.0f} | {_pct(d.output_tokens_per_s_per_node, DECODE_PUBLISHED)} | "
            f"{d.bound} |")


def _gap_terms(m: ModelSpec, hw: DeviceSpec, base: EfficiencyProfile, comm: CommOptions
               ) -> list[tuple[str, float, str]]:
    """The cumulative chain of the decode gap (see the module docstring)."""
    imb = base.with_(expert_imbalance=1.3)
    b_pub = round(DECODE_PUBLISHED / 8 / PUBLISHED_SPEED)
    b_rtp = round(RTP_LLM_SEQS_PER_GPU)
    rows = [
        ("model: DeepEP + TBO at 20 tok/s/user, no buffers reserved",
         _decode(m, hw, base, deepep_no_buffer(), 20.0, None, 1024), "this model"),
        ("+ DeepEP low-latency buffers reserved (2.15 GB/GPU)", _decode(m, hw, base, comm, 20.0, None, 1024),
         "DeepEP csrc/legacy/config.hpp LowLatencyLayout; SGLang 128 tokens/rank"),
        ("+ expert imbalance 1.3 after EPLB (assumed)", _decode(m, hw, imb, comm, 20.0, None, 1024),
         "assumed: no published post-EPLB balancedness"),
        ("+ published speed 21 tok/s/user (midpoint of 20-22)",
         _decode(m, hw, imb, comm, PUBLISHED_SPEED, None, 1024), "write-up"),
        (f"+ batch at the capacity measured on this layout, {b_rtp}/GPU at 20 tok/s/user",
         _decode(m, hw, imb, comm, 1.0, None, b_rtp), "RTP-LLM: 13,200 requests on 144 H800 at its 20 TPS SLA"),
        (f"+ 24-hour average below capacity: {b_pub}/GPU = 14.8k / (8 x 21)",
         _decode(m, hw, imb, comm, 1.0, None, b_pub), "write-up arithmetic (tokens per GPU = sequences x speed)"),
    ]
    out = [(label, d.output_tokens_per_s_per_node, src) for label, d, src in rows]
    last = rows[-1][1]
    # the residual: the model's step at that batch against the step the published speed implies
    out.append((f"+ step at {b_pub}/GPU as published: {1e3 / PUBLISHED_SPEED:.1f} ms "
                f"(model {last.step_s * 1e3:.1f} ms)", last.batch_per_rank * 8 * PUBLISHED_SPEED,
                "residual: step time the model does not account for"))
    mtp = _decode(m, hw, imb, comm, 1.0, 0.85, b_pub)
    out.append((f"(instead: MTP at acceptance 0.85, same batch; model speed "
                f"{mtp.tokens_per_s_per_user:.1f} tok/s/user)", mtp.output_tokens_per_s_per_node,
                "tech report §5.4.3; not in the chain"))
    return out


if __name__ == "__main__":
    main()
