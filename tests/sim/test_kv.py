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
