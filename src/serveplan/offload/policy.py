"""Offloading policies (FlexGen Section 4.2) and the problem they solve.

A policy fixes the GPU batch size, the number of GPU batches in a block, where each of the three
tensor kinds lives (weights ``w``, KV cache ``c``, activations ``h``, each split over GPU ``g``, CPU
``c`` and disk ``d``), and the two switches FlexGen's experiments toggle: 4-bit compression and CPU
attention. FlexGen's tables write a policy as ``(gbs x #gb, wg, wc, cg, cc, hg, hc)`` in percent,
with the disk share the remainder (Tables 12, 14-18); :func:`parse_policy` reads that notation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum

from serveplan.errors import SpecError

#: Placement variables in LP order (FlexGen Appendix A.3 Table 7).
PLACEMENT_FIELDS = ("wg", "wc", "wd", "cg", "cc", "cd", "hg", "hc", "hd")
_GROUPS = (("wg", "wc", "wd", "weights"), ("cg", "cc", "cd", "KV cache"), ("hg", "hc", "hd", "activations"))
_TOL = 1e-6


class Overlap(str, Enum):
    """How the five per-layer terms (ctog, gtoc, dtoc, ctod, comp) overlap in time.

    ``PERFECT``: ``T = max(ctog, gtoc, dtoc, ctod, comp)`` for prefill and decode, as printed in
    FlexGen Appendix A.3. ``SERIAL_LOAD``: the form of FlexGen's released cost model
    (``flexgen/cost_model.py``): prefill ``max(ctog + dtoc, gtoc + ctod, comp)`` (a disk read
    reaches the GPU through the CPU, a KV write leaves it the same way) and decode
    ``ctog + max(gtoc, dtoc, ctod, comp)`` (the next layer's weight upload is not hidden).
    """

    PERFECT = "perfect"
    SERIAL_LOAD = "serial-load"


@dataclass(frozen=True, slots=True, kw_only=True)
class OffloadPolicy:
    """One FlexGen policy; placement fractions are in [0, 1] and sum to 1 per tensor kind.

    Parameters
    ----------
    gpu_batch_size, num_gpu_batches:
        Sequences per GPU batch and GPU batches per block; block size = their product.
    wg, wc, wd, cg, cc, cd, hg, hc, hd:
        Fractions of weights (w), KV cache (c) and activations (h) on GPU, CPU and disk.
    compress:
        4-bit group-wise compression of weights and KV cache (FlexGen Section 5).
    cpu_attention:
        Decode attention for the KV cache not on the GPU runs on the CPU (Section 4.2).

    Raises
    ------
    SpecError
        Naming the field: a negative fraction, fractions not summing to 1, a batch size below 1, or
        CPU attention together with compression (FlexGen turns it off then, Section 5).
    """

    gpu_batch_size: int
    num_gpu_batches: int = 1
    wg: float
    wc: float
    wd: float
    cg: float
    cc: float
    cd: float
    hg: float
    hc: float
    hd: float
    compress: bool = False
    cpu_attention: bool = True

    def __post_init__(self) -> None:
        for f in ("gpu_batch_size", "num_gpu_batches"):
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise SpecError(f"policy field {f}={v!r} must be a positive integer")
        for f in PLACEMENT_FIELDS:
            v = getattr(self, f)
            if not isinstance(v, (int, float)) or v != v or v < -_TOL:
                raise SpecError(f"policy field {f}={_pct(v)} must be >= 0 (percent)")
            if v > 1 + _TOL:
                raise SpecError(f"policy field {f}={_pct(v)} must be <= 100 (percent)")
        for a, b, c, what in _GROUPS:
            total = getattr(self, a) + getattr(self, b) + getattr(self, c)
            if abs(total - 1) > 1e-4:
                raise SpecError(
                    f"policy fields {a}+{b}+{c} ({what}) sum to {total * 100:g}, expected 100"
                )
        if self.compress and self.cpu_attention:
            raise SpecError(
                "policy field cpu_attention=True conflicts with compress=True: FlexGen turns CPU "
                "attention off under compression (Section 5)"
            )

    @property
    def block_size(self) -> int:
        """Effective batch size ``bls = gpu_batch_size * num_gpu_batches``."""
        return self.gpu_batch_size * self.num_gpu_batches

    def placement(self) -> tuple[float, ...]:
        """The nine fractions in :data:`PLACEMENT_FIELDS` order."""
        return tuple(float(getattr(self, f)) for f in PLACEMENT_FIELDS)

    def label(self) -> str:
        """FlexGen's table notation, e.g. ``48x3, 20, 80, 0, 100, 0, 100``."""
        p = [round(getattr(self, f) * 100, 2) for f in ("wg", "wc", "cg", "cc", "hg", "hc")]
        return f"{self.gpu_batch_size}x{self.num_gpu_batches}, " + ", ".join(f"{v:g}" for v in p)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "gpu_batch_size": self.gpu_batch_size,
            "num_gpu_batches": self.num_gpu_batches,
            "block_size": self.block_size,
        }
        out.update({f: round(getattr(self, f) * 100, 6) for f in PLACEMENT_FIELDS})  # percent, as in FlexGen
        out.update(compress=self.compress, cpu_attention=self.cpu_attention, units="percent")
        return out


def _pct(v: object) -> str:
    return f"{v * 100:g}" if isinstance(v, (int, float)) else repr(v)


_TUPLE_RE = re.compile(r"^\s*\(?\s*(\d+)\s*[x×*]\s*(\d+)\s*,(.*?)\)?\s*$", re.IGNORECASE)
_TUPLE_HELP = ("expected FlexGen's notation 'GBSxNGB,wg,wc,cg,cc,hg,hc' in percent (disk gets the "
               "remainder), e.g. '48x3,20,80,0,100,0,100', or all nine 'GBSxNGB,wg,wc,wd,cg,cc,cd,hg,hc,hd'")


def parse_policy(text: str, *, compress: bool = False, cpu_attention: bool | None = None) -> OffloadPolicy:
    """Read FlexGen's policy tuple, e.g. ``"48x3,20,80,0,100,0,100"`` (percent).

    With six percentages the disk shares are the remainders (``wd = 100 - wg - wc``); with nine,
    each kind must sum to 100. ``cpu_attention=None`` applies FlexGen's rule: on unless compressed.

    Raises
    ------
    SpecError
        One line naming the field: unparsable tuple, negative value, a sum above (or, with nine
        values, different from) 100.
    """
    m = _TUPLE_RE.match(text or "")
    if not m:
        raise SpecError(f"policy {text!r} is not a policy tuple; {_TUPLE_HELP}")
    gbs, ngb = int(m.group(1)), int(m.group(2))
    parts = [p.strip() for p in m.group(3).split(",")]
    names6 = ("wg", "wc", "cg", "cc", "hg", "hc")
    if len(parts) not in (6, 9):
        raise SpecError(f"policy {text!r} has {len(parts)} percentages after GBSxNGB; {_TUPLE_HELP}")
    names = names6 if len(parts) == 6 else PLACEMENT_FIELDS
    vals: dict[str, float] = {}
    for name, p in zip(names, parts, strict=True):
        try:
            vals[name] = float(p)
        except ValueError:
            raise SpecError(f"policy field {name}={p!r} is not a number; {_TUPLE_HELP}") from None
        if vals[name] < 0:
            raise SpecError(f"policy field {name}={p} must be >= 0 (percent)")
    if len(parts) == 6:
        for a, b, c, what in _GROUPS:
            rest = 100 - vals[a] - vals[b]
            if rest < -1e-9:
                raise SpecError(
                    f"policy fields {a}+{b} ({what}) sum to {vals[a] + vals[b]:g}, more than 100 "
                    f"(the disk share {c} would be {rest:g})"
                )
            vals[c] = max(rest, 0.0)
    if cpu_attention is None:
        cpu_attention = not compress
    return OffloadPolicy(
        gpu_batch_size=gbs, num_gpu_batches=ngb, compress=compress, cpu_attention=cpu_attention,
        **{k: v / 100 for k, v in vals.items()},
    )
