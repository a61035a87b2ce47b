"""Speculative decoding priced by the roofline model: :class:`SpeculativeRoofline` wraps a
:class:`~simkit.engine.latency.roofline.RooflineModel` so that each decode request of a pass
is a verify round of k + 1 tokens, and adds the draft's own cost.

A verify round of a request with context C checks its last token and k drafts in one forward
pass (Leviathan, Kalman, Matias, "Fast Inference from Transformers via Speculative Decoding",
ICML 2023; Chen et al., "Accelerating LLM decoding with speculative sampling", 2023): the
weight GEMMs, elementwise ops, all-reduces and the LM head see (k + 1) tokens per request,
the attention computes (k + 1) queries against the context (FLOPs x (k + 1)) but reads the
context's KV once, and the k draft positions write their KV. Priced as the base model's pass
with the k extra tokens per request as prompt-like tokens (k C + k (k + 1) / 2 extra causal
(query, key) pairs), the LM head sampling every position, and one per-request overhead per
request. The draft's cost, per round of d decode requests (``method``):

* ``mtp`` (DeepSeek-V3's multi-token prediction, Liu et al. 2024) and ``eagle`` (Li et al.,
  "EAGLE", ICML 2024): k draft steps, each one decoder layer of the target's size over d
  tokens (its weights read once per step, its attention over the context) plus the LM head;
* ``draft_model``: k decode passes of the draft model over the same requests, and its
  prefill of every prompt chunk (the draft model keeps its own KV);
* ``ngram`` (prompt lookup): nothing.

The polynomial, constant and table models are not wrapped: the reference prices a verify round
as a plain decode step over the accepted context (measured on ai-dynamo-runtime 1.6.1, no
draft cost), and so does simkit with them.

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from typing import Optional

import attrs

from simkit.spec import SpeculativeSpec
from simkit.engine.latency.base import _decode_run_by_passes

__all__ = ["SpeculativeRoofline"]


class SpeculativeRoofline:
    """``base`` (a roofline model) with every decode request a verify round of ``spec``'s
    k + 1 tokens, plus the draft's cost (module docstring)."""

    needs_prefill_attention = True

    def __init__(self, base, spec: SpeculativeSpec, draft=None) -> None:
        self.base = base
        self.k = spec.num_speculative_tokens
        self.method = spec.method
        #: draft_model: a roofline model of the draft model on the same GPUs
        self.draft = draft
        # one decoder layer of the target, for an MTP or EAGLE draft step (weights per rank)
        a = base.arch
        self.layer_params = base.dense_params / a.num_layers

    # the base model's description, for ``simkit step``
    arch = property(lambda self: self.base.arch)
    gpu = property(lambda self: self.base.gpu)
    spec = property(lambda self: self.base.spec)
    tp = property(lambda self: self.base.tp)

    def breakdown(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                  prefill_attention_pairs: Optional[int] = None) -> list:
        """The verify pass's operator classes (the base model's, over the widened pass, with
        the LM head sampling every verified position) and the draft's (``draft``); their
        ``time_s`` sum to :meth:`pass_time_s` (before ``speedup_ratio``)."""
        from simkit.engine.latency.roofline import OpCost

        b = self.base
        n, d, k = prefill_tokens, decode_requests, self.k
        if not d:
            ops = b.breakdown(n, 0, 0, prefill_attention_pairs)
        else:
            pairs = n * (n + 1) // 2 if prefill_attention_pairs is None else prefill_attention_pairs
            pairs += k * decode_context_tokens + d * k * (k + 1) // 2
            ops = b.breakdown(n + d * k, d, decode_context_tokens, pairs)
            sampled = d * (k + 1) + (1 if n else 0)
            for i, op in enumerate(ops):
                if op.name == "lm_head":
                    ops[i] = b._roof("lm_head", 2.0 * sampled * b.lm_head_params, 2.0 * b.lm_head_params,
                                     b.bf16_flops_per_s, b.gemm_bytes_per_s)
                elif op.name == "overhead" and not n:
                    ops[i] = OpCost("overhead", time_s=op.time_s - b.sequence_overhead_s)
        draft = self.draft_s(n, d, decode_context_tokens, prefill_attention_pairs)
        if draft:
            ops.append(OpCost("draft", time_s=draft))
        return ops

    def _draft_step_s(self, requests: int, context_tokens: int) -> float:
        """One MTP / EAGLE draft step over ``requests`` tokens: a layer and the LM head."""
        b = self.base
        wb = b.weight_bytes_per_param
        layer = b._roof("draft_layer", 2.0 * requests * self.layer_params, self.layer_params * wb,
                        b.gemm_flops_per_s, b.gemm_bytes_per_s).time_s
        head = b._roof("draft_head", 2.0 * requests * b.lm_head_params, 2.0 * b.lm_head_params,
                       b.bf16_flops_per_s, b.gemm_bytes_per_s).time_s
        attention = b._attention_s(context_tokens * b.decode_pair_flops, context_tokens * b.kv_bytes_token_layer)
        return layer + head + attention + b.cal.layer_overhead_us * 1e-6

    def draft_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                prefill_attention_pairs: Optional[int] = None) -> float:
        """The draft's cost in the pass (seconds, before ``speedup_ratio``)."""
        if self.method == "ngram":
            return 0.0
        if self.method == "draft_model":
            d = self.draft
            total = 0.0
            if prefill_tokens:
                total += d.pass_time_s(prefill_tokens, 0, 0, prefill_attention_pairs) / d.scale
            if decode_requests:
                total += self.k * d.pass_time_s(0, decode_requests, decode_context_tokens) / d.scale
            return total
        if not decode_requests:
            return 0.0
        return self.k * self._draft_step_s(decode_requests, decode_context_tokens)

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                    prefill_attention_pairs: Optional[int] = None) -> float:
        b = self.base
        n, d, k = prefill_tokens, decode_requests, self.k
        if not d:
            return b.pass_time_s(n, 0, 0, prefill_attention_pairs) + self.draft_s(n, 0, 0, prefill_attention_pairs) * b.scale
        pairs = n * (n + 1) // 2 if prefill_attention_pairs is None else prefill_attention_pairs
        pairs += k * decode_context_tokens + d * k * (k + 1) // 2  # the drafts' queries
        total = b.pass_time_s(n + d * k, d, decode_context_tokens, pairs)
        # the LM head samples every verified position: d (k + 1) (+ 1 for a prompt's end),
        # where the base counted d + 1 (it took the drafts for prompt tokens)
        sampled = d * (k + 1) + (1 if n else 0)
        wb = 2.0 * b.lm_head_params
        head = b._roof("lm_head", 2.0 * sampled * b.lm_head_params, wb, b.bf16_flops_per_s, b.gemm_bytes_per_s)
        base_head = b._roof("lm_head", 2.0 * (d + 1) * b.lm_head_params, wb, b.bf16_flops_per_s, b.gemm_bytes_per_s)
        extra = head.time_s - base_head.time_s
        if not n:  # one per-request overhead per request, not one more for the drafts
            extra -= b.sequence_overhead_s
        extra += self.draft_s(n, d, decode_context_tokens, prefill_attention_pairs)
        return total + extra * b.scale

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        return _decode_run_by_passes(self.pass_time_s, decode_requests, first_context_tokens, passes, start_at)


def draft_spec(target_spec, draft_model: str):
    """The roofline spec of ``draft_model`` on ``target_spec``'s GPUs, TP and precision."""
    return attrs.evolve(target_spec, model=draft_model)
