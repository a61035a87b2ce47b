"""Paged KV cache of one worker: block accounting, prefix caching by block identity, LRU.

Capacity is ``num_gpu_blocks`` blocks. Every block is in exactly one of three states:

* free and anonymous (``free_anon``): holds nothing reusable;
* free and cached (``lru``): holds a full prompt block whose identity key is known, hittable
  by a later request until it is evicted (least recently freed first) to satisfy an allocation;
* in use: held by one or more running requests, with an identity (``ref`` counts holders) or
  without (``used_anon``: partial blocks, decode blocks, duplicates).

So ``free_anon + len(lru) + len(ref) + used_anon == capacity`` at every step
(:meth:`check`). A request holds a list of identity keys and a count of anonymous blocks;
freeing returns keyed blocks to the LRU tail in reverse order, so a prompt's last blocks are
evicted before its first ones (as vLLM's free-block queue does).

Layer L2: pure bookkeeping, no SimPy. Deliberately not a SimPy ``Container``: admission is a
scheduler decision made at a pass boundary, not a blocking wait (ARCHITECTURE.md 2.4).
"""

from __future__ import annotations

from collections import OrderedDict
from itertools import islice
from typing import Callable, Optional, Sequence

__all__ = ["KvCache", "PublishedBlocks"]


class KvCache:
    """Block manager for ``num_blocks`` KV blocks; ``prefix_caching`` enables identity reuse."""

    __slots__ = ("capacity", "prefix_caching", "free_anon", "used_anon", "lru", "ref", "on_event")

    def __init__(self, num_blocks: int, prefix_caching: bool = True) -> None:
        self.capacity = num_blocks
        self.prefix_caching = prefix_caching
        self.free_anon = num_blocks
        self.used_anon = 0
        self.lru: OrderedDict[int, None] = OrderedDict()
        self.ref: dict[int, int] = {}
        #: KV events, when set: called as on_event(stored, keys) when blocks gain an identity
        #: (stored=True: hittable from now on) or lose it to eviction (stored=False)
        self.on_event: Optional[Callable[[bool, list], None]] = None

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
            if self.on_event is not None:
                self.on_event(False, list(islice(lru, evict)))
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

    def release(self, keys: Sequence[int], anon: int) -> None:
        """Free a request's blocks: ``keys`` it holds with identity, ``anon`` without."""
        ref, lru = self.ref, self.lru
        for key in reversed(keys):
            count = ref[key]
            if count == 1:
                del ref[key]
                lru[key] = None
            else:
                ref[key] = count - 1
        self.used_anon -= anon
        self.free_anon += anon

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
