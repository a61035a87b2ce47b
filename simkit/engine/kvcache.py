"""Paged KV cache of one worker: block accounting, prefix caching by block identity, LRU.

Capacity is ``num_gpu_blocks`` blocks. Every block is in exactly one of three states:

* free and empty (``free_anon``): never used, or a freed partial block; allocations take
  these first;
* free and used before (``lru``): a block some request freed, queued least recently freed
  first. One that holds a full prompt block (its identity key known) stays hittable by a later
  request until an allocation takes it; a full one without identity (generated tokens) is queued
  under a placeholder key. Allocations take the queue's head either way, as vLLM's single
  free-block queue does (``vllm/v1/core/block_pool.py``, FreeKVCacheBlockQueue), so a freed
  anonymous block ages in the queue like a cached one and cached blocks freed earlier are
  evicted before it (measured on the reference: prefix hits then agree request by request);
* in use: held by one or more running requests, with an identity (``ref`` counts holders) or
  without (``used_anon``: partial blocks, decode blocks, duplicates).

Freed blocks that no look-up can hit (full blocks without identity, and *private* prompt
blocks: those no other request of the workload has, which the scheduler knows from the whole
workload, see ``VllmScheduler.private_ids``) need no identity of their own in the queue: a
request's run of them enters the queue as one *run* entry of that many blocks, at the very
position the blocks would take one by one, and an allocation consumes a run block by block
(splitting it). The cache behaves exactly as if every block were queued on its own (tested
against that); only the per-block bookkeeping is gone. A preempted request may hit its own
private blocks when readmitted, so it frees them as keys (``private_keys``).

With ``by_touch`` (``backend: sglang``) the free blocks are ordered by their last *use*
instead of their release, as SGLang's radix cache evicts (see :meth:`KvCache.release`). There
the keys one release queues with the same last use enter as one *segment* and leave in bulk;
a key taken back out of the free queue leaves a stale place in its segment, counted, so
eviction skips it (tested against one entry per block, tests/test_kvcache_by_touch.py).

So ``free_anon + cached + len(ref) + used_anon == capacity`` at every step (:meth:`check`),
where ``cached`` counts the blocks in ``lru`` (a run counts its size). A request holds a list of identity keys and a count of anonymous blocks;
freeing returns a request's blocks to the queue's tail in reverse block order (its anonymous
tail blocks first, then its keyed blocks last to first), so a prompt's last blocks are evicted
before its first ones (as vLLM's free-block queue does).

Part of :mod:`simkit.engine`: pure bookkeeping, no SimPy. Deliberately not a SimPy ``Container``: admission is a
scheduler decision made at a pass boundary, not a blocking wait (ARCHITECTURE.md 2.4).
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from itertools import repeat
from operator import gt, or_
from typing import Callable, Optional, Sequence

__all__ = ["KvCache", "PublishedBlocks"]


class _Run:
    """The free-queue entry of ``size`` freed blocks without a hittable identity (equal to
    nothing but itself, so no prompt look-up can hit it)."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


class _Segment:
    """by_touch: consecutive entries of one release that share their last use, queued as one
    bucket entry (``entries[pos:]`` still queued, in eviction order). An entry is live while
    the free queue maps it to this segment; ``stale`` counts the entries of ``entries[pos:]``
    taken back since (acquired, or adopted), so a segment without stale entries is evicted by
    C-level bulk operations and one with only stale entries is dropped whole."""

    __slots__ = ("entries", "pos", "stale", "plain")

    def __init__(self, entries: list, plain: bool = True) -> None:
        self.entries = entries
        self.pos = 0
        self.stale = 0
        self.plain = plain  #: no run among the entries (keys only)


def _consume(iterator) -> None:
    deque(iterator, 0)


class KvCache:
    """Block manager for ``num_blocks`` KV blocks; ``prefix_caching`` enables identity reuse."""

    __slots__ = ("capacity", "prefix_caching", "free_anon", "used_anon", "lru", "ref", "run_extra", "on_event",
                 "by_touch", "heap", "buckets", "queued", "stamps")

    def __init__(self, num_blocks: int, prefix_caching: bool = True, by_touch: bool = False) -> None:
        self.capacity = num_blocks
        self.prefix_caching = prefix_caching
        self.free_anon = num_blocks
        self.used_anon = 0
        #: keys (int) and runs of unhittable blocks; by_touch: each mapped to its _Segment (the
        #: order is the buckets', so a plain dict)
        self.lru: dict = {} if by_touch else OrderedDict()
        self.ref: dict[int, int] = {}
        self.run_extra = 0  #: sum of (size - 1) over the runs in ``lru``
        #: KV events, when set: called as on_event(stored, keys) when blocks gain an identity
        #: (stored=True: hittable from now on) or lose it to eviction (stored=False). Private
        #: blocks (never hittable by another request) are not announced.
        self.on_event: Optional[Callable[[bool, list], None]] = None
        #: order free blocks by their last use instead of their release (see :meth:`release`)
        self.by_touch = by_touch
        #: by_touch: the free order, one bucket per last-use stamp (a min-heap of stamps, and
        #: per stamp its segments of entries in queueing order, which is deepest first);
        #: entries acquired or queued again since are stale (mapped to another segment or none)
        self.heap: list[int] = []
        self.buckets: dict[int, deque] = {}
        self.queued = 0  #: entries in the buckets' segments past their ``pos``, stale ones too
        self.stamps: dict[int, int] = {}  #: by_touch: a keyed block's last use by a holder

    @property
    def cached_blocks(self) -> int:
        """Free blocks that were used before, queued for reuse (keys and runs)."""
        return len(self.lru) + self.run_extra

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation can take (anonymous free plus evictable cached)."""
        return self.free_anon + len(self.lru) + self.run_extra

    @property
    def used_blocks(self) -> int:
        """Blocks held by requests."""
        return self.used_anon + len(self.ref)

    def match(self, keys: Sequence[int], limit: int) -> tuple[int, int]:
        """Leading ``keys`` present in the cache, at most ``limit``.

        Returns ``(hits, hits_in_lru)``: how many leading blocks can be reused, and how many
        of those are currently free (reusing them takes them out of the free pool).
        """
        hits = in_lru = 0
        ref, lru = self.ref, self.lru
        for key in keys:
            if hits >= limit:
                break
            if key in ref:
                hits += 1
            elif key in lru:
                hits += 1
                in_lru += 1
            else:
                break
        return hits, in_lru

    def acquire(self, keys: Sequence[int]) -> None:
        """Take a reference on cached blocks (each must be present, as :meth:`match` said)."""
        ref, lru = self.ref, self.lru
        if self.by_touch:
            for key in keys:
                if key in ref:
                    ref[key] += 1
                else:
                    lru.pop(key).stale += 1
                    ref[key] = 1
            return
        for key in keys:
            if key in ref:
                ref[key] += 1
            else:
                del lru[key]
                ref[key] = 1

    def allocate(self, n: int) -> None:
        """Allocate ``n`` anonymous blocks, evicting least recently freed cached blocks.

        Raises:
            RuntimeError: fewer than ``n`` free blocks (callers check :attr:`free_blocks`).
        """
        if n <= 0:
            return
        if n > self.free_anon + len(self.lru) + self.run_extra:
            raise RuntimeError(f"KV cache over-allocation: {n} blocks asked, {self.free_blocks} free")
        take = min(n, self.free_anon)
        self.free_anon -= take
        evict = n - take
        if evict and self.by_touch:
            self._evict_by_touch(evict)
        elif evict:
            lru = self.lru
            if self.on_event is not None:
                self.on_event(False, self._first_keys(evict))
            if evict == len(lru) + self.run_extra:
                lru.clear()
                self.run_extra = 0
            elif not self.run_extra:
                pop = lru.popitem
                for _ in range(evict):
                    pop(False)  # least recently freed first; the block loses its identity
            else:
                self._evict_with_runs(evict)
        self.used_anon += n

    def _bucket(self, stamp: int) -> deque:
        bucket = self.buckets.get(stamp)
        if bucket is None:
            bucket = self.buckets[stamp] = deque()
            heapq.heappush(self.heap, stamp)
        return bucket

    def _compact(self) -> None:
        """Drop stale bucket entries once they outnumber the live ones."""
        lru = self.lru
        for stamp, bucket in self.buckets.items():
            kept = deque()
            for seg in bucket:
                if seg.stale:
                    live = [e for e in seg.entries[seg.pos:] if lru.get(e) is seg]
                    if not live:
                        continue
                    seg.entries, seg.pos, seg.stale = live, 0, 0
                kept.append(seg)
            self.buckets[stamp] = kept
        self.queued = len(lru)

    def _evict_by_touch(self, evict: int) -> None:
        heap, buckets, lru, stamps = self.heap, self.buckets, self.lru, self.stamps
        lru_get, pop_stamp = lru.get, stamps.pop
        events = self.on_event is not None
        keys = []
        queued = self.queued
        while evict:
            stamp = heap[0]
            bucket = buckets[stamp]
            while evict and bucket:
                seg = bucket[0]
                entries, pos = seg.entries, seg.pos
                left = len(entries) - pos
                if seg.stale == left:  # every entry left is stale
                    bucket.popleft()
                    queued -= left
                    continue
                take = min(evict, left - seg.stale)
                part = entries[pos:pos + take] if pos or take < left else entries
                if seg.plain and (not seg.stale or list(map(lru_get, part)).count(seg) == take):
                    # keys only, the first ``take`` live (stale ones are mostly a segment's
                    # last entries: a prefix taken back): in bulk
                    for entry in part:
                        del lru[entry]
                    _consume(map(pop_stamp, part, repeat(None)))
                    if events:
                        keys.extend(part)
                    evict -= take
                    queued -= take
                    left -= take
                    if seg.stale == left:  # nothing live left
                        bucket.popleft()
                        queued -= left
                    else:
                        seg.pos = pos + take
                    continue
                end = len(entries)
                while evict and pos < end:
                    entry = entries[pos]
                    if lru_get(entry) is not seg:  # stale: freed again later, or taken back
                        pos += 1
                        seg.stale -= 1
                        queued -= 1
                        continue
                    if type(entry) is _Run:
                        size = entry.size
                        if size > evict:  # part of the run goes; the rest stays first in line
                            entry.size = size - evict
                            self.run_extra -= evict
                            evict = 0
                            break
                        self.run_extra -= size - 1
                        evict -= size
                    else:
                        pop_stamp(entry, None)
                        keys.append(entry)
                        evict -= 1
                    pos += 1
                    queued -= 1
                    del lru[entry]
                seg.pos = pos
                if pos == end:
                    bucket.popleft()
            if not bucket:
                heapq.heappop(heap)
                del buckets[stamp]
        self.queued = queued
        if events:
            self.on_event(False, keys)

    def _first_keys(self, blocks: int) -> list:
        """The keys among the first ``blocks`` queued blocks."""
        keys = []
        for key in self.lru:
            if blocks <= 0:
                break
            if type(key) is _Run:
                blocks -= key.size
            else:
                keys.append(key)
                blocks -= 1
        return keys

    def _evict_with_runs(self, evict: int) -> None:
        lru = self.lru
        pop = lru.popitem
        while evict:
            key, _ = pop(False)
            if type(key) is _Run:
                size = key.size
                if size > evict:  # part of the run goes; the rest stays first in line
                    key.size = size - evict
                    self.run_extra -= evict
                    lru[key] = None
                    lru.move_to_end(key, last=False)
                    return
                self.run_extra -= size - 1
                evict -= size
            else:
                evict -= 1

    def register(self, key: int) -> bool:
        """Give one of the caller's anonymous blocks the identity ``key`` (a just-scheduled full
        prompt block). Returns False, leaving it anonymous, if that identity already exists."""
        if key in self.ref or key in self.lru:
            return False
        self.used_anon -= 1
        self.ref[key] = 1
        if self.on_event is not None:
            self.on_event(True, [key])
        return True

    def register_many(self, keys: Sequence[int]) -> list[int]:
        """:meth:`register` for each key in order, on as many of the caller's anonymous blocks;
        returns the keys that took (the others stay anonymous)."""
        ref, lru = self.ref, self.lru
        taken = []
        for key in keys:
            if key not in ref and key not in lru:  # a key repeated in ``keys`` takes once
                ref[key] = 1
                taken.append(key)
        self.used_anon -= len(taken)
        if taken and self.on_event is not None:
            self.on_event(True, list(taken))
        return taken

    def adopt_many(self, keys: Sequence[int]) -> list[int]:
        """Give the caller's anonymous blocks the identities ``keys`` in order, as SGLang's
        radix tree does when it takes a just-computed prompt page: a key already present (held
        by another request, or free and hittable) is shared instead, a reference taken on it
        (out of the free queue if it was there), and the caller's duplicate block becomes free
        and never-used at once (SGLang ``RadixCache.cache_unfinished_req`` frees the indices
        the tree already had; measured on the reference: two identical prompts in one pass
        leave the prompt cached once and the duplicate pages free, taken before any eviction).
        Returns the keys the caller now holds (all of ``keys``)."""
        ref, lru = self.ref, self.lru
        fresh = dict.fromkeys(keys, 1)
        if len(fresh) == len(keys) and ref.keys().isdisjoint(fresh) and lru.keys().isdisjoint(fresh):
            ref.update(fresh)  # the common case, in bulk: distinct keys, none present
            new = list(keys)
        else:
            new = []
            for key in keys:
                if key in ref:
                    ref[key] += 1
                elif key in lru:
                    entry = lru.pop(key)
                    if self.by_touch:
                        entry.stale += 1
                    ref[key] = 1
                else:
                    ref[key] = 1
                    new.append(key)
        self.used_anon -= len(keys)
        self.free_anon += len(keys) - len(new)
        if new and self.on_event is not None:
            self.on_event(True, new)
        return list(keys)

    def release(self, keys: Sequence[int], anon: int, anon_full: int = 0,
                private_keys: Sequence[int] = (), stamp: int = 0) -> None:
        """Free a request's blocks: ``keys`` it holds with identity and ``anon`` without, of
        which ``anon_full`` are full blocks (generated tokens, prompt blocks without hash ids,
        private prompt blocks). ``private_keys``: the identities of its private blocks (the
        last ones of ``anon_full``), given on a preemption, to queue them as hittable keys.

        Its full anonymous blocks (the tail of its block table) join the free queue first, then
        its keyed blocks last to first; a keyed block still held by another request stays in
        use. Its partial block, and every block when prefix caching is off, becomes free and
        never-used again (the reference keeps only full blocks cached, measured: a request of
        327 KV tokens leaves 5 cached blocks and 1 free one).

        ``by_touch`` mode (SGLang): ``stamp`` is when the request last used its blocks (a
        counter the caller increments per use: a prefix match, an insertion of new pages, both
        of which refresh the whole path). SGLang's radix cache evicts the least recently *used*
        leaf (``RadixCache.evict`` over ``TreeNode.last_access_time``), not the least recently
        freed block as vLLM: a block joins the free order at the latest use by any request
        that held it, deeper blocks of one use first (a radix leaf goes before its parent).
        """
        ref, lru = self.ref, self.lru
        tail: list = []  # the blocks queued before its keyed ones: full anonymous, private
        if anon:
            self.used_anon -= anon
            if not self.prefix_caching:
                anon_full = 0
            run = anon_full - len(private_keys)
            if run:
                tail.append(_Run(run))
                self.run_extra += run - 1
            tail.extend(reversed(private_keys))
            self.free_anon += anon - anon_full
        if self.by_touch:
            self._release_by_touch(keys, tail, stamp)
            return
        for entry in tail:
            lru[entry] = None
        for key in reversed(keys):
            count = ref[key]
            if count == 1:
                del ref[key]
                lru[key] = None
            else:
                ref[key] = count - 1

    def _release_by_touch(self, keys: Sequence[int], tail: list, stamp: int) -> None:
        # entries go deepest first: a block is freed no earlier than the deeper blocks of the
        # same path that share its last use, so each bucket stays deepest first
        ref, lru = self.ref, self.lru
        queued = len(tail)
        if tail:
            seg = _Segment(tail, type(tail[0]) is not _Run)  # only its first entry can be a run
            lru.update(dict.fromkeys(tail, seg))
            self._bucket(stamp).append(seg)
        stamps = self.stamps
        stamps_get = stamps.get
        n = len(keys)
        # the keys past the last one another request still holds or used later (mostly a
        # shared leading prefix) each take the last use ``stamp``: queued first (deepest
        # first), in bulk as one segment
        split = 0
        while split < n and (ref[keys[split]] > 1 or stamps_get(keys[split], 0) > stamp):
            split += 1
        if split < n:
            rest = keys[split:] if split else keys
            if max(map(ref.__getitem__, rest)) > 1 or max(map(stamps_get, rest, repeat(0))) > stamp:
                bad = list(map(or_, map(gt, map(ref.__getitem__, keys), repeat(1)),
                               map(gt, map(stamps_get, keys, repeat(0)), repeat(stamp))))
                bad.reverse()
                split = n - bad.index(True)
        if split < n:
            entries = keys[:split - 1:-1] if split else keys[::-1]
            for key in entries:  # (a del statement beats the slot wrapper ``__delitem__``)
                del ref[key]
            stamps.update(dict.fromkeys(entries, stamp))
            seg = _Segment(entries)
            lru.update(dict.fromkeys(entries, seg))
            self._bucket(stamp).append(seg)
            queued += len(entries)
        if split:
            seg_stamp, seg = None, None  # consecutive keys mostly share their last use
            for key in keys[split - 1::-1]:
                last = stamps_get(key, 0)  # the latest use by any of its holders so far
                if stamp > last:
                    stamps[key] = last = stamp
                count = ref[key]
                if count == 1:
                    del ref[key]
                    if last != seg_stamp:
                        seg_stamp, seg = last, _Segment([])
                        self._bucket(last).append(seg)
                    seg.entries.append(key)
                    lru[key] = seg
                    queued += 1
                else:
                    ref[key] = count - 1
        self.queued += queued
        if self.queued > 2 * len(lru) + 4096:
            self._compact()

    def check(self) -> None:
        """Assert block conservation (for tests and ``--check``).

        Raises:
            AssertionError: the four states do not add up to the capacity.
        """
        runs = [k.size for k in self.lru if type(k) is _Run]
        assert self.run_extra == sum(runs) - len(runs) and min(runs, default=1) >= 1, (
            f"KV runs miscounted: {runs} with run_extra {self.run_extra}")
        total = self.free_anon + self.cached_blocks + len(self.ref) + self.used_anon
        assert total == self.capacity and min(self.free_anon, self.used_anon) >= 0, (
            f"KV blocks not conserved: free {self.free_anon} + cached {self.cached_blocks} + "
            f"keyed {len(self.ref)} + anon {self.used_anon} != {self.capacity}"
        )


class PublishedBlocks:
    """What a router knows of one worker's cache: the identity keys its KV events announced
    (stored adds, evicted removes), applied in the order they were published."""

    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: set[int] = set()

    def apply(self, stored: bool, keys: Sequence[int]) -> None:
        if stored:
            self.keys.update(keys)
        else:
            self.keys.difference_update(keys)

    def match(self, keys: Sequence[int]) -> int:
        """Leading ``keys`` announced as cached."""
        known = self.keys
        hits = 0
        for key in keys:
            if key not in known:
                break
            hits += 1
        return hits
