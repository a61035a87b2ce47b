"""KV block manager: prefix reuse, reference counts, LRU eviction, conservation."""

import pytest

from simkit.kvcache import KvCache


def test_match_acquire_release_and_lru_eviction_order():
    kv = KvCache(4)
    kv.allocate(3)
    assert [kv.register(k) for k in (10, 11, 12)] == [True, True, True]
    assert (kv.free_blocks, kv.used_blocks) == (1, 3)
    kv.release([10, 11, 12], 0)  # freed in reverse: 12 is least recently freed
    assert kv.lru_keys() == [12, 11, 10] and kv.free_blocks == 4
    assert kv.match([10, 11, 12, 13], limit=10) == (3, 3)
    assert kv.match([10, 11, 12], limit=2) == (2, 2)
    kv.allocate(2)  # takes the one anonymous block, then evicts 12
    assert kv.lru_keys() == [11, 10]
    assert kv.match([10, 11, 12], limit=10) == (2, 2)
    kv.check()


def test_shared_blocks_are_reference_counted():
    kv = KvCache(2)
    kv.allocate(1)
    kv.register(7)
    kv.acquire([7])  # a second request hits the block in use
    assert kv.ref[7] == 2 and kv.match([7], 5) == (1, 0)
    kv.release([7], 0)
    assert kv.ref[7] == 1 and kv.lru_keys() == []
    kv.release([7], 0)
    assert 7 not in kv.ref and kv.lru_keys() == [7]
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


# ---------------------------------------------------------------------------------------------
# model-based check: the fast cache against the plain OrderedDict oracle (tests/kv_oracle.py)

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kv_oracle import OracleKvCache  # noqa: E402


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["admit", "free", "alloc"]), st.integers(0, 10_000)),
                max_size=120),
       st.integers(4, 40))
def test_fast_cache_behaves_like_the_oracle(ops, capacity):
    fast, slow = KvCache(capacity), OracleKvCache(capacity)
    holders = []  # (keys held, anonymous blocks) per live "request"
    for op, seed in ops:
        if op == "admit":  # a prompt of 1-6 blocks from one of 3 chained families
            fam, n = seed % 3, 1 + seed % 6
            keys = [fam * 100 + j for j in range(n)]
            hits = fast.match(keys, n - 1)
            assert hits == slow.match(keys, n - 1)
            if n - hits[0] > fast.free_blocks - hits[1]:
                continue
            for kv in (fast, slow):
                kv.acquire(keys[:hits[0]])
                kv.allocate(n - hits[0])
            taken = fast.register_many(keys[hits[0]:])
            assert taken == [k for k in keys[hits[0]:] if slow.register(k)]
            holders.append((keys[:hits[0]] + taken, n - hits[0] - len(taken)))
        elif op == "free" and holders:
            keys, anon = holders.pop(seed % len(holders))
            fast.release(keys, anon)
            slow.release(keys, anon)
        elif op == "alloc" and fast.free_blocks:
            n = 1 + seed % fast.free_blocks
            fast.allocate(n)
            slow.allocate(n)
            holders.append(([], n))
        fast.check()
        assert fast.lru_keys() == list(slow.lru)
        assert (fast.free_blocks, fast.used_blocks, fast.ref) == (slow.free_blocks, slow.used_blocks, slow.ref)


def test_stale_queue_entries_are_compacted():
    kv = KvCache(10)
    kv.allocate(1)
    kv.register(5)
    for _ in range(20_000):  # free and re-take the same block: each cycle leaves a stale entry
        kv.release([5], 0)
        kv.acquire([5])
    assert len(kv.order) <= 2 * len(kv.cached) + 4096 + 1
    kv.release([5], 0)
    assert kv.lru_keys() == [5]
    kv.check()
