"""Workload sources: the Mooncake JSONL loader and the synthetic generator.

Both return a tuple of :class:`~simkit.request.Request` sorted (stably) by arrival, with
time zero at the earliest arrival and times in seconds: milliseconds appear only here.
Layer L2: imports config, request, rng, units; no SimPy.
"""

from __future__ import annotations

import json
import math
import os
import random
from typing import Any, Iterable

from simkit.config import (
    FixedLength,
    LengthSpec,
    LognormalLength,
    MooncakeTrace,
    PoissonArrival,
    SyntheticWorkload,
    UniformLength,
    WorkloadSpec,
)
from simkit.request import Request
from simkit.rng import RngStreams
from simkit.units import S_PER_MS

__all__ = ["TraceError", "load_mooncake", "load_workload", "synthesize"]


class TraceError(Exception):
    """A trace file is missing or malformed.

    ``str(error)`` is one line: ``FILE:LINE: what was found, and what was expected``.
    """

    def __init__(self, path: str, line: int | None, message: str) -> None:
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
        self.path, self.line, self.message = path, line, message


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


def _parse_mooncake_line(text: str, path: str, line: int, tbs: int) -> tuple[float, int, int, tuple | None]:
    try:
        obj: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TraceError(path, line, f"not valid JSON ({exc.msg} at column {exc.colno}); "
                         "expected one JSON object per line") from None
    if not isinstance(obj, dict):
        raise TraceError(path, line, f"found a JSON {_json_type(obj)}; expected an object "
                         "with timestamp, input_length, output_length, hash_ids")
    if "timestamp" not in obj:
        raise TraceError(path, line, "missing field 'timestamp' (expected milliseconds >= 0)")
    ts = obj["timestamp"]
    try:
        ok = not isinstance(ts, bool) and isinstance(ts, (int, float)) and math.isfinite(float(ts)) and ts >= 0
    except OverflowError:
        ok = False
    if not ok:
        shown = repr(ts) if len(repr(ts)) <= 40 else repr(ts)[:37] + "..."
        raise TraceError(path, line, f"field 'timestamp' is {shown}; expected finite milliseconds >= 0")
    isl = _int_field(obj, "input_length", 1, path, line)
    osl = _int_field(obj, "output_length", 0, path, line)
    ids = obj.get("hash_ids")
    hash_ids = None
    if ids is not None:
        if not isinstance(ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 0 for h in ids
        ):
            raise TraceError(path, line, "field 'hash_ids' must be a list of integers >= 0")
        if isl > len(ids) * tbs:
            raise TraceError(
                path, line,
                f"input_length {isl} is larger than its hash_ids cover "
                f"({len(ids)} ids * trace_block_size {tbs} = {len(ids) * tbs} tokens)",
            )
        hash_ids = tuple(ids[: -(-isl // tbs)])
    return float(ts), isl, osl, hash_ids


def load_mooncake(spec: MooncakeTrace) -> tuple[Request, ...]:
    """Load a Mooncake JSONL trace (REFERENCE.md section 2).

    Each non-blank line is ``{"timestamp": ms, "input_length": int >= 1, "output_length":
    int >= 0, "hash_ids": [int, ...]}``; ``hash_ids`` may be absent (no prefix sharing).
    Request ids are 0-based indices among non-blank lines; arrivals are rebased to the
    earliest timestamp, divided by ``arrival_speedup_ratio`` and sorted stably. A UTF-8 BOM
    and CRLF line endings are accepted; surplus ``hash_ids`` are ignored.

    Raises:
        TraceError: missing file, a directory, an empty trace, or a malformed line
            (``FILE:LINE: reason``).
    """
    path = spec.path
    if os.path.isdir(path):
        raise TraceError(path, None, "is a directory; expected a Mooncake JSONL trace file")
    rows = []
    try:
        with open(path, encoding="utf-8-sig") as f:
            for lineno, text in enumerate(f, start=1):
                if not text.strip():
                    continue
                rows.append(_parse_mooncake_line(text, path, lineno, spec.trace_block_size))
    except OSError as exc:
        raise TraceError(path, None, f"cannot read trace: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(path, None, f"not UTF-8 text ({exc.reason}); expected JSONL") from None
    if not rows:
        raise TraceError(path, None, "the trace has no requests; expected JSONL lines")
    t0 = min(r[0] for r in rows)
    speedup = spec.arrival_speedup_ratio
    requests = [
        Request(rid, (ts - t0) / speedup * S_PER_MS, isl, osl, ids, spec.trace_block_size)
        for rid, (ts, isl, osl, ids) in enumerate(rows)
    ]
    requests.sort(key=lambda r: r.arrived_at)  # stable: equal times keep file order
    return tuple(requests)


def _sampler(spec: LengthSpec, rng: random.Random):
    if isinstance(spec, FixedLength):
        return lambda: spec.value
    if isinstance(spec, UniformLength):
        return lambda: rng.randint(spec.low, spec.high)
    if isinstance(spec, LognormalLength):
        mu = math.log(spec.mean) - spec.sigma**2 / 2.0
        hi = spec.max if spec.max is not None else math.inf

        def draw() -> int:
            return int(min(max(round(rng.lognormvariate(mu, spec.sigma)), spec.min), hi))

        return draw
    raise TypeError(f"unknown length spec {spec!r}")


def _arrival_times(spec: PoissonArrival, n: int, rng: random.Random) -> Iterable[float]:
    t = 0.0
    for i in range(n):
        if i:
            t += rng.expovariate(spec.rate_per_s)
        yield t


def synthesize(spec: SyntheticWorkload, seed: int) -> tuple[Request, ...]:
    """Generate ``spec.num_requests`` requests from the scenario ``seed``.

    Streams: ``arrivals`` (Poisson: exponential gaps, the first request at time 0),
    ``input_tokens``, ``output_tokens`` and ``prefix_groups``. With ``shared_prefix``, each
    request joins a uniformly drawn group and its leading ``prefix_tokens // trace_block_size``
    full identity blocks are the group's; all other blocks are unique to the request.
    """
    streams = RngStreams(seed)
    times = _arrival_times(spec.arrival, spec.num_requests, streams.get("arrivals"))
    draw_in = _sampler(spec.input_tokens, streams.get("input_tokens"))
    draw_out = _sampler(spec.output_tokens, streams.get("output_tokens"))
    groups_rng = streams.get("prefix_groups")
    tbs = spec.trace_block_size
    shared = spec.shared_prefix
    shared_blocks = shared.prefix_tokens // tbs if shared else 0
    next_id = shared.num_groups * shared_blocks if shared else 0
    out = []
    for rid, at in enumerate(times):
        isl, osl = draw_in(), draw_out()
        n_blocks = -(-isl // tbs)
        ids: list[int] = []
        if shared:
            g = groups_rng.randrange(shared.num_groups)
            ids = [g * shared_blocks + j for j in range(min(shared_blocks, n_blocks))]
        rest = n_blocks - len(ids)
        ids.extend(range(next_id, next_id + rest))
        next_id += rest
        out.append(Request(rid, at, isl, osl, tuple(ids), tbs))
    return tuple(out)


def load_workload(spec: WorkloadSpec, seed: int) -> tuple[Request, ...]:
    """The requests of any workload spec (trace file or synthetic).

    Raises:
        TraceError: for a trace file that is missing or malformed.
    """
    if isinstance(spec, MooncakeTrace):
        return load_mooncake(spec)
    return synthesize(spec, seed)
