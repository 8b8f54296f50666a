"""The one owner of an instance's KV blocks: admission, growth, release, deferred release, peak."""

from __future__ import annotations

import math

import pytest

from serveplan.sim.kv import KVCache


def test_blocks_follow_tokens_and_come_back():
    kv = KVCache(capacity_tokens=100, block_size=16, blocks=[0] * 3)  # 6 blocks (96 tokens)
    assert kv.total == 6 and kv.free == 6
    kv.allocate(0, 17)                      # 2 blocks
    assert kv.blocks[0] == 2 and kv.free == 4 and kv.peak == 2
    lens, gen = [17, 0, 0], [1, 0, 0]
    kv.decode([0], 1, lens, gen)            # the 18th token fits the second block
    assert lens[0] == 18 and gen[0] == 2 and kv.free == 4
    kv.decode([0], 14, lens, gen)           # 32 tokens fill two blocks
    assert kv.blocks[0] == 2 and kv.free == 4
    kv.decode([0], 1, lens, gen)            # the 33rd needs a third
    assert kv.blocks[0] == 3 and kv.free == 3
    kv.decode([0], 29, lens, gen)           # 62 tokens: 4 blocks
    assert lens[0] == 62 and gen[0] == 46 and kv.blocks[0] == 4 and kv.free == 2
    assert kv.try_allocate(1, 33) is False and kv.blocks[1] == 0   # 3 blocks do not fit
    assert kv.try_allocate(1, 32) is True and kv.free == 0 and kv.peak == 6
    kv.free_request(0)
    assert kv.free == 4 and kv.blocks[0] == 0 and kv.peak == 6


def test_a_cache_being_sent_is_freed_when_the_transfer_ends():
    kv = KVCache(capacity_tokens=64, block_size=16, blocks=[0, 0])
    kv.allocate(0, 40)
    kv.free_at(0, t=5.0, now=1.0)
    assert kv.free == 1 and kv.next_release == 5.0 and kv.blocks[0] == 0
    kv.release_due(4.9)
    assert kv.free == 1
    kv.release_due(5.0)
    assert kv.free == 4 and kv.next_release == math.inf
    kv.allocate(1, 16)
    kv.free_at(1, t=2.0, now=2.0)           # already over: freed now
    assert kv.free == 4


@pytest.mark.parametrize("free, expect", [(8, 40), (4, 32), (3, 16), (2, 16)])
def test_steps_that_fit_is_the_largest_stretch_whose_blocks_fit(free, expect):
    """Two requests of 16 tokens (one full block each): k more tokens need 2 x (ceil((16 + k) / 16) - 1)
    new blocks: 2 up to k = 16, 4 up to 32, 6 up to 48."""
    kv = KVCache(capacity_tokens=16 * 10, block_size=16, blocks=[0, 0])
    lens = [16, 16]
    kv.allocate(0, 16)
    kv.allocate(1, 16)
    kv.free = free  # as if other requests held the rest
    assert kv.steps_that_fit([0, 1], lens, 40) == expect


def test_overcommitting_is_an_invariant_violation():
    kv = KVCache(capacity_tokens=32, block_size=16, blocks=[0])
    with pytest.raises(AssertionError, match="overcommitted"):
        kv.allocate(0, 48)


def test_one_token_append_matches_decode_by_one():
    a = KVCache(capacity_tokens=160, block_size=16, blocks=[0, 0, 0])
    b = KVCache(capacity_tokens=160, block_size=16, blocks=[0, 0, 0])
    for kv in (a, b):
        for q, n in enumerate((16, 17, 31)):
            kv.allocate(q, n)
    lens_a, lens_b, gen = [16, 17, 31], [16, 17, 31], [1, 1, 1]
    a.append_tokens([0, 1, 2], lens_a)
    b.decode([0, 1, 2], 1, lens_b, gen)
    assert a.blocks == b.blocks and a.free == b.free


# ---------------------------------------------------------------------- prefix cache accounting
def _check_invariants(kv, pc, running):
    """free = total - own blocks of running requests - GPU blocks of pinned nodes; cached GPU blocks
    of unpinned nodes are the evictable part of free; tier usage is the sum of node ranges."""
    nodes = pc.nodes.values()
    assert all(0 <= g <= c <= d and refs >= 0 for g, c, d, refs in nodes)
    pinned = sum(g for g, _, _, refs in nodes if refs)
    assert pc.evictable == sum(g for g, _, _, refs in nodes if not refs)
    assert kv.free == kv.total - sum(kv.blocks[q] for q in running) - pinned
    assert 0 <= pc.evictable <= kv.free
    assert pc.cpu_used == sum(c - g for g, c, _, _ in nodes) <= pc.cpu_cap
    assert pc.disk_used == sum(d - c for _, c, d, _ in nodes) <= pc.disk_cap


@pytest.mark.parametrize("cpu, disk", [(0, 0), (40, 0), (30, 60)])
def test_prefix_cache_accounting_holds_through_random_admissions_decodes_and_releases(cpu, disk):
    import random

    from serveplan.sim.kv import BlockChains, PrefixCache, PrefixStats

    rnd = random.Random(7)
    n, bs = 400, 4
    sessions = [rnd.randrange(12) for _ in range(n)]
    prompt = [rnd.randrange(5, 120) for _ in range(n)]
    blocks = [0] * n
    kv = KVCache(100 * bs, bs, blocks)
    pc = PrefixCache(kv, BlockChains(bs, session=sessions, sys_tokens=10), PrefixStats(n), cpu_blocks=cpu,
                     disk_blocks=disk, cpu_block_s=1e-4, disk_block_s=2e-4, recompute=lambda b, c: 5e-4 * b)
    kv.prefix = pc
    kv_len, gen = [0] * n, [0] * n
    running: list[int] = []
    q = 0
    while q < n or running:
        op = rnd.random()
        if q < n and op < 0.4 and kv.blocks_for(prompt[q]) <= kv.free:
            hit = pc.peek(q, prompt[q])
            assert hit % bs == 0 and hit <= prompt[q] - 1
            late = kv.allocate(q, prompt[q])
            assert 0 <= late <= hit
            kv_len[q] = prompt[q]
            running.append(q)
            q += 1
        elif running and op < 0.8:
            fits = [r for r in running if kv_len[r] % bs or kv.free >= 1]
            if fits:
                kv.decode(fits[:1], 1, kv_len, gen)
        elif running:
            r = running.pop(rnd.randrange(len(running)))
            kv.free_request(r, kv_len[r])
        else:  # nothing runs: the next prompt always fits an empty cache of 100 blocks
            assert kv.blocks_for(prompt[q]) <= kv.free
        _check_invariants(kv, pc, running)
    assert kv.free == kv.total and all(refs == 0 for *_, refs in pc.nodes.values())
    st = pc.stats
    assert sum(st.hit_tokens) > 0 and st.dropped > 0
    assert (st.spilled_cpu > 0 and sum(st.cpu_tokens) > 0) == bool(cpu)
    assert (st.spilled_disk > 0 and sum(st.disk_tokens) > 0) == bool(disk)


def test_lower_tier_hits_are_recomputed_when_loading_is_slower():
    """A 12-block GPU cache (4 tokens a block) and a CPU tier. Session 0's first turn leaves 10
    full blocks; session 1's 12-block prompt evicts them to CPU; session 0's next turn (44 tokens,
    at most (44 - 1) // 4 = 10 blocks reusable) loads them when a block loads in 1 ms against 2 ms
    to recompute (10 ms < 20 ms), and recomputes them when it loads in 3 ms (30 ms > 20 ms)."""
    from serveplan.sim.kv import BlockChains, PrefixCache, PrefixStats

    for load_s, hit in ((1e-3, 40), (3e-3, 0)):
        blocks = [0] * 3
        kv = KVCache(12 * 4, 4, blocks)
        pc = PrefixCache(kv, BlockChains(4, session=[0, 1, 0]), PrefixStats(3), cpu_blocks=20, cpu_block_s=load_s,
                         recompute=lambda b, c: 2e-3 * b)
        kv.prefix = pc
        kv.allocate(0, 40)
        kv.free_request(0, 40)
        assert (pc.nodes[0][0], pc.evictable, kv.free) == (10, 10, 12)
        kv.allocate(1, 48)
        assert (pc.nodes[0][:2], pc.cpu_used, pc.stats.spilled_cpu) == ([0, 10], 10, 10)
        kv.free_request(1, 48)
        assert pc.peek(2, 44) == hit
        assert kv.allocate(2, 44) == 0
        assert (pc.stats.cpu_tokens[2], pc.stats.load_s[2]) == ((40, 10 * load_s) if hit else (0, 0.0))
