"""Synthetic workloads (``kind: synthetic``): length samplers, arrival processes, sessions,
shared prefixes and priorities, drawn from the scenario seed's named streams.
"""

from __future__ import annotations

import math
import random
from typing import Iterable, Iterator

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
    ZipfLength,
)
from simkit.core.request import Request
from simkit.core.rng import RngStreams
from simkit.workload.reader import load_trace

__all__ = ["iter_synthetic", "synthesize"]


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
