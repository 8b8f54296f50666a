"""Micro-benchmarks of one device with torch (``serveplan profile``; extra ``serveplan[profile]``).

The run times the kernels an LLM layer is made of, at the shapes its steps produce, and writes
one :class:`~serveplan.calibrate.measurements.Measurement` per shape:

* GEMMs ``tokens x k`` by ``k x n`` for the projections of LLM-like layer shapes (q/o, k/v,
  gate/up, down, logits), at decode token counts (1-64) and prefill token counts (128 to a few
  thousand, capped by a work budget so the run stays within minutes);
* memory-bound kernels: copy, elementwise (SiLU, multiply, add) and the RMSNorm op sequence of
  Hugging Face ``LlamaRMSNorm`` (6 kernels, BestServe Table 6);
* attention with ``scaled_dot_product_attention``: causal prefill at several batch and prompt
  sizes, and one-token decode over several batch and context sizes, GQA as Hugging Face runs it;
* the fixed cost of launching a tiny operator, and of running each module of a layer at a tiny
  shape (its dispatch time, BestServe §3.3.3).

Operands rotate through a pool larger than the last-level cache (``cold_bytes``), so each call
reads its weights from memory as a layer does in a step (the weights of a whole model do not stay
in cache between layers). torch is imported only inside these functions.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from serveplan.calibrate.measurements import Measurement, MeasurementSet
from serveplan.errors import SpecError, check_int

TORCH_HINT = "serveplan profile needs torch: pip install 'serveplan[profile]' (CPU: pip install torch)"


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    """Dimensions of one LLM layer whose kernels are profiled."""

    hidden_size: int
    intermediate_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int = 32000

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim


#: Default shapes: Llama-style layers of ~0.3B, ~1B and ~7B models (hidden 1024/2048/4096,
#: SwiGLU width ~2.7x, 64- or 128-wide heads, GQA 4:1 or MHA), 32000-token vocabulary
#: (Llama-2 tokenizer). assumed: representative of small and mid-size decoder layers.
DEFAULT_SHAPES = (
    LayerShape(hidden_size=1024, intermediate_size=2816, num_attention_heads=16, num_key_value_heads=4, head_dim=64),
    LayerShape(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=8, head_dim=64),
    LayerShape(hidden_size=4096, intermediate_size=11008, num_attention_heads=32, num_key_value_heads=32, head_dim=128),
)


#: ``cpu``, ``cuda`` or ``cuda:N`` (torch's device strings serveplan profiles on)
_DEVICE = re.compile(r"^(cpu|cuda(:(\d{1,4}))?)$")
#: Most torch CPU threads (beyond any host's cores: each thread's buffers would exhaust memory).
MAX_THREADS = 1024
#: Most timed repetitions per shape (the median of 5 is the default; 10,000 already takes hours).
MAX_REPEATS = 10_000

@dataclass(frozen=True, slots=True, kw_only=True)
class ProfileConfig:
    """What to measure and how.

    Parameters
    ----------
    device:
        ``"cpu"`` or ``"cuda"`` / ``"cuda:N"``.
    threads:
        torch intra-op threads on the CPU (``None``: torch's default). Recorded with the data.
    dtype:
        ``"fp32"`` (CPU default), ``"bf16"`` or ``"fp16"``.
    shapes:
        Layer shapes whose GEMMs and attention are swept.
    decode_tokens, prefill_tokens:
        Token counts of decode-like and prefill-like GEMMs and memory-bound kernels.
    prefill_attention, decode_attention:
        ``(batch, prompt)`` and ``(batch, context)`` pairs for attention.
    max_gemm_flops:
        Skip GEMMs above this work (FLOP) to bound the run time.
    repeats:
        Timed repetitions per shape (median reported), after one warm-up call.
    min_call_s:
        Calls faster than this are looped so one timing covers at least this long.
    cold_bytes:
        Size of the operand pool each kernel cycles through (0: twice the last-level cache).
    clock:
        ``"cpu"``: CPU time of the process, immune to time slicing by other processes on a
        shared machine, valid only for one CPU thread; ``"wall"``: elapsed time (GPUs, several
        threads); ``"auto"``: ``cpu`` for the CPU device with one thread, else ``wall``.
    """

    device: str = "cpu"
    threads: int | None = 1
    dtype: str = "fp32"
    shapes: tuple[LayerShape, ...] = DEFAULT_SHAPES
    decode_tokens: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
    prefill_tokens: tuple[int, ...] = (128, 256, 512, 1024, 2048, 4096)
    prefill_attention: tuple[tuple[int, int], ...] = (
        (1, 128), (1, 256), (1, 512), (1, 1024), (1, 2048), (2, 512), (4, 256), (4, 1024), (8, 128), (2, 2048))
    decode_attention: tuple[tuple[int, int], ...] = (
        (1, 128), (1, 512), (1, 2048), (4, 256), (4, 1024), (16, 128), (16, 512), (16, 2048),
        (64, 128), (64, 512), (64, 2048))
    max_gemm_flops: float = 60e9
    repeats: int = 5
    min_call_s: float = 2e-3
    cold_bytes: float = 0.0
    clock: str = "auto"
    seed: int = 0

    def __post_init__(self) -> None:
        if not isinstance(self.device, str) or not _DEVICE.match(self.device):
            raise SpecError(f"device={self.device!r}; expected cpu, cuda or cuda:N with N a device index in 0..1023")
        if self.threads is not None:
            check_int("threads", self.threads, low=1, high=MAX_THREADS, why="torch CPU threads")
        if self.dtype not in ("fp32", "bf16", "fp16"):
            raise SpecError(f"dtype={self.dtype!r}; expected one of: fp32, bf16, fp16")
        check_int("repeats", self.repeats, low=1, high=MAX_REPEATS, why="timed repetitions per shape")
        if not self.shapes:
            raise SpecError("shapes is empty; give at least one layer shape")
        if self.clock not in ("auto", "cpu", "wall"):
            raise SpecError(f"clock={self.clock!r}; expected auto, cpu or wall")
        if self.clock == "cpu" and (self.device != "cpu" or self.threads != 1):
            raise SpecError("clock='cpu' measures one CPU thread: use it with device=cpu and threads=1")

    @property
    def resolved_clock(self) -> str:
        if self.clock != "auto":
            return self.clock
        return "cpu" if self.device == "cpu" and self.threads == 1 else "wall"

    @staticmethod
    def quick(**changes: Any) -> ProfileConfig:
        """A reduced sweep (one small shape, few sizes): seconds instead of minutes, for tests.

        Decode GEMMs keep the full sweep's 8-row point: MKL's fp32 GEMMs change efficiency
        steeply between 4 and 16 rows, and a curve interpolated across that gap moved a batch-8
        decode prediction by +-15% from one run to the next on a shared 2-core machine."""
        base: dict[str, Any] = dict(
            shapes=(DEFAULT_SHAPES[0],), decode_tokens=(1, 4, 8, 16, 64), prefill_tokens=(128, 512, 1024),
            prefill_attention=((1, 128), (1, 512), (2, 256)), decode_attention=((1, 128), (4, 512), (16, 256)),
            max_gemm_flops=8e9, repeats=3, min_call_s=1e-3,
        )
        base.update(changes)
        return ProfileConfig(**base)


def shape_from_model(model: Any) -> LayerShape:
    """The :class:`LayerShape` of a dense GQA/MHA :class:`~serveplan.specs.model.ModelSpec`."""
    return LayerShape(hidden_size=model.hidden_size, intermediate_size=model.intermediate_size,
                      num_attention_heads=model.num_attention_heads, num_key_value_heads=model.num_key_value_heads,
                      head_dim=model.head_dim, vocab_size=model.vocab_size)


def import_torch() -> Any:
    """torch, or a :class:`SpecError` with the install hint."""
    try:
        import torch
    except ImportError:
        raise SpecError(TORCH_HINT) from None
    return torch


# ---------------------------------------------------------------------------------- machinery
@dataclass
class _Case:
    kind: str
    phase: str
    name: str
    flops: float
    bytes: float
    launches: float
    setup: Callable[[], Callable[[], Any]]  # builds operands, returns the call to time
    module: str = ""
    rows: float = float("nan")


@dataclass
class _Runner:
    torch: Any
    cfg: ProfileConfig
    dev: Any
    tdtype: Any
    ab: float
    cold_bytes: float
    rng: Any = field(default=None)
    clock: Callable[[], float] = time.perf_counter

    def sync(self) -> None:
        if self.dev.type == "cuda":
            self.torch.cuda.synchronize(self.dev)

    def pool(self, make: Callable[[], Any], nbytes: float) -> Iterator[Any]:
        """Cycle through enough copies of ``make()`` to exceed the cold-pool size."""
        copies = max(1, min(64, math.ceil(self.cold_bytes / max(nbytes, 1.0))))
        items = [make() for _ in range(copies)]
        i = 0
        while True:
            yield items[i]
            i = (i + 1) % copies

    def tensor(self, *shape: int) -> Any:
        # fill rather than randn: values do not change the kernel time, and fill is ~50x faster
        t = self.torch.empty(*shape, dtype=self.tdtype, device=self.dev)
        return t.fill_(0.01)

    def time(self, fn: Callable[[], Any]) -> tuple[float, float]:
        """Median and minimum seconds per call."""
        clock = self.clock
        fn()
        self.sync()
        t0 = clock()
        fn()
        self.sync()
        one = clock() - t0
        inner = max(1, min(1000, math.ceil(self.cfg.min_call_s / max(one, 1e-9))))
        samples = []
        for _ in range(self.cfg.repeats):
            t0 = clock()
            for _ in range(inner):
                fn()
            self.sync()
            samples.append((clock() - t0) / inner)
        return statistics.median(samples), min(samples)


def _gemm_cases(r: _Runner, shape: LayerShape) -> list[_Case]:
    torch, ab = r.torch, r.ab
    wb = ab
    h, ff = shape.hidden_size, shape.intermediate_size
    projections = [("q/o", h, shape.q_dim), ("k/v", h, shape.kv_dim), ("gate/up", h, ff), ("down", ff, h),
                   ("logits", h, shape.vocab_size)]
    cases = []
    for phase, tokens in (("decode", r.cfg.decode_tokens), ("prefill", r.cfg.prefill_tokens)):
        for label, k, n in projections:
            if label == "logits" and phase == "prefill":
                continue  # logits are computed for the last token of each sequence only
            for m in tokens:
                flops = 2.0 * m * k * n
                if flops > r.cfg.max_gemm_flops:
                    continue
                nbytes = wb * k * n + ab * m * (k + n)   # same accounting as ops.graph._gemm

                def setup(m: int = m, k: int = k, n: int = n, nbytes: float = nbytes) -> Callable[[], Any]:
                    ops = r.pool(lambda: (r.tensor(m, k), r.tensor(n, k)), nbytes)
                    lin = torch.nn.functional.linear
                    return lambda: lin(*next(ops))

                kind = "gemv" if m == 1 else "gemm"
                cases.append(_Case(kind, phase, f"{label} m={m} k={k} n={n}", flops, nbytes, 1, setup, rows=m))
    return cases


def _memory_cases(r: _Runner, shape: LayerShape) -> list[_Case]:
    torch, ab = r.torch, r.ab
    h, ff = shape.hidden_size, shape.intermediate_size
    cases = []
    for phase, tokens in (("decode", r.cfg.decode_tokens), ("prefill", r.cfg.prefill_tokens)):
        for t in tokens:
            n_ff, n_h = t * ff, t * h

            def copy_setup(n: int = n_ff) -> Callable[[], Any]:
                ops = r.pool(lambda: (r.tensor(n), r.tensor(n)), 2 * ab * n)
                return lambda: (lambda a: a[1].copy_(a[0]))(next(ops))

            def silu_setup(n: int = n_ff) -> Callable[[], Any]:
                ops = r.pool(lambda: r.tensor(n), ab * n)
                return lambda: torch.nn.functional.silu(next(ops))

            def mul_setup(n: int = n_ff) -> Callable[[], Any]:
                ops = r.pool(lambda: (r.tensor(n), r.tensor(n)), 2 * ab * n)
                return lambda: torch.mul(*next(ops))

            def add_setup(n: int = n_h) -> Callable[[], Any]:
                ops = r.pool(lambda: (r.tensor(n), r.tensor(n)), 2 * ab * n)
                return lambda: torch.add(*next(ops))

            def norm_setup(t: int = t) -> Callable[[], Any]:
                ops = r.pool(lambda: (r.tensor(t, h), r.tensor(h)), ab * t * h)

                def rms_norm() -> Any:   # Hugging Face LlamaRMSNorm.forward, op for op
                    x, w = next(ops)
                    var = x.pow(2).mean(-1, keepdim=True)
                    return w * (x * torch.rsqrt(var + 1e-6))
                return rms_norm

            # SiLU: ~5 FLOP per element (BestServe Table 1 row 2); traffic = bytes actually moved
            cases += [
                _Case("copy", phase, f"copy {t}x{ff}", 0.0, 2 * ab * n_ff, 1, copy_setup),
                _Case("elementwise", phase, f"silu {t}x{ff}", 5.0 * n_ff, 2 * ab * n_ff, 1, silu_setup),
                _Case("elementwise", phase, f"mul {t}x{ff}", 1.0 * n_ff, 3 * ab * n_ff, 1, mul_setup),
                _Case("elementwise", phase, f"add {t}x{h}", 1.0 * n_h, 3 * ab * n_h, 1, add_setup),
                # RMSNorm: BestServe Table 6 totals, 4*t*h + 2*t FLOP; the op sequence moves
                # pow 2th, mean th+t, add 2t, rsqrt 2t, mul 2th+t, mul 2th+h values
                _Case("norm", phase, f"rmsnorm {t}x{h}", 4.0 * n_h + 2.0 * t,
                      ab * (7 * n_h + 6 * t) + ab * h, 6, norm_setup),
            ]
    return cases


def _attention_cases(r: _Runner, shape: LayerShape) -> list[_Case]:
    torch, ab = r.torch, r.ab
    hq, hkv, d = shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim
    dq, dkv, rep = hq * d, hkv * d, hq // hkv
    sdpa = torch.nn.functional.scaled_dot_product_attention
    cases = []
    for b, s in r.cfg.prefill_attention:
        apc = b * s * (s + 1) / 2.0
        # fused attention accounting of ops.graph: 4*apc*dq FLOP (QK^T and PV) + 5 per score
        # (online softmax, FlashAttention-2 §3.1); Q, K, V read once and O written
        flops = apc * (4 * dq + 5 * hq)
        nbytes = b * s * 2 * ab * dq + b * s * 2 * ab * dkv

        def setup(b: int = b, s: int = s, nbytes: float = nbytes) -> Callable[[], Any]:
            ops = r.pool(lambda: (r.tensor(b, hq, s, d), r.tensor(b, hkv, s, d), r.tensor(b, hkv, s, d)), nbytes)
            return lambda: sdpa(*next(ops), is_causal=True, enable_gqa=rep > 1)

        cases.append(_Case("attention", "prefill", f"causal b={b} s={s} hq={hq} hkv={hkv} d={d}",
                           flops, nbytes, 1, setup))
    for b, c in r.cfg.decode_attention:
        kvd = b * c
        flops = kvd * (4 * dq + 5 * hq)
        nbytes = b * 2 * ab * dq + kvd * 2 * ab * dkv

        def decode_setup(b: int = b, c: int = c, nbytes: float = nbytes) -> Callable[[], Any]:
            # one query token per sequence; GQA heads folded into the query length as Hugging
            # Face does for decode (transformers integrations/sdpa_attention.py, pack_gqa)
            ops = r.pool(lambda: (r.tensor(b, hkv, rep, d), r.tensor(b, hkv, c, d), r.tensor(b, hkv, c, d)), nbytes)
            return lambda: sdpa(*next(ops))

        cases.append(_Case("attention", "decode", f"decode b={b} ctx={c} hq={hq} hkv={hkv} d={d}",
                           flops, nbytes, 1, decode_setup))
    return cases


def _dispatch_cases(r: _Runner) -> list[_Case]:
    """A tiny operator, and each module of a Llama layer at a tiny shape (hidden 64, one token):
    the time is the host cost of issuing the module's kernels, BestServe's dispatch time."""
    from serveplan.calibrate import tiny_llama  # imports torch: only when profiling

    torch = r.torch
    h, ff, hq, hkv, d = tiny_llama.SHAPE

    def launch_setup() -> Callable[[], Any]:
        a = r.tensor(1)
        return lambda: torch.add(a, a)

    def module_setup(kind: str) -> Callable[[], Callable[[], Any]]:
        def setup() -> Callable[[], Any]:
            x = r.tensor(1, 1, h)
            with torch.no_grad():
                mod = tiny_llama.MODULES[kind](r.tdtype, r.dev)
                if kind == "attention":
                    cos, sin = r.tensor(1, 1, 1, d), r.tensor(1, 1, 1, d)
                    return lambda: mod(x, cos, sin)
                return lambda: mod(x)
        return setup

    ab = r.ab
    cases = [_Case("launch", "any", "add of one element", 1.0, 3 * ab, 1, launch_setup)]
    # tiny-shape work and traffic (weights dominate); launches = kernels issued
    sizes = {
        "norm": (4 * h, ab * (8 * h), 6),
        "attention": (2 * h * (2 * hq * d + 2 * hkv * d), ab * h * (2 * hq * d + 2 * hkv * d), 22),
        "mlp": (6 * h * ff, ab * 3 * h * ff, 6),
        "lm_head": (2 * h * tiny_llama.VOCAB, ab * h * tiny_llama.VOCAB, 7),
    }
    for kind, (flops, nbytes, launches) in sizes.items():
        cases.append(_Case("module", "any", f"{kind} module, hidden {h}, one token", float(flops), float(nbytes),
                           launches, module_setup(kind), module=kind))
    return cases


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _llc_bytes() -> float:
    """Last-level cache size from sysfs (Linux), else 256 MiB."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = 0.0
    try:
        for idx in os.listdir(base):
            try:
                with open(f"{base}/{idx}/size") as f:
                    s = f.read().strip()
            except OSError:
                continue
            mult = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(s[-1], 1)
            best = max(best, float(s.rstrip("KMG")) * mult)
    except OSError:
        pass
    return best or 256 * 1024**2


def profile_device(cfg: ProfileConfig, *, progress: bool = True,
                   on_row: Callable[[Measurement], None] | None = None) -> MeasurementSet:
    """Run the micro-benchmarks of ``cfg`` and return the measurements with their metadata;
    ``on_row`` receives each measurement as soon as it is taken (to save as you go).

    Raises
    ------
    SpecError
        torch is missing, or the device is not available.
    """
    torch = import_torch()
    dev = torch.device(cfg.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise SpecError(f"device={cfg.device!r} but torch sees no CUDA device (torch {torch.__version__})")
    if cfg.threads is not None:
        torch.set_num_threads(cfg.threads)
    tdtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[cfg.dtype]
    ab = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}[cfg.dtype]
    if cfg.cold_bytes > 0:
        cold = cfg.cold_bytes
    elif dev.type == "cuda":
        cold = 2.0 * torch.cuda.get_device_properties(dev).L2_cache_size
    else:
        cold = 2.0 * _llc_bytes()
    torch.manual_seed(cfg.seed)
    clock_name = cfg.resolved_clock
    r = _Runner(torch, cfg, dev, tdtype, ab, cold,
                clock=time.process_time if clock_name == "cpu" else time.perf_counter)
    cases: list[_Case] = _dispatch_cases(r)
    for shape in cfg.shapes:
        cases += _gemm_cases(r, shape) + _memory_cases(r, shape) + _attention_cases(r, shape)
    rows = []
    from tqdm import tqdm

    with torch.inference_mode():
        for case in tqdm(cases, desc=f"profiling {cfg.device}", unit="kernel", disable=not progress):
            fn = case.setup()
            med, mn = r.time(fn)
            del fn
            rows.append(Measurement(kind=case.kind, phase=case.phase, flops=case.flops, bytes=case.bytes,
                                    time_s=med, module=case.module, name=case.name, launches=case.launches,
                                    time_min_s=mn, repeats=cfg.repeats, rows=case.rows))
            if on_row is not None:
                on_row(rows[-1])
    peak_flops = max((m.flops / m.time_s for m in rows if m.kind in ("gemm", "gemv")), default=0.0)
    peak_bw = max((m.bytes / m.time_s for m in rows if m.kind in ("copy", "gemv")), default=0.0)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else _cpu_model()
    meta = {
        "device": cfg.device,
        "device_name": name,
        "torch_version": str(torch.__version__),   # TorchVersion, a str subclass YAML refuses
        "threads": str(torch.get_num_threads()) if dev.type == "cpu" else "",
        "dtype": cfg.dtype,
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cold_bytes": f"{cold:.4g}",
        "repeats": str(cfg.repeats),
        "statistic": "median seconds per call (time_s); minimum in time_min_s",
        "clock": ("process CPU time (one thread; immune to time slicing)" if clock_name == "cpu"
                  else "wall-clock time"),
        "peak_flops_measured": f"{peak_flops:.6g}",
        "peak_bandwidth_measured": f"{peak_bw:.6g}",
        "memory_bytes": f"{_memory_bytes(torch, dev):.6g}",
    }
    return MeasurementSet(tuple(rows), meta)


def _memory_bytes(torch: Any, dev: Any) -> float:
    if dev.type == "cuda":
        return float(torch.cuda.get_device_properties(dev).total_memory)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def hardware_yaml_from_measurements(ms: MeasurementSet, name: str) -> str:
    """A hardware YAML whose peaks are the best measured GEMM FLOP/s and copy/GEMV bandwidth.

    A CPU has no datasheet number that its libraries reach (turbo, AVX frequency, shared
    memory channels), so the measured best is the roofline ceiling; the fitted MFU and MBU are
    then fractions of what this machine demonstrably reaches.
    """
    md = ms.metadata
    try:
        flops = float(md["peak_flops_measured"])
        bw = float(md["peak_bandwidth_measured"])
    except (KeyError, ValueError):
        raise SpecError("measurements have no peak_flops_measured / peak_bandwidth_measured metadata; "
                        "rerun serveplan profile") from None
    dtype = md.get("dtype", "fp32")
    mem = float(md.get("memory_bytes", "16e9") or 16e9)
    lines = [
        f"# {md.get('device_name', 'device')} as measured by serveplan profile on {md.get('date_utc', '?')}",
        f"# (torch {md.get('torch_version', '?')}, {md.get('threads', '?')} threads). Peaks are the best measured",
        "# GEMM FLOP/s and copy/GEMV bandwidth of that run, not datasheet values.",
        f"name: {name}",
        f"description: {md.get('device_name', 'device')} ({md.get('threads', '?')} threads, measured peaks)",
        f"source: serveplan profile --device {md.get('device', 'cpu')} ({md.get('date_utc', '?')})",
        "peak_flops:",
        f"  {dtype}: {flops:.4e}   # measured: best GEMM FLOP/s of the profiling run",
        f"memory_bytes: {mem:.4e}   # measured: physical memory of the host",
        f"memory_bandwidth: {bw:.4e}   # measured: best copy/GEMV bytes/s of the profiling run",
        "devices_per_node: 1",
        "intra_node_link:",
        "  name: none (single device)",
        "  bandwidth: 1.0e+10   # assumed placeholder: a single device never communicates",
        "  latency_s: 0.0",
    ]
    return "\n".join(lines) + "\n"
