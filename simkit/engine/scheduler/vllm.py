"""vLLM-like batch formation for one worker (``backend: vllm``): continuous batching, chunked
prefill, a token budget, ``max_num_seqs``, prefix caching and recompute preemption.

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

Progress, prefix caching and roles are the common core's (:mod:`.base`). TRT-LLM's capacity
scheduler and batch waiting are this pass with its own rules (:mod:`.trtllm`, through the
hooks :attr:`VllmScheduler.NO_EVICT`, :meth:`VllmScheduler._hold_context` and
:meth:`VllmScheduler._admissible`); SGLang's scheduler forms its passes its own way
(:mod:`.sglang`) and reuses this module's admission of transferred requests.

Part of :mod:`simkit.engine`: pure, no SimPy.
"""

from __future__ import annotations

from typing import Optional

from simkit.spec import PoolSpec
from simkit.engine.offload import DEFERRED
from simkit.engine.scheduler.base import Batch, Scheduler, Seq

__all__ = ["VllmScheduler"]

#: :meth:`VllmScheduler._restore_step` outcomes
_SKIP = object()
_STOP = object()


class VllmScheduler(Scheduler):
    """vLLM v1's pass formation (module docstring) over the common core of :class:`Scheduler`."""

    #: never preempt: a running request whose blocks do not fit ends the pass's running part
    #: (TRT-LLM's GUARANTEED_NO_EVICT, :class:`~simkit.engine.scheduler.trtllm.TrtllmScheduler`,
    #: where admission reservations make it unreachable); vLLM preempts
    NO_EVICT = False
    #: a prompt whose every block is cached reuses them all and computes only its last token
    #: again (TRT-LLM, and the reference's trtllm core: measured, such a request's first token
    #: takes one decode step over the prompt); vLLM reuses the prompt up to its last block and
    #: computes that block again (``KVCacheManager.get_computed_blocks``: at most prompt - 1
    #: tokens hit, in whole blocks)
    REUSE_FULL_HIT = False
    #: with an EAGLE or MTP drafter, a prefix hit gives back its last matched block, whose last
    #: token's hidden state the drafter needs computed again (vLLM v1 ``KVCacheManager``,
    #: ``use_eagle``; the reference's vllm core too, measured: 3 shared blocks hit 2)
    EAGLE_DROPS_LAST_HIT = True

    def __init__(self, spec: PoolSpec, role: str) -> None:
        super().__init__(spec, role)
        self.drop_last_hit = (self.EAGLE_DROPS_LAST_HIT and self.speculative is not None
                              and self.speculative.method in ("mtp", "eagle"))
        #: preempt the oldest running request (fifo) instead of the newest (lifo, vLLM's way)
        self.fifo_preemption = spec.preemption_mode == "fifo"

    def fits_ever(self, seq: Seq) -> bool:
        """Whether the request can ever be served here: prompt + output is within
        ``max_model_len``; its peak KV (the prompt on a prefill worker; prompt + output - 1
        tokens elsewhere) fits in the whole cache; and without chunked prefill that same peak
        fits in the token budget, since a request preempted late is recomputed in one pass
        (vLLM likewise requires ``max_num_batched_tokens >= max_model_len`` when chunked
        prefill is off)."""
        if not self._within_max_model_len(seq):
            return False
        peak = seq.prompt_len if self.role == "prefill" else seq.prompt_len + max(seq.output_len - 1, 0)
        if seq.acc is not None:  # a verify round reserves its drafts' room up to the last token
            peak = seq.prompt_len + seq.output_len
        if -(-peak // self.block_size) > self.kv.capacity:
            return False
        return self.chunked or peak <= self.budget

    def _unschedule(self, batch: Batch, seq: Seq) -> None:
        """Take ``seq``'s entry (scheduled earlier in this pass) out of ``batch``."""
        for j, (s, n, is_prefill) in enumerate(batch.entries):
            if s is seq:
                del batch.entries[j]
                if is_prefill:
                    batch.prefill_tokens -= n
                    batch.prefill_requests -= 1
                    batch.prefill_start_tokens -= seq.computed
                    if self._verifies_prompt_end(seq, n):
                        batch.decode_requests -= 1
                        batch.decode_context_tokens -= seq.prefill_target
                else:
                    batch.decode_requests -= 1
                    batch.decode_context_tokens -= seq.computed + n
                    batch.decode_budget -= self.decode_budget_tokens(self.decode_width(seq))
                return

    def _verifies_prompt_end(self, seq: Seq, n: int) -> bool:
        """Whether a chunk of ``n`` tokens ends ``seq``'s prompt in a verify round
        (``speculative.verify_in_prefill``, the reference's vLLM and TRT-LLM cores; not on a
        prefill worker, whose scheduler has no speculation)."""
        return self.verify_in_prefill and seq.acc is not None and seq.computed + n == seq.prefill_target

    def schedule(self) -> Optional[Batch]:
        """Form the next pass, allocating its KV blocks; ``None`` if nothing can run."""
        bs = self.block_size
        kv = self.kv
        budget = self.budget
        batch = Batch()
        entries = batch.entries
        running = self.running
        hold = self._hold_context()
        i = 0
        while i < len(running) and budget > 0:
            seq = running[i]
            computed = seq.computed
            width = 0  # tokens of KV beyond the pass's own: a verify round's drafts
            if computed < seq.prefill_target:
                if hold:
                    i += 1
                    continue
                n = min(seq.prefill_target - computed, budget)
                is_prefill = True
                if self._verifies_prompt_end(seq, n):
                    width = self.decode_width(seq) - 1  # the prompt's end is a verify round
            else:
                n = 1
                is_prefill = False
                width = self.decode_width(seq) - 1
                if width and self.decode_budget_tokens(width + 1) > budget:
                    break  # no room left in the budget for its drafts
            need = -(-(computed + n + width) // bs) - len(seq.held) - seq.anon
            if self.NO_EVICT and need > kv.free_blocks:
                break  # reservations make this unreachable; never evict under no-evict
            while need > kv.free_blocks:
                if self.fifo_preemption:
                    victim = running.pop(0)
                    if victim is not seq:
                        i -= 1
                        self._unschedule(batch, victim)
                        budget = self.budget - batch.prefill_tokens - batch.decode_budget
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
                if self.offload is not None:
                    self.offload.allocated(seq.rid)
            if is_prefill:
                self._register(seq, computed // bs, computed + n)
                batch.prefill_tokens += n
                batch.prefill_requests += 1
                batch.prefill_start_tokens += computed
                if self._verifies_prompt_end(seq, n):
                    batch.decode_requests += 1  # priced as a decode step over the prompt too
                    batch.decode_context_tokens += seq.prefill_target
                budget -= n
            else:
                batch.decode_requests += 1
                batch.decode_context_tokens += computed + n
                used = self.decode_budget_tokens(width + 1)
                batch.decode_budget += used
                budget -= used
            entries.append((seq, n, is_prefill))
            i += 1
        if not batch.preempted and not hold:
            self._admit(batch, budget)
        if not entries and not hold and self.offload is not None and self._unhold_restored():
            self._admit(batch, budget)  # (after a preemption too: else nothing runs, for good)
        if self.offload is not None:
            for victim in batch.preempted:
                self.offload.preempted(victim.rid)
            if entries:
                self.offload.progressed()
        return batch if entries else None

    def _unhold_restored(self) -> bool:
        """Host offload, when the pass would run nothing (nothing admitted, or the only running
        request preempted for want of room): waiting requests whose restores ended hold GPU
        blocks no pass will ever free, and the first in line needs more.
        vLLM (and the reference, which aborts such a replay: "effect-free zero-duration pass")
        would wait for good; simkit gives their restored blocks back to the GPU cache, still
        hittable, and lets them look up again. Returns whether any was given back."""
        offload, kv = self.offload, self.kv
        given = False
        for seq in self.waiting:
            if seq.rid in offload.loaded:
                kv.release(seq.held, seq.anon)
                seq.held, seq.anon = [], 0
                offload.loaded.discard(seq.rid)
                offload.given_back.add(seq.rid)  # (its restore still counts at its admission)
                given = True
        return given

    def _hold_context(self) -> bool:
        """Whether this pass holds its context (prefilling) requests back; vLLM never does
        (TRT-LLM's batch waiting does, :class:`~simkit.engine.scheduler.trtllm.TrtllmScheduler`)."""
        return False

    def _admit(self, batch: Batch, budget: int, only_transferred: bool = False) -> None:
        """Admit waiting requests, first come first served, into ``batch`` while the token
        budget, the seats (``max_num_seqs``) and the KV cache allow, stopping at the first that
        does not fit. With TRT-LLM's full reuse (``REUSE_FULL_HIT``) a fully cached prompt,
        which computes nothing new, is set aside and admitted after the prompts that compute
        (on a prefill worker, where it costs no pass time, in its turn), even with the budget
        spent (0 new tokens fit), its one-token step then overdrawing the budget by one, so one
        such prompt joins a full pass (the reference's trtllm core, measured: a cached prompt
        ahead of a 352-token one leaves it a 256-token chunk of a 256-token budget; of two
        cached prompts beside a chunk that spends it, one joins; a prefill worker hands its
        prompts over in their order). A prompt set aside keeps its seat, taken in its turn
        (measured: with one seat left, a cached prompt ahead of one that computes takes it)."""
        waiting = self.waiting
        later: list = []  # fully cached prompts set aside (TRT-LLM)
        skipped: list = []  # host offload: restoring, or waiting for a store (vLLM skips them)
        offload = self.offload
        in_order = self.role == "prefill"  # there they cost no pass time: taken in their turn
        while waiting and len(self.running) + len(later) < self.max_num_seqs:
            seq = waiting[0]
            if only_transferred and not seq.transferred:
                break
            full = self.REUSE_FULL_HIT and not seq.transferred and self._fully_cached(seq)
            if full and not in_order:
                later.append(waiting.popleft())
                continue
            if budget < 0 or (budget == 0 and not full):
                break
            if offload is not None and not seq.transferred:
                step = self._restore_step(seq)
                if step is _SKIP:
                    skipped.append(waiting.popleft())
                    continue
                if step is _STOP:
                    break
            used = self._admit_one(batch, seq, budget, overdraw=full)
            if used is None:
                break
            budget -= used
        for i, seq in enumerate(later):
            used = None
            if budget >= 0 and len(self.running) < self.max_num_seqs:
                used = self._admit_one(batch, seq, budget, overdraw=True)
            if used is None:
                waiting.extendleft(reversed(later[i:]))  # back at the head, in their order
                break
            budget -= used
        if skipped:
            waiting.extendleft(reversed(skipped))  # back at the head, in their order

    def _restore_step(self, seq: Seq):
        """Host offload, before admitting waiting ``seq``: None (admit it as usual), ``_SKIP``
        (it waits: its restore is under way, or its host blocks are still being stored; vLLM
        skips it and schedules those behind it) or ``_STOP`` (no GPU room for its restore: the
        admissions stop). A restore starts here when its prompt continues past its GPU hit with
        host blocks: their GPU room is allocated and its GPU hit held, the copy begins, and it
        waits (:mod:`simkit.engine.offload`)."""
        offload, kv, bs = self.offload, self.kv, self.block_size
        rid = seq.rid
        if rid in offload.restores:
            return None if rid in offload.loaded or rid in offload.given_back else _SKIP
        if seq.keys is None:
            seq.keys = seq.req.block_keys(bs) if self.caching else []
        keys = seq.keys
        if not keys:
            return None
        n_prompt = seq.prompt_len // bs
        prompt_keys = keys if len(keys) <= n_prompt else keys[:n_prompt]  # (the same list each pass)
        # the host look-up continues the GPU prefix as the GPU holds it, all of its blocks (the
        # reference's: a prompt whose every block is in the GPU cache looks nothing up, though it
        # reuses them but the last; measured), the restore the GPU hit vLLM reuses
        full, full_in_lru = kv.match(prompt_keys, len(prompt_keys))
        found = offload.lookup(rid, prompt_keys, full)
        if found == DEFERRED:
            return _SKIP
        if not found:
            return None
        if found > kv.free_blocks - full_in_lru:  # (the restore holds its whole GPU prefix)
            return _STOP
        fence, offload.fence = offload.fence, set()  # this pass's fences; the restore's own apart
        if full:
            kv.acquire(prompt_keys[:full])
            seq.held = list(prompt_keys[:full])
        kv.allocate(found)
        seq.anon = found
        offload.allocated(None)  # (a restore's reservation fences its copy, not a pass)
        mine, offload.fence = offload.fence, fence
        offload.start_restore(rid, prompt_keys, full, found, mine)
        return _SKIP

    def restored(self, rid: int, keys) -> None:
        """Host offload: the restore of ``keys`` for waiting request ``rid`` ended: the blocks
        reserved for them take their identities (held by it; a key computed meanwhile by another
        request is shared and the duplicate block freed)."""
        for seq in self.waiting:
            if seq.rid == rid:
                break
        else:
            raise RuntimeError(f"request {rid} restored host KV but is not waiting")
        seq.held.extend(self.kv.adopt_many(keys))
        seq.anon -= len(keys)
        self.offload.restore_done(rid, keys)

    def _fully_cached(self, seq: Seq) -> bool:
        """Whether every token of ``seq``'s prompt is in the prefix cache (full blocks only)."""
        if seq.keys is None:
            seq.keys = seq.req.block_keys(self.block_size) if self.caching else []
        keys = seq.keys
        if not keys or len(keys) * self.block_size < seq.prefill_target:
            return False
        return self.kv.match(keys, len(keys))[0] == len(keys)

    def _admit_one(self, batch: Batch, seq: Seq, budget: int, overdraw: bool = False) -> Optional[int]:
        """Admit ``seq`` (the head of ``waiting``, taken off it) into ``batch`` if it fits the
        ``budget``, the KV cache and the engine's admission rule; returns the budget tokens it
        takes, or None (nothing changed). ``overdraw``: a fully cached prompt may take its one
        token from a spent budget."""
        bs = self.block_size
        kv = self.kv
        if seq.keys is None:
            seq.keys = seq.req.block_keys(bs) if self.caching else []
        keys = seq.keys
        hits = in_lru = 0
        #: host offload: the blocks a finished restore left it holding (its GPU hit, then the
        #: restored ones); it reuses no more than those (the reference freezes its cached prefix
        #: to them, blocks cached meanwhile are computed)
        restored = seq.held if self.offload is not None and seq.rid in self.offload.loaded else None
        if keys:
            limit = len(keys) if (seq.transferred or self.REUSE_FULL_HIT) else (seq.prefill_target - 1) // bs
            hits, in_lru = kv.match(keys, limit)
            if hits and self.drop_last_hit and not seq.transferred:
                hits, in_lru = kv.match(keys, hits - 1)
            if restored is not None:
                hits, in_lru = min(hits, len(restored)), 0
        start = seq.computed if seq.transferred else hits * bs
        if start < seq.prefill_target:
            remaining = seq.prefill_target - start
            if budget <= 0 or (not self.chunked and remaining > budget):
                return None
            n = min(remaining, budget)
            is_prefill = True
        else:
            # the whole prompt's KV is here: a transferred one takes a decode step; a full
            # hit where the engine reuses every block (REUSE_FULL_HIT) computes its last token
            # again for the first output token, a one-token step priced as a decode step;
            # on a prefill worker such a prompt is done with nothing to compute: it joins
            # the pass at no cost and goes to the handoff at its end (the reference's trtllm
            # core, measured: a cached 48-token prompt alone takes no time there)
            if self.role == "prefill" and not seq.transferred:
                n, is_prefill = 0, True
            else:
                if not seq.transferred:
                    start = seq.prefill_target - 1
                n = 1
                is_prefill = False
        # a verify round's drafts (a decode step, or the prompt's end with verify_in_prefill)
        verify_end = is_prefill and self.verify_in_prefill and seq.acc is not None and start + n == seq.prefill_target
        width = self.decode_width(seq) - 1 if (not is_prefill or verify_end) else 0
        if not is_prefill and self.decode_budget_tokens(width + 1) > budget and not (overdraw and budget == 0):
            return None
        whole = -(-max(seq.prefill_target, start + n + width) // bs) - hits
        if whole > kv.free_blocks - in_lru:
            return None
        if not self._admissible(seq, hits, in_lru):
            return None
        if self.waiting and self.waiting[0] is seq:
            self.waiting.popleft()
        if restored is not None:
            if len(restored) > hits:  # restored beyond what it may reuse: cached, free
                kv.release(restored[hits:], 0)
            seq.held = restored[:hits]
        elif hits:
            kv.acquire(keys[:hits])
            seq.held = keys[:hits]
        alloc = -(-(start + n + width) // bs) - hits
        kv.allocate(alloc)
        seq.anon = alloc
        if self.offload is not None:
            self.offload.allocated(seq.rid)
        seq.computed = start
        if is_prefill:
            self._register(seq, hits, start + n)
            if n:
                batch.prefill_tokens += n
                batch.prefill_requests += 1
                batch.prefill_start_tokens += start
            if verify_end:
                batch.decode_requests += 1  # priced as a decode step over the prompt too
                batch.decode_context_tokens += seq.prefill_target
            # a prompt with nothing to compute is not one of the pass's prefills, but takes a
            # token of the budget, as the one-token step it is elsewhere (measured: of two
            # cached prompts on a TRT-LLM prefill worker whose budget is spent, one joins)
            used = n if n else 1
        else:
            self._register(seq, hits, seq.prompt_len)
            batch.decode_requests += 1
            batch.decode_context_tokens += start + n
            used = self.decode_budget_tokens(width + 1)
            batch.decode_budget += used
        batch.entries.append((seq, n, is_prefill))
        batch.admitted.append((seq, 0 if seq.transferred else hits * bs))
        self.running.append(seq)
        return used

    def _admissible(self, seq: Seq, hits: int, in_lru: int) -> bool:
        """An admission rule beyond the whole remaining prompt fitting in the free blocks, for
        waiting request ``seq`` with ``hits`` cached prefix blocks (``in_lru`` of them free);
        vLLM has none (TRT-LLM's reservations, :class:`~simkit.engine.scheduler.trtllm.TrtllmScheduler`)."""
        return True
