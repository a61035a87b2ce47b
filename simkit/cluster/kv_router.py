"""KV-aware routing as Dynamo's KV router does it: a cost per worker from the router's own state.

The router never reads a worker's cache usage. It keeps, per worker of the pool it routes to,
what it routed there (:class:`KvAware`): the prompt tokens still to prefill, the requests not
done and their prompt blocks; and an index of the blocks each worker's KV events announced
(stored at the end of the pass that computed them, removed when evicted), from which a request's
overlap with each worker follows. The cost, for a request of ``ISL`` prompt tokens on worker w of
a pool with ``block_size`` bs (every term measured on ai-dynamo-runtime 1.6.1 from the costs its
KV router logs, tiny traces; README "KV-aware routing"):

* prompt pools (aggregated, prefill)::

      prefill(w) = (queued_prefill_tokens(w) + ISL) / bs                 (0 without tracking)
      cost(w)    = prefill_load_scale * max(0, prefill(w) - credit * decay(w) * overlap(w))
                   + active_blocks(w) + decode_active_request_weight * active_requests(w)

  where ``active_blocks`` is 0 on a prefill pool (its router tracks no decode blocks);
* decode pools: ``cost(w) = active_blocks(w) + decode_active_request_weight * active_requests(w)``.

``queued_prefill_tokens(w)`` sums, over the requests routed to w whose prompt is not done, their
``ISL - overlap * bs`` at routing; ``active_requests(w)`` counts the requests routed to w and not
done (on a prefill pool: until its prefill worker frees its KV); ``active_blocks(w)`` counts the full prompt
blocks (``ISL // bs``) of w's active requests with the new request's, a block they share once
(``router_assume_kv_reuse``; a decode pool counts every request's blocks apart, as measured);
``decay(w) = 1 / (1 + overlap_score_credit_decay * excess(w) / ceil(ISL / bs))`` with
``excess(w)`` w's queued prefill blocks beyond the least of the offered workers (Dynamo's
``selector``). The lowest cost wins; ties are broken uniformly at random from the seeded stream.

Cost per decision: O(prompt blocks + workers). The overlap and the shared active blocks are both
the leading run of the request's block keys in a set (keys are chained: a block names its whole
prefix), found with one bitmask of workers per key.

Part of :mod:`simkit.cluster`: plain Python, no SimPy; the router calls :meth:`KvAware.pick`,
workers call :meth:`KvAware.kv_event`, the collector :meth:`KvAware.prefill_done` and
:meth:`KvAware.ended`.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from typing import Optional, Sequence

from simkit.spec import KvAwareRouter

__all__ = ["KvAware"]


def _bits(mask: int):
    """The worker ids whose bits are set in ``mask``, lowest first."""
    while mask:
        low = mask & -mask
        yield low.bit_length() - 1
        mask ^= low


def leading_runs(keys: Sequence[int], index: dict, candidates: int) -> dict[int, int]:
    """For each worker id set in ``candidates``, how many leading ``keys`` its bit is set for in
    ``index`` (key -> bitmask of worker ids). Workers that match no first key get 0."""
    runs: dict[int, int] = {}
    mask = candidates
    get = index.get
    for i, key in enumerate(keys):
        still = mask & get(key, 0)
        if still != mask:
            for wid in _bits(mask ^ still):
                runs[wid] = i
            mask = still
            if not mask:
                return runs
    for wid in _bits(mask):
        runs[wid] = len(keys)
    return runs


def _mark(index: dict, bit: int, stored: bool, keys: Sequence[int]) -> None:
    """Set (``stored``) or clear ``bit`` for each of ``keys`` in ``index`` (key -> bitmask)."""
    if stored:
        for key in keys:
            index[key] = index.get(key, 0) | bit
    else:
        for key in keys:
            mask = index.get(key, 0) & ~bit
            if mask:
                index[key] = mask
            else:
                index.pop(key, None)


def _run_end(keys: Sequence[int], start: int, index: dict, bit: int) -> int:
    """The index past the run of ``keys`` from ``start`` whose ``index`` mask has ``bit``."""
    end = start
    if index:
        for key in keys[start:]:
            if not index.get(key, 0) & bit:
                break
            end += 1
    return end


class _Routed:
    """What the router remembers of one request it routed to worker ``wid``."""

    __slots__ = ("wid", "prefill_tokens", "keys", "anon")

    def __init__(self, wid: int, prefill_tokens: Optional[int], keys: Sequence[int], anon: int) -> None:
        self.wid = wid
        self.prefill_tokens = prefill_tokens  #: still counted as queued prefill; None once done
        self.keys = keys  #: its full prompt blocks with identity, tracked as active blocks
        self.anon = anon  #: its full prompt blocks counted apart (no identity, or no reuse)


class KvAware:
    """The KV-aware routing policy of one pool (``role``: aggregated, prefill or decode), with
    its state (module docstring). ``rng`` breaks ties and draws with a temperature."""

    def __init__(self, spec: KvAwareRouter, rng: random.Random, role: str = "aggregated") -> None:
        self.spec = spec
        self.rng = rng
        self.role = role
        self.scale = spec.prefill_load_scale
        self.credit = spec.overlap_score_credit
        self.decay = spec.overlap_score_credit_decay
        self.request_weight = spec.decode_active_request_weight
        self.temperature = spec.router_temperature
        prompt_pool = role != "decode"
        self.prefill_term = prompt_pool and spec.router_track_prefill_tokens
        #: the decode-blocks term: aggregated and decode pools (a prefill pool's router has none)
        self.blocks_term = role != "prefill" and spec.router_track_active_blocks
        #: shared prompt blocks count once (measured: never on a decode pool)
        self.reuse = spec.router_assume_kv_reuse and role != "decode"
        self.routed: dict[int, _Routed] = {}  #: rid -> what was routed, until done
        self.prefill_tokens: Counter = Counter()  #: wid -> queued prefill tokens
        self.active_requests: Counter = Counter()  #: wid -> requests not done
        self.active_keys: dict[int, Counter] = {}  #: wid -> active block key -> requests holding it
        self.active_anon: Counter = Counter()  #: wid -> active blocks counted apart
        self.active_holders: dict[int, int] = {}  #: key -> bitmask of workers where it is active
        self.cached: dict[int, int] = {}  #: key -> bitmask of workers that announced it stored
        #: key -> bitmask of workers whose host KV tier announced it (``kv_offload``)
        self.host_cached: dict[int, int] = {}
        self.host_weight = spec.host_cache_hit_weight
        #: key -> bitmask of workers whose storage tier announced it (``kv_events``; a pool's
        #: shared tier marks every bit: -1)
        self.disk_cached: dict[int, int] = {}
        self.disk_weight = spec.disk_cache_hit_weight
        #: workers whose state a decision must bring up to date first (fast-forwarded runs that
        #: may evict announced blocks): set by the composition root to the pool's worker list
        self.pool_workers: Sequence = ()
        #: when a list: each decision appends (rid, chosen wid, its cost, {wid: cost}) (tests,
        #: and why a request went where it went)
        self.decisions: Optional[list] = None
        #: by request id, the index into its ``hash_ids`` from which no other request shares a
        #: block (:func:`simkit.engine.scheduler.private_suffixes`), or None (unknown): such
        #: blocks can never be shared or hit, so they are counted, not tracked key by key
        self.private_ids: Optional[Sequence[int]] = None

    # ------------------------------------------------------------------ events

    def kv_event(self, wid: int, stored: bool, keys: Sequence[int]) -> None:
        """Worker ``wid`` announced ``keys`` stored (hittable) or removed (evicted)."""
        _mark(self.cached, 1 << wid, stored, keys)

    def host_event(self, wid: int, stored: bool, keys: Sequence[int]) -> None:
        """Worker ``wid``'s host KV tier announced ``keys`` stored (copied there) or evicted."""
        _mark(self.host_cached, 1 << wid, stored, keys)

    def disk_event(self, wid: Optional[int], stored: bool, keys: Sequence[int]) -> None:
        """Worker ``wid``'s storage tier (None: the pool's shared one) announced ``keys``
        written or evicted."""
        _mark(self.disk_cached, -1 if wid is None else 1 << wid, stored, keys)

    def prefill_done(self, rid: int) -> None:
        """``rid``'s prompt is done (its first token, or its prefill on a prefill worker): its
        prefill tokens leave its worker's queue."""
        routed = self.routed.get(rid)
        if routed is None or routed.prefill_tokens is None:
            return
        self.prefill_tokens[routed.wid] -= routed.prefill_tokens
        routed.prefill_tokens = None

    def released(self, rid: int) -> None:
        """The prefill worker of ``rid`` freed its KV, the decode side having taken it over: on
        a prefill pool it is no longer active (measured: a request counts in
        ``decode_active_request_weight`` there until its prefill worker releases it)."""
        if self.role == "prefill" and rid in self.routed:
            self.ended(rid)

    def ended(self, rid: int, at: float = 0.0, status: str = "") -> None:
        """``rid`` ended (completed or rejected): it leaves its worker's state."""
        routed = self.routed.get(rid)
        if routed is None:
            return
        if routed.prefill_tokens is not None:
            self.prefill_tokens[routed.wid] -= routed.prefill_tokens
        self._forget(rid)

    def _forget(self, rid: int) -> None:
        routed = self.routed.pop(rid)
        wid = routed.wid
        self.active_requests[wid] -= 1
        self.active_anon[wid] -= routed.anon
        if routed.keys:
            counts = self.active_keys[wid]
            holders = self.active_holders
            clear = ~(1 << wid)
            for key in routed.keys:
                c = counts[key] - 1
                if c:
                    counts[key] = c
                    continue
                del counts[key]
                mask = holders[key] & clear
                if mask:
                    holders[key] = mask
                else:
                    del holders[key]

    # ------------------------------------------------------------------ a decision

    def shared_keys(self, request, bs: int) -> list[int]:
        """The keys of ``request``'s full prompt blocks that another request may share (its
        private blocks are left out: no other request has them)."""
        limit = None
        private = self.private_ids
        if private is not None and request.hash_ids is not None:
            limit = private[request.rid] * (request.hash_block_size // bs)
        return request.block_keys(bs, limit)

    def costs(self, request, workers: Sequence) -> tuple[list[float], dict[int, int], list[int]]:
        """The cost of each of ``workers`` for ``request`` (blocks; module docstring), the
        overlap (blocks) of each worker id, and the request's shareable block keys."""
        for w in self.pool_workers:  # announced evictions of runs under way, up to now
            if w.run is not None and w.run.may_evict:
                w.settle()
        bs = workers[0].block_size
        isl = request.input_length
        keys = self.shared_keys(request, bs)
        candidates = 0
        for w in workers:
            candidates |= 1 << w.wid
        overlap = leading_runs(keys, self.cached, candidates) if self.prefill_term and keys else {}
        credited = overlap
        if (self.host_cached or self.disk_cached) and overlap is not None and keys and self.prefill_term:
            # host-tier blocks continuing each worker's GPU prefix count host_cache_hit_weight
            # each, and storage blocks continuing those disk_cache_hit_weight each
            credited = dict(overlap)
            host, disk = self.host_cached, self.disk_cached
            for w in workers:
                wid = w.wid
                g = overlap.get(wid, 0)
                bit = 1 << wid
                h = _run_end(keys, g, host, bit)
                d = _run_end(keys, h, disk, bit)
                if d > g:
                    credited[wid] = g + self.host_weight * (h - g) + self.disk_weight * (d - h)
        full = isl // bs
        queued = self.prefill_tokens
        out = []
        decay = self.decay
        floor = min(queued[w.wid] for w in workers) if decay and self.prefill_term else 0
        if self.blocks_term and self.reuse:
            shared = leading_runs(keys, self.active_holders, candidates) if keys else {}
        for w in workers:
            wid = w.wid
            cost = 0.0
            if self.prefill_term:
                raw = (queued[wid] + isl) / bs
                credit = self.credit
                if decay:
                    credit *= 1.0 / (1.0 + decay * (((queued[wid] - floor) / bs) / -(-isl // bs)))
                cost = self.scale * max(raw - credit * credited.get(wid, 0), 0.0)
            if self.blocks_term:
                if self.reuse:
                    counts = self.active_keys.get(wid)
                    active = (len(counts) if counts else 0) + self.active_anon[wid]
                    cost += active + full - shared.get(wid, 0)
                else:
                    cost += self.active_anon[wid] + full
            cost += self.request_weight * self.active_requests[wid]
            out.append(cost)
        return out, overlap, keys

    def pick(self, request, workers: Sequence):
        """The worker of ``workers`` that serves ``request`` (lowest cost; seeded ties, or a
        softmax draw with ``router_temperature`` > 0); the request joins its state."""
        costs, overlap, keys = self.costs(request, workers)
        index = self._choose(costs)
        worker = workers[index]
        if self.decisions is not None:
            self.decisions.append((request.rid, worker.wid, costs[index], {w.wid: c for w, c in zip(workers, costs)}))
        self._route(request, worker, overlap.get(worker.wid, 0), keys)
        return worker

    def _choose(self, costs: list[float]) -> int:
        low = min(costs)
        if self.temperature > 0:
            high = max(costs)
            if high > low:
                # Dynamo's normalised softmax: exp(-(cost - min) / ((max - min) * T))
                scale = (high - low) * self.temperature
                weights = [math.exp(-(c - low) / scale) for c in costs]
                return self.rng.choices(range(len(costs)), weights=weights)[0]
            return self.rng.randrange(len(costs))
        tied = [i for i, c in enumerate(costs) if c == low]
        return tied[0] if len(tied) == 1 else tied[self.rng.randrange(len(tied))]

    def _route(self, request, worker, overlap: int, keys: list[int]) -> None:
        """``request`` joins ``worker``'s state, with ``overlap`` cached blocks and its
        shareable block ``keys`` (:meth:`shared_keys`)."""
        wid = worker.wid
        bs = worker.block_size
        full = request.input_length // bs
        if not self.reuse:
            keys = []
        tokens = request.input_length - overlap * bs if self.role != "decode" else None
        self.routed[request.rid] = _Routed(wid, tokens, keys, full - len(keys))
        if tokens is not None:
            self.prefill_tokens[wid] += tokens
        self.active_requests[wid] += 1
        self.active_anon[wid] += full - len(keys)
        if keys:
            counts = self.active_keys.setdefault(wid, Counter())
            new = [key for key in keys if key not in counts]
            counts.update(keys)
            if new:
                holders = self.active_holders
                get = holders.get
                bit = 1 << wid
                for key in new:
                    holders[key] = get(key, 0) | bit
