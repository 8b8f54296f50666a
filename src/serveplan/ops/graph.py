"""Per-layer operator lists (work, traffic, communication) for every supported architecture.

One builder, :func:`build_layer_groups`, serves prefill, decode and mixed steps: the op costs
are linear forms over batch features (:mod:`serveplan.ops.base`), so a pure prefill step simply
has zero decode features and vice versa.

Sources and the choices made where they are inconsistent:

* Dense attention (GQA/MHA), unfused (``eager``): BestServe Tables 8-11 generalised to a mixed
  step. Typos of the printed tables are fixed as follows:
  Table 11 rows 2 and 10 ``W`` divided by ``t``; Table 10 row 10 weight read ``h^2/t``;
  Table 9/11 rows 5 and ⋆ (KV update, repeat_kv) use Table 9's coefficient 4 divided by ``t``
  (so ``t = 1`` reproduces Table 9); every column-parallel projection reads the whole
  (replicated) input (Table 10 row 1 divides it by ``t``, rows 2-3 do not); RoPE acts on the
  device's own heads, so it is divided by ``t``. ``h`` in the tables is split into the query
  width ``num_heads * head_dim`` and the hidden size, which differ for e.g. Qwen3.
* Dense attention, fused (``fused``, flash-attention style): projections as above; one kernel
  reads Q, K, V once and writes O, with causal score work ``4 * apc * head_dim`` per head.
* MLP: BestServe Tables 1-2 and 12-13 with the decode ``mul`` traffic ``6*b*h0`` (not
  ``6*b*s*h0``) and the residual ``add`` traffic ``4*b*s*h`` (not ``4*b*s*h0``, since ``W`` is
  ``b*s*h``).
* RMSNorm: BestServe Tables 6-7, not divided by ``t`` (Appendix B.1). LayerNorm (OPT): Table 6
  plus mean subtraction and bias add.
* MLA (DeepSeek-V3): modeling notes A.5 step tables; prefill up-projects K and V explicitly,
  decode absorbs ``W^UK`` into the query and runs MQA over the latent cache, which every TP rank
  holds whole.
* MoE: router, top-k routed experts and shared experts (notes B.2), expert parallelism with two
  all-to-alls (notes A.7), expected number of experts touched under uniform routing.
* Local attention (sliding window, chunked): the attention kernel's keys and score elements are
  the windowed features ``kvpw``/``kvdw``/``apw``/``apcw`` (:mod:`serveplan.ops.window`);
  projections, norms and MLP are as on full layers.
* Linear attention (Gated DeltaNet, Qwen3-Next/3.5): projections, causal conv1d, the delta-rule
  recurrence over a ``dk x dv`` state per value head (Yang et al., "Gated Delta Networks",
  arXiv:2412.06464, eq. 10: about ``8 dk dv`` FLOP per head and token), chunked in prefill
  (chunk 64, flash-linear-attention's ``chunk_gated_delta_rule``), and a read and a write of
  every sequence's state per step.
* Layers group by (token mixer, MoE or dense): a model with sliding and full layers, or
  interleaved MoE and dense layers, gets one group per kind with its layer count.

Byte counts use ``ab`` bytes per activation value, ``wb`` per weight (the layer, expert and
embedding formats of :meth:`ModelSpec.weight_formats`) and ``kvb`` per cached value;
BestServe's tables assume 2 bytes for all three, so its ``4*b*s*h`` is ``2*ab*n*h`` here.
"""

from __future__ import annotations

from dataclasses import dataclass

from serveplan.ops.base import (
    ADX,
    ADXW,
    AP,
    APC,
    APCW,
    APW,
    DON,
    EACT,
    KVD,
    KVDW,
    KVP,
    KVPW,
    NALL,
    ND,
    NG,
    NOUT,
    NP,
    ONE,
    PON,
    SP,
    ZERO,
    Collective,
    Comm,
    LayerGroup,
    Lin,
    ModuleBlock,
    N,
    Op,
    Rate,
)
from serveplan.specs.comm import CommOptions
from serveplan.specs.model import AttentionKind, LayerType, MLPKind, ModelSpec, NormKind
from serveplan.specs.parallel import ParallelConfig
from serveplan.specs.profile import AttentionImpl, Module
from serveplan.units import DType


def _gemm(name: str, module: Module, tokens: Lin, gemm_tokens: Lin, k: float, m: float,
          ab: float, wb: float, source: str, weight_read: Lin = ONE) -> Op:
    """``tokens x k`` times ``k x m`` weight: 2·t·k·m FLOP; read input and weight, write output.

    ``weight_read`` says when the weight is read: every step (``ONE``), or only in steps with
    prefill tokens (``PON``) or decode tokens (``DON``) for the weights of one phase's path."""
    return Op(
        name, module,
        flops=gemm_tokens * (2.0 * k * m),
        bytes=tokens * (ab * (k + m)) + weight_read * (wb * k * m),
        source=source,
        rows=tokens,
        inner=k,
    )


def _norm_ops(prefix: str, tokens: Lin, h: int, kind: NormKind, ab: float, wb: float,
              module: Module = Module.NORM) -> list[Op]:
    """RMSNorm: BestServe Table 6 (prefill) / Table 7 (decode) in terms of tokens ``n``.
    LayerNorm adds the mean subtraction and the bias (same per-element accounting)."""
    src = "BestServe Table 6/7"
    ops = []
    if kind is NormKind.LAYER:
        ops += [
            Op(f"{prefix}.mean0", module, tokens * h, tokens * (ab * h + ab), source=src + " (LayerNorm)"),
            Op(f"{prefix}.sub", module, tokens * h, tokens * (2 * ab * h + ab), source=src + " (LayerNorm)"),
        ]
    ops += [
        Op(f"{prefix}.pow", module, tokens * h, tokens * (2 * ab * h), source=src + " row 1"),
        Op(f"{prefix}.mean", module, tokens * h, tokens * (ab * h + ab), source=src + " row 2"),
        Op(f"{prefix}.add", module, tokens * 1.0, tokens * (2 * ab), source=src + " row 3"),
        Op(f"{prefix}.rsqrt", module, tokens * 1.0, tokens * (2 * ab), source=src + " row 4"),
        Op(f"{prefix}.mul", module, tokens * h, tokens * (2 * ab * h + ab), source=src + " row 5"),
        Op(f"{prefix}.mul_weight", module, tokens * h, tokens * (2 * ab * h) + ONE * (wb * h), source=src + " row 6"),
    ]
    if kind is NormKind.LAYER:
        ops.append(Op(f"{prefix}.add_bias", module, tokens * h, tokens * (2 * ab * h) + ONE * (wb * h),
                      source=src + " (LayerNorm bias)"))
    return ops


def _fused_norm_ops(prefix: str, tokens: Lin, h: int, kind: NormKind, ab: float, wb: float,
                    module: Module = Module.NORM) -> list[Op]:
    """Residual add and RMSNorm (or LayerNorm) in one kernel, as the engines run it: one pass reads
    the layer's input and the residual and writes the new residual and the normalised output,
    ``4*ab*h`` bytes per token (vLLM ``fused_add_rms_norm``, ``vllm/model_executor/layers/layernorm.py``
    ``RMSNorm.forward_cuda`` with ``residual``; SGLang ``sgl_kernel.fused_add_rmsnorm``; TensorRT-LLM
    fuses it with the all-reduce, ``AllReduceFusionOp.RESIDUAL_RMS_NORM``). About 4 FLOP per value
    for the add, square, scale and weight (LayerNorm: 7, mean subtraction and bias)."""
    per = 7 if kind is NormKind.LAYER else 4
    return [Op(f"{prefix}.fused_add_norm", module, tokens * (per * h),
               tokens * (4 * ab * h) + ONE * (wb * h * (2 if kind is NormKind.LAYER else 1)),
               source="engines' fused residual add + norm: read input and residual, write both")]


@dataclass(frozen=True, slots=True)
class AttentionFlops:
    """FLOP of attention's two matrix products, QK^T and PV (2 FLOP per multiply-add), on one
    device's heads of one layer: per score element of a prefill sequence (one query, one key) and
    per cached key of one decode token. Softmax, scaling and masking are not included (the
    operator lists add them as their own element-wise work).

    Every attention operator of :func:`build_layer_groups` takes its matrix-product work from here,
    and so does the offloading cost model (:mod:`serveplan.offload.cost`, FlexGen A.3's ``4*h1``
    per key for OPT), so the two cannot disagree.
    """

    prefill_qk: float
    prefill_pv: float
    decode_qk: float
    decode_pv: float

    @property
    def prefill(self) -> float:
        return self.prefill_qk + self.prefill_pv

    @property
    def decode(self) -> float:
        return self.decode_qk + self.decode_pv


def attention_flops(model: ModelSpec, tp: int = 1) -> AttentionFlops:
    """:class:`AttentionFlops` of ``model`` with its heads split over ``tp`` devices.

    GQA/MHA: every query head scores ``head_dim``-wide keys and sums ``head_dim``-wide values,
    ``2 * head_dim`` each per head (BestServe Table 8 rows 5 and 9: ``2*b*s^2*h`` each at ``h =
    heads * head_dim``). MLA (DeepSeek-V2/V3, modeling notes A.5): prefill runs per-head K and V up
    projected, ``2 * (d_C + d_R)`` and ``2 * d_v`` per head (step 6); decode runs absorbed over the
    latent cache, ``2 * (d_kv + d_R)`` and ``2 * d_kv`` per head (step 4: ``2*(2*d_kv + d_R)``).
    """
    if model.attention is AttentionKind.MLA:
        ht = model.num_attention_heads / tp
        dkv, dr = model.kv_lora_rank, model.qk_rope_head_dim
        return AttentionFlops(prefill_qk=ht * 2 * (model.qk_nope_head_dim + dr), prefill_pv=ht * 2 * model.v_head_dim,
                              decode_qk=ht * 2 * (dkv + dr), decode_pv=ht * 2 * dkv)
    dq_t = model.num_attention_heads / tp * model.head_dim
    return AttentionFlops(prefill_qk=2 * dq_t, prefill_pv=2 * dq_t, decode_qk=2 * dq_t, decode_pv=2 * dq_t)


def _gqa_attention_ops(model: ModelSpec, par: ParallelConfig, impl: AttentionImpl,
                       ab: float, wb: float, kvb: float, local: bool = False, fused: bool = False) -> list[Op]:
    # local layers see only their window: swap in the windowed key and score features
    KVP, KVD, AP, APC, ADX = (KVPW, KVDW, APW, APCW, ADXW) if local else (_KVP, _KVD, _AP, _APC, _ADX)
    # decode score elements: one per cached key and query token (kvd + adx; several queries per
    # sequence in a speculative verify), the cache read once per sequence (kvd)
    AD = KVD + ADX
    h, t = model.hidden_size, par.tp
    hq, hkv, d = model.num_attention_heads, model.num_key_value_heads, model.head_dim
    hq_t = hq / t
    hkv_t = max(hkv / t, 1.0)  # KV heads are replicated when tp exceeds their number
    dq_t, dkv_t = hq_t * d, hkv_t * d
    M = Module.ATTENTION
    af = attention_flops(model, t)
    gate = 2 if model.attn_output_gate else 1  # Qwen3-Next: q_proj also emits the output gate
    if fused:
        # one column-parallel GEMM for q, k and v (vLLM QKVParallelLinear, SGLang the same,
        # TensorRT-LLM's fused qkv Linear), then RoPE in place on this device's q and k heads
        # (vLLM/SGLang rotary_embedding kernels; TensorRT-LLM applies it in the attention
        # preprocessing kernel that also writes the cache): read and write q and k once
        ops = [_gemm("qkv_proj", M, N, NG, h, gate * dq_t + 2 * dkv_t, ab, wb,
                     "fused QKV projection: BestServe Table 8/10 rows 1-3 as one GEMM")]
        if model.model_type != "opt":
            rq, rk = dq_t * model.partial_rotary_factor, dkv_t * model.partial_rotary_factor
            ops.append(Op("rope", M, N * (3.0 * (rq + rk)), N * (2 * ab * (dq_t + dkv_t)),
                          source="RoPE in place on this device's q and k heads (one read and write)"))
    else:
        ops = [
            _gemm("q_proj", M, N, NG, h, gate * dq_t, ab, wb, "BestServe Table 8/10 row 1"),
            _gemm("k_proj", M, N, NG, h, dkv_t, ab, wb, "BestServe Table 8/10 row 2"),
            _gemm("v_proj", M, N, NG, h, dkv_t, ab, wb, "BestServe Table 8/10 row 3"),
        ]
    if model.model_type != "opt" and not fused:  # OPT uses learned absolute positions, no RoPE
        # RoPE is not divided by t in Tables 10/11; Table 3(a) confirms it (the attention row
        # matches 2.122 ms only with the undivided term), so it is kept as printed.
        # partial rotary (GPT-J, GPT-NeoX, GLM, Qwen3-Next) rotates that share of each head
        dq, dkv = hq * d * model.partial_rotary_factor, hkv * d * model.partial_rotary_factor
        ops.append(Op("rope", M, N * (3.5 * (dq + dkv)),
                      N * (ab * (8.5 * dq + 8.5 * dkv + 2 * d)), source="BestServe Table 8/10 row 4"))
    if impl is AttentionImpl.EAGER:
        # prefill core, Table 8/10 rows 5-9 (ap = b*s^2, np = kvp = b*s)
        ops += [
            Op("prefill.qk", M, AP * af.prefill_qk, NP * (ab * dq_t) + KVP * (ab * dq_t) + AP * (ab * hq_t),
               attention=True, source="BestServe Table 8/10 row 5"),
            Op("prefill.div", M, AP * hq_t, AP * (2 * ab * hq_t), attention=True, source="BestServe Table 8/10 row 6"),
            Op("prefill.mask_add", M, AP * hq_t, AP * (2 * ab * hq_t + ab),
               attention=True, source="BestServe Table 8/10 row 7"),
            Op("prefill.softmax", M, AP * (3 * hq_t), AP * (2 * ab * hq_t),
               attention=True, source="BestServe Table 8/10 row 8"),
            Op("prefill.av", M, AP * af.prefill_pv, AP * (ab * hq_t) + NP * (ab * dq_t) + KVP * (ab * dq_t),
               attention=True, source="BestServe Table 8/10 row 9"),
        ]
        # decode core, Table 9/11 rows 5-11 (kvd = b*s, nd = b); eq. (12) kappa rates
        ops.append(Op("decode.kv_update", M, ZERO, KVD * (2 * kvb * dkv_t), Rate.KAPPA_UPDATE,
                      source="BestServe Table 9 row 5 (/t), cache values in the KV format"))
        if hkv < hq:  # Is_GQA of eq. (12)
            ops.append(Op("decode.repeat_kv", M, ZERO, KVD * (2 * ab * (dq_t + dkv_t)), Rate.KAPPA_REPEAT_KV,
                          source="BestServe Table 9 row ⋆ (/t)"))
        # the score-sized work and traffic is per score element (AD), K and V per cached key (KVD)
        ops += [
            Op("decode.qk", M, AD * af.decode_qk, ND * (ab * dq_t) + KVD * (ab * dq_t) + AD * (ab * hq_t),
               attention=True, source="BestServe Table 9/11 row 6"),
            Op("decode.div", M, AD * hq_t, AD * (2 * ab * hq_t), attention=True, source="BestServe Table 9/11 row 7"),
            Op("decode.mask_add", M, AD * hq_t, AD * (2 * ab * hq_t + ab),
               attention=True, source="BestServe Table 9/11 row 8"),
            Op("decode.upcast", M, ZERO, AD * (2 * ab * hq_t), Rate.KAPPA_UPCAST, source="BestServe Table 9/11 row 9"),
            Op("decode.softmax", M, AD * (3 * hq_t), AD * (2 * ab * hq_t),
               attention=True, source="BestServe Table 9/11 row 10"),
            Op("decode.av", M, AD * af.decode_pv, ND * (ab * dq_t) + KVD * (ab * dq_t) + AD * (ab * hq_t),
               attention=True, source="BestServe Table 9/11 row 11"),
        ]
    else:
        # Fused kernel: QK^T and PV are 2*d FLOP per score element each, ~5 FLOP of online
        # softmax per element (FlashAttention-2 §3.1); traffic is Q, K, V read once and O written.
        ops += [
            Op("kv_write", M, ZERO, N * (2 * kvb * dkv_t), source="KV cache append: 2*kv_dim values per token"),
            Op("prefill.attention", M, APC * (af.prefill + 5 * hq_t),
               NP * (2 * ab * dq_t) + KVP * (2 * kvb * dkv_t), attention=True, source="fused attention, causal"),
            Op("decode.attention", M, AD * (af.decode + 5 * hq_t),
               ND * (2 * ab * dq_t) + KVD * (2 * kvb * dkv_t), attention=True,
               source="fused attention over the KV cache: every query token scores every key it sees, "
                      "the cache read once per sequence"),
        ]
    if model.attn_output_gate:
        ops.append(Op("output_gate", M, N * (5 * dq_t), N * (3 * ab * dq_t),
                      source="sigmoid(gate) * attention output, elementwise"))
    ops.append(Op("o_proj", M, NG * (2 * dq_t * h), N * (ab * (dq_t + h)) + ONE * (wb * dq_t * h),
                  source="BestServe Table 8/10 row 10 (weight h^2/t)", rows=N, inner=dq_t))
    return ops


_KVP, _KVD, _AP, _APC, _ADX = KVP, KVD, AP, APC, ADX


def _linear_attention_ops(model: ModelSpec, par: ParallelConfig, ab: float, wb: float,
                          sb: float) -> list[Op]:
    """Gated DeltaNet layer per device (heads split over TP): ``sb`` bytes per state value."""
    h, t = model.hidden_size, par.tp
    nv_t = model.linear_num_value_heads / t
    dk, dv = model.linear_key_head_dim, model.linear_value_head_dim
    kd_t = model.linear_num_key_heads * dk / t
    vd_t = nv_t * dv
    conv_ch = 2 * kd_t + vd_t
    K = model.linear_conv_kernel_dim
    state = nv_t * dk * dv + conv_ch * max(K - 1, 0)  # per sequence, this device's heads
    M = Module.ATTENTION
    src = "Gated DeltaNet (arXiv:2412.06464)"
    return [
        _gemm("linear.in_proj_qkvz", M, N, NG, h, 2 * kd_t + 2 * vd_t, ab, wb, src + ": q, k, v, z projections"),
        _gemm("linear.in_proj_ba", M, N, NG, h, 2 * nv_t, ab, wb, src + ": beta and decay gates"),
        Op("linear.conv1d", M, N * (2 * K * conv_ch), N * (2 * ab * conv_ch),
           source=src + ": depthwise causal conv1d, 2*kernel FLOP per channel"),
        # recurrence: decay, k^T S, rank-1 update, q S: ~8 dk dv FLOP per head per token; prefill
        # runs it chunkwise (64 tokens) with an intra-chunk attention of 2*64*(dk + dv) per token
        Op("linear.delta_rule", M, N * (8 * nv_t * dk * dv) + NP * (2 * 64 * nv_t * (dk + dv)),
           N * (ab * (2 * kd_t + 2 * vd_t)) + (SP + ND) * (2 * sb * state), attention=True,
           source=src + " eq. 10; state read and written once per sequence per step"),
        Op("linear.gated_norm", M, N * (5 * vd_t), N * (3 * ab * vd_t), source=src + ": RMSNorm(o) * silu(z)"),
        _gemm("linear.out_proj", M, N, NG, vd_t, h, ab, wb, src + ": output projection"),
    ]


def _mla_attention_ops(model: ModelSpec, par: ParallelConfig, impl: AttentionImpl,
                       ab: float, wb: float, kvb: float, fused: bool = False) -> list[Op]:
    """Modeling notes A.5. Latent projections (no heads) are replicated on every TP rank.

    The prefill path's up-projections (explicit K and V) and the decode path's (absorbed) read
    their weights only in steps that run that path (``PON`` / ``DON``): a decode step does not
    stream the prefill path's weights, nor a prefill step the decode path's."""
    h, t = model.hidden_size, par.tp
    H = model.num_attention_heads
    Ht = H / t
    ql = model.q_lora_rank or h
    dkv, dC, dR, dv = model.kv_lora_rank, model.qk_nope_head_dim, model.qk_rope_head_dim, model.v_head_dim
    dqk = dC + dR
    M = Module.ATTENTION
    af = attention_flops(model, t)
    ops: list[Op] = []
    if fused:
        # the engines run the token's down-projections as one GEMM: the query's (when it has a
        # LoRA rank), the latent KV's and the shared RoPE key's (vLLM deepseek_v2.py
        # fused_qkv_a_proj, SGLang fused_qkv_a_proj_with_mqa, TensorRT-LLM's fused_a)
        ops.append(_gemm("mla.fused_qkv_a", M, N, NG, h, (ql if model.q_lora_rank else 0) + dkv + dR, ab, wb,
                         "notes A.5 steps 1, 3 and 4 (W^DQ, W^DKV, W^KR) as one GEMM"))
    elif model.q_lora_rank:
        ops.append(_gemm("mla.q_down", M, N, NG, h, ql, ab, wb, "notes A.5 prefill/decode step 1: 2*B*S*d*d_q^c"))
    ops.append(
        # prefill path (explicit up-projection)
        _gemm("mla.prefill.q_up", M, NP, NP, ql, Ht * dqk, ab, wb,
              "notes A.5 prefill step 2: 2*B*S*d_q^c*H*d_qk/TP", PON))
    if not fused:
        ops += [
            _gemm("mla.kv_down", M, N, NG, h, dkv, ab, wb, "notes A.5 prefill step 3: 2*B*S*d*d_kv^c"),
            _gemm("mla.k_rope", M, N, NG, h, dR, ab, wb,
                  "notes A.5 prefill step 4 (W^KR) / decode step 3: 2*B*S*d*d_R"),
        ]
    ops += [
        _gemm("mla.prefill.k_up", M, NP, NP, dkv, Ht * dC, ab, wb,
              "notes A.5 prefill step 4: 2*B*S*d_kv^c*H*d_C/TP", PON),
        _gemm("mla.prefill.v_up", M, NP, NP, dkv, Ht * dv, ab, wb,
              "notes A.5 prefill step 5: 2*B*S*d_kv^c*H*d_v/TP", PON),
        Op("mla.kv_write", M, ZERO, N * (kvb * (dkv + dR)), source="latent cache append: (d_kv^c + d_R) per token"),
    ]
    score = AP if impl is AttentionImpl.EAGER else APC
    ops.append(Op(
        "mla.prefill.attention", M, score * af.prefill,
        NP * (ab * Ht * (dqk + dv)) + KVP * (ab * Ht * (dqk + dv)),
        attention=True, source="notes A.5 prefill step 6: (H/TP)*2*B*S^2*(d_qk + d_v)",
    ))
    # decode path (absorbed)
    ops += [
        _gemm("mla.decode.q_up", M, ND, ND, ql, Ht * (dC + dR), ab, wb,
              "notes A.5 decode step 2: 2*B*d_q^c*H*(d_C + d_R)/TP", DON),
        _gemm("mla.decode.absorb_uk", M, ND, ND, dC, Ht * dkv, ab, wb,
              "notes A.5 decode step 2 AbsorbCost: 2*B*H*d_C*d_kv^c/TP", DON),
        # every query token (q_len = K + 1 of a speculative verify) scores every latent key it
        # sees, the latent cache read once per sequence: FlashMLA flash_mla_with_kvcache with s_q
        # query tokens per sequence, FLOPs 2*h_q*s_q*s_k*(d_k + d_v), bytes ~ s_k*d_k (FlashMLA
        # docs/20250422-new-kernel-deep-dive.md, "A Theoretical Analysis of the MLA Algorithm")
        Op("mla.decode.attention", M, (KVD + ADX) * af.decode,
           ND * (ab * Ht * (2 * dkv + dR)) + KVD * (kvb * (dkv + dR)),
           attention=True, source="notes A.5 decode step 4: (H/TP)*2*B*S*(2*d_kv^c + d_R), MQA over the latent cache; "
                                  "per query token and key (FlashMLA s_q), the cache read once"),
        _gemm("mla.decode.v_up", M, ND, ND, dkv, Ht * dv, ab, wb, "notes A.5 decode step 5: 2*B*d_kv^c*H*d_v/TP", DON),
        _gemm("o_proj", M, N, NG, Ht * dv, h, ab, wb, "notes A.5 prefill step 7 / decode step 6: 2*B*S*H*d_v*d/TP"),
    ]
    return ops


def _gated_mlp_ops(prefix: str, module: Module, tokens: Lin, gemm_tokens: Lin, h: int, ff_t: float,
                   ab: float, wb: float, residual_t: float, fused: bool = False) -> list[Op]:
    """BestServe Tables 1/2 (and 12/13 with TP): gate, SiLU, up, mul, down, add.

    ``fused``: the engines' form: one GEMM for gate and up (vLLM MergedColumnParallelLinear,
    SGLang the same, TensorRT-LLM's fused gate_up Linear), one ``silu_and_mul`` kernel that reads
    both halves and writes the product, and down; the residual add runs inside the next fused
    norm (:func:`_fused_norm_ops`)."""
    if fused:
        return [
            _gemm(f"{prefix}gate_up_proj", module, tokens, gemm_tokens, h, 2 * ff_t, ab, wb,
                  "fused gate and up projections: BestServe Table 1/12 rows 1 and 3 as one GEMM"),
            Op(f"{prefix}silu_and_mul", module, tokens * (6 * ff_t), tokens * (3 * ab * ff_t),
               source="silu(gate) * up in one kernel: read 2*ff, write ff"),
            _gemm(f"{prefix}down_proj", module, tokens, gemm_tokens, ff_t, h, ab, wb, "BestServe Table 1/12 row 5"),
        ]
    return [
        _gemm(f"{prefix}gate_proj", module, tokens, gemm_tokens, h, ff_t, ab, wb, "BestServe Table 1/12 row 1"),
        Op(f"{prefix}silu", module, tokens * (5 * ff_t), tokens * (2 * ab * ff_t), source="BestServe Table 1/12 row 2"),
        _gemm(f"{prefix}up_proj", module, tokens, gemm_tokens, h, ff_t, ab, wb, "BestServe Table 1/12 row 3"),
        Op(f"{prefix}mul", module, tokens * ff_t, tokens * (3 * ab * ff_t),
           source="BestServe Table 1/12 row 4 (decode 6*b*h0, not 6*b*s*h0)"),
        _gemm(f"{prefix}down_proj", module, tokens, gemm_tokens, ff_t, h, ab, wb, "BestServe Table 1/12 row 5"),
        Op(f"{prefix}add", module, tokens * (h / residual_t), tokens * (2 * ab * h / residual_t),
           source="BestServe Table 1/12 row 6 (traffic 4*b*s*h, not 4*b*s*h0)"),
    ]


def _mlp_ops(model: ModelSpec, par: ParallelConfig, ab: float, wb: float, fused: bool = False) -> list[Op]:
    h, t = model.hidden_size, par.tp
    ff_t = model.intermediate_size / t
    if model.mlp is MLPKind.GATED:
        return _gated_mlp_ops("", Module.MLP, N, NG, h, ff_t, ab, wb, t, fused)
    M = Module.MLP
    ops = [  # OPT: fc1, ReLU, fc2, residual add (same accounting as Table 1)
        _gemm("fc1", M, N, NG, h, ff_t, ab, wb, "two-matrix FFN, notes A.6 step 1"),
        Op("relu", M, N * ff_t, N * (2 * ab * ff_t), source="notes A.6 step 2"),
        _gemm("fc2", M, N, NG, ff_t, h, ab, wb, "notes A.6 step 3"),
    ]
    if not fused:  # fused: the residual add runs inside the next norm
        ops.append(Op("add", M, N * (h / t), N * (2 * ab * h / t), source="BestServe Table 1/12 row 6"))
    return ops


def _moe_ops(model: ModelSpec, par: ParallelConfig, ab: float, wb: float, imbalance: float,
             swb: float | None = None, fused: bool = False) -> list[Op]:
    """Routed experts read ``wb`` bytes per weight; router and shared experts ``swb``."""
    swb = wb if swb is None else swb
    h, E, k = model.hidden_size, model.num_experts, model.num_experts_per_tok
    mff = model.moe_intermediate_size
    etp = par.expert_tp
    mff_e = mff / etp
    M = Module.MOE
    # tokens one device pushes through its experts: all routed copies spread over ep devices,
    # times the busiest-device factor (an expert load-imbalance assumption, profile)
    t_dev = NALL * (k * imbalance / par.ep)
    ops = [
        _gemm("router", M, N, N, h, E, ab, swb, "notes B.2: softmax(X W_gating), W_gating d_model x E"),
        Op("topk", M, N * (3.0 * E), N * (2 * ab * E), source="softmax and top-k over E logits"),
        Op("experts.gate_up", M, t_dev * (2 * 2 * h * mff_e),
           t_dev * (ab * (h + 2 * mff_e)) + EACT * (wb * 2 * h * mff_e),
           source="gated expert MLP (BestServe Table 1 rows 1, 3) over routed tokens"),
        Op("experts.silu_mul", M, t_dev * (6 * mff_e), t_dev * (5 * ab * mff_e),
           source="BestServe Table 1 rows 2, 4"),
        Op("experts.down", M, t_dev * (2 * mff_e * h),
           t_dev * (ab * (mff_e + h)) + EACT * (wb * mff_e * h),
           source="BestServe Table 1 row 5"),
    ]
    if model.num_shared_experts:
        sff_t = model.shared_intermediate / par.tp
        ops += _gated_mlp_ops("shared.", M, N, NG, h, sff_t, ab, swb, par.tp, fused)
    return ops


def _comms(model: ModelSpec, par: ParallelConfig, module: Module, ab: float, imbalance: float = 1.0,
           comm: CommOptions | None = None) -> list[Comm]:
    """Collectives after a module (notes A.7): TP all-reduce of ``n*h``; EP two all-to-alls of
    ``n*k*h`` in all; TP-split experts all-reduce over the whole stage.

    The all-to-alls span the whole MoE group (the ``tp * dp`` devices of a stage): tokens start on
    every rank, and when ``ep`` is smaller than the group each expert is split over ``tp*dp/ep``
    devices, all of which need the token. Each all-to-all is timed by its busiest device:

    * dispatch: the busiest attention rank sends each of its ``n`` tokens to the ``k`` experts'
      devices, ``n * k * expert_tp / tp`` copies per device (DeepSeek's "dispatch send load");
    * combine: the busiest expert device sends back its ``nall * k * imbalance / ep`` outputs.

    With requests balanced over the ranks and ``imbalance = 1`` both are ``nall * k / ep`` copies
    per device. Payload formats come from ``comm`` (FP8 dispatch under DeepEP). Shared experts are
    TP-split like a dense MLP, so their partial sums are all-reduced over ``tp``.
    """
    comm = comm or CommOptions()
    h = model.hidden_size
    out: list[Comm] = []
    if module in (Module.ATTENTION, Module.MLP) and par.tp > 1:
        out.append(Comm(f"{module.value}.all_reduce", module, Collective.ALL_REDUCE, N * (ab * h), par.tp, N * h))
    if module is Module.MOE:
        g = par.stage_devices
        if par.ep > 1:
            k = model.num_experts_per_tok
            send = N * (k * par.expert_tp / par.tp * h)
            back = NALL * (k * imbalance * h / par.ep)
            db = comm.payload_bytes(comm.dispatch_dtype, ab)
            cb = comm.payload_bytes(comm.combine_dtype, ab)
            copies = k * par.expert_tp / par.tp
            out.append(Comm("moe.dispatch_all_to_all", module, Collective.ALL_TO_ALL, send * db, g, send,
                            copies=copies, dedup_nodes=comm.dedup_nodes, efficiency=comm.all_to_all_efficiency))
            out.append(Comm("moe.combine_all_to_all", module, Collective.ALL_TO_ALL, back * cb, g, back,
                            copies=copies, dedup_nodes=comm.dedup_nodes, efficiency=comm.all_to_all_efficiency))
            if model.num_shared_experts and par.tp > 1:
                out.append(Comm("moe.shared_all_reduce", module, Collective.ALL_REDUCE, N * (ab * h), par.tp, N * h))
        elif g > 1:
            out.append(Comm("moe.all_reduce", module, Collective.ALL_REDUCE, NALL * (ab * h), g, NALL * h))
    return out


def build_layer_groups(
    model: ModelSpec,
    parallel: ParallelConfig,
    *,
    dtype: DType,
    kv_dtype: DType,
    attention_impl: AttentionImpl,
    include_lm_head: bool,
    expert_imbalance: float = 1.0,
    comm: CommOptions | None = None,
    fused_operators: bool = False,
) -> tuple[LayerGroup, ...]:
    """Operator lists of the model's distinct layer kinds, per device of one pipeline stage.

    Returns one group per (token mixer, dense or MoE MLP) kind present, named ``dense``/``moe``
    for full attention and ``<mixer>-dense``/``<mixer>-moe`` otherwise (``sliding-moe``,
    ``linear-moe``, ...), and, when ``include_lm_head``, a one-off group with the final norm and
    the logits projection. Layer counts are for the whole model; the estimator divides them over
    pipeline stages. ``comm`` sets the MoE payload formats and routing (:class:`CommOptions`).

    ``fused_operators`` gives the operator list the serving engines run (vLLM, SGLang and
    TensorRT-LLM): fused residual add + norm, one QKV GEMM with RoPE in place, one gate-up GEMM with
    ``silu_and_mul``; ``False`` keeps BestServe's eager list (Tables 1-13), as its reproductions need.
    """
    layer_dt, expert_dt, embed_dt = model.weight_formats(dtype)
    wb, ewb, hwb = layer_dt.bytes, expert_dt.bytes, embed_dt.bytes
    ab = 4.0 if dtype is DType.FP32 else 2.0  # activations in fp16/bf16 unless the model runs in fp32
    kvb = kv_dtype.bytes
    sb = 2.0  # linear-attention state in 16 bits (vLLM mamba_cache_dtype "auto" = model dtype)
    h = model.hidden_size
    fused = fused_operators
    norm_ops = _fused_norm_ops if fused else _norm_ops
    norm = ModuleBlock(Module.NORM, tuple(norm_ops("input_norm", N, h, model.norm, ab, wb)))
    norm2 = ModuleBlock(Module.NORM, tuple(norm_ops("post_attention_norm", N, h, model.norm, ab, wb)))
    extra_norm = ModuleBlock(Module.NORM, tuple(norm_ops("sandwich_norm", N, h, model.norm, ab, wb)))
    mixers: dict[LayerType, ModuleBlock] = {}
    attn_comms = tuple(_comms(model, parallel, Module.ATTENTION, ab))
    for kind in dict.fromkeys(model.layer_kinds):
        if kind is LayerType.LINEAR:
            ops = _linear_attention_ops(model, parallel, ab, wb, sb)
        elif model.attention is AttentionKind.MLA:
            ops = _mla_attention_ops(model, parallel, attention_impl, ab, wb, kvb, fused)
        else:
            ops = _gqa_attention_ops(model, parallel, attention_impl, ab, wb, kvb, local=kind.is_local, fused=fused)
        mixers[kind] = ModuleBlock(Module.ATTENTION, tuple(ops), attn_comms)
    mlp = ModuleBlock(Module.MLP, tuple(_mlp_ops(model, parallel, ab, wb, fused)),
                      tuple(_comms(model, parallel, Module.MLP, ab)))
    moe = (ModuleBlock(Module.MOE, tuple(_moe_ops(model, parallel, ab, ewb, expert_imbalance, wb, fused)),
                       tuple(_comms(model, parallel, Module.MOE, ab, expert_imbalance, comm)))
           if model.is_moe else None)
    groups: list[LayerGroup] = []
    # one group per kind, dense before MoE as before for the single-mixer models
    order = sorted(model.layer_signature().items(), key=lambda kv: kv[0][1])
    for (kind, is_moe), count in order:
        ffn = moe if is_moe else mlp
        assert ffn is not None
        base = "moe" if is_moe else "dense"
        name = base if kind is LayerType.FULL else f"{kind.value.split('_')[0]}-{base}"
        # pre-norm block: norm, mixer, norm, MLP; a parallel block (GPT-J, Falcon-7B) shares one
        # norm; Gemma adds post-attention and post-feedforward norms
        blocks: list[ModuleBlock] = [norm, mixers[kind]]
        if model.norms_per_layer >= 4:
            blocks.append(extra_norm)
        if model.norms_per_layer >= 2:
            blocks.append(norm2)
        blocks.append(ffn)
        if model.norms_per_layer >= 4:
            blocks.append(extra_norm)
        groups.append(LayerGroup(name, count, tuple(blocks)))
    if include_lm_head:
        V = model.vocab_size
        head_ops = norm_ops("final_norm", NOUT, h, model.norm, ab, wb, Module.LM_HEAD) + [
            _gemm("lm_head", Module.LM_HEAD, NOUT, NOUT, h, V / parallel.tp, ab, hwb,
                  "logits of the last token of each sequence, vocabulary split over TP"),
        ]
        groups.append(LayerGroup("lm_head", 1, (ModuleBlock(Module.LM_HEAD, tuple(head_ops)),)))
    return tuple(groups)
