"""Policy tuples (FlexGen Tables 12, 14-18 notation) and their validation."""

from __future__ import annotations

import pytest

from serveplan.errors import SpecError
from serveplan.offload.policy import OffloadPolicy, parse_policy


def test_six_percentages_give_disk_the_remainder():
    p = parse_policy("32x8,0,50,0,0,0,100")  # Table 15, OPT-175B
    assert (p.gpu_batch_size, p.num_gpu_batches, p.block_size) == (32, 8, 256)
    assert (p.wg, p.wc, p.wd) == (0.0, 0.5, 0.5)
    assert (p.cg, p.cc, p.cd) == (0.0, 0.0, 1.0)
    assert (p.hg, p.hc, p.hd) == (0.0, 1.0, 0.0)
    assert p.cpu_attention and not p.compress  # FlexGen's rule: CPU attention unless compressed


def test_paper_typography_and_nine_values_parse():
    a = parse_policy("(48×3, 20, 80, 0, 100, 0, 100)")
    b = parse_policy("48x3,20,80,0,0,100,0,0,100,0")
    assert a.placement() == b.placement()
    assert a.label() == "48x3, 20, 80, 0, 100, 0, 100"


def test_compressed_policy_turns_cpu_attention_off():
    p = parse_policy("48x3,0,100,0,100,0,100", compress=True)
    assert p.compress and not p.cpu_attention


@pytest.mark.parametrize("text, field", [
    ("48x3,20,90,0,100,0,100", "wg+wc"),      # 110 > 100
    ("48x3,20,80,0,100,60,50", "hg+hc"),
    ("48x3,20,-5,0,100,0,100", "wc=-5"),
    ("48x3,20,30,40,0,100,0,100,0,0", "hg+hc+hd"),  # nine values: activations sum to 100? 100+0+0 ok, weights 90
    ("48x3,20,abc,0,100,0,100", "wc='abc'"),
])
def test_bad_tuples_name_the_field(text, field):
    with pytest.raises(SpecError) as err:
        parse_policy(text)
    msg = str(err.value)
    assert "\n" not in msg
    if field == "hg+hc+hd":
        assert "wg+wc+wd" in msg and "sum to 90" in msg
    else:
        assert field in msg


@pytest.mark.parametrize("text", ["48by3", "", "48x3", "48x3,1,2,3", "x3,0,0,0,0,0,0"])
def test_unparsable_tuples_are_spec_errors(text):
    with pytest.raises(SpecError, match="policy"):
        parse_policy(text)


def test_zero_gpu_batch_size_is_rejected():
    with pytest.raises(SpecError, match="gpu_batch_size=0"):
        parse_policy("0x3,20,80,0,100,0,100")


def test_direct_construction_validates_sums_and_switches():
    ok = dict(gpu_batch_size=4, wg=1.0, wc=0.0, wd=0.0, cg=1.0, cc=0.0, cd=0.0, hg=1.0, hc=0.0, hd=0.0)
    OffloadPolicy(**ok)
    with pytest.raises(SpecError, match="cg\\+cc\\+cd"):
        OffloadPolicy(**{**ok, "cg": 0.5})
    with pytest.raises(SpecError, match="cpu_attention=True conflicts"):
        OffloadPolicy(**ok, compress=True, cpu_attention=True)
