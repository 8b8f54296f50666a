"""Operator cost records and the linear feature algebra they are written in.

Every operator's work (FLOP), memory traffic (bytes) and communication volume is *linear* in a
small set of batch features (tokens, score elements, cached keys, ...) once the model and the
parallel layout are fixed. Writing each cost as a :class:`Lin` (feature -> coefficient) lets one
op list serve prefill, decode and mixed steps, and lets the estimator turn the whole layer into
two matrix-vector products (or matrix-matrix products over many batches at once).

Features (all per data-parallel attention rank unless noted):

===========  ================================================================================
``one``      1 (weight reads and other per-step constants)
``n``        new tokens in the step, prefill and decode together (rows of every linear layer)
``ng``       GEMM rows charged under tile quantization: ``n`` scaled by the padding penalty of
             :func:`serveplan.estimator.roofline.tile_quantized_rows` (``n`` when it is off)
``np``       prefill tokens (sequences with more than one new token, or no cached context)
``nd``       decode tokens: one new token per decode sequence, plus ``ndx``
``sp``       prefill sequences
``kvp``      keys attended by prefill sequences, sum of ``context + new`` over them
``kvd``      keys attended by decode sequences, sum of context lengths (new tokens included): the
             keys a decode attention kernel reads, once per sequence
``ap``       attention score elements per head of prefill sequences, sum of ``new * (context+new)``
             (the full rectangle, as BestServe Table 8 counts ``s^2``)
``apc``      causal score elements per head, sum of ``new * (context + (new+1)/2)``
``nout``     sequences whose last token produces logits (``sp + nd``)
``nall``     new tokens over all data-parallel ranks of the instance (MoE expert input)
``eact``     expected routed experts holding at least one token, per expert-parallel device
``kvpw``     as ``kvp`` on local (sliding-window or chunked) layers: keys within each window
``kvdw``     as ``kvd`` on local layers
``apw``      as ``ap`` on local layers
``apcw``     as ``apc`` on local layers (see :mod:`serveplan.ops.window`)
``pon``      1 when the step has prefill tokens, else 0 (weights only the prefill path reads)
``don``      1 when the step has decode tokens, else 0 (weights only the decode path reads)
``ndx``      decode query tokens beyond the first of each decode sequence, counted in ``nd``
             (speculative verify: ``K`` per sequence; 0 otherwise), so decode sequences are
             ``nd - ndx``
``adx``      decode attention score elements per head beyond ``kvd``: the keys every decode query
             token attends, summed, less ``kvd`` (0 with one query per sequence; derived from
             ``nd``, ``ndx`` and ``kvd``, :func:`serveplan.ops.window.decode_features`)
``adxw``     as ``adx`` on local layers (:mod:`serveplan.ops.window`)
===========  ================================================================================

A decode attention kernel given ``q`` query tokens per sequence (speculative verify) reads the
sequence's cache once and scores every query against its keys (FlashMLA ``flash_mla_with_kvcache``
with ``s_q`` tokens per sequence, its README and docs/20250422-new-kernel-deep-dive.md: FLOPs
``2 h_q s_q s_k (d_k + d_v)``, bytes about ``s_k d_k``): its work is over ``kvd + adx`` score
elements, its cache traffic over ``kvd`` keys.

With DP-attention (``dp > 1``) requests are placed whole on one rank, so the per-rank features
are those of the busiest rank: ``ceil(sequences / dp)`` of the phase's sequences (a lone prompt
stays on one rank; it is never split over ranks).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from serveplan.specs.profile import Module

FEATURES: tuple[str, ...] = (
    "one", "n", "ng", "np", "nd", "sp", "kvp", "kvd", "ap", "apc", "nout", "nall", "eact",
    "kvpw", "kvdw", "apw", "apcw", "pon", "don", "ndx", "adx", "adxw",
)
FEATURE_INDEX = {f: i for i, f in enumerate(FEATURES)}


class Lin(dict[str, float]):
    """A linear form over :data:`FEATURES`: ``{"n": 2.0, "one": 5.0}`` means ``2 n + 5``."""

    def __add__(self, other: Lin) -> Lin:
        out = Lin(self)
        for k, v in other.items():
            out[k] = out.get(k, 0.0) + v
        return out

    __radd__ = __add__

    def __mul__(self, c: float) -> Lin:
        return Lin({k: v * c for k, v in self.items()})

    __rmul__ = __mul__

    def __truediv__(self, c: float) -> Lin:
        return Lin({k: v / c for k, v in self.items()})

    def evaluate(self, **features: float) -> float:
        return float(sum(v * features.get(k, 0.0) for k, v in self.items()))


def feature(name: str) -> Lin:
    if name not in FEATURE_INDEX:
        raise KeyError(name)
    return Lin({name: 1.0})


ONE, N, NG, NP, ND, SP, KVP, KVD, AP, APC, NOUT, NALL, EACT = (feature(f) for f in FEATURES[:13])
KVPW, KVDW, APW, APCW, PON, DON, NDX, ADX, ADXW = (feature(f) for f in FEATURES[13:])
ZERO = Lin()


class Rate(str, Enum):
    """Which rate times an operator: the adapted roofline, or one of the decode data-movement
    rates ``kappa`` of BestServe eq. (12)."""

    ROOFLINE = "roofline"
    KAPPA_UPDATE = "kappa_update"
    KAPPA_REPEAT_KV = "kappa_repeat_kv"
    KAPPA_UPCAST = "kappa_upcast"


class Collective(str, Enum):
    ALL_REDUCE = "all_reduce"
    ALL_TO_ALL = "all_to_all"
    SEND_RECV = "send_recv"


@dataclass(frozen=True, slots=True)
class Op:
    """One operator of a layer: its work and traffic as linear forms over the batch features."""

    name: str
    module: Module
    flops: Lin
    bytes: Lin
    rate: Rate = Rate.ROOFLINE
    source: str = ""
    rows: Lin | None = None  # rows (M) of a matrix multiplication, for size-dependent efficiency
    attention: bool = False  # attention kernel (scores, softmax, weighted sum): own efficiency factors
    inner: float = 0.0  # k of a matrix multiplication (input features), for measured GEMM curves


@dataclass(frozen=True, slots=True)
class Comm:
    """A collective after a module: ``volume`` bytes of payload per device (the data to
    synchronise, modeling notes A.2 convention) over a group of ``group_size`` devices."""

    name: str
    module: Module
    kind: Collective
    volume: Lin
    group_size: int
    values: Lin  # payload in values (BestServe eq. 8 counts values, not bytes)
    copies: float = 0.0  # MoE all-to-all: routed copies of each token in the payload (0: not routed)
    dedup_nodes: bool = False  # a token crosses to each remote node once (then NVLink forwarding)
    efficiency: float = 0.0  # achieved fraction of the link bandwidth of its own library; 0: the profile's e_+


@dataclass(frozen=True, slots=True)
class ModuleBlock:
    """One module of a layer in execution order: its ops, then its collectives."""

    kind: Module
    ops: tuple[Op, ...]
    comms: tuple[Comm, ...] = ()


@dataclass(frozen=True, slots=True)
class LayerGroup:
    """Identical layers: how many there are and their modules in execution order."""

    name: str
    count: int
    blocks: tuple[ModuleBlock, ...]
