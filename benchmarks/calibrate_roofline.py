"""Fit the roofline model's efficiencies and overheads per GPU; writes simkit/engine/data/calibration.json.

    python benchmarks/calibrate_roofline.py [--vidur ../shared/data/vidur_profiling]

(needs scipy: pip install -e ".[bench]")
                                            [--silicon PATH/silicon_sample.csv] [--dry-run]

Data (none of it is scored by benchmarks/silicon_accuracy.py except as stated):

1. GEMM and elementwise ops: every GPU that aiconfigurator-core's per-op database covers takes
   its GEMM efficiencies from its own measured GEMM kernels, per weight precision (bf16, fp8,
   fp4) and per engine's kernels (``fit_gemm_aic``: ``gemm`` and ``backends.<engine>.gemm``,
   with ``quant_memory_eff`` for the activations' quantisation). Vidur's per-layer operator
   medians (microsoft/vidur, MIT; ``../shared/data/vidur_profiling/{a100,h100}_llama2_*_mlp.csv``:
   QKV, O, MLP up and down projections plus norms, rotary, activation and residual adds of one
   layer, for 1..4096 tokens at TP 1/2/4/8) fit ``gemm_compute_eff``, ``gemm_memory_eff`` and
   the per-layer fixed time ``layer_overhead_us`` on the A100 and H100 (least squares on log
   time, scipy; kept as ``vidur_gemm`` where the aic tables replace them).
2. Attention: ``a100_llama2_70b_tp2_attention.csv`` (prefill by chunk and context, decode by
   batch and context) fits ``attention_compute_eff`` and ``attention_memory_eff`` for the A100
   (kept as ``vidur_attention``); every GPU that aiconfigurator-core's per-op database covers
   (``systems/data/<system>/attention/``: FlashAttention-3/4, FlashInfer, Triton and TRT-LLM
   kernels, Apache-2.0) takes instead the median fraction of peak its kernels reach where they
   are compute-bound (prefill) or memory-bound (decode) (``fit_attention_aic``). GPUs in
   neither take the A100's Vidur fractions.
3. All-reduce: aiconfigurator-core's TRT-LLM custom all-reduce kernels per GPU
   (``fit_allreduce_aic``), else ``{a100,h100}_dgx_all_reduce.csv`` (message bytes x GPUs;
   kept as ``vidur_comm_eff``). Fits ``comm_eff`` and ``allreduce_latency_us``.
4. Host overheads and the all-reduce latency: the calibration subset of aiconfigurator-core's
   ``silicon_sample.csv``, the rows whose ``silicon_rows.calibration_row(row)`` is true
   (SHA-256 of the deployment and concurrency, one in four). Each is simulated exactly as
   benchmarks/silicon_accuracy.py simulates a row (its own engine's scheduler, under the
   benchmark client and server settings that measured it: ``silicon_rows.harness_for``), with
   the five terms 0; ``layer_overhead_us``, ``pass_overhead_ms``, ``sequence_overhead_us`` (per request
   sampled in a pass), ``request_layer_overhead_us`` (per such request and layer) and
   ``allreduce_latency_us`` are the least-squares fit of the measured
   TPOT (log; ``fit_overheads``), per GPU (on its dense-model rows when there are at least 10,
   else the median of the other GPUs' fits) and per (GPU, backend) with at least
   ``MIN_BACKEND_ROWS`` (12) dense rows (``backends``; used when a
   scenario names its ``backend``; when its rows are of one model depth, which cannot tell
   the per-layer from the per-pass time apart, ``layer_overhead_us`` is held at the GPU's),
   and per (GPU, backend) on the MoE rows alone (``<backend>/moe``: MoE models take it; MoE
   rows never set a dense-model term), and
   on the dense rows whose servers ran async scheduling, where they are some of the engine's
   rows only (``<backend>/async``: pools with ``async_scheduling`` take it).
   Rows up to concurrency 1024 are used, as silicon_accuracy.py scores them. Vidur's per-layer fixed time (kernels timed one by one, no
   CUDA graphs) and its NCCL all-reduce latency are kept as ``vidur_layer_overhead_us`` and
   ``vidur_allreduce_latency_us`` for reference. benchmarks/silicon_accuracy.py scores only
   the other rows.

5. The serving frontend: ``dispatch_overhead_ms`` (``--frontend-at dispatch``, the default;
   ``delivery`` fits ``first_token_overhead_ms`` instead, ``split`` half each) is the weighted
   median of measured minus simulated TTFT over the dense calibration rows, per (GPU, backend)
   with at least ``MIN_FRONTEND_ROWS`` (8) rows, else the backend over every GPU
   (``fit_frontend``), then checked by resimulating them (the note gives MAPE before and after).

6. The ``aic`` model's host time (``--aic-only`` refits just this): ``aic_pass_overhead_ms`` and
   ``aic_sequence_overhead_us``, the least-squares fit of the dense calibration rows' TPOT
   simulated with ``--latency-model aic`` (``fit_aic_overheads``): aiconfigurator's pass times
   are kernel sums with none of the engine's CPU work.

Each entry's ``source`` and ``fit_*`` notes say where every number came from.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_rows import (SILICON_GPUS, SILICON_MODELS, calibration_row, concurrency,  # noqa: E402
                          find_silicon, frontend_shift_ms, input_error, load_rows, scenario_for,
                          simulate_row, skip_reason, worker_gpus)

from simkit.engine import hardware  # noqa: E402
from simkit.spec import ConfigError, RooflineLatency  # noqa: E402
from simkit.engine.latency import RooflineModel  # noqa: E402
from simkit.engine.hardware import (PRECISION_BYTES, Calibration, ModelArch, gpu_names, load_gpu,  # noqa: E402
                                    load_model)

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "simkit" / "engine" / "data" / "calibration.json"
GEMM_OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]
ELEMENTWISE_OPS = ["input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add"]


def _med(df: pd.DataFrame, op: str) -> np.ndarray:
    return df[f"time_stats.{op}.median"].fillna(0.0).to_numpy()


def _arch(row: pd.Series, layers: int = 1) -> ModelArch:
    h, nh = int(row["n_embd"]), int(row["n_head"] if "n_head" in row else row["n_q_head"])
    return ModelArch(name="vidur", num_layers=layers, hidden_size=h, num_heads=nh,
                     num_kv_heads=int(row["n_kv_head"]), head_dim=h // nh,
                     intermediate_size=int(row.get("n_expanded_embd", 4 * h)), vocab_size=32000)


def _model(gpu: str, arch: ModelArch, tp: int, cal: Calibration) -> RooflineModel:
    spec = RooflineLatency(model="Llama-3.1-8B", gpu=gpu, tensor_parallel_size=tp)
    return RooflineModel(spec, arch=arch, calibration=cal)


def _op_time(model: RooflineModel, names: tuple, *args) -> float:
    return sum(op.time_s for op in model.breakdown(*args) if op.name in names)


def _log_fit(predict, measured: np.ndarray, x0: list, bounds: tuple) -> tuple[np.ndarray, float]:
    """Least squares on log(predicted / measured) (relative error, whatever the scale);
    returns the parameters and the median |relative error| of the fit."""
    res = least_squares(lambda x: np.log(predict(x) / measured), x0=x0, bounds=bounds)
    return res.x, float(np.median(np.abs(predict(res.x) / measured - 1)))


def fit_gemm(gpu: str, files: list[Path]) -> dict:
    df = pd.concat([pd.read_csv(f) for f in files], ignore_index=True)
    measured_s = (sum(_med(df, op) for op in GEMM_OPS + ELEMENTWISE_OPS) + _med(df, "add")) * 1e-3
    rows = df.to_dict("records")
    archs = [_arch(pd.Series(r)) for r in rows]

    def predict(x):
        cal = Calibration(gemm_compute_eff=x[0], gemm_memory_eff=x[1], layer_overhead_us=x[2],
                          pass_overhead_ms=0.0)
        return np.array([_op_time(_model(gpu, a, int(r["num_tensor_parallel_workers"]), cal),
                                  ("gemm", "elementwise", "overhead"), int(r["num_tokens"]), 0, 0, 0)
                         for a, r in zip(archs, rows)])

    x, err = _log_fit(predict, measured_s, [0.6, 0.7, 20.0], ([0.05, 0.05, 0.0], [1.0, 1.0, 500.0]))
    return {"gemm_compute_eff": round(x[0], 4), "gemm_memory_eff": round(x[1], 4),
            "layer_overhead_us": round(x[2], 2),
            "fit_gemm": f"{len(rows)} Vidur rows, median |rel err| {err:.3f}"}


def fit_attention(gpu: str, path: Path) -> dict:
    df = pd.read_csv(path)
    df = df[df["time_stats.attn_prefill.median"].notna() | df["time_stats.attn_decode.median"].notna()]
    rows = df.to_dict("records")
    tp = int(rows[0]["num_tensor_parallel_workers"])
    arch = _arch(pd.Series(rows[0]))
    measured_s, shapes = [], []
    for r in rows:
        b, kv = int(r["batch_size"]), int(r["kv_cache_size"])
        if r["is_prefill"] and r["prefill_chunk_size"] > 0:
            n = int(r["prefill_chunk_size"])
            pairs = b * (n * kv + n * (n + 1) // 2)
            shapes.append(("attention_prefill", b * n, 0, 0, pairs))
            measured_s.append(r["time_stats.attn_prefill.median"] * 1e-3)
        elif not r["is_prefill"]:
            shapes.append(("attention_decode", 0, b, b * (kv + 1), 0))
            measured_s.append(r["time_stats.attn_decode.median"] * 1e-3)
    measured = np.array(measured_s)
    keep = measured > 0
    shapes = [s for s, k in zip(shapes, keep) if k]
    measured = measured[keep]

    def predict(x):
        cal = Calibration(attention_compute_eff=x[0], attention_memory_eff=x[1])
        m = _model(gpu, arch, tp, cal)
        return np.array([_op_time(m, (name,), *args) for name, *args in shapes]) + x[2] * 1e-6

    x, err = _log_fit(predict, measured, [0.5, 0.6, 10.0], ([0.02, 0.02, 0.0], [1.0, 1.0, 200.0]))
    return {"attention_compute_eff": round(x[0], 4), "attention_memory_eff": round(x[1], 4),
            "attention_launch_us": round(x[2], 2),
            "fit_attention": f"{len(measured)} Vidur rows (A100, Llama-2-70B TP2), median |rel err| {err:.3f}"}


def fit_attention_aic(gpu: str, files: list[Path]) -> dict:
    """Attention efficiencies of ``gpu`` from aiconfigurator-core's per-op attention tables
    (``systems/data/<system>/attention/<engine>/<version>/{context,generation}_attention_perf
    .parquet``: one kernel call per row, ``latency`` in ms), all engines pooled; bf16 KV, full
    attention. The roofline efficiency is the fraction of peak a kernel reaches where it is
    bound by that resource, so each is the median over the calls that are clearly bound by it:
    ``attention_compute_eff`` over prefill calls of at least 2e11 FLOPs (``batch_size`` fresh
    prompts of ``isl`` tokens: ``isl (isl + 1) / 2`` causal pairs each, ``4 head_dim
    num_heads`` FLOPs a pair), ``attention_memory_eff`` over decode calls reading at least
    200 MB (``batch_size`` requests over ``step + 1`` tokens of K and V). Shorter calls are
    launch- and per-request-bound, which the fixed overheads hold."""
    g = load_gpu(gpu)
    peak, bw = g.tflops("bf16") * 1e12, g.hbm_gb_per_s * 1e9
    compute, memory, engines = [], [], set()
    for f in files:
        df = pd.read_parquet(f)
        if "window_size" in df:
            df = df[df.window_size == 0]
        df = df[(df.attn_dtype == "bfloat16") & (df.kv_cache_dtype == "bfloat16") & (df.latency > 0)]
        b, isl, step, t_s = (df[k].to_numpy(float) for k in ("batch_size", "isl", "step", "latency"))
        t_s = t_s * 1e-3
        engines.add(f.parent.parent.name)
        if f.name.startswith("context"):
            flops = b * isl * (isl + 1) / 2 * 4.0 * (df.num_heads * df.head_dim).to_numpy(float)
            compute.append((flops / t_s / peak)[flops >= 2e11])
        else:
            nbytes = b * (step + 1) * 2.0 * (df.num_key_value_heads * df.head_dim).to_numpy(float) * 2.0
            memory.append((nbytes / t_s / bw)[nbytes >= 2e8])
    ce, me = np.concatenate(compute), np.concatenate(memory)
    q = lambda a: "median {:.3f} (p10 {:.3f}, p90 {:.3f})".format(*np.percentile(a, [50, 10, 90]))  # noqa: E731
    return {"attention_compute_eff": round(float(np.median(ce)), 4),
            "attention_memory_eff": round(float(np.median(me)), 4),
            "fit_attention": f"aiconfigurator-core attention kernels ({', '.join(sorted(engines))}): compute "
                             f"{q(ce)} over {len(ce)} prefill calls, memory {q(me)} over {len(me)} decode calls"}


#: aiconfigurator-core's GEMM dtypes for simkit's weight precisions (per-tensor fp8, NVFP4)
AIC_GEMM_DTYPES = {"bf16": "bfloat16", "fp8": "fp8", "fp4": "nvfp4"}


def fit_gemm_aic(gpu: str, files: list[Path]) -> dict:
    """GEMM efficiencies of ``gpu`` per weight precision from aiconfigurator-core's measured
    GEMM tables (``systems/data/<system>/gemm/<engine>/<version>/gemm_perf.parquet``: one
    kernel per row, ``m`` tokens x ``k`` inputs x ``n`` outputs, ``latency`` in ms; Apache-2.0),
    over the shapes a serving pass runs (``m`` up to 16,384, ``n`` and ``k`` at least 1,024).
    Per engine (its own kernels) and pooled over engines: least squares on log time of
    ``max(2 m n k / (peak x gemm_compute_eff), (n k b + m k b + 2 m n) / (HBM x
    gemm_memory_eff)) + m k (2 + b) / (HBM x quant_memory_eff) + launch`` for ``b`` bytes per
    weight, the last term the quantization of the activations (fp8, fp4 only; bf16 keeps the
    default). The launch time is fitted and dropped (the per-layer overhead holds it).
    Returns ``{"gemm": {precision: efficiencies}, "backends": {engine: {"gemm": {...}}}, "fit_gemm": note}``."""
    g = load_gpu(gpu)
    frames = {}
    for f in files:
        df = pd.read_parquet(f)
        engine = f.parent.parent.name
        frames[engine] = pd.concat([frames[engine], df]) if engine in frames else df
    bw = g.hbm_gb_per_s * 1e9

    def fit(df: pd.DataFrame, precision: str):
        b = PRECISION_BYTES[precision]
        x = df[(df.gemm_dtype == AIC_GEMM_DTYPES[precision]) & (df.n >= 1024) & (df.k >= 1024) & (df.m <= 16384)
               & (df.latency > 0)]
        if len(x) < 100:
            return None
        m, n, k = (x[c].to_numpy(float) for c in ("m", "n", "k"))
        t = x.latency.to_numpy(float) * 1e-3
        peak = g.tflops(precision) * 1e12
        flops, nbytes = 2.0 * m * n * k, n * k * b + m * k * b + 2.0 * m * n
        quant = m * k * (2 + b) if precision != "bf16" else np.zeros_like(m)

        def predict(p):
            return np.maximum(flops / (peak * p[0]), nbytes / (bw * p[1])) + quant / (bw * p[3]) + p[2] * 1e-6

        p, err = _log_fit(predict, t, [0.6, 0.7, 5.0, 0.5], ([0.05, 0.05, 0.0, 0.01], [1.2, 1.2, 100.0, 5.0]))
        out = {"gemm_compute_eff": round(float(p[0]), 4), "gemm_memory_eff": round(float(p[1]), 4)}
        if precision != "bf16":
            out["quant_memory_eff"] = round(float(p[3]), 4)
        return out, len(x), err

    result: dict = {"gemm": {}, "backends": {}}
    notes = []
    for precision in AIC_GEMM_DTYPES:
        if precision not in g.dense_tflops:
            continue
        pooled = fit(pd.concat(frames.values()), precision)
        if pooled is None:
            continue
        result["gemm"][precision] = pooled[0]
        notes.append(f"{precision} {pooled[1]} kernels, median |rel err| {pooled[2]:.3f}")
        for engine, df in frames.items():
            mine = fit(df, precision)
            if mine is not None:
                result["backends"].setdefault(engine, {}).setdefault("gemm", {})[precision] = mine[0]
    result["fit_gemm"] = (f"aiconfigurator-core GEMM kernels ({', '.join(sorted(frames))}): " + "; ".join(notes))
    return result


def fit_allreduce(gpu: str, path: Path) -> dict:
    df = pd.read_csv(path)
    df = df[df["devices_per_node"] == df["num_workers"]]  # one node, NVLink (the engine's case)
    g = load_gpu(gpu)
    t = df["num_workers"].to_numpy(float)
    nbytes = df["size"].to_numpy(float)
    measured = df["time_stats.all_reduce.median"].to_numpy() * 1e-3

    def predict(x):  # the engine's formula: latency + 2 (t-1)/t bytes / (link * eff)
        return x[1] * 1e-6 + 2 * (t - 1) / t * nbytes / (g.intra_node_gb_per_s * 1e9 * x[0])

    x, err = _log_fit(predict, measured, [0.7, 10.0], ([0.05, 0.0], [1.5, 500.0]))
    return {"comm_eff": round(x[0], 4), "allreduce_latency_us": round(x[1], 2),
            "fit_allreduce": f"{len(df)} Vidur rows, median |rel err| {err:.3f}"}


def fit_allreduce_aic(gpu: str, path: Path) -> dict:
    """``comm_eff`` of ``gpu`` from aiconfigurator-core's measured all-reduce kernels (TRT-LLM's
    custom all-reduce, ``comm/trtllm/<version>/custom_allreduce_perf.parquet``: ``message_size``
    bf16 elements over ``num_gpus`` GPUs of one NVLink domain, ``latency`` in ms): least squares
    on log time of ``latency + 2 (t - 1) / t x bytes / (NVLink x comm_eff)`` over messages of
    1 MiB and more (the bandwidth-bound ones; the latency is fitted on TPOT with the overheads)."""
    df = pd.read_parquet(path)
    df = df[(df.op_name == "all_reduce") & (df.message_size * 2 >= 1 << 20) & (df.latency > 0)]
    g = load_gpu(gpu)
    t = df.num_gpus.to_numpy(float)
    nbytes = df.message_size.to_numpy(float) * 2
    measured = df.latency.to_numpy(float) * 1e-3

    def predict(x):
        return x[1] * 1e-6 + 2 * (t - 1) / t * nbytes / (g.intra_node_gb_per_s * 1e9 * x[0])

    x, err = _log_fit(predict, measured, [0.8, 10.0], ([0.05, 0.0], [1.5, 500.0]))
    return {"comm_eff": round(float(x[0]), 4),
            "fit_allreduce": f"{len(df)} aiconfigurator-core custom all-reduce kernels ({path.parent.name}), "
                             f"median |rel err| {err:.3f}"}


#: fewest calibration rows for an engine's own fit on a GPU (five terms; fewer rows overfit,
#: e.g. 8 rows of one small model gave a 9.7 ms pass overhead that then priced every model)
MIN_BACKEND_ROWS = 12
OVERHEADS = ("layer_overhead_us", "pass_overhead_ms", "sequence_overhead_us", "allreduce_latency_us",
             "request_layer_overhead_us")
#: the serving frontend's times, fitted on TTFT once the pass times are (fit_frontend)
FRONTEND = ("dispatch_overhead_ms", "first_token_overhead_ms")
#: fewest dense calibration rows for a frontend fit of its own (GPU and backend, then GPU)
MIN_FRONTEND_ROWS = 8


def pooled_overheads(fits: dict) -> dict:
    """The median over GPUs of their dense-row fits (``fits[gpu]["all"]``, where there is one):
    the terms of a GPU with too few dense calibration rows; 0 when no GPU has a fit."""
    terms = [f["all"][0] for f in fits.values() if "all" in f]
    return {k: float(np.median([t[k] for t in terms])) if terms else 0.0 for k in OVERHEADS}


def group_fits(samples: dict, fit) -> dict:
    """:func:`fit_overheads`' fits from its per-GPU ``samples`` (tuples: backend, is_moe, ...,
    async at index 7): ``fit(items, layer_us)`` per group, as that function's docstring says.
    Returns {gpu: {"all": fit, backend: fit, backend/moe: fit, backend/async: fit}} with only
    the groups that have the rows."""
    # dense-model terms come from dense rows only: MoE rows mix in expert and attention-DP
    # parallelism the engine approximates (the DP/MoE issue's), and fitted into a GPU's dense
    # terms they set Qwen3-32B's host time on GB200 from DeepSeek's (the GB200 and B300
    # TRT-LLM fits' median TPOT error was 0.45 and 0.93); a GPU with fewer than 10 dense rows
    # takes the median of the other GPUs' dense fits (``pooled``)
    gpu_fits = {gpu: fit(dense) for gpu, items in samples.items()
                if len(dense := [it for it in items if not it[1]]) >= 10}
    pooled = pooled_overheads({gpu: {"all": f} for gpu, f in gpu_fits.items()})
    out = {}
    for gpu, items in samples.items():
        fits = {"all": gpu_fits[gpu]} if gpu in gpu_fits else {}
        layer_us = (fits["all"][0] if fits else pooled)["layer_overhead_us"]
        for backend in sorted({it[0] for it in items}):
            mine = [it for it in items if it[0] == backend]
            rows = [it for it in mine if not it[1]]
            if len(rows) >= MIN_BACKEND_ROWS:
                # rows of one model depth cannot tell the per-layer from the per-pass time:
                # the per-layer time is then the GPU's (fitted over all engines' models)
                one_depth = len({it[3] for it in rows}) < 2
                fits[backend] = fit(rows, layer_us if one_depth else None)
            # MoE models run other paths (expert dispatch, attention data parallelism), often on
            # other engine versions: their own fit where they have the rows
            moe = [it for it in mine if it[1]]
            if len(moe) >= MIN_BACKEND_ROWS:
                one_depth = len({it[3] for it in moe}) < 2
                fits[f"{backend}/moe"] = fit(moe, layer_us if one_depth else None)
            # dense rows whose servers ran async scheduling (vLLM's --async-scheduling: the next
            # pass scheduled while one runs, which hides host time), when they are some of the
            # engine's rows only: their own fit, used by pools that run so. Chosen on the
            # calibration rows by leave-one-out: H100 vLLM's 15 async rows 7.0% TPOT error with
            # the engine's fit against 5.8% with their own, H200's 12 7.7% against 2.9%; its 24
            # and 6 other rows 8.6 / 8.7% and 47.7 / 42.9%, so those keep the engine's fit
            overlap = [it for it in rows if it[7]]
            if len(overlap) >= MIN_BACKEND_ROWS and len(overlap) < len(rows):
                one_depth = len({it[3] for it in overlap}) < 2
                fits[f"{backend}/async"] = fit(overlap, layer_us if one_depth else None)
        out[gpu] = fits
    return out


def fit_overheads(silicon: Path, max_concurrency: int = 1024) -> dict:
    """Host overheads and the all-reduce latency from the calibration rows of
    silicon_sample.csv, by simulation.

    Each calibration row is simulated as silicon_accuracy.py does, with the five terms 0; in
    the closed loop a decode token costs about one pass of ``b`` requests, so the
    simulated TPOT grows by about ``layers * layer_overhead_us + pass_overhead_ms +
    b * (sequence_overhead_us + layers * request_layer_overhead_us) + (2 layers if TP > 1) *
    allreduce_latency_us`` with them (``b`` the requests per worker: the concurrency over the
    workers, at most ``max_num_seqs``).
    The all-reduce latency is fitted here rather than taken from Vidur's NCCL table because
    serving engines run small all-reduces through their own one-shot kernels (vLLM's and
    TRT-LLM's custom all-reduce), much faster than NCCL's ring. Least squares on log TPOT
    gives the terms per GPU (its dense-model rows, when there are at least 10), per (GPU,
    backend) with at least ``MIN_BACKEND_ROWS`` dense rows, and per (GPU, backend) on MoE rows
    alone (``<backend>/moe``, used for MoE models) with ``MIN_BACKEND_ROWS`` MoE rows; MoE rows
    never set a dense fit. Returns {gpu: {"all": fit, backend: fit, ...}} ("all" absent for a
    GPU with fewer than 10 dense rows: the caller takes the median of the others), a fit
    being ({term: value}, rows, median |rel err| of TPOT).
    """
    zero = dict.fromkeys(OVERHEADS + FRONTEND, 0.0)
    samples: dict[str, list] = {}
    for row in load_rows(silicon):
        if not calibration_row(row) or skip_reason(row):
            continue
        conc = concurrency(row)
        if conc > max_concurrency or row["osl"] < 2:
            continue
        try:
            _, tpot0 = simulate_row(row, conc, zero)
        except ConfigError:  # does not fit in memory
            continue
        arch = load_model(SILICON_MODELS[row["model_path"]])
        pools = scenario_for(row, conc)["pools"]
        pool = pools.get("aggregated") or pools["decode"]
        batch = min(-(-conc // pool["workers"]), pool["max_num_seqs"])
        tp = worker_gpus(row) if row["mode"] == "agg" else worker_gpus(row, "decode_")
        samples.setdefault(SILICON_GPUS[row["system"]], []).append(
            (row["backend"], arch.is_moe, tpot0, arch.num_layers, batch, 2 * arch.num_layers * (tp > 1),
             row["silicon_tpot_ms"], bool(pool.get("async_scheduling"))))

    def fit(items, layer_us=None):
        base, layers, batch, allreduces, measured = (np.array([it[k] for it in items], float)
                                                     for k in (2, 3, 4, 5, 6))

        def predict(x):
            return base + (layers * x[0] + batch * x[2] + allreduces * x[3] + layers * batch * x[4]) * 1e-3 + x[1]

        lo, hi = [0.0, 0.0, 0.0, 0.0, 0.0], [500.0, 100.0, 500.0, 200.0, 50.0]
        if layer_us is not None:  # held at a value fitted elsewhere
            lo[0], hi[0] = layer_us, layer_us + 1e-9
        x, err = _log_fit(predict, measured, [10.0 if layer_us is None else layer_us, 1.0, 10.0, 10.0, 0.1], (lo, hi))
        return {k: round(float(v), 3) for k, v in zip(OVERHEADS, x)}, len(items), err

    return group_fits(samples, fit)


AIC_OVERHEADS = ("aic_pass_overhead_ms", "aic_sequence_overhead_us")


def fit_aic_overheads(silicon: Path, max_concurrency: int = 1024) -> dict:
    """The host time the ``aic`` latency model adds to aiconfigurator-core's kernel sums, from
    the dense calibration rows, by simulation with that model.

    aiconfigurator measures kernels (GEMM, attention, communication), not the engine's CPU
    work, so its pass times carry no host overhead. Each dense calibration row it has data for
    is simulated as silicon_accuracy.py --latency-model aic does, with both terms 0; a decode
    token then costs about one pass of ``b`` requests, so TPOT grows by ``aic_pass_overhead_ms
    + b * aic_sequence_overhead_us``. Least squares on log TPOT per (GPU, backend) with at
    least ``MIN_BACKEND_ROWS`` rows, else per GPU over its engines. Returns {gpu: {"all": fit,
    backend: fit}}, a fit being ({term: value}, rows, median |rel err| of TPOT)."""
    zero = {"pass_overhead_ms": 0.0, "sequence_overhead_us": 0.0}
    samples: dict = {}
    for row in load_rows(silicon):
        if not calibration_row(row) or skip_reason(row) or load_model(SILICON_MODELS[row["model_path"]]).is_moe:
            continue
        conc = concurrency(row)
        if conc > max_concurrency or row["osl"] < 2:
            continue
        try:
            _, tpot0 = simulate_row(row, conc, zero, latency_model="aic")
        except Exception:  # ConfigError (does not fit), or aiconfigurator has no data for this shape
            continue
        pools = scenario_for(row, conc)["pools"]
        pool = pools.get("aggregated") or pools["decode"]
        batch = min(-(-conc // pool["workers"]), pool["max_num_seqs"])
        samples.setdefault(SILICON_GPUS[row["system"]], []).append((row["backend"], tpot0, batch,
                                                                    row["silicon_tpot_ms"]))

    def fit(items):
        base, batch, measured = (np.array([it[k] for it in items], float) for k in (1, 2, 3))
        x, err = _log_fit(lambda x: base + x[0] + batch * x[1] * 1e-3, measured, [1.0, 10.0],
                          ([0.0, 0.0], [100.0, 500.0]))
        return {k: round(float(v), 3) for k, v in zip(AIC_OVERHEADS, x)}, len(items), err

    out = {}
    for gpu, items in samples.items():
        fits = {"all": fit(items)} if len(items) >= MIN_BACKEND_ROWS else {}
        for backend in sorted({it[0] for it in items}):
            mine = [it for it in items if it[0] == backend]
            if len(mine) >= MIN_BACKEND_ROWS:
                fits[backend] = fit(mine)
        out[gpu] = fits
    return out


def apply_aic_overheads(table: dict, fits: dict) -> None:
    """Write :func:`fit_aic_overheads`'s terms into the calibration ``table`` (in place): the
    GPU's fit at its level, each engine's in its ``backends`` entry."""
    for gpu, entry in table.items():
        if gpu == "default" or not isinstance(entry, dict):
            continue
        for key in AIC_OVERHEADS:
            entry.pop(key, None)
            for slot in entry.get("backends", {}).values():
                slot.pop(key, None)
        entry.pop("fit_aic_overheads", None)
        for backend, (terms, n, ape) in fits.get(gpu, {}).items():
            note = f"{n} dense calibration rows with --latency-model aic, median |rel err| of TPOT {ape:.3f}"
            slot = entry if backend == "all" else entry.setdefault("backends", {}).setdefault(backend, {})
            slot.update(terms)
            slot["fit_aic_overheads"] = note


def _table_text(table: dict) -> str:
    """calibration.json's text for ``table`` (GPU -> entry), with ``default`` the H100's."""
    return json.dumps({**{g: e for g, e in table.items() if g != "default"},
                       "default": {**table["H100"], "source": "H100 fit (GPU given by a path or unknown)"}},
                      indent=1) + "\n"


def fit_frontend(silicon: Path, at: str = "dispatch", max_concurrency: int = 1024) -> dict:
    """The serving frontend's time per request, from the TTFT of the dense calibration rows.

    Each row is simulated with the calibration just written (pass times fitted) and no
    frontend; the client's TTFT then misses ``d`` = API server, tokenization, routing and the
    first streamed chunk. One constant ``d`` per (GPU, backend) with at least
    ``MIN_FRONTEND_ROWS`` rows, else per GPU, else per backend over every GPU: the one that
    minimises the mean |relative error| of TTFT if each row's TTFT grew by ``d`` (the weighted
    median of ``measured - simulated``, weights 1 / measured), at least 0. ``at`` places it:
    ``dispatch`` (before the router), ``delivery`` (engine tokens to the client) or ``split``
    (half each); a client's TTFT and E2E hold their sum only, and the calibration rows decide
    (benchmarks/silicon_accuracy.py --calibration-rows). MoE rows are left out (their engine
    paths belong to the attention-DP / expert-parallel model). Returns {gpu: {"all": fit,
    backend: fit}, "backend:<b>": fit}, a fit being ({field: ms}, rows, MAPE before, MAPE after
    the linear shift)."""
    zero = dict.fromkeys(FRONTEND, 0.0)
    gaps: dict = {}
    for row in load_rows(silicon):
        if not calibration_row(row) or skip_reason(row):
            continue
        conc = concurrency(row)
        if conc > max_concurrency or load_model(SILICON_MODELS[row["model_path"]]).is_moe:
            continue
        try:
            ttft, _ = simulate_row(row, conc, zero)
        except ConfigError:
            continue
        gaps.setdefault((SILICON_GPUS[row["system"]], row["backend"]), []).append((ttft, row["silicon_ttft_ms"]))

    def fit(items):
        sim, meas = (np.array([it[k] for it in items], float) for k in (0, 1))
        d = frontend_shift_ms(sim, meas)
        before, after = np.mean(np.abs(sim / meas - 1)), np.mean(np.abs((sim + d) / meas - 1))
        share = {"dispatch": (1.0, 0.0), "delivery": (0.0, 1.0), "split": (0.5, 0.5)}[at]
        return ({"dispatch_overhead_ms": round(d * share[0], 3), "first_token_overhead_ms": round(d * share[1], 3)},
                len(items), round(float(before), 4), round(float(after), 4))

    out: dict = {}
    for backend in sorted({b for _, b in gaps}):
        mine = [it for (g, b), items in gaps.items() if b == backend for it in items]
        out[f"backend:{backend}"] = fit(mine)
    for gpu in sorted({g for g, _ in gaps}):
        items = [it for (g, _), rows in gaps.items() if g == gpu for it in rows]
        fits = {"all": fit(items)} if len(items) >= MIN_FRONTEND_ROWS else {}
        for (g, backend), rows in gaps.items():
            if g == gpu and len(rows) >= MIN_FRONTEND_ROWS:
                fits[backend] = fit(rows)
        out[gpu] = fits
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vidur", default=str(ROOT.parent / "shared" / "data" / "vidur_profiling"))
    ap.add_argument("--silicon", default=None, help="silicon_sample.csv (default: the installed aiconfigurator_core's, or /tmp/aic)")
    ap.add_argument("--aic-data", default=None,
                    help="aiconfigurator-core's systems/data folder (default: beside silicon_sample.csv)")
    ap.add_argument("--frontend-at", choices=("dispatch", "delivery", "split"), default="dispatch",
                    help="where the fitted frontend time goes (see fit_frontend; chosen on calibration rows)")
    ap.add_argument("--aic-only", action="store_true",
                    help="only refit the aic model's host overheads (fit_aic_overheads) into the calibration.json "
                         "there is (needs aiconfigurator-core: pip install -e '.[aic]')")
    ap.add_argument("--dry-run", action="store_true",
                    help="print, do not write calibration.json (the overhead fit then simulates with the "
                         "efficiencies already in it)")
    args = ap.parse_args()
    if args.aic_only:
        silicon = Path(args.silicon) if args.silicon else find_silicon()
        if silicon is None or not silicon.is_file():
            input_error("silicon_sample.csv not found: pass --silicon PATH")
        table = json.loads(OUT.read_text())
        fits = fit_aic_overheads(silicon)
        apply_aic_overheads(table, fits)
        text = _table_text(table)
        print(json.dumps({g: {b: f[0] for b, f in v.items()} for g, v in fits.items()}, indent=1))
        if not args.dry_run:
            OUT.write_text(text)
            print(f"wrote {OUT}")
        return
    vidur = Path(args.vidur)
    fitted: dict[str, dict] = {}
    attention = fit_attention("A100", vidur / "a100_llama2_70b_tp2_attention.csv")
    for gpu, prefix in (("A100", "a100"), ("H100", "h100")):
        entry = fit_gemm(gpu, sorted(vidur.glob(f"{prefix}_llama2_*_mlp.csv")))
        entry.update(fit_allreduce(gpu, vidur / f"{prefix}_dgx_all_reduce.csv"))
        entry.update({k: attention[k] for k in ("attention_compute_eff", "attention_memory_eff")})
        entry["fit_attention"] = attention["fit_attention"]
        entry["source"] = f"fit on Vidur {prefix} operator tables (benchmarks/calibrate_roofline.py)"
        fitted[gpu] = entry
    for gpu in gpu_names():
        if gpu not in fitted:
            fitted[gpu] = {**fitted["H100"], "source": "H100's fitted efficiencies (no Vidur tables for "
                           f"{gpu}; an assumption)"}
    silicon = Path(args.silicon) if args.silicon else find_silicon()
    if silicon is None or not silicon.is_file():
        input_error("silicon_sample.csv not found: pass --silicon PATH (unpack the whole aiconfigurator-core "
                 "wheel: its systems/data/ holds the attention tables) or pip install -e '.[aic]'")
    # attention, GEMMs and all-reduce on each GPU's own kernels where aiconfigurator-core
    # measured them (Vidur has A100 and H100 tables only, with older kernels; Blackwell priced
    # with the H100's efficiencies was off by a precision's worth: fp8 reaches 0.41-0.68 of
    # its peak there, not the H100 bf16 fit's 0.60)
    systems = {gpu: system for system, gpu in SILICON_GPUS.items()}
    data = Path(args.aic_data) if args.aic_data else silicon.parent / "data"
    gemm_backends: dict = {}
    for gpu, entry in fitted.items():
        root = data / systems[gpu] if gpu in systems else None
        files = sorted((root / "attention").glob("*/*/*_attention_perf.parquet")) if root else []
        if files:
            entry["vidur_attention"] = entry.pop("fit_attention")
            entry.update(fit_attention_aic(gpu, files))
        files = sorted((root / "gemm").glob("*/*/gemm_perf.parquet")) if root else []
        if files:
            gemm = fit_gemm_aic(gpu, files)
            if gpu in ("A100", "H100"):  # Vidur's fit, kept for reference
                entry["vidur_gemm"] = {k: entry[k] for k in ("gemm_compute_eff", "gemm_memory_eff", "fit_gemm")}
            entry["gemm"] = gemm["gemm"]
            entry.update({k: v for k, v in gemm["gemm"]["bf16"].items()})  # the GPU's default: bf16
            entry["fit_gemm"] = gemm["fit_gemm"]
            gemm_backends[gpu] = gemm["backends"]
        files = sorted((root / "comm" / "trtllm").glob("*/custom_allreduce_perf.parquet")) if root else []
        if files:
            if gpu in ("A100", "H100"):
                entry["vidur_comm_eff"] = entry["comm_eff"]
            entry.update(fit_allreduce_aic(gpu, files[-1]))
        if "gemm" in entry:
            entry["source"] = ("efficiencies from aiconfigurator-core's kernels measured on this GPU (GEMM per "
                               "precision and engine, attention, all-reduce); overheads from its calibration rows")

    def with_gemm(gpu: str, backends: dict) -> dict:
        """The backends' fitted overheads with their engines' GEMM efficiencies beside."""
        out = {b: dict(v) for b, v in backends.items()}
        for b, g in gemm_backends.get(gpu, {}).items():
            out.setdefault(b, {})["gemm"] = g["gemm"]
        return out

    for gpu, entry in fitted.items():
        entry["backends"] = with_gemm(gpu, entry.get("backends", {}))
    before = OUT.read_text()

    def write(table: dict) -> None:
        OUT.write_text(_table_text(table))
        hardware._calibration_table.cache_clear()

    if not args.dry_run:  # the overhead fit simulates with the efficiencies just fitted
        write(fitted)
    try:
        overheads = fit_overheads(silicon)
        pooled = pooled_overheads(overheads)
        for gpu, entry in fitted.items():
            entry.setdefault("vidur_layer_overhead_us", entry["layer_overhead_us"])
            entry.setdefault("vidur_allreduce_latency_us", entry["allreduce_latency_us"])
            fits = overheads.get(gpu, {})
            entry["backends"] = with_gemm(gpu, {
                b: {**f[0], "fit": f"{f[1]} calibration rows, median |rel err| of TPOT {f[2]:.3f}"}
                for b, f in fits.items() if b != "all"})
            if "all" in fits:
                terms, n, ape = fits["all"]
                note = f"{n} dense calibration rows of silicon_sample.csv, median |rel err| of TPOT {ape:.3f}"
            else:
                terms = pooled
                few = "fewer than 10 dense calibration rows" if gpu in overheads else "no calibration rows"
                note = f"median of the other GPUs' fits ({few})"
            entry.update(**terms, fit_overheads=note)
        if not args.dry_run:  # the frontend fit simulates with the pass times just fitted
            write(fitted)
        frontend = fit_frontend(silicon, args.frontend_at)
    except BaseException:
        OUT.write_text(before)  # never leave an intermediate table behind
        raise
    gpu_level = [f["all"][0] for g, f in frontend.items() if not g.startswith("backend:") and "all" in f]
    everywhere = {k: float(np.median([f[k] for f in gpu_level])) for k in FRONTEND}
    for gpu, entry in fitted.items():
        fits = frontend.get(gpu, {})
        terms, n, before_ape, after_ape = fits.get("all", (everywhere, 0, None, None))
        entry.update(terms)
        entry["fit_frontend"] = (f"{n} dense calibration rows' TTFT (at {args.frontend_at}): MAPE {before_ape:.3f} -> "
                                 f"{after_ape:.3f} shifted" if n else "median of the GPUs' fits (too few rows)")
        for key, fit in frontend.items():
            if key.startswith("backend:"):
                backend = key.split(":", 1)[1]
                own = fits.get(backend)
                terms, n, b_ape, a_ape = own if own else fit
                slot = entry["backends"].setdefault(backend, {})
                slot.update(terms)
                slot["fit_frontend"] = (f"{n} dense calibration rows' TTFT{'' if own else ' (the backend on every GPU)'}:"
                                        f" MAPE {b_ape:.3f} -> {a_ape:.3f} shifted")
    try:  # the aic model's host overheads, with the pass times just fitted
        import aiconfigurator_core  # noqa: F401
    except ImportError:
        print("aiconfigurator-core not installed: the aic model's host overheads are not refitted")
    else:
        try:
            if not args.dry_run:  # the aic runs take the frontend just fitted
                write(fitted)
            apply_aic_overheads(fitted, fit_aic_overheads(silicon))
        except BaseException:
            OUT.write_text(before)
            raise
    text = _table_text(fitted)
    print(text)
    if not args.dry_run:
        OUT.write_text(text)
        print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
