"""``table`` latency model: pass times interpolated from the user's measured per-pass table
(:class:`TableModel`).

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy.
"""

from __future__ import annotations

from bisect import bisect_right

from simkit.spec import TableLatency
from simkit.engine.pass_table import load_pass_table
from simkit.core.units import S_PER_MS
from simkit.engine.latency.base import _decode_run_by_passes

__all__ = ["TableModel"]


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
