"""The least-recently-used free order of ``backend: sglang`` (``KvCache(by_touch=True)``),
queued as segments of keys and evicted in bulk, against a one-entry-per-block model of the
same rule: free blocks leave in order of (last use, release order), a request's blocks
released deepest first, a key's last use the latest of all its holders'."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit.engine.kvcache import KvCache


class PerBlockModel:
    """Every free block its own entry ``(last use, push id, key or None)``; eviction sorts."""

    def __init__(self, capacity: int) -> None:
        self.free_anon, self.used_anon = capacity, 0
        self.ref: dict[int, int] = {}
        self.free: list[tuple] = []
        self.stamps: dict[int, int] = {}
        self.pid = 0
        self.events: list[tuple] = []

    @property
    def free_blocks(self) -> int:
        return self.free_anon + len(self.free)

    def cached_keys(self) -> set:
        return {e[2] for e in self.free if e[2] is not None}

    def match(self, keys, limit):
        cached = self.cached_keys()
        hits = in_lru = 0
        for key in keys[:limit]:
            if key in self.ref:
                hits += 1
            elif key in cached:
                hits, in_lru = hits + 1, in_lru + 1
            else:
                break
        return hits, in_lru

    def _take(self, key) -> None:
        self.free = [e for e in self.free if e[2] != key]
        self.ref[key] = 1

    def acquire(self, keys) -> None:
        for key in keys:
            if key in self.ref:
                self.ref[key] += 1
            else:
                self._take(key)

    def allocate(self, n: int) -> None:
        take = min(n, self.free_anon)
        self.free_anon -= take
        if n > take:
            self.free.sort(key=lambda e: e[:2])
            gone, self.free = self.free[:n - take], self.free[n - take:]
            for e in gone:
                self.stamps.pop(e[2], None)
            self.events.append((False, [e[2] for e in gone if e[2] is not None]))
        self.used_anon += n

    def adopt_many(self, keys) -> list:
        cached = self.cached_keys()
        new = []
        for key in keys:
            if key in self.ref:
                self.ref[key] += 1
            elif key in cached:
                self._take(key)
                cached.discard(key)
            else:
                self.ref[key] = 1
                new.append(key)
        self.used_anon -= len(keys)
        self.free_anon += len(keys) - len(new)
        if new:
            self.events.append((True, new))
        return list(keys)

    def _push(self, last: int, key) -> None:
        self.pid += 1
        self.free.append((last, self.pid, key))

    def release(self, keys, anon, anon_full, private_keys, stamp) -> None:
        self.used_anon -= anon
        for _ in range(anon_full - len(private_keys)):
            self.pid += 1 if _ == 0 else 0  # a run: its blocks leave together, in one place
            self.free.append((stamp, self.pid, None))
        for key in reversed(private_keys):
            self._push(stamp, key)
        self.free_anon += anon - anon_full
        for key in reversed(keys):
            last = self.stamps[key] = max(self.stamps.get(key, 0), stamp)
            if self.ref[key] == 1:
                del self.ref[key]
                self._push(last, key)
            else:
                self.ref[key] -= 1


@st.composite
def workloads(draw):
    """Requests on a tree of prompts: (family, branch depth, branch, length, anon tail, full
    of it, private of those, touch, order of ends) steps, a small cache to evict often."""
    capacity = draw(st.integers(6, 40))
    steps = draw(st.lists(st.tuples(
        st.integers(0, 2), st.integers(0, 6), st.integers(0, 2), st.integers(0, 10),
        st.integers(0, 3), st.integers(0, 3), st.integers(0, 2), st.booleans(),
        st.integers(0, 4), st.booleans()), min_size=1, max_size=60))
    return capacity, steps


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=workloads())
def test_segments_evict_exactly_like_one_entry_per_block(case):
    capacity, steps = case
    kv = KvCache(capacity, by_touch=True)
    events: list[tuple] = []
    kv.on_event = lambda stored, keys: events.append((stored, list(keys)))
    model = PerBlockModel(capacity)
    clock = 0
    private = 10**6
    holders: list[list] = []  # [keys held, anon, anon full, private keys, stamp]
    for family, depth, branch, length, anon, full, priv, touch, end, compact in steps:
        keys = [family * 1000 + (branch * 100 if i >= depth else 0) + i for i in range(length)]
        hits, in_lru = kv.match(keys, len(keys))
        assert (hits, in_lru) == model.match(keys, len(keys))
        fresh = length - hits + anon
        if fresh <= kv.free_blocks - in_lru:
            stamp = 0
            if touch:
                clock += 1
                stamp = clock
            for cache in (kv, model):
                cache.acquire(keys[:hits])
                cache.allocate(fresh)
                cache.adopt_many(keys[hits:])
            full = min(full, anon)
            priv = min(priv, full)
            private_keys = list(range(private, private + priv))
            private += priv
            holders.append([keys, anon, full, private_keys, stamp])
        if holders and end:
            held, anon, full, private_keys, stamp = holders.pop(end % len(holders))
            clock += 1
            for cache in (kv, model):
                cache.release(held, anon, full, private_keys, max(stamp, clock - end))
        if compact:
            kv._compact()  # dropping stale entries changes nothing
        kv.check()
        assert events == model.events
        assert kv.free_blocks == model.free_blocks and kv.ref == model.ref
        assert set(k for k in kv.lru if type(k) is int) == model.cached_keys()
