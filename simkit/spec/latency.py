"""Latency-model specs: the reference's polynomial, constant pass times, the roofline and
aiconfigurator (aic) models of a model on a GPU (:class:`DeploymentLatency`), and measured
pass tables. The models themselves are in :mod:`simkit.engine.latency`.

These are data: whether a model, GPU or table exists, and the KV capacity it leaves, is
checked and derived by the resolve step (:mod:`simkit.engine.resolve`), which knows the
hardware. Imports :mod:`simkit.spec.base` only.
"""

from __future__ import annotations

from typing import Literal, Optional, Union

from attrs import field, frozen

from simkit.spec.base import _rate, _at_most, _nonneg, _pos, _positive


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


@frozen
class DeploymentLatency:
    """The fields of the latency specs that name a model on a GPU (see :class:`RooflineLatency`);
    the resolve step derives the pools' KV capacity and the link's KV bytes per token from them."""

    model: str = "Llama-3.1-8B"
    gpu: str = "H100"
    tensor_parallel_size: int = field(default=1, validator=[_positive, _at_most(64)])
    precision: Literal["bf16", "fp8", "fp4"] = "bf16"
    kv_cache_dtype: Literal["auto", "bf16", "fp8"] = "auto"
    gpu_memory_utilization: float = field(default=0.9, validator=_pos + [_at_most(1)])
    reserved_memory_gib: float = field(default=3.5, validator=_nonneg)
    #: the serving frontend's time per request before the router sees it (API server, chat
    #: template, tokenization, routing; ms); null: the value fitted for the GPU and backend
    #: (calibration.json, fitted on the calibration rows' TTFT), else 0
    dispatch_overhead_ms: Optional[float] = field(default=None, validator=_nonneg)
    #: plus, per request, a client or frontend delay drawn uniformly from [0, this) (ms; the
    #: request id's own stream of the scenario's seed): identical clients then fall out of lockstep
    dispatch_jitter_ms: float = field(default=0.0, validator=_nonneg)
    #: opt-in host-side limit (a deployment property, never a default): the worker's host
    #: (frontend, detokenizer, output path) streams at most this many tokens/s, so a pass that
    #: samples n tokens lasts at least n / rate; null: no limit
    host_output_tokens_per_s: Optional[float] = field(default=None, validator=_rate)
    #: the frontend's time from each engine token to the client (detokenization, the streamed
    #: chunk; ms): TTFT and E2E grow by it, ITL does not; null: the fitted value, else 0
    first_token_overhead_ms: Optional[float] = field(default=None, validator=_nonneg)

    @property
    def kv_precision(self) -> str:
        return "bf16" if self.kv_cache_dtype == "auto" else self.kv_cache_dtype


@frozen
class RooflineLatency(DeploymentLatency):
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
    ``simkit/engine/data/calibration.json`` for the GPU (and ``backend``, when given and fitted);
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


@frozen
class AicLatency(DeploymentLatency):
    """Pass times from NVIDIA aiconfigurator's measured per-op database
    (simkit.engine.latency.aic.AicModel), behind a cache of geometric buckets
    (``bucket_steps_per_octave``). Needs the optional ``aiconfigurator-core`` package (``pip
    install simkit[aic]``). ``model`` is a shipped model name, ``gpu`` a shipped GPU; ``backend``
    (default vllm) and ``aic_version`` (default: the latest) pick the database. KV capacity and
    link bytes are derived as for ``roofline``."""

    kind: Literal["aic"] = "aic"
    backend: Optional[Literal["vllm", "sglang", "trtllm"]] = None
    aic_version: Optional[str] = None
    #: cache grid: points per doubling of each shape dimension
    bucket_steps_per_octave: int = field(default=64, validator=[_positive, _at_most(1024)])
    #: host time added to each pass's kernel sum: per pass (ms) and per request that samples a
    #: token in it (us); null: the values fitted for the GPU and backend with this model
    #: (calibration.json ``aic_pass_overhead_ms``, ``aic_sequence_overhead_us``), else 0
    pass_overhead_ms: Optional[float] = field(default=None, validator=_nonneg)
    sequence_overhead_us: Optional[float] = field(default=None, validator=_nonneg)
    # (a power of two gives the grid of simkit.engine.latency.aic.bucket; others are rounded
    # down to one)
    speedup_ratio: float = field(default=1.0, validator=_pos)


@frozen
class TableLatency:
    """Pass times interpolated from a measured per-pass CSV (``path``, relative to the scenario
    file; header ``prefill_tokens,decode_requests,decode_context_tokens,pass_ms``; see
    ``simkit.engine.pass_table.load_pass_table`` and ``simkit.engine.latency.TableModel``)."""

    kind: Literal["table"] = "table"
    path: str = ""
    speedup_ratio: float = field(default=1.0, validator=_pos)


LatencySpec = Union[PolynomialLatency, ConstantLatency, RooflineLatency, TableLatency, AicLatency]

#: aliases accepted in a latency mapping, renamed before structuring
_LATENCY_ALIASES = {"tp": "tensor_parallel_size"}
