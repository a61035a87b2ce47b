"""``constant`` latency model: fixed pass times (:class:`ConstantModel`).

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from simkit.spec import ConstantLatency
from simkit.core.units import S_PER_MS
from simkit.engine.latency.base import _accumulate

__all__ = ["ConstantModel"]


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
