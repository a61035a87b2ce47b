"""Scenario specs: frozen attrs classes, the one strict cattrs converter, and YAML loading.

A scenario file is YAML 1.2 (``1e-3`` is a number, ``no`` is a string, ``010`` is ten).
``load_scenario(path, overrides)`` reads it, applies dotted ``--set`` overrides, structures it
into a frozen :class:`Scenario` through :data:`converter` and raises :class:`ConfigError`
with one ``FILE: message @ $.path`` line per problem. ``dump_scenario`` writes the resolved
scenario back (every default filled in) so that loading it gives the same run.

Layer L1: imports attrs, cattrs and yaml; no simulation module imports cattrs or yaml.
Engine knob names follow vLLM (``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``,
``num_gpu_blocks``, ``enable_prefix_caching``, ``enable_chunked_prefill``).
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Literal, Optional, Union

import attrs
import cattrs
import yaml
from attrs import field, frozen
from cattrs.gen import make_dict_structure_fn
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError

from simkit.engine import hardware

__all__ = [
    "ConfigError",
    "Scenario",
    "converter",
    "dump_scenario",
    "load_scenario",
    "override",
    "scenario_from_dict",
    "yaml_load",
]


class ConfigError(Exception):
    """A scenario (or command-line override) is invalid.

    ``messages`` holds one human-readable line per problem, already prefixed with the
    source (file name) when known: ``scenarios/x.yaml: 'workers' must be >= 1: 0 @ $.pools.decode``.
    """

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = list(messages)


# ----------------------------------------------------------------------------- validators


class FieldValueError(ValueError):
    """A field validator's complaint; ``field`` completes the error path."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(message)
        self.field = field_name


#: the largest magnitude a float field accepts: beyond it sums overflow (ms, s, tokens, GB/s)
MAX_FLOAT = 1e15


def _finite(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and isinstance(value, float) and not math.isfinite(value):
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be a finite number: {value!r}")
    if value is not None and isinstance(value, float) and abs(value) > MAX_FLOAT:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be at most {MAX_FLOAT:g}: {value!r}")


def _at_least(limit: float, zero_ok: bool = True):
    """Values in (0, limit) are refused; 0 itself is left to the field's other validators
    (``zero_ok``: whether the message offers it)."""
    what = "0 or at least" if zero_ok else "at least"

    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and 0 < value < limit:
            raise FieldValueError(attribute.name, f"'{attribute.name}' must be {what} {limit:g}: {value!r}")

    return check


def _positive(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value > 0:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be > 0: {value!r}")


def _non_negative(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
    if value is not None and not value >= 0:
        raise FieldValueError(attribute.name, f"'{attribute.name}' must be >= 0: {value!r}")


def _at_most(limit: int):
    def check(_inst: Any, attribute: attrs.Attribute, value: Any) -> None:
        if value is not None and value > limit:
            raise FieldValueError(attribute.name, f"'{attribute.name}' must be <= {limit}: {value!r}")

    return check


_pos = [_finite, _positive]
_nonneg = [_finite, _non_negative]
#: rates (per second): below one event in 30 years the arrival times overflow
_rate = [_finite, _positive, _at_least(1e-9, zero_ok=False)]
#: sizes: positive and bounded (a typo like 10**20 workers must fail, not hang)
_count = [_positive, _at_most(1_000_000)]
_tokens = [_positive, _at_most(1 << 31)]

# ----------------------------------------------------------------------------- workload


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
    format: Literal["auto", "mooncake", "agentic", "azure", "csv", "weka", "weka_requests"] = "auto"

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
    Timestamps are divided by ``arrival_speedup_ratio`` (think times and dependency delays are
    not). ``trace_block_size`` is the tokens per ``hash_ids`` entry (512 in the public Mooncake
    traces). ``max_in_flight`` switches to closed-loop replay: at most that many sessions (a
    request without a session is its own) run at once, each holding its slot from its first
    dispatch to its last completion, think time included; a request's arrival is its dispatch.
    """

    kind: Literal["trace"] = "trace"
    path: str = ""
    format: Literal["auto", "mooncake", "agentic", "azure", "csv", "weka", "weka_requests"] = "auto"
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

# ----------------------------------------------------------------------------- latency


@frozen
class PolynomialLatency:
    """The reference's fixed per-pass polynomial (REFERENCE.md section 4, measured on
    ai-dynamo-runtime 1.6.1): P(n) for the prefill tokens of a pass plus D(a, C) for its
    decode requests, divided by ``speedup_ratio``.

    ``prefill_tokens_from_batch_means`` reproduces a quirk of the reference: it prices a pass
    of k prefilling requests at k * (integer mean of their prompt positions after the pass -
    integer mean before it) tokens, up to k - 1 off the tokens the pass computes. A real
    engine's cost follows the tokens computed (the default); set it true to agree with the
    reference pass for pass (``scenarios/reference_*.yaml`` do)."""

    kind: Literal["polynomial"] = "polynomial"
    speedup_ratio: float = field(default=1.0, validator=_pos)
    prefill_tokens_from_batch_means: bool = False


@frozen
class ConstantLatency:
    """Fixed pass times: ``prefill_ms`` if the pass has prefill tokens, plus ``decode_ms`` if it
    has decode requests (a mixed pass costs both, as in the reference's constant model)."""

    kind: Literal["constant"] = "constant"
    prefill_ms: float = field(default=10.0, validator=_pos)
    decode_ms: float = field(default=10.0, validator=_pos)
    speedup_ratio: float = field(default=1.0, validator=_pos)


def _load_or_fail(field_name: str, load, value: str):
    """Validate a name or path by loading it (returned); a HardwareError becomes the field's
    error."""
    try:
        return load(value)
    except hardware.HardwareError as exc:
        raise FieldValueError(field_name, str(exc)) from None


@frozen
class _Deployment:
    """The fields and methods of the latency specs that name a model on a GPU (see
    :class:`RooflineLatency`)."""

    model: str = "Llama-3.1-8B"
    gpu: str = "H100"
    tensor_parallel_size: int = field(default=1, validator=[_positive, _at_most(64)])
    precision: Literal["bf16", "fp8", "fp4"] = "bf16"
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = "auto"
    gpu_memory_utilization: float = field(default=0.9, validator=_pos + [_at_most(1)])
    reserved_memory_gib: float = field(default=3.5, validator=_nonneg)

    @property
    def kv_precision(self) -> str:
        return "bf16" if self.kv_cache_dtype == "auto" else self.kv_cache_dtype

    def kv_bytes_per_token(self) -> int:
        """Whole-model KV bytes per token (all TP ranks): what the handoff link moves."""
        return hardware.load_model(self.model).kv_bytes_per_token(self.kv_precision)

    def num_gpu_blocks(self, block_size: int) -> int:
        """KV blocks per worker from GPU memory (simkit.engine.hardware.kv_capacity_blocks).

        Raises:
            ValueError: the weights do not fit."""
        return hardware.kv_capacity_blocks(self, block_size)


@frozen
class RooflineLatency(_Deployment):
    """Pass time from the model's architecture and the GPU's capabilities (simkit.engine.latency.
    RooflineModel): per layer, GEMM, attention (prefill and decode apart), tensor-parallel
    all-reduce and fixed overheads, each op max(FLOPs / compute, bytes / bandwidth).

    ``model`` is a shipped name (``simkit.engine.hardware.model_names()``) or a config.json path
    (relative to the scenario file); ``gpu`` a shipped GPU (``gpu_names()``). Weights of linear
    layers are stored and multiplied in ``precision``; the KV cache in ``kv_cache_dtype``
    (vLLM's name; ``auto``: bf16). ``gpu_memory_utilization`` (vLLM's name and default) and
    ``reserved_memory_gib`` (activations, CUDA graphs, NCCL buffers: 3.5 GiB, aiconfigurator's
    ``other_mem``) size the KV cache when a pool leaves ``num_gpu_blocks`` unset.
    ``tp`` is accepted for ``tensor_parallel_size``. Efficiencies and overheads come from
    ``simkit/data/calibration.json`` for the GPU (and ``backend``, when given and fitted);
    ``layer_overhead_us``, ``pass_overhead_ms``, ``sequence_overhead_us``,
    ``request_layer_overhead_us`` and ``allreduce_latency_us`` override the fitted overheads.
    """

    kind: Literal["roofline"] = "roofline"
    #: serving engine whose fitted fixed overheads apply (null: the GPU's fit over all engines)
    backend: Optional[Literal["vllm", "sglang", "trtllm"]] = None
    #: override the fitted fixed time per layer (us) and per pass (ms); null: the fit
    layer_overhead_us: Optional[float] = field(default=None, validator=_nonneg)
    pass_overhead_ms: Optional[float] = field(default=None, validator=_nonneg)
    #: override the fitted host time per request sampled in a pass (us); null: the fit
    sequence_overhead_us: Optional[float] = field(default=None, validator=_nonneg)
    #: override the fitted time per layer of each request sampled in a pass (us); null: the fit
    request_layer_overhead_us: Optional[float] = field(default=None, validator=_nonneg)
    #: override the fitted fixed time of one tensor-parallel all-reduce (us); null: the fit
    allreduce_latency_us: Optional[float] = field(default=None, validator=_nonneg)
    speedup_ratio: float = field(default=1.0, validator=_pos)

    def __attrs_post_init__(self) -> None:
        arch = _load_or_fail("model", hardware.load_model, self.model)
        _load_or_fail("gpu", hardware.load_gpu, self.gpu)
        try:
            hardware.check_tensor_parallel(arch, self.tensor_parallel_size)
        except ValueError as exc:
            raise FieldValueError("tensor_parallel_size", str(exc)) from None



@frozen
class AicLatency(_Deployment):
    """Pass times from NVIDIA aiconfigurator's measured per-op database (simkit.engine.latency.aic.AicModel),
    behind a cache of geometric buckets (``bucket_steps_per_octave``). Needs the optional
    ``aiconfigurator-core`` package (``pip install simkit[aic]``). ``model`` is a shipped model
    name, ``gpu`` a shipped GPU; ``backend`` (default vllm) and ``aic_version`` (default: the
    latest) pick the database. KV capacity and link bytes are derived as for ``roofline``."""

    kind: Literal["aic"] = "aic"
    backend: Optional[Literal["vllm", "sglang", "trtllm"]] = None
    aic_version: Optional[str] = None
    #: cache grid: points per doubling of each shape dimension
    bucket_steps_per_octave: int = field(default=64, validator=[_positive, _at_most(1024)])
    # (a power of two gives the grid of simkit.engine.latency.aic.bucket; others are rounded down to one)
    speedup_ratio: float = field(default=1.0, validator=_pos)

    def __attrs_post_init__(self) -> None:
        import importlib.util

        if importlib.util.find_spec("aiconfigurator_core") is None:
            raise FieldValueError("kind", "the aic latency model needs aiconfigurator-core: "
                                          "pip install 'simkit[aic]' (or aiconfigurator-core)")
        _load_or_fail("model", hardware.aic_model_path, self.model)
        _load_or_fail("gpu", hardware.aic_system, self.gpu)


@frozen
class TableLatency:
    """Pass times interpolated from a measured per-pass CSV (``path``, relative to the scenario
    file; header ``prefill_tokens,decode_requests,decode_context_tokens,pass_ms``; see
    ``simkit.engine.hardware.load_pass_table`` and ``simkit.engine.latency.TableModel``)."""

    kind: Literal["table"] = "table"
    path: str = ""
    speedup_ratio: float = field(default=1.0, validator=_pos)

    def __attrs_post_init__(self) -> None:
        _load_or_fail("path", hardware.load_pass_table, self.path)


LatencySpec = Union[PolynomialLatency, ConstantLatency, RooflineLatency, TableLatency, AicLatency]

#: aliases accepted in a latency mapping, renamed before structuring
_LATENCY_ALIASES = {"tp": "tensor_parallel_size"}
#: KV blocks per worker when a pool leaves ``num_gpu_blocks`` unset and the latency model does
#: not derive it (the reference mocker's default)
DEFAULT_NUM_GPU_BLOCKS = 16384

# ----------------------------------------------------------------------------- cluster


@frozen
class SglangSpec:
    """SGLang scheduler settings (``backend: sglang``), with SGLang's names and defaults (the
    reference's too). SGLang's ``page_size`` is the pool's ``block_size``.

    A pass is either an extend (prefill) pass or a decode pass, never mixed: while waiting
    prompts can be admitted, running requests do not decode. An extend pass admits waiting
    requests in ``schedule_policy`` order (fifo: arrival; lpm: longest cached prefix first,
    fifo beyond 128 waiting) while ``max_num_seqs`` allows and each fits three budgets: the
    chunk budget ``chunked_prefill_size`` (null: ``max_num_batched_tokens``), which a prompt
    longer than what is left of it takes in a page-aligned chunk; ``max_prefill_tokens`` for
    the prompts admitted whole; and the KV tokens left after reserving, for every running
    request, ``new_token_ratio`` x its remaining output clipped to ``clip_max_new_tokens``
    (the candidate reserves its own clipped output in full). ``new_token_ratio`` starts at
    0.7 x ``schedule_conservativeness``, decays linearly over 600 passes to 0.14 of that, and
    resets when a decode pass must retract: a decode pass that cannot grow every running
    request by a token retracts the one with the fewest output tokens (its KV freed, its
    progress recomputed later) until it can.

    ``enable_mixed_chunk`` (SGLang's ``--enable-mixed-chunk``; only with chunked prefill, as
    SGLang's ``is_mixed_chunk``): an extend pass also decodes every running request that has
    its first token, and its chunk, ``max_prefill_tokens`` and KV budgets are first reduced by
    one token per such request (``PrefillAdder``'s ``mixed_with_decode_tokens``; sources:
    SGLang ``scheduler.py`` ``get_new_batch_prefill`` and ``schedule_batch.py``
    ``mix_with_running``). Where the running requests' next tokens would need more pages than
    are free, that extend pass runs without them and they decode in the next pass (which
    retracts as a decode pass does; SGLang allocates without a check there). Aggregated
    pools only (refused on prefill and decode pools). As in SGLang, a chunk budget not much
    above the running requests leaves prompts less than a page: they wait until fewer run.
    """

    schedule_policy: Literal["fifo", "lpm"] = "fifo"
    max_prefill_tokens: int = field(default=16384, validator=_tokens)  #: tokens per extend pass
    chunked_prefill_size: Optional[int] = field(default=None, validator=_tokens)  #: tokens
    clip_max_new_tokens: int = field(default=4096, validator=_tokens)  #: tokens
    schedule_conservativeness: float = field(default=1.0, validator=_pos + [_at_most(100)])
    #: charge ``max_prefill_tokens`` and the KV budget with the chunk a prompt takes in the
    #: pass, as the reference does, instead of its whole remaining prompt as SGLang's
    #: PrefillAdder does (there a long prompt waits for a pass of its own once another prompt
    #: is admitted and it exceeds what is left of ``max_prefill_tokens``). Measured: a 1000-
    #: and a 20000-token prompt arriving together share the reference's first pass (8168
    #: tokens); SGLang runs the 1000 alone.
    budgets_count_chunks: bool = False
    #: extend passes decode the running requests too (SGLang ``--enable-mixed-chunk``)
    enable_mixed_chunk: bool = False


@frozen
class TrtllmSpec:
    """TRT-LLM scheduler settings (``backend: trtllm``), with TRT-LLM's names and defaults
    (``TorchLlmArgs``; 0 disables each).

    Batch waiting (TRT-LLM's ``PyExecutor._waiting_requests``): when a pass would run both
    context (prefill) requests and generation (decode) requests, its context requests are held
    back, and the pass decodes only, until ``batch_wait_timeout_iters`` such passes have
    been held or the scheduled tokens (the whole prompts of the context requests plus one per
    decode) reach ``batch_wait_max_tokens_ratio`` x ``max_num_batched_tokens`` (TRT-LLM's
    ``max_num_tokens``); then they run and the count restarts. A pass without decodes never
    waits. It trades TTFT for larger prefill batches (InferenceMAX runs Llama-3.1-70B 1k/1k
    this way: 20 passes, ratio 0.9).
    """

    batch_wait_timeout_iters: int = field(default=0, validator=[_non_negative, _at_most(1_000_000)])  #: passes
    batch_wait_max_tokens_ratio: float = field(default=0.0, validator=_nonneg + [_at_most(1)])


@frozen
class PoolSpec:
    """One pool of identical workers and their vLLM-like engine settings.

    Defaults are the reference mocker's (``block_size`` 64, ``num_gpu_blocks`` 16384) and
    vLLM's (``max_num_batched_tokens`` 8192, ``max_num_seqs`` 256).
    """

    workers: int = field(default=1, validator=[_positive, _at_most(10_000)])  #: workers in the pool
    block_size: int = field(default=64, validator=_tokens)  #: tokens per KV cache block
    #: KV cache blocks per worker; null: from GPU memory with a roofline latency model, else 16384
    num_gpu_blocks: Optional[int] = field(default=None, validator=_tokens)
    max_num_batched_tokens: int = field(default=8192, validator=_tokens)  #: token budget per pass
    max_num_seqs: int = field(default=256, validator=_count)  #: running requests per pass
    #: longest request (prompt + output tokens) a worker serves, as vLLM's max_model_len;
    #: longer ones are rejected and counted. null: limited only by the KV cache
    max_model_len: Optional[int] = field(default=None, validator=_tokens)
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    #: GPUs of one worker are ``tensor_parallel_size`` x ``data_parallel_size``. They count
    #: GPU-hours and the planner's GPU budget; the latency model is per worker and does not
    #: change with them (give it the pass times of the whole TP x DP engine)
    tensor_parallel_size: int = field(default=1, validator=[_positive, _at_most(1024)])
    data_parallel_size: int = field(default=1, validator=[_positive, _at_most(1024)])
    #: planner only: a new worker is provisioned (counted) this long before it is routable
    startup_time_s: float = field(default=0.0, validator=_nonneg)
    #: planner only: bounds of the pool's target worker count (``max_workers`` null: only the
    #: GPU budget bounds it)
    min_workers: int = field(default=1, validator=[_non_negative, _at_most(10_000)])
    max_workers: Optional[int] = field(default=None, validator=[_positive, _at_most(10_000)])

    #: this pool's latency model when it differs from the scenario's (e.g. prefill and decode
    #: workers with different tensor_parallel_size); null: the scenario's ``latency``
    latency: Optional[LatencySpec] = None

    #: which running request gives up its KV under memory pressure: the newest (lifo, vLLM's
    #: default) or the oldest (fifo)
    preemption_mode: Literal["lifo", "fifo"] = "lifo"
    #: the engine whose scheduler the workers follow: vllm (default), trtllm (vLLM's core with
    #: TRT-LLM's GUARANTEED_NO_EVICT capacity scheduler: a request is admitted only when its
    #: whole prompt + output fits beside what running requests still may need, so nothing is
    #: ever preempted) or sglang (see ``sglang``)
    backend: Literal["vllm", "sglang", "trtllm"] = "vllm"
    #: the engine schedules each pass while the previous one runs (vLLM's
    #: ``--async-scheduling``; SGLang's overlap scheduler and TRT-LLM's overlap scheduler work
    #: the same way): a request or handoff that reaches a worker during a pass misses the
    #: pass already formed and joins the one after (a worker that was idle takes it at once)
    async_scheduling: bool = False
    #: SGLang scheduler settings; only with ``backend: sglang``
    sglang: SglangSpec = field(factory=SglangSpec)
    #: TRT-LLM scheduler settings; only with ``backend: trtllm``
    trtllm: TrtllmSpec = field(factory=TrtllmSpec)

    def __attrs_post_init__(self) -> None:
        if self.backend != "sglang" and self.sglang != SglangSpec():
            raise ValueError("'sglang' settings apply only to backend: sglang")
        if self.sglang.enable_mixed_chunk and not self.enable_chunked_prefill:
            raise ValueError("'sglang.enable_mixed_chunk' needs 'enable_chunked_prefill': true (SGLang "
                             "mixes decodes only into chunked-prefill passes)")
        if self.backend == "sglang" and self.enable_chunked_prefill:
            chunk = self.sglang.chunked_prefill_size or self.max_num_batched_tokens
            if chunk < self.block_size:
                what = ("'sglang.chunked_prefill_size'" if self.sglang.chunked_prefill_size
                        else "'max_num_batched_tokens' (the chunk budget)")
                raise ValueError(f"{what} ({chunk}) must be at least 'block_size' ({self.block_size}): "
                                 "SGLang cuts a long prompt into whole pages of the chunk budget")
        if self.backend != "trtllm" and self.trtllm != TrtllmSpec():
            raise ValueError("'trtllm' settings apply only to backend: trtllm")
        if self.backend != "vllm" and self.preemption_mode != "lifo":
            raise ValueError(f"'preemption_mode' applies only to backend: vllm ({self.backend} "
                             "never preempts by it)")
        if self.max_workers is not None and not self.min_workers <= self.workers <= self.max_workers:
            raise ValueError(f"need min_workers ({self.min_workers}) <= workers ({self.workers}) "
                             f"<= max_workers ({self.max_workers})")
        if self.min_workers > self.workers:
            raise ValueError(f"need min_workers ({self.min_workers}) <= workers ({self.workers})")

    @property
    def gpus_per_worker(self) -> int:
        """GPUs one worker occupies: tensor_parallel_size x data_parallel_size."""
        return self.tensor_parallel_size * self.data_parallel_size


@frozen
class PoolsSpec:
    """Either ``aggregated`` (one pool serving prefill and decode) or ``prefill`` + ``decode``
    (disaggregated serving, joined by the KV handoff link)."""

    aggregated: Optional[PoolSpec] = None
    prefill: Optional[PoolSpec] = None
    decode: Optional[PoolSpec] = None

    def __attrs_post_init__(self) -> None:
        if self.aggregated is not None:
            if self.prefill is not None or self.decode is not None:
                raise ValueError("give either 'aggregated' or 'prefill' and 'decode', not both")
        elif self.prefill is None or self.decode is None:
            raise ValueError("give either 'aggregated' or both 'prefill' and 'decode'")
        else:
            for name, pool in (("prefill", self.prefill), ("decode", self.decode)):
                if pool.sglang.enable_mixed_chunk:
                    raise ValueError(f"'{name}': 'sglang.enable_mixed_chunk' applies only to an aggregated "
                                     "pool (it mixes decodes into the passes that prefill)")

    @property
    def mode(self) -> str:
        """``"aggregated"`` or ``"disaggregated"``."""
        return "aggregated" if self.aggregated is not None else "disaggregated"

    def named(self) -> list[tuple[str, PoolSpec]]:
        """The pools in start order: ``[("aggregated", spec)]`` or prefill then decode."""
        if self.aggregated is not None:
            return [("aggregated", self.aggregated)]
        return [("prefill", self.prefill), ("decode", self.decode)]  # type: ignore[list-item]


@frozen
class LinkSpec:
    """The KV-cache handoff link between the prefill and the decode pool.

    Transfer time = tokens * ``kv_bytes_per_token`` / bandwidth + latency, one transfer per
    channel at a time. ``bandwidth_gb_per_s: null`` makes serialisation instantaneous (the
    reference's default). ``kv_bytes_per_token`` defaults to the roofline latency model's KV
    bytes per token when the scenario names a model, else to Llama-3.1-8B in bf16:
    2 (K and V) * 32 layers * 8 KV heads * 128 head dim * 2 bytes = 131072 (REFERENCE.md s5).
    """

    bandwidth_gb_per_s: Optional[float] = field(default=None, validator=_pos)
    latency_ms: float = field(default=0.0, validator=_nonneg)
    channels: int = field(default=1, validator=_count)
    #: null: the roofline model's KV bytes per token, else 131072 (Llama-3.1-8B bf16)
    kv_bytes_per_token: Optional[int] = field(default=None, validator=[_positive, _at_most(1 << 40)])
    #: ``full_prompt``: every prompt token's KV crosses the link, and the decode worker is
    #: chosen when it arrives. ``destination_missing``: the decode worker is chosen when the
    #: prefill ends and only the prompt tokens it does not already cache (whole blocks, as its
    #: cache holds them then) cross (REFERENCE.md s5)
    timing_mode: Literal["full_prompt", "destination_missing"] = "full_prompt"


@frozen
class RoundRobinRouter:
    """Request i goes to worker i mod N of the pool; in disaggregated mode the decode pool is
    assigned round robin in the order handoffs arrive (REFERENCE.md section 6)."""

    kind: Literal["round_robin"] = "round_robin"


@frozen
class LeastLoadedRouter:
    """The worker with the fewest active KV blocks (decode load), then the fewest queued
    prefill tokens, then the lowest index."""

    kind: Literal["least_loaded"] = "least_loaded"


@frozen
class KvAwareRouter:
    """KV-aware routing (REFERENCE.md s6): cost(w) = ``overlap_weight`` * (prompt blocks not
    cached on w) + (KV blocks in use on w); the lowest cost wins, ties broken by the seeded
    ``router`` random stream. With ``temperature`` > 0 a worker is drawn with probability
    proportional to exp(-cost / (temperature * mean cost)) instead (softmax)."""

    kind: Literal["kv_aware"] = "kv_aware"
    overlap_weight: float = field(default=1.0, validator=_nonneg)
    temperature: float = field(default=0.0, validator=_nonneg)
    #: also count the prompt tokens already waiting on w (in blocks) in the prefill term, as
    #: Dynamo's router counts each worker's pending prefill tokens: cost(w) = overlap_weight *
    #: (uncached prompt blocks + queued prefill tokens / block_size) + KV blocks in use
    count_queued_prefill: bool = False
    #: > 0: the router knows each worker's cache only from the KV events it publishes (blocks
    #: stored when scheduled, blocks evicted), which reach the router this late. 0: the router
    #: reads the caches directly (events arriving at once)
    kv_event_lag_ms: float = field(default=0.0, validator=_nonneg)


@frozen
class SessionAffinityRouter:
    """Requests of a session go to the worker that served its previous request; a session's
    first request (and a request without a session) goes to the least loaded worker."""

    kind: Literal["session_affinity"] = "session_affinity"


def _check_class_path(path: str) -> None:
    module, sep, name = path.partition(":")
    if not sep or not name.isidentifier() or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"'path' must be package.module:ClassName, got {path!r}")


@frozen
class PythonRouter:
    """Your own routing policy: ``path`` names ``package.module:ClassName``, imported from
    ``search_path`` (default: the scenario file's folder) and built as ``ClassName(params)``;
    its ``pick(request, workers)`` returns one of ``workers`` (protocol in
    :mod:`simkit.cluster.router`)."""

    kind: Literal["python"] = "python"
    path: str = ""
    params: dict = field(factory=dict)
    search_path: Optional[str] = None

    def __attrs_post_init__(self) -> None:
        _check_class_path(self.path)


RouterSpec = Union[RoundRobinRouter, LeastLoadedRouter, KvAwareRouter, SessionAffinityRouter, PythonRouter]


@frozen
class RouterQueueSpec:
    """When every prompt worker (prefill or aggregated) is busy, new requests wait in the router
    queue instead of piling onto a worker. A worker is busy when its KV blocks in use exceed
    ``max_kv_usage`` of its cache, or its queued prefill tokens exceed
    ``max_queued_prefill_tokens``; null thresholds never make it busy (the default: no
    waiting). Waiting requests leave in ``policy`` order: fcfs (oldest first), lcfs (newest
    first) or wspt (weighted shortest processing time, Smith's rule: least expected work per
    unit of priority first, work = prompt + output tokens; then the oldest)."""

    policy: Literal["fcfs", "lcfs", "wspt"] = "fcfs"
    max_kv_usage: Optional[float] = field(default=None, validator=_pos + [_at_most(1)])  #: fraction
    max_queued_prefill_tokens: Optional[int] = field(default=None, validator=_tokens)

    @property
    def enabled(self) -> bool:
        return self.max_kv_usage is not None or self.max_queued_prefill_tokens is not None


@frozen
class SlaSpec:
    """Latency bounds for goodput; a request meets the SLA when it meets every given bound."""

    ttft_ms: Optional[float] = field(default=None, validator=_pos)
    itl_ms: Optional[float] = field(default=None, validator=_pos)
    e2e_ms: Optional[float] = field(default=None, validator=_pos)

    @property
    def is_set(self) -> bool:
        return any(b is not None for b in (self.ttft_ms, self.itl_ms, self.e2e_ms))


def _interval():
    return field(default=10.0, validator=_pos + [_at_least(1e-3, zero_ok=False)])


def _gpu_budget():
    """GPUs the planner may hold at once over all pools (null: no limit)."""
    return field(default=None, validator=[_positive, _at_most(10_000_000)])


def _scale_down_delay():
    """Hysteresis: a pool's target goes down only once the policy has asked for fewer workers
    at every tick for this long (s); 0: at once."""
    return field(default=0.0, validator=_nonneg)


@frozen
class StaticPlanner:
    """Keeps every pool at its ``workers``: a baseline that still observes the pools every
    ``interval_s`` (and so records the same time series as the other planners)."""

    kind: Literal["static"] = "static"
    interval_s: float = _interval()  #: seconds between planner ticks
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()


@frozen
class ThresholdPlanner:
    """Load thresholds, per pool at every tick: scale up by ``step`` workers when the active
    workers' mean KV usage exceeds ``scale_up_kv_usage`` or the prompt tokens waiting per
    active worker (router queue included, prompt pools only) exceed
    ``scale_up_queued_prefill_tokens``; scale down by ``step`` when both are below their
    ``scale_down_`` bounds; otherwise hold."""

    kind: Literal["threshold"] = "threshold"
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()
    scale_up_kv_usage: float = field(default=0.7, validator=_pos + [_at_most(1)])  #: fraction
    scale_down_kv_usage: float = field(default=0.2, validator=_nonneg + [_at_most(1)])  #: fraction
    scale_up_queued_prefill_tokens: int = field(default=16384, validator=_tokens)
    scale_down_queued_prefill_tokens: int = field(default=1024, validator=[_non_negative, _at_most(1 << 31)])
    step: int = field(default=1, validator=_count)  #: workers added or removed per tick

    def __attrs_post_init__(self) -> None:
        if self.scale_down_kv_usage >= self.scale_up_kv_usage:
            raise ValueError("'scale_down_kv_usage' must be below 'scale_up_kv_usage'")
        if self.scale_down_queued_prefill_tokens >= self.scale_up_queued_prefill_tokens:
            raise ValueError("'scale_down_queued_prefill_tokens' must be below 'scale_up_queued_prefill_tokens'")


@frozen
class SlaPlanner:
    """SLA-based: every tick, forecast the next interval's load (arrival rate, prompt and
    output lengths, prefix hit ratio) from the last ones, predict the ``quantile``-th
    percentile TTFT and the mean ITL per worker count with the scenario's latency model, and
    pick the fewest workers whose predictions meet ``sla.ttft_ms`` / ``sla.itl_ms`` scaled by
    ``target_fraction``. Formulas: :class:`simkit.cluster.planner.SlaPolicy`."""

    kind: Literal["sla"] = "sla"
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()
    #: predictions must stay under this fraction of the SLA bounds (headroom)
    target_fraction: float = field(default=0.8, validator=_pos + [_at_most(1)])
    #: the TTFT percentile predicted (the wait's tail; see simkit.cluster.planner.SlaPolicy)
    quantile: float = field(default=0.9, validator=_pos + [_at_most(0.9999)])
    #: a worker is never planned busier than this (prompt or decode utilisation)
    max_utilization: float = field(default=0.85, validator=_pos + [_at_most(1)])
    #: load forecast: ``constant`` (the next interval is like the last) or ``linear`` (the
    #: last two intervals' trend, extrapolated to when new workers would have served an interval)
    predictor: Literal["constant", "linear"] = "linear"


@frozen
class PythonPlanner:
    """Your own planner: ``path`` names ``package.module:ClassName``, imported from
    ``search_path`` (default: the scenario file's folder) and built as ``ClassName(params)``;
    its ``plan(snapshot)`` sets targets (protocol in :mod:`simkit.cluster.planner`)."""

    kind: Literal["python"] = "python"
    path: str = ""
    params: dict = field(factory=dict)
    search_path: Optional[str] = None
    interval_s: float = _interval()
    gpu_budget: Optional[int] = _gpu_budget()
    scale_down_delay_s: float = _scale_down_delay()

    def __attrs_post_init__(self) -> None:
        _check_class_path(self.path)


PlannerSpec = Union[StaticPlanner, ThresholdPlanner, SlaPlanner, PythonPlanner]


@frozen(kw_only=True)
class Scenario:
    """A whole simulated experiment: workload, latency model, pools, link, router and SLA."""

    name: str = "scenario"
    seed: int = 0  #: root of every named random stream
    workload: WorkloadSpec = field(factory=SyntheticWorkload)
    pools: PoolsSpec
    latency: LatencySpec = field(factory=PolynomialLatency)
    #: the handoff link; only for disaggregated pools (filled in with defaults there)
    link: Optional[LinkSpec] = None
    router: RouterSpec = field(factory=RoundRobinRouter)
    #: busy thresholds and waiting order of the router queue (default: never wait)
    router_queue: RouterQueueSpec = field(factory=RouterQueueSpec)
    #: latency bounds for goodput (optional; null or {} for none)
    sla: Optional[SlaSpec] = field(factory=SlaSpec, converter=lambda v: SlaSpec() if v is None else v)
    #: stop the run at this simulated time; requests not finished are reported incomplete
    max_sim_time_s: Optional[float] = field(default=None, validator=_pos)
    #: the autoscaling planner (null: every pool keeps its ``workers`` for the whole run)
    planner: Optional[PlannerSpec] = None

    def __attrs_post_init__(self) -> None:
        if self.pools.mode == "aggregated" and self.link is not None:
            raise ValueError("'link' applies only to disaggregated pools (prefill + decode)")
        if self.pools.mode == "disaggregated" and self.link is None:
            object.__setattr__(self, "link", LinkSpec())
        self._resolve_hardware()
        decode = self.pools.decode
        if decode is not None and decode.backend == "sglang":  # pairs prefill and decode at dispatch
            if self.planner is not None:
                raise ValueError("a planner cannot yet scale a disaggregated sglang cluster (its decode "
                                 "workers are paired at dispatch); use backend vllm or trtllm")
            if self.link.timing_mode != "full_prompt":
                raise ValueError("link.timing_mode destination_missing does not apply to a disaggregated "
                                 "sglang cluster (its decode worker is chosen at dispatch)")
        wl = self.workload
        if isinstance(wl, SyntheticWorkload):
            for name, pool in self.pools.named():
                if pool.block_size % wl.trace_block_size:
                    raise ValueError(
                        f"workload.trace_block_size ({wl.trace_block_size}) must divide "
                        f"pools.{name}.block_size ({pool.block_size})"
                    )
        if self.planner is None:
            for name, pool in self.pools.named():
                if pool.startup_time_s or pool.min_workers != 1 or pool.max_workers is not None:
                    raise ValueError(f"pools.{name}: startup_time_s, min_workers and max_workers "
                                     f"apply only with a 'planner'")
        else:
            budget = self.planner.gpu_budget
            need = sum(p.workers * p.gpus_per_worker for _, p in self.pools.named())
            if budget is not None and need > budget:
                raise ValueError(f"the initial workers need {need} GPUs, more than planner.gpu_budget ({budget})")
            if isinstance(self.planner, SlaPlanner) and (self.sla.ttft_ms is None and self.sla.itl_ms is None):
                raise ValueError("the sla planner needs sla.ttft_ms or sla.itl_ms")

    def _resolve_hardware(self) -> None:
        """Fill ``num_gpu_blocks`` and the link's ``kv_bytes_per_token`` left unset: from the
        roofline latency model's model and GPU, else the reference's defaults; a pool's
        ``tensor_parallel_size`` (GPU accounting) follows its latency model's, and its unset
        ``max_model_len`` is the model's ``max_position_embeddings`` (as vLLM defaults it)."""
        resolved = {}
        models = []
        for name, pool in self.pools.named():
            lat = pool.latency or self.latency
            roofline = isinstance(lat, _Deployment)
            if roofline:
                models.append(lat)
            if pool.num_gpu_blocks is None:
                blocks = lat.num_gpu_blocks(pool.block_size) if roofline else DEFAULT_NUM_GPU_BLOCKS
                pool = attrs.evolve(pool, num_gpu_blocks=blocks)
            if roofline and pool.max_model_len is None:  # vLLM's default: the model's own limit
                longest = hardware.load_model(lat.model).max_position_embeddings
                if longest:
                    pool = attrs.evolve(pool, max_model_len=longest)
            tp = lat.tensor_parallel_size if roofline else pool.tensor_parallel_size
            if tp != pool.tensor_parallel_size:  # GPU-hours count the model's TP
                if pool.tensor_parallel_size != 1:
                    raise ValueError(f"pools.{name}.tensor_parallel_size ({pool.tensor_parallel_size}) differs "
                                     f"from its latency model's tensor_parallel_size ({tp})")
                pool = attrs.evolve(pool, tensor_parallel_size=tp)
            resolved[name] = pool
        object.__setattr__(self, "pools", attrs.evolve(self.pools, **resolved))
        if self.link is not None and self.link.kv_bytes_per_token is None:
            kv = models[-1].kv_bytes_per_token() if models else 131072
            object.__setattr__(self, "link", attrs.evolve(self.link, kv_bytes_per_token=kv))

    @property
    def mode(self) -> str:
        return self.pools.mode


# ----------------------------------------------------------------------------- converter

_UNIONS: dict[Any, dict[str, type]] = {
    LengthSpec: {"fixed": FixedLength, "uniform": UniformLength, "lognormal": LognormalLength,
                 "normal": NormalLength, "zipf": ZipfLength, "empirical": EmpiricalLength},
    ArrivalSpec: {"poisson": PoissonArrival, "gamma": GammaArrival, "constant": ConstantArrival,
                  "piecewise": PiecewiseArrival, "diurnal": DiurnalArrival},
    WorkloadSpec: {"synthetic": SyntheticWorkload, "trace": TraceWorkload},
    LatencySpec: {"polynomial": PolynomialLatency, "constant": ConstantLatency,
                  "roofline": RooflineLatency, "table": TableLatency, "aic": AicLatency},
    RouterSpec: {"round_robin": RoundRobinRouter, "least_loaded": LeastLoadedRouter,
                 "kv_aware": KvAwareRouter, "session_affinity": SessionAffinityRouter,
                 "python": PythonRouter},
    PlannerSpec: {"static": StaticPlanner, "threshold": ThresholdPlanner, "sla": SlaPlanner,
                  "python": PythonPlanner},
}


class UnknownKind(ValueError):
    """A ``kind`` tag names no known variant."""


def _kind_hook(kinds: dict[str, type]):
    expected = ", ".join(sorted(kinds))
    # per-class structuring functions: a one-variant Union[X] *is* X, so the hook registered
    # for it must not call back into converter.structure(value, X)
    fns = {k: make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)
           for k, cls in kinds.items()}

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping with a 'kind' (one of: {expected}), got {_describe(value)}")
        kind = value.get("kind")
        if kind in ("roofline", "aic"):
            for alias, name in _LATENCY_ALIASES.items():
                if alias in value and name not in value:
                    value = {(name if k == alias else k): v for k, v in value.items()}
        if kind not in kinds:
            if "kind" not in value:
                raise UnknownKind(f"missing 'kind' (expected one of: {expected})")
            raise UnknownKind(f"unknown kind {kind!r} (expected one of: {expected})")
        return fns[kind](value, kinds[kind])

    return structure


def _strict(kind: type, label: str):
    def structure(value: Any, _type: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {label}, got {_describe(value)}")
        if kind is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError(f"expected a finite number, got {_describe(value)}")
                return value
            raise TypeError(f"expected {label}, got {_describe(value)}")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {_describe(value)}")
        return value

    return structure


def _free_mapping(value: Any, _type: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping, got {_describe(value)}")
    return dict(value)


def _literal_hook(value: Any, type_: Any) -> Any:
    allowed = type_.__args__
    if value not in allowed or isinstance(value, bool):
        raise ValueError(f"expected one of: {', '.join(map(str, allowed))}, got {_describe(value)}")
    return value


def _mapping_factory(cls: type):
    inner = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)

    def structure(value: Any, type_: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {_describe(value)}")
        return inner(value, type_)

    return structure


def _describe(value: Any) -> str:
    """A value as the YAML that wrote it would show it (null, true, false), else its repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return f"a list {value!r}"[:80]
    return repr(value)[:80]


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict(float, "a number"))
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(dict, _free_mapping)  # a policy's free-form params
    conv.register_structure_hook_func(
        lambda t: getattr(t, "__origin__", None) is Literal, _literal_hook
    )
    return conv


#: The one strict converter: no extra keys, no silent coercion, ``kind``-tagged unions.
converter = _make_converter()
converter.register_structure_hook_factory(attrs.has, _mapping_factory)
for _union, _kinds in _UNIONS.items():
    converter.register_structure_hook(_union, _kind_hook(_kinds))
for _union in (LatencySpec, PlannerSpec):  # optional kind-tagged fields: null or a tagged mapping
    converter.register_structure_hook(
        Optional[_union], lambda v, t, hook=_kind_hook(_UNIONS[_union]): None if v is None else hook(v, t))
# model-on-GPU latency specs: ``kind`` first in dumps (attrs puts base-class fields first)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, _Deployment) and t is not _Deployment,
    lambda spec: {"kind": spec.kind, **{a.name: getattr(spec, a.name) for a in attrs.fields(type(spec))
                                        if a.name != "kind"}},
)
converter.register_unstructure_hook(
    PoolsSpec,
    lambda pools: {name: converter.unstructure(spec) for name, spec in pools.named()},
)


_FIELD_MARK = re.compile(r"^<<(\w+)>>(.*) @ (\S+)$")


def _format_exception(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, FieldValueError):
        return f"<<{exc.field}>>{exc}"  # _messages moves the field name onto the path
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unknown field(s) {', '.join(sorted(map(str, exc.extra_fields)))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, (TypeError, ValueError)) and str(exc):
        msg = str(exc)
        if msg.startswith("__init__() missing"):
            return "required field missing: " + msg.split(":", 1)[-1].strip()
        return msg
    return cattrs.v.format_exception(exc, type_)


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        lines = cattrs.transform_error(exc, format_exception=_format_exception)
    else:
        lines = [f"{_format_exception(exc, None)} @ $"]
    out = []
    for line in lines:
        m = _FIELD_MARK.match(line)
        out.append(f"{m.group(2)} @ {m.group(3)}.{m.group(1)}" if m else line)
    return out


def scenario_from_dict(data: Any, source: str = "<scenario>") -> Scenario:
    """Structure a plain dict (as read from YAML) into a validated :class:`Scenario`.

    Raises:
        ConfigError: one ``SOURCE: message @ $.path`` line per problem.
    """
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {_describe(data)} @ $"])
    try:
        return converter.structure(data, Scenario)
    except RecursionError:
        raise ConfigError([f"{source}: the scenario is nested too deeply @ $"]) from None
    except Exception as exc:  # cattrs wraps every field error; we report them all
        raise ConfigError([f"{source}: {m}" for m in _messages(exc)]) from None


# ----------------------------------------------------------------------------- YAML 1.2


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars: ``1e-3`` is a float, only true/false are
    booleans (``no`` stays a string), ``010`` is decimal ten, ``0o10`` octal eight."""


_Yaml12Loader.yaml_implicit_resolvers = {}
_RESOLVERS = [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
]
for _tag, _rx, _first in _RESOLVERS:
    _Yaml12Loader.add_implicit_resolver(_tag, re.compile(_rx), _first)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    try:
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not an integer", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = loader.construct_scalar(node)
    try:
        return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number", node.start_mark) from None


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} is not a string", key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node)


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def yaml_load(text: str, source: str = "<yaml>") -> Any:
    """Parse YAML 1.2 text.

    Raises:
        ConfigError: ``SOURCE:LINE:COLUMN: problem`` for a syntax error.
    """
    try:
        return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        raise ConfigError([f"{where}: YAML syntax error: {problem}"]) from None
    except yaml.YAMLError as exc:  # e.g. a control character: one line, whatever PyYAML says
        raise ConfigError([f"{source}: YAML error: {' '.join(str(exc).split())}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: YAML nested too deeply"]) from None


# ----------------------------------------------------------------------------- loading


def _set_dotted(data: dict, dotted: str, value: Any, source: str) -> None:
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError([f"{source}: bad key {dotted!r}: expected a dotted path like pools.decode.workers"])
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
        if not isinstance(child, dict):
            path = ".".join(keys[: i + 1])
            raise ConfigError([f"{source}: cannot set {dotted!r}: {path} is {child!r}, not a mapping"])
        node = child
    node[keys[-1]] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """Parse ``KEY=VALUE`` strings; values are YAML 1.2 scalars (``8``, ``1e-3``, ``null``).

    Raises:
        ConfigError: a pair without ``=`` or with a value that is not valid YAML.
    """
    out = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError([f"--set {pair!r}: expected KEY=VALUE, e.g. pools.decode.workers=8"])
        out.append((key.strip(), yaml_load(text, source=f"--set {key.strip()}")))
    return out


#: values a scenario may expand to once YAML aliases are copied out (a "billion laughs" guard)
MAX_VALUES = 1_000_000


def _unalias(node: Any, budget: Optional[list] = None) -> Any:
    """A copy in which no two places share a mapping or list: YAML aliases (``*engine``) load
    as one shared object, and an override of one place must not change the other.

    Raises:
        ValueError: the copy would hold more than :data:`MAX_VALUES` values.
    """
    budget = [MAX_VALUES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"the scenario expands to more than {MAX_VALUES:,} values (aliases of aliases?)")
    if isinstance(node, dict):
        return {key: _unalias(value, budget) for key, value in node.items()}
    if isinstance(node, list):
        return [_unalias(value, budget) for value in node]
    return node


def _resolve_workload_path(data: dict, base_dir: str) -> None:
    wl = data.get("workload")
    if not isinstance(wl, dict):
        return
    for node in (wl, wl.get("input_tokens"), wl.get("output_tokens")):
        if isinstance(node, dict) and isinstance(node.get("path"), str) and node["path"]:
            node["path"] = os.path.normpath(os.path.join(base_dir, os.path.expanduser(node["path"])))
    pools = data.get("pools") if isinstance(data.get("pools"), dict) else {}
    for lat in [data.get("latency")] + [p.get("latency") for p in pools.values() if isinstance(p, dict)]:
        if not isinstance(lat, dict):
            continue
        if isinstance(lat.get("model"), str) and lat["model"].endswith(".json"):
            lat["model"] = os.path.normpath(os.path.join(base_dir, os.path.expanduser(lat["model"])))
        if lat.get("kind") == "table" and isinstance(lat.get("path"), str) and lat["path"]:
            lat["path"] = os.path.normpath(os.path.join(base_dir, os.path.expanduser(lat["path"])))


def _default_search_path(data: dict, base_dir: str) -> None:
    """A ``kind: python`` router or planner imports from the scenario file's folder unless it
    says otherwise (written absolute into the resolved scenario)."""
    for key in ("router", "planner"):
        node = data.get(key)
        if isinstance(node, dict) and node.get("kind") == "python" and node.get("search_path") is None:
            node["search_path"] = base_dir


def load_scenario(path: str, overrides: Optional[list[tuple[str, Any]]] = None) -> Scenario:
    """Read a scenario YAML file, apply ``(dotted.key, value)`` overrides and validate it.

    A relative ``workload.path`` in the file is resolved against the file's folder; one given
    as an override against the current folder.

    Raises:
        ConfigError: unreadable file, YAML syntax error, or invalid fields (one line each).
    """
    try:
        with open(path, encoding="utf-8-sig") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ConfigError([f"{path}: cannot read scenario file: {reason}"]) from None
    data = yaml_load(text, source=path)
    if data is None:
        raise ConfigError([f"{path}: the file is empty; expected a scenario mapping @ $"])
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping at the top level, got {type(data).__name__} @ $"])
    try:
        data = _unalias(data)
    except RecursionError:
        raise ConfigError([f"{path}: the scenario is nested too deeply @ $"]) from None
    except ValueError as exc:
        raise ConfigError([f"{path}: {exc} @ $"]) from None
    base_dir = os.path.dirname(os.path.abspath(path))
    _resolve_workload_path(data, base_dir)
    for key, value in overrides or []:
        _set_dotted(data, key, value, source=f"--set {key}")
        if key == "workload" or (key.startswith("workload.") and key.endswith(".path")) or (
                key.startswith("workload.") and isinstance(value, dict)):
            _resolve_workload_path(data, os.getcwd())
    # after the overrides, so that a policy switched to ``kind: python`` by --set also imports
    # from the scenario's folder
    _default_search_path(data, base_dir)
    try:
        return scenario_from_dict(data, source=path)
    except ConfigError as exc:
        raise ConfigError([_blame_override(m, path, overrides or []) for m in exc.messages]) from None


def _blame_override(message: str, path: str, overrides: list[tuple[str, Any]]) -> str:
    """Name the ``--set`` that introduced the bad value instead of the file, when one did."""
    where = message.rpartition(" @ ")[2]
    for key, _ in reversed(overrides):
        target = "$." + key
        if where == target or where.startswith(target + ".") or target == where + ".kind":
            return f"--set {key}" + message[len(path):]
        if target.startswith(where + "."):
            below = target[len(where) + 1:].split(".")[0]  # the segment the override wrote
            text = message.rpartition(" @ ")[0]
            if "unknown field(s)" in message:
                if below in text.partition("unknown field(s) ")[2].split(", "):
                    return f"--set {key}" + message[len(path):]
            elif (f"'{below}'" in text or f"'{below}." in text or f" {below} (" in text
                  or " expected " in f" {text.split(': ', 1)[-1]}"):
                # a rule of the mapping that names the field the override set ("'trtllm'
                # settings apply only to ...", "'sglang.enable_mixed_chunk' needs ...", "need
                # min_workers (5) <= workers (1)"), or a scalar the override turned into a mapping
                return f"--set {key}" + message[len(path):]
    return message


def to_dict(scenario: Scenario) -> dict:
    """The scenario as plain data (every default filled in), the inverse of structuring."""
    return converter.unstructure(scenario)


def override(scenario: Scenario, changes: dict[str, Any]) -> Scenario:
    """A copy of ``scenario`` with dotted-path ``changes`` applied and re-validated.

    Example: ``override(s, {"pools.decode.workers": 8})``.

    Raises:
        ConfigError: a change makes the scenario invalid.
    """
    data = to_dict(scenario)
    for key, value in changes.items():
        _set_dotted(data, key, value, source=f"override {key}")
    return scenario_from_dict(data, source="override")


def dump_scenario(scenario: Scenario) -> str:
    """YAML text of the resolved scenario; ``load_scenario`` on it gives an equal scenario."""
    return yaml.safe_dump(to_dict(scenario), sort_keys=False, default_flow_style=False)
