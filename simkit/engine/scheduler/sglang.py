"""SGLang-like batch formation for one worker (``backend: sglang``): extend passes before
decode passes, the new-token ratio, retraction, the radix cache's rules and the decode side's
reservations of prompt KV; semantics in :class:`SglangScheduler` and
:class:`simkit.spec.SglangSpec`. Built on :class:`~simkit.engine.scheduler.vllm.VllmScheduler`
(its admission of transferred requests and its :meth:`~VllmScheduler.fits_ever`) and the
common core of :mod:`.base`.

Part of :mod:`simkit.engine`: pure, no SimPy.
"""

from __future__ import annotations

from collections import deque
from typing import Optional

import math

from simkit.spec import SGLANG_CHUNKED_PREFILL_SIZE, PoolSpec
from simkit.engine.scheduler.base import Batch, Seq
from simkit.engine.scheduler.vllm import VllmScheduler

__all__ = ["SglangScheduler"]


class SglangScheduler(VllmScheduler):
    """SGLang-like batch formation (``backend: sglang``; semantics in
    :class:`simkit.spec.SglangSpec`), sharing the paged KV cache, prefix caching, roles and
    pass completion of the common core (:class:`~simkit.engine.scheduler.base.Scheduler`) and
    :class:`VllmScheduler`'s admission of transferred requests.

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
    #: a decode pass also decays the new-token ratio and touches the pages generated tokens
    #: complete: verify rounds (several tokens a pass) are stepped pass by pass
    FAST_VERIFY_RUNS = False
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
        self.chunk_budget = (sg.chunked_prefill_size or SGLANG_CHUNKED_PREFILL_SIZE) if self.chunked else None
        self.budget = self.chunk_budget or sg.max_prefill_tokens  # the liveness guard's pass size
        self.chunked = True  # a long prompt is admitted whole when chunking is off: no budget cap
        self.max_prefill_tokens = sg.max_prefill_tokens
        self.budgets_on_chunks = sg.budgets_count_chunks
        #: extend passes carry the running requests' decodes (SGLang's is_mixed_chunk: mixed
        #: chunk needs chunked prefill); a decode worker never extends beside its decodes
        self.mixed = sg.enable_mixed_chunk and self.chunk_budget is not None and role == "aggregated"
        self.clip_max_new_tokens = sg.clip_max_new_tokens
        #: decode passes after each extend pass (``prefill_decode_interval``; aggregated pools
        #: only, PoolsSpec), and those still owed before the next extend
        self.interval = sg.prefill_decode_interval
        self.hold = 0
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

    def unreserve(self, rid: int) -> None:
        """Decode role: the reserved request ``rid`` will never arrive (its prefill worker
        rejected it): its pages are free and empty again and its cached prefix no longer held."""
        seq = self.reserved.pop(rid)
        self.kv.release(seq.held, seq.anon, 0, stamp=seq.stamp)
        seq.held, seq.anon = [], 0

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
        # prefill_decode_interval: after an extend pass, decode passes first (none to run: extend)
        held = self.hold and any(s.computed >= s.prefill_target for s in self.running)
        reset = False if held else self._extend(batch)
        if not batch.entries:
            reset = self._decode(batch) or reset
            if not batch.entries and batch.preempted:  # the retraction made room for a prompt
                reset = self._extend(batch) or reset
            if not batch.entries:
                return None
        if reset:
            self.new_token_ratio = self.init_ratio
        if not batch.prefill_requests:  # SGLang decays the ratio on decode passes only
            self._decay_ratio(1)
            self.hold = max(0, self.hold - 1)
        else:
            self.hold = self.interval
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
        width = self.decode_width
        need = [max(0, -(-(s.computed + width(s) + slot) // bs) - len(s.held) - s.anon) for s in decoding]
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

        width = self.decode_width  # 1, or a verify round's k + 1 (SGLang reserves them too: measured)

        def growth() -> int:
            return sum(max(0, -(-(s.computed + width(s) + slot) // bs) - len(s.held) - s.anon)
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
            more = -(-(computed + width(seq) + slot) // bs) - len(seq.held) - seq.anon
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
            if seq.acc is not None:  # room for its first verify round's drafts too
                more = -(-(seq.computed + self.decode_width(seq) + self.decode_slot) // self.block_size) \
                    - len(seq.held) - seq.anon
                if more > self.kv.free_blocks and (running or not self._retract_ready(seq, more)):
                    return
                if more > 0:
                    self.kv.allocate(more)
                    seq.anon += more
            waiting.popleft()
            self.ready -= 1
            batch.entries.append((seq, 1, False))
            batch.decode_requests += 1
            batch.decode_context_tokens += seq.computed + 1
            batch.admitted.append((seq, 0))
            running.append(seq)

    def _retract_ready(self, head: Seq, more: int) -> bool:
        """Nothing runs, and ``head``, first of the requests whose prompt KV arrived, needs
        ``more`` pages for its first verify round's drafts, which the others' KV holds: retract
        them newest first (SGLang's retraction: their KV freed, their prompt computed again)
        until it fits. Without this no pass would ever run (found by the invariant property:
        two prompts whose KV fills the cache, speculation on). Returns whether it fits now."""
        waiting = self.waiting
        for victim in reversed(list(waiting)[:self.ready]):
            if self.kv.free_blocks >= more:
                break
            if victim is head:
                continue
            waiting.remove(victim)
            self.ready -= 1
            self._preempt(victim)
        return self.kv.free_blocks >= more

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
        """:meth:`Scheduler.release <simkit.engine.scheduler.base.Scheduler.release>`, after the
        prompt pages of the request's last prefill pass join the prefix cache, which uses its
        path: the reference's sglang core inserts
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

    def advance_decode_run(self, batch: Batch, started: int, done: int) -> tuple[list[int], list[Seq]]:
        # the per-pass path decays once per scheduled pass (and counts it off the interval)
        self._decay_ratio(started - batch.run_started)
        self.hold = max(0, self.hold - (started - batch.run_started))
        slot = self.decode_slot
        passes = done - batch.run_done
        if slot and passes:
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
        return super().advance_decode_run(batch, started, done)
