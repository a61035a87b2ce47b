"""What every trace reader uses: :class:`TraceError`, the line and field parsers that raise
it with ``FILE:LINE``, and :class:`Row`, the parsed request a format reader yields.

Field helpers take the parsed JSON object, the field name, and ``path, line`` for the error.
"""

from __future__ import annotations

import json
import math
from typing import Any, Optional

from simkit.core.files import NotRegularFile, open_regular
from simkit.core.units import MAX_SIM_TIME_MS, MAX_SIM_TIME_S
from simkit.spec.base import sci

__all__ = ["MAX_LINE_BLOCKS", "MAX_TOKENS", "Row", "TraceError", "duration_field", "foreign_fields", "hash_ids",
           "id_field", "int_field", "json_object", "json_type", "number_field", "priority_field", "read_lines", "shown"]

#: the most tokens a trace line's length (or block size) may have: the scenario's own token
#: limit (2^31, ``_tokens`` in simkit.spec.base)
MAX_TOKENS = 1 << 31
#: the most prompt blocks a reader may synthesize for one line (``weka_requests`` rebuilds hash
#: ids from lengths): a bigger prompt would take gigabytes before the run even starts
MAX_LINE_BLOCKS = 1 << 22


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


def shown(value: Any) -> str:
    """A field's value as a message shows it: its JSON text (``false``, ``{}``), cut short."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def int_field(obj: dict, name: str, minimum: int, path: str, line: int, maximum: int = MAX_TOKENS) -> int:
    """An integer field in ``[minimum, maximum]`` (a float with an integral value is accepted)."""
    expected = f"expected an integer from {minimum} to {maximum}"
    if name not in obj:
        raise TraceError(path, line, f"missing field {name!r} ({expected})")
    value = obj[name]
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise TraceError(path, line, f"field {name!r} is {shown(value)}; {expected}")
    return value


def _not_utf8(text: str, path: str, line: int) -> TraceError:
    """The error for a line read with ``surrogateescape`` that holds bytes UTF-8 does not
    decode: its line and the decoder's reason (``invalid start byte``...)."""
    try:
        text.encode("utf-8", "surrogateescape").decode("utf-8")
        reason = "invalid byte"
    except UnicodeDecodeError as exc:
        reason = exc.reason
    return TraceError(path, line, f"not UTF-8 text ({reason}); expected a text trace")


def read_lines(path: str):
    """Yield ``(line number, text)`` for the non-blank lines of a UTF-8 text file (a BOM and
    CRLF endings are fine).

    The file is decoded with ``surrogateescape``, so that a byte UTF-8 does not decode stops the
    read at its own line (a strict decoder fails on a whole buffered chunk, before the lines
    in it are counted); a line with one is refused. Only lines with non-ASCII text pay for the
    check.

    Raises:
        TraceError: a directory, an unreadable file, or a line that is not UTF-8 (``FILE:LINE``).
    """
    try:
        with open_regular(path, encoding="utf-8-sig", errors="surrogateescape") as f:
            for lineno, text in enumerate(f, start=1):
                if not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:  # a lone surrogate: an undecodable byte
                        raise _not_utf8(text, path, lineno) from None
                if text.strip():
                    yield lineno, text.strip()
    except NotRegularFile as exc:
        raise TraceError(path, None, f"{exc.strerror[0].lower()}{exc.strerror[1:]}; expected a trace file") from None
    except OSError as exc:
        raise TraceError(path, None, f"cannot read trace: {exc.strerror or exc}") from None


class _DuplicateKey(Exception):
    """A JSON object names a key twice (raised from inside the decoder)."""


def _unique_pairs(pairs: list) -> dict:
    """``object_pairs_hook``: the object, unless a key repeats (the json module would keep the
    last value silently)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


#: the decoder of trace lines: built once (json.loads with a hook builds one per call)
_DECODER = json.JSONDecoder(object_pairs_hook=_unique_pairs)


def json_object(text: str, path: str, line: int, expected: str) -> dict:
    """The JSON object of one trace line.

    Raises:
        TraceError: not JSON, not an object, nested too deeply, or a key given twice in one
            object (at any depth: the last would silently win).
    """
    try:
        obj: Any = _DECODER.decode(text)
    except _DuplicateKey as exc:
        raise TraceError(path, line, f"key {shown(exc.args[0])} appears twice in one object; expected each "
                                     "field once (JSON readers keep the last value silently)") from None
    except json.JSONDecodeError as exc:
        raise TraceError(path, line, f"not valid JSON ({exc.msg}, column {exc.colno}); "
                         "expected one JSON object per line") from None
    except RecursionError:
        raise TraceError(path, line, "JSON nested too deeply; expected one flat object per line") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, f"found a JSON {json_type(obj)}; expected an object with {expected}")
    return obj


#: units of time fields, as their messages name them
_UNIT_NAMES = {"ms": "milliseconds", "s": "seconds"}


def number_field(obj: dict, name: str, path: str, line: int, default: Any = ..., unit: str = "ms",
                 maximum: float = 1e15) -> Optional[float]:
    """A time field: a number from 0 to ``maximum`` in ``unit`` (``ms`` or ``s``, named in the
    message). Absolute timestamps may be large (epoch milliseconds): their span, once rebased
    and scaled, is checked by the reader against :data:`~simkit.core.units.MAX_SIM_TIME_S`."""
    expected = f"expected {_UNIT_NAMES[unit]} from 0 to {sci(maximum)}"
    if name not in obj or obj[name] is None:
        if default is not ...:
            return default
        raise TraceError(path, line, f"missing field {name!r} ({expected})")
    value = obj[name]
    try:
        ok = (not isinstance(value, bool) and isinstance(value, (int, float))
              and math.isfinite(float(value)) and 0 <= value <= maximum)
    except OverflowError:
        ok = False
    if not ok:
        raise TraceError(path, line, f"field {name!r} is {shown(value)}; {expected}")
    return float(value)


def duration_field(obj: dict, name: str, path: str, line: int, unit: str = "ms") -> float:
    """An optional duration (a delay or think time; 0 when absent) in ``unit``, at most the
    simulated time limit (:data:`~simkit.core.units.MAX_SIM_TIME_S`)."""
    limit = MAX_SIM_TIME_MS if unit == "ms" else MAX_SIM_TIME_S
    return number_field(obj, name, path, line, default=0.0, unit=unit, maximum=limit)


def foreign_fields(obj: dict, fields: dict, fmt: str, path: str, line: int) -> None:
    """Refuse a line carrying a field that means something only in another format (``fields``:
    name -> that format), which this reader would otherwise drop silently."""
    for name, other in fields.items():
        if name in obj:
            raise TraceError(path, line, f"field {name!r} belongs to the {other} format; this trace is read as "
                                         f"{fmt} (workload.format, or detected from its first line), which "
                                         f"would ignore it: set workload.format: {other}, or remove the field")


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
    milliseconds, rebased later; ``None`` when the line gives none (a follow-up turn, or an
    agentic request without ``first_ready_timestamp_ms``: a request without dependencies then
    arrives at time zero). ``ts_field``: the name of the time field (for errors). ``isl``,
    ``osl``: prompt and output tokens. ``ids``: its prompt's hash ids (a tuple) or ``None``.
    ``session``: its session's key in the file, or ``None``. Dependencies come one of two ways:
    with a ``key`` (the request's id in the file), it waits for the rows whose keys are in
    ``wait_for``; without one, a row waits for the previous row of its ``session``. Either way
    it arrives ``delay_ms`` after what it waits for ends. ``tbs``: tokens per hash id when the
    file says (else the spec's ``trace_block_size``). ``priority``: > 0, default 1.
    """

    __slots__ = ("line", "ts_ms", "isl", "osl", "ids", "session", "key", "wait_for", "delay_ms", "tbs",
                 "priority", "ts_field")

    def __init__(self, line, ts_ms, isl, osl, ids=None, session=None, key=None, wait_for=(), delay_ms=0.0,
                 tbs=None, priority=1.0, ts_field="timestamp"):
        self.line, self.ts_ms, self.isl, self.osl, self.ids = line, ts_ms, isl, osl, ids
        self.session, self.key, self.wait_for, self.delay_ms = session, key, wait_for, delay_ms
        self.tbs = tbs  #: tokens per hash id when the file says (else the spec's)
        self.priority = priority
        self.ts_field = ts_field


def priority_field(obj: dict, path: str, line: int) -> float:
    """The optional ``priority`` field of a JSONL line: a number > 0 (default 1)."""
    value = obj.get("priority")
    if value is None:
        return 1.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1e15 \
            or not math.isfinite(value):
        raise TraceError(path, line, f"field 'priority' is {value!r}; expected a number > 0")
    return float(value)
