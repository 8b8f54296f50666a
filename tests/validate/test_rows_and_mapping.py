"""The bundled measured rows load whole, and the mapping reads the settings each source states."""

from __future__ import annotations

import re

import pytest

from serveplan.specs.catalog import list_hardware
from serveplan.validate.confidence import ACCELERATOR_FAMILY
from serveplan.validate.mapping import Unmappable, _flags, _lengths, _setup, _spec, _unit_scale, predict
from serveplan.validate.rows import KINDS, load_rows, load_sources


def _row(key: str):
    return next(r for r in load_rows() if r.key == key)


def test_every_row_loads_with_a_known_kind_and_a_unique_key():
    rows = load_rows()
    assert len(rows) >= 340
    assert len({r.key for r in rows}) == len(rows)
    assert {r.kind for r in rows} <= set(KINDS)
    assert {r.source for r in rows} <= set(load_sources())


def test_no_mlperf_round_from_v5_1_on_is_bundled():
    """MLPerf Inference v5.1 and later are held back as an exam: no file may hold them."""
    for sid, src in load_sources().items():
        m = re.search(r"mlperf-inference-v(\d+)\.(\d+)", sid)
        if m:
            assert (int(m.group(1)), int(m.group(2))) <= (5, 0), sid
        assert "v5.1" not in src.title and "v6" not in src.title


def test_every_catalog_hardware_has_a_family():
    assert set(list_hardware()) <= set(ACCELERATOR_FAMILY)


def test_engine_flags_and_mtp_are_read_from_the_stated_settings():
    row = _row("sglang-blog-2025-09-amd-mi300x-mtp/random-c4-mtp")
    assert _flags(row) == {"memory_fraction": 0.85, "chunk_size": 131072}
    spec = _spec(row)
    assert spec is not None and spec.k == 2
    assert _spec(_row("sglang-blog-2025-09-amd-mi300x-mtp/random-c4-no-mtp")) is None
    opt = _row("vllm-blog-2024-10-mi300x/llama31-405b-8xmi300x-optimized-qps1000")
    assert _flags(opt) == {"max_batch": 1024, "scheduler": "prefill-first"}
    default = _row("vllm-blog-2024-10-mi300x/llama31-405b-8xmi300x-default-qps16")
    assert _flags(default) == {"max_batch": 1024, "token_budget": 1024}


def test_a_trtllm_bench_run_without_batch_limits_takes_trtllm_benchs_heuristic():
    # Llama-3.1-8B FP8 on one H100 at 1000/1000: 640 sequences, 2,048 tokens (derived by hand in
    # tests/benchmarks/test_offline_trtllm.py), and trtllm-bench's default KV share 0.90
    st = _setup(_row("trtllm-docs-perf-overview-v1.0/llama-3.1-8b-h100-sxm-fp8-tp1pp1-1000-1000"))
    assert dict(st.options) == {"max_batch": 640, "token_budget": 2048}
    assert st.engine.memory_fraction == 0.90 and st.workload.num_requests == 3000
    # the v0.14 overview (TensorRT engines built by trtllm-bench build) states no such rule: engine defaults
    old = _setup(_row("trtllm-docs-perf-overview-v0.14/llama-3.1-8b-h100-sxm-fp8-tp1-1000-1000"))
    assert dict(old.options) == {}


def test_request_lengths_follow_the_source():
    assert _lengths(_row("vllm-blog-2026-04-fp8-kvcache/llama-3.1-8b-bf16-ttft-p50"))[:3] == (20000, 2000, "uniform15")
    assert _lengths(_row("sglang-blog-2025-09-amd-mi300x-mtp/random-c1-mtp"))[2] == "uniform-to"
    inp, out, how, notes = _lengths(_row("vllm-dashboard-buildkite-9515/throughput-llama8b-tp1"))
    assert (inp, out, how) == (202, 179, "table:sharegpt") and "mean lengths" in notes[0]
    inp, out, how, notes = _lengths(_row("mlperf-inference-v4.1/nvidia-h200-sxm-141gbx8-trt-llama2-70b-99-offline"))
    assert (inp, out, how) == (222.33, 294.45, "fixed") and "mlperf-openorca-24576" in notes[0]
    with pytest.raises(Unmappable, match="request lengths of dataset 'mlperf-cnndm-13368' are not stated"):
        _lengths(_row("mlperf-inference-v4.1/nvidia-h200-sxm-141gbx8-trt-gptj-99-offline"))


def test_units_are_normalised_as_they_say():
    row = _row("sglang-blog-deepseek-ep-2025-05/dsv3-prefill-ep32-isl1k")    # tok/s per node (8 GPUs), 32 GPUs
    assert _unit_scale(row, 32) == pytest.approx(0.25)
    per_gpu = _row("trtllm-blog-2023-11-h200-launch/llama-2-70b-tp2-bs512-128-2048")
    assert _unit_scale(per_gpu, 2) == pytest.approx(0.5)


@pytest.mark.parametrize("key, why", [
    ("nvidia-blog-2025-03-dsr1-blackwell-record/dsr1-8xb200-max-throughput", "bound, not a measurement"),
    ("distserve-blog-2024-03/13b-2p1d-goodput", "is not modelled"),
    ("vllm-blog-2024-09-perf/llama3-8b-h100-throughput-v060-vs-v053", "ratio between settings"),
    ("mooncake-docs-vllm-store-a10/2p2d-tp1-rdma-ttft-mean", "a disaggregated fleet"),   # A10 now in the catalog
])
def test_rows_the_tool_cannot_be_asked_say_why(key, why):
    with pytest.raises(Unmappable, match=why):
        predict(_row(key))


def test_a_static_batch_row_is_the_estimate_of_that_batch():
    p = predict(_row("trtllm-blog-2023-11-h200-launch/llama-2-13b-tp1-bs128-128-2048"))
    assert p.regime == "static batch" and "static batch of 128" in p.how
    assert p.family == "NVIDIA Hopper" and p.model_class == "dense GQA" and p.context_tokens == 128 + 2048


def test_fp8_of_a_block_scaled_checkpoint_is_the_published_format():
    import dataclasses

    from serveplan.validate.mapping import _setup

    row = _row("sglang-blog-2025-09-amd-mi300x-mtp/random-c1-no-mtp")   # DeepSeek-V3, "fp8"
    assert row.dtype == "fp8"
    assert _setup(row).dtype == "fp8_block"        # 128 x 128 scales in its quantization_config
    stated = dataclasses.replace(row, settings=row.settings + " | per-tensor FP8 re-quantized")
    assert _setup(stated).dtype == "fp8"
    llama = next(r for r in load_rows() if r.model.startswith("llama") and r.dtype == "fp8")
    assert _setup(llama).dtype == "fp8"           # published in bf16: fp8 is per-tensor


def test_a_stated_token_batch_per_device_is_the_budget_of_each_dp_rank():
    from serveplan.validate.mapping import _setup

    row = _row("sglang-blog-deepseek-ep-2025-05/dsv3-prefill-ep32-isl4k-default-eplb")
    assert row.workload["tokens_per_device_batch"] == 16384      # "batch size 16,384 tokens per device"
    st = _setup(row)
    assert st.parallel.dp == 32
    assert st.options["token_budget"] == st.options["chunk_size"] == 16384 * 32


def test_the_engine_release_nearest_the_stated_version_is_simulated():
    import dataclasses

    from serveplan.validate.mapping import _engine, _version

    assert _version("0.5.4.post2") == (0, 5, 4) and _version(">=0.25.0") == (0, 25, 0)
    assert _version("0.4.3+rocm614") == (0, 4, 3) and _version("nightly-d223c90") is None
    assert _version("TensorRT 10.2.0 (TensorRT-LLM of the v4.1 NVIDIA code)") is None
    row = next(r for r in load_rows() if r.engine == "vllm")
    pick = {v: _engine(dataclasses.replace(row, engine_version=v)).name
            for v in ("0.11.0", "0.13.0", "0.33.1", "0.6.0", None, "nightly")}
    # the newest bundled release not newer than the stated one, else the oldest; unreadable: the default
    assert pick == {"0.11.0": "vllm-0.11", "0.13.0": "vllm-0.11", "0.33.1": "vllm-0.33", "0.6.0": "vllm-0.11",
                    None: "vllm-0.33", "nightly": "vllm-0.33"}
