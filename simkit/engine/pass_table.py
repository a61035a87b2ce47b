"""A measured per-pass latency table (the ``table`` latency model, ``TableLatency``): a CSV
read by :func:`load_pass_table` into a :class:`PassTable`, split for interpolation
(:mod:`simkit.engine.latency.table`).

Part of :mod:`simkit.engine`: reads only the CSV a scenario names (no simulation).
"""

from __future__ import annotations

from attrs import frozen

from simkit.core.files import NotUtf8, read_text
from simkit.engine.hardware import HardwareError

__all__ = ["PassTable", "load_pass_table"]


@frozen
class PassTable:
    """A measured per-pass latency table (``TableLatency``), split for interpolation.

    ``prefill_tokens``/``prefill_ms``: the prefill-only rows, sorted; ``decode_requests`` x
    ``decode_context_per_request`` grid (sorted axes) with ``decode_ms[i][j]``.
    """

    prefill_tokens: tuple
    prefill_ms: tuple
    decode_requests: tuple
    decode_context_per_request: tuple
    decode_ms: tuple


def load_pass_table(path: str) -> PassTable:
    """Read a per-pass CSV with header ``prefill_tokens,decode_requests,decode_context_tokens,pass_ms``.

    Rows with ``decode_requests == 0`` are prefill-only passes (at least two distinct
    ``prefill_tokens``); rows with ``prefill_tokens == 0`` are decode-only passes and must form
    a full grid of ``decode_requests`` x context per request (``decode_context_tokens /
    decode_requests``), at least 2 x 2. Mixed rows are not used.

    Raises:
        HardwareError: unreadable file, bad header or value (``PATH:LINE: reason``), or rows
            that do not form the grids above.
    """
    import csv
    import io

    want = ["prefill_tokens", "decode_requests", "decode_context_tokens", "pass_ms"]
    try:
        rows = list(csv.reader(io.StringIO(read_text(path, encoding="utf-8-sig"), newline="")))
    except NotUtf8 as exc:
        raise HardwareError(f"{exc}; expected a pass table CSV") from None
    except (OSError, csv.Error) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise HardwareError(f"cannot read pass table {path}: {reason}") from None
    if not rows or [c.strip() for c in rows[0]] != want:
        raise HardwareError(f"{path}:1: expected the header {','.join(want)}")
    prefill: dict[int, float] = {}
    decode: dict[tuple[int, float], float] = {}
    for line, row in enumerate(rows[1:], start=2):
        if not row or not "".join(row).strip():
            continue
        try:
            n, r, c = (int(v) for v in row[:3])
            ms = float(row[3])
            if len(row) != 4 or min(n, r, c) < 0 or not ms > 0 or ms == float("inf"):
                raise ValueError
        except (ValueError, IndexError):
            raise HardwareError(f"{path}:{line}: expected three integers >= 0 and a time > 0 in ms, "
                                f"got {','.join(row)!r}") from None
        table, key = (prefill, n) if r == 0 and n > 0 else (decode, (r, c / r)) if n == 0 and r > 0 else (None, None)
        if table is None:
            continue
        if key in table:
            raise HardwareError(f"{path}:{line}: a second row for the same pass shape "
                                f"({n},{r},{c}); each shape needs exactly one time")
        table[key] = ms
    if len(prefill) < 2:
        raise HardwareError(f"{path}: needs prefill-only rows (decode_requests 0) at >= 2 prefill_tokens values")
    reqs = sorted({k[0] for k in decode})
    ctxs = sorted({k[1] for k in decode})
    if len(reqs) < 2 or len(ctxs) < 2 or len(decode) != len(reqs) * len(ctxs):
        raise HardwareError(f"{path}: decode-only rows must form a full grid of >= 2 decode_requests x "
                            f">= 2 context tokens per request (got {len(decode)} rows, {len(reqs)} x {len(ctxs)})")
    ns = sorted(prefill)
    return PassTable(tuple(ns), tuple(prefill[n] for n in ns), tuple(reqs), tuple(ctxs),
                     tuple(tuple(decode[(r, c)] for c in ctxs) for r in reqs))
