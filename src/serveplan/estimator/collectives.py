"""Collectives as they run: per tier (scale-up domain, scale-out network), latency and bandwidth.

Every collective is timed by what one device sends over each link, alpha-beta per tier. Symbols:
``g`` ranks, ``d`` devices of one scale-up domain (an NVLink/NVSwitch node, or a 72-GPU NVL72
rack: :attr:`DeviceSpec.domain_size`), ``D = ceil(g / d)`` domains, ``V`` the payload bytes per
device, ``B_up``/``a_up`` the scale-up link's bandwidth (bytes/s per direction) and latency,
``B_out``/``a_out`` the scale-out link's (one NIC per GPU on DGX/HGX-class nodes).

**All-to-all** (MoE dispatch and combine; NCCL ``ncclGroupStart`` + one send/recv per peer, and
DeepEP): every pair exchanges at once, so the exchanges are concurrent, not a chain of ``g - 1``
latencies. Inside one domain: ``(g-1)/g V / B_up + a_up``. Across domains the off-domain share
``(g-d)/g`` of the payload leaves through the device's NIC while the on-domain share uses NVLink,
concurrently (different links; DeepEP runs its RDMA senders and NVLink forwarders as separate
warps, deepseek-ai/DeepEP ``csrc/kernels/internode.cu``)::

    t = max(V_off / B_out, V_nvl / B_up) + a_out + a_up        V_off = V (g - d) / g

With node deduplication (:class:`~serveplan.specs.comm.CommOptions` ``dedup_nodes``) a token
crosses the network once per remote domain it is routed to, then is forwarded over NVLink:
``V_off = V / c * (D - 1) (1 - (1 - 1/D)^c)`` for ``c`` routed copies per token placed uniformly
(expected distinct remote domains among ``c`` targets), and NVLink also carries the forwarded
share ``V_off (d - 1) / d``. The latency term does not grow with ``g``: one network hop and one
NVLink hop (measured: NCCL all-to-all over 2, 4, 8 H200 ranks starts in 7.1, 7.4 and 9.3 us,
aiconfigurator's nccl-2.26.2 table fitted in ``measured-h200.yaml``).

**All-reduce**: inside one domain a ring, ``2(g-1)/g V / B_up + 2(g-1) a_up`` (nccl-tests
PERFORMANCE.md bus bandwidth), or, on NVSwitch systems with in-switch reduction (NVLS, NVLink
SHARP: the switch adds the contributions and multicasts the sum, NCCL 2.17+), each device sends
its payload once and receives the sum once: ``V / B_up + 2 a_up``. Across domains hierarchically
(NCCL's tree/CollNet split: reduce-scatter inside the domain, all-reduce of ``V / d`` across the
``D`` domains over the NICs, all-gather inside the domain)::

    t = 2 (d-1)/d V / B_up + 2 (D-1)/D (V / d) / B_out + 2 (d-1) a_up + 2 (D-1) a_out

instead of a flat ring of ``g`` ranks over the slowest link. ``a_up`` is the scale-up link's hop
latency; where a measured profile gives the start-up latency ``A_up`` of a whole all-reduce over
the domain (its NCCL curve), the domain's part is that start-up once, ``A_up + 2 (D-1) a_out``:
the measured start-up already holds the domain's hops (charging it per hop, as ``2 (d-1) A_up``,
counted a 57 KB all-reduce over 16 B200 at 0.36 ms instead of about 0.05 ms).

**Send/recv**: ``V / B + a`` on the link between the two devices.

The BestServe communication model (eq. 8, ``values / t / (e_+ S_+)``) is kept as it was for the
profiles that ask for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from serveplan.ops.base import Collective
from serveplan.specs.hardware import DeviceSpec
from serveplan.specs.profile import CommModel


def remote_domains(copies: float, domains: int) -> float:
    """Expected distinct remote domains among ``copies`` targets placed uniformly over
    ``domains`` domains: ``(D - 1)(1 - (1 - 1/D)^c)`` (each of the other ``D - 1`` domains is
    missed by all ``c`` targets with probability ``(1 - 1/D)^c``)."""
    if domains <= 1 or copies <= 0:
        return 0.0
    return float((domains - 1) * (1.0 - (1.0 - 1.0 / domains) ** copies))


def collective_coefficients(kind: Collective, group_size: int, volume: np.ndarray, values: np.ndarray,
                            hardware: DeviceSpec, comm_model: CommModel, *, copies: float = 0.0,
                            dedup_nodes: bool = False,
                            scale_up_latency: Mapping[Collective, float] | None = None) -> tuple[np.ndarray, float]:
    """Seconds per feature unit at communication efficiency 1, and the latency term, of one collective.

    ``volume`` (bytes) and ``values`` are per-device payloads as feature vectors; ``copies`` the
    routed copies per token of an MoE all-to-all (for node deduplication); ``scale_up_latency``
    measured start-up latencies of the scale-up tier by collective (reused from a measured
    profile's NCCL curves where it has them), else the link's ``latency_s``.
    """
    g = group_size
    up = hardware.intra_node_link
    a_up = (scale_up_latency or {}).get(kind, up.latency_s)
    if comm_model is CommModel.BESTSERVE and kind is Collective.ALL_REDUCE:
        # BestServe eq. (8): (b*s*h/t) / (e_+ * S_+), a count of values, no latency term
        return values / g / hardware.link_for(g).bandwidth, 0.0
    if kind is Collective.SEND_RECV:
        link = hardware.link_for(g)
        return volume / link.bandwidth, link.latency_s
    d = hardware.domain_size
    out = hardware.inter_node_link
    if g <= d or out is None:  # one tier
        if kind is Collective.ALL_REDUCE:
            if hardware.in_switch_reduction and g > 2:
                return volume / up.bandwidth, 2 * a_up
            return (2 * (g - 1) / g) * volume / up.bandwidth, 2 * (g - 1) * a_up
        return ((g - 1) / g) * volume / up.bandwidth, a_up   # all-to-all, pairwise concurrent
    domains = math.ceil(g / d)
    if kind is Collective.ALL_REDUCE:
        coef = 2 * (d - 1) / d / up.bandwidth + 2 * (domains - 1) / domains / d / out.bandwidth
        measured = (scale_up_latency or {}).get(kind)
        # the reduce-scatter and all-gather inside the domain: 2 (d - 1) ring hops of the link's
        # latency, or, where a measured profile gives the start-up of a whole all-reduce over the
        # domain's d ranks (which already holds those hops, or NVLS's two), that start-up once
        up_lat = measured if measured is not None else 2 * (d - 1) * up.latency_s
        return coef * volume, up_lat + 2 * (domains - 1) * out.latency_s
    # all-to-all across domains
    on_share = (d - 1) / g
    if dedup_nodes and copies > 0:
        off_share = min(remote_domains(copies, domains) / copies, (g - d) / g)
        nvl_share = on_share + off_share * (d - 1) / d
    else:
        off_share = (g - d) / g
        nvl_share = on_share
    coef = max(off_share / out.bandwidth, nvl_share / up.bandwidth)
    return coef * volume, out.latency_s + a_up
