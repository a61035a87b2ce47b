"""The kv-cache-tester ("Weka") trace formats: ``format: weka`` (a session per line, subagents
nested) and ``format: weka_requests`` (its flattened form, a request per line)."""

from __future__ import annotations

from typing import Any

from simkit.core.units import MAX_SIM_TIME_S
from simkit.spec import TraceWorkload
from simkit.workload.common import MAX_LINE_BLOCKS, MAX_TOKENS, Row, TraceError, duration_field, hash_ids, \
    id_field, int_field, json_object, json_type, number_field, read_lines, shown

__all__ = ["weka_request_rows", "weka_rows"]


def weka_rows(spec: TraceWorkload):
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
    sessions: dict = {}  # session id -> its line
    for line, text in read_lines(path):
        obj = json_object(text, path, line, "id, block_size, requests")
        sid = id_field(obj, "id", path, line)
        requests = obj.get("requests")
        if sid is None or not isinstance(requests, list):
            raise TraceError(path, line, "expected a session object with 'id', an integer 'block_size' and a "
                                         "list 'requests'")
        if sid in sessions:
            raise TraceError(path, line, f"session id {shown(sid)} repeats line {sessions[sid]}'s; each line is "
                                         "one session with its own id")
        sessions[sid] = line
        tbs = int_field(obj, "block_size", 1, path, line) if "block_size" in obj else 64
        namespace = (line << 40)  # hash ids are local to each session
        counter = [0]

        def row(req: Any, wait_for: list, where: str) -> Row:
            if not isinstance(req, dict):
                raise TraceError(path, line, f"{where} is a JSON {json_type(req)}; expected an object")
            try:
                isl = int_field(req, "in", 1, path, line)
                osl = int_field(req, "out", 0, path, line)
                think = duration_field(req, "think_time", path, line, unit="s")
                ids = hash_ids(req, isl, tbs, path, line, partial_tail=True)
            except TraceError as exc:
                raise TraceError(path, line, f"{where}: {exc.message}") from None
            if ids is not None:
                ids = tuple(namespace + h for h in ids if h < 1 << 40) if all(h < 1 << 40 for h in ids) else None
                if ids is None:
                    raise TraceError(path, line, f"{where}: hash ids must be below 2^40")
            counter[0] += 1
            # a key no file can spell (ids are unique per line, so no message ever names it)
            return Row(line, 0.0, isl, osl, ids, sid, (line, counter[0]), tuple(wait_for), think * 1000.0, tbs)

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


def weka_request_rows(spec: TraceWorkload):
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
    for line, text in read_lines(path):
        obj = json_object(text, path, line, "session, seq, agent, t, input_length, output_length")
        session = id_field(obj, "session", path, line)
        agent = id_field(obj, "agent", path, line)
        if session is None or agent is None:
            raise TraceError(path, line, "missing field 'session' or 'agent'")
        t = number_field(obj, "t", path, line, unit="s", maximum=MAX_SIM_TIME_S)
        isl = int_field(obj, "input_length", 1, path, line)
        osl = int_field(obj, "output_length", 0, path, line)
        think = duration_field(obj, "think_time", path, line, unit="s")
        tbs = int_field(obj, "block_size", 1, path, line) if "block_size" in obj else 64
        keep = int_field(obj, "prefix_blocks_prev", 0, path, line, maximum=MAX_TOKENS) \
            if "prefix_blocks_prev" in obj else 0
        n_blocks = -(-isl // tbs)
        if n_blocks > MAX_LINE_BLOCKS:
            raise TraceError(path, line, f"input_length {isl} at block_size {tbs} is {n_blocks} blocks; at most "
                                         f"{MAX_LINE_BLOCKS} blocks of a prompt are rebuilt (raise block_size)")
        prev = threads.get((session, agent))
        shared = list(prev[1][:min(keep, n_blocks)]) if prev else []
        ids = tuple(shared + list(range(fresh[0], fresh[0] + n_blocks - len(shared))))
        fresh[0] += n_blocks - len(shared)
        key = line  # unique per line (no message names it)
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
        yield Row(line, 0.0, isl, osl, ids, session, key, wait_for, think * 1000.0, tbs)
