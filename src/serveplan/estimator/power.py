"""Power of one device while it runs a step, from the step model's own breakdown.

A device draws its idle power whenever it is on, and between idle and its board power (TDP/TGP,
``DeviceSpec.board_power_w``) as it works. The share of that dynamic range a step uses, its
*activity*, weighs the step's time by what bounds it (:class:`StepActivity`)::

    activity = (t_compute + MEMORY_ACTIVITY * t_memory + COMM_ACTIVITY * t_comm) / t_step   (<= 1)
    P(step)  = P_idle + (P_board - P_idle) * activity

where ``t_compute`` and ``t_memory`` are the times of the step's compute-bound and memory-bound
operators and ``t_comm`` its collectives (:meth:`~serveplan.estimator.step.Estimator.estimate`);
time left over (kernel launches, the host) draws idle power. A device busy a share ``u`` of the
time on steps of activity ``a`` draws ``P_idle + (P_board - P_idle) * u * a`` on average
(:func:`average_power_w`); the server around it adds :func:`host_power_w` per device.

Sources of each term (``docs/cost-energy.md``):

* compute-bound work runs to the board power: dense GEMMs are what power caps throttle (MLPerf
  MaxQ runs set a lower ``power_limit`` and lose throughput at it; Patel et al., "Characterizing
  power management opportunities for LLMs in the cloud", ASPLOS'24: the prompt phase's power peaks
  near TDP);
* memory-bound decode draws far less: 137-300 W on a 700 W H200 with HBM saturated, and no power
  cap triggers (Ma et al., "The Illusion of Power Capping in LLM Decode", arXiv:2605.11999, 2026):
  ``MEMORY_ACTIVITY`` is the top of that range above an 80 W idle, (300 - 80) / (700 - 80);
* collectives and idle are assumptions stated below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from serveplan.estimator.step import StepEstimate
from serveplan.specs.hardware import DeviceSpec

#: share of the dynamic range (board power - idle) a memory-bound operator draws: the top of the
#: 137-300 W a 700 W H200 draws in HBM-saturated decode (Ma et al., arXiv:2605.11999, 2026), above
#: its 80 W idle: (300 - 80) / (700 - 80) = 0.355
MEMORY_ACTIVITY = 0.355
#: share of the dynamic range a collective draws: assumed, a quarter (links and copy engines busy,
#: the SMs mostly waiting; no public per-phase measurement was found)
COMM_ACTIVITY = 0.25
#: idle power as a share of the board power where the device file gives none: assumed from the one
#: public reading used (H200 SXM idle 80.3 W of 700 W = 0.115; ``h200.yaml``), rounded down
IDLE_SHARE = 0.1
#: the server's own power (CPUs, memory, NICs, switches, fans, supply losses) per device as a share
#: of the board power where the device file gives none: measured on an 8 x H100 HGX node (Latif et
#: al., IEEE Access 13, 2025: 8.4 kW at most with the GPUs near full load; (8.4 kW - 8 x 700 W) / 8 =
#: 350 W = 0.5 x 700 W), assumed to scale with the board power on other servers
HOST_SHARE = 0.5


@dataclass(frozen=True, slots=True, kw_only=True)
class StepActivity:
    """What a step's time is spent on, and the share of a device's dynamic power range it uses.

    ``compute_s``, ``memory_s`` and ``comm_s`` are the times of its compute-bound operators,
    memory-bound operators and collectives (scaled down together when they overlap to more than
    the step); ``step_s`` the step's time.
    """

    step_s: float
    compute_s: float
    memory_s: float
    comm_s: float

    @property
    def activity(self) -> float:
        """Share of (board power - idle power) the step draws on average, in [0, 1]."""
        if self.step_s <= 0:
            return 0.0
        a = (self.compute_s + MEMORY_ACTIVITY * self.memory_s + COMM_ACTIVITY * self.comm_s) / self.step_s
        return min(1.0, max(0.0, a))

    def to_dict(self) -> dict[str, Any]:
        return {"step_s": self.step_s, "compute_s": self.compute_s, "memory_s": self.memory_s,
                "comm_s": self.comm_s, "activity": self.activity}


def step_activity(est: StepEstimate) -> StepActivity:
    """The :class:`StepActivity` of a step estimate: its operators' times by their bound (each
    times its module's count per step), its modules' collectives and its pipeline transfers."""
    count = {(m.group, m.name): m.count for m in est.modules}
    comp = mem = 0.0
    for o in est.ops:
        t = o.time_s * count.get((o.group, o.module), 1)
        if o.bound == "compute":
            comp += t
        else:   # memory-bound, or a measured-rate kernel (attention, grouped GEMM) streaming memory
            mem += t
    comm = sum(m.comm_s * m.count for m in est.modules) + est.pp_comm_s
    busy = comp + mem + comm
    scale = est.total_s / busy if busy > est.total_s > 0 else 1.0
    return StepActivity(step_s=est.total_s, compute_s=comp * scale, memory_s=mem * scale, comm_s=comm * scale)


def idle_power_w(device: DeviceSpec) -> float:
    """Idle power of one device (W): its file's, else :data:`IDLE_SHARE` of the board power."""
    return device.idle_power_w or IDLE_SHARE * device.board_power_w


def host_power_w(device: DeviceSpec) -> float:
    """The server's power per device outside the accelerator (W): the device file's
    ``host_power_w``, else :data:`HOST_SHARE` of the board power. Drawn whatever the load: the
    planner rents whole servers."""
    return device.host_power_w or HOST_SHARE * device.board_power_w


def average_power_w(device: DeviceSpec, busy: float, activity: float) -> float:
    """Average power of one accelerator (W, without the host) busy a share ``busy`` of the time on
    steps of average ``activity``: ``P_idle + (P_board - P_idle) * busy * activity``.

    Examples
    --------
    A 700 W device with an 80 W idle, busy half the time at activity 0.5:
    ``80 + 620 * 0.5 * 0.5 = 235`` W.
    """
    idle = idle_power_w(device)
    u = min(1.0, max(0.0, busy))
    return idle + (device.board_power_w - idle) * u * min(1.0, max(0.0, activity))
