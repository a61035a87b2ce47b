"""``aic`` latency model: pass times composed by NVIDIA's aiconfigurator from its measured
per-operator database (optional: ``pip install simkit[aic]``, aiconfigurator-core, Apache-2.0).

aiconfigurator-core prices a forward pass from per-op measurements (GEMM, attention, MoE,
NCCL) of a (system, backend, version), about 75 us per call. A long simulation asks for the
same shapes again and again, so :class:`AicModel` rounds each pass shape onto a geometric grid
(prefill tokens, decode requests above 16, context tokens per decode request; ratio
``bucket_ratio``) and caches one aiconfigurator call per grid point. The input is rounded to
the nearest grid value in log space, so it moves by at most a factor sqrt(ratio) (+-2.2% for
the default 1.044); ``benchmarks/aic_bucket_error.py`` measures the resulting pass-time error.

Shapes map onto aiconfigurator's step API (``aiconfigurator_core.sdk.rust_engine_step``):
a pure decode pass of r requests and C context tokens is ``decode_step(gen=r, isl=C/r,
osl=1)``; a pass with n prefill tokens is ``mixed_step(ctx=n, gen=r, isl=max(n, C/r))``.

Part of :mod:`simkit.engine`; imports aiconfigurator_core only when an :class:`AicModel` is built (importing this
module does not).
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache

from simkit.spec import AicLatency
from simkit.engine.latency.base import _decode_run_by_passes, set_deployment_terms
from simkit.engine.hardware import aic_model_path, aic_system, load_calibration, load_model
from simkit.core.units import S_PER_MS

__all__ = ["AicModel", "bucket"]


def bucket(x: float, steps_per_octave: int) -> int:
    """``x`` rounded up to the grid of ``steps_per_octave`` evenly spaced points per doubling,
    2^j (1 + i / steps_per_octave): with 16, ..., 512, 544, ..., 768, ..., 1024,
    1088, ... Values up to ``steps_per_octave`` are kept exact. The grid holds the powers of
    two and their 1.5x (where measured kernel times jump: tile sizes, CUDA-graph batch sizes),
    and rounding up keeps a shape on its side of such a boundary."""
    x = int(math.ceil(x))
    if x <= steps_per_octave:
        return max(1, x)
    step = 1 << max(0, x.bit_length() - 1 - (steps_per_octave.bit_length() - 1))
    return -(-x // step) * step


@lru_cache(maxsize=16)
def _engine(model_path: str, system: str, backend: str, version: str, tp: int, precision: str,
            kv_cache_dtype: str, moe_model: bool, nextn: int = 0):
    """(model, database) of aiconfigurator for a deployment (built once per process)."""
    from aiconfigurator_core.sdk import common, config
    from aiconfigurator_core.sdk.models import get_model
    from aiconfigurator_core.sdk.perf_database import get_database, get_latest_database_version

    logging.getLogger("aiconfigurator_core").setLevel(logging.ERROR)
    version = version or get_latest_database_version(system, backend)
    database = get_database(system, backend, version)
    if database is None:
        raise ValueError(f"aiconfigurator has no database for {system}/{backend}/{version}")
    gemm = {"bf16": common.GEMMQuantMode.bfloat16, "fp8": common.GEMMQuantMode.fp8,
            "fp4": common.GEMMQuantMode.nvfp4}[precision]
    kv = {"bf16": common.KVCacheQuantMode.bfloat16, "fp8": common.KVCacheQuantMode.fp8}[kv_cache_dtype]
    # MoE experts split like the rest, tensor parallel over the worker's GPUs (no expert
    # parallelism), as in the roofline model
    moe = {"moe_tp_size": tp, "moe_ep_size": 1} if moe_model else {}
    model_config = config.ModelConfig(tp_size=tp, gemm_quant_mode=gemm, kvcache_quant_mode=kv, **moe)
    if nextn:  # speculative decoding: aiconfigurator prices decode steps at nextn + 1 tokens a request
        from aiconfigurator_core.sdk.config_builders import apply_nextn
        apply_nextn(model_config, nextn)
    model = get_model(model_path, model_config, backend)
    return model, database


class AicModel:
    """Pass times from aiconfigurator-core behind a bucketed cache (module docstring)."""

    needs_prefill_attention = False

    def __init__(self, spec: AicLatency, nextn: int = 0, async_scheduling: bool = False) -> None:
        from aiconfigurator_core.sdk import rust_engine_step

        self._step = rust_engine_step
        self.model, self.database = _engine(
            aic_model_path(spec.model), aic_system(spec.gpu), spec.backend or "vllm", spec.aic_version or "",
            spec.tensor_parallel_size, spec.precision, spec.kv_precision, load_model(spec.model).is_moe, nextn)
        self.steps = spec.bucket_steps_per_octave
        self.scale_s = S_PER_MS / spec.speedup_ratio
        self.cache: dict[tuple[int, int, int], float] = {}
        self.calls = 0  #: aiconfigurator calls made (cache misses)
        # the frontend's times (s): the spec's, else those fitted for the GPU and backend (the
        # roofline model's; they lie outside the engine, whichever model prices its passes)
        cal = load_calibration(spec.gpu, spec.backend, load_model(spec.model).is_moe,
                               async_scheduling=async_scheduling)
        set_deployment_terms(self, spec, cal)
        # the engine's host time beside the kernels aiconfigurator measured: the spec's, else fitted
        self.pass_overhead_ms = cal.aic_pass_overhead_ms if spec.pass_overhead_ms is None else spec.pass_overhead_ms
        self.sequence_overhead_ms = (cal.aic_sequence_overhead_us if spec.sequence_overhead_us is None
                                     else spec.sequence_overhead_us) * 1e-3

    def exact_ms(self, prefill_tokens: int, decode_requests: int, context_per_request: int) -> float:
        """aiconfigurator's pass time (ms) for the shape, without the cache."""
        self.calls += 1
        if prefill_tokens:
            return self._step.estimate_mixed_step_latency_with_rust(
                self.model, self.database, ctx_tokens=prefill_tokens, gen_tokens=decode_requests,
                isl=max(prefill_tokens, context_per_request), osl=1, prefix=0)
        return self._step.estimate_decode_step_latency_with_rust(
            self.model, self.database, gen_tokens=decode_requests, isl=context_per_request, osl=1)

    def pass_time_s(self, prefill_tokens: int, decode_requests: int, decode_context_tokens: int) -> float:
        steps = self.steps
        ctx = -(-decode_context_tokens // decode_requests) if decode_requests else 0
        key = (bucket(prefill_tokens, steps) if prefill_tokens else 0,
               bucket(decode_requests, steps) if decode_requests else 0,
               bucket(ctx, steps) if ctx else 0)
        ms = self.cache.get(key)
        if ms is None:
            ms = self.cache[key] = self.exact_ms(*key)
        if self.pass_overhead_ms or self.sequence_overhead_ms:
            ms += self.pass_overhead_ms + (decode_requests + (1 if prefill_tokens else 0)) * self.sequence_overhead_ms
        if self.min_s_per_token:  # the host's output rate (an opt-in limit)
            return max(ms * self.scale_s, (decode_requests + (1 if prefill_tokens else 0)) * self.min_s_per_token)
        return ms * self.scale_s

    def decode_run(self, decode_requests: int, first_context_tokens: int, passes: int,
                   start_at: float) -> tuple[list[float], list[float]]:
        return _decode_run_by_passes(self.pass_time_s, decode_requests, first_context_tokens, passes, start_at)
