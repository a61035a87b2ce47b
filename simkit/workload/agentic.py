"""The agentic JSONL trace format (``format: agentic``): requests with ``wait_for``
dependencies."""

from __future__ import annotations

from simkit.spec import TraceWorkload
from simkit.workload.common import Row, TraceError, duration_field, foreign_fields, hash_ids, id_field, \
    int_field, json_object, number_field, priority_field, read_lines, shown

__all__ = ["agentic_rows"]

#: Mooncake fields, which an agentic reader would drop: a line carrying one is refused
MOONCAKE_ONLY = {"timestamp": "mooncake", "delay": "mooncake", "delay_ms": "mooncake"}


def agentic_rows(spec: TraceWorkload):
    """Agentic JSONL (REFERENCE.md s2): ``request_id`` (unique), ``session_id``,
    ``input_length``, ``max_output_tokens`` (or ``output_length``), ``hash_ids``, optional
    ``first_ready_timestamp_ms`` (when a request without dependencies is ready; a request
    without it is ready at time zero, the earliest ready time given), ``wait_for`` (a list
    of ids of requests on earlier lines it waits for) and ``delay_after_dependencies_ms`` (think
    or tool time after the last of them ends). ``prefix_reset`` is accepted: the prompt
    identity is carried by ``hash_ids``. A line with a Mooncake field (``timestamp``...) is
    refused."""
    path, tbs = spec.path, spec.trace_block_size
    for line, text in read_lines(path):
        obj = json_object(text, path, line, "request_id, session_id, input_length, max_output_tokens")
        foreign_fields(obj, MOONCAKE_ONLY, "agentic", path, line)
        key = id_field(obj, "request_id", path, line)
        if key is None:
            raise TraceError(path, line, "missing field 'request_id' (expected a string or an integer)")
        isl = int_field(obj, "input_length", 1, path, line)
        out_name = "max_output_tokens" if "max_output_tokens" in obj else "output_length"
        osl = int_field(obj, out_name, 0, path, line)
        wait_for = obj.get("wait_for")
        if wait_for is None:
            wait_for = []
        if not isinstance(wait_for, list) or any(
                w is None or isinstance(w, (bool, float, list, dict)) for w in wait_for):
            raise TraceError(path, line, f"field 'wait_for' is {shown(wait_for)}; expected a list of "
                                         "request ids (strings or integers)")
        ready = number_field(obj, "first_ready_timestamp_ms", path, line, default=None)
        delay = duration_field(obj, "delay_after_dependencies_ms", path, line)
        yield Row(line, ready, isl, osl, hash_ids(obj, isl, tbs, path, line),
                  id_field(obj, "session_id", path, line), key, tuple(wait_for), delay,
                  priority=priority_field(obj, path, line), ts_field="first_ready_timestamp_ms")
