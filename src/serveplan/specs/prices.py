"""Accelerator rental prices: US dollars per GPU-hour, on-demand and committed, each with its source.

The bundled table (``data/prices/list-prices.yaml``) has one row per device, each tier naming the
provider, the product, the provider's page, the stored copy the number was read from and the date
it was read (``docs/cost-energy.md`` says how instance prices were normalised to one GPU). A run
overrides it with ``--price h100-sxm=2.49,h200=3.1`` (:func:`parse_price_overrides`) or a YAML
file of the same schema (``--prices FILE.yaml``, :func:`load_price_table`).

>>> get_price("h100-sxm").usd_per_gpu_hour
3.2
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from serveplan.errors import SpecError, check_number
from serveplan.specs.catalog import list_hardware, resolve_name

#: price tiers: no commitment, and the provider's reserved or committed-use rate
TIERS = ("on_demand", "committed")
#: hours in an average month (8,760 h a year / 12): the unit of ``$/month`` figures
HOURS_PER_MONTH = 730.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Price:
    """One device's price in one tier, and where it came from.

    Parameters
    ----------
    hardware:
        Catalog id of the device.
    tier:
        ``"on_demand"`` or ``"committed"``.
    usd_per_gpu_hour:
        US dollars per device per hour.
    provider, product, url, read_from, date:
        Who lists it, for what, on which page, the stored copy it was read from, and when it was
        read (``"given on the command line"`` for an override).
    """

    hardware: str
    tier: str
    usd_per_gpu_hour: float
    provider: str = ""
    product: str = ""
    url: str = ""
    read_from: str = ""
    date: str = ""

    def __post_init__(self) -> None:
        if self.tier not in TIERS:
            raise SpecError(f"price tier={self.tier!r}; expected one of: {', '.join(TIERS)}")
        check_number(f"price of {self.hardware} ({self.tier})", self.usd_per_gpu_hour, low=0, low_open=True,
                      unit="US dollars per GPU-hour")

    @property
    def label(self) -> str:
        """One line: the rate, the provider and the date, for reports."""
        who = f"{self.provider}, {self.date}" if self.provider else self.read_from or "given"
        return f"${self.usd_per_gpu_hour:g}/GPU-h {self.tier.replace('_', '-')} ({who})"

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__slots__}


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceTable:
    """Prices by device id and tier; ``missing`` says why a device has none (``why`` of its row)."""

    prices: Mapping[tuple[str, str], Price] = field(default_factory=dict)
    missing: Mapping[str, str] = field(default_factory=dict)

    def get(self, hardware: str, tier: str = "on_demand") -> Price:
        """The price of ``hardware`` in ``tier``.

        Raises
        ------
        SpecError
            An unknown tier, or a device without a price in that tier (the message says why and
            how to give one).
        """
        if tier not in TIERS:
            raise SpecError(f"price-tier={tier!r}; expected one of: {', '.join(TIERS)}")
        got = self.prices.get((hardware, tier))
        if got is None:
            why = self.missing.get(hardware, "no row in the price table")
            have = sorted({h for h, t in self.prices if t == tier})
            raise SpecError(f"no {tier.replace('_', '-')} price for hardware {hardware!r} ({why}); give one with "
                            f"--price {hardware}=USD_PER_GPU_HOUR or --prices FILE.yaml; priced: {', '.join(have)}")
        return got

    def find(self, hardware: str, tier: str = "on_demand") -> Price | None:
        """:meth:`get`, or None when the device has no price in ``tier``."""
        return self.prices.get((hardware, tier))

    def with_overrides(self, overrides: Mapping[str, float], tier: str = "on_demand") -> PriceTable:
        """This table with ``overrides`` (device id -> USD per GPU-hour) replacing ``tier``'s rows."""
        prices = dict(self.prices)
        for hw, usd in overrides.items():
            prices[(hw, tier)] = Price(hardware=hw, tier=tier, usd_per_gpu_hour=usd, provider="",
                                       read_from="given on the command line (--price)")
        return PriceTable(prices=prices, missing=dict(self.missing))


def _hardware_id(name: str) -> str:
    """Catalog id of a device named in a price table or override (an alias works; a name that
    is not in the catalog, such as a custom YAML's, is kept as given)."""
    try:
        return resolve_name("hardware", "hardware", name)
    except SpecError:
        if name.strip().lower() in (h.lower() for h in list_hardware()):
            raise
        return name.strip()


def price_table_from_dict(raw: Any, *, where: str = "price table") -> PriceTable:
    """Build a :class:`PriceTable` from the schema of ``data/prices/list-prices.yaml``:
    ``rows: {device: {on_demand: {usd_per_gpu_hour, provider, product, url, read_from, date} | null,
    committed: ... | null, why: ...}}``."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("rows"), Mapping):
        raise SpecError(f"{where}: expected a mapping with 'rows' (device -> tiers); see docs/cost-energy.md")
    prices: dict[tuple[str, str], Price] = {}
    missing: dict[str, str] = {}
    for name, row in raw["rows"].items():
        hw = _hardware_id(str(name))
        if not isinstance(row, Mapping):
            raise SpecError(f"{where}: row {name!r} must map tiers ({', '.join(TIERS)}) to prices, got {row!r}")
        unknown = set(row) - {*TIERS, "why"}
        if unknown:
            raise SpecError(f"{where}: row {name!r} has unknown keys {sorted(unknown)}; expected: "
                            f"{', '.join(TIERS)}, why")
        for tier in TIERS:
            cell = row.get(tier)
            if cell is None:
                continue
            if isinstance(cell, (int, float)) and not isinstance(cell, bool):
                cell = {"usd_per_gpu_hour": cell}
            if not isinstance(cell, Mapping) or "usd_per_gpu_hour" not in cell:
                raise SpecError(f"{where}: {name} {tier} must give usd_per_gpu_hour, got {cell!r}")
            prices[(hw, tier)] = Price(hardware=hw, tier=tier, usd_per_gpu_hour=cell["usd_per_gpu_hour"],
                                       **{k: str(cell.get(k) or "") for k in
                                          ("provider", "product", "url", "read_from", "date")})
        if row.get("why"):
            missing[hw] = str(row["why"])
    return PriceTable(prices=prices, missing=missing)


@cache
def bundled_prices() -> PriceTable:
    """The bundled table (``data/prices/list-prices.yaml``)."""
    f = resources.files("serveplan.specs").joinpath("data").joinpath("prices").joinpath("list-prices.yaml")
    return price_table_from_dict(yaml.safe_load(f.read_text()), where="list-prices.yaml")


def load_price_table(path: str | Path) -> PriceTable:
    """A price table file (``--prices FILE.yaml``), same schema as the bundled one."""
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"prices file {str(path)!r} does not exist")
    try:
        raw = yaml.safe_load(p.read_text())
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecError(f"prices file {str(path)!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return price_table_from_dict(raw, where=f"prices file {str(path)!r}")


def parse_price_overrides(text: str | None) -> dict[str, float]:
    """``"h100-sxm=2.49,h200=3.1"`` -> ``{"h100-sxm": 2.49, "h200": 3.1}`` (device ids or aliases;
    US dollars per GPU-hour)."""
    out: dict[str, float] = {}
    if not text:
        return out
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        name, eq, value = part.partition("=")
        if not eq or not name.strip():
            raise SpecError(f"price={part!r}; expected DEVICE=USD_PER_GPU_HOUR, e.g. h100-sxm=2.49 "
                            "(several comma-separated)")
        out[_hardware_id(name)] = check_number(f"price {name.strip()}", value.strip(), low=0, low_open=True,
                                               unit="US dollars per GPU-hour")
    return out


def price_table(*, prices_file: str | Path | None = None, overrides: str | None = None,
                tier: str = "on_demand") -> PriceTable:
    """The table a run uses: the bundled one, or ``prices_file``'s rows over it, then ``overrides``
    (``--price``) for ``tier``."""
    if tier not in TIERS:
        raise SpecError(f"price-tier={tier!r}; expected one of: {', '.join(TIERS)}")
    table = bundled_prices()
    if prices_file is not None:
        extra = load_price_table(prices_file)
        table = PriceTable(prices={**table.prices, **extra.prices}, missing={**table.missing, **extra.missing})
    return table.with_overrides(parse_price_overrides(overrides), tier)


def get_price(hardware: str, tier: str = "on_demand") -> Price:
    """The bundled price of ``hardware`` (catalog id or alias) in ``tier``.

    Raises
    ------
    SpecError
        Unknown tier, or no public price for the device in that tier (the message says why).
    """
    return bundled_prices().get(_hardware_id(hardware), tier)
