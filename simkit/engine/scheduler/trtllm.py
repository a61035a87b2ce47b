"""TRT-LLM-like batch formation for one worker (``backend: trtllm``): vLLM's pass
(:mod:`.vllm`) under TRT-LLM's GUARANTEED_NO_EVICT capacity scheduler, as the reference models
it, and TRT-LLM's batch waiting (:class:`simkit.spec.TrtllmSpec`).

* Enqueue (:meth:`TrtllmScheduler.fits_ever`): a prompt must leave room in the whole cache,
  and the output is cut to the room left.
* Admission (:meth:`TrtllmScheduler._admissible`): besides vLLM's rule (the whole remaining
  prompt fits in free blocks), the request's whole prompt + output must fit in the free blocks
  left after reserving what every running request may still need.
* Never preempts (:attr:`TrtllmScheduler.NO_EVICT`): the reservations guarantee every running
  request its blocks.
* Batch waiting (:meth:`TrtllmScheduler._hold_context`): with ``batch_wait_timeout_iters`` or
  ``batch_wait_max_tokens_ratio`` set, a pass that would run context requests beside
  generation requests holds the context requests back, up to that many passes in a row, until
  they and the decodes reach that share of ``max_num_batched_tokens``.

Part of :mod:`simkit.engine`: pure, no SimPy.
"""

from __future__ import annotations

from simkit.spec import PoolSpec
from simkit.engine.scheduler.base import Seq
from simkit.engine.scheduler.vllm import VllmScheduler

__all__ = ["TrtllmScheduler"]


class TrtllmScheduler(VllmScheduler):
    """:class:`~simkit.engine.scheduler.vllm.VllmScheduler` with TRT-LLM's capacity rules and
    batch waiting (module docstring)."""

    #: GUARANTEED_NO_EVICT: admit against whole-request reservations, never preempt
    NO_EVICT = True
    #: TRT-LLM's KV cache reuse takes every cached block of a prompt and computes only its last
    #: token again (measured on the reference's trtllm core)
    REUSE_FULL_HIT = True
    #: TRT-LLM's MTP keeps every matched block (the reference's trtllm core: measured)
    EAGLE_DROPS_LAST_HIT = False

    def __init__(self, spec: PoolSpec, role: str) -> None:
        super().__init__(spec, role)
        #: TRT-LLM batch waiting (:class:`simkit.spec.TrtllmSpec`): passes held so far, limits
        self.batch_wait_count = 0
        self.batch_wait_iters = spec.trtllm.batch_wait_timeout_iters
        self.batch_wait_tokens = spec.trtllm.batch_wait_max_tokens_ratio * spec.max_num_batched_tokens
        self.batch_waiting = self.batch_wait_iters > 0 or self.batch_wait_tokens > 0

    def fits_ever(self, seq: Seq) -> bool:
        """Whether the request can ever be served here: prompt + output is within
        ``max_model_len``; the prompt leaves room in the whole cache; and without chunked
        prefill the prompt + (cut) output fits in the token budget. Cuts ``seq.output_len``
        to the room the prompt leaves (except on a prefill worker)."""
        if not self._within_max_model_len(seq):
            return False
        # TRT-LLM's enqueue normalisation, as the reference applies it: a prompt must leave
        # room in the whole cache, and the output is cut to the room left (measured: a
        # 1200-token prompt asking 200 tokens of a 1280-token cache generates 80)
        room = self.kv.capacity * self.block_size - seq.prompt_len
        if room <= 0:
            return False
        if self.role != "prefill" and seq.output_len > room:
            seq.output_len = room
        return self.chunked or seq.prompt_len + seq.output_len <= self.budget

    def _admissible(self, seq: Seq, hits: int, in_lru: int) -> bool:
        """Whether the whole of ``seq`` (:meth:`_final_tokens`, less its ``hits`` cached
        blocks) fits in the free blocks (less ``in_lru``, the cached prefix's free ones) left
        after :meth:`_reserved_blocks`."""
        need = -(-self._final_tokens(seq) // self.block_size) - hits
        return need <= self.kv.free_blocks - in_lru - self._reserved_blocks()

    def _hold_context(self) -> bool:
        """TRT-LLM batch waiting: whether this pass holds its context requests back (and counts
        it), for a pass that would run context and generation requests; never without batch
        waiting configured.

        The context requests are the running prompts still prefilling and the waiting requests
        the pass would admit by ``max_num_seqs`` and token budget (their KV room is not
        checked); each counts its whole prompt, as TRT-LLM's ``_waiting_requests`` does.
        """
        if not self.batch_waiting:
            return False
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

    def _final_tokens(self, seq: Seq) -> int:
        """KV tokens ``seq`` holds when it ends here: its prompt on a prefill worker, else
        prompt + output (TRT-LLM reserves the last token's slot too)."""
        return seq.prompt_len if self.role == "prefill" else seq.prompt_len + seq.output_len

    def _reserved_blocks(self) -> int:
        """Blocks running requests may still allocate before they end (no-evict admission)."""
        bs = self.block_size
        return sum(max(0, -(-self._final_tokens(s) // bs) - len(s.held) - s.anon) for s in self.running)
