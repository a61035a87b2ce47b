"""What every trace reader uses: :class:`TraceError`, the line and field parsers that raise
it with ``FILE:LINE``, and :class:`Row`, the parsed request a format reader yields.

Field helpers take the parsed JSON object, the field name, and ``path, line`` for the error.
"""

from __future__ import annotations

import json
import math
import os
from typing import Any, Optional

__all__ = ["Row", "TraceError", "hash_ids", "id_field", "int_field", "json_object", "json_type",
           "number_field", "priority_field", "read_lines"]


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


def json_type(value: Any) -> str:
    """The JSON name of a parsed value's type (object, array, string, number, boolean, null)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return {dict: "object", list: "array", str: "string"}.get(type(value), "number")


def int_field(obj: dict, name: str, minimum: int, path: str, line: int) -> int:
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


def read_lines(path: str):
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


def json_object(text: str, path: str, line: int, expected: str) -> dict:
    try:
        obj: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(path, line, f"not valid JSON ({exc.msg}, column {exc.colno}); "
                         "expected one JSON object per line") from None
    except RecursionError:
        raise TraceError(path, line, "JSON nested too deeply; expected one flat object per line") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, f"found a JSON {json_type(obj)}; expected an object with {expected}")
    return obj


def number_field(obj: dict, name: str, path: str, line: int, default: Any = ...) -> Optional[float]:
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


def hash_ids(obj: dict, isl: int, tbs: int, path: str, line: int,
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


def id_field(obj: dict, name: str, path: str, line: int):
    key = obj.get(name)
    if key is not None and isinstance(key, (bool, float, list, dict)):
        raise TraceError(path, line, f"field {name!r} is {key!r}; expected a string or an integer")
    return key


class Row:
    """One parsed request, before ids and dependencies are resolved: what a format reader
    yields, one per request, in file order.

    ``line``: its line number (for errors). ``ts_ms``: arrival (or ready) time in the file's
    milliseconds, rebased later; ``None`` for a follow-up turn that has none. ``isl``,
    ``osl``: prompt and output tokens. ``ids``: its prompt's hash ids (a tuple) or ``None``.
    ``session``: its session's key in the file, or ``None``. Dependencies come one of two ways:
    with a ``key`` (the request's id in the file), it waits for the rows whose keys are in
    ``wait_for``; without one, a row waits for the previous row of its ``session``. Either way
    it arrives ``delay_ms`` after what it waits for ends. ``tbs``: tokens per hash id when the
    file says (else the spec's ``trace_block_size``). ``priority``: > 0, default 1.
    """

    __slots__ = ("line", "ts_ms", "isl", "osl", "ids", "session", "key", "wait_for", "delay_ms", "tbs",
                 "priority")

    def __init__(self, line, ts_ms, isl, osl, ids=None, session=None, key=None, wait_for=(), delay_ms=0.0,
                 tbs=None, priority=1.0):
        self.line, self.ts_ms, self.isl, self.osl, self.ids = line, ts_ms, isl, osl, ids
        self.session, self.key, self.wait_for, self.delay_ms = session, key, wait_for, delay_ms
        self.tbs = tbs  #: tokens per hash id when the file says (else the spec's)
        self.priority = priority


def priority_field(obj: dict, path: str, line: int) -> float:
    """The optional ``priority`` field of a JSONL line: a number > 0 (default 1)."""
    value = obj.get("priority")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e15 \
            or not math.isfinite(value):
        raise TraceError(path, line, f"field 'priority' is {value!r}; expected a number > 0")
    return float(value)
