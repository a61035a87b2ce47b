"""What every latency model shares: the :class:`LatencyModel` protocol the worker calls, and
the helpers for a model's ``decode_run`` (:func:`_decode_run_by_passes` for a model with no
faster way, :func:`_accumulate` for the end times).

A pass is described by three numbers: ``prefill_tokens`` (prompt tokens computed in the pass,
summed over its prefill chunks), ``decode_requests`` (requests generating one token each) and
``decode_context_tokens`` (the sum over those requests of their KV length after the pass:
prompt + tokens generated so far). Models return seconds.

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from typing import Protocol

from simkit.core.units import S_PER_MS

__all__ = ["LatencyModel", "set_deployment_terms"]


def set_deployment_terms(model, spec, cal) -> None:
    """Set on ``model`` (a roofline or aic model) the terms of its deployment ``spec``
    (:class:`simkit.spec.RooflineLatency` or ``AicLatency``) that lie outside the GPU's passes:
    ``dispatch_overhead_s`` and ``first_token_overhead_s`` (the frontend's times, s: the spec's,
    else those fitted for the GPU and backend in ``cal``, a
    :class:`simkit.engine.hardware.Calibration`; applied by the cluster, not to passes, so
    ``speedup_ratio`` does not scale them), ``dispatch_jitter_s`` and ``min_s_per_token``
    (1 / ``host_output_tokens_per_s``, 0 without that opt-in limit)."""
    model.dispatch_overhead_s = (cal.dispatch_overhead_ms if spec.dispatch_overhead_ms is None
                                 else spec.dispatch_overhead_ms) * S_PER_MS
    model.first_token_overhead_s = (cal.first_token_overhead_ms if spec.first_token_overhead_ms is None
                                    else spec.first_token_overhead_ms) * S_PER_MS
    model.dispatch_jitter_s = spec.dispatch_jitter_ms * S_PER_MS
    rate = spec.host_output_tokens_per_s
    model.min_s_per_token = 1.0 / rate if rate else 0.0


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
