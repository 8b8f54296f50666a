"""GPUStack's performance-lab rows (benchmarks/gpustack_perflab_rows.py): they load whole, every run keeps all of
its figures, and the mapping reads their load, lengths and flags as the pages state them."""

from __future__ import annotations

import collections
import re

import pytest

from serveplan.validate.mapping import (
    Unmappable,
    _flags,
    _lengths,
    _requests,
    _setup,
    _spec,
    _workload,
    predict,
    simulation_key,
)
from serveplan.validate.rows import load_rows, load_sources

#: rows per page as the generator wrote them from gpustack/gpustack @ 47277d79 (12 figures per result block;
#: result blocks counted by `grep -c "Serving Benchmark Result"` on each page)
PAGE_ROWS = {
    "deepseek-r1-h200": 180, "deepseek-v32-h200": 336, "glm-45-air-a100": 168, "glm-45-air-h100": 180,
    "glm-4x-a100": 60, "glm-4x-h100": 36, "glm-4x-h200": 180, "gpt-oss-120b-a100": 192, "gpt-oss-120b-h100": 216,
    "gpt-oss-20b-a100": 156, "gpt-oss-20b-h100": 156, "qwen3-14b-a100": 180, "qwen3-14b-h100": 180,
    "qwen3-235b-a22b-a100": 180, "qwen3-235b-a22b-h100": 168, "qwen3-30b-a3b-910b": 156, "qwen3-32b-a100": 180,
    "qwen3-32b-h100": 156, "qwen3-8b-910b": 180, "qwen3-8b-h100-latency": 300,
}


def _rows(page: str):
    return [r for r in load_rows() if r.source == f"gpustack-perflab-{page}"]


def _row(key: str):
    return next(r for r in load_rows() if r.key == key)


def test_every_page_loads_with_its_row_count():
    counts = collections.Counter(r.source for r in load_rows() if r.source.startswith("gpustack-perflab-"))
    assert counts == {f"gpustack-perflab-{p}": n for p, n in PAGE_ROWS.items()}
    assert sum(counts.values()) == 3540
    assert all(load_sources()[s].url.startswith("https://github.com/gpustack/gpustack/blob/47277d79") for s in counts)


def test_every_run_keeps_its_twelve_figures_and_they_share_one_simulation():
    runs = collections.defaultdict(list)
    for r in load_rows():
        if r.source.startswith("gpustack-perflab-"):
            runs[(r.source, r.id.split("-")[0])].append(r)
    assert all(len(rs) == 12 for rs in runs.values())
    assert all(len({simulation_key(r) for r in rs}) == 1 for rs in runs.values())


def test_a_figure_is_the_printed_number_in_si_units():
    # qwen3-14b/h100.md line 100: "Mean TTFT (ms): 22141.21" (vLLM 0.11.0, ShareGPT, 1000 prompts at t=0)
    row = _row("gpustack-perflab-qwen3-14b-h100/run01-ttft-mean")
    assert row.value == pytest.approx(22.14121) and row.engine == "vllm" and row.engine_version == "0.11.0"
    assert "line 100" in row.where and "22141.21" in row.where
    assert row.kind == "TTFT" and _row("gpustack-perflab-qwen3-14b-h100/run01-total_tokens_per_s-mean").kind == \
        "throughput"


def test_load_and_lengths_follow_vllm_bench_serve():
    burst = _row("gpustack-perflab-qwen3-32b-h100/run06-ttft-mean")          # "# random 32K input", no concurrency
    assert burst.load["kind"] == "rate" and burst.load["value"] == "inf" and _requests(burst) == 100
    assert _lengths(burst)[:3] == (32000, 100, "fixed")     # vLLM's random dataset at range ratio 0: fixed
    closed = _row("gpustack-perflab-qwen3-8b-h100-latency/run18-ttft-mean")  # "# BS=1": Maximum request concurrency 1
    assert closed.load == {"kind": "concurrency", "value": 1, "requests": 100}
    inp, out, how, _ = _lengths(closed)
    # a ShareGPT run: drawn from the bundled ShareGPT table (vLLM's own sampler), scaled to the printed means
    assert how == "table:sharegpt" and inp == pytest.approx(232.6) and out == pytest.approx(220.61)
    wl = _workload(closed, _requests(closed))[0]
    assert wl.num_requests == 100
    assert float(wl.input_lengths.mean()) == pytest.approx(232.6, abs=0.5)     # rounding to whole tokens
    assert float(wl.output_lengths.mean()) == pytest.approx(220.61, abs=0.5)
    assert wl.input_lengths.max() > 3 * wl.input_lengths.min()                 # the table's spread, not one length


def test_a_burst_goes_to_the_server_and_an_offline_run_does_not(monkeypatch):
    # qwen3-32b/h100.md run 6: "vllm bench serve" without --request-rate (inf) and without --max-concurrency: all
    # 100 prompts reach the running server at t=0, a closed loop of 100 clients sending one request each, with
    # the server's online defaults (token budget 8192 on H100, vllm-0.11.yaml) and its API server's work
    from serveplan.validate import mapping

    seen = {}

    def spy(cfg, **kw):
        seen["cfg"] = cfg
        return real(cfg, **kw)

    real = mapping.simulate
    monkeypatch.setattr(mapping, "simulate", spy)
    p = predict(_row("gpustack-perflab-qwen3-32b-h100/run06-requests_per_s-mean"))
    cfg = seen["cfg"]
    assert cfg.concurrency == 100 and not cfg.offline and cfg.workload.num_requests == 100
    assert cfg.fleet.collocated.batching.step_token_budget == 8192 and cfg.engine.frontend_s > 0
    assert p.how.endswith("100 requests, every request at t=0 to the server") and p.regime == "offline"


def test_vllm_async_scheduling_in_the_serving_script_turns_overlap_scheduling_on():
    # gpt-oss-20b/h100.md run 4 serves with "vllm serve openai/gpt-oss-20b --async-scheduling" (vLLM 0.11.0, where
    # it is opt-in); run 1 without it keeps the release's default
    on = _setup(_row("gpustack-perflab-gpt-oss-20b-h100/run04-ttft-mean")).engine
    off = _setup(_row("gpustack-perflab-gpt-oss-20b-h100/run01-ttft-mean")).engine
    assert on.name == off.name == "vllm-0.11" and on.overlap_scheduling and not off.overlap_scheduling


def test_a_result_block_printed_for_two_accelerators_is_used_for_neither():
    # glm-4.5-air/h100.md run 8 ("random 32K input", vLLM) prints every figure of a100.md run 7 to the last
    # digit ("Mean TTFT (ms): 248013.29" on both pages): a pasted block, marked copy_of on both pages
    h100 = _row("gpustack-perflab-glm-45-air-h100/run08-ttft-mean")
    a100 = _row("gpustack-perflab-glm-45-air-a100/run07-ttft-mean")
    assert h100.value == a100.value and h100.copy_of == "gpustack-perflab-glm-45-air-a100/run07"
    assert a100.copy_of == "gpustack-perflab-glm-45-air-h100/run08"
    for row in (h100, a100):
        with pytest.raises(Unmappable, match="one of the two result blocks is a copy"):
            predict(row)
    assert not _row("gpustack-perflab-glm-45-air-h100/run01-ttft-mean").copy_of   # ShareGPT run: its own


def test_flags_in_the_serving_script_are_read_and_speculation_by_flags_is_not_mapped():
    variant = _row("gpustack-perflab-qwen3-14b-a100/run07-ttft-mean")   # TRT-LLM, result label --max_num_tokens=32768
    assert _flags(variant) == {"token_budget": 32768}
    with pytest.raises(Unmappable, match="speculative decoding stated by engine flags"):
        _spec(_row("gpustack-perflab-deepseek-r1-h200/run06-ttft-mean"))
    assert re.search(r"dp_attention", str(_row("gpustack-perflab-deepseek-r1-h200/run04-ttft-mean").layout))
