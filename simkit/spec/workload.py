"""Workload specs: synthetic generators (lengths, arrivals, sessions, shared prefixes,
priorities) and trace replay (:class:`TraceWorkload`). The generators and readers themselves
are in :mod:`simkit.workload`.

Imports :mod:`simkit.spec.base` only.
"""

from __future__ import annotations

from typing import Literal, Optional, Union, get_args

from attrs import field, frozen

from simkit.core.units import MAX_SIM_TIME_S, MAX_SIM_TIME_TEXT
from simkit.spec.base import _at_least, _at_most, _count, _finite, _nonneg, _pos, _positive, _rate, _tokens


#: a trace file's format (``auto``: detected from its first line)
TraceFormat = Literal["auto", "mooncake", "agentic", "azure", "csv", "weka", "weka_requests"]
#: the trace formats simkit reads, for messages and help texts
TRACE_FORMATS = get_args(TraceFormat)[1:]


@frozen
class FixedLength:
    """Every request has ``value`` tokens."""

    kind: Literal["fixed"] = "fixed"
    value: int = field(default=1, validator=_tokens)  #: tokens


@frozen
class UniformLength:
    """Integer lengths drawn uniformly from ``[low, high]`` (both inclusive)."""

    kind: Literal["uniform"] = "uniform"
    low: int = field(default=1, validator=_tokens)  #: tokens
    high: int = field(default=1, validator=_tokens)  #: tokens

    def __attrs_post_init__(self) -> None:
        if self.high < self.low:
            raise ValueError(f"'high' must be >= 'low' ({self.low}): {self.high}")


@frozen
class LognormalLength:
    """Lognormal lengths with the given ``mean`` (tokens) and log-space ``sigma``.

    The underlying normal has mu = ln(mean) - sigma^2 / 2, so the lognormal's mean is
    ``mean``; samples are rounded to the nearest integer and clipped to ``[min, max]``.
    """

    kind: Literal["lognormal"] = "lognormal"
    mean: float = field(default=1000.0, validator=_pos + [_at_most(1 << 31)])  #: tokens
    sigma: float = field(default=1.0, validator=_nonneg + [_at_most(10)])  #: log-space standard deviation
    min: int = field(default=1, validator=_tokens)  #: tokens, lower clip
    max: Optional[int] = field(default=None, validator=_tokens)  #: tokens, upper clip (None: none)

    def __attrs_post_init__(self) -> None:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"'max' must be >= 'min' ({self.min}): {self.max}")


@frozen
class NormalLength:
    """Normal lengths (``mean``, ``std`` tokens), rounded and clipped to ``[min, max]``."""

    kind: Literal["normal"] = "normal"
    mean: float = field(default=1000.0, validator=_pos + [_at_most(1 << 31)])  #: tokens
    std: float = field(default=100.0, validator=_nonneg + [_at_most(1 << 31)])  #: tokens
    min: int = field(default=1, validator=_tokens)
    max: Optional[int] = field(default=None, validator=_tokens)

    def __attrs_post_init__(self) -> None:
        if self.max is not None and self.max < self.min:
            raise ValueError(f"'max' must be >= 'min' ({self.min}): {self.max}")


@frozen
class ZipfLength:
    """Zipf (power-law) lengths on ``[min, max]``: P(n) proportional to (n - min + 1)^-alpha,
    so most requests are short and a few are very long; ``alpha`` > 1."""

    kind: Literal["zipf"] = "zipf"
    alpha: float = field(default=1.5, validator=_pos + [_at_most(100)])
    min: int = field(default=1, validator=_tokens)
    max: int = field(default=32768, validator=_tokens)

    def __attrs_post_init__(self) -> None:
        if self.alpha <= 1.0:
            raise ValueError(f"'alpha' must be > 1: {self.alpha}")
        if self.max < self.min:
            raise ValueError(f"'max' must be >= 'min' ({self.min}): {self.max}")


@frozen
class EmpiricalLength:
    """Lengths drawn uniformly from a trace file's requests: their prompt (``field: input``)
    or output (``field: output``) lengths. ``path`` resolves like the workload's."""

    kind: Literal["empirical"] = "empirical"
    path: str = ""
    field: Literal["input", "output"] = "input"
    format: TraceFormat = "auto"

    def __attrs_post_init__(self) -> None:
        if not self.path:
            raise ValueError("'path' must name a trace file")


LengthSpec = Union[FixedLength, UniformLength, LognormalLength, NormalLength, ZipfLength, EmpiricalLength]


@frozen
class PoissonArrival:
    """Poisson arrivals (exponential inter-arrival times) at ``rate_per_s`` requests/s."""

    kind: Literal["poisson"] = "poisson"
    rate_per_s: float = field(default=1.0, validator=_rate)


@frozen
class GammaArrival:
    """Gamma inter-arrival times at ``rate_per_s`` with coefficient of variation ``cv``
    (burstiness: 1 is Poisson, above 1 bursty, below 1 smoother)."""

    kind: Literal["gamma"] = "gamma"
    rate_per_s: float = field(default=1.0, validator=_rate)
    cv: float = field(default=2.0, validator=_pos + [_at_least(0.01, zero_ok=False), _at_most(100)])


@frozen
class ConstantArrival:
    """Evenly spaced arrivals, ``1 / rate_per_s`` apart."""

    kind: Literal["constant"] = "constant"
    rate_per_s: float = field(default=1.0, validator=_rate)


@frozen
class RateSegment:
    """``duration_s`` seconds of Poisson arrivals at ``rate_per_s`` (0: none)."""

    duration_s: float = field(default=60.0, validator=_pos)
    rate_per_s: float = field(default=1.0, validator=_nonneg + [_at_least(1e-9)])


@frozen
class PiecewiseArrival:
    """Poisson arrivals whose rate follows ``segments`` in turn, the pattern repeating."""

    kind: Literal["piecewise"] = "piecewise"
    segments: list[RateSegment] = field(factory=lambda: [RateSegment()])

    def __attrs_post_init__(self) -> None:
        if not self.segments or not any(seg.rate_per_s > 0 for seg in self.segments):
            raise ValueError("'segments' must have at least one segment with rate_per_s > 0")
        object.__setattr__(self, "segments", list(self.segments))


@frozen
class DiurnalArrival:
    """Poisson arrivals with a sinusoidal rate: ``mean_rate_per_s`` * (1 + ``amplitude`` *
    sin(2 pi (t - ``phase_s``) / ``period_s``)), ``amplitude`` in [0, 1] (drawn by thinning)."""

    kind: Literal["diurnal"] = "diurnal"
    mean_rate_per_s: float = field(default=1.0, validator=_rate)
    amplitude: float = field(default=0.5, validator=_nonneg)
    period_s: float = field(default=86400.0, validator=_pos)
    phase_s: float = field(default=0.0, validator=_finite)

    def __attrs_post_init__(self) -> None:
        if self.amplitude > 1.0:
            raise ValueError(f"'amplitude' must be <= 1: {self.amplitude}")


ArrivalSpec = Union[PoissonArrival, GammaArrival, ConstantArrival, PiecewiseArrival, DiurnalArrival]


@frozen
class SyntheticSessions:
    """Multi-turn sessions: arrivals start sessions; each has ``turns`` turns (a length
    distribution used as a count). Turn k+1 is sent an exponential think time of mean
    ``think_time_s`` after turn k completes, and its prompt is turn k's prompt plus a new
    user message drawn from ``input_tokens`` (so the history hits the prefix cache)."""

    turns: LengthSpec = field(factory=lambda: UniformLength(low=2, high=6))
    think_time_s: float = field(default=10.0, validator=_nonneg)


@frozen
class SharedPrefix:
    """Shared-prefix groups: each request belongs to one of ``num_groups`` groups (uniformly at
    random) and its first ``prefix_tokens`` tokens (cut to its length) are the group's prefix,
    so they can hit the prefix cache of a worker that served the same group."""

    num_groups: int = field(default=8, validator=_count)
    prefix_tokens: int = field(default=1024, validator=_tokens)


@frozen
class PriorityClass:
    """Requests of priority ``value`` (> 0; higher is more important) make ``share`` of the
    workload (shares are relative weights)."""

    value: float = field(default=1.0, validator=_pos)
    share: float = field(default=1.0, validator=_pos)


@frozen
class SyntheticWorkload:
    """Generated requests: arrivals, input and output lengths, optional shared prefixes.

    Each aspect draws from its own named random stream of the scenario seed, so changing one
    does not change the others. Arrivals: poisson, gamma (burstiness ``cv``), constant,
    piecewise (rate segments) or diurnal; lengths: fixed, uniform, normal, lognormal, zipf or
    empirical (from a trace file). ``trace_block_size`` is the token granularity of the prompt
    identities it generates (16, vLLM's default block size; it must divide the engine's).
    """

    kind: Literal["synthetic"] = "synthetic"
    num_requests: int = field(default=1000, validator=[_positive, _at_most(100_000_000)])
    arrival: ArrivalSpec = field(factory=PoissonArrival)
    input_tokens: LengthSpec = field(factory=lambda: LognormalLength(mean=2000.0, sigma=0.8))
    output_tokens: LengthSpec = field(factory=lambda: UniformLength(low=50, high=400))
    shared_prefix: Optional[SharedPrefix] = None
    trace_block_size: int = field(default=16, validator=_tokens)  #: tokens per prompt identity block
    #: multi-turn sessions (``num_requests`` then counts turns; arrivals start sessions)
    sessions: Optional[SyntheticSessions] = None
    #: request priorities drawn per request (null: every request has priority 1)
    priorities: Optional[list[PriorityClass]] = None

    def __attrs_post_init__(self) -> None:
        if self.priorities is not None:
            if not self.priorities:
                raise ValueError("'priorities' must list at least one {value, share}")
            object.__setattr__(self, "priorities", list(self.priorities))
        span = (self.num_requests - 1) / _mean_rate_per_s(self.arrival)
        if span > MAX_SIM_TIME_S:
            raise ValueError(f"{self.num_requests} requests at a mean rate of {_mean_rate_per_s(self.arrival):g}/s "
                             f"arrive over about {span:.3g} s, beyond {MAX_SIM_TIME_TEXT}; raise the rate or "
                             "lower num_requests")


@frozen
class TraceWorkload:
    """Requests replayed from a trace file (formats in :mod:`simkit.workload`).

    ``format``: ``mooncake`` (JSONL; optional ``session_id`` + ``delay``/``delay_ms`` for
    multi-turn sessions), ``agentic`` (JSONL with ``request_id``, ``wait_for`` dependencies and
    ``delay_after_dependencies_ms``), ``azure`` (the Azure LLM inference CSV) or ``csv`` (a
    header with ``arrival_ms``, ``input_length``, ``output_length``); ``auto`` tells them apart
    from the file's first line. ``path`` is resolved against the scenario file's folder
    (``--trace`` against the current folder) and written absolute into the resolved scenario.
    ``weka`` (kv-cache-tester agentic sessions, nested subagents) and ``weka_requests`` (its
    flattened per-request form) are sessions without a common clock: they start together, or
    ``sessions_per_s`` apart, or under ``max_in_flight``.
    Time zero is the earliest timestamp of a request that waits for nothing (a follow-up
    turn's or a dependent request's timestamp is ignored and never moves it). Timestamps are
    divided by ``arrival_speedup_ratio`` (think times and dependency delays are not); every
    resulting time, chains of delays included, must stay within
    :data:`simkit.core.units.MAX_SIM_TIME_S` (the line that breaks it is refused). ``trace_block_size`` is the tokens per ``hash_ids`` entry (512 in the public Mooncake
    traces). ``max_in_flight`` switches to closed-loop replay: at most that many sessions (a
    request without a session is its own) run at once, each holding its slot from its first
    dispatch to its last completion, think time included; a request's arrival is its dispatch.
    """

    kind: Literal["trace"] = "trace"
    path: str = ""
    format: TraceFormat = "auto"
    trace_block_size: int = field(default=512, validator=_tokens)  #: tokens per hash id
    arrival_speedup_ratio: float = field(default=1.0, validator=_pos)
    max_in_flight: Optional[int] = field(default=None, validator=_count)  #: sessions (closed loop)
    #: weka formats (sessions without a common clock): start session k at k / rate seconds
    #: instead of all at 0
    sessions_per_s: Optional[float] = field(default=None, validator=_pos)

    def __attrs_post_init__(self) -> None:
        if not self.path:
            raise ValueError("'path' must name a trace file")
        if self.sessions_per_s is not None and self.format not in ("weka", "weka_requests"):
            raise ValueError("'sessions_per_s' applies to format weka or weka_requests (set format)")


WorkloadSpec = Union[SyntheticWorkload, TraceWorkload]


def _mean_rate_per_s(arrival: ArrivalSpec) -> float:
    """The long-run mean arrival rate (requests/s) of an arrival process."""
    if isinstance(arrival, PiecewiseArrival):
        segments = arrival.segments
        return sum(seg.rate_per_s * seg.duration_s for seg in segments) / sum(seg.duration_s for seg in segments)
    if isinstance(arrival, DiurnalArrival):
        return arrival.mean_rate_per_s
    return arrival.rate_per_s

