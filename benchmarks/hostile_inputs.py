"""Rerun the hostile inputs of the reliability issue (14) against a checkout and print a markdown
table: exit status (and whether a traceback was printed), seconds, last line of stderr.

    PYTHONPATH=src python benchmarks/hostile_inputs.py          # this checkout
    PYTHONPATH=/path/to/other/src python benchmarks/hostile_inputs.py

Each command runs as a subprocess (``python -m serveplan``) with a 60 s bound, in a scratch
folder holding the mutated input files it needs.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from importlib import resources

import yaml

COMMANDS = """\
estimate -m nan.json -H h100-sxm --tp 1 -s 128
estimate -m inf.json -H h100-sxm --tp 1 -s 128
estimate -m bin.json -H h100-sxm --tp 1 -s 128
estimate -m kv0.json -H h100-sxm --tp 1 -s 128
estimate -m hd0.json -H h100-sxm --tp 1 -s 128
estimate -m kv16.json -H h100-sxm --tp 1 -s 128
estimate -m llama-3.2-1b -H hw-inf.yaml --tp 1 -s 128
estimate -m llama-3.2-1b -H hw-noname.yaml --tp 1 -s 128
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 40 --seed -1
simulate -m llama-3.2-1b -H h100-sxm --tp 1 --trace trace.csv
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 40 --arrival gamma --cv 1e308
offload -m opt-6.7b -s 64 -n 8 --max-latency inf
profile --device cuda:-1 --out m.csv
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 1e10
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 10000000000
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 100000000
simulate -m llama-3.2-1b -H h100-sxm --tp 1 -n 40 --strategy 999999999m
optimize -m llama-3.2-1b -H h100-sxm --devices 100000 --no-progress -j 1
optimize --num-requests 15 --no-progress -j 2
estimate -m llama-3.2-1b -H h100-sxm --tp 1 -s 100000000
estimate -b 4000 -s 4000
profile --out missing/dir/m.csv
"""


def write_inputs(folder: str) -> None:
    cfg = {"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 4,
           "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096}
    for name, change in (("nan", {"hidden_size": float("nan")}), ("inf", {"num_hidden_layers": float("inf")}),
                         ("kv0", {"num_key_value_heads": 0}), ("hd0", {"head_dim": 0}),
                         ("kv16", {"num_key_value_heads": 16})):
        with open(os.path.join(folder, f"{name}.json"), "w") as fh:
            json.dump({**cfg, **change}, fh)  # NaN/Infinity literals, as some exporters write
    with open(os.path.join(folder, "bin.json"), "wb") as fh:
        fh.write(b"\x89PNG\r\n\x1a\n\x00\xff\xfe")
    with open(os.path.join(folder, "trace.csv"), "w") as fh:
        fh.write("arrival_s,input_len,output_len\n0,128,8\n0.5,64\n")  # the second row lacks a key
    hw = yaml.safe_load((resources.files("serveplan") / "specs" / "data" / "hardware" / "h100-sxm.yaml").read_text())
    for name, change in (("hw-inf", {"memory_bandwidth": float("inf")}), ("hw-noname", {"name": ""})):
        with open(os.path.join(folder, f"{name}.yaml"), "w") as fh:
            yaml.safe_dump({**hw, **change}, fh)


def main() -> None:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory() as folder:
        write_inputs(folder)
        print("| command | exit | s | last line of stderr |\n|---|---|---|---|")
        for cmd in COMMANDS.splitlines():
            t = time.monotonic()
            try:
                p = subprocess.run([sys.executable, "-m", "serveplan", *shlex.split(cmd)], env=env, cwd=folder,
                                   capture_output=True, text=True, timeout=60)
                code, err = str(p.returncode), p.stderr
            except subprocess.TimeoutExpired:
                code, err = "killed at 60 s", ""
            lines = [ln for ln in err.splitlines() if ln.strip()]
            tb = " (traceback)" if "Traceback" in err else ""
            last = (lines[-1] if lines else "")[:200].replace("|", "/")
            print(f"| `serveplan {cmd}` | {code}{tb} | {time.monotonic() - t:.1f} | {last} |", flush=True)


if __name__ == "__main__":
    main()
