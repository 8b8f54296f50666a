"""Acceptance model of speculative decoding (serveplan.specs.speculative)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from serveplan.errors import SpecError
from serveplan.specs.speculative import (
    DEFAULT_ACCEPTANCE,
    SpecDecodeConfig,
    SpecMethod,
    constant_rate_tokens,
    expected_tokens,
    parse_rates,
)

rate = st.floats(0.0, 1.0, allow_nan=False)


def _by_distribution(rates: list[float]) -> float:
    """E[tokens] from the distribution of the accepted count j (an independent derivation):
    P(j) = prod_{i<=j} a_i * (1 - a_{j+1}) for j < K, P(K) = prod_{i<=K} a_i; a step yields j + 1."""
    k = len(rates)
    e = 0.0
    p_prefix = 1.0
    for j in range(k + 1):
        p_j = p_prefix * (1.0 - rates[j]) if j < k else p_prefix
        e += (j + 1) * p_j
        if j < k:
            p_prefix *= rates[j]
    return e


@given(rate, st.integers(0, 16))
def test_constant_rate_matches_leviathan_closed_form(a, k):
    cfg = SpecDecodeConfig(method="eagle", num_tokens=k, acceptance=a) if k else None
    e = cfg.expected_tokens if cfg is not None else 1.0
    closed = (k + 1.0) if a == 1.0 else (1 - a ** (k + 1)) / (1 - a)   # Leviathan et al. 2023 eq. 1
    assert math.isclose(e, closed, rel_tol=1e-9, abs_tol=1e-12)
    assert math.isclose(constant_rate_tokens(a, k), closed, rel_tol=1e-12)


@given(st.lists(rate, min_size=1, max_size=10))
def test_per_position_rates_match_the_distribution_of_accepted_tokens(rates):
    cfg = SpecDecodeConfig(method="mtp", num_tokens=len(rates), acceptance=tuple(rates))
    assert math.isclose(cfg.expected_tokens, _by_distribution(rates), rel_tol=1e-9, abs_tol=1e-12)
    assert 1.0 <= cfg.expected_tokens <= len(rates) + 1


@given(st.lists(rate, min_size=1, max_size=4), st.integers(1, 8))
def test_a_short_rate_list_repeats_its_last_rate(rates, k):
    if len(rates) > k:
        return
    cfg = SpecDecodeConfig(method="eagle", num_tokens=k, acceptance=tuple(rates))
    assert cfg.rates == tuple(rates) + (rates[-1],) * (k - len(rates))
    assert math.isclose(cfg.expected_tokens, expected_tokens(cfg.rates))


def test_mtp_default_is_deepseek_v3_second_token_acceptance():
    # DeepSeek-V3 report §5.4.3: 85-90 % second-token acceptance, K = 1 -> E = 1.875
    cfg = SpecDecodeConfig(method="mtp")
    assert cfg.k == 1 and cfg.rates == (0.875,) and cfg.expected_tokens == 1.875


def test_eagle_default_reproduces_its_cited_acceptance_length():
    # the cited measurement: tau = 2.77 at K = 7 (chain drafting)
    cfg = SpecDecodeConfig(method="eagle", num_tokens=7)
    assert math.isclose(cfg.expected_tokens, 2.77, abs_tol=0.005)


def test_every_method_has_a_default_rate():
    assert set(DEFAULT_ACCEPTANCE) == set(SpecMethod) - {SpecMethod.NONE}


@pytest.mark.parametrize("kw, match", [
    ({"method": "eagle", "acceptance": 1.2}, r"spec_acceptance=1.2 must be a probability in \[0, 1\]"),
    ({"method": "eagle", "acceptance": (0.8, -0.1)}, r"spec_acceptance=-0.1"),
    ({"method": "eagle", "num_tokens": -1}, "spec_tokens=-1 must be a non-negative integer"),
    ({"method": "eagle", "num_tokens": 2, "acceptance": (0.9, 0.8, 0.7)}, "3 rates for spec_tokens=2"),
    ({"method": "warp"}, "spec_method='warp'; expected one of: none, draft, eagle, mtp, ngram"),
    ({"method": "draft", "num_tokens": 3}, "needs spec_draft_model"),
    ({"method": "eagle", "draft_model": "llama-3.2-1b"}, "is for spec_method='draft'"),
    ({"method": "none", "num_tokens": 2}, "needs a spec_method"),
])
def test_bad_values_name_the_field(kw, match):
    with pytest.raises(SpecError, match=match):
        SpecDecodeConfig(**kw)


def test_off_and_k0_are_none():
    assert SpecDecodeConfig.of(None) is None
    assert SpecDecodeConfig.of("none") is None
    assert SpecDecodeConfig.of("eagle", 0) is None
    assert SpecDecodeConfig.of("eagle", 2, "0.8,0.6").rates == (0.8, 0.6)
    with pytest.raises(SpecError, match="need spec_method"):
        SpecDecodeConfig.of(None, 3)


def test_parse_rates():
    assert parse_rates("0.9, 0.5") == (0.9, 0.5)
    with pytest.raises(SpecError, match="does not parse"):
        parse_rates("0.9,x")
    with pytest.raises(SpecError, match="probability"):
        parse_rates("nan")
