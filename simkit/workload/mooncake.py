"""The Mooncake JSONL trace format (``format: mooncake``), with multi-turn sessions."""

from __future__ import annotations

from simkit.spec import TraceWorkload
from simkit.workload.common import Row, duration_field, foreign_fields, hash_ids, id_field, int_field, \
    json_object, number_field, priority_field, read_lines

__all__ = ["mooncake_rows"]

#: agentic fields, which a Mooncake reader would drop: a line carrying one is refused
#: (``max_output_tokens`` too: beside ``output_length`` one of the two would silently win;
#: a ``request_id`` is a label a Mooncake line may carry, read as nothing)
AGENTIC_ONLY = {"wait_for": "agentic", "first_ready_timestamp_ms": "agentic",
                "delay_after_dependencies_ms": "agentic", "max_output_tokens": "agentic"}


def mooncake_rows(spec: TraceWorkload):
    """Mooncake JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, optional
    ``hash_ids`` and, for multi-turn sessions, ``session_id`` with ``delay`` or ``delay_ms``
    (ms): a turn after the first of its session arrives that long after the previous turn of
    the session ends (its own ``timestamp`` is then optional and ignored: it neither sets its
    arrival nor time zero). A line with an agentic field (``wait_for``...) is refused."""
    path, tbs = spec.path, spec.trace_block_size
    seen_sessions: set = set()
    for line, text in read_lines(path):
        obj = json_object(text, path, line, "timestamp, input_length, output_length, hash_ids")
        foreign_fields(obj, AGENTIC_ONLY, "mooncake", path, line)
        session = id_field(obj, "session_id", path, line)
        follow_up = session is not None and session in seen_sessions
        if session is not None:
            seen_sessions.add(session)
        ts = number_field(obj, "timestamp", path, line, default=None if follow_up else ...)
        isl = int_field(obj, "input_length", 1, path, line)
        osl = int_field(obj, "output_length", 0, path, line)
        delay = 0.0
        for name in ("delay_ms", "delay"):
            if name in obj:
                delay = duration_field(obj, name, path, line)
        yield Row(line, None if follow_up else ts, isl, osl, hash_ids(obj, isl, tbs, path, line), session, None,
                  (), delay, priority=priority_field(obj, path, line))
