"""Launch commands for a chosen plan: ``vllm serve``, SGLang ``launch_server``, and for disaggregated
plans an NVIDIA Dynamo ``DynamoGraphDeployment`` with prefill and decode workers.

Every command names the engine version whose flags it uses; ``tests/report/test_deploy.py`` checks
each emitted flag (and the values of flags with a closed set of choices) against the argument lists
read from those releases' source (``benchmarks/engine_flags.py``). How a serveplan fleet maps
onto engine flags:

============================  ===============================  ====================================
serveplan                     vLLM 0.33.0                      SGLang 0.5.23
============================  ===============================  ====================================
``tp``                        ``--tensor-parallel-size``       ``--tp-size`` (``tp * dp``, see dp)
``pp``                        ``--pipeline-parallel-size``     ``--pp-size``
``dp`` (DP attention)         ``--data-parallel-size``         ``--attn-dp-size``
``ep > 1``                    ``--enable-expert-parallel``     ``--ep-size``
``max_batch``                 ``--max-num-seqs``               ``--max-running-requests``
prefill token budget          ``--max-num-batched-tokens``     ``--max-prefill-tokens`` /
                                                               ``--chunked-prefill-size``
memory utilization            ``--gpu-memory-utilization``     ``--mem-fraction-static``
KV cache format               ``--kv-cache-dtype``             ``--kv-cache-dtype``
prefill / decode role         ``--kv-transfer-config`` (NIXL)  ``--disaggregation-mode``
speculative decoding          ``--speculative-config``         ``--speculative-algorithm``,
                              (method ``eagle3``, ``mtp``,     ``--speculative-num-steps`` K,
                              ``ngram``, ``draft_model``;      ``--speculative-eagle-topk`` 1,
                              ``num_speculative_tokens`` K)    ``--speculative-num-draft-tokens`` K+1
============================  ===============================  ====================================

The ``prefill-first`` scheduler (whole prompts, prefill first; vLLM's without chunking) is served with
chunked prefill off and a token budget of ``max_prompts`` whole prompts; ``chunked-prefill``
(Sarathi) with chunked prefill on and the fleet's token budget, which is what the simulator assumed.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from serveplan.estimator.step import Estimator
from serveplan.optimize.goodput import GoodputSettings
from serveplan.sim import Fleet, Role
from serveplan.sim.schedulers import get_scheduler
from serveplan.specs.catalog import get_model
from serveplan.specs.speculative import SpecDecodeConfig, SpecMethod
from serveplan.units import DType

#: Engine releases whose flags the commands use (argument lists in tests/report/data/engine_flags.json).
VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"
DYNAMO_VERSION = "1.6.1"

VLLM_PORT = 8000        # vLLM's FrontendArgs.port default
SGLANG_PORT = 30000     # SGLang's ServerArgs.port default
#: Dynamo's vLLM worker image, tagged by Dynamo release (nvcr.io/nvidia/ai-dynamo/vllm-runtime)
DYNAMO_IMAGE = f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_VERSION}"

_HF = re.compile(r"huggingface\.co/([^/\s]+/[^/\s]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCommand:
    """One kind of engine process: ``instances`` copies of ``argv``, each on its own devices."""

    engine: str                    # "vllm", "sglang" or "dynamo"
    version: str
    role: str                      # "collocated", "prefill" or "decode"
    instances: int
    devices_per_instance: int
    argv: tuple[str, ...]
    port: int

    def shell(self, port: int | None = None, first_device: int = 0, visible_env: str = "CUDA_VISIBLE_DEVICES") -> str:
        """The command of one instance listening on ``port`` with devices from ``first_device``,
        one flag per line."""
        devices = ",".join(str(first_device + i) for i in range(self.devices_per_instance))
        argv = list(self.argv)
        if "--port" in argv and port is not None:
            argv[argv.index("--port") + 1] = str(port)
        head, rest = argv[:_head_len(argv)], argv[_head_len(argv):]
        lines = [f"{visible_env}={devices} " + shlex.join(head)]
        i = 0
        while i < len(rest):
            if i + 1 < len(rest) and not rest[i + 1].startswith("--"):
                lines.append(shlex.join(rest[i:i + 2]))
                i += 2
            else:
                lines.append(shlex.quote(rest[i]))
                i += 1
        return " \\\n    ".join(lines)

    def flags(self) -> list[str]:
        return [a for a in self.argv if a.startswith("--")]

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "version": self.version, "role": self.role, "instances": self.instances,
                "devices_per_instance": self.devices_per_instance, "port": self.port, "argv": list(self.argv)}


def _head_len(argv: list[str]) -> int:
    """Words before the first flag (``vllm serve MODEL``, ``python -m sglang.launch_server``)."""
    for i, a in enumerate(argv):
        if a.startswith("--"):
            return i
    return len(argv)


@dataclass(frozen=True, slots=True, kw_only=True)
class Deployment:
    """Launch commands and files for one strategy, per engine."""

    strategy: str
    model_ref: str
    visible_env: str
    devices_per_node: int
    commands: tuple[EngineCommand, ...]
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def for_engine(self, engine: str) -> list[EngineCommand]:
        return [c for c in self.commands if c.engine == engine]

    def placements(self, engine: str) -> list[tuple[EngineCommand, int, int, int, int]]:
        """``(command, instance index, node, first device, port)`` of every instance of ``engine``:
        instances are packed onto nodes in order, none split across two nodes unless it is larger
        than a node; ports count up from the engine's default so no two instances share one."""
        out: list[tuple[EngineCommand, int, int, int, int]] = []
        node, used = 0, 0
        for cmd in self.for_engine(engine):
            for i in range(cmd.instances):
                need = cmd.devices_per_instance
                if used and used + need > self.devices_per_node:
                    node, used = node + 1, 0
                out.append((cmd, i, node, used, cmd.port + len(out)))
                used += need
                if used >= self.devices_per_node:
                    node, used = node + 1, 0
        return out

    def scripts(self) -> dict[str, str]:
        """One shell script per engine: every instance with its devices and port."""
        out = {}
        for engine in ("vllm", "sglang"):
            cmds = self.for_engine(engine)
            if not cmds:
                continue
            version = cmds[0].version
            lines = ["#!/usr/bin/env bash", f"# {self.strategy}: {engine} {version} launch commands from serveplan",
                     "# one process per instance; run each on the node named above it"]
            for cmd, i, node, first, port in self.placements(engine):
                lines.append(f"# node {node}: {cmd.role} instance {i + 1} of {cmd.instances}")
                lines.append(cmd.shell(port, first, self.visible_env) + " &")
            lines.append("wait")
            out[f"launch-{engine}.sh"] = "\n".join(lines) + "\n"
        return out

    def render(self) -> str:
        """Human-readable text: each engine's commands (first instance of each role) and the files."""
        parts = [f"Deploy {self.strategy} ({self.model_ref}):"]
        for engine, label in (("vllm", "vLLM"), ("sglang", "SGLang")):
            cmds = self.for_engine(engine)
            if not cmds:
                continue
            parts.append(f"\n# {label} {cmds[0].version}")
            for cmd, i, node, first, port in self.placements(engine):
                if i == 0:
                    parts.append(f"# {cmd.role}: {cmd.instances} instance(s) x {cmd.devices_per_instance} device(s); "
                                 f"the first on node {node} (launch-{engine}.sh has all)")
                    parts.append(cmd.shell(port, first, self.visible_env))
        for name, text in self.files.items():
            parts.append(f"\n# {name}")
            parts.append(text.rstrip())
        if self.notes:
            parts.append("")
            parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy, "model_ref": self.model_ref,
            "engines": {"vllm": VLLM_VERSION, "sglang": SGLANG_VERSION, "dynamo": DYNAMO_VERSION},
            "commands": [c.to_dict() for c in self.commands],
            "instances": [{"engine": e, "role": c.role, "index": i, "node": node, "first_device": first,
                           "port": port, "shell": c.shell(port, first, self.visible_env)}
                          for e in ("vllm", "sglang") for c, i, node, first, port in self.placements(e)],
            "files": dict(self.files), "notes": list(self.notes),
        }

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write ``deploy/`` files: launch scripts, the Dynamo YAML (disaggregated) and deploy.json."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in {**self.scripts(), **self.files}.items():
            p = out / name
            p.write_text(text)
            written.append(p)
        p = out / "deploy.json"
        p.write_text(json.dumps(self.to_dict(), indent=2))
        written.append(p)
        return written


def model_reference(model_source: str, model_name: str) -> tuple[str, str | None]:
    """What the engines load: the Hugging Face repo of the config, the folder of a local
    config.json, else the catalog name (with a note to replace it)."""
    m = _HF.search(model_source)
    if m:
        return m.group(1), None
    if model_source.endswith(".json") and Path(model_source).exists():
        return str(Path(model_source).resolve().parent), None
    return model_name, (f"{model_name}'s data file names no Hugging Face repository; replace "
                        f"'{model_name}' by the path of its weights")


def _vllm_dtype_args(dtype: DType, kv: DType) -> list[str]:
    args: list[str] = []
    if dtype is DType.FP8:
        args += ["--quantization", "fp8"]  # vLLM quantizes BF16 checkpoints to FP8 online, or reads FP8 ones
    elif dtype in (DType.BF16, DType.FP16, DType.FP32):
        args += ["--dtype", {DType.BF16: "bfloat16", DType.FP16: "float16", DType.FP32: "float32"}[dtype]]
    args += ["--kv-cache-dtype", "fp8" if kv is DType.FP8 else "auto"]
    return args


def _sglang_dtype_args(dtype: DType, kv: DType) -> list[str]:
    args: list[str] = []
    if dtype is DType.FP8:
        args += ["--quantization", "fp8"]
    elif dtype in (DType.BF16, DType.FP16, DType.FP32):
        args += ["--dtype", {DType.BF16: "bfloat16", DType.FP16: "float16", DType.FP32: "float32"}[dtype]]
    args += ["--kv-cache-dtype", "fp8_e4m3" if kv is DType.FP8 else "auto"]
    return args


def deploy_plan(fleet: Fleet, settings: GoodputSettings, *, model_ref: str | None = None) -> Deployment:
    """Launch commands for ``fleet`` under ``settings`` (the search's specs, workload and dtype).

    Parameters
    ----------
    fleet:
        The chosen strategy (e.g. ``search(...).best.candidate``).
    settings:
        The settings it was evaluated with: model, hardware, profile, workload and weight dtype.
    model_ref:
        What the engines load (HF repo id or local path); default: the repository of the model's
        ``config.json`` source, else its catalog name.

    Returns
    -------
    Deployment
        vLLM and SGLang commands per role, and for a disaggregated strategy a Dynamo YAML.
    """
    m, hw = settings.model, settings.hardware
    ref, ref_note = (model_ref, None) if model_ref else model_reference(m.source, m.name)
    notes: list[str] = [ref_note] if ref_note else []
    wl = settings.workload
    max_input = int(wl.input_lengths.max())
    max_model_len = int(wl.max_tokens)
    est = Estimator(m, hw, settings.profile, fleet.first.parallel, dtype=settings.dtype)
    dtype, kv, util = est.dtype, est.kv_dtype, est.memory_utilization
    par = fleet.first.parallel
    if par.ep > 1 and par.ep != par.tp * par.dp:
        notes.append(f"vLLM spreads experts over all tp*dp={par.tp * par.dp} devices when expert "
                     f"parallelism is on; the plan assumed ep={par.ep}")
    commands: list[EngineCommand] = []
    for role in fleet.roles:
        shape = _Shape.of(fleet, role, max_input, max_model_len, util)
        count, devices = fleet.strategy.count(role), fleet.instance(role).num_devices
        spec_v, spec_s = _spec_args(fleet.instance(role).spec, ref, notes)
        commands.append(EngineCommand(engine="vllm", version=VLLM_VERSION, role=role.value, instances=count,
                                      devices_per_instance=devices, argv=_vllm_argv(ref, shape, dtype, kv) + spec_v,
                                      port=VLLM_PORT))
        commands.append(EngineCommand(engine="sglang", version=SGLANG_VERSION, role=role.value, instances=count,
                                      devices_per_instance=devices, argv=_sglang_argv(ref, shape, dtype, kv) + spec_s,
                                      port=SGLANG_PORT))
    files: dict[str, str] = {}
    if fleet.is_disaggregated:
        files["dynamo-disagg.yaml"] = _dynamo_yaml(fleet.name, [c for c in commands if c.engine == "vllm"])
        notes.append("vLLM prefill and decode instances need a KV-aware router in front (NVIDIA Dynamo: "
                     "dynamo-disagg.yaml; or llm-d); SGLang's pair needs its router in PD mode")
    elif fleet.strategy.num_collocated > 1:
        notes.append(f"put a round-robin load balancer in front of the {fleet.strategy.num_collocated} instances "
                     "(the router serveplan simulated)")
    visible = "ASCEND_RT_VISIBLE_DEVICES" if hw.name.startswith("ascend") else "CUDA_VISIBLE_DEVICES"
    widest = max(fleet.instance(r).num_devices for r in fleet.roles)
    if widest > hw.devices_per_node:
        notes.append(f"an instance spans {widest} devices, more than one {hw.devices_per_node}-device node: start "
                     "it on each node with vLLM's --nnodes/--node-rank (SGLang: --nnodes/--node-rank/--dist-init-addr)")
    return Deployment(strategy=fleet.name, model_ref=ref, visible_env=visible, devices_per_node=hw.devices_per_node,
                      commands=tuple(commands), files=files, notes=tuple(notes))


@dataclass(frozen=True, slots=True)
class _Shape:
    """What one instance of one role runs with, in engine-neutral terms."""

    role: str
    tp: int
    pp: int
    dp: int
    ep: int
    seqs: int              # sequences per step (max-num-seqs / max-running-requests)
    budget: int            # new tokens per step (max-num-batched-tokens / prefill tokens)
    chunked: bool
    max_model_len: int
    util: float

    @staticmethod
    def of(fleet: Fleet, role: Role, max_input: int, max_model_len: int, util: float) -> _Shape:
        inst = fleet.instance(role)
        b, par = inst.batching, inst.parallel
        chunked = role is Role.COLLOCATED and get_scheduler(b.scheduler).chunked
        if chunked:
            budget = b.token_budget or b.chunk_size
        elif role is Role.DECODE:
            budget = max(b.max_batch, max_model_len)
        else:  # whole prompts: vLLM needs a budget of at least max-model-len without chunking
            budget = max(b.token_budget or b.max_prompts * max_input, max_model_len)
        return _Shape(role.value, par.tp, par.pp, par.dp, par.ep, b.max_batch, budget, chunked, max_model_len, util)


def _vllm_argv(ref: str, s: _Shape, dtype: DType, kv: DType) -> tuple[str, ...]:
    par = ["--tensor-parallel-size", str(s.tp)]
    if s.pp > 1:
        par += ["--pipeline-parallel-size", str(s.pp)]
    if s.dp > 1:
        par += ["--data-parallel-size", str(s.dp)]
    if s.ep > 1:
        par += ["--enable-expert-parallel"]
    argv = ["vllm", "serve", ref, "--port", str(VLLM_PORT), *par,
            "--max-num-seqs", str(s.seqs), "--max-num-batched-tokens", str(s.budget),
            "--max-model-len", str(s.max_model_len),
            "--enable-chunked-prefill" if s.chunked else "--no-enable-chunked-prefill",
            "--gpu-memory-utilization", f"{s.util:g}", *_vllm_dtype_args(dtype, kv)]
    if s.role != "collocated":
        kv_role = "kv_producer" if s.role == "prefill" else "kv_consumer"
        argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role},
                                                    separators=(",", ":"))]
    return tuple(argv)


def _sglang_argv(ref: str, s: _Shape, dtype: DType, kv: DType) -> tuple[str, ...]:
    # SGLang's TP group is every device of a stage; DP attention splits it into attn-dp-size groups
    argv = ["python", "-m", "sglang.launch_server", "--model-path", ref, "--port", str(SGLANG_PORT),
            "--tp-size", str(s.tp * s.dp)]
    if s.pp > 1:
        argv += ["--pp-size", str(s.pp)]
    if s.dp > 1:
        argv += ["--attn-dp-size", str(s.dp)]
    if s.ep > 1:
        argv += ["--ep-size", str(s.ep)]
    argv += ["--max-running-requests", str(s.seqs)]
    if s.chunked:
        argv += ["--chunked-prefill-size", str(s.budget)]
    else:
        argv += ["--chunked-prefill-size", "-1", "--max-prefill-tokens", str(s.budget)]
    argv += ["--context-length", str(s.max_model_len), "--mem-fraction-static", f"{s.util:g}",
             *_sglang_dtype_args(dtype, kv)]
    if s.role != "collocated":
        argv += ["--disaggregation-mode", s.role, "--disaggregation-transfer-backend", "nixl"]
    return tuple(argv)


#: serveplan's drafting methods in each engine's words (vLLM ``vllm/config/speculative.py``
#: ``SpeculativeMethod``; SGLang ``--speculative-algorithm``: NEXTN is its MTP, STANDALONE a draft model)
_SPEC_VLLM = {SpecMethod.EAGLE: "eagle3", SpecMethod.MTP: "mtp", SpecMethod.NGRAM: "ngram",
              SpecMethod.DRAFT: "draft_model"}
_SPEC_SGLANG = {SpecMethod.EAGLE: "EAGLE3", SpecMethod.MTP: "NEXTN", SpecMethod.NGRAM: "NGRAM",
                SpecMethod.DRAFT: "STANDALONE"}


def _spec_args(spec: SpecDecodeConfig | None, ref: str,
               notes: list[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The vLLM and SGLang flags of speculative decoding with draft length ``K`` (chain drafting,
    as simulated); a note when the drafter's checkpoint must be named by hand."""
    if spec is None:
        return (), ()
    k = spec.k
    draft: str | None = None
    if spec.method is SpecMethod.DRAFT:
        assert spec.draft_model is not None
        dm = get_model(spec.draft_model)
        draft, note = model_reference(dm.source, dm.name)
        if note and note not in notes:
            notes.append(note)
    elif spec.method is SpecMethod.EAGLE:
        draft = f"EAGLE3-HEAD-FOR-{ref.rsplit('/', 1)[-1]}"
        note = (f"replace '{draft}' by an EAGLE-3 head trained for {ref} (e.g. a yuhuili/EAGLE3-* or "
                "RedHatAI/*-speculator.eagle3 checkpoint)")
        if note not in notes:
            notes.append(note)
    cfg: dict[str, Any] = {"method": _SPEC_VLLM[spec.method], "num_speculative_tokens": k}
    if draft is not None:
        cfg["model"] = draft
    vllm = ("--speculative-config", json.dumps(cfg, separators=(",", ":")))
    sglang: tuple[str, ...] = ("--speculative-algorithm", _SPEC_SGLANG[spec.method])
    if draft is not None:
        sglang += ("--speculative-draft-model-path", draft)
    sglang += ("--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
               "--speculative-num-draft-tokens", str(k + 1))
    return vllm, sglang


def _dynamo_yaml(name: str, vllm_cmds: list[EngineCommand]) -> str:
    """A ``DynamoGraphDeployment`` (NVIDIA Dynamo's Kubernetes resource) with one frontend and the
    prefill and decode workers of fleet ``name``; the worker runs ``python3 -m dynamo.vllm`` with the
    vLLM engine flags and ``--disaggregation-mode``."""
    services: dict[str, Any] = {
        "Frontend": {"componentType": "frontend", "replicas": 1,
                     "extraPodSpec": {"mainContainer": {"image": DYNAMO_IMAGE}}},
    }
    for cmd in vllm_cmds:
        head = _head_len(list(cmd.argv))
        args = ["--model", cmd.argv[2], "--disaggregation-mode", cmd.role]
        rest = list(cmd.argv[head:])
        if "--port" in rest:  # the frontend owns the HTTP port
            i = rest.index("--port")
            del rest[i:i + 2]
        name = "VllmPrefillWorker" if cmd.role == "prefill" else "VllmDecodeWorker"
        services[name] = {
            "componentType": "worker", "subComponentType": cmd.role, "replicas": cmd.instances,
            "resources": {"limits": {"gpu": str(cmd.devices_per_instance)}},
            "extraPodSpec": {"mainContainer": {"image": DYNAMO_IMAGE, "command": ["python3", "-m", "dynamo.vllm"],
                                               "args": args + rest}},
        }
    doc = {"apiVersion": "nvidia.com/v1alpha1", "kind": "DynamoGraphDeployment",
           "metadata": {"name": re.sub(r"[^a-z0-9-]", "-", f"serveplan-{name}".lower())},
           "spec": {"services": services}}
    header = (f"# {name}: NVIDIA Dynamo {DYNAMO_VERSION} disaggregated deployment (vLLM {VLLM_VERSION} "
              f"workers), written by serveplan\n# kubectl apply -f dynamo-disagg.yaml\n")
    return header + str(yaml.safe_dump(doc, sort_keys=False, width=1000))
