"""Format detection (``format: auto``): a trace's format from its first non-blank line.

A format that can be told from its first line gets a rule here. JSONL lines are told apart by
their parsed keys (never by a substring of the text, which a value or another field's name
could contain): a line whose keys fit two formats is refused, naming both, rather than read
as one of them with the other's fields dropped. ``mooncake`` is the JSONL fallback.
"""

from __future__ import annotations

import json

from simkit.spec import TRACE_FORMATS
from simkit.workload.common import TraceError, read_lines

__all__ = ["detect_format"]

#: keys that only an agentic line has (``request_id`` alone is told apart below)
AGENTIC_KEYS = ("wait_for", "first_ready_timestamp_ms", "delay_after_dependencies_ms", "max_output_tokens")
#: keys that only a Mooncake line has
MOONCAKE_KEYS = ("timestamp", "delay", "delay_ms")


def _jsonl_format(obj: dict, path: str, line: int) -> str:
    keys = set(obj)
    if isinstance(obj.get("requests"), list):
        return "weka"
    if "prefix_blocks_prev" in keys or {"session", "agent"} <= keys:
        return "weka_requests"
    agentic = [k for k in AGENTIC_KEYS if k in keys]
    mooncake = [k for k in MOONCAKE_KEYS if k in keys]
    if agentic and mooncake:
        raise TraceError(path, line, f"the first line has agentic field {agentic[0]!r} and Mooncake field "
                                     f"{mooncake[0]!r}, so its format is ambiguous; set workload.format "
                                     "(agentic or mooncake)")
    if agentic or ("request_id" in keys and not mooncake):
        return "agentic"
    return "mooncake"


def detect_format(path: str) -> str:
    """The trace format of ``path`` from its first non-blank line.

    Raises:
        TraceError: the file is unreadable, empty, its first line fits no format, or fits two.
    """
    first = next(read_lines(path), None)
    if first is None:
        raise TraceError(path, None, "the trace has no requests; expected JSONL or CSV lines")
    line, text = first
    not_json = object()
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        obj = not_json
    if isinstance(obj, dict):
        return _jsonl_format(obj, path, line)
    if obj is not not_json or text[0] in "{[":  # JSON but not an object: the reader says what it expected
        return "mooncake"
    header = [h.strip() for h in text.split(",")]
    if sorted(header) == sorted(["TIMESTAMP", "ContextTokens", "GeneratedTokens"]):
        return "azure"
    if "arrival_ms" in header:
        return "csv"
    raise TraceError(path, line, "cannot tell the trace format from the first line; set workload.format to one "
                                 f"of: {', '.join(TRACE_FORMATS)}")
