"""Launch files for the plan that was simulated, written from its resolved deployment.

:func:`launch_files` reads a :class:`~serveplan.sim.deployment.Deployment` (the one the simulator
ran) and writes, for the deployment's own engine only, the commands that start it: every value is
the deployment's (parallel sizes, sequences per step, token budget, context length, the engine's
memory fraction as the simulation applied it, the KV and weight formats), checked against the
engine's own start-up limits (:data:`LIMITS`, each cited); what an engine cannot be told is refused
with a :class:`~serveplan.errors.SpecError` naming it, never swapped for another engine.

============================  ============================  =======================  ==========================
serveplan                     vLLM 0.33.0                   SGLang 0.5.23            TensorRT-LLM 1.2
============================  ============================  =======================  ==========================
``tp``                        ``--tensor-parallel-size``    ``--tp-size`` (tp x dp)  ``--tp_size`` (tp x dp)
``pp``                        ``--pipeline-parallel-size``  ``--pp-size``            ``--pp_size``
``dp`` (attention DP)         ``--data-parallel-size``      ``--attn-dp-size``       ``enable_attention_dp``
``ep > 1``                    ``--enable-expert-parallel``  ``--ep-size``            ``--ep_size``
``max_batch``                 ``--max-num-seqs``            ``--max-running-``       ``--max_batch_size``
                                                            ``requests``
token budget                  ``--max-num-batched-tokens``  ``--chunked-prefill-``   ``--max_num_tokens``
                                                            ``size``
longest request               ``--max-model-len``           ``--context-length``     ``--max_seq_len``
memory fraction               ``--gpu-memory-utilization``  ``--mem-fraction-``      ``kv_cache_config.free_``
                                                            ``static``               ``gpu_memory_fraction``
KV format                     ``--kv-cache-dtype``          ``--kv-cache-dtype``     ``kv_cache_config.dtype``
prefill / decode role         ``--kv-transfer-config``      ``--disaggregation-``    ``trtllm-serve``
                              (NIXL; Dynamo YAML)           ``mode`` (+ router)      ``disaggregated`` YAML
============================  ============================  =======================  ==========================

One launch script per node: instances are packed onto nodes in order (none split unless it is
larger than a node, then started on each of its nodes with the engine's multi-node flags).
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from serveplan.errors import SpecError
from serveplan.sim import Fleet, Role
from serveplan.sim.deployment import Deployment, RoleSetup
from serveplan.sim.schedulers import get_scheduler
from serveplan.specs.catalog import get_model
from serveplan.specs.engine import MemoryBasis
from serveplan.specs.speculative import SpecDecodeConfig, SpecMethod
from serveplan.units import DType

if TYPE_CHECKING:
    from serveplan.optimize.goodput import GoodputSettings

#: Engine releases whose flags the commands use (argument lists in tests/report/data/engine_flags.json).
VLLM_VERSION = "0.33.0"
SGLANG_VERSION = "0.5.23"
TRTLLM_VERSION = "1.2"
DYNAMO_VERSION = "1.6.1"

VLLM_PORT = 8000        # vLLM's FrontendArgs.port default
SGLANG_PORT = 30000     # SGLang's ServerArgs.port default
TRTLLM_PORT = 8000      # trtllm-serve --port default (tensorrt_llm/commands/serve.py)
ROUTER_PORT = 8080      # the front door of a disaggregated pair (SGLang's router, trtllm-serve disaggregated)
#: Dynamo's vLLM worker image, tagged by Dynamo release (nvcr.io/nvidia/ai-dynamo/vllm-runtime)
DYNAMO_IMAGE = f"nvcr.io/nvidia/ai-dynamo/vllm-runtime:{DYNAMO_VERSION}"

#: Start-up limits each engine checks on the values written, and where each is read (vLLM 0.33.0 and
#: SGLang 0.5.23 from their PyPI wheels; TensorRT-LLM from main revisions at the 1.2/1.3 boundary, the
#: 1.2 wheel being on NVIDIA's own index only)
LIMITS: dict[str, dict[str, str]] = {
    "vllm": {
        "max_num_batched_tokens >= max_num_seqs": "vllm/config/scheduler.py SchedulerConfig.verify_max_model_len "
        "(ValueError)",
        "without chunked prefill: max_num_batched_tokens >= max_model_len": "vllm/config/scheduler.py "
        "SchedulerConfig.verify_max_model_len (ValueError)",
        "0 < gpu_memory_utilization <= 1": "vllm/config/cache.py CacheConfig.gpu_memory_utilization Field(gt=0, le=1)",
        "max_model_len <= the model's context": "vllm/config/model.py _get_and_verify_max_len "
        "(VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 overrides)",
        "max_num_seqs and max_num_batched_tokens per data-parallel rank": "vllm/config/scheduler.py "
        "SchedulerConfig (each DP engine core schedules its own steps)",
        "kv_cache_dtype in CacheDType": "vllm/config/cache.py CacheDType, CacheConfig._validate_cache_dtype",
    },
    "sglang": {
        "tp_size % attn_dp_size == 0": "sglang/srt/server_args parallel_hook.handle_data_parallelism (assert)",
        "(tp_size * pp_size) % nnodes == 0": "sglang/srt validation_hook.check_server_args (assert)",
        "chunked_prefill_size % page_size == 0": "sglang/srt validation_hook.check_server_args (assert)",
        "0 < mem_fraction_static < 1": "sglang/srt memory_hook.handle_gpu_memory_settings (no range validator; "
        "outside it the KV pool is empty: kv_cache_configurator._profile_available_bytes raises)",
        "kv_cache_dtype in auto, fp8_e5m2, fp8_e4m3, mxfp8, bf16, bfloat16, nvfp4, fp4_mx_block16":
            "sglang/srt/arg_groups/fields/model.py kv_cache_dtype (argparse choices)",
        "max_running_requests and chunked_prefill_size are global (divided by attn_dp_size)":
            "sglang/srt mem_cache/kv_cache_configurator.resolve_max_num_reqs; parallel_hook.handle_data_parallelism",
    },
    "trtllm": {
        "tp_size * pp_size == world size": "tensorrt_llm/mapping.py Mapping.__init__ (ValueError)",
        "ep_size divides tp_size": "tensorrt_llm/llmapi/llm_args.py BaseLlmArgs.validate_parallel_config; "
        "mapping.py Mapping.__init__ (moe_tp * moe_ep == moe world size)",
        "0 <= free_gpu_memory_fraction <= 1": "tensorrt_llm/llmapi/llm_args.py KvCacheConfig.free_gpu_memory_fraction "
        "Field(ge=0, le=1)",
        "kv_cache_config.dtype in auto, fp8": "tensorrt_llm/llmapi/llm_args.py KvCacheConfig.dtype, "
        "TorchLlmArgs.sync_quant_config_with_kv_cache_config_dtype",
        "disaggregated: len(urls) == num_instances": "tensorrt_llm/llmapi/disagg_utils.py extract_ctx_gen_cfgs "
        "(ValueError)",
        "unknown extra-options keys fail": "tensorrt_llm/llmapi/llm_args.py StrictBaseModel (extra='forbid')",
    },
}

_HF = re.compile(r"huggingface\.co/([^/\s]+/[^/\s]+)")


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineCommand:
    """One kind of engine process: ``instances`` copies of ``argv``, each on its own devices."""

    engine: str                    # "vllm", "sglang", "trtllm"
    version: str
    role: str                      # "collocated", "prefill", "decode"
    instances: int
    devices_per_instance: int
    argv: tuple[str, ...]
    port: int
    #: what was planned for one instance (the values the flags carry), for readers and tests
    planned: dict[str, Any] = field(default_factory=dict)

    def shell(self, port: int | None = None, first_device: int = 0, visible_env: str = "CUDA_VISIBLE_DEVICES",
              devices: int | None = None, extra: Sequence[str] = ()) -> str:
        """The command of one instance listening on ``port`` with ``devices`` devices (default: all
        of it) from ``first_device``, one flag per line."""
        n = self.devices_per_instance if devices is None else devices
        ids = ",".join(str(first_device + i) for i in range(n))
        argv = list(self.argv) + list(extra)
        if port is not None:
            for flag in ("--port",):
                if flag in argv:
                    argv[argv.index(flag) + 1] = str(port)
        head, rest = argv[:_head_len(argv)], argv[_head_len(argv):]
        lines = [f"{visible_env}={ids} " + shlex.join(head)]
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
                "devices_per_instance": self.devices_per_instance, "port": self.port, "argv": list(self.argv),
                "planned": dict(self.planned)}


def _head_len(argv: list[str]) -> int:
    """Words before the first flag (``vllm serve MODEL``, ``python -m sglang.launch_server``)."""
    for i, a in enumerate(argv):
        if a.startswith("--"):
            return i
    return len(argv)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one instance (or its share on one node) runs."""

    command: EngineCommand
    index: int          # instance number within its role
    node: int
    first_device: int
    devices: int        # devices of the instance on this node
    port: int
    node_rank: int      # this node's rank within the instance (0 unless it spans nodes)
    nodes: int          # nodes the instance spans


@dataclass(frozen=True, slots=True, kw_only=True)
class LaunchPlan:
    """Launch commands and files of one planned strategy under its engine."""

    strategy: str
    engine: str
    version: str
    model_ref: str
    visible_env: str
    devices_per_node: int
    commands: tuple[EngineCommand, ...]
    files: dict[str, str] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    router: str | None = None     # the front door of a disaggregated plan (a shell command), if the engine has one

    def for_engine(self, engine: str) -> list[EngineCommand]:
        return [c for c in self.commands if c.engine == engine]

    def placements(self) -> list[Placement]:
        """Every instance on its node(s): packed in order, none split across nodes unless larger
        than a node; ports count up from the engine's default, one per instance."""
        out: list[Placement] = []
        node, used, k = 0, 0, 0
        per = self.devices_per_node
        for cmd in self.commands:
            for i in range(cmd.instances):
                need = cmd.devices_per_instance
                port = cmd.port + k
                k += 1
                if need > per:  # spans whole nodes
                    if used:
                        node, used = node + 1, 0
                    span = -(-need // per)
                    for r in range(span):
                        out.append(Placement(cmd, i, node + r, 0, min(per, need - r * per), port, r, span))
                    node += span
                    continue
                if used and used + need > per:
                    node, used = node + 1, 0
                out.append(Placement(cmd, i, node, used, need, port, 0, 1))
                used += need
                if used >= per:
                    node, used = node + 1, 0
        return out

    @property
    def num_nodes(self) -> int:
        return 1 + max((p.node for p in self.placements()), default=0)

    def scripts(self) -> dict[str, str]:
        """One shell script per node: every instance (or share of one) that runs there."""
        by_node: dict[int, list[Placement]] = {}
        for p in self.placements():
            by_node.setdefault(p.node, []).append(p)
        out = {}
        multi = self.num_nodes > 1
        for node, places in sorted(by_node.items()):
            lines = ["#!/usr/bin/env bash",
                     f"# {self.strategy}: {self.engine} {self.version} instances of node {node} of {self.num_nodes}, "
                     "written by serveplan from the deployment it simulated"]
            if multi:
                lines.append('NODE0_ADDR="${NODE0_ADDR:?set NODE0_ADDR to the address of node 0}"')
            for p in places:
                span = f" (node {p.node_rank + 1} of its {p.nodes})" if p.nodes > 1 else ""
                lines.append(f"# {p.command.role} instance {p.index + 1} of {p.command.instances}{span}")
                lines.append(p.command.shell(p.port, p.first_device, self.visible_env, p.devices,
                                             _multinode(self.engine, p)) + " &")
            if node == 0 and self.router:
                lines.append("# the front door: routes each request to a prefill and a decode instance")
                lines.append(self.router + " &")
            lines.append("wait")
            out[f"launch-node{node}.sh"] = "\n".join(lines) + "\n"
        return out

    def render(self) -> str:
        """Human-readable text: the first instance of each role, the files and notes."""
        label = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}[self.engine]
        parts = [f"Deploy {self.strategy} ({self.model_ref}) with {label} {self.version} on {self.num_nodes} "
                 f"node(s) (launch-node*.sh have every instance):"]
        for p in self.placements():
            if p.index == 0 and p.node_rank == 0:
                parts.append(f"# {p.command.role}: {p.command.instances} instance(s) x "
                             f"{p.command.devices_per_instance} device(s); the first on node {p.node}")
                parts.append(p.command.shell(p.port, p.first_device, self.visible_env, p.devices,
                                             _multinode(self.engine, p)))
        if self.router:
            parts += ["# router (node 0)", self.router]
        for name, text in self.files.items():
            parts.append(f"\n# {name}")
            parts.append(text.rstrip())
        if self.notes:
            parts.append("")
            parts += [f"note: {n}" for n in self.notes]
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {
            "strategy": self.strategy, "engine": self.engine, "version": self.version, "model_ref": self.model_ref,
            "nodes": self.num_nodes, "commands": [c.to_dict() for c in self.commands],
            "instances": [{"role": p.command.role, "index": p.index, "node": p.node, "first_device": p.first_device,
                           "devices": p.devices, "port": p.port, "node_rank": p.node_rank,
                           "shell": p.command.shell(p.port, p.first_device, self.visible_env, p.devices,
                                                    _multinode(self.engine, p))}
                          for p in self.placements()],
            "router": self.router, "files": dict(self.files), "notes": list(self.notes),
            "limits": LIMITS[self.engine],
        }

    def write(self, out_dir: str | Path) -> list[Path]:
        """Write the per-node scripts, the engine's files and deploy.json."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        written = []
        for name, text in {**self.scripts(), **self.files}.items():
            p = out / name
            p.write_text(text)
            written.append(p)
        p = out / "deploy.json"
        p.write_text(json.dumps(self.to_dict(), indent=2, allow_nan=False))
        written.append(p)
        return written


def _multinode(engine: str, p: Placement) -> list[str]:
    """The engine's flags that join one node's share of an instance spanning ``p.nodes`` nodes."""
    if p.nodes <= 1:
        return []
    if engine == "vllm":   # vllm/engine/arg_utils.py: --nnodes, --node-rank, --master-addr (multiprocessing)
        return ["--nnodes", str(p.nodes), "--node-rank", str(p.node_rank), "--master-addr", "$NODE0_ADDR"]
    if engine == "sglang":  # sglang/srt/server_args.py: --nnodes, --node-rank, --dist-init-addr
        return ["--nnodes", str(p.nodes), "--node-rank", str(p.node_rank), "--dist-init-addr", "$NODE0_ADDR:5000"]
    return []  # TensorRT-LLM spans nodes through MPI (mpirun ... trtllm-llmapi-launch): see the note


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


@dataclass(frozen=True, slots=True)
class _Shape:
    """One role's instance in engine-neutral terms, read from the deployment."""

    role: str
    count: int
    tp: int
    pp: int
    dp: int
    ep: int
    max_batch: int            # sequences per step
    token_budget: int | None  # new tokens per step (None: the engine's default)
    chunked: bool
    max_model_len: int
    memory_fraction: float    # in the engine's own terms
    weight: DType
    kv: DType
    spec: SpecDecodeConfig | None
    devices: int

    def planned(self) -> dict[str, Any]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "ep": self.ep, "max_batch": self.max_batch,
                "token_budget": self.token_budget, "chunked_prefill": self.chunked, "max_model_len": self.max_model_len,
                "memory_fraction": self.memory_fraction, "weight_dtype": self.weight.value, "kv_dtype": self.kv.value}


def _shape(dep: Deployment, setup: RoleSetup, max_model_len: int) -> _Shape:
    eng = dep.engine
    assert eng is not None
    b, par = setup.instance.batching, setup.instance.parallel
    est = setup.estimator
    # a vLLM V1 instance always chunks (prefill instances of a disaggregated pair too); SGLang's and
    # TensorRT-LLM's chunk as their mechanism does
    chunked = get_scheduler(b.scheduler).chunked or (eng.engine == "vllm" and eng.chunked_prefill
                                                    and setup.role is not Role.COLLOCATED)
    if eng.memory_basis is MemoryBasis.STATIC:
        frac = float(eng.memory_fraction if eng.memory_fraction is not None
                     else eng.static_fraction(dep.config.hardware, tp=par.tp, pp=par.pp))
    else:
        frac = float(eng.memory_fraction if eng.memory_fraction is not None else 0.9)
    return _Shape(role=setup.role.value, count=setup.count, tp=par.tp, pp=par.pp, dp=par.dp, ep=par.ep,
                  max_batch=b.max_batch, token_budget=b.token_budget, chunked=chunked, max_model_len=max_model_len,
                  memory_fraction=round(frac, 4), weight=est.dtype, kv=est.kv_dtype, spec=setup.instance.spec,
                  devices=setup.num_devices)


def launch_plan(fleet: Fleet, settings: GoodputSettings, *, model_ref: str | None = None) -> LaunchPlan:
    """Launch files for ``fleet`` as the search simulated it under ``settings``
    (:meth:`~serveplan.optimize.goodput.GoodputSettings.deployment`). A fleet named with one
    device type (a row of a ranking over several types) runs on that type's nodes."""
    if fleet.has_device_types and not fleet.is_mixed:
        dev = fleet.first.device
        assert dev is not None
        if dev.hardware.name != settings.hardware.name:
            settings = dataclasses.replace(settings, hardware=dev.hardware, profile=dev.profile)
    return launch_files(settings.deployment(fleet), model_ref=model_ref)


def launch_files(dep: Deployment, *, model_ref: str | None = None) -> LaunchPlan:
    """Launch commands and files for the deployment ``dep`` under its own engine (module doc).

    Raises
    ------
    SpecError
        The deployment has no serving engine (BestServe's testbed is a reproduction, not a
        release), or a value the engine cannot take (named, with the engine's limit).
    """
    cfg = dep.config
    eng = dep.engine
    if eng is None or eng.engine not in _WRITERS:
        name = "none" if eng is None else eng.name
        raise SpecError(f"engine={name!r}: launch files are written for vllm, sglang and trtllm; BestServe's testbed "
                        "(--engine bestserve) reproduces a paper, it is no release to start; plan with --engine vllm, "
                        "sglang or trtllm")
    if cfg.fleet.is_mixed:
        types = ", ".join(f"{s.role.value} on {s.hardware.name}" for s in dep.roles)
        raise SpecError(f"strategy={cfg.fleet.name!r} runs its pools on two device types ({types}); launch files are "
                        "written for one device type (the node scripts pack instances onto identical nodes); "
                        "expected a single-type plan: rerun with one --hardware type for its launch files")
    m, hw = cfg.model, cfg.hardware
    ref, ref_note = (model_ref, None) if model_ref else model_reference(m.source, m.name)
    notes: list[str] = [ref_note] if ref_note else []
    longest = int(cfg.workload.max_tokens)
    if longest > m.max_position_embeddings:
        notes.append(f"the longest request ({longest:,} tokens) exceeds {m.name}'s {m.max_position_embeddings:,}: "
                     "the engine needs its long-context override (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 / "
                     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1)")
    shapes = [_shape(dep, s, longest) for s in dep.roles]
    for s in shapes:
        _check_limits(eng.engine, s, m.max_position_embeddings)
    commands, files, router = _WRITERS[eng.engine](ref, shapes, notes, dep)
    visible = "ASCEND_RT_VISIBLE_DEVICES" if hw.name.startswith("ascend") else "CUDA_VISIBLE_DEVICES"
    if cfg.fleet.strategy.num_collocated > 1:
        notes.append(f"put a round-robin load balancer in front of the {cfg.fleet.strategy.num_collocated} "
                     "instances (the router serveplan simulated)")
    return LaunchPlan(strategy=cfg.fleet.name, engine=eng.engine, version=_VERSION[eng.engine], model_ref=ref,
                      visible_env=visible, devices_per_node=hw.devices_per_node, commands=tuple(commands),
                      files=files, notes=tuple(notes), router=router)


def _check_limits(engine: str, s: _Shape, model_len: int) -> None:
    """Refuse a value the engine refuses at start-up (:data:`LIMITS`)."""
    where = f"{engine} {_VERSION[engine]} ({s.role} instances)"
    if s.token_budget is not None and s.token_budget < s.max_batch and engine in ("vllm", "trtllm"):
        raise SpecError(f"{where}: token budget {s.token_budget} < max batch {s.max_batch}; the engine needs "
                        f"{_BUDGET_FLAG[engine]} >= {_SEQS_FLAG[engine]}")
    if engine == "vllm" and not s.chunked and s.token_budget is not None and s.token_budget < s.max_model_len:
        raise SpecError(f"{where}: without chunked prefill vLLM needs --max-num-batched-tokens >= --max-model-len, "
                        f"but the plan's budget is {s.token_budget} and its longest request {s.max_model_len} tokens; "
                        "plan with chunked prefill (--schedulers chunked-prefill) or a budget of at least the "
                        "longest request")
    hi_open = engine == "sglang"
    if not (0 < s.memory_fraction < 1 if hi_open else 0 < s.memory_fraction <= 1):
        raise SpecError(f"{where}: memory fraction {s.memory_fraction:g} is outside the engine's range "
                        f"({'(0, 1)' if hi_open else '(0, 1]'})")


_BUDGET_FLAG = {"vllm": "--max-num-batched-tokens", "sglang": "--chunked-prefill-size", "trtllm": "--max_num_tokens"}
_SEQS_FLAG = {"vllm": "--max-num-seqs", "sglang": "--max-running-requests", "trtllm": "--max_batch_size"}
_VERSION = {"vllm": VLLM_VERSION, "sglang": SGLANG_VERSION, "trtllm": TRTLLM_VERSION}


def _dtype_args(flavour: str, dtype: DType) -> list[str]:
    """Weight-format flags of vLLM and SGLang (the same names in both)."""
    if dtype is DType.FP8:
        return ["--quantization", "fp8"]  # quantizes a BF16 checkpoint online, or reads an FP8 one
    if dtype in (DType.BF16, DType.FP16, DType.FP32):
        return ["--dtype", {DType.BF16: "bfloat16", DType.FP16: "float16", DType.FP32: "float32"}[dtype]]
    return []  # FP4/int formats: the checkpoint declares its quantization (see the note)


def _kv_value(engine: str, kv: DType, weight: DType) -> str:
    """The engine's spelling of the KV format ``kv``: ``auto`` when it is the activations' 16-bit
    format (the weights' for 16-bit weights, else bf16), as the engines read ``auto``."""
    act = weight if weight in (DType.BF16, DType.FP16) else DType.BF16
    names = {"vllm": {DType.FP8: "fp8", DType.NVFP4: "nvfp4", DType.BF16: "bfloat16", DType.FP16: "float16"},
             "sglang": {DType.FP8: "fp8_e4m3", DType.NVFP4: "nvfp4", DType.BF16: "bf16"},
             "trtllm": {DType.FP8: "fp8"}}[engine]
    if kv is act:
        return "auto"
    if kv in names:
        return names[kv]
    raise SpecError(f"kv_dtype={kv.value!r}: {engine} {_VERSION[engine]} takes no such KV-cache format through its "
                    f"flags (it takes: auto, {', '.join(sorted(names.values()))}); plan with another --kv-dtype")


def _quant_note(notes: list[str], weight: DType, ref: str) -> None:
    if weight not in (DType.FP8, DType.BF16, DType.FP16, DType.FP32):
        note = (f"{weight.value} weights: point the model at a {weight.value} checkpoint of {ref} (its "
                "quantization config names the format; no flag does)")
        if note not in notes:
            notes.append(note)


# ---------------------------------------------------------------------------------------------- vLLM
def _vllm(ref: str, shapes: list[_Shape], notes: list[str],
          dep: Deployment) -> tuple[list[EngineCommand], dict[str, str], str | None]:
    commands = []
    for s in shapes:
        par = ["--tensor-parallel-size", str(s.tp)]
        if s.pp > 1:
            par += ["--pipeline-parallel-size", str(s.pp)]
        if s.dp > 1:
            par += ["--data-parallel-size", str(s.dp)]
        if s.ep > 1:
            par += ["--enable-expert-parallel"]
            if s.ep != s.tp * s.dp:
                notes.append(f"vLLM spreads experts over all tp*dp={s.tp * s.dp} devices when expert parallelism "
                             f"is on; the plan assumed ep={s.ep}")
        # vLLM schedules each data-parallel rank on its own (LIMITS): the instance's limits, the busiest
        # rank's share (as the simulator bounds its captured graphs, EngineSpec.graph_tokens)
        argv = ["vllm", "serve", ref, "--port", str(VLLM_PORT), *par, "--max-num-seqs", str(-(-s.max_batch // s.dp))]
        if s.token_budget is not None:
            argv += ["--max-num-batched-tokens", str(-(-s.token_budget // s.dp))]
        if s.dp > 1:
            notes.append(f"vLLM's --max-num-seqs and --max-num-batched-tokens are per data-parallel rank: the plan's "
                         f"{s.max_batch} sequences and {s.token_budget} tokens per step of a {s.role} instance are its "
                         f"{s.dp} ranks' together")
        argv += ["--max-model-len", str(s.max_model_len),
                 "--enable-chunked-prefill" if s.chunked else "--no-enable-chunked-prefill",
                 "--gpu-memory-utilization", f"{s.memory_fraction:g}", *_dtype_args("vllm", s.weight),
                 "--kv-cache-dtype", _kv_value("vllm", s.kv, s.weight)]
        _quant_note(notes, s.weight, ref)
        if s.role != "collocated":
            kv_role = "kv_producer" if s.role == "prefill" else "kv_consumer"
            argv += ["--kv-transfer-config", json.dumps({"kv_connector": "NixlConnector", "kv_role": kv_role},
                                                        separators=(",", ":"))]
        argv += list(_spec_args(s.spec, ref, notes)[0])
        commands.append(EngineCommand(engine="vllm", version=VLLM_VERSION, role=s.role, instances=s.count,
                                      devices_per_instance=s.devices, argv=tuple(argv), port=VLLM_PORT,
                                      planned=s.planned()))
    files = {}
    if dep.fleet.is_disaggregated:
        files["dynamo-disagg.yaml"] = _dynamo_yaml(dep.fleet.name, commands)
        notes.append("vLLM's prefill and decode instances need a KV-aware router in front: NVIDIA Dynamo "
                     "(dynamo-disagg.yaml, Kubernetes) or llm-d")
    return commands, files, None


# ---------------------------------------------------------------------------------------------- SGLang
def _sglang(ref: str, shapes: list[_Shape], notes: list[str],
            dep: Deployment) -> tuple[list[EngineCommand], dict[str, str], str | None]:
    commands = []
    for s in shapes:
        # SGLang's TP group is every device of a stage; DP attention splits it into attn-dp-size groups
        argv = ["python", "-m", "sglang.launch_server", "--model-path", ref, "--port", str(SGLANG_PORT),
                "--tp-size", str(s.tp * s.dp)]
        if s.pp > 1:
            argv += ["--pp-size", str(s.pp)]
        if s.dp > 1:
            argv += ["--attn-dp-size", str(s.dp)]
        if s.ep > 1:
            argv += ["--ep-size", str(s.ep)]
        argv += ["--max-running-requests", str(s.max_batch)]
        if s.chunked and s.token_budget is not None:
            argv += ["--chunked-prefill-size", str(s.token_budget)]
        elif not s.chunked:
            argv += ["--chunked-prefill-size", "-1"]
            if s.token_budget is not None:
                argv += ["--max-prefill-tokens", str(s.token_budget)]
        argv += ["--context-length", str(s.max_model_len), "--mem-fraction-static", f"{s.memory_fraction:g}",
                 *_dtype_args("sglang", s.weight), "--kv-cache-dtype", _kv_value("sglang", s.kv, s.weight)]
        _quant_note(notes, s.weight, ref)
        if s.role != "collocated":
            argv += ["--disaggregation-mode", s.role, "--disaggregation-transfer-backend", "nixl"]
        argv += list(_spec_args(s.spec, ref, notes)[1])
        commands.append(EngineCommand(engine="sglang", version=SGLANG_VERSION, role=s.role, instances=s.count,
                                      devices_per_instance=s.devices, argv=tuple(argv), port=SGLANG_PORT,
                                      planned=s.planned()))
    router = None
    if dep.fleet.is_disaggregated:
        plan = LaunchPlan(strategy="", engine="sglang", version=SGLANG_VERSION, model_ref=ref, visible_env="",
                          devices_per_node=dep.config.hardware.devices_per_node, commands=tuple(commands))
        urls = {"prefill": [], "decode": []}  # type: dict[str, list[str]]
        for p in plan.placements():
            if p.node_rank == 0:
                urls[p.command.role].append(f"http://$NODE{p.node}_ADDR:{p.port}")
        # sglang-router (sglang_router.launch_router --pd-disaggregation --prefill URL ... --decode URL ...)
        router = shlex.join(["python", "-m", "sglang_router.launch_router", "--pd-disaggregation",
                             *[w for u in urls["prefill"] for w in ("--prefill", u)],
                             *[w for u in urls["decode"] for w in ("--decode", u)],
                             "--host", "0.0.0.0", "--port", str(ROUTER_PORT)]).replace("'", "")
        notes.append("SGLang's prefill and decode instances sit behind its router (pip install sglang-router; set "
                     "NODE<k>_ADDR to each node's address)")
    return commands, {}, router


# ---------------------------------------------------------------------------------------------- TensorRT-LLM
def _trtllm(ref: str, shapes: list[_Shape], notes: list[str],
            dep: Deployment) -> tuple[list[EngineCommand], dict[str, str], str | None]:
    commands = []
    files: dict[str, str] = {}
    disagg = dep.fleet.is_disaggregated
    for s in shapes:
        if s.spec is not None:
            raise SpecError("speculative decoding with --engine trtllm: its launch options (speculative_config) are "
                            "not written by serveplan; plan without --spec-method or with vllm/sglang")
        extra: dict[str, Any] = {
            "kv_cache_config": {"free_gpu_memory_fraction": s.memory_fraction,
                                "dtype": _kv_value("trtllm", s.kv, s.weight)},
            "enable_chunked_prefill": s.chunked,
        }
        if s.dp > 1:
            extra["enable_attention_dp"] = True
        if disagg:   # the KV cache leaves a context (prefill) instance through its cache transceiver; the
            # backend is set explicitly (DEFAULT resolves differently across releases), its buffer holds the
            # longest prompt; context servers run without the overlap scheduler (disagg-serving.md)
            extra["cache_transceiver_config"] = {"backend": "NIXL", "max_tokens_in_buffer": s.max_model_len}
            if s.role == "prefill":
                extra["disable_overlap_scheduler"] = True
        name = f"extra-llm-api-config-{s.role}.yml"
        files[name] = (f"# {s.role} instances of {dep.fleet.name}: TensorRT-LLM {TRTLLM_VERSION} LLM API options "
                       "(trtllm-serve --extra_llm_api_options), written by serveplan\n"
                       + str(yaml.safe_dump(extra, sort_keys=False)))
        argv = ["trtllm-serve", ref, "--backend", "pytorch", "--host", "0.0.0.0", "--port", str(TRTLLM_PORT),
                "--tp_size", str(s.tp * s.dp), "--pp_size", str(s.pp)]
        if s.ep > 1:
            argv += ["--ep_size", str(s.ep)]
        argv += ["--max_batch_size", str(s.max_batch)]
        if s.token_budget is not None:
            argv += ["--max_num_tokens", str(s.token_budget)]
        argv += ["--max_seq_len", str(s.max_model_len), "--kv_cache_free_gpu_memory_fraction",
                 f"{s.memory_fraction:g}", "--extra_llm_api_options", name]
        _quant_note(notes, s.weight, ref)
        if s.weight is DType.FP8:
            notes.append(f"TensorRT-LLM reads FP8 weights from an FP8 checkpoint (e.g. nvidia/*-FP8 of {ref}); it "
                         "does not quantize online")
        commands.append(EngineCommand(engine="trtllm", version=TRTLLM_VERSION, role=s.role, instances=s.count,
                                      devices_per_instance=s.devices, argv=tuple(argv), port=TRTLLM_PORT,
                                      planned=s.planned()))
    router = None
    if disagg:
        plan = LaunchPlan(strategy="", engine="trtllm", version=TRTLLM_VERSION, model_ref=ref, visible_env="",
                          devices_per_node=dep.config.hardware.devices_per_node, commands=tuple(commands))
        urls = {"prefill": [], "decode": []}  # type: dict[str, list[str]]
        for p in plan.placements():
            if p.node_rank == 0:
                urls[p.command.role].append(f"NODE{p.node}_ADDR:{p.port}")
        cfg = {"hostname": "0.0.0.0", "port": ROUTER_PORT, "backend": "pytorch",
               "context_servers": {"num_instances": len(urls["prefill"]), "urls": urls["prefill"]},
               "generation_servers": {"num_instances": len(urls["decode"]), "urls": urls["decode"]}}
        files["disagg-config.yml"] = ("# trtllm-serve disaggregated -c disagg-config.yml: the front door of the "
                                      "context (prefill) and generation (decode) servers; replace NODE<k>_ADDR\n"
                                      + str(yaml.safe_dump(cfg, sort_keys=False)))
        router = "trtllm-serve disaggregated -c disagg-config.yml"
    if any(s.devices > dep.config.hardware.devices_per_node for s in shapes):
        notes.append("an instance spans nodes: start it with mpirun across them (mpirun -n <devices> "
                     "trtllm-llmapi-launch trtllm-serve ...), one rank per device")
    return commands, files, router


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
        worker = "VllmPrefillWorker" if cmd.role == "prefill" else "VllmDecodeWorker"
        services[worker] = {
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


_WRITERS = {"vllm": _vllm, "sglang": _sglang, "trtllm": _trtllm}
#: engine families launch files are written for
DEPLOYABLE = tuple(_WRITERS)
