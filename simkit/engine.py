"""Engine-step latency models: how long one forward pass takes on one worker.

A pass is described by three numbers: ``prefill_tokens`` (prompt tokens computed in the pass,
summed over its prefill chunks), ``decode_requests`` (requests generating one token each) and
``decode_context_tokens`` (the sum over those requests of their KV length after the pass:
prompt + tokens generated so far). Models return seconds.

Layer L2: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from simkit.config import ConstantLatency, LatencySpec, PolynomialLatency
from simkit.units import S_PER_MS

__all__ = ["LatencyModel", "PolynomialModel", "ConstantModel", "make_latency_model"]


class LatencyModel(Protocol):
    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        """Duration of one forward pass in seconds (> 0 for any non-empty pass)."""
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
        it (computed or cached, summed); the pass's own count unless the model says otherwise."""
        ...


def _accumulate(start_at: float, durations: list[float]) -> list[float]:
    ends = []
    t = start_at
    for dt in durations:
        t = t + dt
        ends.append(t)
    return ends


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


def make_latency_model(spec: LatencySpec, kv_capacity_tokens: int) -> LatencyModel:
    """The latency model for ``spec`` on a worker with ``kv_capacity_tokens`` of KV cache."""
    if isinstance(spec, PolynomialLatency):
        return PolynomialModel(spec, kv_capacity_tokens)
    if isinstance(spec, ConstantLatency):
        return ConstantModel(spec)
    raise TypeError(f"no latency model for {spec!r}")
