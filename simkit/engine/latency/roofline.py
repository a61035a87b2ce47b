"""``roofline`` latency model: pass times from the model's architecture and the GPU
(:class:`RooflineModel`), and the per-operator cost it breaks a pass into (:class:`OpCost`).

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from typing import Optional

import attrs

from simkit.spec import RooflineLatency
from simkit.engine.hardware import (PRECISION_BYTES, Calibration, GpuSpec, ModelArch, kv_shard_fraction,
                                    load_calibration, load_gpu, load_model)
from simkit.core.units import S_PER_MS
from simkit.engine.latency.base import _decode_run_by_passes, set_deployment_terms

__all__ = ["OpCost", "RooflineModel"]


class OpCost:
    """One operator class of a pass, summed over layers: ``flops``, ``bytes`` (HBM traffic, per
    GPU), ``compute_s`` and ``memory_s`` (each at its calibrated efficiency) and ``time_s``
    (their max for a roofline op; a fixed time for overheads and communication)."""

    __slots__ = ("name", "flops", "bytes", "compute_s", "memory_s", "time_s")

    def __init__(self, name: str, flops: float = 0.0, nbytes: float = 0.0, compute_s: float = 0.0,
                 memory_s: float = 0.0, time_s: float = 0.0) -> None:
        self.name, self.flops, self.bytes = name, flops, nbytes
        self.compute_s, self.memory_s, self.time_s = compute_s, memory_s, time_s

    @property
    def bound(self) -> str:
        """``compute``, ``memory`` or ``fixed`` (communication, overhead)."""
        if not self.flops and not self.bytes:
            return "fixed"
        return "compute" if self.compute_s >= self.memory_s else "memory"


class RooflineModel:
    """Pass time from the model's architecture and the GPU (one worker of TP GPUs).

    Per pass of ``T = prefill_tokens + decode_requests`` tokens, per GPU (weights and heads
    split over ``t`` = tensor_parallel_size ranks), summed over layers:

    * weight GEMMs (attention projections, dense MLP, shared experts, LM head on the sampled
      tokens): FLOPs ``2 T P / t``, bytes ``P b / t`` for P parameters at ``b`` bytes each;
    * routed experts (MoE): FLOPs ``2 T k P_e / t``; bytes of the experts the pass touches,
      ``E (1 - (1 - k/E)^T)`` of E under uniform routing, times ``P_e b / t``;
    * prefill attention: ``4 * pairs * heads/t * head_dim`` FLOPs (QK^T and PV; ``pairs`` =
      the (query, key) pairs of the causal chunks, sum n_i (p_i + (n_i + 1)/2) for a chunk of
      n_i tokens after p_i cached ones), bytes: the chunk's new KV written;
    * decode attention: ``4 * C * heads/t * head_dim`` FLOPs and ``C`` tokens of KV read, C
      the decode context tokens (MLA: latent attention, ``2 (kv_lora + rope) + 2 kv_lora``
      FLOPs per pair and head, the latent replicated on every rank; sliding-window layers
      attend to at most ``window`` tokens per request);
    * elementwise ops (norms, rotary, activation, residual adds): ``2 T (6 h + 3 I / t)`` bytes;
    * with fp8 or fp4 weights, the quantization of each GEMM's input activations: ``T (2 + b)``
      bytes per input element of the layer's projections (QKV and gate/up read ``h``, O and down
      their TP share), at ``quant_memory_eff`` of the HBM bandwidth;
    * TP all-reduce, two per layer of ``2 T h`` bytes: latency + ``2 (t-1)/t`` bytes / link;
    * fixed overheads: ``layer_overhead_us`` per layer, ``pass_overhead_ms`` per pass, and for
      each request that samples a token (decode requests, plus one when the pass prefills)
      ``sequence_overhead_us`` plus ``request_layer_overhead_us`` per layer;
    * with ``host_output_tokens_per_s`` (opt-in), a pass lasts at least its sampled tokens over
      that rate (a host-side output limit).

    Each roofline op takes ``max(FLOPs / (peak * compute_eff), bytes / (bandwidth *
    memory_eff))`` (Williams, Waterman, Patterson, "Roofline", CACM 2009); ops run one after
    another. Peaks are dense tensor-core TFLOPS at the weights' precision (attention at bf16)
    and the HBM bandwidth (simkit/engine/data/gpus.json); efficiencies and overheads are fitted per GPU
    (simkit/engine/data/calibration.json, benchmarks/calibrate_roofline.py).
    """

    #: the worker passes the prefill (query, key) pair count of each pass
    needs_prefill_attention = True

    def __init__(self, spec: RooflineLatency, arch: Optional[ModelArch] = None,
                 gpu: Optional[GpuSpec] = None, calibration: Optional[Calibration] = None,
                 async_scheduling: bool = False) -> None:
        a = self.arch = arch or load_model(spec.model)
        g = self.gpu = gpu or load_gpu(spec.gpu)
        c = calibration or load_calibration(g.name, spec.backend, a.is_moe, spec.precision, async_scheduling)
        # the LM head's GEMM runs in bf16, at bf16's fitted efficiency
        bf16 = calibration or load_calibration(g.name, spec.backend, a.is_moe, "bf16", async_scheduling)
        overrides = {k: getattr(spec, k) for k in ("layer_overhead_us", "pass_overhead_ms", "sequence_overhead_us",
                                                   "request_layer_overhead_us", "allreduce_latency_us")
                     if getattr(spec, k) is not None}
        c = self.cal = attrs.evolve(c, **overrides) if overrides else c
        t = self.tp = spec.tensor_parallel_size
        self.spec = spec
        self.scale = 1.0 / spec.speedup_ratio
        wb = PRECISION_BYTES[spec.precision]
        kvb = PRECISION_BYTES[spec.kv_precision]
        self.gemm_flops_per_s = g.tflops(spec.precision) * 1e12 * c.gemm_compute_eff
        self.bf16_flops_per_s = g.tflops("bf16") * 1e12 * bf16.gemm_compute_eff
        self.gemm_bytes_per_s = g.hbm_gb_per_s * 1e9 * c.gemm_memory_eff
        self.attn_flops_per_s = g.tflops("bf16") * 1e12 * c.attention_compute_eff
        self.attn_bytes_per_s = g.hbm_gb_per_s * 1e9 * c.attention_memory_eff
        heads = -(-a.num_heads // t)
        moe_layers = a.num_moe_layers
        dense_layers = a.num_layers - moe_layers
        # weight GEMM parameters per rank, summed over layers
        self.dense_params = (a.num_layers * a.attention_params() + dense_layers * a.dense_mlp_params()
                             + moe_layers * a.num_shared_experts * a.expert_params()) / t
        self.weight_bytes_per_param = wb
        self.moe_layers = moe_layers
        self.expert_params = a.expert_params() / t
        self.lm_head_params = a.hidden_size * a.vocab_size / t
        # attention: FLOPs per (query, key) pair and KV bytes per token, per rank, all layers
        if a.is_mla:
            prefill_pair = (2 * (a.qk_nope_head_dim + a.qk_rope_head_dim) + 2 * a.v_head_dim) * heads
            decode_pair = (2 * (a.kv_lora_rank + a.qk_rope_head_dim) + 2 * a.kv_lora_rank) * heads
        else:
            prefill_pair = decode_pair = 4 * a.head_dim * heads
        self.prefill_pair_flops = prefill_pair
        self.decode_pair_flops = decode_pair
        self.kv_bytes_token_layer = a.kv_values_per_token_layer() * kvb * kv_shard_fraction(a, t)
        self.full_layers = a.num_layers - a.num_sliding_layers
        self.sliding_layers = a.num_sliding_layers
        self.window = a.sliding_window
        self.elementwise_bytes_per_token = 2.0 * (6 * a.hidden_size + 3 * a.intermediate_size / t) * a.num_layers
        # quantized weights: each GEMM's input activations are quantized first (read in bf16,
        # written at the weights' precision): the inputs of a layer's projections per rank
        if spec.precision != "bf16":
            h = a.hidden_size
            attn_in = h + (a.num_heads * (a.v_head_dim if a.is_mla else a.head_dim)) / t
            moe_in = (a.experts_per_token + a.num_shared_experts) * (h + a.moe_intermediate_size / t)
            per_token = (a.num_layers * attn_in + dense_layers * (h + a.intermediate_size / t)
                         + moe_layers * moe_in)
            self.quant_s_per_token = per_token * (2 + wb) / (g.hbm_gb_per_s * 1e9 * c.quant_memory_eff)
        else:
            self.quant_s_per_token = 0.0
        # communication: two all-reduces per layer of the hidden states (bf16)
        if t > 1:
            link = g.intra_node_gb_per_s if t <= g.gpus_per_node else g.inter_node_gb_per_s
            self.allreduce_s_per_byte = 2 * (t - 1) / t / (link * 1e9 * c.comm_eff)
            self.allreduce_fixed_s = 2 * a.num_layers * c.allreduce_latency_us * 1e-6
        else:
            self.allreduce_s_per_byte = self.allreduce_fixed_s = 0.0
        self.allreduce_bytes_per_token = 2 * a.num_layers * 2 * a.hidden_size
        self.overhead_s = a.num_layers * c.layer_overhead_us * 1e-6 + c.pass_overhead_ms * S_PER_MS
        self.sequence_overhead_s = (c.sequence_overhead_us + a.num_layers * c.request_layer_overhead_us) * 1e-6
        set_deployment_terms(self, spec, c)  # the frontend's times and the opt-in host limit
        self._token_part: dict[int, float] = {}

    def _roof(self, name: str, flops: float, nbytes: float, flops_per_s: float,
              bytes_per_s: float) -> OpCost:
        cs, ms = flops / flops_per_s, nbytes / bytes_per_s
        return OpCost(name, flops, nbytes, cs, ms, cs if cs > ms else ms)

    def breakdown(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                  prefill_attention_pairs: Optional[int] = None) -> list[OpCost]:
        """The pass's operator classes: ``gemm``, ``experts`` (MoE), ``lm_head``,
        ``elementwise``, ``quantize`` (fp8/fp4 weights), ``attention_prefill``, ``attention_decode``, ``allreduce``,
        ``overhead``; their ``time_s`` sum to :meth:`pass_time_s` (before ``speedup_ratio``).

        ``prefill_attention_pairs`` defaults to one fresh sequence of ``prefill_tokens``:
        n (n + 1) / 2.
        """
        n = prefill_tokens
        tokens = n + decode_requests
        if not tokens:
            return []
        wb = self.weight_bytes_per_param
        ops = [self._roof("gemm", 2.0 * tokens * self.dense_params, self.dense_params * wb,
                          self.gemm_flops_per_s, self.gemm_bytes_per_s)]
        if self.moe_layers:
            a = self.arch
            e, k = a.num_experts, a.experts_per_token
            touched = e * (1.0 - (1.0 - k / e) ** tokens)
            ops.append(self._roof("experts", 2.0 * tokens * k * self.expert_params * self.moe_layers,
                                  touched * self.expert_params * wb * self.moe_layers,
                                  self.gemm_flops_per_s, self.gemm_bytes_per_s))
        sampled = decode_requests + (1 if n else 0)
        ops.append(self._roof("lm_head", 2.0 * sampled * self.lm_head_params, 2.0 * self.lm_head_params,
                              self.bf16_flops_per_s, self.gemm_bytes_per_s))
        ops.append(self._roof("elementwise", 0.0, tokens * self.elementwise_bytes_per_token,
                              self.gemm_flops_per_s, self.gemm_bytes_per_s))
        if self.quant_s_per_token:
            ops.append(OpCost("quantize", time_s=tokens * self.quant_s_per_token))
        if n:
            ops.append(self._roof("attention_prefill", *self._prefill_attention(n, prefill_attention_pairs),
                                  self.attn_flops_per_s, self.attn_bytes_per_s))
        if decode_requests:
            ops.append(self._roof("attention_decode", *self._decode_attention(decode_requests, decode_context_tokens),
                                  self.attn_flops_per_s, self.attn_bytes_per_s))
        if self.tp > 1:
            ops.append(OpCost("allreduce", time_s=self.allreduce_fixed_s
                              + tokens * self.allreduce_bytes_per_token * self.allreduce_s_per_byte))
        ops.append(OpCost("overhead", time_s=self.overhead_s + sampled * self.sequence_overhead_s))
        return ops

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                    prefill_attention_pairs: Optional[int] = None) -> float:
        n = prefill_tokens
        key = n * 65536 + decode_requests if n < (1 << 40) and decode_requests < 65536 else None
        fixed = self._token_part.get(key) if key is not None else None
        if fixed is None:  # everything but attention depends only on the token counts
            fixed = sum(op.time_s for op in self.breakdown(n, decode_requests, 0, 0)
                        if not op.name.startswith("attention"))
            if key is not None and len(self._token_part) < 100_000:
                self._token_part[key] = fixed
        total = fixed
        if n:
            total += self._attention_s(*self._prefill_attention(n, prefill_attention_pairs))
        if decode_requests:
            total += self._attention_s(*self._decode_attention(decode_requests, decode_context_tokens))
        if self.min_s_per_token:  # the host's output rate (an opt-in limit)
            floor = (decode_requests + (1 if n else 0)) * self.min_s_per_token
            if total < floor:
                total = floor
        return total * self.scale

    def _prefill_attention(self, n: int, pairs: Optional[int]) -> tuple[float, float]:
        """FLOPs and bytes of the prefill attention of ``n`` tokens and ``pairs`` pairs."""
        pairs = n * (n + 1) / 2 if pairs is None else pairs
        layer_pairs = self.full_layers * pairs
        if self.sliding_layers:
            layer_pairs += self.sliding_layers * min(pairs, n * self.window)
        return layer_pairs * self.prefill_pair_flops, 2.0 * n * self.kv_bytes_token_layer * self.arch.num_layers

    def _decode_attention(self, requests: int, context_tokens: int) -> tuple[float, float]:
        """FLOPs and bytes of the decode attention of ``requests`` over ``context_tokens``."""
        ctx = self.full_layers * context_tokens
        if self.sliding_layers:
            ctx += self.sliding_layers * min(context_tokens, requests * self.window)
        return ctx * self.decode_pair_flops, ctx * self.kv_bytes_token_layer

    def _attention_s(self, flops: float, nbytes: float) -> float:
        cs, ms = flops / self.attn_flops_per_s, nbytes / self.attn_bytes_per_s
        return cs if cs > ms else ms

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        return _decode_run_by_passes(self.pass_time_s, decode_requests, first_context_tokens, passes, start_at)
