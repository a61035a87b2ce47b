"""KV block manager: prefix reuse, reference counts, LRU eviction, conservation."""

import pytest

from simkit.engine.kvcache import KvCache


def test_match_acquire_release_and_lru_eviction_order():
    kv = KvCache(4)
    kv.allocate(3)
    assert [kv.register(k) for k in (10, 11, 12)] == [True, True, True]
    assert (kv.free_blocks, kv.used_blocks) == (1, 3)
    kv.release([10, 11, 12], 0)  # freed in reverse: 12 is least recently freed
    assert list(kv.lru) == [12, 11, 10] and kv.free_blocks == 4
    assert kv.match([10, 11, 12, 13], limit=10) == (3, 3)
    assert kv.match([10, 11, 12], limit=2) == (2, 2)
    kv.allocate(2)  # takes the one anonymous block, then evicts 12
    assert list(kv.lru) == [11, 10]
    assert kv.match([10, 11, 12], limit=10) == (2, 2)
    kv.check()


def test_shared_blocks_are_reference_counted():
    kv = KvCache(2)
    kv.allocate(1)
    kv.register(7)
    kv.acquire([7])  # a second request hits the block in use
    assert kv.ref[7] == 2 and kv.match([7], 5) == (1, 0)
    kv.release([7], 0)
    assert kv.ref[7] == 1 and 7 not in kv.lru
    kv.release([7], 0)
    assert 7 not in kv.ref and 7 in kv.lru
    kv.check()


def test_duplicate_identity_stays_anonymous():
    kv = KvCache(3)
    kv.allocate(2)
    assert kv.register(5) is True
    assert kv.register(5) is False
    assert kv.used_anon == 1 and kv.ref == {5: 1}
    kv.check()


def test_over_allocation_raises():
    kv = KvCache(2)
    kv.allocate(2)
    with pytest.raises(RuntimeError, match="over-allocation"):
        kv.allocate(1)


def test_register_many_matches_register_one_by_one():
    a, b = KvCache(6), KvCache(6)
    for kv in (a, b):
        kv.allocate(5)
        kv.register(3)
    keys = [1, 2, 2, 3, 4]
    one_by_one = [k for k in keys if a.register(k)]
    assert b.register_many(keys) == one_by_one == [1, 2, 4]
    assert (a.ref, a.used_anon) == (b.ref, b.used_anon)
    a.check()
    b.check()


def test_one_free_queue_full_anonymous_blocks_age_like_cached_ones():
    # vLLM's single free-block queue (and the reference): request A frees keyed 1, 2 at t1;
    # request B frees 2 full decode blocks and 1 partial block at t2. The partial block is
    # plain free and taken first; then the queue head: A's blocks (2 before 1: reverse order),
    # and only then B's anonymous full blocks. Before this model, simkit took B's anonymous
    # blocks first and kept A's prefix cached longer than the reference did.
    kv = KvCache(5)
    kv.allocate(5)
    kv.register_many([1, 2])
    kv.release([1, 2], 0)  # A
    kv.release([], 3, anon_full=2)  # B
    assert (kv.free_anon, kv.cached_blocks, kv.free_blocks) == (1, 4, 5)
    kv.allocate(2)  # the partial block, then evicts key 2
    assert kv.match([1, 2], 2) == (1, 1)
    kv.allocate(1)  # evicts key 1
    assert kv.match([1], 1) == (0, 0)
    assert kv.cached_blocks == 2  # B's two anonymous full blocks are next
    kv.check()


def test_without_prefix_caching_freed_blocks_are_plain_free():
    kv = KvCache(4, prefix_caching=False)
    kv.allocate(4)
    kv.release([], 4, anon_full=3)
    assert (kv.free_anon, kv.cached_blocks) == (4, 0)
    kv.check()
