"""vLLM-like batch formation for one worker: continuous batching, chunked prefill, a token
budget, ``max_num_seqs``, prefix caching and recompute preemption.

Each forward pass (REFERENCE.md section 3, vLLM v1's scheduler):

1. Running requests, oldest first, each take tokens from the budget
   ``max_num_batched_tokens``: one for a decode step, or the next prefill chunk
   (``min(remaining prompt, budget left)``). If its new KV blocks do not fit, running requests
   are preempted (their blocks freed, their progress recomputed later) until they fit,
   possibly itself: with ``preemption_mode: lifo`` (vLLM's and the reference's default) the
   newest first; with ``fifo`` the oldest first, taking back the tokens and blocks it was
   given earlier in the same pass (as the reference's mocker does).
2. Only if nothing was preempted, waiting requests are admitted in arrival order while the
   budget and ``max_num_seqs`` allow and the *whole* remaining prompt (minus its cached prefix)
   fits in free blocks; a request is never admitted because only its first chunk fits (bug
   class 3). Without chunked prefill the whole remaining prompt must fit in the budget.
   ``backend: trtllm`` (TRT-LLM's GUARANTEED_NO_EVICT capacity scheduler, as the reference
   models it) also requires the request's whole prompt + output to fit in the free blocks left
   after reserving what every running request may still need, and never preempts.

A request's progress is ``computed`` tokens with KV. While ``computed < prefill_target`` it
is prefilling (``prefill_target`` is the prompt, or prompt + generated tokens after a
preemption); a pass that brings it to ``prefill_target`` emits a token, and so does every
decode step. A decode step's context is its KV length after the pass (prompt + tokens
generated so far), the ``a`` of the reference's D(a, C).

Prefix caching: the prompt's full blocks have identity keys
(:meth:`simkit.core.request.Request.block_keys`); at admission the longest cached prefix is reused,
except that a full-prompt hit still recomputes the last block; newly scheduled full blocks are
registered at once, so later requests (even in the same pass) can hit them.

Roles: ``aggregated`` serves a request from prompt to last token; ``prefill`` stops at the end
of the prompt and holds the KV until the handoff link releases it; ``decode`` receives
requests whose prompt KV was transferred, and its first pass emits the first token (the
reference's disaggregated semantics, REFERENCE.md section 5).

Layer L2: pure, no SimPy; the worker process calls :meth:`schedule` and :meth:`complete`.
"""

from __future__ import annotations

from collections import Counter, deque
from typing import Optional, Sequence

import math

from simkit.spec import PoolSpec
from simkit.engine.kvcache import KvCache
from simkit.core.request import Request

__all__ = ["Seq", "Batch", "VllmScheduler", "SglangScheduler", "make_scheduler", "private_suffixes"]


def private_suffixes(requests: Sequence[Request], block_sizes: Sequence[int]) -> Optional[list[int]]:
    """For each request (by id), the index into its ``hash_ids`` from which every id occurs
    nowhere else in ``requests`` (nor twice in it): the blocks no other request can hit (see
    :mod:`simkit.engine.kvcache`). None when that cannot be told exactly from whole trace blocks:
    requests with different ``hash_block_size``, or one that an engine ``block_size`` does not
    divide. ``requests`` must be the whole workload, ids 0..N-1."""
    sizes = {r.hash_block_size for r in requests if r.hash_ids}
    if len(sizes) != 1 or any(next(iter(sizes)) % bs for bs in block_sizes):
        return None
    counts = Counter(h for r in requests if r.hash_ids for h in r.hash_ids)
    out = [0] * len(requests)
    for r in requests:
        ids = r.hash_ids
        if ids:
            j = len(ids)
            while j and counts[ids[j - 1]] == 1:
                j -= 1
            out[r.rid] = j
    return out


class Seq:
    """Mutable runtime state of one request on one worker (owned by that worker)."""

    __slots__ = (
        "req", "rid", "prompt_len", "output_len", "keys", "held", "anon", "computed",
        "prefill_target", "generated", "transferred", "preemptions", "private_from", "private", "stamp",
    )

    def __init__(self, req: Request, transferred: bool = False) -> None:
        self.req = req
        self.rid = req.rid
        self.prompt_len = req.input_length
        self.output_len = req.output_length
        self.keys: Optional[list[int]] = None  #: full prompt block keys, computed on admission
        self.held: list[int] = []  #: identity keys this request holds a reference on
        self.anon = 0  #: anonymous blocks it holds (private prompt blocks included)
        #: keys[private_from:] are private (no other request has them, see kvcache); -1 until
        #: its first registration
        self.private_from = -1
        self.private = 0  #: private prompt blocks it holds, counted in ``anon``
        #: a decode-pool request arrives with its prompt KV: its first step is a decode step
        self.transferred = transferred
        self.computed = req.input_length - 1 if transferred else 0
        self.prefill_target = self.computed if transferred else req.input_length
        self.generated = 0
        self.preemptions = 0
        self.stamp = 0  #: when its blocks were last used (sglang: the radix cache's LRU clock)


class Batch:
    """One pass: ``entries`` of (seq, tokens, is_prefill) plus its latency-model shape."""

    __slots__ = ("entries", "prefill_tokens", "prefill_requests", "prefill_start_tokens",
                 "decode_requests", "decode_context_tokens", "admitted", "preempted")

    def __init__(self) -> None:
        self.entries: list[tuple[Seq, int, bool]] = []
        self.prefill_tokens = 0
        self.prefill_requests = 0  #: requests computing prompt tokens in the pass
        #: sum over them of the prompt tokens they had (computed or cached) before the pass
        self.prefill_start_tokens = 0
        self.decode_requests = 0
        self.decode_context_tokens = 0
        self.admitted: list[tuple[Seq, int]] = []  #: (seq, cached prompt tokens) admitted now
        self.preempted: list[Seq] = []


class VllmScheduler:
    """Waiting and running queues and the KV cache of one worker, in role ``role``."""

    #: free blocks leave in the order of their release (vLLM's free queue), not of their last use
    EVICT_BY_TOUCH = False

    def __init__(self, spec: PoolSpec, role: str) -> None:
        if role not in ("aggregated", "prefill", "decode"):
            raise ValueError(f"unknown role {role!r}")
        self.role = role
        self.block_size = spec.block_size
        self.budget = spec.max_num_batched_tokens
        self.max_num_seqs = spec.max_num_seqs
        self.max_model_len = spec.max_model_len
        self.chunked = spec.enable_chunked_prefill
        self.caching = spec.enable_prefix_caching
        #: preempt the oldest running request (fifo) instead of the newest (lifo, vLLM's way)
        self.fifo_preemption = spec.preemption_mode == "fifo"
        #: TRT-LLM GUARANTEED_NO_EVICT: admit against whole-request reservations, never preempt
        self.no_evict = spec.backend == "trtllm"
        #: TRT-LLM batch waiting (:class:`simkit.spec.TrtllmSpec`): passes held so far, limits
        self.batch_wait_count = 0
        self.batch_wait_iters = spec.trtllm.batch_wait_timeout_iters
        self.batch_wait_tokens = spec.trtllm.batch_wait_max_tokens_ratio * spec.max_num_batched_tokens
        self.batch_waiting = self.no_evict and (self.batch_wait_iters > 0 or self.batch_wait_tokens > 0)
        self.kv = KvCache(spec.num_gpu_blocks, spec.enable_prefix_caching, by_touch=self.EVICT_BY_TOUCH)
        self.waiting: deque[Seq] = deque()
        self.running: list[Seq] = []
        self.held: dict[int, Seq] = {}  #: prefill role: prompts done, KV awaiting transfer
        #: decode role (sglang): requests whose prompt KV room is reserved here (pages taken,
        #: cached prefix held) while their prompt is computed elsewhere, by request id
        self.reserved: dict[int, Seq] = {}
        self.ready = 0  #: requests whose prompt KV arrived, waiting first in ``waiting`` (see add)
        #: by request id, the index into its ``hash_ids`` from which every id is private (held by
        #: no other request, nor twice by it); None: unknown, track every key (see kvcache)
        self.private_ids: Optional[Sequence[int]] = None
        #: a just-computed prompt block whose identity is already cached is swapped for the
        #: cached one and freed (SGLang's radix tree); vLLM keeps the duplicate
        self.adopt_duplicates = False
        #: KV slots a decoding request holds beyond ``computed``: 1 where the engine gives the
        #: newest generated token its slot when it is emitted (SGLang), else 0 (vLLM)
        self.decode_slot = 0

    # ------------------------------------------------------------------ queue state

    def has_work(self) -> bool:
        """Whether a pass could be scheduled now or later without new input."""
        return bool(self.running) or bool(self.waiting)

    def fits_ever(self, seq: Seq) -> bool:
        """Whether the request can ever be served here: prompt + output is within
        ``max_model_len``; its peak KV (the prompt on a prefill worker; prompt + output - 1
        tokens elsewhere) fits in the whole cache; and without chunked prefill that same peak
        fits in the token budget, since a request preempted late is recomputed in one pass
        (vLLM likewise requires ``max_num_batched_tokens >= max_model_len`` when chunked
        prefill is off). With ``backend: trtllm`` it may cut ``seq.output_len`` (see below)."""
        if self.max_model_len is not None and seq.prompt_len + seq.output_len > self.max_model_len:
            return False
        if self.no_evict:
            # TRT-LLM's enqueue normalisation, as the reference applies it: a prompt must leave
            # room in the whole cache, and the output is cut to the room left (measured: a
            # 1200-token prompt asking 200 tokens of a 1280-token cache generates 80)
            room = self.kv.capacity * self.block_size - seq.prompt_len
            if room <= 0:
                return False
            if self.role != "prefill" and seq.output_len > room:
                seq.output_len = room
            return self.chunked or seq.prompt_len + seq.output_len <= self.budget
        peak = seq.prompt_len if self.role == "prefill" else seq.prompt_len + max(seq.output_len - 1, 0)
        if -(-peak // self.block_size) > self.kv.capacity:
            return False
        return self.chunked or peak <= self.budget

    def describe(self) -> str:
        """One line of queue and KV state, for diagnostics."""
        waiting = [s.rid for s in self.waiting]
        running = [s.rid for s in self.running]

        def ids(rids: list) -> str:
            return ", ".join(map(str, rids[:8])) + (", ..." if len(rids) > 8 else "")

        reserved = f", {len(self.reserved)} reserved" if self.reserved else ""
        return (f"{len(waiting)} waiting [{ids(waiting)}], {len(running)} running [{ids(running)}], "
                f"{len(self.held)} held for handoff{reserved}; KV {self.kv.used_blocks} of {self.kv.capacity} "
                f"blocks in use, {self.kv.free_blocks} free")

    def add(self, seq: Seq) -> None:
        """Queue a request (callers first check :meth:`fits_ever`)."""
        self.waiting.append(seq)

    # ------------------------------------------------------------------ one pass

    def _register(self, seq: Seq, first_block: int, end_tokens: int) -> None:
        keys = seq.keys
        if not keys:
            return
        last = min(end_tokens // self.block_size, len(keys))
        if last <= first_block:
            return
        private_from = seq.private_from
        if private_from < 0:
            private_from = seq.private_from = self._private_from(seq)
        if last > private_from:  # private blocks stay anonymous while in use
            seq.private += last - max(first_block, private_from)
            last = private_from
            if last <= first_block:
                return
        if self.adopt_duplicates:
            taken = self.kv.adopt_many(keys[first_block:last])
        else:
            taken = self.kv.register_many(keys[first_block:last])
        seq.held.extend(taken)
        seq.anon -= len(taken)

    def _private_from(self, seq: Seq) -> int:
        """Index of the first private key of ``seq.keys`` (its length when none or unknown)."""
        keys, private = seq.keys, self.private_ids
        if private is None or not keys:
            return len(keys)
        req = seq.req
        return min(len(keys), private[req.rid] * (req.hash_block_size // self.block_size))

    @staticmethod
    def _unschedule(batch: Batch, seq: Seq) -> None:
        """Take ``seq``'s entry (scheduled earlier in this pass) out of ``batch``."""
        for j, (s, n, is_prefill) in enumerate(batch.entries):
            if s is seq:
                del batch.entries[j]
                if is_prefill:
                    batch.prefill_tokens -= n
                    batch.prefill_requests -= 1
                    batch.prefill_start_tokens -= seq.computed
                else:
                    batch.decode_requests -= 1
                    batch.decode_context_tokens -= seq.computed + n
                return

    def _free(self, seq: Seq, preempted: bool = False) -> None:
        """Release all of ``seq``'s blocks (its KV holds ``seq.computed`` tokens): the full
        anonymous ones as if its private blocks were keyed (then they follow them, as keys on
        a preemption, since the request may hit them again)."""
        held, anon, private = seq.held, seq.anon, seq.private
        tokens = seq.computed
        if self.decode_slot and (tokens > seq.prefill_target or (
                tokens == seq.prefill_target and 0 < seq.generated < seq.output_len)):
            tokens += self.decode_slot  # the newest token's slot (none if it ended at its prefill)
        full = min(anon - private, max(0, tokens // self.block_size - len(held) - private))
        if preempted and private:
            start = seq.private_from
            self.kv.release(held, anon, full + private, seq.keys[start:start + private], seq.stamp)
        else:
            self.kv.release(held, anon, full + private, stamp=seq.stamp)
        seq.held, seq.anon, seq.private = [], 0, 0

    def _preempt(self, seq: Seq) -> None:
        self._free(seq, preempted=True)
        if seq.keys is not None:  # from now on its keys are tracked one by one
            seq.private_from = len(seq.keys)
        seq.computed = 0
        seq.prefill_target = seq.prompt_len + seq.generated
        seq.transferred = False
        seq.preemptions += 1
        self.waiting.appendleft(seq)

    def schedule(self) -> Optional[Batch]:
        """Form the next pass, allocating its KV blocks; ``None`` if nothing can run."""
        bs = self.block_size
        kv = self.kv
        budget = self.budget
        batch = Batch()
        entries = batch.entries
        running = self.running
        hold = self.batch_waiting and self._hold_context()
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.computed
            if computed < seq.prefill_target:
                if hold:
                    i += 1
                    continue
                n = min(seq.prefill_target - computed, budget)
                is_prefill = True
            else:
                n = 1
                is_prefill = False
            need = -(-(computed + n) // bs) - len(seq.held) - seq.anon
            if self.no_evict and need > kv.free_blocks:
                break  # reservations make this unreachable; never evict under no-evict
            while need > kv.free_blocks:
                if self.fifo_preemption:
                    victim = running.pop(0)
                    if victim is not seq:
                        i -= 1
                        self._unschedule(batch, victim)
                        budget = self.budget - batch.prefill_tokens - batch.decode_requests
                else:
                    victim = running.pop()
                self._preempt(victim)
                batch.preempted.append(victim)
                if victim is seq:
                    break
            if batch.preempted and batch.preempted[-1] is seq:
                continue  # seq preempted itself; running shrank past i
            if need > 0:
                kv.allocate(need)
                seq.anon += need
            if is_prefill:
                self._register(seq, computed // bs, computed + n)
                batch.prefill_tokens += n
                batch.prefill_requests += 1
                batch.prefill_start_tokens += computed
            else:
                batch.decode_requests += 1
                batch.decode_context_tokens += computed + n
            entries.append((seq, n, is_prefill))
            budget -= n
            i += 1
        if not batch.preempted and not hold:
            self._admit(batch, budget)
        return batch if entries else None

    def _hold_context(self) -> bool:
        """TRT-LLM batch waiting: whether this pass holds its context requests back (and counts
        it), for a pass that would run context and generation requests.

        The context requests are the running prompts still prefilling and the waiting requests
        the pass would admit by ``max_num_seqs`` and token budget (their KV room is not
        checked); each counts its whole prompt, as TRT-LLM's ``_waiting_requests`` does.
        """
        decodes = prefilling = 0
        context = []
        for s in self.running:
            if s.computed < s.prefill_target:
                context.append(s.prompt_len)
                prefilling += s.prefill_target - s.computed
            else:
                decodes += 1
        if not decodes:
            return False  # TRT-LLM never waits without generation requests
        left = self.budget - decodes - prefilling
        slots = self.max_num_seqs - len(self.running)
        for seq in self.waiting:
            if slots <= 0 or left <= 0:
                break
            remaining = seq.prefill_target - seq.computed
            if not self.chunked and remaining > left:
                break
            context.append(seq.prompt_len)
            left -= remaining
            slots -= 1
        if not context:
            return False
        if (self.batch_wait_count >= self.batch_wait_iters
                or sum(context) + decodes >= self.batch_wait_tokens):
            self.batch_wait_count = 0
            return False
        self.batch_wait_count += 1
        return True

    def _admit(self, batch: Batch, budget: int, only_transferred: bool = False) -> None:
        bs = self.block_size
        kv = self.kv
        waiting = self.waiting
        running = self.running
        while waiting and budget > 0 and len(running) < self.max_num_seqs:
            seq = waiting[0]
            if only_transferred and not seq.transferred:
                break
            if seq.keys is None:
                seq.keys = seq.req.block_keys(bs) if self.caching else []
            keys = seq.keys
            hits = in_lru = 0
            if keys:
                limit = len(keys) if seq.transferred else (seq.prefill_target - 1) // bs
                hits, in_lru = kv.match(keys, limit)
            start = seq.computed if seq.transferred else hits * bs
            if start < seq.prefill_target:
                remaining = seq.prefill_target - start
                if not self.chunked and remaining > budget:
                    break
                n = min(remaining, budget)
                is_prefill = True
            else:
                n = 1
                is_prefill = False
            whole = -(-max(seq.prefill_target, start + n) // bs) - hits
            if whole > kv.free_blocks - in_lru:
                break
            if self.no_evict and (-(-self._final_tokens(seq) // bs) - hits
                                  > kv.free_blocks - in_lru - self._reserved_blocks()):
                break
            waiting.popleft()
            if hits:
                kv.acquire(keys[:hits])
                seq.held = keys[:hits]
            alloc = -(-(start + n) // bs) - hits
            kv.allocate(alloc)
            seq.anon = alloc
            seq.computed = start
            if is_prefill:
                self._register(seq, hits, start + n)
                batch.prefill_tokens += n
                batch.prefill_requests += 1
                batch.prefill_start_tokens += start
            else:
                self._register(seq, hits, seq.prompt_len)
                batch.decode_requests += 1
                batch.decode_context_tokens += start + n
            batch.entries.append((seq, n, is_prefill))
            batch.admitted.append((seq, 0 if seq.transferred else hits * bs))
            running.append(seq)
            budget -= n

    def _final_tokens(self, seq: Seq) -> int:
        """KV tokens ``seq`` holds when it ends here: its prompt on a prefill worker, else
        prompt + output (TRT-LLM reserves the last token's slot too)."""
        return seq.prompt_len if self.role == "prefill" else seq.prompt_len + seq.output_len

    def _reserved_blocks(self) -> int:
        """Blocks running requests may still allocate before they end (no-evict admission)."""
        bs = self.block_size
        return sum(max(0, -(-self._final_tokens(s) // bs) - len(s.held) - s.anon) for s in self.running)

    def complete(self, batch: Batch) -> tuple[list[Seq], list[Seq], list[Seq]]:
        """Apply a finished pass.

        Returns ``(emitted, finished, prefilled)``: requests that produced a token in this
        pass, requests that are done (KV freed), and (prefill role) requests whose prompt is
        complete and whose KV is now held for the handoff.
        """
        emitted: list[Seq] = []
        finished: list[Seq] = []
        prefilled: list[Seq] = []
        prefill_role = self.role == "prefill"
        for seq, n, _ in batch.entries:
            seq.computed += n
            if seq.computed < seq.prefill_target:
                continue
            if seq.output_len == 0:
                finished.append(seq)  # nothing to generate: done when the prompt is
            elif prefill_role:
                prefilled.append(seq)
            else:
                seq.generated += 1
                emitted.append(seq)
                if seq.generated >= seq.output_len:
                    finished.append(seq)
        if finished or prefilled:
            gone = {id(s) for s in finished}
            gone.update(id(s) for s in prefilled)
            self.running = [s for s in self.running if id(s) not in gone]
            for seq in finished:
                self._free(seq)
                seq.held, seq.anon = [], 0
            for seq in prefilled:
                self.held[seq.rid] = seq
        return emitted, finished, prefilled

    # ------------------------------------------------------------------ fast-forward

    def decode_run_length(self, batch: Batch) -> int:
        """How many passes, starting with ``batch``, are certain to repeat it exactly.

        Nonzero only for a pure-decode batch with nothing waiting and nothing preempted:
        then, barring a new arrival, every following pass schedules the same requests, one
        token each, until one of them finishes. The run is cut so that the KV blocks of all its
        passes are free now (so no pass can preempt). Returns k >= 1 (k = 1: no run).
        """
        if batch.prefill_tokens or batch.admitted or batch.preempted or self.waiting:
            return 1
        entries = batch.entries
        if len(entries) != len(self.running):
            return 1  # the budget cut the batch short: later passes could differ
        k = min(seq.output_len - seq.generated for seq, _, _ in entries)
        if k <= 1:
            return 1
        bs = self.block_size
        free = self.kv.free_blocks
        if len(entries) * (k // bs + 1) <= free:
            return k  # no request can need more than k // bs + 1 new blocks in k passes

        slot = self.decode_slot

        def extra_blocks(passes: int) -> int:  # blocks needed by passes 2..passes
            total = 0
            for seq, _, _ in entries:
                total += -(-(seq.computed + passes + slot) // bs) - len(seq.held) - seq.anon
            return total

        if extra_blocks(k) > free:
            lo, hi = 1, k  # largest k that fits: extra_blocks is monotone in k
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if extra_blocks(mid) <= free:
                    lo = mid
                else:
                    hi = mid - 1
            k = lo
        return k

    def complete_decode_run(self, batch: Batch, passes: int) -> tuple[list[int], list[Seq]]:
        """Apply ``passes`` consecutive repeats of the pure-decode ``batch`` (the first pass's
        blocks were allocated by :meth:`schedule`); returns the ids of the batch's requests
        (each produced ``passes`` tokens) and the requests that finished.

        Equivalent to ``passes`` rounds of :meth:`schedule` + :meth:`complete` with no
        arrivals: the same tokens, the same blocks, the same LRU evictions (allocation takes
        anonymous free blocks before evicting, so one allocation of the total evicts exactly
        what the per-pass allocations would).
        """
        bs = self.block_size
        slot = self.decode_slot
        extra = 0
        finished = []
        rids = []
        for seq, _, _ in batch.entries:
            rids.append(seq.rid)
            computed = seq.computed + passes
            need = -(-(computed + slot) // bs) - len(seq.held) - seq.anon
            if need > 0:
                seq.anon += need
                extra += need
            seq.computed = computed
            seq.generated += passes
            if seq.generated >= seq.output_len:
                finished.append(seq)
        self.kv.allocate(extra)
        if finished:
            gone = {id(s) for s in finished}
            self.running = [s for s in self.running if id(s) not in gone]
            for seq in finished:
                self._free(seq)
                seq.held, seq.anon = [], 0
        return rids, finished

    def release(self, rid: int) -> None:
        """Free the KV of a prefilled request once the handoff link has moved it."""
        seq = self.held.pop(rid)
        self._free(seq)
        seq.held, seq.anon = [], 0


class SglangScheduler(VllmScheduler):
    """SGLang-like batch formation (``backend: sglang``; semantics in
    :class:`simkit.spec.SglangSpec`), sharing the paged KV cache, prefix caching, roles and
    pass completion of :class:`VllmScheduler`.

    Each pass is an extend pass if one can form (the prompt being chunked continues first,
    then waiting requests are admitted against the chunk, prefill and KV budgets), else a
    decode pass of every running request whose prompt is done, after retracting requests
    until every one of them can grow by a token. SGLang's prefix cache is a radix tree over
    ``page_size`` pages; here it is the block-identity cache (the same hits: whole pages of
    equal prefixes) with the radix cache's rules, each measured on the reference's sglang
    core: eviction by least recent use (``KvCache.release``; a prefix match, the insertion
    of new prompt pages after a pass and of a page generated tokens complete use the path),
    a just-computed page the tree already has is shared and the copy freed
    (``KvCache.adopt_many``), and each generated token gets its KV slot when it is emitted
    (none for a request's only token), so a request ends holding prompt + output tokens. Sources: SGLang ``python/sglang/srt/managers/schedule_policy.py``
    (PrefillAdder: budgets, page-aligned truncation against the chunk budget left),
    ``scheduler.py`` (extend before decode, new_token_ratio decay and reset) and
    ``schedule_batch.py`` (retract_decode: fewest output tokens first, then the longest
    prompt); checked against the reference's sglang core (a 4-token prompt and the first 4
    tokens of an 8-token one share an 8-token chunk budget; a decoding request waits during
    another's extend passes).
    """

    #: the radix cache evicts the least recently used leaf (see KvCache.release)
    EVICT_BY_TOUCH = True
    #: SGLang's defaults: initial new-token ratio (x schedule_conservativeness), its floor as a
    #: fraction of that, and the passes the linear decay takes
    INIT_NEW_TOKEN_RATIO = 0.7
    MIN_NEW_TOKEN_RATIO_FACTOR = 0.14
    NEW_TOKEN_RATIO_DECAY_PASSES = 600
    #: lpm orders by prefix match only up to this many waiting requests (then fifo), as SGLang
    LPM_MAX_WAITING = 128

    def __init__(self, spec: PoolSpec, role: str) -> None:
        super().__init__(spec, role)
        sg = spec.sglang
        self.lpm = sg.schedule_policy == "lpm"
        #: tokens of prompt chunks per extend pass; None: no chunking
        self.chunk_budget = (sg.chunked_prefill_size or spec.max_num_batched_tokens) if self.chunked else None
        self.budget = self.chunk_budget or sg.max_prefill_tokens  # the liveness guard's pass size
        self.chunked = True  # a long prompt is admitted whole when chunking is off: no budget cap
        self.max_prefill_tokens = sg.max_prefill_tokens
        self.budgets_on_chunks = sg.budgets_count_chunks
        #: extend passes carry the running requests' decodes (SGLang's is_mixed_chunk: mixed
        #: chunk needs chunked prefill); a decode worker never extends beside its decodes
        self.mixed = sg.enable_mixed_chunk and self.chunk_budget is not None and role == "aggregated"
        self.clip_max_new_tokens = sg.clip_max_new_tokens
        self.init_ratio = self.INIT_NEW_TOKEN_RATIO * sg.schedule_conservativeness
        self.min_ratio = self.init_ratio * self.MIN_NEW_TOKEN_RATIO_FACTOR
        self.ratio_step = (self.init_ratio - self.min_ratio) / self.NEW_TOKEN_RATIO_DECAY_PASSES
        self.new_token_ratio = self.init_ratio
        self.adopt_duplicates = True
        self.clock = 0  #: counts uses of a request's cached path (the LRU order)
        # the reference's sglang core gives each generated token a KV slot as it is emitted
        # (the first one right after its prefill pass, unless it is also the last), so a
        # request ends holding prompt + output tokens; measured: a 60-token prompt with 4
        # output tokens leaves 4 full 16-token pages cached, with 3 output tokens 3 pages
        self.decode_slot = 1 if role == "aggregated" else 0

    def reserve(self, seq: Seq) -> bool:
        """Decode role: take room for the prompt KV of ``seq`` (a transferred request) before
        its prefill, if it fits now; returns whether it did. The prompt's leading pages this
        worker's prefix cache holds are shared (held, so never evicted meanwhile) and the rest
        of its pages, rounded up to whole pages, are allocated (evicting cached pages if
        need be); it fits if those are at most the free pages (never-used plus evictable).
        As the reference's sglang core (``SglangKvManager::reserve_destination_lease`` in the
        Dynamo sources; measured on 1.6.1: with 20 pages of 16 tokens, a 5-page running
        request and a 10-page prompt reserved, a second 10-page prompt waits until one ends).
        SGLang itself reserves the same pages when its decode side pre-allocates a transfer
        (``python/sglang/srt/disaggregation/decode.py``, DecodePreallocQueue)."""
        if not seq.output_len:
            return True  # done when its prompt is: it never reaches this worker
        bs = self.block_size
        kv = self.kv
        if seq.keys is None:
            seq.keys = seq.req.block_keys(bs) if self.caching else []
        keys = seq.keys
        hits, in_lru = kv.match(keys, len(keys)) if keys else (0, 0)
        fresh = -(-seq.prompt_len // bs) - hits
        if fresh > kv.free_blocks - in_lru:
            return False
        if hits:
            kv.acquire(keys[:hits])
            seq.held = keys[:hits]
        kv.allocate(fresh)
        seq.anon = fresh
        self.reserved[seq.rid] = seq
        return True

    def activate(self, rid: int) -> None:
        """Decode role: the prompt KV of reserved request ``rid`` arrived; its pages join the
        prefix cache (a page the cache already has is shared, the copy freed) and it joins
        the next decode pass."""
        seq = self.reserved.pop(rid)
        self._register(seq, len(seq.held), seq.prompt_len)
        self.add(seq)

    def add(self, seq: Seq) -> None:
        """Queue a request; one whose prompt KV arrived (decode role) goes behind the others
        that did and ahead of every retracted or fresh prompt: the requests with KV run first
        and no prompt is admitted while they wait (the reference's sglang core keeps them in
        a queue of their own, promoted before any admission, ``prebuilt_ready``)."""
        if seq.transferred:
            self.waiting.insert(self.ready, seq)
            self.ready += 1
        else:
            self.waiting.append(seq)

    def _preempt(self, seq: Seq) -> None:
        super()._preempt(seq)  # first in line among the retracted, behind the ready (see add)
        if self.ready:
            self.waiting.popleft()
            self.waiting.insert(self.ready, seq)

    def fits_ever(self, seq: Seq) -> bool:
        """:meth:`VllmScheduler.fits_ever`, and room for the prompt in whole pages plus the
        output beside it in the empty cache: SGLang admits a prompt only while its pages and
        its (clipped) output stay below the free tokens (a recompute after a retraction too),
        so a request that fills the cache would wait forever (found by hypothesis)."""
        if not super().fits_ever(seq):
            return False
        if self.role == "prefill":
            return -(-seq.prompt_len // self.block_size) * self.block_size < self.kv.capacity * self.block_size
        return seq.prompt_len + seq.output_len + self.block_size <= self.kv.capacity * self.block_size

    def schedule(self) -> Optional[Batch]:
        batch = Batch()
        reset = self._extend(batch)
        if not batch.entries:
            reset = self._decode(batch) or reset
            if not batch.entries and batch.preempted:  # the retraction made room for a prompt
                reset = self._extend(batch) or reset
            if not batch.entries:
                return None
        if reset:
            self.new_token_ratio = self.init_ratio
        self._decay_ratio(1)
        return batch

    def _decay_ratio(self, passes: int) -> None:
        """Decay ``new_token_ratio`` once per pass of ``passes``: the same subtractions one by
        one (bit for bit), stopping at the floor (it stays there)."""
        ratio, step, floor = self.new_token_ratio, self.ratio_step, self.min_ratio
        for _ in range(passes):
            if ratio <= floor:
                ratio = floor
                break
            ratio = max(ratio - step, floor)
        self.new_token_ratio = ratio

    def _lookup(self, seq: Seq) -> tuple[int, int]:
        """(blocks of ``seq``'s prompt cached here, of which free), for a fresh admission."""
        if seq.keys is None:
            seq.keys = seq.req.block_keys(self.block_size) if self.caching else []
        if not seq.keys:
            return 0, 0
        return self.kv.match(seq.keys, (seq.prefill_target - 1) // self.block_size)

    def _order_waiting(self) -> None:
        """lpm: the longest cached prefix first (stable); fifo beyond LPM_MAX_WAITING."""
        waiting = self.waiting
        if not self.lpm or len(waiting) < 2 or len(waiting) > self.LPM_MAX_WAITING:
            return
        fresh = [s for s in waiting if not s.transferred]
        if len(fresh) < 2:
            return
        fresh.sort(key=lambda s: -self._lookup(s)[0])
        self.waiting = deque([s for s in waiting if s.transferred] + fresh)  # ready ones stay first

    def _extend(self, batch: Batch) -> bool:
        """Fill an extend pass into ``batch``; returns whether KV ran out (ratio reset)."""
        bs = self.block_size
        kv = self.kv
        running = self.running
        # a prefill worker generates nothing here: it reserves no output
        clip = 0 if self.role == "prefill" else self.clip_max_new_tokens
        rem_chunk = self.chunk_budget if self.chunk_budget is not None else math.inf
        rem_input = self.max_prefill_tokens
        ratio = self.new_token_ratio
        # mixed chunk: each running request with its first token decodes in this pass too,
        # one token of every budget each (SGLang's mixed_with_decode_tokens)
        decoding = [s for s in running if s.computed >= s.prefill_target] if self.mixed else ()
        mixed = len(decoding)
        rem_chunk -= mixed
        rem_input -= mixed

        def total_budget() -> float:  # read first before anything here changes the cache
            return kv.free_blocks * bs - mixed - sum(
                min(s.output_len - s.generated, clip) * ratio for s in running if s.computed >= s.prefill_target)

        rem_total = None  # computed when first needed (a decode pass mostly needs none)
        for seq in running:  # the prompt being chunked (at most one) continues first
            if seq.computed >= seq.prefill_target:
                continue
            computed = seq.computed
            remaining = seq.prefill_target - computed
            if rem_total is None:
                rem_total = total_budget()
            n = int(min(remaining, rem_chunk, rem_total))
            if n <= 0:
                break
            need = -(-(computed + n) // bs) - len(seq.held) - seq.anon
            if need > kv.free_blocks:
                return True
            if need > 0:
                kv.allocate(need)
                seq.anon += need
            self._add_prefill(batch, seq, computed, n)
            paged = -(-n // bs) * bs
            rem_total -= paged + (min(seq.output_len - seq.generated, clip) if n == remaining else 0)
            rem_input -= paged
            rem_chunk -= paged
        self._order_waiting()
        waiting = self.waiting
        while waiting and len(running) < self.max_num_seqs and rem_input > 0 and rem_chunk > 0:
            seq = waiting[0]
            if seq.transferred:
                break  # a decode-pool request joins the next decode pass
            if rem_total is None:
                rem_total = total_budget()
            hits, in_lru = self._lookup(seq)
            start = hits * bs
            extend = seq.prefill_target - start
            paged = -(-extend // bs) * bs
            reserve = min(seq.output_len - seq.generated, clip)
            if not self.budgets_on_chunks:  # SGLang: the whole remaining prompt is charged
                if extend + reserve >= rem_total or (paged >= rem_input and batch.entries):
                    break
            if paged <= rem_chunk:
                n = extend
            else:  # chunked: a page-aligned piece of what is left of the chunk budget
                n = int(rem_chunk) // bs * bs
                if n <= 0:
                    break
                paged, reserve = n, 0
            if self.budgets_on_chunks and (paged + reserve >= rem_total or (paged > rem_input and batch.entries)):
                break
            alloc = -(-(start + n) // bs) - hits
            if alloc > kv.free_blocks - in_lru:
                return True
            waiting.popleft()
            if hits:
                kv.acquire(seq.keys[:hits])
                seq.held = seq.keys[:hits]
                self._touch(seq)  # the prefix match refreshes the matched path
            kv.allocate(alloc)
            seq.anon = alloc
            seq.computed = start
            self._add_prefill(batch, seq, start, n)
            batch.admitted.append((seq, start))
            running.append(seq)
            rem_total -= paged + reserve
            rem_input -= paged
            rem_chunk -= paged
        if decoding and batch.entries:
            self._mix_decodes(batch, decoding)
        return False

    def _mix_decodes(self, batch: Batch, decoding: list[Seq]) -> None:
        """Mixed chunk: ``decoding``, the running requests that had their first token when
        the extend pass ``batch`` was formed, decode in it after its prompts, as SGLang's
        ``mix_with_running`` appends the running batch; left to the next pass if their next
        tokens need more pages than are free."""
        bs = self.block_size
        kv = self.kv
        slot = self.decode_slot
        need = [max(0, -(-(s.computed + 1 + slot) // bs) - len(s.held) - s.anon) for s in decoding]
        if sum(need) > kv.free_blocks:
            return
        for seq, more in zip(decoding, need):
            if more:
                kv.allocate(more)
                seq.anon += more
            batch.entries.append((seq, 1, False))
            batch.decode_requests += 1
            batch.decode_context_tokens += seq.computed + 1

    def _add_prefill(self, batch: Batch, seq: Seq, start: int, n: int) -> None:
        batch.entries.append((seq, n, True))
        batch.prefill_tokens += n
        batch.prefill_requests += 1
        batch.prefill_start_tokens += start

    def _decode(self, batch: Batch) -> bool:
        """Fill a decode pass into ``batch``, retracting under KV pressure; returns whether
        anything was retracted. Decode-pool requests whose prompt KV arrived join it."""
        bs = self.block_size
        kv = self.kv
        running = self.running
        slot = self.decode_slot

        def growth() -> int:
            return sum(max(0, -(-(s.computed + 1 + slot) // bs) - len(s.held) - s.anon)
                       for s in running if s.computed >= s.prefill_target)

        retracted = False
        need = growth()
        while need > kv.free_blocks and len(running) > 1:
            # SGLang's retract_decode: the fewest output tokens first, then the longest prompt
            victim = min(running, key=lambda s: (s.generated, -s.prompt_len))
            running.remove(victim)
            self._preempt(victim)
            batch.preempted.append(victim)
            retracted = True
            need = growth()
        admit = not retracted
        if need > kv.free_blocks:
            # one request that cannot grow: alone it fits (fits_ever), so reserved prompts hold
            # the pages it needs. Once one of them has its KV, the request is retracted so they
            # run (the reference's core, which keeps no room for decoding beside reservations,
            # stalls here for good); until then the worker waits for a KV arrival.
            if not self.ready:
                return retracted
            victim = running.pop()
            self._preempt(victim)
            batch.preempted.append(victim)
            retracted = admit = True
        elif self.ready and len(running) >= self.max_num_seqs and not any(
                s.computed >= s.prefill_target for s in running):
            # likewise prompts that cannot extend for want of pages hold every seat
            while len(running) >= self.max_num_seqs:
                victim = running.pop()
                self._preempt(victim)
                batch.preempted.append(victim)
            retracted = admit = True
        for seq in running:
            computed = seq.computed
            if computed < seq.prefill_target:
                continue  # a chunked prompt waiting for the next extend pass
            more = -(-(computed + 1 + slot) // bs) - len(seq.held) - seq.anon
            if more > 0:
                kv.allocate(more)
                seq.anon += more
            batch.entries.append((seq, 1, False))
            batch.decode_requests += 1
            batch.decode_context_tokens += computed + 1
        if admit:
            self._admit_transferred(batch)
        return retracted

    def _admit_transferred(self, batch: Batch) -> None:
        """Admit the waiting requests whose prompt KV arrived into the decode pass ``batch``:
        those reserved ahead (:meth:`reserve`) already hold their pages."""
        waiting = self.waiting
        running = self.running
        while waiting and waiting[0].transferred and len(running) < self.max_num_seqs:
            seq = waiting[0]
            if not seq.held and not seq.anon:  # not reserved ahead: allocated as it is admitted
                n = len(running)
                self._admit(batch, 1, only_transferred=True)
                if len(running) == n:
                    return
                self.ready -= 1
                continue
            waiting.popleft()
            self.ready -= 1
            batch.entries.append((seq, 1, False))
            batch.decode_requests += 1
            batch.decode_context_tokens += seq.computed + 1
            batch.admitted.append((seq, 0))
            running.append(seq)

    def complete(self, batch: Batch) -> tuple[list[Seq], list[Seq], list[Seq]]:
        # the radix tree takes a prompt's pages when its extend pass has run, so prompts in the
        # same pass do not share them (the reference: measured, a prompt admitted beside
        # another with the same first 512 tokens reuses none of them)
        bs = self.block_size
        kv = self.kv
        slot = self.decode_slot
        held_back = self.role == "prefill"
        for seq, n, is_prefill in batch.entries:
            if is_prefill:
                if held_back and seq.computed + n >= seq.prefill_target and seq.output_len:
                    continue  # its last pages enter the tree when the handoff releases them
                self._register(seq, seq.computed // bs, seq.computed + n)
                if (seq.computed + n) // bs > seq.computed // bs:
                    self._touch(seq)  # inserting its new pages refreshes its path
        if slot:
            # the first token's slot, for a request that goes on decoding, before the requests
            # that end in this pass free their pages (left to the next decode pass if no room)
            for seq, n, is_prefill in batch.entries:
                end = seq.computed + n
                if is_prefill and end >= seq.prefill_target and seq.output_len - seq.generated > 1:
                    need = -(-(end + slot) // bs) - len(seq.held) - seq.anon
                    if 0 < need <= kv.free_blocks:
                        kv.allocate(need)
                        seq.anon += need
                    if (end + slot) // bs > end // bs:
                        self._touch(seq)  # the token completes a page, inserted at once
            for seq, n, is_prefill in batch.entries:
                if not is_prefill and (seq.computed + n + slot) // bs > (seq.computed + slot) // bs:
                    self._touch(seq)  # a generated token completes a page, inserted at once
        return super().complete(batch)

    def release(self, rid: int) -> None:
        """:meth:`VllmScheduler.release`, after the prompt pages of the request's last prefill
        pass join the prefix cache, which uses its path: the reference's sglang core inserts
        a handed-off prompt's pages when the source is released, at the decode side's
        activation (measured: of two prompts prefilled in one pass, the one whose decode
        worker was busy, released ~4 ms later, is evicted after the other)."""
        seq = self.held[rid]
        first = len(seq.held) + seq.private  # its pages so far are keyed or private, in order
        if seq.computed // self.block_size > first:
            self._register(seq, first, seq.computed)
            self._touch(seq)
        super().release(rid)

    def _touch(self, seq: Seq) -> None:
        """``seq``'s cached path is used now: it moves last in the eviction order."""
        self.clock += 1
        seq.stamp = self.clock

    def complete_decode_run(self, batch: Batch, passes: int) -> tuple[list[int], list[Seq]]:
        self._decay_ratio(passes - 1)  # the per-pass path decays once per scheduled pass
        slot = self.decode_slot
        if slot:
            # the pages generated tokens complete in these passes touch their paths in pass
            # order, then batch order; only each request's last touch decides its place
            bs = self.block_size
            last = []
            for i, (seq, _, _) in enumerate(batch.entries):
                end = seq.computed + slot + passes  # KV slots after the last pass
                j = passes - end % bs  # the last pass whose token completes a page
                if j >= 1:
                    last.append((j, i, seq))
            last.sort(key=lambda t: (t[0], t[1]))
            for _, _, seq in last:
                self._touch(seq)
        return super().complete_decode_run(batch, passes)


def make_scheduler(spec: PoolSpec, role: str) -> VllmScheduler:
    """The scheduler of ``spec.backend`` for a worker in ``role``."""
    return SglangScheduler(spec, role) if spec.backend == "sglang" else VllmScheduler(spec, role)
