"""Host specification for offloading: CPU memory, disk, GPU-CPU and disk links, runtime speeds.

An offloading plan needs more than the GPU datasheet: how much CPU memory and disk the machine has,
how fast tensors move between the tiers (``ctog``, ``gtoc``, ``dtoc``, ``ctod`` in FlexGen's
notation, Appendix A.3 Table 7), how fast the CPU computes decode attention, and the effective
FLOP/s of the offloading runtime's kernels. Bundled hosts live in
``specs/data/hosts/<id>.yaml`` (each value carries a comment citing its source) and are loaded by
the catalog (:func:`serveplan.specs.catalog.get_host`), like models and hardware.

To add a host, copy ``flexgen-t4.yaml``, replace the capacities and link rates, and either refit the
``runtime`` block or keep the T4 one (it is scaled to another GPU by the ratio of datasheet peaks,
see :meth:`HostSpec.runtime_for`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from serveplan.errors import SpecError, check_name, check_number
from serveplan.specs.hardware import DeviceSpec, hardware_from_dict
from serveplan.units import DType


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSpeeds:
    """Effective speeds of the offloading runtime's GPU kernels (FlexGen Table 7 symbols).

    Parameters
    ----------
    mm_prefill_flops, mm_decode_flops:
        FLOP/s of the linear layers (``mm_flops`` of FlexGen) in prefill and decode.
    bmm_prefill_flops, bmm_decode_flops:
        FLOP/s of the attention batched matmuls (``bmm_flops``).
    memory_efficiency:
        Fraction of the GPU's datasheet memory bandwidth reached when decode GEMMs stream weights.
    decompress_bandwidth:
        FP16 weight bytes produced per second by 4-bit group-wise decompression on the GPU.
    kv_decompress_bandwidth:
        FP16 KV-cache bytes produced (decompression) or consumed (compression) per second.
    """

    mm_prefill_flops: float
    mm_decode_flops: float
    bmm_prefill_flops: float
    bmm_decode_flops: float
    memory_efficiency: float
    decompress_bandwidth: float
    kv_decompress_bandwidth: float

    def __post_init__(self) -> None:
        for fname in ("mm_prefill_flops", "mm_decode_flops", "bmm_prefill_flops", "bmm_decode_flops",
                      "decompress_bandwidth", "kv_decompress_bandwidth"):
            check_number(f"runtime {fname}", getattr(self, fname), low=0, low_open=True)
        check_number("runtime memory_efficiency", self.memory_efficiency, low=0, high=1, low_open=True,
                     why="a fraction of the GPU's datasheet memory bandwidth")


@dataclass(frozen=True, slots=True, kw_only=True)
class HostSpec:
    """The machine around one GPU: CPU memory, disk and the links between the three tiers.

    Parameters
    ----------
    gpu:
        The GPU this host was described with (catalog entry or inline spec).
    cpu_memory_bytes, disk_bytes:
        Capacities of CPU memory and disk (bytes).
    ctog_bandwidth, ctog_cache_bandwidth, gtoc_cache_bandwidth, gtoc_activation_bandwidth:
        CPU->GPU and GPU->CPU rates (bytes/s), split into KV-cache copies (strided prefixes of
        pageable buffers) and weight/activation copies, as FlexGen's fitted cost model splits GPU->CPU.
    disk_read_bandwidth, disk_write_bandwidth:
        Disk->CPU (``dtoc``) and CPU->disk (``ctod``) rates (bytes/s).
    cpu_attention_flops:
        FLOP/s of decode attention computed on the CPU (``cpu_flops``).
    gpu_reserved_bytes:
        GPU memory the runtime cannot use for tensors (CUDA context, allocator slack).
    memory_headroom:
        Fraction of every tier's capacity a plan must leave free (0 by default). FlexGen notes that
        searched policies can run out of memory (imprecise peak-memory model, fragmentation) and its
        released search keeps 20% of each tier spare; a planning choice, not a host property.
    runtime:
        Effective GPU kernel speeds, measured on ``reference_gpu``.
    """

    name: str
    description: str = ""
    source: str = ""
    gpu: DeviceSpec
    cpu_memory_bytes: float
    disk_bytes: float
    ctog_bandwidth: float
    ctog_cache_bandwidth: float
    gtoc_cache_bandwidth: float
    gtoc_activation_bandwidth: float
    disk_read_bandwidth: float
    disk_write_bandwidth: float
    cpu_attention_flops: float
    gpu_reserved_bytes: float = 0.0
    memory_headroom: float = 0.0
    runtime: RuntimeSpeeds
    reference_gpu: DeviceSpec

    def __post_init__(self) -> None:
        check_name("host name", self.name)
        for fname in ("cpu_memory_bytes", "ctog_bandwidth", "ctog_cache_bandwidth", "gtoc_cache_bandwidth",
                      "gtoc_activation_bandwidth", "disk_read_bandwidth", "disk_write_bandwidth",
                      "cpu_attention_flops"):
            check_number(f"host {self.name!r}: {fname}", getattr(self, fname), low=0, low_open=True)
        check_number(f"host {self.name!r}: disk_bytes", self.disk_bytes, low=0, unit="bytes")
        check_number(f"host {self.name!r}: gpu_reserved_bytes", self.gpu_reserved_bytes, low=0, unit="bytes")
        if not 0 <= self.gpu_reserved_bytes < self.gpu.memory_bytes:
            raise SpecError(
                f"host {self.name!r}: gpu_reserved_bytes={self.gpu_reserved_bytes!r} must be in "
                f"[0, {self.gpu.memory_bytes:g}) (the GPU's memory)"
            )
        if not (isinstance(self.memory_headroom, (int, float)) and 0 <= self.memory_headroom < 1):
            raise SpecError(
                f"memory_headroom={self.memory_headroom!r} must be a fraction in [0, 1), "
                "e.g. 0.1 to keep 10% of every tier free"
            )

    def gpu_capacity_bytes(self, gpu: DeviceSpec) -> float:
        """GPU bytes a plan may use: datasheet memory minus the reserve, less the headroom."""
        return (gpu.memory_bytes - self.gpu_reserved_bytes) * (1.0 - self.memory_headroom)

    def cpu_capacity_bytes(self) -> float:
        """CPU-memory bytes a plan may use (capacity less the headroom)."""
        return self.cpu_memory_bytes * (1.0 - self.memory_headroom)

    def disk_capacity_bytes(self) -> float:
        """Disk bytes a plan may use (capacity less the headroom)."""
        return self.disk_bytes * (1.0 - self.memory_headroom)

    def runtime_for(self, gpu: DeviceSpec) -> RuntimeSpeeds:
        """Runtime speeds on ``gpu``: GEMM FLOP/s scale with the FP16 peak; decode attention and
        (de)compression, which are memory-bound, with memory bandwidth; all relative to the GPU the
        speeds were measured on (assumed proportional)."""
        ref = self.reference_gpu
        if gpu.name == ref.name:
            return self.runtime
        f = gpu.flops(DType.FP16) / ref.flops(DType.FP16)
        m = gpu.memory_bandwidth / ref.memory_bandwidth
        r = self.runtime
        return RuntimeSpeeds(
            mm_prefill_flops=r.mm_prefill_flops * f, mm_decode_flops=r.mm_decode_flops * f,
            bmm_prefill_flops=r.bmm_prefill_flops * f, bmm_decode_flops=r.bmm_decode_flops * m,
            memory_efficiency=r.memory_efficiency, decompress_bandwidth=r.decompress_bandwidth * m,
            kv_decompress_bandwidth=r.kv_decompress_bandwidth * m,
        )


def _gpu(raw: Any, where: str, hardware: Callable[[str], DeviceSpec]) -> DeviceSpec:
    if isinstance(raw, str):
        return hardware(raw)
    if isinstance(raw, Mapping):
        return hardware_from_dict(raw, name=str(raw.get("name", "custom-gpu")))
    raise SpecError(f"{where} must be a hardware id or a mapping of hardware fields, got {raw!r}")


def parse_host(raw: Mapping[str, Any], *, name: str | None = None,
               hardware: Callable[[str], DeviceSpec]) -> HostSpec:
    """Build a :class:`HostSpec` from the YAML schema of ``specs/data/hosts/*.yaml``; ``hardware``
    resolves a GPU given by id (:func:`serveplan.specs.catalog.host_from_dict` passes the catalog's).

    Raises
    ------
    SpecError
        If a field is missing or not a positive number.
    """
    if not isinstance(raw, Mapping):
        raise SpecError(f"host spec must be a mapping, got {type(raw).__name__}")
    name = name or str(raw.get("name", "custom"))

    def num(mapping: Mapping[str, Any], key: str, where: str) -> float:
        if key not in mapping:
            raise SpecError(f"{where}: field {key!r} is missing")
        # check_number parses with float(): PyYAML reads '1e9' (no dot) as a string
        return check_number(f"{where}: {key}", mapping[key], low=0,
                            low_open=key not in ("disk_bytes", "gpu_reserved_bytes", "memory_efficiency"))

    where = f"host {name!r}"
    if "gpu" not in raw:
        raise SpecError(f"{where}: field 'gpu' is missing")
    gpu = _gpu(raw["gpu"], f"{where}: gpu", hardware)
    rt = raw.get("runtime")
    if not isinstance(rt, Mapping):
        raise SpecError(f"{where}: field 'runtime' must be a mapping of runtime speeds")
    rwhere = f"{where}: runtime"
    try:
        runtime = RuntimeSpeeds(**{k: num(rt, k, rwhere) for k in RuntimeSpeeds.__dataclass_fields__})
    except SpecError as exc:
        raise SpecError(f"host {name!r}: {exc}") from None
    ref = _gpu(rt.get("reference_gpu", raw["gpu"]), f"{rwhere}: reference_gpu", hardware)
    return HostSpec(
        name=name,
        description=str(raw.get("description", "")),
        source=str(raw.get("source", "")),
        gpu=gpu,
        reference_gpu=ref,
        runtime=runtime,
        gpu_reserved_bytes=num(raw, "gpu_reserved_bytes", where) if "gpu_reserved_bytes" in raw else 0.0,
        **{k: num(raw, k, where) for k in (
            "cpu_memory_bytes", "disk_bytes", "ctog_bandwidth", "ctog_cache_bandwidth", "gtoc_cache_bandwidth",
            "gtoc_activation_bandwidth", "disk_read_bandwidth", "disk_write_bandwidth",
            "cpu_attention_flops")},
    )
