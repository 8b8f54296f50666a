"""benchmarks/validate_offline_trtllm.py: the published rows it reads and trtllm-bench's batch
heuristic it writes out (hand derivations below; the simulation itself runs only in the benchmark)."""

from __future__ import annotations

from bench_modules import load

from serveplan import get_hardware, get_model

vo = load("validate_offline_trtllm")


def _row(**kw: object) -> object:
    base = dict(model="llama-3.1-8b", checkpoint="nvidia/Llama-3.1-8B-Instruct-FP8", hardware="h100-sxm", gpus=1,
                tp=1, pp=1, dtype="fp8", isl=1000, osl=1000, num_requests=3000, output_tok_s=15220.0)
    base.update(kw)
    return vo.Row(**base)


def test_the_published_rows_map_onto_the_catalog() -> None:
    rows = vo.load_rows()
    # dense: 8B 20, 70B 40 + 40 (RTX PRO 6000 PP 1-8), 405B 40 + 6; MoE on one GPU: Qwen3-30B-A3B 30, Scout 20
    assert len(rows) == 196
    assert len({r.key for r in rows}) == len(rows)
    for r in rows:
        get_model(r.model)
        get_hardware(r.hardware)
        assert r.gpus == r.tp * r.pp and r.dtype in vo.BYTES_PER_ELEM and r.output_tok_s > 0
    # one value checked against the overview: Llama 3.1 8B, H100 TP1 FP8, 1000/1000 -> 15,220 tokens/s
    r = next(r for r in rows
             if r.model == "llama-3.1-8b" and r.hardware == "h100-sxm" and (r.isl, r.osl) == (1000, 1000))
    assert r.output_tok_s == 15220 and r.num_requests == 3000


def test_bench_settings_follow_trtllm_bench_for_an_fp8_checkpoint() -> None:
    # Llama-3.1-8B FP8, one H100, 1000/1000 (tuning.py calc_engine_setting, by hand):
    # engine 8,030,261,248 elements x 1 B = 7.479 GiB; NVML total 81,559 MiB = 79.647 GiB;
    # cache (79.647 - 7.479) x 0.90 = 64.95 GiB; per token 2 x 32 layers x 8 KV heads x 128 x 1 B
    # = 6.104e-5 GiB; requests 64.95 / (6.104e-5 x 2000) = 532.1 -> batch 128 x ceil(4.16) = 640;
    # tokens 532.1 x (1 + 1000/1000) = 1064 -> at least 2048; chunking off: max(2048, 1000 + 640) = 2048
    assert get_model("llama-3.1-8b").num_parameters() == 8_030_261_248
    assert vo.bench_settings(_row()) == (640, 2048)
    # 2048/128: requests 64.95 / (6.104e-5 x 2176) = 489.1 -> 128 x ceil(3.82) = 512; tokens
    # 489.1 x (1 + 16) = 8314 -> 1024 x ceil(8.12) = 9216 (>= 2048 + 512)
    assert vo.bench_settings(_row(isl=2048, osl=128)) == (512, 9216)


def test_bench_settings_count_nvfp4_weights_as_stored() -> None:
    # Llama-3.3-70B NVFP4 on one B200, 2048/2048: the checkpoint stores the 16-bit embedding and LM
    # head (2 x 128,256 x 8,192 = 2.10e9 elements) and the linear weights packed two per byte with one
    # FP8 scale per 16 (68.45e9 x 0.5625 = 38.5e9): 40.6e9 elements x 0.5 B = 18.9 GiB. Cache
    # (179.06 - 18.9) x 0.90 = 144.1 GiB; per token 2 x 80 x 8 x 128 B = 1.526e-4 GiB; requests
    # 144.1 / (1.526e-4 x 4096) = 230.6 -> 32 x ceil(7.2) = 256; tokens max(2048, 2048 + 256) = 2304
    row = _row(model="llama-3.1-70b", hardware="b200", dtype="nvfp4", isl=2048, osl=2048)
    assert abs(vo.checkpoint_param_count(get_model("llama-3.1-70b"), "nvfp4") / 40.6e9 - 1) < 0.01
    assert vo.bench_settings(row) == (256, 2304)
    # a larger KV share can only raise the limits
    assert vo.bench_settings(row, kv_fraction=0.95) >= (256, 2304)


def test_the_validate_rows_are_the_csv_as_the_generator_writes_it() -> None:
    # src/serveplan/validate/data/trtllm-docs-perf-overview-v1.0.yaml is benchmarks/trtllm_overview_rows.py's
    # output for the CSV (edit the CSV, rerun the generator), with the overview's commit from the CSV header
    gen = load("trtllm_overview_rows")
    assert gen.OUT.read_text() == gen.render(vo.load_rows())
    assert gen.source_commit() == "00f37686aa854010d68bcbd0f4ab000221541ca6"
