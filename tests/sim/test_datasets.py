"""Bundled request-length distributions (quantile tables of Vidur's processed traces)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from serveplan.errors import SpecError
from serveplan.sim import Workload
from serveplan.sim.datasets import length_table
from serveplan.specs.catalog import list_datasets


@pytest.mark.parametrize("name", ["azure-conv", "azure-code", "arxiv-sum", "sharegpt", "mlperf-openorca",
                                  "mlperf-mixtral"])
def test_dataset_carries_attribution_and_licence(name: str) -> None:
    t = length_table(name)
    assert ("vidur" in t.source or "performance-dashboard" in t.source) and t.licence and t.attribution
    assert len(t.input_quantiles) == 201 and t.output_quantiles.shape == (5, 101)


@pytest.mark.parametrize("name", list_datasets())
def test_samples_reproduce_the_source_means_and_medians(name: str) -> None:
    t = length_table(name)
    w = Workload.from_dataset(name, 40000, seed=3)
    # means of the source trace are written in the data file; linear interpolation between
    # 0.5%-spaced quantiles reproduces them within a few percent (the top 0.5% is spread linearly)
    assert w.input_lengths.mean() == pytest.approx(t.mean_input, rel=0.05)
    assert w.output_lengths.mean() == pytest.approx(t.mean_output, rel=0.12)
    assert np.median(w.input_lengths) == pytest.approx(float(np.interp(0.5, np.linspace(0, 1, 201),
                                                                       t.input_quantiles)), rel=0.03)
    assert w.input_lengths.min() >= 1 and w.output_lengths.min() >= 1


def test_arxiv_keeps_its_negative_length_correlation() -> None:
    # Vidur filtered arXiv to <= 4096 tokens in all, so long articles have short summaries
    # (Pearson -0.46 in the source); tables by prompt fifth keep most of it
    w = Workload.from_dataset("arxiv-sum", 20000, seed=1)
    assert np.corrcoef(w.input_lengths, w.output_lengths)[0, 1] < -0.2


def test_same_seed_same_lengths_and_unknown_dataset() -> None:
    a = Workload.from_dataset("azure-conv", 500, seed=7)
    b = Workload.from_dataset("azure-conv", 500, seed=7)
    assert a == b
    assert a != Workload.from_dataset("azure-conv", 500, seed=8)
    with pytest.raises(SpecError, match="unknown dataset 'azure'.*azure-code"):
        Workload.from_dataset("azure", 10)


@pytest.mark.parametrize(("name", "stated"), [("mlperf-openorca", "mlperf-openorca-24576"),
                                              ("mlperf-mixtral", "mlperf-mixtral-15k")])
def test_mlperf_tables_match_the_stated_dataset_figures(name: str, stated: str) -> None:
    # validate/data/datasets-mlperf.yaml states each official set's mean, median and longest prompt
    # (computed from the same per-sample list when that file was written); the table built from the
    # list by benchmarks/build_datasets.py must give the same figures
    import yaml

    from serveplan.validate import suite
    ds = yaml.safe_load((Path(suite.__file__).parent / "data" / "datasets-mlperf.yaml").read_text())["datasets"][stated]
    t = length_table(name)
    assert "openshift-psap/performance-dashboard" in t.source and "Apache-2.0" in t.licence
    assert t.mean_input == pytest.approx(ds["input_tokens"]["mean"], abs=0.05)
    assert t.input_quantiles[100] == ds["input_tokens"]["p50"]
    assert t.input_quantiles[-1] == ds["input_tokens"]["max"]
    if stated == "mlperf-mixtral-15k":   # outputs are the reference run's: its tokens per sample
        assert t.mean_output == pytest.approx(ds["output_tokens"]["mean"], abs=0.05)
    # the stated set names its table, and that is what the goodput check draws from
    from serveplan.validate.rows import dataset_lengths
    assert ds["length_table"] == name and dataset_lengths()[stated]["table"] == name


def test_sharegpt_keeps_the_serving_benchmark_filter() -> None:
    # vLLM's serving benchmark keeps prompts and outputs of at least 4 tokens, prompts of at most
    # 1,024 and both turns at most 2,048 (benchmark_serving.py sample_sharegpt_requests): the table's
    # extremes respect the filter, and its means are the 16,384 sampled requests' (219.6 / 199.3,
    # computed from the CSV the table was built from)
    t = length_table("sharegpt")
    assert t.input_quantiles[0] >= 4 and t.input_quantiles[-1] <= 1024
    assert t.output_quantiles.min() >= 4 and t.output_quantiles.max() <= 2048 - 4
    assert (t.mean_input, t.mean_output) == (219.6, 199.3)


def test_scaled_to_reaches_the_stated_means_and_leaves_an_unstated_side() -> None:
    # a source prints its mean lengths; the table gives the spread: each side scaled by mean / drawn mean
    w = Workload.from_dataset("sharegpt", 4000, seed=2)
    s = w.scaled_to(mean_output=300.0)
    assert np.array_equal(s.input_lengths, w.input_lengths)
    assert abs(float(np.mean(s.output_lengths)) - 300.0) < 0.5 and s.output_lengths.min() >= 1
    both = w.scaled_to(100.0, 50.0, name="x")
    assert abs(float(np.mean(both.input_lengths)) - 100.0) < 0.5 and both.name == "x"
    assert both.num_requests == w.num_requests and both != w
