"""``serveplan simulate`` options of multi-turn sessions, the prefix cache and KV tiers, and its table."""

from __future__ import annotations

import math

from rich.table import Table

from serveplan.cli import console
from serveplan.errors import SpecError
from serveplan.sim.engine import SimulationResult
from serveplan.sim.sessions import KVTiers, session_workload, with_system_prompt
from serveplan.sim.workload import Workload


def session_options(wl: Workload | None, *, sessions: int | None, turns: int | None, think_time: float | None,
                    session_dataset: str | None, system_prompt_len: int, kv_tiers: str | None, host: str | None,
                    kv_cpu_gb: float | None, kv_disk_gb: float | None, kv_load: str | None, seed: int,
                    kv_connector: str | None = None,
                    arrival: str, cv: float, other_source: str | None) -> tuple[Workload | None, KVTiers | None]:
    """The session workload (or ``wl`` with its system prompt) and the KV tiers the flags ask for.
    ``wl`` is None when sessions replace the request source."""
    if sessions is None:
        for flag, v in (("--turns", turns), ("--think-time", think_time), ("--session-dataset", session_dataset)):
            if v is not None:
                raise SpecError(f"{flag}={v} needs --sessions N (the number of conversations)")
    else:
        if other_source:
            raise SpecError(f"give one request source; got --sessions and {other_source}")
        if isinstance(sessions, bool) or sessions < 1:
            raise SpecError(f"sessions={sessions} must be a positive integer (conversations)")
        t = 4 if turns is None else turns
        if t < 1:
            raise SpecError(f"turns={t} must be a positive integer (turns per conversation)")
        th = 0.0 if think_time is None else think_time
        if not (math.isfinite(th) and th >= 0):
            raise SpecError(f"think-time={th} must be a non-negative number of seconds")
        wl = session_workload(sessions, t, think_s=th, dataset=session_dataset, system_prompt_len=system_prompt_len,
                              seed=seed, arrival=arrival, cv=cv)
    if system_prompt_len < 0:
        raise SpecError(f"system-prompt-len={system_prompt_len} must be a non-negative number of tokens")
    if sessions is None and system_prompt_len:
        assert wl is not None
        wl = with_system_prompt(wl, system_prompt_len)
    tiers = None
    given = [f for f, v in (("--host", host), ("--kv-cpu-gb", kv_cpu_gb), ("--kv-disk-gb", kv_disk_gb),
                            ("--kv-load", kv_load), ("--kv-connector", kv_connector)) if v is not None]
    if kv_tiers is None and given:
        raise SpecError(f"{', '.join(given)} configure KV tiers: give --kv-tiers cpu or cpu,disk")
    if kv_tiers is not None:
        from serveplan.specs.catalog import get_host, list_hosts

        if host is None:
            raise SpecError(f"kv-tiers={kv_tiers!r} needs --host (the CPU memory, disk and links per GPU); "
                            f"known: {', '.join(list_hosts())}")
        names = tuple(x.strip().lower() for x in kv_tiers.split(","))
        for flag, v in (("kv-cpu-gb", kv_cpu_gb), ("kv-disk-gb", kv_disk_gb)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise SpecError(f"{flag}={v} must be a positive number of GB per GPU")
        tiers = KVTiers(tiers=names, host=get_host(host), cpu_bytes=None if kv_cpu_gb is None else kv_cpu_gb * 1e9,
                        disk_bytes=None if kv_disk_gb is None else kv_disk_gb * 1e9, load=kv_load,
                        connector=None if kv_connector is None else kv_connector.strip().lower())
    return wl, tiers


def print_prefix_cache(res: SimulationResult) -> None:
    """Hit rate, hits per tier and the TTFT of requests with and without a cached prefix."""
    pc = res.prefix_cache
    if pc is None:
        return
    con = console()
    t = Table(title=f"prefix cache: {pc.hit_rate:.1%} of {pc.prompt_tokens:,} prompt tokens hit")
    for col in ("", "tokens", "share of prompt"):
        t.add_column(col, justify="left" if not col else "right")
    def share(x: int) -> str:
        return f"{x / pc.prompt_tokens:.1%}" if pc.prompt_tokens else "-"

    for label, v in (("cached on GPU", pc.gpu_tokens), ("loaded from CPU", pc.cpu_tokens),
                     ("loaded from disk", pc.disk_tokens), ("computed", pc.prompt_tokens - pc.hit_tokens)):
        t.add_row(label, f"{v:,}", share(v))
    con.print(t)

    def ms(x: float) -> str:
        return "-" if not math.isfinite(x) else f"{x * 1e3:,.1f}"

    s = Table(title="TTFT by prefix (ms)")
    for col in ("requests", "count", "mean", "P50", "P90", "P99"):
        s.add_column(col, justify="left" if col == "requests" else "right")
    for label, st in (("with a cached prefix", pc.ttft_hit_s), ("all computed", pc.ttft_miss_s),
                      ("KV load (lower-tier hits)", pc.load_s)):
        s.add_row(label, f"{st.count:,}", ms(st.mean), ms(st.p50), ms(st.p90), ms(st.p99))
    con.print(s)
    sp = pc.ttft_split_s
    if sp:
        con.print(f"mean TTFT {sum(sp.values()) * 1e3:,.1f} ms = queueing {sp['queue'] * 1e3:,.1f} + KV load "
                  f"{sp['kv_load'] * 1e3:,.1f} + prefill {sp['prefill'] * 1e3:,.1f} ms")
    con.print(f"per request: {pc.cached_tokens:,.0f} prompt tokens cached, {pc.computed_tokens:,.0f} computed; "
              f"blocks spilled to CPU {pc.spilled_cpu_blocks:,}, to disk {pc.spilled_disk_blocks:,}, "
              f"dropped {pc.dropped_blocks:,}")
