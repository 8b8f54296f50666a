"""Speculative decoding: the drafting method, the draft length ``K`` and the acceptance model.

A decode step with speculation drafts ``K`` tokens per sequence (with a draft model, an EAGLE
head, the model's multi-token-prediction layer, or by n-gram lookup in the context) and verifies
them with one forward pass of the target over ``K + 1`` tokens per sequence. Draft token ``i``
is accepted only if tokens ``1 .. i - 1`` were; ``a_i`` is the probability that token ``i`` is
accepted given that its predecessors were (the per-position acceptance rate). The verify pass
always yields one token of its own (the correction or the bonus token), so the expected tokens
per step are (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
Decoding", ICML, eq. 1 for constant ``a``)::

    E = 1 + sum_{k=1..K} prod_{i=1..k} a_i            (per-position rates)
      = (1 - a^(K+1)) / (1 - a)                        (constant rate a; K + 1 when a = 1)

:meth:`SpecDecodeConfig.expected_tokens` computes it. Default rates per method
(:data:`DEFAULT_ACCEPTANCE`) come from published measurements, each cited there; a rate list
shorter than ``K`` repeats its last rate for the further positions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import Any

from serveplan.errors import SpecError


class SpecMethod(str, Enum):
    """How the draft tokens are proposed."""

    NONE = "none"      # no speculation
    DRAFT = "draft"    # a smaller model of the same vocabulary, K autoregressive decode steps
    EAGLE = "eagle"    # an EAGLE head: one decoder layer + LM head on the target's features, K steps
    MTP = "mtp"        # the model's multi-token-prediction module (DeepSeek-V3 §2.2), K steps
    NGRAM = "ngram"    # prompt lookup: match the last n tokens in the context (no compute)

    @classmethod
    def parse(cls, value: str | SpecMethod) -> SpecMethod:
        try:
            return cls(str(value.value if isinstance(value, SpecMethod) else value).lower())
        except ValueError:
            raise SpecError(f"spec_method={value!r}; expected one of: {', '.join(m.value for m in cls)}") from None


#: Default per-position acceptance rates of each method (a list shorter than K repeats its last
#: rate). Each is a published measurement, never fitted to our validation figures:
DEFAULT_ACCEPTANCE: dict[SpecMethod, tuple[float, ...]] = {
    # DeepSeek-V3 Technical Report (arXiv:2412.19437) §5.4.3: "the acceptance rate of the second
    # token prediction ranges between 85% and 90%" (one MTP module, K = 1); midpoint.
    SpecMethod.MTP: (0.875,),
    # Acceptance length tau = 2.77 of the EAGLE-3 head yuhuili/EAGLE3-LLaMA3.1-Instruct-8B on
    # MT-bench, chain drafting K = 7, temperature 1, measured by Nebius (model card of
    # nebius/EAGLE3-Llama-3.3-70B-Instruct, "Comparison with Public Checkpoints"); the constant
    # rate a with (1 - a^8) / (1 - a) = 2.77 is 0.651.
    SpecMethod.EAGLE: (0.651,),
    # Leviathan et al. 2023 Table 2: T5-XXL target with a T5-small draft on WMT EnDe, alpha = 0.75.
    SpecMethod.DRAFT: (0.75,),
    # n-gram prompt lookup: "Speculative Decoding: Performance or Illusion?" (arXiv:2601.11580,
    # SpecDecode-Bench, vLLM on H100) finds n-gram acceptance entirely workload-dependent (high
    # only where outputs copy the prompt: code editing, summarisation). No single published rate
    # stands for a generic workload, so the default is the low end for chat-like text and
    # --spec-acceptance should be given for the workload (assumed: 0.3).
    SpecMethod.NGRAM: (0.3,),
}

#: The engines' default draft lengths where one is documented (used when ``K`` is not given):
#: DeepSeek-V3 serves with one MTP module (K = 1, tech report §5.4.3); vLLM's speculative_config
#: needs num_speculative_tokens, SGLang's EAGLE default is speculative_num_steps=5 (chain length).
DEFAULT_TOKENS: dict[SpecMethod, int] = {SpecMethod.MTP: 1, SpecMethod.EAGLE: 3, SpecMethod.DRAFT: 4,
                                         SpecMethod.NGRAM: 3}


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecDecodeConfig:
    """Speculative decoding of one instance.

    Parameters
    ----------
    method:
        :class:`SpecMethod` (or its value): ``draft``, ``eagle``, ``mtp``, ``ngram`` or ``none``.
    num_tokens:
        Draft tokens per step ``K`` (>= 0; ``0`` is no speculation). ``None``: the method's
        default (:data:`DEFAULT_TOKENS`).
    acceptance:
        Per-position acceptance rates ``a_1 .. a_K`` in [0, 1] (one number: every position);
        a list shorter than ``K`` repeats its last rate. ``None``: the method's published default
        (:data:`DEFAULT_ACCEPTANCE`).
    draft_model:
        Catalog id of the draft model (method ``draft`` only, required there).

    Examples
    --------
    >>> SpecDecodeConfig(method="mtp", num_tokens=1, acceptance=0.8).expected_tokens
    1.8
    """

    method: SpecMethod = SpecMethod.NONE
    num_tokens: int | None = None
    acceptance: tuple[float, ...] | float | None = None
    draft_model: str | None = None

    def __post_init__(self) -> None:
        method = SpecMethod.parse(self.method)
        object.__setattr__(self, "method", method)
        k = self.num_tokens
        if k is None:
            k = DEFAULT_TOKENS.get(method, 0)
        if isinstance(k, bool) or not isinstance(k, int) or k < 0:
            raise SpecError(f"spec_tokens={self.num_tokens!r} must be a non-negative integer (draft tokens per step)")
        if method is SpecMethod.NONE:
            if k and self.num_tokens is not None:
                raise SpecError(f"spec_tokens={k} needs a spec_method; expected one of: draft, eagle, mtp, ngram")
            k = 0
        object.__setattr__(self, "num_tokens", k)
        acc = self.acceptance
        if acc is None:
            rates = DEFAULT_ACCEPTANCE.get(method, ())
        else:
            rates = (acc,) if isinstance(acc, (int, float)) else tuple(acc)
            if not rates:
                raise SpecError("spec_acceptance is empty; expected one rate or one per draft position, in [0, 1]")
            for r in rates:
                if isinstance(r, bool) or not isinstance(r, (int, float)) or not (0.0 <= r <= 1.0):
                    raise SpecError(f"spec_acceptance={r!r} must be a probability in [0, 1]")
            if k and len(rates) > k:
                raise SpecError(f"spec_acceptance has {len(rates)} rates for spec_tokens={k}; expected at most one "
                                "per draft position")
        object.__setattr__(self, "acceptance", tuple(float(r) for r in rates))
        if method is SpecMethod.DRAFT and k and not self.draft_model:
            raise SpecError("spec_method='draft' needs spec_draft_model (a catalog model id, e.g. llama-3.2-1b)")
        if self.draft_model and method is not SpecMethod.DRAFT:
            raise SpecError(f"spec_draft_model={self.draft_model!r} is for spec_method='draft', not {method.value!r}")

    @staticmethod
    def of(method: str | SpecMethod | None = None, num_tokens: int | None = None,
           acceptance: str | float | tuple[float, ...] | None = None,
           draft_model: str | None = None) -> SpecDecodeConfig | None:
        """From user-level options (CLI flags, YAML): ``acceptance`` may be a comma list
        (``"0.8,0.6"``). ``None`` when speculation is off (no method, ``none``, or ``K = 0``)."""
        if isinstance(acceptance, str):
            acceptance = parse_rates(acceptance)
        if method is None:
            if num_tokens or acceptance is not None or draft_model:
                raise SpecError("spec_tokens, spec_acceptance and spec_draft_model need spec_method "
                                "(draft, eagle, mtp or ngram)")
            return None
        cfg = SpecDecodeConfig(method=SpecMethod.parse(method), num_tokens=num_tokens, acceptance=acceptance,
                               draft_model=draft_model)
        return cfg if cfg.is_active else None

    @property
    def _given(self) -> tuple[float, ...]:
        """The rates as given or defaulted (a tuple after ``__post_init__``)."""
        a = self.acceptance
        return a if isinstance(a, tuple) else ()

    @property
    def is_active(self) -> bool:
        """Whether steps draft anything (a method and ``K >= 1``)."""
        return self.method is not SpecMethod.NONE and bool(self.num_tokens)

    @property
    def k(self) -> int:
        """Draft tokens per step ``K``."""
        return int(self.num_tokens or 0)

    @property
    def rates(self) -> tuple[float, ...]:
        """``a_1 .. a_K``, the given list extended with its last rate."""
        r = self._given
        k = self.k
        if not k:
            return ()
        return (r + (r[-1],) * (k - len(r)))[:k]

    @property
    def expected_tokens(self) -> float:
        """Expected tokens per verify step: ``1 + sum_{k=1..K} prod_{i<=k} a_i`` (Leviathan et al.
        2023 eq. 1 for constant rates, ``(1 - a^(K+1)) / (1 - a)``)."""
        return expected_tokens(self.rates)

    @property
    def verify_tokens(self) -> int:
        """Tokens per sequence the target computes in one step (``K + 1``)."""
        return self.k + 1

    @property
    def tag(self) -> str:
        """Short label for fleet names, e.g. ``mtp1``, ``eagle3``."""
        return f"{self.method.value}{self.k}"

    def to_dict(self) -> dict[str, Any]:
        return {"spec_method": self.method.value, "spec_tokens": self.k, "spec_acceptance": list(self._given),
                "spec_draft_model": self.draft_model, "spec_expected_tokens": self.expected_tokens}


def expected_tokens(rates: tuple[float, ...] | list[float]) -> float:
    """``E = 1 + sum_{k=1..K} prod_{i=1..k} a_i``: token ``k`` counts only if every earlier draft
    token was accepted (Leviathan et al. 2023 §3.1; eq. 1 is the constant-rate case)."""
    e, p = 1.0, 1.0
    for a in rates:
        p *= a
        e += p
    return e


def constant_rate_tokens(a: float, k: int) -> float:
    """Closed form for a constant rate (Leviathan et al. 2023 eq. 1): ``(1 - a^(K+1)) / (1 - a)``."""
    if a == 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def parse_rates(text: str) -> tuple[float, ...]:
    """``"0.8"`` or ``"0.85,0.7,0.6"`` as rates (checked by :class:`SpecDecodeConfig`)."""
    out = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            v = float(part)
        except ValueError:
            raise SpecError(f"spec_acceptance={text!r} does not parse; expected a rate or a comma list of rates "
                            "in [0, 1], e.g. 0.8 or 0.85,0.7") from None
        if not math.isfinite(v):
            raise SpecError(f"spec_acceptance={part!r} must be a probability in [0, 1]")
        out.append(v)
    return tuple(out)
