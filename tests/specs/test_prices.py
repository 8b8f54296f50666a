"""The bundled price table: every number cited and dated, overrides, and the errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from serveplan.errors import SpecError
from serveplan.specs import prices
from serveplan.specs.catalog import get_hardware, list_hardware
from serveplan.specs.prices import (
    TIERS,
    bundled_prices,
    get_price,
    load_price_table,
    parse_price_overrides,
    price_table,
)

HW_DIR = Path(prices.__file__).parent / "data" / "hardware"


def test_every_bundled_device_has_a_row_and_every_price_a_source_and_a_date():
    table = bundled_prices()
    for hw in list_hardware():
        have = [t for t in TIERS if table.find(hw, t) is not None]
        if len(have) < len(TIERS):
            assert table.missing.get(hw), f"{hw}: a tier without a price must say why"
        for t in have:
            p = table.get(hw, t)
            assert p.url.startswith("https://"), (hw, t, p.url)
            assert p.read_from and p.provider and p.product, (hw, t)
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", p.date), (hw, t, p.date)
    assert len(table.prices) >= 12


def test_the_accelerators_named_in_the_issue_are_priced_on_demand():
    for hw in ("h100-sxm", "h200", "b200", "a100-80g", "a100-40g", "l40s", "mi300x", "gh200"):
        assert get_price(hw).usd_per_gpu_hour > 0


def test_an_alias_finds_the_price_and_a_committed_rate_is_below_on_demand():
    assert get_price("h100").hardware == "h100-sxm"
    for hw in ("h100-sxm", "h200", "b200", "a100-80g", "a100-40g"):
        assert get_price(hw, "committed").usd_per_gpu_hour < get_price(hw).usd_per_gpu_hour


def test_price_overrides_replace_the_table_for_that_tier_only():
    table = price_table(overrides="h100=2.49, h200=3.1")
    assert table.get("h100-sxm").usd_per_gpu_hour == 2.49
    assert table.get("h200").usd_per_gpu_hour == 3.1
    assert "command line" in table.get("h100-sxm").read_from
    assert table.get("h100-sxm", "committed").usd_per_gpu_hour == 2.72   # the committed tier is untouched
    assert get_price("h100-sxm").usd_per_gpu_hour == 3.20                 # the bundled table is untouched
    assert price_table(overrides="l4=0.7", tier="committed").get("l4", "committed").usd_per_gpu_hour == 0.7


def test_a_prices_file_adds_rows_over_the_bundled_table(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("rows:\n  l4:\n    on_demand: {usd_per_gpu_hour: 0.8, provider: Me, date: '2026-01-01'}\n")
    t = price_table(prices_file=f)
    assert t.get("l4").usd_per_gpu_hour == 0.8 and t.get("h200").usd_per_gpu_hour == 3.99
    assert load_price_table(f).get("l4").provider == "Me"


@pytest.mark.parametrize("text, words", [
    ("h100-sxm", "expected DEVICE=USD_PER_GPU_HOUR"),
    ("h100-sxm=-1", "must be"),
    ("h100-sxm=abc", "must be a number"),
])
def test_bad_price_overrides_name_the_value_and_the_form(text, words):
    with pytest.raises(SpecError, match=words):
        parse_price_overrides(text)


def test_a_device_without_a_price_says_why_and_how_to_give_one():
    with pytest.raises(SpecError, match=r"no on-demand price for hardware 'l4' .*--price l4=USD_PER_GPU_HOUR"):
        get_price("l4")
    with pytest.raises(SpecError, match="price-tier='spot'; expected one of: on_demand, committed"):
        get_price("h100-sxm", "spot")


def test_every_power_figure_of_a_device_file_carries_its_source():
    for f in sorted(HW_DIR.glob("*.yaml")):
        for line in f.read_text().splitlines():
            if re.match(r"(board|idle|host)_power_w:", line):
                assert "#" in line and len(line.split("#", 1)[1].strip()) > 20, (f.name, line)
    known = [hw for hw in list_hardware() if get_hardware(hw).board_power_w > 0]
    assert set(list_hardware()) - set(known) == {"ascend-910b3"}
    assert get_hardware("h100-sxm").board_power_w == 700 and get_hardware("h100-sxm").host_power_w == 350
