"""Engine-step latency models: how long one forward pass takes on one worker.

A pass is described by three numbers: ``prefill_tokens`` (prompt tokens computed in the pass,
summed over its prefill chunks), ``decode_requests`` (requests generating one token each) and
``decode_context_tokens`` (the sum over those requests of their KV length after the pass:
prompt + tokens generated so far). Models return seconds.

Layer L2: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from bisect import bisect_right
from typing import Optional, Protocol

import attrs
import numpy as np

from simkit.spec import (AicLatency, ConstantLatency, LatencySpec, PolynomialLatency, RooflineLatency,
                           TableLatency)
from simkit.engine.hardware import (PRECISION_BYTES, Calibration, GpuSpec, ModelArch, kv_shard_fraction,
                             load_calibration, load_gpu, load_model, load_pass_table)
from simkit.core.units import S_PER_MS

__all__ = ["LatencyModel", "PolynomialModel", "ConstantModel", "RooflineModel", "TableModel", "OpCost",
           "make_latency_model"]


class LatencyModel(Protocol):
    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        """Duration of one forward pass in seconds (> 0 for any non-empty pass). A model with
        ``needs_prefill_attention = True`` also takes the pass's prefill (query, key) pair count
        as a fourth argument (the worker computes it only for such models)."""
        ...

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        """Durations and end times (s) of ``passes`` consecutive pure-decode passes of
        ``decode_requests`` requests whose context grows by ``decode_requests`` tokens a pass,
        the first starting at ``start_at``. Duration i equals ``pass_time_s(0,
        decode_requests, first_context_tokens + i * decode_requests)`` bit for bit, and end i
        is end i-1 plus duration i, the float SimPy reaches stepping pass by pass."""
        ...

    def priced_prefill_tokens(self, prefill_tokens: int, prefill_requests: int, prefill_start_tokens: int) -> int:
        """The prefill tokens the model prices for a pass whose ``prefill_requests`` requests
        compute ``prefill_tokens`` prompt tokens in all, having ``prefill_start_tokens`` before
        it (computed or cached, summed); the pass's own count unless the model says otherwise.
        Optional: a model without it is priced on the pass's own count."""
        ...


def _accumulate(start_at: float, durations: list[float]) -> list[float]:
    ends = []
    t = start_at
    for dt in durations:
        t = t + dt
        ends.append(t)
    return ends


def _decode_run_by_passes(pass_time_s, decode_requests: int, first_context_tokens: int, passes: int,
                          start_at: float) -> tuple[list[float], list[float]]:
    """``decode_run`` by calling ``pass_time_s`` once per pass: equal to it by construction."""
    dts = [pass_time_s(0, decode_requests, first_context_tokens + i * decode_requests) for i in range(passes)]
    return dts, _accumulate(start_at, dts)


class PolynomialModel:
    """The reference mocker's default per-pass latency (REFERENCE.md section 4).

    Measured to four decimals on ai-dynamo-runtime 1.6.1; it is tied to no model or GPU::

        P(n)    = 4.209989e-07 n^2 + 1.518344e-02 n + 16.50142               ms
        D(a, C) = max(1, -25.74 u^2 + 54.01 u + 5.74),  u = min(a / C, 1)   ms

    where n is the pass's prefill tokens, a its decode context tokens and
    C = ``num_gpu_blocks`` * ``block_size`` the worker's KV capacity in tokens. A pass costs
    P(n) if it has prefill tokens plus D(a, C) if it has decode requests, divided by
    ``speedup_ratio``. Examples: P(1000) = 32.106 ms, P(8192) = 169.137 ms, D(0, C) = 5.74 ms.


    With ``prefill_tokens_from_batch_means`` the prefill of a pass of k prefilling requests
    is priced as the reference prices it: n = k * (floor(E / k) - floor(S / k)), S the sum of
    their prompt positions before the pass (cached prefix included) and E after it; the
    integer means drop or add up to k - 1 tokens against the true count E - S (measured:
    prompts of 898 and 7543 tokens with 512 cached each cost P(7416), not P(7417)).
    """

    def __init__(self, spec: PolynomialLatency, kv_capacity_tokens: int) -> None:
        self.capacity = float(kv_capacity_tokens)
        self.scale_s = S_PER_MS / spec.speedup_ratio
        self.batch_means = spec.prefill_tokens_from_batch_means

    def priced_prefill_tokens(self, prefill_tokens: int, prefill_requests: int, prefill_start_tokens: int) -> int:
        if not self.batch_means or prefill_requests < 2:
            return prefill_tokens
        k = prefill_requests
        return k * ((prefill_start_tokens + prefill_tokens) // k - prefill_start_tokens // k)

    @staticmethod
    def prefill_ms(n: int) -> float:
        """P(n) in milliseconds."""
        return 4.209989e-07 * n * n + 1.518344e-02 * n + 16.50142

    def decode_ms(self, a: int) -> float:
        """D(a, C) in milliseconds."""
        u = min(a / self.capacity, 1.0)
        return max(1.0, -25.74 * u * u + 54.01 * u + 5.74)

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        # the same IEEE operations as pass_time_s, in the same order
        cap, scale = self.capacity, self.scale_s
        if passes <= 32:  # short runs: plain floats beat numpy's per-call overhead
            dts = []
            a = first_context_tokens
            for _ in range(passes):
                u = a / cap
                if u > 1.0:
                    u = 1.0
                ms = -25.74 * u * u + 54.01 * u + 5.74
                dts.append((ms if ms > 1.0 else 1.0) * scale)
                a += decode_requests
            return dts, _accumulate(start_at, dts)
        a = first_context_tokens + decode_requests * np.arange(passes, dtype=np.int64)
        u = np.minimum(a / cap, 1.0)
        arr = np.maximum(1.0, -25.74 * u * u + 54.01 * u + 5.74) * scale
        # np.add.accumulate adds left to right, as SimPy advances time pass by pass
        return arr.tolist(), np.add.accumulate(np.concatenate(([start_at], arr)))[1:].tolist()

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        ms = 0.0
        if prefill_tokens:
            ms += 4.209989e-07 * prefill_tokens * prefill_tokens + 1.518344e-02 * prefill_tokens + 16.50142
        if decode_requests:
            u = min(decode_context_tokens / self.capacity, 1.0)
            ms += max(1.0, -25.74 * u * u + 54.01 * u + 5.74)
        return ms * self.scale_s


class ConstantModel:
    """Fixed pass times for tests and teaching: ``prefill_ms`` if the pass computes any prompt
    tokens, plus ``decode_ms`` if it has decode requests (the reference's constant model)."""

    def __init__(self, spec: ConstantLatency) -> None:
        self.prefill_s = spec.prefill_ms * S_PER_MS / spec.speedup_ratio
        self.decode_s = spec.decode_ms * S_PER_MS / spec.speedup_ratio

    def priced_prefill_tokens(self, prefill_tokens: int, prefill_requests: int, prefill_start_tokens: int) -> int:
        return prefill_tokens

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        return (self.prefill_s if prefill_tokens else 0.0) + (self.decode_s if decode_requests else 0.0)

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        dts = [0.0 + self.decode_s] * passes
        return dts, _accumulate(start_at, dts)


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
    * TP all-reduce, two per layer of ``2 T h`` bytes: latency + ``2 (t-1)/t`` bytes / link;
    * fixed overheads: ``layer_overhead_us`` per layer, ``pass_overhead_ms`` per pass, and for
      each request that samples a token (decode requests, plus one when the pass prefills)
      ``sequence_overhead_us`` plus ``request_layer_overhead_us`` per layer.

    Each roofline op takes ``max(FLOPs / (peak * compute_eff), bytes / (bandwidth *
    memory_eff))`` (Williams, Waterman, Patterson, "Roofline", CACM 2009); ops run one after
    another. Peaks are dense tensor-core TFLOPS at the weights' precision (attention at bf16)
    and the HBM bandwidth (simkit/data/gpus.json); efficiencies and overheads are fitted per GPU
    (simkit/data/calibration.json, benchmarks/calibrate_roofline.py).
    """

    #: the worker passes the prefill (query, key) pair count of each pass
    needs_prefill_attention = True

    def __init__(self, spec: RooflineLatency, arch: Optional[ModelArch] = None,
                 gpu: Optional[GpuSpec] = None, calibration: Optional[Calibration] = None) -> None:
        a = self.arch = arch or load_model(spec.model)
        g = self.gpu = gpu or load_gpu(spec.gpu)
        c = calibration or load_calibration(g.name, spec.backend, a.is_moe)
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
        self.bf16_flops_per_s = g.tflops("bf16") * 1e12 * c.gemm_compute_eff
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
        self._token_part: dict[int, float] = {}

    def _roof(self, name: str, flops: float, nbytes: float, flops_per_s: float,
              bytes_per_s: float) -> OpCost:
        cs, ms = flops / flops_per_s, nbytes / bytes_per_s
        return OpCost(name, flops, nbytes, cs, ms, cs if cs > ms else ms)

    def breakdown(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int,
                  prefill_attention_pairs: Optional[int] = None) -> list[OpCost]:
        """The pass's operator classes: ``gemm``, ``experts`` (MoE), ``lm_head``,
        ``elementwise``, ``attention_prefill``, ``attention_decode``, ``allreduce``,
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


def _interp(x: float, xs: tuple, ys) -> float:
    """Piecewise-linear interpolation on sorted ``xs``, extended linearly past both ends
    (np.interp would clamp: a pass bigger than the table must cost more)."""
    if x <= xs[0]:
        i = 0
    elif x >= xs[-1]:
        i = len(xs) - 2
    else:
        i = bisect_right(xs, x) - 1
    x0, x1 = xs[i], xs[i + 1]
    return ys[i] + (ys[i + 1] - ys[i]) * (x - x0) / (x1 - x0)


class TableModel:
    """Pass times interpolated from the user's measured per-pass table (``TableLatency``).

    A pass costs P(n) if it has prefill tokens plus D(r, c) if it has decode requests (the
    reference's split of a mixed pass): P is piecewise linear in the prefill tokens ``n`` over
    the table's prefill-only rows; D is bilinear over the decode-only grid of decode requests
    ``r`` x context tokens per request ``c`` (= decode_context_tokens / r). Both extend linearly
    past the table's range; times below 0.001 ms are raised to it.
    """

    def __init__(self, spec: TableLatency) -> None:
        t = self.table = load_pass_table(spec.path)
        self.scale_s = S_PER_MS / spec.speedup_ratio
        # D(r, c) rows: for each r in the grid, its ms over c
        self._rows = [tuple(row) for row in t.decode_ms]

    def prefill_ms(self, n: int) -> float:
        t = self.table
        return max(1e-3, _interp(n, t.prefill_tokens, t.prefill_ms))

    def decode_ms(self, r: int, context_tokens: int) -> float:
        t = self.table
        c = context_tokens / r
        per_r = [_interp(c, t.decode_context_per_request, row) for row in self._rows]
        return max(1e-3, _interp(r, t.decode_requests, per_r))

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        ms = 0.0
        if prefill_tokens:
            ms += self.prefill_ms(prefill_tokens)
        if decode_requests:
            ms += self.decode_ms(decode_requests, decode_context_tokens)
        return ms * self.scale_s

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        return _decode_run_by_passes(self.pass_time_s, decode_requests, first_context_tokens, passes, start_at)


def make_latency_model(spec: LatencySpec, kv_capacity_tokens: int) -> LatencyModel:
    """The latency model for ``spec`` on a worker with ``kv_capacity_tokens`` of KV cache."""
    if isinstance(spec, PolynomialLatency):
        return PolynomialModel(spec, kv_capacity_tokens)
    if isinstance(spec, ConstantLatency):
        return ConstantModel(spec)
    if isinstance(spec, RooflineLatency):
        return RooflineModel(spec)
    if isinstance(spec, TableLatency):
        return TableModel(spec)
    if isinstance(spec, AicLatency):
        from simkit.engine.latency.aic import AicModel  # the optional aiconfigurator-core, only when asked for

        return AicModel(spec)
    raise TypeError(f"no latency model for {spec!r}")
