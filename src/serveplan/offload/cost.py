"""FlexGen's cost model (Appendix A.3), written from a :class:`ModelSpec`.

Every term is affine in the nine placement fractions ``(wg, wc, wd, cg, cc, cd, hg, hc, hd)`` once
the GPU batch size, the number of GPU batches, compression and CPU attention are fixed, so the same
:class:`Affine` objects serve evaluation (plug a policy in) and the linear program (read the
coefficients). Symbols follow FlexGen Table 6/7: ``l`` layers, ``s`` prompt length, ``n`` output
length, ``bls`` block size, ``gbs`` GPU batch size, ``h1`` hidden size, ``nh`` heads.

Where FlexGen hard-codes OPT, the spec supplies the number:

=============================  =================================  =====================================
FlexGen (OPT, FP16 bytes)      here                               GQA / MLA / MoE
=============================  =================================  =====================================
``8*h1^2 + 4*h1*h2`` (layer)   ``2 * (params - embeddings) / l``  attention_params + MLP (all experts)
``bls*(8*h1^2+4*h1*h2)`` FLOP  ``2 * active params per layer``    top-k + shared experts only
``4*h1`` per token (KV)        ``2 * kv_elements_per_token``      2*kv_heads*head_dim; MLA latent+rope
``4*s*h1`` attn FLOP per key   ``ops.graph.attention_flops``      QK^T + PV; MLA decode: absorbed latent
``2*h1`` per token (act.)      ``2 * hidden_size``                same
=============================  =================================  =====================================

Sizes are FP16 (2 bytes per value, FlexGen's convention, reference Section 2) or, under compression,
FlexGen's 4-bit group-wise format: 64 values share an FP16 minimum and scale, so one value costs
``0.5 + 4/64 = 0.5625`` bytes, 0.28125 of FP16 (Section 5; the storage of min/scale is not in the
paper, we take FlexGen's implementation: FP16 min and scale per group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from serveplan.offload.policy import PLACEMENT_FIELDS, Overlap
from serveplan.ops.graph import attention_flops
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.host import HostSpec, RuntimeSpeeds
from serveplan.specs.model import AttentionKind, MLPKind, ModelSpec
from serveplan.specs.profile import Phase

FP16_BYTES = 2.0  # FlexGen runs in FP16 (reference Section 2: factor 2 per value)
COMPRESSION_BITS = 4  # FlexGen Section 5: weights and KV cache to 4 bits
COMPRESSION_GROUP = 64  # FlexGen Section 5: group size 64
#: bytes per value in 4-bit group-wise format: 4 bits + FP16 (min, scale) per group of 64
COMPRESSED_BYTES_PER_VALUE = COMPRESSION_BITS / 8 + 2 * FP16_BYTES / COMPRESSION_GROUP
COMPRESSION_RATIO = COMPRESSED_BYTES_PER_VALUE / FP16_BYTES  # 0.28125

_IDX = {name: i for i, name in enumerate(PLACEMENT_FIELDS)}
TERMS = ("ctog", "gtoc", "dtoc", "ctod", "comp")


@dataclass(frozen=True, slots=True)
class Affine:
    """``coef . x + const`` over the placement fractions ``x`` (seconds or bytes)."""

    coef: np.ndarray
    const: float = 0.0

    def at(self, x: np.ndarray) -> float:
        return float(self.coef @ x + self.const)

    def __add__(self, other: Affine) -> Affine:
        return Affine(self.coef + other.coef, self.const + other.const)


def lin(const: float = 0.0, **coefs: float) -> Affine:
    """Build an :class:`Affine` from named coefficients, e.g. ``lin(wc=3.0, wd=3.0)``."""
    c = np.zeros(len(PLACEMENT_FIELDS))
    for k, v in coefs.items():
        c[_IDX[k]] += v
    return Affine(c, float(const))


def compressed_bytes(num_values: float) -> float:
    """Bytes of ``num_values`` FP16 values in FlexGen's 4-bit group-wise format (group 64)."""
    return num_values * COMPRESSED_BYTES_PER_VALUE


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerSizes:
    """Per-layer sizes of a model as FlexGen's runtime stores them (FP16 or 4-bit compressed).

    Weights are the average transformer layer (``(params - embedding_params) / l``); MoE layers hold
    all their experts (a layer is loaded whole, the routing of the next tokens is not known). KV
    bytes are per token per layer; FLOPs per token per layer count only active parameters.
    """

    num_layers: int
    hidden_size: int
    num_heads: int
    compress: bool
    weight_bytes: float  # stored bytes of one average layer
    weight_fp16_bytes: float  # FP16 bytes of one average layer
    routed_expert_fp16_bytes: float  # FP16 bytes of one layer's routed experts (average layer)
    expert_pick_fraction: float  # num_experts_per_tok / num_experts (0 for dense)
    total_weight_bytes: float  # stored bytes of every parameter as the runtime holds them (below)
    stream_unit_bytes: float  # stored bytes the GPU buffers at a time while streaming a layer
    stream_unit_fp16_bytes: float
    kv_bytes_per_token: float  # stored, one layer
    kv_fp16_bytes_per_token: float
    act_bytes_per_token: float  # 2 * h1 (FP16 hidden state)
    vocab_size: int  # width of the output embedding's logits
    linear_flops_per_token: float  # 2 * active params of one average layer
    attn_flops_per_key: float  # prefill: QK^T and PV FLOPs per (query, key) pair, one layer
    attn_decode_flops_per_key: float  # decode (MLA: absorbed form over the latent)
    q_width: int
    k_width: int  # per-token K (prefill working memory)
    v_width: int
    cache_k_width: int  # cached values read by QK^T per token (decode working memory)
    cache_v_width: int
    mlp_out_width: int  # outputs of the first MLP matmul(s) per token
    mlp_in_width: int  # input width of the last MLP matmul
    #: element counts of a layer's weight matrices, one tuple per sub-layer in the order FlexGen's
    #: runtime places them (attention q, k, v, out; MLP in, [gate,] out); empty: placed as a
    #: continuous share (MoE and MLA layers, whose tensor lists FlexGen's runtime does not cover)
    weight_tensor_groups: tuple[tuple[float, ...], ...] = ()

    def decode_weight_read_bytes(self, gpu_batch_size: int) -> float:
        """FP16 weight bytes one decode GEMM pass reads for ``gpu_batch_size`` tokens: every dense
        weight, and the expected share of routed experts hit, ``1 - (1 - k/E)^gbs`` (uniform
        routing, assumed)."""
        if self.expert_pick_fraction <= 0:
            return self.weight_fp16_bytes
        hit = 1.0 - (1.0 - self.expert_pick_fraction) ** gpu_batch_size
        return self.weight_fp16_bytes - self.routed_expert_fp16_bytes * (1.0 - hit)


def layer_sizes(model: ModelSpec, *, compress: bool = False) -> LayerSizes:
    """Per-layer weight, KV and FLOP sizes of ``model`` (FP16, or 4-bit if ``compress``)."""
    L = model.num_hidden_layers
    h = model.hidden_size
    store = COMPRESSED_BYTES_PER_VALUE if compress else FP16_BYTES
    layer_params = (model.num_parameters() - model.embedding_params()) / L
    active_params = (model.num_active_parameters() - model.embedding_params()) / L
    routed = model.num_moe_layers * model.num_experts * model.expert_params() / L
    kv_el = model.kv_elements_per_token_per_layer()
    # Unit the GPU buffers while streaming weights: a whole layer for dense models (A.3's
    # 2*(1-wg)*w); for MoE the non-expert part plus one expert, streamed expert by expert (assumed:
    # a DeepSeek-V3 layer alone is 22.6 GB in FP16, more than many GPUs hold).
    unit = layer_params
    if model.is_moe:
        unit = layer_params - routed + model.expert_params()
    H = model.num_attention_heads
    if model.attention is AttentionKind.MLA:
        k_w, v_w = model.q_dim, model.o_dim  # prefill materialises per-head K and V
        ck, cv = kv_el, kv_el
    else:
        k_w = v_w = model.kv_dim
        ck = cv = kv_el // 2
    # attention FLOPs per (query, key) in prefill and per cached key in decode, as the operator
    # lists count them (QK^T and PV; MLA decode absorbed over the latent): OPT's 4*h1 is FlexGen
    # A.3's att^p and att^g
    attn = attention_flops(model)
    gated = model.mlp is MLPKind.GATED
    ff = model.intermediate_size
    if model.is_moe:
        ff_act = (model.num_experts_per_tok + model.num_shared_experts) * model.moe_intermediate_size
        ff = max(ff if model.num_dense_layers else 0, ff_act)
    return LayerSizes(
        num_layers=L,
        hidden_size=h,
        num_heads=H,
        compress=compress,
        weight_bytes=layer_params * store,
        weight_fp16_bytes=layer_params * FP16_BYTES,
        routed_expert_fp16_bytes=routed * FP16_BYTES,
        expert_pick_fraction=(model.num_experts_per_tok / model.num_experts) if model.is_moe else 0.0,
        # every parameter, embeddings included; a tied token matrix twice: FlexGen's runtime loads
        # ``decoder.embed_tokens.weight`` into its InputEmbed and again into its OutputEmbed layer
        # (``init_weight`` of both in flexgen/flex_opt.py), 0.41 GB for OPT-6.7B in FP16
        total_weight_bytes=(model.num_parameters()
                            + (model.vocab_size * h if model.tie_word_embeddings else 0)) * store,
        stream_unit_bytes=unit * store,
        stream_unit_fp16_bytes=unit * FP16_BYTES,
        kv_bytes_per_token=kv_el * store,
        kv_fp16_bytes_per_token=kv_el * FP16_BYTES,
        act_bytes_per_token=h * FP16_BYTES,
        vocab_size=model.vocab_size,
        linear_flops_per_token=2.0 * active_params,
        attn_flops_per_key=attn.prefill,
        attn_decode_flops_per_key=attn.decode,
        q_width=model.q_dim,
        k_width=k_w,
        v_width=v_w,
        cache_k_width=ck,
        cache_v_width=cv,
        mlp_out_width=(2 * ff) if gated else ff,
        mlp_in_width=ff,
        weight_tensor_groups=_weight_tensor_groups(model),
    )


def _weight_tensor_groups(model: ModelSpec) -> tuple[tuple[float, ...], ...]:
    """Weight matrices of one layer per sub-layer, in FlexGen's placement order (``flex_opt.py``:
    ``SelfAttention.init_weight`` lists q, k, v, out; ``MLP.init_weight`` fc1, fc2; biases and layer
    norms are negligible and left out). Gated MLPs list three matrices of equal size."""
    if model.is_moe or model.attention is AttentionKind.MLA:
        return ()
    h, ff = model.hidden_size, model.intermediate_size
    attn = (float(h * model.q_dim), float(h * model.kv_dim), float(h * model.kv_dim), float(model.o_dim * h))
    mlp = (float(h * ff),) * (3 if model.mlp is MLPKind.GATED else 2)
    return (attn, mlp)


@dataclass(frozen=True, slots=True)
class TierMemory:
    """Peak bytes on one tier in one phase: ``base + max(work)`` (each an :class:`Affine`)."""

    base: Affine
    work: tuple[Affine, ...]

    def at(self, x: np.ndarray) -> float:
        return self.base.at(x) + max(w.at(x) for w in self.work)


@dataclass(frozen=True, slots=True, kw_only=True)
class CostTerms:
    """All terms of FlexGen Appendix A.3 for one batch shape, as affine functions of placement.

    ``prefill`` and ``decode`` map ``ctog, gtoc, dtoc, ctod, comp`` to seconds per layer (decode
    averaged over the generated tokens). ``memory`` maps ``gpu_prefill, gpu_decode, cpu_prefill,
    cpu_decode, disk`` to peak bytes; ``capacity`` gives the bytes available per tier.
    """

    num_layers: int
    input_len: int
    output_len: int
    gpu_batch_size: int
    num_gpu_batches: int
    compress: bool
    cpu_attention: bool
    overlap: Overlap
    prefill: dict[str, Affine]
    decode: dict[str, Affine]
    memory: dict[str, TierMemory]
    capacity: dict[str, float]
    sizes: LayerSizes
    parts: dict[str, Affine] = field(default_factory=dict)  # named pieces for the breakdown

    @property
    def block_size(self) -> int:
        return self.gpu_batch_size * self.num_gpu_batches

    def stage_groups(self, phase: str) -> list[list[str]]:
        """Terms whose sums are combined with max() in ``phase`` (see :class:`Overlap`)."""
        if self.overlap is Overlap.PERFECT:
            return [[t] for t in TERMS]
        if phase == Phase.PREFILL:
            return [["ctog", "dtoc"], ["gtoc", "ctod"], ["comp"]]
        return [["ctog", "gtoc"], ["ctog", "dtoc"], ["ctog", "ctod"], ["ctog", "comp"]]

    def stage_affines(self, phase: str) -> list[Affine]:
        terms = self.prefill if phase == Phase.PREFILL else self.decode
        out = []
        for group in self.stage_groups(phase):
            a = terms[group[0]]
            for t in group[1:]:
                a = a + terms[t]
            out.append(a)
        return out

    def layer_time(self, phase: str, x: np.ndarray) -> float:
        return max(a.at(x) for a in self.stage_affines(phase))

    def block_latency(self, x: np.ndarray) -> tuple[float, float]:
        """``(prefill_s, decode_s)`` of one block: ``Tpre*l`` and ``Tgen*(n-1)*l`` (A.3)."""
        L, n = self.num_layers, self.output_len
        return self.layer_time("prefill", x) * L, self.layer_time("decode", x) * (n - 1) * L


def cost_terms(
    model: ModelSpec,
    gpu: DeviceSpec,
    host: HostSpec,
    *,
    input_len: int,
    output_len: int,
    gpu_batch_size: int,
    num_gpu_batches: int,
    compress: bool,
    cpu_attention: bool,
    overlap: Overlap = Overlap.SERIAL_LOAD,
    sizes: LayerSizes | None = None,
) -> CostTerms:
    """The A.3 cost model of one batch shape, generalized from OPT to ``model``.

    Returns affine terms in the placement fractions; see the module docstring for the size
    substitutions and ``docs/offload.md`` for every deviation from the printed formulas.
    """
    z = sizes or layer_sizes(model, compress=compress)
    rt: RuntimeSpeeds = host.runtime_for(gpu)
    s, n, L = input_len, output_len, z.num_layers  # L: layers (FlexGen's l)
    gbs, ngb = gpu_batch_size, num_gpu_batches
    bls = gbs * ngb
    h1, nh = z.hidden_size, z.num_heads
    W, Wf = z.weight_bytes, z.weight_fp16_bytes
    kv, kvf, act = z.kv_bytes_per_token, z.kv_fp16_bytes_per_token, z.act_bytes_per_token
    ctx = s + n / 2  # average decode context, A.3 "s + n/2"
    dec_bw, kv_dec_bw = rt.decompress_bandwidth, rt.kv_decompress_bandwidth
    cpu_flops = host.cpu_attention_flops

    # ---------------- prefill, per layer (A.3 ctog^p ... comp^p)
    act_p = act * s * bls  # 2*s*h1*bls
    kv_p = kv * (s + 1) * bls  # 4*(s+1)*h1*bls (A.3 writes s+1 tokens' KV)
    prefill = {
        "ctog": lin(wc=W / host.ctog_bandwidth, wd=W / host.ctog_bandwidth,
                    hc=act_p / host.ctog_bandwidth, hd=act_p / host.ctog_bandwidth),
        "gtoc": lin(cc=kv_p / host.gtoc_cache_bandwidth, cd=kv_p / host.gtoc_cache_bandwidth,
                    hc=act_p / host.gtoc_activation_bandwidth, hd=act_p / host.gtoc_activation_bandwidth),
        "dtoc": lin(wd=W / host.disk_read_bandwidth, hd=act_p / host.disk_read_bandwidth),
        "ctod": lin(cd=kv_p / host.disk_write_bandwidth, hd=act_p / host.disk_write_bandwidth),
    }
    gemm_p = bls * s * z.linear_flops_per_token / rt.mm_prefill_flops  # bls*(8 s h1^2 + 4 s h1 h2)/mm
    attn_p = bls * s * s * z.attn_flops_per_key / rt.bmm_prefill_flops  # 4*bls*s^2*h1/bmm
    # compression (not in A.3): decompress the layer's weights once per block, compress new KV
    codec_p = Wf / dec_bw + kvf * (s + 1) * bls / kv_dec_bw if compress else 0.0
    prefill["comp"] = lin(gemm_p + attn_p + codec_p)

    # ---------------- decode, per layer, averaged over the n-1 steps (A.3 ctog^g ... comp^g)
    act_g = act * bls  # 2*h1*bls
    kv_avg = kv * ctx * bls  # 4*bls*(s+n/2)*h1
    kv_new = kv * bls  # 4*bls*h1: the new token's KV
    attn_g = bls * ctx * z.attn_decode_flops_per_key  # 4*bls*(s+n/2)*h1
    ctog_g = lin(wc=W / host.ctog_bandwidth, wd=W / host.ctog_bandwidth,
                 hc=act_g / host.ctog_bandwidth, hd=act_g / host.ctog_bandwidth)
    if not cpu_attention:
        # attention on the GPU needs the off-GPU cache there (A.3 assumes CPU delegation)
        ctog_g = ctog_g + lin(cc=kv_avg / host.ctog_cache_bandwidth, cd=kv_avg / host.ctog_cache_bandwidth)
    decode = {
        "ctog": ctog_g,
        # A.3 moves only activations back; the new token's KV (store_cache of Algorithm 1) is added
        "gtoc": lin(hc=act_g / host.gtoc_activation_bandwidth, hd=act_g / host.gtoc_activation_bandwidth,
                    cc=kv_new / host.gtoc_cache_bandwidth, cd=kv_new / host.gtoc_cache_bandwidth),
        "dtoc": lin(cd=kv_avg / host.disk_read_bandwidth, wd=W / host.disk_read_bandwidth,
                    hd=act_g / host.disk_read_bandwidth),
        "ctod": lin(cd=kv_new / host.disk_write_bandwidth, hd=act_g / host.disk_write_bandwidth),
    }
    # linear layers: A.3 bls*(8h1^2+4h1h2)/mm_flops_g, bounded below by streaming the weights from
    # GPU memory once per GPU batch (roofline; not in A.3, which has no memory-bandwidth term)
    gemm_g = max(
        bls * z.linear_flops_per_token / rt.mm_decode_flops,
        ngb * z.decode_weight_read_bytes(gbs) / (gpu.memory_bandwidth * rt.memory_efficiency),
    )
    # decompress the layer's weights once per block and the cached KV it attends to, compress the
    # new token's KV (not in A.3; FlexGen stores compressed, computes in FP16, Section 5)
    codec_g = Wf / dec_bw + kvf * (ctx + 1) * bls / kv_dec_bw if compress else 0.0
    if cpu_attention:
        # A.3: gpu_comp^g (cg share on GPU) + cpu_comp^g ((cc+cd) share on CPU), summed as printed
        comp_g = lin(gemm_g + codec_g, cg=attn_g / rt.bmm_decode_flops,
                     cc=attn_g / cpu_flops, cd=attn_g / cpu_flops)
    else:
        comp_g = lin(gemm_g + codec_g + attn_g / rt.bmm_decode_flops)
    decode["comp"] = comp_g

    # ---------------- peak memory (A.3 "peak memory constraints"), bytes
    Wt = z.total_weight_bytes  # A.3 uses l*(8h1^2+4h1h2); embeddings are added here
    kv_all = kv * (s + n) * bls * L  # 4*(s+n)*h1*bls*l
    home_act_p, home_act_g = act * s * bls, act * bls
    qw, kw_, vw, ow = z.q_width, z.k_width, z.v_width, z.q_width
    mo, mi = z.mlp_out_width, z.mlp_in_width
    B = FP16_BYTES
    V = z.vocab_size
    # GPU working memory of one GPU batch (A.3 qkv, att1, att2, embed, mlp1, mlp2; mask omitted)
    # att1/att2 carry A.3's factor cg (printed for prefill too) when CPU attention is on: only the
    # GPU-resident share of the cache has its attention buffers on the GPU; without CPU attention
    # all of it does (factor 1). See docs/offload.md.
    def att_share(a: float) -> Affine:
        return lin(cg=a) if cpu_attention else lin(a)

    work_p = [
        lin(gbs * B * s * (h1 + qw + 2 * kw_)),  # qkv^p = gbs*8*s*h1 for OPT
        att_share(gbs * B * (s * qw + s * kw_ + nh * s * s)),  # att1^p = cg*gbs*(4*s*h1 + 2*nh*s^2)
        att_share(gbs * B * (nh * s * s + s * vw + s * ow)),  # att2^p
        lin(gbs * B * 2 * s * h1),  # embed^p = gbs*4*s*h1
        # output embedding (not in A.3, which counts embed^p as h1 wide): FlexGen's runtime computes
        # the logits of every prompt position, ``F.linear(hidden, w_token)`` before keeping the last
        # (``opt_output_embed`` in flexgen/pytorch_backend.py): normalized hidden + logits
        lin(gbs * B * s * (h1 + V)),
        lin(gbs * B * s * (h1 + mo)),  # mlp1^p = 2*gbs*s*(h1+h2)
        lin(gbs * B * s * (mi + h1)),  # mlp2^p
    ]
    ck, cv, T = z.cache_k_width, z.cache_v_width, s + n
    att1_g = gbs * B * (qw + T * ck + nh * T)  # att1^g / cg
    att2_g = gbs * B * (nh * T + T * cv + ow)
    work_g = [
        lin(gbs * B * (h1 + qw + 2 * kw_)),  # qkv^g = 8*gbs*h1
        att_share(att1_g),
        att_share(att2_g),
        lin(gbs * B * 2 * h1),  # embed^g
        lin(gbs * B * (h1 + V)),  # output embedding: one token's logits (see prefill)
        lin(gbs * B * (h1 + mo)),  # mlp1^g
        lin(gbs * B * (mi + h1)),  # mlp2^g
    ]
    # 2*(1-wg)*w: two layers of non-resident weights on the GPU (A.3; double buffering assumed)
    U, Uf = z.stream_unit_bytes, z.stream_unit_fp16_bytes
    gpu_w_p = lin(2 * U, wg=-2 * U, hc=act * s * gbs, hd=act * s * gbs)  # (1-hg) = hc+hd
    # decode keeps (1-hg)*2*h1*gbs (A.3 prints 2*s*h1*gbs here; see docs/offload.md)
    gpu_w_g = lin(2 * U, wg=-2 * U, hc=act * gbs, hd=act * gbs)
    extra_p = Uf if compress else 0.0  # one decompressed unit of weights (not in A.3)
    if compress:
        extra_g = lin(Uf + kvf * T * gbs)  # decompressed weights and one GPU batch's KV (not in A.3)
    elif not cpu_attention:
        extra_g = lin(cc=kv * T * gbs, cd=kv * T * gbs)  # off-GPU KV of one GPU batch (not in A.3)
    else:
        extra_g = lin()
    memory = {
        "gpu_prefill": TierMemory(
            lin(wg=Wt, hg=home_act_p, cg=kv_all) + gpu_w_p + lin(extra_p), tuple(work_p)),
        "gpu_decode": TierMemory(
            lin(wg=Wt, hg=home_act_g, cg=kv_all) + gpu_w_g + extra_g, tuple(work_g)),
        "cpu_prefill": TierMemory(
            lin(wc=Wt, hc=home_act_p, cc=kv_all) + lin(W, wg=-W, hc=act * s * gbs, hd=act * s * gbs),
            (lin(),)),
        # cpu_w^g = wd*w + 2*hd*2*h1*gbs + 2*cd*4*(s+n)*h1*gbs + 2*nh*(s+n)*gbs + 2*h1*gbs (A.3)
        "cpu_decode": TierMemory(
            lin(wc=Wt, hc=home_act_g, cc=kv_all)
            + lin(B * nh * T * gbs + act * gbs, wd=W, hd=2 * act * gbs, cd=2 * kv * T * gbs),
            (lin(),)),
        "disk": TierMemory(lin(wd=Wt, hd=home_act_p, cd=kv_all), (lin(),)),
    }
    capacity = {
        "gpu_prefill": host.gpu_capacity_bytes(gpu), "gpu_decode": host.gpu_capacity_bytes(gpu),
        "cpu_prefill": host.cpu_capacity_bytes(), "cpu_decode": host.cpu_capacity_bytes(),
        "disk": host.disk_capacity_bytes(),
    }
    parts = {
        "prefill_gemm": lin(gemm_p), "prefill_attention": lin(attn_p), "prefill_codec": lin(codec_p),
        "decode_gemm": lin(gemm_g), "decode_codec": lin(codec_g),
        "decode_attention_gpu": (lin(cg=attn_g / rt.bmm_decode_flops) if cpu_attention
                                 else lin(attn_g / rt.bmm_decode_flops)),
        "decode_attention_cpu": (lin(cc=attn_g / cpu_flops, cd=attn_g / cpu_flops)
                                 if cpu_attention else lin()),
    }
    return CostTerms(
        num_layers=L, input_len=s, output_len=n, gpu_batch_size=gbs, num_gpu_batches=ngb,
        compress=compress, cpu_attention=cpu_attention, overlap=overlap, prefill=prefill,
        decode=decode, memory=memory, capacity=capacity, sizes=z, parts=parts,
    )


def weight_allocation(sizes: LayerSizes, wd: float, wc: float) -> tuple[float, float, float]:
    """Shares of the weight bytes FlexGen's runtime puts on (GPU, CPU, disk) for the nominal
    percentages ``wd`` (disk) and ``wc`` (CPU).

    The runtime places whole tensors: within each sub-layer's list, a tensor whose size midpoint
    (cumulative percent) lies below ``wd`` goes to disk, below ``wd + wc`` to the CPU, else to the
    GPU (``init_weight_list`` / ``get_choice`` in FlexGen's ``flexgen/flex_opt.py``). For OPT a
    nominal ``wg = 20`` keeps only the attention output matrix on the GPU, 8.3% of the bytes.
    Layers without a tensor list (:attr:`LayerSizes.weight_tensor_groups`) keep the nominal shares.
    """
    groups = sizes.weight_tensor_groups
    if not groups:
        return (1.0 - wd - wc, wc, wd)
    total = sum(sum(g) for g in groups)
    d = c = 0.0
    for g in groups:
        size, cum = sum(g), 0.0
        for t in g:
            mid = (cum + t / 2) / size
            cum += t
            if mid < wd - 1e-12:
                d += t
            elif mid < wd + wc - 1e-12:
                c += t
    return (1.0 - (d + c) / total, c / total, d / total)


def kv_allocation(gpu_batch_size: int, compress: bool, cg: float, cc: float, cd: float) -> tuple[float, float, float]:
    """Shares of the KV cache FlexGen's runtime puts on (GPU, CPU, disk) for nominal fractions.

    An uncompressed cache split over tiers is allocated per GPU batch in whole sequences, each
    share rounded down: ``floor(gbs*cg)`` sequences on the GPU, the rest on the CPU if ``cd = 0``,
    else ``floor(gbs*cc)`` on the CPU and the rest on disk (``TorchMixedDevice.
    init_cache_one_gpu_batch`` in ``flexgen/pytorch_backend.py`` rounds rows of the
    ``(s + n - 1, gbs*num_head, head_dim)`` tensor down to multiples of ``num_head``). A compressed
    cache cannot be split (the runtime asserts it); it is priced as given.
    """
    if compress or gpu_batch_size < 1:
        return (cg, cc, cd)
    b = gpu_batch_size
    g = min(b, math.floor(b * cg + 1e-6))
    if cd <= 1e-9:
        c = b - g
    else:
        c = min(b - g, math.floor(b * cc + 1e-6))
    return (g / b, c / b, (b - g - c) / b)


def runtime_allocation(terms: CostTerms, x: np.ndarray) -> np.ndarray:
    """The placement FlexGen's runtime allocates for the nominal policy ``x`` (weights per tensor,
    KV cache in whole sequences; activations as given, the runtime requires one tier for them)."""
    xa = np.array(x, dtype=float)
    xa[0:3] = weight_allocation(terms.sizes, float(x[2]), float(x[1]))
    xa[3:6] = kv_allocation(terms.gpu_batch_size, terms.compress, float(x[3]), float(x[4]), float(x[5]))
    return xa
