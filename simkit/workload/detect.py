"""Format detection (``format: auto``): a trace's format from its first non-blank line.

A format that can be told from its first line gets a rule here; the JSONL rules are tried in
order, most specific first, and ``mooncake`` is the JSONL fallback.
"""

from __future__ import annotations

import json

from simkit.workload.common import TraceError, read_lines

__all__ = ["detect_format"]


def detect_format(path: str) -> str:
    """The trace format of ``path`` from its first non-blank line.

    Raises:
        TraceError: the file is unreadable, empty, or its first line fits no format.
    """
    first = next(read_lines(path), None)
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
