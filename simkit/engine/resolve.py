"""The resolve step: what a scenario's hardware implies, filled in after the specs are read.

Specs are data (:mod:`simkit.spec`); this module knows the hardware (:mod:`simkit.engine.hardware`)
and so checks that each latency model can be built (its model, GPU, tensor-parallel size,
aiconfigurator database or pass table exist) and fills the defaults that come from it:

- a pool's unset ``num_gpu_blocks``: from GPU memory when its latency model names a model on a
  GPU (:func:`simkit.engine.hardware.kv_capacity_blocks`, vLLM's sizing), else the reference
  mocker's 16384 (:data:`simkit.spec.DEFAULT_NUM_GPU_BLOCKS`);
- a pool's unset ``max_model_len``: the model's ``max_position_embeddings`` (vLLM's default);
- an SGLang pool's unset ``sglang.chunked_prefill_size``: SGLang's default by GPU memory (16384
  above 160 GB, else 8192) when its latency model names a GPU; otherwise it stays unset and
  the scheduler uses 8192, as the reference does;
- a pool's ``kv_offload.kv_bytes_per_token`` when unset: its own roofline model's (else 131072);
- a pool's ``kv_offload.host_blocks`` when unset: ``kv_offloading_size_gib`` GiB of blocks, else
  the host memory of a worker's GPUs (the GPU's ``host_memory_gib`` x GPUs per worker) with a
  roofline or aic latency model;
- the link's unset ``kv_bytes_per_token``: the model's whole-model KV bytes per token (the last
  pool's model that names one), else 131072 (Llama-3.1-8B in bf16, REFERENCE.md section 5).

:func:`simkit.load_scenario` and the other public loaders pass every scenario through
:func:`resolve_scenario`, and :func:`simkit.sim.build` does too (it is idempotent), so a
scenario built by hand in Python is resolved the same way. Imports :mod:`simkit.spec` and
:mod:`simkit.engine.hardware` only.
"""

from __future__ import annotations

import importlib.util

import attrs

from simkit.engine import hardware
from simkit.engine.pass_table import load_pass_table
from simkit.spec import (DEFAULT_NUM_GPU_BLOCKS, SGLANG_CHUNKED_PREFILL_SIZE, SGLANG_CHUNKED_PREFILL_SIZE_LARGE, AicLatency, DeploymentLatency, LatencySpec, ResolveError,
                         RooflineLatency, Scenario, TableLatency)

__all__ = ["check_latency", "resolve_scenario"]

#: the link's KV bytes per token when no latency model names a model: Llama-3.1-8B in bf16,
#: 2 (K and V) * 32 layers * 8 KV heads * 128 head dim * 2 bytes (REFERENCE.md section 5)
DEFAULT_KV_BYTES_PER_TOKEN = 131072


def _problem(spec: LatencySpec) -> tuple[str, str] | None:
    """The first reason ``spec`` cannot be built, as ``(field, message)``; None when it can."""
    if isinstance(spec, RooflineLatency):
        try:
            arch = hardware.load_model(spec.model)
        except hardware.HardwareError as exc:
            return "model", str(exc)
        try:
            hardware.load_gpu(spec.gpu)
        except hardware.HardwareError as exc:
            return "gpu", str(exc)
        try:
            hardware.check_tensor_parallel(arch, spec.tensor_parallel_size)
        except ValueError as exc:
            return "tensor_parallel_size", str(exc)
    elif isinstance(spec, AicLatency):
        if importlib.util.find_spec("aiconfigurator_core") is None:
            return "kind", ("the aic latency model needs aiconfigurator-core: pip install 'simkit[aic]' "
                            "(or aiconfigurator-core)")
        for name, check in (("model", hardware.aic_model_path), ("gpu", hardware.aic_system)):
            try:
                check(getattr(spec, name))
            except hardware.HardwareError as exc:
                return name, str(exc)
    elif isinstance(spec, TableLatency):
        try:
            load_pass_table(spec.path)
        except hardware.HardwareError as exc:
            return "path", str(exc)
    return None


def check_latency(spec: LatencySpec, path: str = "$.latency") -> None:
    """Check that ``spec``'s model, GPU, tensor-parallel size and data exist.

    Raises:
        ResolveError: the first problem, at ``path`` + the field (its message names the value
            and what was expected).
    """
    problem = _problem(spec)
    if problem is not None:
        raise ResolveError([(f"{path}.{problem[0]}", problem[1])])


def _sglang_chunk(lat: DeploymentLatency) -> int:
    """SGLang's default ``chunked_prefill_size`` for the GPU of ``lat``: 16384 on a GPU of more
    than 160 GiB, else 8192 (SGLang ``server_args.py``, its GPU-memory rule in MiB)."""
    try:
        memory_gib = hardware.load_gpu(lat.gpu).memory_bytes / 2**30
    except hardware.HardwareError:  # an aic system name simkit's GPU table lacks
        return SGLANG_CHUNKED_PREFILL_SIZE
    return SGLANG_CHUNKED_PREFILL_SIZE_LARGE if memory_gib > 160 else SGLANG_CHUNKED_PREFILL_SIZE


def resolve_scenario(scenario: Scenario) -> Scenario:
    """``scenario`` with the defaults its hardware implies filled in (see the module docstring);
    values already set are kept, so resolving twice gives the same scenario.

    Raises:
        ResolveError: a latency model that cannot be built (one problem per latency spec, the
            pools' first, as the specs are structured), or weights that leave no room for a KV
            block (at ``$``).
    """
    specs = [(f"$.pools.{name}.latency", pool.latency) for name, pool in scenario.pools.named()
             if pool.latency is not None]
    problems = []
    for path, spec in specs + [("$.latency", scenario.latency)]:
        problem = _problem(spec)
        if problem is not None:
            problems.append((f"{path}.{problem[0]}", problem[1]))
    if problems:
        raise ResolveError(problems)
    for name, pool in scenario.pools.named():
        spec = pool.speculative
        if spec is not None and spec.method == "draft_model":
            lat = pool.latency or scenario.latency
            where = f"$.pools.{name}.speculative.draft_model"
            if not isinstance(lat, RooflineLatency):
                problems.append((where, f"a draft model is priced by a roofline latency model (kind roofline), "
                                        f"not {lat.kind}: use another method, or kind roofline"))
                continue
            try:
                hardware.load_model(spec.draft_model)
            except hardware.HardwareError as exc:
                problems.append((where, str(exc)))
    if problems:
        raise ResolveError(problems)
    resolved = {}
    models = []
    for name, pool in scenario.pools.named():
        lat = pool.latency or scenario.latency
        roofline = isinstance(lat, DeploymentLatency)
        if roofline:
            models.append(lat)
        if pool.num_gpu_blocks is None:
            if roofline:
                try:
                    blocks = hardware.kv_capacity_blocks(lat, pool.block_size)
                except ValueError as exc:
                    raise ResolveError([("$", str(exc))]) from None
            else:
                blocks = DEFAULT_NUM_GPU_BLOCKS
            pool = attrs.evolve(pool, num_gpu_blocks=blocks)
        if roofline and pool.backend == "sglang" and pool.sglang.chunked_prefill_size is None:
            pool = attrs.evolve(pool, sglang=attrs.evolve(pool.sglang, chunked_prefill_size=_sglang_chunk(lat)))
        if pool.kv_offload is not None and pool.kv_offload.kv_bytes_per_token is None:
            kv = (hardware.load_model(lat.model).kv_bytes_per_token(lat.kv_precision) if roofline
                  else DEFAULT_KV_BYTES_PER_TOKEN)
            pool = attrs.evolve(pool, kv_offload=attrs.evolve(pool.kv_offload, kv_bytes_per_token=kv))
        if pool.kv_offload is not None and pool.kv_offload.host_blocks is None:
            pool = attrs.evolve(pool, kv_offload=attrs.evolve(  # (a size in GiB becomes blocks)
                pool.kv_offload, host_blocks=_host_blocks(name, pool, lat if roofline else None),
                kv_offloading_size_gib=None))
        if roofline and pool.max_model_len is None:  # vLLM's default: the model's own limit
            longest = hardware.load_model(lat.model).max_position_embeddings
            if longest:
                pool = attrs.evolve(pool, max_model_len=longest)
        resolved[name] = pool
    scenario = attrs.evolve(scenario, pools=attrs.evolve(scenario.pools, **resolved))
    if scenario.link is not None and scenario.link.kv_bytes_per_token is None:
        kv = (hardware.load_model(models[-1].model).kv_bytes_per_token(models[-1].kv_precision) if models
              else DEFAULT_KV_BYTES_PER_TOKEN)
        scenario = attrs.evolve(scenario, link=attrs.evolve(scenario.link, kv_bytes_per_token=kv))
    return scenario


def _host_blocks(name: str, pool, lat) -> int:
    """A pool's host KV tier in blocks per worker, when ``host_blocks`` is unset: its
    ``kv_offloading_size_gib``, else the host memory of a worker's GPUs (roofline or aic model
    ``lat``, else None).

    Raises:
        ResolveError: neither size, and no GPU host memory to take it from.
    """
    off = pool.kv_offload
    block_bytes = pool.block_size * off.kv_bytes_per_token
    where = f"$.pools.{name}.kv_offload.host_blocks"
    if off.kv_offloading_size_gib is not None:
        gib = off.kv_offloading_size_gib
    else:
        gpu = hardware.load_gpu(lat.gpu) if lat is not None else None
        if gpu is None or gpu.host_memory_gib is None:
            why = (f"{gpu.name} has no host memory figure" if gpu is not None
                   else "the latency model names no GPU")
            raise ResolveError([(where, f"kv_offload needs 'host_blocks' or 'kv_offloading_size_gib' ({why} "
                                        f"to size the host tier from)")])
        gib = gpu.host_memory_gib * pool.gpus_per_worker
    blocks = int(gib * 2**30 // block_bytes)
    if blocks < 1:
        raise ResolveError([(where, f"{gib:g} GiB holds no {block_bytes}-byte KV block")])
    return blocks
