"""Build the bundled length distributions (``--dataset``) from processed traces and per-sample length lists.

The shipped files hold quantile tables only, never the traces: 201 quantiles of the prompt length
and, for each fifth of the prompt-length distribution, 101 quantiles of the output length (so the
prompt/output correlation of each trace survives). Run once, with the three CSV files of
``data/processed_traces/`` of the public repository microsoft/vidur (MIT licence) in one folder,
and/or ``data/processed_traces/sharegpt_v3_filtered.csv`` of its fork JonnyKong/vidur (MIT)::

    python benchmarks/build_datasets.py --vidur DIR          # a snapshot of github.com/microsoft/vidur
    python benchmarks/build_datasets.py --sharegpt FILE      # JonnyKong/vidur's sharegpt_v3_filtered.csv

writes ``src/serveplan/specs/data/datasets/{azure-conv,azure-code,arxiv-sum}.yaml`` and
``sharegpt.yaml``. The ShareGPT file holds the first 16,384 requests that vLLM's serving benchmark
samples from ``ShareGPT_V3_unfiltered_cleaned_split.json`` (first two turns of each conversation,
``random.seed(0)`` shuffle, prompt and output of at least 4 tokens, prompt at most 1,024 and both at
most 2,048; ``vllm/benchmarks/benchmark_serving.py`` ``sample_sharegpt_requests`` at vllm-project/vllm
5fe6bf29, the sampler ``vllm bench serve --dataset-name sharegpt`` keeps), counted with the
Llama-3.1-8B-Instruct tokenizer (JonnyKong/vidur ``scripts/gen_sharegpt_length_trace.py``).

The two MLPerf Inference LLM datasets come from the per-sample token lengths of the official pickles that
openshift-psap/performance-dashboard lists (Apache-2.0; ``mlperf-data/summaries/``, written by its
``mlperf-data/original/generate_dataset_summaries.py``)::

    python benchmarks/build_datasets.py --mlperf DIR     # a snapshot's mlperf-data/summaries folder

writes ``mlperf-openorca.yaml`` (``llama2-70b-99.csv``: the 24,576 OpenOrca samples of llama2-70b,
Llama 2 tokens; its output column is the GPT-4 reference answer, mean 218.9, not what Llama 2
generates: the benchmark's own reference run generates 294.45 per sample, see
``validate/data/datasets-mlperf.yaml``) and ``mlperf-mixtral.yaml`` (``mixtral-8x7b.csv``: the 15,000
OpenOrca/GSM8K/MBXP samples of mixtral-8x7b, Mixtral tokens; its output column is the reference
run's own generation, mean 144.84, the README's tokens per sample exactly).
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src" / "serveplan" / "specs" / "data" / "datasets"
VIDUR = "https://github.com/microsoft/vidur/blob/7d47513363ec447a741ac5e47241580b47724fbf/data/processed_traces/"
SHAREGPT = ("https://github.com/JonnyKong/vidur/blob/941a76c34cc3135db0dd13250252e4b23f7ea103/data/processed_traces/"
            "sharegpt_v3_filtered.csv")
IN_LEVELS = 201   # prompt quantiles at 0, 0.5, ..., 100 %
OUT_LEVELS = 101  # output quantiles at 0, 1, ..., 100 % within each prompt bucket
BUCKETS = 5       # prompt-length fifths

DATASETS = {
    "azure-conv": {
        "file": "splitwise_conv.csv",
        "description": "Azure LLM inference trace 2023, conversation service (Splitwise, ISCA 2024)",
        "licence": "Azure LLM inference trace: CC-BY-4.0 (Azure/AzurePublicDataset); Vidur's processed CSV: MIT",
        "attribution": ("Patel et al., Splitwise: Efficient Generative LLM Inference Using Phase Splitting, ISCA 2024; "
                        "Azure/AzurePublicDataset AzureLLMInferenceTrace_conv; processed by microsoft/vidur"),
    },
    "azure-code": {
        "file": "splitwise_code.csv",
        "description": "Azure LLM inference trace 2023, coding service (Splitwise, ISCA 2024)",
        "licence": "Azure LLM inference trace: CC-BY-4.0 (Azure/AzurePublicDataset); Vidur's processed CSV: MIT",
        "attribution": ("Patel et al., Splitwise: Efficient Generative LLM Inference Using Phase Splitting, ISCA 2024; "
                        "Azure/AzurePublicDataset AzureLLMInferenceTrace_code; processed by microsoft/vidur"),
    },
    "arxiv-sum": {
        "file": "arxiv_summarization_stats_llama2_tokenizer_filtered_v2.csv",
        "description": ("arXiv summarization (Cohan et al., NAACL 2018): article and abstract lengths in Llama-2 "
                        "tokens, filtered by Vidur to at most 4096 tokens in all"),
        "licence": "Vidur's processed statistics: MIT (microsoft/vidur); only derived quantiles are shipped here",
        "attribution": ("Cohan et al., A Discourse-Aware Attention Model for Abstractive Summarization of Long "
                        "Documents, NAACL 2018; token statistics by microsoft/vidur (Agrawal et al., MLSys 2024)"),
    },
}
PSAP = "https://github.com/openshift-psap/performance-dashboard/blob/{commit}/mlperf-data/summaries/{file}"
MLPERF = {
    "mlperf-openorca": {
        "file": "llama2-70b-99.csv", "commit": "7cd1065d1e2c53ee745cbda08e2a8f13a42c93bb",
        "description": ("MLPerf Inference llama2-70b: the 24,576 OpenOrca samples of "
                        "open_orca_gpt4_tokenized_llama.sampled_24576.pkl, Llama 2 tokens; outputs are the GPT-4 "
                        "reference answers (mean 218.9), Llama 2's own reference run generates 294.45 per sample"),
        "licence": ("openshift-psap/performance-dashboard's per-sample length list: Apache-2.0; only derived "
                    "quantiles are shipped here"),
        "attribution": ("MLCommons mlcommons/inference language/llama2-70b (OpenOrca, Open-Orca/OpenOrca GPT-4 "
                        "augmented set); lengths listed by openshift-psap/performance-dashboard "
                        "mlperf-data/original/generate_dataset_summaries.py"),
    },
    "mlperf-mixtral": {
        "file": "mixtral-8x7b.csv", "commit": "67033baeaac181a3a35641dd2b86a7cb22d856dd",
        "description": ("MLPerf Inference mixtral-8x7b: the 15,000 OpenOrca, GSM8K and MBXP samples of "
                        "09292024_mixtral_15k_mintoken2_v1.pkl, Mixtral tokens; outputs are the reference run's "
                        "generations (mean 144.84 tokens per sample)"),
        "licence": ("openshift-psap/performance-dashboard's per-sample length list: Apache-2.0; only derived "
                    "quantiles are shipped here"),
        "attribution": ("MLCommons mlcommons/inference language/mixtral-8x7b; lengths listed by "
                        "openshift-psap/performance-dashboard mlperf-data/original/generate_dataset_summaries.py"),
    },
}
SHAREGPT_META = {
    "file": "sharegpt_v3_filtered.csv",
    "source": SHAREGPT,
    "description": ("ShareGPT V3 (ShareGPT_V3_unfiltered_cleaned_split), the first two turns as vLLM's serving "
                    "benchmark samples them: 16,384 requests, seed 0, vLLM's length filter, Llama-3.1 tokens"),
    "licence": ("JonnyKong/vidur's processed CSV: MIT (fork of microsoft/vidur); only derived quantiles are shipped "
                "here"),
    "attribution": ("ShareGPT conversations (anon8231489123/ShareGPT_Vicuna_unfiltered); sampled as "
                    "vllm-project/vllm benchmarks/benchmark_serving.py sample_sharegpt_requests; token counts by "
                    "JonnyKong/vidur scripts/gen_sharegpt_length_trace.py"),
}


def tables(inp: np.ndarray, out: np.ndarray) -> dict[str, object]:
    p_in = np.linspace(0.0, 1.0, IN_LEVELS)
    q_in = np.quantile(inp, p_in, method="linear")
    order = np.argsort(inp, kind="stable")
    ranks = np.empty(len(inp))
    ranks[order] = (np.arange(len(inp)) + 0.5) / len(inp)  # prompt quantile level of each request
    p_out = np.linspace(0.0, 1.0, OUT_LEVELS)
    by_bucket = []
    for b in range(BUCKETS):
        sel = (ranks >= b / BUCKETS) & (ranks < (b + 1) / BUCKETS)
        by_bucket.append([round(float(v), 1) for v in np.quantile(out[sel], p_out, method="linear")])
    return {
        "input_quantiles": [round(float(v), 1) for v in q_in],
        "output_quantiles_by_input_fifth": by_bucket,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vidur", type=Path, help="folder with microsoft/vidur's processed trace CSVs")
    ap.add_argument("--sharegpt", type=Path, help="JonnyKong/vidur's data/processed_traces/sharegpt_v3_filtered.csv")
    ap.add_argument("--mlperf", type=Path,
                    help="openshift-psap/performance-dashboard's mlperf-data/summaries folder (per-sample lengths)")
    args = ap.parse_args()
    if args.vidur is None and args.sharegpt is None and args.mlperf is None:
        ap.error("give --vidur DIR, --sharegpt FILE and/or --mlperf DIR")
    OUT.mkdir(parents=True, exist_ok=True)
    todo = [(name, {**meta, "source": VIDUR + meta["file"]}, args.vidur / meta["file"])
            for name, meta in DATASETS.items() if args.vidur is not None]
    if args.sharegpt is not None:
        todo.append(("sharegpt", SHAREGPT_META, args.sharegpt))
    if args.mlperf is not None:
        todo += [(name, {**meta, "source": PSAP.format(**meta)}, args.mlperf / meta["file"])
                 for name, meta in MLPERF.items()]
    for name, meta, path in todo:
        rows = list(csv.DictReader(path.open()))
        cols = ("input_length", "output_length") if name in MLPERF else ("num_prefill_tokens", "num_decode_tokens")
        inp = np.array([float(r[cols[0]]) for r in rows])
        out = np.array([float(r[cols[1]]) for r in rows])
        t = tables(inp, out)
        what = "a per-sample length list" if name in MLPERF else "a processed trace of Vidur"
        lines = [
            f"# {meta['description']}.",
            f"# Quantile tables built by benchmarks/build_datasets.py from {what};",
            "# the requests themselves are not shipped.",
            f"name: {name}",
            f"description: \"{meta['description']}\"",
            f"source: {meta['source']}",
            f"licence: \"{meta['licence']}\"",
            f"attribution: \"{meta['attribution']}\"",
            f"num_requests: {len(rows)}   # requests in the source",
            f"mean_input: {inp.mean():.1f}",
            f"mean_output: {out.mean():.1f}",
            f"median_input: {np.median(inp):.1f}",
            f"median_output: {np.median(out):.1f}",
            f"correlation: {np.corrcoef(inp, out)[0, 1]:.4f}   # Pearson, prompt vs output length",
            f"# prompt-length quantiles at {IN_LEVELS} evenly spaced levels from 0 to 1",
            f"input_quantiles: {t['input_quantiles']}",
            f"# output-length quantiles at {OUT_LEVELS} levels, one row per fifth of the prompt-length distribution",
            "output_quantiles_by_input_fifth:",
        ]
        lines += [f"  - {row}" for row in t["output_quantiles_by_input_fifth"]]  # type: ignore[union-attr]
        (OUT / f"{name}.yaml").write_text("\n".join(lines) + "\n")
        print(f"wrote {OUT / (name + '.yaml')} ({len(rows)} requests summarised)")


if __name__ == "__main__":
    main()
