"""Any workload spec as requests: a trace file (:mod:`simkit.workload.reader`) or a synthetic
workload (:mod:`simkit.workload.synthetic`), all at once (:func:`load_workload`) or one request
at a time for a streamed run (:func:`iter_workload`). What the composition root calls.
"""

from __future__ import annotations

from typing import Iterator

from simkit.core.request import Request
from simkit.spec import TraceWorkload, WorkloadSpec
from simkit.workload.reader import load_trace, stream_trace
from simkit.workload.synthetic import iter_synthetic, synthesize

__all__ = ["iter_workload", "load_workload"]


def load_workload(spec: WorkloadSpec, seed: int) -> tuple[Request, ...]:
    """The requests of any workload spec (trace file or synthetic).

    Raises:
        TraceError: for a trace file that is missing or malformed.
    """
    if isinstance(spec, TraceWorkload):
        return load_trace(spec)
    return synthesize(spec, seed)


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
