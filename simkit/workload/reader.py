"""Reading a trace: :func:`load_trace` and :func:`stream_trace` pick a format's reader from
:data:`READERS` (``format: auto`` asks :func:`~simkit.workload.detect.detect_format`) and turn
its rows into requests (ids, time zero, speedup, sessions and dependencies).
:mod:`simkit.workload.load` takes any workload spec, synthetic or trace.

To add a trace format ``NAME``:

1. Write ``simkit/workload/NAME.py`` (or add to the module of its family: ``csv.py`` for a
   CSV dialect, ``weka.py`` for a kv-cache-tester variant) with ``NAME_rows(spec:
   TraceWorkload)``, a function (usually a generator) yielding one
   :class:`~simkit.workload.common.Row` per request in file order. Read lines with
   :func:`~simkit.workload.common.read_lines`, parse fields with the helpers in
   :mod:`simkit.workload.common`, and raise :class:`~simkit.workload.common.TraceError`
   ``(path, line, "what was found; what was expected")`` for a malformed line. Times stay in
   the file's milliseconds: rebasing, the speedup and seconds are this module's.
2. Register it in :data:`READERS` below under ``"NAME"``.
3. Add ``"NAME"`` to the ``format`` literals of ``TraceWorkload`` and ``EmpiricalLength`` in
   :mod:`simkit.spec.workload`, and describe it in the ``TraceWorkload`` docstring, the ``--trace``
   help in :mod:`simkit.cli.run` and the README's scenario reference.
4. If its first line tells it apart, add a rule to
   :func:`~simkit.workload.detect.detect_format` (else ``format: NAME`` must be set).
5. Test it beside the other formats in ``tests/test_workloads.py`` (malformed lines and their
   ``FILE:LINE`` messages as in ``tests/test_trace.py``; ``tests/test_streaming.py`` if it can
   be streamed).
"""

from __future__ import annotations

import math
from typing import Iterator

from simkit.spec import TraceWorkload
from simkit.core.request import Request
from simkit.core.units import MAX_SIM_TIME_S, MAX_SIM_TIME_TEXT, S_PER_MS
from simkit.workload.agentic import agentic_rows
from simkit.workload.common import TraceError
from simkit.workload.csv import azure_rows, csv_rows
from simkit.workload.detect import detect_format
from simkit.workload.mooncake import mooncake_rows
from simkit.workload.weka import weka_request_rows, weka_rows

__all__ = ["READERS", "load_trace", "stream_trace"]


#: Format name (``workload.format``) -> reader: a function of the spec yielding a
#: :class:`~simkit.workload.common.Row` per request in file order. A new format is registered here.
READERS = {
    "mooncake": mooncake_rows,
    "agentic": agentic_rows,
    "azure": azure_rows,
    "csv": csv_rows,
    "weka": weka_rows,
    "weka_requests": weka_request_rows,
}


def _arrival_s(row, t0: float, spec: TraceWorkload) -> float:
    """``row``'s arrival in simulated seconds: its time after ``t0`` (ms), divided by the
    speedup.

    Raises:
        TraceError: the arrival is beyond :data:`~simkit.core.units.MAX_SIM_TIME_S`.
    """
    speedup = spec.arrival_speedup_ratio
    at = (row.ts_ms - t0) / speedup * S_PER_MS
    if not at <= MAX_SIM_TIME_S:
        scaled = f" once divided by arrival_speedup_ratio {speedup:g}" if speedup != 1 else ""
        raise TraceError(spec.path, row.line, f"{row.ts_field} puts this request {at:.4g} s after time zero{scaled}; "
                                              f"{_LIMIT}")
    return at


#: the end of every time message
_LIMIT = f"simulated times must stay within {MAX_SIM_TIME_TEXT}, where float64 still resolves 1 us"


def _roots(rows: list) -> list[bool]:
    """Whether each row waits for nothing (its own time is its arrival; follow-up turns and
    requests with ``wait_for`` ignore theirs)."""
    seen: set = set()
    out = []
    for row in rows:
        if row.key is not None:
            out.append(not row.wait_for)
        elif row.session is not None:
            out.append(row.session not in seen)
            seen.add(row.session)
        else:
            out.append(True)
    return out


def load_trace(spec: TraceWorkload) -> tuple[Request, ...]:
    """Load a trace file in ``spec.format`` (detected from the first line when ``auto``).

    Request ids are 0-based indices among the file's requests (non-blank lines; CSV data rows).
    Time zero is the earliest timestamp of a request that waits for nothing (a follow-up
    turn's or a dependent request's own timestamp is ignored, and so never moves it; a request
    without a timestamp arrives at time zero). Timestamps are rebased to it and divided by
    ``arrival_speedup_ratio``; requests are sorted stably by arrival. Sessions and dependencies
    become ``Request.deps`` with ``delay_s``; a dependent request's ``arrived_at`` is the
    earliest it can be released (what it waits for, at their earliest, plus its delay).

    Raises:
        TraceError: missing file, a directory, an empty trace, or a malformed line
            (``FILE:LINE: reason``), including a dependency on an unknown or later request and
            a time (an arrival, or the delays along a chain of dependencies, after scaling)
            beyond :data:`~simkit.core.units.MAX_SIM_TIME_S`.
    """
    fmt = spec.format if spec.format != "auto" else detect_format(spec.path)
    rows = list(READERS[fmt](spec))
    if not rows:
        raise TraceError(spec.path, None, "the trace has no requests; expected JSONL or CSV lines")
    roots = _roots(rows)
    t0 = min((r.ts_ms for r, root in zip(rows, roots) if root and r.ts_ms is not None), default=0.0)
    tbs, rate = spec.trace_block_size, spec.sessions_per_s
    sessions: dict = {}  # session key -> session index
    last_turn: dict = {}  # mooncake: session key -> rid of its latest turn
    by_key: dict = {}  # agentic: request_id -> rid
    starts: dict = {}  # session key -> its start index, for sessions_per_s
    earliest: list[float] = []  # rid -> the earliest it can be released (s)
    requests = []
    for rid, (row, root) in enumerate(zip(rows, roots)):
        session = None if row.session is None else sessions.setdefault(row.session, len(sessions))
        start = starts.setdefault(row.session, len(starts))
        deps: tuple = ()
        if row.key is not None:  # agentic
            if row.key in by_key:
                raise TraceError(spec.path, row.line, f"request_id {row.key!r} repeats an earlier line's")
            missing = [w for w in row.wait_for if w not in by_key]
            if missing:
                raise TraceError(spec.path, row.line, f"wait_for names {missing[0]!r}, which is not "
                                                      "the request_id of an earlier line")
            deps = tuple(dict.fromkeys(by_key[w] for w in row.wait_for))
            by_key[row.key] = rid
        elif row.session is not None:
            if row.session in last_turn:  # a follow-up turn waits for the previous one
                deps = (last_turn[row.session],)
            last_turn[row.session] = rid
        delay_s = row.delay_ms * S_PER_MS if deps else 0.0
        if deps:
            at = max(earliest[d] for d in deps) + delay_s
            if not at <= MAX_SIM_TIME_S:
                raise TraceError(spec.path, row.line, f"the delays along the requests it waits for put this "
                                                      f"request at least {at:.4g} s after time zero; {_LIMIT}")
        else:
            at = 0.0 if row.ts_ms is None else _arrival_s(row, t0, spec)
            if rate is not None:  # stagger session starts: session k at k / rate
                at += start / rate
                if not at <= MAX_SIM_TIME_S:
                    raise TraceError(spec.path, row.line, f"sessions_per_s {rate:g} starts this session "
                                                          f"(number {start}) {at:.4g} s after time zero; {_LIMIT}")
        earliest.append(at)
        requests.append(Request(rid, at, row.isl, row.osl, row.ids, row.tbs or tbs, session, deps, delay_s,
                                row.priority))
    requests.sort(key=lambda r: r.arrived_at)  # stable: equal times keep file order
    return tuple(requests)


def stream_trace(spec: TraceWorkload) -> Iterator[Request]:
    """The requests of a trace file one at a time, as it is read (memory independent of its
    length). Ids, time zero and ``arrival_speedup_ratio`` are as in :func:`load_trace`.

    Streaming needs what a one-pass reader can follow: timestamps in non-decreasing order and
    no dependencies (follow-up turns, ``wait_for``) and no ``sessions_per_s``.

    Raises:
        TraceError: as :func:`load_trace`, and for a line that breaks those conditions.
    """
    fmt = spec.format if spec.format != "auto" else detect_format(spec.path)
    if spec.sessions_per_s is not None:
        raise TraceError(spec.path, None, "sessions_per_s needs the whole trace; replay it without streaming")
    tbs = spec.trace_block_size
    sessions: dict = {}
    t0 = last = None
    rid = -1
    for rid, row in enumerate(READERS[fmt](spec)):
        if row.wait_for or (row.session is not None and row.session in sessions):
            raise TraceError(spec.path, row.line, "a request that waits for others (a follow-up turn or "
                                                  "wait_for) cannot be streamed; replay without streaming")
        ts = row.ts_ms
        if ts is None:  # no time of its own: time zero
            if last is not None and last[0] > 0:
                raise TraceError(spec.path, row.line, f"a request without {row.ts_field} arrives at time zero, "
                                                      "before the previous line's; streaming needs lines in "
                                                      "time order (sort the file, or replay without streaming)")
            at = 0.0
        else:
            if t0 is None:
                t0 = ts
            if last is not None and ts < last[1]:
                raise TraceError(spec.path, row.line, f"{row.ts_field} {ts:g} is earlier than the previous line's "
                                                      f"{last[1]:g}; streaming needs lines in time order (sort "
                                                      "the file, or replay without streaming)")
            at = _arrival_s(row, t0, spec)
        last = (at, ts if ts is not None else -math.inf)
        session = None if row.session is None else sessions.setdefault(row.session, len(sessions))
        yield Request(rid, at, row.isl, row.osl, row.ids, row.tbs or tbs, session, (), 0.0, row.priority)
    if rid < 0:
        raise TraceError(spec.path, None, "the trace has no requests; expected JSONL or CSV lines")
