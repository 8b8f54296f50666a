"""Accelerator specification: peak FLOP/s per dtype, memory, links, devices per node.

Values are datasheet numbers in SI units; efficiencies (MFU, MBU, ...) live separately in
:mod:`serveplan.specs.profile`, so a device can be added from its datasheet alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from serveplan.errors import SpecError, check_int, check_name, check_number
from serveplan.units import DType


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSpec:
    """A point-to-point link as seen by one device.

    Parameters
    ----------
    bandwidth:
        Bytes/s per direction per device.
    latency_s:
        Start-up latency of one message (the alpha of an alpha-beta model), seconds.
    """

    name: str = ""
    bandwidth: float
    latency_s: float = 0.0

    def __post_init__(self) -> None:
        check_number(f"link {self.name!r}: bandwidth", self.bandwidth, low=0, low_open=True, unit="bytes/s")
        check_number(f"link {self.name!r}: latency_s", self.latency_s, low=0, unit="s")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec:
    """One accelerator and the node it sits in.

    Parameters
    ----------
    peak_flops:
        Dense peak FLOP/s per dtype (no structured sparsity).
    memory_bytes, memory_bandwidth:
        Device memory capacity (bytes) and peak bandwidth (bytes/s).
    intra_node_link, inter_node_link:
        Links used by parallel groups that fit in one node, and by larger groups.
    tile_size:
        GEMM tile along the token dimension for tile quantization (Sarathi §4.4); 0 = unknown/off.
    sm_count:
        Streaming multiprocessors (datasheet or whitepaper): the CTAs one wave of a kernel runs,
        for the measured decode-attention curves (:class:`~serveplan.specs.kernels.AttentionCurve`);
        0 = unknown.
    l2_cache_bytes:
        Last-level (L2) cache of the device (whitepaper; YAML ``l2_cache_mib``), bytes; 0 = unknown. Kernel
        benchmarks that repeat a decode-attention call find a KV cache this small in L2 (measured
        decode curves, :class:`~serveplan.specs.kernels.AttentionCurve` ``cache_bytes``).
    scale_up_domain:
        Devices that reach each other over ``intra_node_link`` (an NVLink/Infinity Fabric
        domain); 0 = ``devices_per_node``. A GB200/GB300 NVL72 rack is one 72-GPU NVLink domain
        built of 4-GPU compute trays, so groups of up to 72 use NVLink, not the network.
    host_memory_bytes, host_link:
        CPU memory attached to the device and its link (GH200: LPDDR5X over NVLink-C2C).
    driver_memory_bytes:
        Device memory the CUDA driver reports (``nvidia-smi`` total, ``cudaMemGetInfo``; YAML
        ``driver_memory_mib``), which serving engines size their KV cache from; 0 = unknown, then
        ``memory_bytes`` (:attr:`engine_memory_bytes`). Datasheets give "80 GB" where the driver
        reports 81,559 MiB (85.5e9 bytes). A variant with another ``memory_bytes``
        (``dataclasses.replace``) keeps this total unless it is replaced too (0: the new size).
    in_switch_reduction:
        The scale-up switches reduce in the network (NVLink SHARP / NCCL NVLS: third-generation
        NVSwitch and later), so an all-reduce inside the domain sends each payload once
        (:mod:`serveplan.estimator.collectives`).
    sustained_flops:
        Measured dense matrix FLOP/s the device sustains per dtype, where a source measures it below
        the datasheet peak (AMD's max-achievable FLOPs: under dense GEMMs the MI300X's clock falls
        from its 2,100 MHz boost, on which the peak is computed, to about 1,200 MHz); empty: none
        measured. The estimator caps a phase's compute efficiency at this share of the peak
        (:meth:`sustained_share`); measured kernel curves already hold what the kernels reach.
    board_power_w:
        Board power (TDP/TGP/TBP) of one device from its datasheet, watts; 0 = unknown (no energy
        figures). The power model's ceiling (:mod:`serveplan.estimator.power`).
    idle_power_w:
        Power of one idle device with its memory powered, watts; 0 = unknown, then the power
        model's assumed share of the board power (:data:`serveplan.estimator.power.IDLE_SHARE`).
    host_power_w:
        The server's power outside the accelerators (CPUs, host memory, NICs, switches, fans, power
        supply losses) per device, watts; 0 = the power model's assumed share of the board power
        (:data:`serveplan.estimator.power.HOST_SHARE`). The three power fields stay out of the repr:
        they change no step time, so checkpoints and step-time caches keyed on the spec stay valid.
    """

    name: str
    description: str = ""
    source: str = ""
    peak_flops: Mapping[DType, float]
    memory_bytes: float
    memory_bandwidth: float
    devices_per_node: int = 8
    intra_node_link: LinkSpec
    inter_node_link: LinkSpec | None = None
    tile_size: int = 0
    sm_count: int = 0
    l2_cache_bytes: float = 0.0
    scale_up_domain: int = 0
    host_memory_bytes: float = 0.0
    host_link: LinkSpec | None = None
    in_switch_reduction: bool = False
    driver_memory_bytes: float = 0.0
    sustained_flops: Mapping[DType, float] = field(default_factory=dict)
    board_power_w: float = field(default=0.0, repr=False)
    idle_power_w: float = field(default=0.0, repr=False)
    host_power_w: float = field(default=0.0, repr=False)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name("hardware name", self.name)
        where = f"hardware {self.name!r}"
        if not self.peak_flops:
            raise SpecError(f"{where}: peak_flops must list at least one dtype")
        for dt, v in self.peak_flops.items():
            check_number(f"{where}: peak_flops[{dt.value}]", v, low=0, low_open=True, unit="FLOP/s")
        for dt, v in self.sustained_flops.items():
            if dt not in self.peak_flops:
                raise SpecError(f"{where}: sustained_flops[{dt.value}] has no peak_flops[{dt.value}] to be a share of")
            check_number(f"{where}: sustained_flops[{dt.value}]", v, low=0, low_open=True,
                         high=self.peak_flops[dt], unit="FLOP/s")
        check_number(f"{where}: memory_bytes", self.memory_bytes, low=0, low_open=True, unit="bytes")
        check_number(f"{where}: memory_bandwidth", self.memory_bandwidth, low=0, low_open=True, unit="bytes/s")
        check_number(f"{where}: host_memory_bytes", self.host_memory_bytes, low=0, unit="bytes")
        check_number(f"{where}: driver_memory_bytes", self.driver_memory_bytes, low=0, unit="bytes")
        check_number(f"{where}: l2_cache_bytes", self.l2_cache_bytes, low=0, unit="bytes")
        check_int(f"{where}: devices_per_node", self.devices_per_node, low=1, high=MAX_NODE_DEVICES,
                  why="devices in one server or scale-up domain")
        check_int(f"{where}: scale_up_domain", self.scale_up_domain, low=0, high=MAX_NODE_DEVICES,
                  why="devices in one scale-up domain; 0 = devices_per_node")
        for key in ("board_power_w", "idle_power_w", "host_power_w"):
            check_number(f"{where}: {key}", getattr(self, key), low=0, unit="W")
        if self.board_power_w and self.idle_power_w >= self.board_power_w:
            raise SpecError(f"{where}: idle_power_w={self.idle_power_w:g} must be below board_power_w="
                            f"{self.board_power_w:g} (watts)")
        check_int(f"{where}: tile_size", self.tile_size, low=0, high=1 << 16, why="GEMM tile along tokens; 0 = off")
        check_int(f"{where}: sm_count", self.sm_count, low=0, high=1 << 12,
                  why="streaming multiprocessors; 0 = unknown")

    @property
    def engine_memory_bytes(self) -> float:
        """Device memory a serving engine sees (the driver's total; else the datasheet's)."""
        return self.driver_memory_bytes or self.memory_bytes

    @property
    def domain_size(self) -> int:
        """Devices sharing the scale-up link (``scale_up_domain``, else ``devices_per_node``)."""
        return self.scale_up_domain or self.devices_per_node

    def compute_format(self, dtype: DType | str) -> DType:
        """The peak-FLOP/s format a matrix product with ``dtype`` weights runs at on this device.

        The format's own arithmetic (``dtype.compute``) when the device lists it, else the closest
        it has: fp16 and bf16 stand in for each other; FP8 falls back to 16-bit; FP4 (NVFP4,
        MXFP4) runs weight-only at 16 bits on devices without FP4 tensor cores (as vLLM's Marlin
        FP4 kernels do on Hopper); weight-only formats always compute at 16 bits.
        """
        dtype = DType.parse(dtype)   # a format name ("fp16") is accepted too
        for cand in _FLOPS_FALLBACK.get(dtype.compute, (dtype.compute,)):
            if cand in self.peak_flops:
                return cand
        raise SpecError(
            f"hardware {self.name!r} has no peak_flops for dtype {dtype.value!r} or a substitute; "
            f"available: {', '.join(d.value for d in self.peak_flops)}"
        )

    def is_native(self, dtype: DType | str) -> bool:
        """Whether the device computes ``dtype``'s matrix products in their own format."""
        dtype = DType.parse(dtype)
        return self.compute_format(dtype) in (dtype.compute, *_SAME_ARITHMETIC.get(dtype.compute, ()))

    def flops(self, dtype: DType | str) -> float:
        """Dense peak FLOP/s for matrix products with ``dtype`` weights (see :meth:`compute_format`)."""
        return self.peak_flops[self.compute_format(dtype)]

    def sustained_share(self, dtype: DType | str) -> float:
        """Measured sustained dense matrix FLOP/s over the datasheet peak for ``dtype``'s arithmetic
        (:meth:`compute_format`); 1.0 where none is measured."""
        fmt = self.compute_format(dtype)
        got = self.sustained_flops.get(fmt)
        return 1.0 if got is None else float(got) / self.peak_flops[fmt]

    def link_for(self, group_size: int) -> LinkSpec:
        """Scale-up link for groups that fit in its domain (a node, or an NVL72 rack), else the
        inter-node link."""
        if group_size <= self.domain_size or self.inter_node_link is None:
            return self.intra_node_link
        return self.inter_node_link

    def with_(self, **changes: Any) -> DeviceSpec:
        return dataclasses.replace(self, **changes)


def kv_link(sender: DeviceSpec, receiver: DeviceSpec) -> LinkSpec:
    """The link a KV cache crosses from an instance on ``sender`` devices to one on ``receiver``
    devices of another type: they sit in different servers, so the cache leaves through the
    sender's network interfaces and enters through the receiver's (each device's share of its
    server's NICs, the ``inter_node_link`` of each datasheet). Each device's shard streams over its
    own NIC at both ends, so the slower end binds: bandwidth ``min(B_send, B_recv)``, latency
    ``max(L_send, L_recv)`` (the alpha-beta model of NCCL/NIXL point-to-point sends, as
    :func:`serveplan.sim.cluster.kv_transfer_time` uses for one type).

    Raises
    ------
    SpecError
        A device type without an inter-node link (no NIC given in its data file).
    """
    for hw in (sender, receiver):
        if hw.inter_node_link is None:
            raise SpecError(f"hardware {hw.name!r} has no inter_node_link (its NIC); a KV transfer between "
                            f"{sender.name} and {receiver.name} crosses the network between their servers; expected "
                            "inter_node_link in its hardware YAML")
    a, b = sender.inter_node_link, receiver.inter_node_link
    assert a is not None and b is not None
    return LinkSpec(name=f"{a.name} -> {b.name}", bandwidth=min(a.bandwidth, b.bandwidth),
                    latency_s=max(a.latency_s, b.latency_s))


#: Most devices one node or scale-up domain may hold (NVL576 is the largest announced domain).
MAX_NODE_DEVICES = 4096

_FLOPS_FALLBACK = {
    DType.BF16: (DType.BF16, DType.FP16),
    DType.FP16: (DType.FP16, DType.BF16),
    # weights stored in 8/4 bits are dequantised to 16 bits for the matmul where the device lacks
    # the format's arithmetic
    DType.FP8: (DType.FP8, DType.FP16, DType.BF16),
    DType.INT8: (DType.INT8, DType.FP16, DType.BF16),
    DType.INT4: (DType.FP16, DType.BF16),
    DType.FP4: (DType.FP4, DType.BF16, DType.FP16),
    DType.FP32: (DType.FP32,),
}
_SAME_ARITHMETIC = {DType.FP16: (DType.BF16,), DType.BF16: (DType.FP16,)}


def _link(raw: Any, where: str) -> LinkSpec:
    if not isinstance(raw, Mapping):
        raise SpecError(f"{where}: expected a mapping with bandwidth and latency_s, got {raw!r}")
    if "bandwidth" not in raw:
        raise SpecError(f"{where}: field 'bandwidth' is missing")
    return LinkSpec(
        name=str(raw.get("name", "")),
        bandwidth=check_number(f"{where}: bandwidth", raw["bandwidth"], low=0, low_open=True, unit="bytes/s"),
        latency_s=check_number(f"{where}: latency_s", raw.get("latency_s", 0.0), low=0, unit="s"),
    )


def _flops_table(table: Any, where: str, key: str) -> dict[DType, float]:
    """A YAML mapping of dtype to FLOP/s (``tf32`` and ``fp6``, listed for reference, skipped)."""
    if not isinstance(table, Mapping):
        raise SpecError(f"{where}: {key} must map dtype to FLOP/s, got {table!r}")
    out: dict[DType, float] = {}
    for k, v in table.items():
        if k in ("tf32", "fp6"):  # not a weight format serveplan models (listed for reference)
            continue
        out[DType.parse(k)] = check_number(f"{where}: {key}[{k}]", v, low=0, low_open=True, unit="FLOP/s")
    return out


def hardware_from_dict(raw: Mapping[str, Any], *, name: str | None = None) -> DeviceSpec:
    """Build a :class:`DeviceSpec` from the YAML schema of ``data/hardware/*.yaml``."""
    if not isinstance(raw, Mapping):
        raise SpecError(f"hardware spec must be a mapping, got {type(raw).__name__}")
    name = name or str(raw.get("name", "custom"))
    for key in ("peak_flops", "memory_bytes", "memory_bandwidth", "intra_node_link"):
        if key not in raw:
            raise SpecError(f"hardware {name!r}: field {key!r} is missing")
    where = f"hardware {name!r}"
    peak = _flops_table(raw["peak_flops"], where, "peak_flops")
    sustained = _flops_table(raw.get("sustained_flops") or {}, where, "sustained_flops")

    def count(key: str, default: int) -> int:
        value = raw.get(key, default)
        if value is None:
            return default
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return check_int(f"{where}: {key}", value, low=0)

    try:
        return DeviceSpec(
            name=name,
            description=str(raw.get("description", "")),
            source=str(raw.get("source", "")),
            peak_flops=peak,
            sustained_flops=sustained,
            memory_bytes=check_number(f"{where}: memory_bytes", raw["memory_bytes"], low=0, low_open=True,
                                      unit="bytes"),
            memory_bandwidth=check_number(f"{where}: memory_bandwidth", raw["memory_bandwidth"], low=0,
                                          low_open=True, unit="bytes/s"),
            devices_per_node=count("devices_per_node", 8),
            intra_node_link=_link(raw["intra_node_link"], f"hardware {name!r}: intra_node_link"),
            inter_node_link=(
                _link(raw["inter_node_link"], f"hardware {name!r}: inter_node_link")
                if raw.get("inter_node_link") else None
            ),
            tile_size=count("tile_size", 0),
            sm_count=count("sm_count", 0),
            l2_cache_bytes=check_number(f"{where}: l2_cache_mib", raw.get("l2_cache_mib") or 0.0, low=0,
                                        unit="MiB") * 2**20,
            scale_up_domain=count("scale_up_domain", 0),
            host_memory_bytes=check_number(f"{where}: host_memory_bytes", raw.get("host_memory_bytes") or 0.0,
                                           low=0, unit="bytes"),
            host_link=_link(raw["host_link"], f"hardware {name!r}: host_link") if raw.get("host_link") else None,
            in_switch_reduction=bool(raw.get("in_switch_reduction", False)),
            driver_memory_bytes=check_number(f"{where}: driver_memory_mib", raw.get("driver_memory_mib") or 0.0,
                                             low=0, unit="MiB") * 2**20,
            board_power_w=check_number(f"{where}: board_power_w", raw.get("board_power_w") or 0.0, low=0, unit="W"),
            idle_power_w=check_number(f"{where}: idle_power_w", raw.get("idle_power_w") or 0.0, low=0, unit="W"),
            host_power_w=check_number(f"{where}: host_power_w", raw.get("host_power_w") or 0.0, low=0, unit="W"),
        )
    except (TypeError, ValueError) as exc:
        if isinstance(exc, SpecError):
            raise
        raise SpecError(f"hardware {name!r}: {exc}") from None
