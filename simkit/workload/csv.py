"""The CSV trace formats, one reader for both: ``format: azure`` (the Azure LLM inference
trace, datetimes) and ``format: csv`` (a plain header with milliseconds). They differ only in
their columns and how the time column reads; a new CSV dialect belongs here too.

The standard library's ``csv`` is not used (imports are absolute: ``import csv`` anywhere,
this package included, still gets it).
"""

from __future__ import annotations

import datetime
import math
import re

from simkit.spec import TraceWorkload
from simkit.workload.common import MAX_TOKENS, Row, TraceError, read_lines, shown

#: an integer cell: ASCII digits only (``str.isdigit`` also accepts superscripts such as ``²``)
_DIGITS = re.compile(r"[0-9]+")

__all__ = ["azure_rows", "csv_rows"]


def _azure_ms(text: str, path: str, line: int) -> tuple[int, float]:
    """(day ordinal, ms since that day's midnight) of an Azure ``TIMESTAMP``."""
    try:
        if not text.isascii():  # int() and float() read any script's digits ('4٧' as 47)
            raise ValueError
        date_part, _, time_part = text.partition(" ")
        day = datetime.date.fromisoformat(date_part).toordinal()
        hh, mm, ss = time_part.split(":")
        seconds = int(hh) * 3600 + int(mm) * 60 + float(ss)
        if not 0 <= seconds < 86401:
            raise ValueError
    except ValueError:
        raise TraceError(path, line, f"TIMESTAMP {text!r} is not a date and time like "
                                     "'2023-11-16 18:15:46.6805900'") from None
    return day, seconds * 1000.0


def _header_rows(spec: TraceWorkload, azure: bool):
    """CSV with a header. Azure LLM inference trace: ``TIMESTAMP`` (a datetime such as
    ``2023-11-16 18:15:46.6805900``), ``ContextTokens``, ``GeneratedTokens``. Plain CSV:
    ``arrival_ms``, ``input_length``, ``output_length``. No prefix information: prompts share
    nothing."""
    path = spec.path
    lines = read_lines(path)
    first = next(lines, None)
    if first is None:
        return
    header = [h.strip() for h in first[1].split(",")]
    want = (["TIMESTAMP", "ContextTokens", "GeneratedTokens"] if azure
            else ["arrival_ms", "input_length", "output_length"])
    if sorted(header) != sorted(want):
        raise TraceError(path, first[0], f"CSV header is {','.join(header)!r}; "
                                         f"expected the columns {','.join(want)}")
    time_col, in_col, out_col = (header.index(name) for name in want)
    day0 = None
    for line, text in lines:
        cells = [c.strip() for c in text.split(",")]
        if len(cells) != len(header):
            raise TraceError(path, line, f"{len(cells)} columns; expected {len(header)} ({','.join(header)})")
        if azure:
            day, ms = _azure_ms(cells[time_col], path, line)
            day0 = day if day0 is None else day0
            ts = (day - day0) * 86_400_000.0 + ms
        else:
            try:
                if not cells[time_col].isascii():  # float() reads any script's digits
                    raise ValueError
                ts = float(cells[time_col])
                if not (math.isfinite(ts) and 0 <= ts <= 1e15):
                    raise ValueError
            except ValueError:
                raise TraceError(path, line, f"arrival_ms is {shown(cells[time_col])}; expected milliseconds "
                                             "from 0 to 1e15") from None
        lengths = []
        for col, minimum in ((in_col, 1), (out_col, 0)):
            name, value = header[col], cells[col]
            if not _DIGITS.fullmatch(value) or not minimum <= int(value) <= MAX_TOKENS:
                raise TraceError(path, line, f"{name} is {shown(value)}; expected an integer from {minimum} "
                                             f"to {MAX_TOKENS}")
            lengths.append(int(value))
        yield Row(line, ts, lengths[0], lengths[1], ts_field=header[time_col])


def azure_rows(spec: TraceWorkload):
    """The Azure LLM inference trace (``format: azure``); see :func:`_header_rows`."""
    return _header_rows(spec, azure=True)


def csv_rows(spec: TraceWorkload):
    """A plain CSV trace (``format: csv``); see :func:`_header_rows`."""
    return _header_rows(spec, azure=False)
