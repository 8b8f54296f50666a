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

    from serveplan.sim.prefix_cache import BlockChains, PrefixCache, PrefixStats

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
    from serveplan.sim.prefix_cache import BlockChains, PrefixCache, PrefixStats

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


def test_write_through_stores_whole_prompt_chunks_and_hits_only_them():
    """LMCache-style write-through with 4-token blocks and 4-block (16-token) chunks, an 18-block GPU
    cache. Session 0's first turn (40 tokens) stores 40 // 16 = 2 chunks = 8 blocks (store time
    8 x 1 s); it leaves 10 full blocks cached. Session 1's 64-token prompt (16 blocks, 4 chunks
    stored: 16 s) leaves 2 free blocks, so 8 of session 0's 10 cached blocks spill to CPU: GPU
    blocks [0, 2), CPU [2, 10). Session 0's next turn (56 tokens, at most (56 - 1) // 4 = 13
    blocks) finds only the stored chunks in CPU memory: blocks [2, 8) (not [2, 10): blocks 8-9
    hold the answer and the partial chunk, never stored), a hit of 8 blocks = 32 tokens ending on a
    chunk boundary. Its load starts at the chunk boundary below the GPU hit (block 0), so it copies
    8 blocks (2 of them again) at 0.01 s: 0.08 s; it stores 56 // 16 = 3 chunks = 12 blocks less
    the 8 stored: 4 s."""
    from serveplan.sim.prefix_cache import BlockChains, PrefixCache, PrefixStats

    blocks = [0] * 3
    kv = KVCache(18 * 4, 4, blocks)
    st = PrefixStats(3)
    pc = PrefixCache(kv, BlockChains(4, session=[0, 1, 0]), st, cpu_blocks=40, cpu_block_s=0.01,
                     recompute=lambda b, c: 1.0 * b, chunk_blocks=4, store_block_s=1.0)
    kv.prefix = pc
    assert pc.peek(0, 40) == 0
    kv.allocate(0, 40)
    assert st.store_s[0] == 8.0 and pc.loads[0] == 8.0
    kv.free_request(0, 40)
    assert pc.peek(1, 64) == 0
    kv.allocate(1, 64)
    assert st.store_s[1] == 16.0
    assert pc.nodes[0][:2] == [2, 10]
    kv.free_request(1, 64)
    assert pc.peek(2, 56) == 32
    kv.allocate(2, 56)
    assert (st.hit_tokens[2], st.cpu_tokens[2]) == (32, 24)
    assert st.load_s[2] == pytest.approx(8 * 0.01)
    assert st.store_s[2] == 4.0
    assert pc.loads[2] == pytest.approx(4.08)


def test_write_through_hit_is_cut_to_a_chunk_boundary():
    """Without the connector the same CPU hit would reach block 10 (the cached answer blocks)."""
    from serveplan.sim.prefix_cache import BlockChains, PrefixCache, PrefixStats

    blocks = [0] * 3
    kv = KVCache(18 * 4, 4, blocks)
    pc = PrefixCache(kv, BlockChains(4, session=[0, 1, 0]), PrefixStats(3), cpu_blocks=40, cpu_block_s=0.01,
                     recompute=lambda b, c: 1.0 * b)
    kv.prefix = pc
    for q, n in ((0, 40), (1, 64)):
        pc.peek(q, n)
        kv.allocate(q, n)
        kv.free_request(q, n)
    assert pc.peek(2, 56) == 40
