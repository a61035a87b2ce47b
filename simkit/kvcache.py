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

So ``free_anon + len(lru) + len(ref) + used_anon == capacity`` at every step
(:meth:`check`). A request holds a list of identity keys and a count of anonymous blocks;
freeing returns a request's blocks to the queue's tail in reverse block order (its anonymous
tail blocks first, then its keyed blocks last to first), so a prompt's last blocks are evicted
before its first ones (as vLLM's free-block queue does).

Layer L2: pure bookkeeping, no SimPy. Deliberately not a SimPy ``Container``: admission is a
scheduler decision made at a pass boundary, not a blocking wait (ARCHITECTURE.md 2.4).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

__all__ = ["KvCache"]


class _Placeholder:
    """The free-queue entry of a freed block without identity: equal to nothing but itself,
    so no prompt look-up can hit it."""

    __slots__ = ()


class KvCache:
    """Block manager for ``num_blocks`` KV blocks; ``prefix_caching`` enables identity reuse."""

    __slots__ = ("capacity", "prefix_caching", "free_anon", "used_anon", "lru", "ref")

    def __init__(self, num_blocks: int, prefix_caching: bool = True) -> None:
        self.capacity = num_blocks
        self.prefix_caching = prefix_caching
        self.free_anon = num_blocks
        self.used_anon = 0
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.ref: dict[int, int] = {}

    @property
    def free_blocks(self) -> int:
        """Blocks an allocation can take (anonymous free plus evictable cached)."""
        return self.free_anon + len(self.lru)

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
        if n > self.free_anon + len(self.lru):
            raise RuntimeError(f"KV cache over-allocation: {n} blocks asked, {self.free_blocks} free")
        take = min(n, self.free_anon)
        self.free_anon -= take
        evict = n - take
        if evict:
            lru = self.lru
            if evict == len(lru):
                lru.clear()
            else:
                pop = lru.popitem
                for _ in range(evict):
                    pop(False)  # least recently freed first; the block loses its identity
        self.used_anon += n

    def register(self, key: int) -> bool:
        """Give one of the caller's anonymous blocks the identity ``key`` (a just-scheduled full
        prompt block). Returns False, leaving it anonymous, if that identity already exists."""
        if key in self.ref or key in self.lru:
            return False
        self.used_anon -= 1
        self.ref[key] = 1
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
        return taken

    def release(self, keys: Sequence[int], anon: int, anon_full: int = 0) -> None:
        """Free a request's blocks: ``keys`` it holds with identity and ``anon`` without, of
        which ``anon_full`` are full blocks (generated tokens, or prompt blocks without hash ids).

        Its full anonymous blocks (the tail of its block table) join the free queue first, then
        its keyed blocks last to first; a keyed block still held by another request stays in
        use. Its partial block, and every block when prefix caching is off, becomes free and
        never-used again (the reference keeps only full blocks cached, measured: a request of
        327 KV tokens leaves 5 cached blocks and 1 free one).
        """
        ref, lru = self.ref, self.lru
        if anon:
            self.used_anon -= anon
            if not self.prefix_caching:
                anon_full = 0
            if anon_full:
                for _ in range(anon_full):
                    lru[_Placeholder()] = None
            self.free_anon += anon - anon_full
        for key in reversed(keys):
            count = ref[key]
            if count == 1:
                del ref[key]
                lru[key] = None
            else:
                ref[key] = count - 1

    def check(self) -> None:
        """Assert block conservation (for tests and ``--check``).

        Raises:
            AssertionError: the four states do not add up to the capacity.
        """
        total = self.free_anon + len(self.lru) + len(self.ref) + self.used_anon
        assert total == self.capacity and min(self.free_anon, self.used_anon) >= 0, (
            f"KV blocks not conserved: free {self.free_anon} + cached {len(self.lru)} + "
            f"keyed {len(self.ref)} + anon {self.used_anon} != {self.capacity}"
        )
