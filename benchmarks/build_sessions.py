"""Build the bundled multi-turn session dataset from the Mooncake conversation trace.

Source: kvcache-ai/Mooncake, ``FAST25-release/traces/conversation_trace.jsonl`` (Apache-2.0;
Qin et al., "Mooncake: Trading More Storage for Less Computation", FAST'25): 12,031 requests of
Kimi's chat service over one hour, each with its input and output length and the hashes of its
512-token prompt blocks (block ``i``'s hash covers the prefix up to it).

A request continues a conversation when its prompt starts with another request's blocks beyond
the first one (block 0 is a system prompt every request shares): its *parent* is the earlier
request sharing the longest prefix. A turn's new input is what its prompt adds to the parent's
prompt and answer, ``input - parent input - parent output`` (when positive; otherwise, a prompt
that dropped part of the history, the tokens after the shared blocks). Written to
``src/serveplan/specs/data/sessions/mooncake-conversation.yaml``: 101 quantiles of the first
turn's prompt (the shared system prompt included), of a follow-up turn's new input and of the
output length, the share of follow-ups and the turns-per-conversation histogram.

Run: ``python benchmarks/build_sessions.py [path/to/conversation_trace.jsonl]`` (default: the
copy under /work/cache/mooncake/; fetch the repository to get it).
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "src/serveplan/specs/data/sessions/mooncake-conversation.yaml"
BLOCK = 512


def main(path: str = "/work/cache/mooncake/conversation_trace.jsonl") -> None:
    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    trie: dict[tuple[int, ...], int] = {}
    first_in: list[int] = []
    new_in: list[int] = []
    outs = [int(r["output_length"]) for r in rows]
    parent = [-1] * len(rows)
    reused = total = 0
    for i, r in enumerate(rows):
        h = tuple(r["hash_ids"])
        m, p = 0, -1
        for k in range(1, len(h) + 1):
            j = trie.get(h[:k])
            if j is None:
                break
            m, p = k, j
        reused += min(m * BLOCK, int(r["input_length"]))
        total += int(r["input_length"])
        if m >= 2:
            parent[i] = p
            pr = rows[p]
            add = int(r["input_length"]) - int(pr["input_length"]) - int(pr["output_length"])
            new_in.append(add if add > 0 else max(int(r["input_length"]) - m * BLOCK, 1))
        else:
            first_in.append(int(r["input_length"]))
        for k in range(1, len(h) + 1):
            trie[h[:k]] = i
    depth = [0] * len(rows)
    for i, p in enumerate(parent):
        depth[i] = depth[p] + 1 if p >= 0 else 1
    # turns of a conversation: the deepest turn of each root's descendants
    root = list(range(len(rows)))
    for i, p in enumerate(parent):
        if p >= 0:
            root[i] = root[p]
    turns: dict[int, int] = {}
    for i, d in enumerate(depth):
        turns[root[i]] = max(turns.get(root[i], 0), d)
    hist = Counter(turns.values())
    lv = np.linspace(0, 100, 101)

    def q(a: list[int]) -> list[int]:
        return [int(round(v)) for v in np.percentile(np.asarray(a, dtype=float), lv)]

    lines = [
        "# Built by benchmarks/build_sessions.py from the Mooncake conversation trace; do not edit by hand.",
        "name: mooncake-conversation",
        "description: Kimi chat conversations (Mooncake FAST'25 conversation trace, 12,031 requests, 1 hour)",
        "source: https://github.com/kvcache-ai/Mooncake/blob/main/FAST25-release/traces/conversation_trace.jsonl",
        "licence: Apache-2.0",
        "attribution: Qin et al., Mooncake - Trading More Storage for Less Computation, USENIX FAST 2025; "
        "trace released by Moonshot AI and Tsinghua University (kvcache-ai/Mooncake)",
        f"num_requests: {len(rows)}",
        f"follow_up_share: {len(new_in) / len(rows):.4f}   # requests continuing an earlier one",
        f"reusable_prompt_share: {reused / total:.4f}   # prompt tokens in 512-token blocks seen before",
        f"mean_first_input: {np.mean(first_in):.1f}",
        f"mean_new_input: {np.mean(new_in):.1f}",
        f"mean_output: {np.mean(outs):.1f}",
        f"first_input_quantiles: {q(first_in)}",
        f"new_input_quantiles: {q(new_in)}",
        f"output_quantiles: {q(outs)}",
        "turns_histogram: {" + ", ".join(f"{k}: {hist[k]}" for k in sorted(hist)) + "}",
    ]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text("\n".join(lines) + "\n")
    print(OUT.read_text())


if __name__ == "__main__":
    main(*sys.argv[1:])
