"""benchmarks/silicon_data.py maps rows of aiconfigurator's CSV onto specs (synthetic rows: the
wheel itself is fetched only by the benchmark script, never here)."""

from __future__ import annotations

import pytest
from bench_modules import load

from serveplan import DType
from serveplan.sim.schedulers import policy_options

sd = load("silicon_data")

ROW = {
    "id": "llama_h100_trtllm_fp8_agg_1024x1024_c64", "backend": "trtllm", "backend_version": "1.2.0rc6",
    "model_path": "meta-llama/Llama-3.1-70B", "system": "h100_sxm", "precision": "fp8", "mode": "agg",
    "isl": "1024", "osl": "1024", "gemm_quant_mode": "fp8", "moe_quant_mode": "fp8", "batch_size": "64",
    "tp_size": "4", "pp_size": "1", "attention_dp_size": "1", "moe_tp_size": "1", "moe_ep_size": "1",
    "silicon_data_source": "db-dump; silicon_concurrency=64; measured=2026", "silicon_ttft_ms": "120.5",
    "silicon_tpot_ms": "20.0",
}


def test_aggregated_row_is_stated_in_si():
    c = sd.map_row(ROW)
    assert (c.model, c.hardware, c.engine) == ("llama-3.1-70b", "h100-sxm", "trtllm")
    assert c.dtype is DType.FP8 and c.kv_dtype is DType.FP8
    assert c.parallel.tp == 4 and c.concurrency == 64 and (c.isl, c.osl) == (1024, 1024)
    assert c.ttft_s == pytest.approx(0.1205) and c.tpot_s == pytest.approx(0.020)


def test_unknown_system_names_its_cause():
    with pytest.raises(sd.NotStatable) as exc:
        sd.map_row({**ROW, "system": "mi999"})
    assert exc.value.cause == "system mi999"


def test_bad_layout_is_a_layout_cause():
    with pytest.raises(sd.NotStatable) as exc:
        sd.map_row({**ROW, "tp_size": "3"})   # 3 does not divide 64 heads
    assert exc.value.cause == "layout"


def test_coverage_counts_causes():
    cov = sd.coverage([ROW, {**ROW, "system": "mi999"}])
    assert cov["statable"] == 1 and cov["left_out"][0]["cause"] == "system mi999"


def test_vllm_rows_run_as_aiconfigurator_deploys_them_and_the_choice_is_spelled_per_engine():
    # the generator's benchmark rule for an aggregated vLLM worker (generator/rule_plugin/benchmark/
    # vllm.rule): max_num_tokens = max_batch_size + isl + 1500, max_batch_size = the row's batch size
    row = {**ROW, "backend": "vllm", "backend_version": "0.12.0", "isl": "8192", "batch_size": "4",
           "silicon_data_source": "db-dump; silicon_concurrency=4; measured=2026"}
    dep = sd.deployment(sd.map_row(row))
    assert (dep.max_batch, dep.token_budget) == (4, 4 + 8192 + 1500)
    vs = load("validate_silicon")
    assert vs.AS_DEPLOYED == frozenset({"vllm"})        # chosen on H100 rows (docs/validation/harness.md)
    assert vs.deployed_engines("all") == frozenset({"vllm", "sglang", "trtllm"})
    assert vs.deployed_engines("none") == frozenset()
    assert vs.deployed_engines("trtllm,vllm") == frozenset({"trtllm", "vllm"})
    with pytest.raises(SystemExit, match="unknown engine 'vlm'"):
        vs.deployed_engines("vlm")


def test_held_slot_experiment_lowers_the_batch_limit_by_one_for_the_named_versions_only():
    vs = load("validate_silicon")
    assert vs.held_slot_rows("none") == frozenset()
    assert vs.held_slot_rows("trtllm@1.0.0rc3, vllm@0.12.0") == frozenset({("trtllm", "1.0.0rc3"), ("vllm", "0.12.0")})
    for bad in ("trtllm", "tensorrt@1.0", "trtllm@"):
        with pytest.raises(SystemExit, match="ENGINE@VERSION"):
            vs.held_slot_rows(bad)
    case = sd.map_row(ROW)  # batch_size 64, TP 4
    _, plain = vs.row_engine(case)
    _, held = vs.row_engine(case, held_slot=True)
    _, held_dep = vs.row_engine(case, as_deployed=True, held_slot=True)
    assert plain == {} and held == {"max_batch": 63}
    assert held_dep["max_batch"] == 63 and held_dep["token_budget"] == 64 + 1024 + 1500
    with pytest.raises(SystemExit, match="--no-docs"):
        vs.main(["--held-slot", "trtllm@1.0.0rc3"])


def test_output_length_slope_reads_one_completion_wait_as_one_and_none_as_zero():
    # Hand derivation: C clients, requests of osl tokens at TPOT t complete every osl t / C; a TTFT of
    # 0.1 s + osl t / C grows by t / C per output token (ratio 1); a constant TTFT gives 0.
    sl = load("silicon_osl_slope")
    osl, tpot, conc = [128, 256, 512], [0.008, 0.008, 0.008], 8
    assert sl.slope_ratio(osl, [0.1 + o * 0.008 / conc for o in osl], tpot, conc) == pytest.approx(1.0)
    assert sl.slope_ratio(osl, [0.2, 0.2, 0.2], tpot, conc) == pytest.approx(0.0, abs=1e-12)
    with pytest.raises(ValueError, match="two distinct"):
        sl.slope_ratio([128, 128], [0.1, 0.2], [0.01, 0.01], 4)
    rows = [sd.map_row({**ROW, "id": f"row_{o}", "osl": str(o), "silicon_ttft_ms": str(100 + o * 20.0 / 64)})
            for o in (128, 256, 512)]
    rows.append(sd.map_row({**ROW, "isl": "2048", "osl": "128"}))   # a set of one length: left out
    sets = sl.output_length_sets(rows)
    assert len(sets) == 1 and len(next(iter(sets.values()))) == 3
    ((key, n, ratio),) = sl.summary(rows)
    assert key == ("trtllm", "1.2.0rc6", "h100-sxm", "llama-3.1-70b", 64) and n == 1
    assert ratio == pytest.approx(1.0)


def test_diagnosis_names_a_completion_wait_only_where_the_measured_slope_shows_one():
    vs = load("validate_silicon")
    rows = [sd.map_row({**ROW, "id": f"row_{o}", "osl": str(o), "silicon_ttft_ms": str(100 + o * 20.0 / 64)})
            for o in (128, 256, 512)]
    slopes = vs.osl_slopes(rows)
    assert set(slopes) == {c.row_id for c in rows} and all(v == pytest.approx(1.0) for v in slopes.values())
    case = rows[-1]
    under = {"ttft_s": case.ttft_s / 2, "tpot_s": case.tpot_s, "kv_capacity_tokens": 10**7}
    assert "waits for the next completion" in vs.diagnose(case, under, slopes[case.row_id])
    assert "waits for the next completion" not in vs.diagnose(case, under, 0.0)
    assert "waits for the next completion" not in vs.diagnose(case, under)
    over = {**under, "ttft_s": case.ttft_s * 2}
    assert "over-predicted" in vs.diagnose(case, over, 1.0)


def test_rows_serve_the_checkpoints_own_quantized_format():
    # the row's family name ("fp8", "nvfp4") against the checkpoint's quantization_config:
    # DeepSeek-R1 and MiniMax-M2.5 publish FP8 with 128x128 block scales, gpt-oss MXFP4; a
    # 16-bit checkpoint quantized by the engine keeps the row's format
    ds = sd.map_row({**ROW, "model_path": "deepseek-ai/DeepSeek-R1", "tp_size": "8", "moe_ep_size": "8"})
    assert ds.dtype is DType.FP8_BLOCK
    oss = sd.map_row({**ROW, "model_path": "openai/gpt-oss-120b", "system": "b200_sxm", "gemm_quant_mode": "nvfp4",
                      "moe_quant_mode": "nvfp4", "precision": "fp4", "tp_size": "1"})
    assert oss.dtype is DType.MXFP4
    assert sd.map_row(ROW).dtype is DType.FP8          # Llama-3.1-70B: a BF16 checkpoint


DSR1 = {**ROW, "id": "dsr1_b200_trtllm_fp4_agg_1024x1024_c256_cfg191", "model_path": "deepseek-ai/DeepSeek-R1",
        "system": "b200_sxm", "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
        "silicon_data_source": "source_file=2026-04-06.csv; model=DeepSeek-R1; silicon_concurrency=256"}


def test_a_tp_n_ep_n_run_recorded_on_n_squared_ranks_is_stated_on_n_gpus():
    # the same measurement appears twice in the CSV: "tp 1, attention DP 64, moe 8 x 8, batch 4"
    # and "tp 1, attention DP 8, moe 1 x 8, batch 32" (791 ms / 23.9 ms); both are 8 GPUs
    folded = sd.map_row({**DSR1, "tp_size": "1", "attention_dp_size": "64", "moe_tp_size": "8",
                         "moe_ep_size": "8", "batch_size": "4"})
    plain = sd.map_row({**DSR1, "tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1",
                        "moe_ep_size": "8", "batch_size": "32"})
    assert folded.layout == plain.layout and folded.batch_size == plain.batch_size == 32
    assert (folded.parallel.tp, folded.parallel.dp, folded.parallel.ep) == (1, 8, 8)
    tp_fold = sd.map_row({**DSR1, "tp_size": "64", "attention_dp_size": "1", "moe_tp_size": "8", "moe_ep_size": "8"})
    assert (tp_fold.parallel.tp, tp_fold.parallel.dp, tp_fold.parallel.ep, tp_fold.batch_size) == (8, 1, 8, 64)
    # the gap-analysis collection's 4-GPU MoE TP 2 x EP 2 layout is a real one: kept
    gap = sd.map_row({**DSR1, "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/b.csv",
                      "tp_size": "4", "attention_dp_size": "", "moe_tp_size": "2", "moe_ep_size": "2"})
    assert (gap.parallel.tp, gap.parallel.ep) == (4, 2)


def test_each_measurement_counted_once():
    vs = load("validate_silicon")
    a = sd.map_row({**ROW, "id": "a"})
    b = sd.map_row({**ROW, "id": "b"})                               # the same run exported twice
    c = sd.map_row({**ROW, "id": "c", "silicon_ttft_ms": "120.6"})   # another run
    skipped: dict[str, int] = __import__("collections").defaultdict(int)
    assert [x.row_id for x in vs.unique_measurements([a, b, c], skipped)] == ["a", "c"]
    assert skipped["duplicate measurement"] == 1


def test_a_row_faster_than_the_gpus_peak_did_not_prefill_its_prompts():
    # hand derivation: Llama-3.1-70B (69.5e9 active non-embedding weights) FP8 on 4 H100 (1979
    # TFLOPS FP8 each), 1024/1024 at 64 clients, 120.5 ms / 20 ms: 64 x 1024 / (0.1205 + 1023 x
    # 0.020) = 3,184 prompt tokens/s x 2 x 69.5e9 = 4.4e14 FLOP/s, 5.6% of 7.9e15
    vs = load("validate_silicon")
    ok = sd.map_row(ROW)
    share = vs.implied_prefill_share(ok)
    assert 0.05 < share < 0.06
    # 15,000-token prompts at 448 clients answered in 0.75 s: 888,000 prompt tokens/s, 15x the peak
    fast = sd.map_row({**ROW, "isl": "15000", "osl": "500", "silicon_ttft_ms": "746.4", "silicon_tpot_ms": "13.67",
                       "silicon_data_source": "db-dump; silicon_concurrency=448"})
    skipped: dict[str, int] = __import__("collections").defaultdict(int)
    assert vs.implied_prefill_share(fast) > 10
    assert vs.faster_than_peak(fast, skipped) and not vs.faster_than_peak(ok, skipped)
    assert skipped == {"prefill faster than the GPUs' peak": 1}


def test_signed_errors_by_collection_and_concurrency():
    bc = load("silicon_by_concurrency")
    assert [bc.bucket(c) for c in (1, 4, 5, 16, 17, 64, 65)] == ["1-4", "1-4", "5-16", "5-16", "17-64", "17-64",
                                                                 "> 64"]
    assert bc.collection("source_file=/Users/x/aic-auto-gap-analysis/data/a.csv") == "gap analysis"
    assert bc.collection("db-dump/2026-04-27; config_id=1") == "database dump"
    assert bc.collection("source_file=2026-04-06.csv; model=DeepSeek-R1") == "file export"
    base = {"engine": "vllm", "concurrency": 4}
    rows = [{**base, "row_id": "a", "ttft_err": -0.5, "ttft_meas_s": 0.1, "ttft_pred_s": 0.05},
            {**base, "row_id": "b", "ttft_err": -0.3, "ttft_meas_s": 0.5, "ttft_pred_s": 0.5}]
    groups = bc.by_concurrency(rows, {"a": "db-dump/x", "b": "db-dump/y"})
    assert groups == {("database dump", "vllm", "1-4"): [-0.5, -0.3]}
    assert bc.low_concurrency_ratios(rows) == [("30-60 ms", 1, 2.0), ("400-inf ms", 1, 1.0)]


def test_inferencemax_rows_carry_their_clients_length_spread():
    # InferenceMAX's client: --random-range-ratio 0.8, lengths uniform integers in [int(0.8 L), L]
    vs = load("validate_silicon")
    imax = sd.map_row({**DSR1, "tp_size": "8", "moe_tp_size": "1", "moe_ep_size": "8"})
    gap = sd.map_row({**ROW, "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/a.csv"})
    assert imax.length_ratio == 0.8 and gap.length_ratio == 1.0
    fixed = vs.row_workload(imax, 40, spread=False)
    assert set(fixed.input_lengths.tolist()) == {1024}     # --fixed-lengths, an experiment
    assert set(vs.row_workload(gap, 40).input_lengths.tolist()) == {int(ROW["isl"])}   # a fixed-length client
    spread = vs.row_workload(imax, 400)                    # the default: the client's spread
    assert 819 <= spread.input_lengths.min() and spread.input_lengths.max() <= 1024
    assert 819 <= spread.output_lengths.min() and spread.output_lengths.max() <= 1024
    assert abs(spread.input_lengths.mean() - 921.5) < 10    # (819 + 1024) / 2
    assert (vs.row_workload(imax, 400, spread=True).input_lengths == spread.input_lengths).all()   # seeded


def test_client_experiments_count_their_requests_and_leave_the_warm_up_out():
    vs = load("validate_silicon")
    # genai-perf: 2 C warm-up requests, then the 10 C measured; a wave: the C clients once
    assert [vs.run_requests(4, s) for s in ("run", "warmed", "wave")] == [40, 48, 4]
    row = {**ROW, "osl": "32", "batch_size": "8", "backend": "vllm", "backend_version": "0.12.0",
           "silicon_data_source": "db-dump; silicon_concurrency=8; measured=2026"}
    case = sd.map_row(row)
    run, warmed = vs.predict(case), vs.predict(case, statistic="warmed")
    wave, slow = vs.predict(case, statistic="wave"), vs.predict(case, dispatch_scale=50.0)
    # the run's mean holds the first round, whose 8 prompts queue together; the warmed mean does not
    assert warmed["ttft_s"] < run["ttft_s"]
    # a lone wave is the first round alone, the slowest round of the run
    assert wave["ttft_s"] > run["ttft_s"]
    # prefill steps pay the host dispatch (decode runs under CUDA graphs)
    assert slow["ttft_s"] > run["ttft_s"]
    for argv in (["--statistic", "warmed"], ["--dispatch-scale", "3"], ["--fixed-lengths"], ["--as-configured"],
                 ["--no-overlap"]):
        with pytest.raises(SystemExit, match="--no-docs"):
            vs.main(argv)
    with pytest.raises(SystemExit, match="positive factor"):
        vs.main(["--dispatch-scale", "0", "--no-docs"])


def test_inferencemax_trtllm_llama_rows_run_with_their_launch_script():
    # InferenceX benchmarks/70b_fp8_b200_trt_slurm.sh at 9596d23d7 (2025-10-29): --max_num_tokens
    # 16384; batch_wait_timeout_iters 20 and batch_wait_max_tokens_ratio 0.9 only for 1k/1k below TP 8
    vs = load("validate_silicon")
    src = "source_file=2026-04-06.csv; model=Llama-3.1-70B; silicon_concurrency=8; measured=2025-10-29"
    row = {**ROW, "system": "b200_sxm", "tp_size": "2", "silicon_data_source": src}
    case = sd.map_row(row)
    assert sd.inferencemax_trtllm_llama(case) == (16384, (20, 0.9))
    spec, settings = vs.row_engine(case)
    o = policy_options(spec)
    assert (o.batch_wait_timeout_iters, o.batch_wait_max_tokens_ratio, settings) == (20, 0.9, {"token_budget": 16384})
    assert vs.launch_script_known(case)
    assert sd.inferencemax_trtllm_llama(sd.map_row({**row, "tp_size": "8"})) == (16384, (0, 0.0))
    assert sd.inferencemax_trtllm_llama(sd.map_row({**row, "osl": "8192"})) == (16384, (0, 0.0))
    # other engines, and the gap-analysis collection (no launch script read), keep the other rules
    assert sd.inferencemax_trtllm_llama(sd.map_row({**row, "backend": "vllm"})) is None
    gap = sd.map_row({**row, "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/a.csv"})
    assert sd.inferencemax_trtllm_llama(gap) is None and not vs.launch_script_known(gap)
    assert policy_options(vs.row_engine(gap)[0]).batch_wait_timeout_iters == 0


DSR1_B200 = {**ROW, "model_path": "deepseek-ai/DeepSeek-R1", "system": "b200_sxm", "precision": "fp8",
        "gemm_quant_mode": "fp8_block", "moe_quant_mode": "fp8_block", "tp_size": "8", "moe_tp_size": "8",
        "isl": "1024", "osl": "1024", "batch_size": "4"}


def _imax(row: dict[str, str], c: int, day: str) -> dict[str, str]:
    return {**row, "silicon_data_source": f"source_file=2026-04-06.csv; silicon_concurrency={c}; measured={day}"}


def test_inferencemax_trtllm_moe_rows_read_their_launch_script():
    # InferenceX benchmarks/dsr1_fp8_b200_trt.sh at dcc0f53a8 (2026-01-29): --max_num_tokens
    # max(ceil64(CONC + ISL + 64), 8192); 1k/1k from 64 clients batch_wait 40 / 0.8; attention DP
    # with attention_dp_config {enable_balance, timeout_iters 60, batching_wait_iters 0}
    vs = load("validate_silicon")
    low = sd.map_row(_imax(DSR1_B200, 4, "2026-02-05"))
    assert sd.inferencemax_trtllm(low) == sd.TrtllmScript(max_num_tokens=8192, memory_fraction=0.8)
    high = sd.map_row(_imax(DSR1_B200, 64, "2026-02-05"))
    assert sd.inferencemax_trtllm(high).batch_wait == (40, 0.8)
    # before 2026-01-29 (dsr1_fp8_b200_trt_slurm.sh): ceil64(C + ISL + 64), no batch waiting
    early = sd.inferencemax_trtllm(sd.map_row(_imax(DSR1_B200, 64, "2026-01-14")))
    assert (early.max_num_tokens, early.batch_wait) == (1152, (0, 0.0))
    adp = sd.map_row(_imax({**DSR1_B200, "tp_size": "1", "attention_dp_size": "8", "moe_tp_size": "1",
                            "moe_ep_size": "8"}, 128, "2026-01-14"))
    script = sd.inferencemax_trtllm(adp)
    assert (script.max_num_tokens, script.adp_balance) == (1216, (60, 0))
    # as launched (an experiment): the limits are per attention-DP rank
    spec, settings = vs.row_engine(adp, as_launched=True)
    adp_config = policy_options(spec).attention_dp_config
    assert (adp_config.enable_balance, adp_config.timeout_iters, adp_config.batching_wait_iters,
            settings["token_budget"]) == (True, 60, 0, 8 * 1216)
    assert vs.launch_script_known(adp) and not vs.launch_script_known(adp, as_launched=False)
    # the reported configuration since 2026-11-27; --as-configured (an experiment) keeps the engine's defaults
    assert policy_options(vs.row_engine(adp)[0]).attention_dp_config.timeout_iters == 60
    assert not policy_options(vs.row_engine(adp, as_launched=False)[0]).attention_dp_config.enable_balance
    # gpt-oss on B200: --max_num_tokens 20000 --max_batch_size 512, free memory 0.85, default balance
    oss = sd.map_row(_imax({**ROW, "model_path": "openai/gpt-oss-120b", "system": "b200_sxm", "precision": "fp4",
                            "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4", "tp_size": "1",
                            "attention_dp_size": "2", "moe_ep_size": "2", "moe_tp_size": "1"}, 64, "2026-02-05"))
    assert sd.inferencemax_trtllm(oss) == sd.TrtllmScript(max_num_tokens=20000, max_batch=512,
                                                          memory_fraction=0.85, adp_balance=(50, 10))
    # no measured day (the gap-analysis collection): no script
    assert sd.inferencemax_trtllm(sd.map_row(DSR1_B200)) is None


def test_inferencemax_sglang_rows_read_their_launch_script():
    # InferenceX benchmarks/single_node/dsr1_fp8_b200.sh at 12ba0ae07 (2026-03-25), TP 8:
    # --scheduler-recv-interval 30 from 16 clients (else 10), --chunked-prefill-size 32768,
    # --max-prefill-tokens 32768, --max-running-requests 128
    vs = load("validate_silicon")
    row = {**DSR1_B200, "backend": "sglang", "backend_version": "0.5.9"}
    few = sd.map_row(_imax(row, 4, "2026-03-25"))
    many = sd.map_row(_imax(row, 64, "2026-03-25"))
    assert sd.inferencemax_sglang(few) == sd.SGLangScript(10, 32768, 32768, 128)
    assert sd.inferencemax_sglang(many).recv_interval == 30
    spec, settings = vs.row_engine(many, as_launched=True)
    o = policy_options(spec)
    assert (o.scheduler_recv_interval, o.max_prefill_tokens) == (30, 32768)
    assert settings == {"max_batch": 128, "chunk_size": 32768, "token_budget": 32768}
    assert policy_options(vs.row_engine(many)[0]).scheduler_recv_interval == 30   # the default since 2026-11-27
    assert policy_options(vs.row_engine(many, as_launched=False)[0]).scheduler_recv_interval == 1   # --as-configured
    # FP4 (dsr1_fp4_b200.sh): --chunked-prefill-size 16384 --max-running-requests 256
    fp4 = sd.map_row(_imax({**row, "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4"},
                           4, "2026-03-25"))
    assert sd.inferencemax_sglang(fp4) == sd.SGLangScript(10, 16384, 16384, 256)
    # more clients than the script's 128 running requests: another script ran that row
    assert sd.inferencemax_sglang(sd.map_row(_imax(row, 256, "2026-03-25"))) is None
    # H200 scripts set no receive interval: not read
    assert sd.inferencemax_sglang(sd.map_row(_imax({**row, "system": "h200_sxm"}, 4, "2026-03-25"))) is None


def test_inferencemax_vllm_gpt_oss_rows_on_hopper_run_marlins_moe_from_the_day_their_script_forces_it():
    # InferenceX 4e52ed4c6 (2026-01-02, PR #327) added VLLM_MXFP4_USE_MARLIN=1 to the vLLM gpt-oss
    # scripts of H100 and H200; earlier runs, B200 and other engines keep the default path
    vs = load("validate_silicon")
    oss = {**ROW, "backend": "vllm", "backend_version": "0.18.0", "model_path": "openai/gpt-oss-120b",
           "system": "h200_sxm", "precision": "fp4", "gemm_quant_mode": "nvfp4", "moe_quant_mode": "nvfp4",
           "tp_size": "2", "moe_tp_size": "2"}
    case = sd.map_row(_imax(oss, 4, "2026-03-27"))
    assert sd.moe_backends(case) == {"mxfp4": "marlin"}
    assert vs.row_engine(case)[0].moe_backends == {"mxfp4": "marlin"}
    assert sd.moe_backends(sd.map_row(_imax({**oss, "system": "h100_sxm"}, 4, "2026-01-02"))) == {"mxfp4": "marlin"}
    for other in (_imax(oss, 4, "2025-12-08"), _imax({**oss, "system": "b200_sxm"}, 4, "2026-03-27"),
                  _imax({**oss, "backend": "trtllm", "backend_version": "1.2.0rc2"}, 4, "2026-03-27"), oss):
        assert sd.moe_backends(sd.map_row(other)) == {}
        assert vs.row_engine(sd.map_row(other))[0].moe_backends == {}


def test_rows_run_the_overlap_scheduling_their_server_ran():
    # vLLM: on by default from v0.14.0 (PR #27614) and set by every InferenceMAX vLLM script
    # (async-scheduling: true); off in aiconfigurator's vLLM 0.12.0 runs (no flag). TensorRT-LLM
    # and SGLang overlap by default: their engine files say so (None: no override).
    vs = load("validate_silicon")
    gap = {**ROW, "backend": "vllm", "silicon_data_source": "source_file=/Users/x/aic-auto-gap-analysis/data/a.csv"}
    old = sd.map_row({**gap, "backend_version": "0.12.0"})
    new = sd.map_row({**gap, "backend_version": "0.15.1"})
    imax = sd.map_row(_imax({**ROW, "backend": "vllm", "backend_version": ""}, 4, "2025-10-29"))
    assert (sd.overlap_scheduling(old), sd.overlap_scheduling(new), sd.overlap_scheduling(imax)) == (False, True, True)
    assert sd.overlap_scheduling(sd.map_row({**gap, "backend_version": "nightly-5b8c"})) is False
    trt = sd.map_row({**ROW, "backend": "trtllm"})
    assert sd.overlap_scheduling(trt) is None and vs.row_engine(trt)[0].overlap_scheduling
    assert not vs.row_engine(old)[0].overlap_scheduling and vs.row_engine(new)[0].overlap_scheduling
    # --no-overlap (an experiment): every engine plans each step after the previous one ends
    assert not any(vs.row_engine(c, overlap=False)[0].overlap_scheduling for c in (trt, new, imax))
