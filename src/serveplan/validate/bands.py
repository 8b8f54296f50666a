"""Prediction bands of simulations and of goodput, from a calibrated profile's uncertainty.

The profiles are drawn by :func:`serveplan.calibrate.bands.sample_profiles` (below the
simulator); this module runs each through the simulator (:func:`simulation_band`, ``serveplan
simulate --band``) or the goodput search (:func:`goodput_bands`, ``serveplan optimize --band``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from serveplan.calibrate.bands import Band, band_of, require_uncertainty, sample_profiles
from serveplan.optimize.goodput import GoodputResult, GoodputSettings, max_goodput
from serveplan.sim import SimulationConfig, SimulationResult, simulate


def simulation_band(cfg: SimulationConfig, nominal: SimulationResult, samples: int, *,
                    seed: int = 0) -> dict[str, Band]:
    """Bands of a simulation's P90 TTFT, P90 TPOT (seconds) and throughput (requests/s): the
    same request stream (same seed) simulated with ``samples`` profiles drawn from the
    uncertainty of ``cfg.profile``."""
    require_uncertainty(cfg.profile)
    vals: dict[str, list[float]] = {"ttft_p90_s": [], "tpot_p90_s": [], "throughput_rps": []}
    for p in sample_profiles(cfg.profile, samples, seed=seed):
        r = simulate(dataclasses.replace(cfg, profile=p))
        vals["ttft_p90_s"].append(r.ttft_s.p90)
        vals["tpot_p90_s"].append(r.tpot_s.p90)
        vals["throughput_rps"].append(r.throughput_rps)
    nom = {"ttft_p90_s": nominal.ttft_s.p90, "tpot_p90_s": nominal.tpot_s.p90,
           "throughput_rps": nominal.throughput_rps}
    return {k: band_of(v, nom[k]) for k, v in vals.items()}


@dataclass(frozen=True, slots=True)
class GoodputBand:
    """Goodput band of one strategy and whether it can be told apart from the best one."""

    name: str
    goodput: Band               # requests/s
    per_device: Band            # requests/s per device (the ranking's measure)
    indistinguishable: bool     # P10-P90 of per_device overlaps the best strategy's

    def to_dict(self) -> dict[str, object]:
        return {**self.goodput.to_dict(), "per_device": self.per_device.to_dict(),
                "cannot_be_told_apart_from_best": self.indistinguishable}


def goodput_bands(strategies: list[GoodputResult], settings: GoodputSettings, samples: int, *,
                  seed: int = 0) -> list[GoodputBand]:
    """Goodput of each strategy recomputed (:func:`serveplan.optimize.goodput.max_goodput`) with
    ``samples`` profiles drawn from the uncertainty of ``settings.profile``; the same draws for
    every strategy, so their bands are comparable. The first strategy is the reference (best):
    a strategy whose per-device P10-P90 overlaps the best one's cannot be told apart from it."""
    require_uncertainty(settings.profile)
    profiles = sample_profiles(settings.profile, samples, seed=seed)
    out: list[GoodputBand] = []
    for r in strategies:
        g = [max_goodput(r.candidate, dataclasses.replace(settings, profile=p)) for p in profiles]
        n = r.candidate.num_devices
        out.append(GoodputBand(r.name, band_of([x.goodput_rps for x in g], r.goodput_rps),
                               band_of([x.goodput_rps / n for x in g], r.goodput_per_device), False))
    if out:
        best = out[0].per_device
        out = [dataclasses.replace(b, indistinguishable=i > 0 and b.per_device.overlaps(best))
               for i, b in enumerate(out)]
    return out
