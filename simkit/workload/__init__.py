"""Workload sources: trace loaders (Mooncake JSONL with sessions, agentic JSONL with
dependencies, the Azure LLM inference CSV, a plain CSV) and the synthetic generator.

Both return a tuple of :class:`~simkit.core.request.Request` sorted (stably) by arrival, with
time zero at the earliest arrival and times in seconds: milliseconds appear only here.
Layer L2: imports config, request, rng, units; no SimPy.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import random
from typing import Any, Iterable, Iterator, Optional

import attrs

from simkit.spec import (
    ArrivalSpec,
    ConstantArrival,
    DiurnalArrival,
    EmpiricalLength,
    FixedLength,
    GammaArrival,
    LengthSpec,
    LognormalLength,
    NormalLength,
    PiecewiseArrival,
    SyntheticWorkload,
    TraceWorkload,
    UniformLength,
    WorkloadSpec,
    ZipfLength,
)
from simkit.core.request import Request
from simkit.core.rng import RngStreams
from simkit.core.units import S_PER_MS

__all__ = ["TraceError", "detect_format", "iter_synthetic", "iter_workload", "load_trace", "load_workload",
           "stream_trace", "synthesize"]


class TraceError(Exception):
    """A trace file is missing or malformed.

    ``str(error)`` is one line: ``FILE:LINE: what was found, and what was expected``.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        # args are the constructor's, so that a copy (SimPy re-raises a failed process's
        # exception as type(exc)(*exc.args)) is the same error
        super().__init__(path, line, message)
        self.path, self.line, self.message = path, line, message

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {self.message}"


def _json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (object, array, string, number, boolean, null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "number")


def _int_field(obj: dict, name: str, minimum: int, path: str, line: int) -> int:
    if name not in obj:
        raise TraceError(path, line, f"missing field {name!r} (expected an integer >= {minimum})")
    value = obj[name]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError(path, line, f"field {name!r} is {value!r}; expected an integer >= {minimum}")
    if value > 1 << 40:
        raise TraceError(path, line, f"field {name!r} is {value}; expected an integer <= {1 << 40}")
    if value < minimum:
        raise TraceError(path, line, f"field {name!r} is {value}; expected an integer >= {minimum}")
    return value


def _read_lines(path: str):
    """Yield ``(line number, text)`` for the non-blank lines of a UTF-8 text file (a BOM and
    CRLF endings are fine).

    Raises:
        TraceError: a directory, an unreadable or non-UTF-8 file.
    """
    if os.path.isdir(path):
        raise TraceError(path, None, "is a directory; expected a trace file")
    if os.path.exists(path) and not os.path.isfile(path):
        raise TraceError(path, None, "is not a regular file (a device or a pipe); expected a trace file")
    try:
        with open(path, encoding="utf-8-sig") as f:
            for lineno, text in enumerate(f, start=1):
                if text.strip():
                    yield lineno, text.strip()
    except OSError as exc:
        raise TraceError(path, None, f"cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, f"not UTF-8 text ({exc.reason}); expected a text trace") from None


def _json_object(text: str, path: str, line: int, expected: str) -> dict:
    try:
        obj: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(path, line, f"not valid JSON ({exc.msg}, column {exc.colno}); "
                         "expected one JSON object per line") from None
    except RecursionError:
        raise TraceError(path, line, "JSON nested too deeply; expected one flat object per line") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, f"found a JSON {_json_type(obj)}; expected an object with {expected}")
    return obj


def _number_field(obj: dict, name: str, path: str, line: int, default: Any = ...) -> Optional[float]:
    if name not in obj or obj[name] is None:
        if default is not ...:
            return default
        raise TraceError(path, line, f"missing field {name!r} (expected milliseconds >= 0)")
    value = obj[name]
    try:
        ok = (not isinstance(value, bool) and isinstance(value, (int, float))
              and math.isfinite(float(value)) and 0 <= value <= 1e15)
    except OverflowError:
        ok = False
    if not ok:
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
        raise TraceError(path, line, f"field {name!r} is {shown}; expected milliseconds from 0 to 1e15")
    return float(value)


def _hash_ids(obj: dict, isl: int, tbs: int, path: str, line: int,
              partial_tail: bool = False) -> Optional[tuple]:
    """The ``hash_ids`` of a line, cut to the prompt. ``partial_tail``: the ids may leave out a
    final partial block (kv-cache-tester hashes full blocks only); those tokens share nothing."""
    ids = obj.get("hash_ids")
    if ids is None:
        return None
    if not isinstance(ids, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < 1 << 63 for h in ids
    ):
        raise TraceError(path, line, "field 'hash_ids' must be a list of integers in [0, 2^63)")
    if isl > (len(ids) + (1 if partial_tail else 0)) * tbs:
        raise TraceError(
            path, line,
            f"input_length {isl} is larger than its hash_ids cover "
            f"({len(ids)} ids * trace_block_size {tbs} = {len(ids) * tbs} tokens)",
        )
    return tuple(ids[: -(-isl // tbs)])


def _id_field(obj: dict, name: str, path: str, line: int):
    key = obj.get(name)
    if key is not None and isinstance(key, (bool, float, list, dict)):
        raise TraceError(path, line, f"field {name!r} is {key!r}; expected a string or an integer")
    return key


class _Row:
    """One parsed request, before ids and dependencies are resolved."""

    __slots__ = ("line", "ts_ms", "isl", "osl", "ids", "session", "key", "wait_for", "delay_ms", "tbs",
                 "priority")

    def __init__(self, line, ts_ms, isl, osl, ids=None, session=None, key=None, wait_for=(), delay_ms=0.0,
                 tbs=None, priority=1.0):
        self.line, self.ts_ms, self.isl, self.osl, self.ids = line, ts_ms, isl, osl, ids
        self.session, self.key, self.wait_for, self.delay_ms = session, key, wait_for, delay_ms
        self.tbs = tbs  #: tokens per hash id when the file says (else the spec's)
        self.priority = priority


def _priority(obj: dict, path: str, line: int) -> float:
    """The optional ``priority`` field of a JSONL line: a number > 0 (default 1)."""
    value = obj.get("priority")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e15 \
            or not math.isfinite(value):
        raise TraceError(path, line, f"field 'priority' is {value!r}; expected a number > 0")
    return float(value)


def _mooncake_rows(spec: TraceWorkload):
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, optional
    ``hash_ids`` and, for multi-turn sessions, ``session_id`` with ``delay`` or ``delay_ms``
    (ms): a turn after the first of its session arrives that long after the previous turn of
    the session ends (its own ``timestamp`` is then optional and ignored)."""
    path, tbs = spec.path, spec.trace_block_size
    seen_sessions: set = set()
    for line, text in _read_lines(path):
        obj = _json_object(text, path, line, "timestamp, input_length, output_length, hash_ids")
        session = _id_field(obj, "session_id", path, line)
        follow_up = session is not None and session in seen_sessions
        if session is not None:
            seen_sessions.add(session)
        ts = _number_field(obj, "timestamp", path, line, default=None if follow_up else ...)
        isl = _int_field(obj, "input_length", 1, path, line)
        osl = _int_field(obj, "output_length", 0, path, line)
        delay = 0.0
        for name in ("delay_ms", "delay"):
            if name in obj:
                delay = _number_field(obj, name, path, line)
        yield _Row(line, ts, isl, osl, _hash_ids(obj, isl, tbs, path, line), session, None, (), delay,
                   priority=_priority(obj, path, line))


def _agentic_rows(spec: TraceWorkload):
    """Agentic JSONL (REFERENCE.md s2): ``request_id`` (unique), ``session_id``,
    ``input_length``, ``max_output_tokens`` (or ``output_length``), ``hash_ids``, optional
    ``first_ready_timestamp_ms`` (when a request without dependencies is ready; default 0),
    ``wait_for`` (ids of requests on earlier lines it waits for) and
    ``delay_after_dependencies_ms`` (think or tool time after the last of them ends).
    ``prefix_reset`` is accepted: the prompt identity is carried by ``hash_ids``."""
    path, tbs = spec.path, spec.trace_block_size
    for line, text in _read_lines(path):
        obj = _json_object(text, path, line, "request_id, session_id, input_length, max_output_tokens")
        key = _id_field(obj, "request_id", path, line)
        if key is None:
            raise TraceError(path, line, "missing field 'request_id' (expected a string or an integer)")
        isl = _int_field(obj, "input_length", 1, path, line)
        out_name = "max_output_tokens" if "max_output_tokens" in obj else "output_length"
        osl = _int_field(obj, out_name, 0, path, line)
        wait_for = obj.get("wait_for") or []
        if not isinstance(wait_for, list) or any(
                w is None or isinstance(w, (bool, float, list, dict)) for w in wait_for):
            raise TraceError(path, line, "field 'wait_for' must be a list of request ids")
        ready = _number_field(obj, "first_ready_timestamp_ms", path, line, default=0.0)
        delay = _number_field(obj, "delay_after_dependencies_ms", path, line, default=0.0)
        yield _Row(line, ready, isl, osl, _hash_ids(obj, isl, tbs, path, line),
                   _id_field(obj, "session_id", path, line), key, tuple(wait_for), delay,
                   priority=_priority(obj, path, line))


def _azure_ms(text: str, path: str, line: int) -> tuple[int, float]:
    """(day ordinal, ms since that day's midnight) of an Azure ``TIMESTAMP``."""
    try:
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


def _csv_rows(spec: TraceWorkload, azure: bool):
    """CSV with a header. Azure LLM inference trace: ``TIMESTAMP`` (a datetime such as
    ``2023-11-16 18:15:46.6805900``), ``ContextTokens``, ``GeneratedTokens``. Plain CSV:
    ``arrival_ms``, ``input_length``, ``output_length``. No prefix information: prompts share
    nothing."""
    path = spec.path
    lines = _read_lines(path)
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
                ts = float(cells[time_col])
                if not (math.isfinite(ts) and ts >= 0):
                    raise ValueError
            except ValueError:
                raise TraceError(path, line, f"arrival_ms {cells[time_col]!r}; expected finite "
                                             "milliseconds >= 0") from None
        lengths = []
        for col, minimum in ((in_col, 1), (out_col, 0)):
            name, value = header[col], cells[col]
            if not value.isdigit() or int(value) < minimum or int(value) > 1 << 40:
                raise TraceError(path, line, f"{name} {value!r}; expected an integer >= {minimum}")
            lengths.append(int(value))
        yield _Row(line, ts, lengths[0], lengths[1])


def _weka_rows(spec: TraceWorkload):
    """kv-cache-tester ("Weka") agentic sessions, one JSON object per line: ``id``,
    ``block_size`` (tokens per hash id, 64), ``requests``: main-agent requests ``{"t", "in",
    "out", "hash_ids", "think_time"}`` in order, and subagents ``{"type": "subagent",
    "requests": [...]}`` nested among them. Hash ids are local to a session (they are made
    unique per session here). Each main request follows the previous one after its
    ``think_time`` (s); a subagent's requests follow the main request that spawned it and each
    other; the next main request also waits for the subagent to finish (as a Task tool does).
    Sessions have no common clock: all start at 0 unless ``sessions_per_s`` staggers them or
    ``max_in_flight`` runs them closed-loop."""
    path = spec.path
    for line, text in _read_lines(path):
        obj = _json_object(text, path, line, "id, block_size, requests")
        sid = _id_field(obj, "id", path, line)
        tbs = obj.get("block_size", 64)
        requests = obj.get("requests")
        if sid is None or not isinstance(tbs, int) or isinstance(tbs, bool) or tbs < 1 or not isinstance(requests, list):
            raise TraceError(path, line, "expected a session object with 'id', an integer 'block_size' and a "
                                         "list 'requests'")
        namespace = (line << 40)  # hash ids are local to each session
        counter = [0]

        def row(req: Any, wait_for: list, where: str) -> _Row:
            if not isinstance(req, dict):
                raise TraceError(path, line, f"{where} is a JSON {_json_type(req)}; expected an object")
            try:
                isl = _int_field(req, "in", 1, path, line)
                osl = _int_field(req, "out", 0, path, line)
                think = _number_field(req, "think_time", path, line, default=0.0)
                ids = _hash_ids(req, isl, tbs, path, line, partial_tail=True)
            except TraceError as exc:
                raise TraceError(path, line, f"{where}: {exc.message}") from None
            if ids is not None:
                ids = tuple(namespace + h for h in ids if h < 1 << 40) if all(h < 1 << 40 for h in ids) else None
                if ids is None:
                    raise TraceError(path, line, f"{where}: hash ids must be below 2^40")
            counter[0] += 1
            return _Row(line, 0.0, isl, osl, ids, sid, f"{sid}#{counter[0]}", tuple(wait_for),
                        think * 1000.0, tbs)

        previous: list = []  # what the next main request waits for
        for i, req in enumerate(requests):
            if isinstance(req, dict) and req.get("type") == "subagent":
                subs = req.get("requests")
                if not isinstance(subs, list):
                    raise TraceError(path, line, f"request {i}: a subagent needs a list 'requests'")
                chain = list(previous[:1])  # spawned by the last main request
                for j, sub in enumerate(subs):
                    r = row(sub, chain, f"request {i} (subagent) step {j}")
                    yield r
                    chain = [r.key]
                previous = previous + chain  # the next main request waits for it too
                continue
            r = row(req, previous, f"request {i}")
            yield r
            previous = [r.key]


def _weka_request_rows(spec: TraceWorkload):
    """The flattened kv-cache-tester trace, one request per line: ``session``, ``seq``,
    ``agent`` (``main`` or a subagent id), ``t`` (s since session start), ``input_length``,
    ``output_length``, ``think_time`` (s), ``block_size`` and ``prefix_blocks_prev`` (leading
    blocks equal to the previous request of the same agent thread). Prompt identities are
    rebuilt from ``prefix_blocks_prev``. Each request follows the previous one of its thread
    after its ``think_time``; a subagent's first request follows the main-thread request sent
    last before it."""
    path = spec.path
    threads: dict = {}  # (session, agent) -> (key, hash ids) of its latest request
    main_by_session: dict = {}  # session -> [(t, key)] of main-thread requests
    fresh = [0]
    for line, text in _read_lines(path):
        obj = _json_object(text, path, line, "session, seq, agent, t, input_length, output_length")
        session = _id_field(obj, "session", path, line)
        agent = _id_field(obj, "agent", path, line)
        if session is None or agent is None:
            raise TraceError(path, line, "missing field 'session' or 'agent'")
        t = _number_field(obj, "t", path, line)
        isl = _int_field(obj, "input_length", 1, path, line)
        osl = _int_field(obj, "output_length", 0, path, line)
        think = _number_field(obj, "think_time", path, line, default=0.0)
        tbs = _int_field(obj, "block_size", 1, path, line) if "block_size" in obj else 64
        keep = _int_field(obj, "prefix_blocks_prev", 0, path, line) if "prefix_blocks_prev" in obj else 0
        n_blocks = -(-isl // tbs)
        prev = threads.get((session, agent))
        shared = list(prev[1][:min(keep, n_blocks)]) if prev else []
        ids = tuple(shared + list(range(fresh[0], fresh[0] + n_blocks - len(shared))))
        fresh[0] += n_blocks - len(shared)
        key = f"{session}/{agent}/{line}"
        if prev:
            wait_for = (prev[0],)
        elif agent != "main" and main_by_session.get(session):
            earlier = [k for mt, k in main_by_session[session] if mt <= t]
            wait_for = (earlier[-1],) if earlier else ()
        else:
            wait_for = ()
        threads[(session, agent)] = (key, ids)
        if agent == "main":
            main_by_session.setdefault(session, []).append((t, key))
        yield _Row(line, 0.0, isl, osl, ids, session, key, wait_for, think * 1000.0, tbs)


_READERS = {
    "mooncake": _mooncake_rows,
    "agentic": _agentic_rows,
    "azure": lambda spec: _csv_rows(spec, azure=True),
    "csv": lambda spec: _csv_rows(spec, azure=False),
    "weka": _weka_rows,
    "weka_requests": _weka_request_rows,
}


def detect_format(path: str) -> str:
    """The trace format of ``path`` from its first non-blank line.

    Raises:
        TraceError: the file is unreadable, empty, or its first line fits no format.
    """
    first = next(_read_lines(path), None)
    if first is None:
        raise TraceError(path, None, "the trace has no requests; expected JSONL or CSV lines")
    line, text = first
    try:
        json.loads(text)
        is_json = True
    except (ValueError, RecursionError):
        is_json = False
    if is_json or text[0] in "{[":  # JSONL (a malformed first line gets its own error later)
        if '"requests"' in text and '"block_size"' in text:
            return "weka"
        if '"prefix_blocks_prev"' in text or ('"session"' in text and '"agent"' in text):
            return "weka_requests"
        return "agentic" if ('"request_id"' in text or '"wait_for"' in text) else "mooncake"
    header = [h.strip() for h in text.split(",")]
    if sorted(header) == sorted(["TIMESTAMP", "ContextTokens", "GeneratedTokens"]):
        return "azure"
    if "arrival_ms" in header:
        return "csv"
    raise TraceError(path, line, "cannot tell the trace format from the first line; set "
                                 "workload.format to one of: mooncake, agentic, azure, csv")


def load_trace(spec: TraceWorkload) -> tuple[Request, ...]:
    """Load a trace file in ``spec.format`` (detected from the first line when ``auto``).

    Request ids are 0-based indices among the file's requests (non-blank lines; CSV data rows).
    Timestamps are rebased to the earliest and divided by ``arrival_speedup_ratio``; requests
    are sorted stably by arrival. Sessions and dependencies become ``Request.deps`` with
    ``delay_s``.

    Raises:
        TraceError: missing file, a directory, an empty trace, or a malformed line
            (``FILE:LINE: reason``), including a dependency on an unknown or later request.
    """
    fmt = spec.format if spec.format != "auto" else detect_format(spec.path)
    rows = list(_READERS[fmt](spec))
    if not rows:
        raise TraceError(spec.path, None, "the trace has no requests; expected JSONL or CSV lines")
    t0 = min(r.ts_ms for r in rows if r.ts_ms is not None)
    speedup, tbs = spec.arrival_speedup_ratio, spec.trace_block_size
    sessions: dict = {}  # session key -> session index
    last_turn: dict = {}  # mooncake: session key -> rid of its latest turn
    by_key: dict = {}  # agentic: request_id -> rid
    requests = []
    for rid, row in enumerate(rows):
        session = None if row.session is None else sessions.setdefault(row.session, len(sessions))
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
        ts = row.ts_ms if row.ts_ms is not None else t0
        at = (ts - t0) / speedup * S_PER_MS
        requests.append(Request(rid, at, row.isl, row.osl, row.ids, row.tbs or tbs, session, deps,
                                row.delay_ms * S_PER_MS if deps else 0.0, row.priority))
    if spec.sessions_per_s is not None:  # stagger session starts: session k at k / rate
        first: dict = {}
        for r in requests:
            first.setdefault(r.session, len(first))
        requests = [attrs.evolve(r, arrived_at=r.arrived_at + first[r.session] / spec.sessions_per_s)
                    if not r.deps else r for r in requests]
    requests.sort(key=lambda r: r.arrived_at)  # stable: equal times keep file order
    return tuple(requests)


def _zipf(rng: random.Random, alpha: float) -> int:
    """An integer k >= 1 with P(k) proportional to k^-alpha (alpha > 1): Devroye's rejection
    method (Non-Uniform Random Variate Generation, 1986, X.6)."""
    b = 2.0 ** (alpha - 1.0)
    while True:
        u = 1.0 - rng.random()
        v = rng.random()
        x = math.floor(u ** (-1.0 / (alpha - 1.0)))
        t = (1.0 + 1.0 / x) ** (alpha - 1.0)
        if v * x * (t - 1.0) / (b - 1.0) <= t / b:
            return int(x)


def _sampler(spec: LengthSpec, rng: random.Random):
    """A function drawing one length (int tokens) from ``spec`` with ``rng``.

    Raises:
        TraceError: an empirical length's trace file is missing or malformed.
    """
    if isinstance(spec, FixedLength):
        return lambda: spec.value
    if isinstance(spec, UniformLength):
        return lambda: rng.randint(spec.low, spec.high)
    if isinstance(spec, (LognormalLength, NormalLength)):
        hi = spec.max if spec.max is not None else math.inf
        if isinstance(spec, LognormalLength):
            mu = math.log(spec.mean) - spec.sigma**2 / 2.0
            raw = lambda: rng.lognormvariate(mu, spec.sigma)  # noqa: E731
        else:
            raw = lambda: rng.gauss(spec.mean, spec.std)  # noqa: E731
        return lambda: int(min(max(round(raw()), spec.min), hi))
    if isinstance(spec, ZipfLength):
        def draw_zipf() -> int:
            while True:
                n = spec.min + _zipf(rng, spec.alpha) - 1
                if n <= spec.max:
                    return n
        return draw_zipf
    if isinstance(spec, EmpiricalLength):
        trace = load_trace(TraceWorkload(path=spec.path, format=spec.format))
        values = sorted((r.input_length if spec.field == "input" else max(r.output_length, 1)) for r in trace)
        return lambda: values[rng.randrange(len(values))]
    raise TypeError(f"unknown length spec {spec!r}")


def _arrival_times(spec: ArrivalSpec, n: int, rng: random.Random) -> Iterable[float]:
    """``n`` arrival times (s), the first at 0."""
    t = 0.0
    if isinstance(spec, PiecewiseArrival):
        segments = spec.segments
        seg, seg_end = 0, segments[0].duration_s
        for i in range(n):
            if i:
                while True:  # exponential gap at the current segment's rate, restarting at edges
                    rate = segments[seg].rate_per_s
                    gap = rng.expovariate(rate) if rate > 0 else math.inf
                    if t + gap <= seg_end:
                        t += gap
                        break
                    t = seg_end
                    seg = (seg + 1) % len(segments)
                    seg_end = t + segments[seg].duration_s
            yield t
        return
    if isinstance(spec, DiurnalArrival):
        peak = spec.mean_rate_per_s * (1.0 + spec.amplitude)
        for i in range(n):
            if i:
                while True:  # thinning (Lewis and Shedler, 1979)
                    t += rng.expovariate(peak)
                    rate = spec.mean_rate_per_s * (
                        1.0 + spec.amplitude * math.sin(2 * math.pi * (t - spec.phase_s) / spec.period_s))
                    if rng.random() * peak <= rate:
                        break
            yield t
        return
    if isinstance(spec, GammaArrival):
        shape = 1.0 / spec.cv**2
        scale = 1.0 / (spec.rate_per_s * shape)
        gap = lambda: rng.gammavariate(shape, scale)  # noqa: E731
    elif isinstance(spec, ConstantArrival):
        gap = lambda: 1.0 / spec.rate_per_s  # noqa: E731
    else:
        gap = lambda: rng.expovariate(spec.rate_per_s)  # noqa: E731
    for i in range(n):
        if i:
            t += gap()
        yield t


def synthesize(spec: SyntheticWorkload, seed: int) -> tuple[Request, ...]:
    """Generate ``spec.num_requests`` requests from the scenario ``seed`` (all of
    :func:`iter_synthetic`).

    Raises:
        TraceError: an empirical length distribution's trace file is missing or malformed.
    """
    return tuple(iter_synthetic(spec, seed))


def iter_synthetic(spec: SyntheticWorkload, seed: int) -> Iterator[Request]:
    """The requests of a synthetic workload one at a time, in generation order: sessions by
    start time, each session's later turns right after its first (they wait for it).

    Streams: ``arrivals``, ``input_tokens``, ``output_tokens``, ``prefix_groups``,
    ``priorities`` and, with sessions, ``session_turns`` and ``think_times``. With ``shared_prefix``, each request (or
    session) joins a uniformly drawn group and its leading ``prefix_tokens //
    trace_block_size`` full identity blocks are the group's; all other blocks are unique. With
    ``sessions``, arrivals start sessions; turn k+1 waits for turn k plus an exponential think
    time, and its prompt extends turn k's.

    Raises:
        TraceError: an empirical length distribution's trace file is missing or malformed.
    """
    streams = RngStreams(seed)
    draw_in = _sampler(spec.input_tokens, streams.get("input_tokens"))
    draw_out = _sampler(spec.output_tokens, streams.get("output_tokens"))
    groups_rng = streams.get("prefix_groups")
    tbs = spec.trace_block_size
    shared = spec.shared_prefix
    shared_blocks = shared.prefix_tokens // tbs if shared else 0
    next_id = shared.num_groups * shared_blocks if shared else 0
    sessions = spec.sessions
    draw_turns = _sampler(sessions.turns, streams.get("session_turns")) if sessions else (lambda: 1)
    think_rng = streams.get("think_times")
    draw_priority = _priority_sampler(spec.priorities, streams.get("priorities"))
    n = spec.num_requests
    count = 0
    for session, at in enumerate(_arrival_times(spec.arrival, n, streams.get("arrivals"))):
        if count >= n:
            break
        ids: list[int] = []
        if shared:
            g = groups_rng.randrange(shared.num_groups)
            ids = [g * shared_blocks + j for j in range(shared_blocks)]
        history = 0  # tokens of the conversation so far
        for turn in range(max(1, draw_turns())):
            if count >= n:
                break
            isl, osl = history + draw_in(), draw_out()
            n_blocks = -(-isl // tbs)
            # the history's full blocks keep their identity; the rest is new
            keep = min(len(ids), history // tbs if turn else n_blocks)
            ids = ids[:keep]
            ids.extend(range(next_id, next_id + n_blocks - keep))
            next_id += n_blocks - keep
            rid = count
            count += 1
            deps, delay = ((rid - 1,), think_rng.expovariate(1.0 / sessions.think_time_s)
                           if sessions.think_time_s > 0 else 0.0) if turn else ((), 0.0)
            yield Request(rid, at, isl, osl, tuple(ids), tbs, session if sessions else None, deps, delay,
                          draw_priority())
            history = isl


def _priority_sampler(classes, rng: random.Random):
    """Draws a request's priority from ``classes`` (each ``value`` with probability
    proportional to its ``share``); always 1 without classes (and then draws nothing)."""
    if not classes:
        return lambda: 1.0
    values = [c.value for c in classes]
    weights = [c.share for c in classes]
    return lambda: rng.choices(values, weights=weights)[0]


def load_workload(spec: WorkloadSpec, seed: int) -> tuple[Request, ...]:
    """The requests of any workload spec (trace file or synthetic).

    Raises:
        TraceError: for a trace file that is missing or malformed.
    """
    if isinstance(spec, TraceWorkload):
        return load_trace(spec)
    return synthesize(spec, seed)


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
    speedup, tbs = spec.arrival_speedup_ratio, spec.trace_block_size
    sessions: dict = {}
    t0 = last = None
    rid = -1
    for rid, row in enumerate(_READERS[fmt](spec)):
        if row.wait_for or (row.session is not None and row.session in sessions):
            raise TraceError(spec.path, row.line, "a request that waits for others (a follow-up turn or "
                                                  "wait_for) cannot be streamed; replay without streaming")
        ts = row.ts_ms
        if ts is None:
            raise TraceError(spec.path, row.line, "a timestamp is needed to stream a trace")
        if t0 is None:
            t0 = ts
        elif ts < last:
            raise TraceError(spec.path, row.line, f"timestamp {ts:g} is earlier than the previous line's "
                                                  f"{last:g}; streaming needs lines in time order (sort the "
                                                  "file, or replay without streaming)")
        last = ts
        session = None if row.session is None else sessions.setdefault(row.session, len(sessions))
        yield Request(rid, (ts - t0) / speedup * S_PER_MS, row.isl, row.osl, row.ids, row.tbs or tbs, session,
                      (), 0.0, row.priority)
    if rid < 0:
        raise TraceError(spec.path, None, "the trace has no requests; expected JSONL or CSV lines")


def iter_workload(spec: WorkloadSpec, seed: int) -> Iterator[Request]:
    """The requests of any workload one at a time, for streaming replay (see
    :func:`stream_trace` for what a trace must satisfy).

    Raises:
        TraceError: a missing or malformed trace, or one that cannot be streamed (raised when
            the offending line is read, possibly during the run).
    """
    if isinstance(spec, TraceWorkload):
        return stream_trace(spec)
    return iter_synthetic(spec, seed)
