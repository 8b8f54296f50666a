"""Request lengths of real services: empirical distributions shipped as quantile tables.

``azure-conv`` and ``azure-code`` summarise the Azure LLM inference traces of 2023 (the
conversation and coding services studied by Splitwise), ``arxiv-sum`` the article and abstract
lengths of arXiv summarization (all three as processed in Microsoft's Vidur repository), and
``sharegpt`` the first two turns of ShareGPT V3 conversations as vLLM's serving benchmark samples
them (``vllm bench serve --dataset-name sharegpt``: seed 0, prompts of at most 1,024 tokens, both
turns at most 2,048; counted in a fork of Vidur). Each data
file (``specs/data/datasets/<name>.yaml``, with its source, licence and attribution) holds 201
quantiles of the prompt length and, per fifth of the prompt-length distribution, 101 quantiles
of the output length. A request is drawn by inverse transform: ``u ~ U(0, 1)`` gives the prompt
length (linear interpolation between quantiles) and picks the fifth; an independent ``v`` gives
the output length from that fifth's table. The prompt/output dependence of each trace is thereby
kept at the resolution of fifths (arXiv: correlation -0.46 in the source).

Arrival times are not taken from the traces: the rate, offline or closed-loop mode decide them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from serveplan.errors import SpecError
from serveplan.specs.catalog import get_dataset, list_datasets


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class LengthTable:
    """Quantile tables of one dataset (see the module docstring)."""

    name: str
    description: str
    source: str
    licence: str
    attribution: str
    input_quantiles: np.ndarray
    output_quantiles: np.ndarray  # shape (fifths, levels)
    mean_input: float
    mean_output: float
    correlation: float

    def sample(self, rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        """``n`` (prompt, output) lengths, integers >= 1."""
        qi, qo = self.input_quantiles, self.output_quantiles
        u = rng.random(n)
        v = rng.random(n)
        inp = np.interp(u, np.linspace(0.0, 1.0, len(qi)), qi)
        k = qo.shape[0]
        fifth = np.minimum((u * k).astype(np.int64), k - 1)
        levels = np.linspace(0.0, 1.0, qo.shape[1])
        out = np.empty(n)
        for b in range(k):
            sel = fifth == b
            out[sel] = np.interp(v[sel], levels, qo[b])
        return (np.maximum(np.rint(inp), 1).astype(np.int64), np.maximum(np.rint(out), 1).astype(np.int64))


def length_table(name: str) -> LengthTable:
    """The bundled :class:`LengthTable` ``name`` (``azure-conv``, ``azure-code``, ``arxiv-sum``, ``sharegpt``)."""
    if name not in list_datasets():
        get_dataset(name)  # raises the 'unknown dataset' error with the options
    raw = get_dataset(name)
    try:
        qi = np.asarray(raw["input_quantiles"], dtype=float)
        qo = np.asarray(raw["output_quantiles_by_input_fifth"], dtype=float)
    except (KeyError, ValueError):
        raise SpecError(f"dataset {name!r}: malformed quantile tables; "
                        "rebuild with benchmarks/build_datasets.py") from None
    if qi.ndim != 1 or qo.ndim != 2 or np.any(np.diff(qi) < 0) or np.any(np.diff(qo, axis=1) < 0):
        raise SpecError(f"dataset {name!r}: quantiles must be non-decreasing lists")
    return LengthTable(name=name, description=str(raw.get("description", "")), source=str(raw.get("source", "")),
                       licence=str(raw.get("licence", "")), attribution=str(raw.get("attribution", "")),
                       input_quantiles=qi, output_quantiles=qo, mean_input=float(raw.get("mean_input", qi.mean())),
                       mean_output=float(raw.get("mean_output", qo.mean())),
                       correlation=float(raw.get("correlation", 0.0)))
