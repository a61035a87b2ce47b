"""``polynomial`` latency model: the reference mocker's default per-pass latency, fixed
polynomials in the pass shape (:class:`PolynomialModel`).

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

import numpy as np

from simkit.spec import PolynomialLatency
from simkit.core.units import S_PER_MS
from simkit.engine.latency.base import _accumulate

__all__ = ["PolynomialModel"]


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
