"""Rows of aiconfigurator-core's ``systems/silicon_sample.csv`` as simkit deployments.

Shared by benchmarks/calibrate_roofline.py (which fits the fixed overheads on the calibration
subset) and benchmarks/silicon_accuracy.py (which scores the other rows). A row becomes a
scenario: the roofline model of its model, GPU, precision and TP (x attention-DP: the GPUs of
one worker), aggregated (one worker per ``batch_size`` of concurrency) or disaggregated
(``prefill_num_workers`` and ``decode_num_workers``, each pool with its own TP, an
instantaneous KV link); the workload is ``concurrency`` users, each sending ``rounds``
requests of fixed ISL and OSL one after the other (a closed loop as a dependency chain).
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources
from pathlib import Path
from typing import Optional

import numpy as np
import pandas as pd

from simkit.config import scenario_from_dict
from simkit.engine import make_latency_model
from simkit.hardware import load_calibration
from simkit.request import Request
from simkit.sim import simulate

#: silicon_sample.csv model_path -> simkit model (R1 and V3.1 share DeepSeek-V3's shape)
SILICON_MODELS = {
    "meta-llama/Llama-3.1-8B-Instruct": "Llama-3.1-8B", "nvidia/Llama-3.1-8B-Instruct-FP8": "Llama-3.1-8B",
    "meta-llama/Llama-3.1-70B": "Llama-3.1-70B", "Qwen/Qwen3-32B": "Qwen3-32B",
    "nvidia/Qwen3-32B-NVFP4": "Qwen3-32B", "Qwen/Qwen3-235B-A22B-FP8": "Qwen3-235B-A22B",
    "openai/gpt-oss-120b": "gpt-oss-120b", "deepseek-ai/DeepSeek-V3": "DeepSeek-V3",
    "deepseek-ai/DeepSeek-R1": "DeepSeek-V3", "nvidia/DeepSeek-R1-NVFP4": "DeepSeek-V3",
    "nvidia/DeepSeek-V3.1-NVFP4": "DeepSeek-V3",
}
SILICON_GPUS = {"a100_sxm": "A100", "h100_sxm": "H100", "h200_sxm": "H200", "b200_sxm": "B200",
                "gb200": "GB200", "b300_sxm": "B300", "l40s": "L40S"}
INT_COLS = ["tp_size", "pp_size", "attention_dp_size", "batch_size", "prefill_num_workers",
            "prefill_tp_size", "prefill_attention_dp_size", "decode_num_workers", "decode_tp_size",
            "decode_attention_dp_size", "decode_batch_size", "prefill_batch_size", "moe_tp_size", "moe_ep_size",
            "prefill_moe_tp_size", "prefill_moe_ep_size", "decode_moe_tp_size", "decode_moe_ep_size",
            "prefill_pp_size", "decode_pp_size"]


def worker_gpus(row, prefix: str = "") -> int:
    """GPUs of one worker: attention TP x PP x attention-DP, or the MoE TP x EP if larger.
    simkit prices them as one tensor-parallel group of that size (attention DP and expert
    parallelism are not modelled apart)."""
    attention = max(1, row[f"{prefix}tp_size"]) * max(1, row[f"{prefix}pp_size"]) * max(1, row[f"{prefix}attention_dp_size"])
    return max(attention, max(1, row[f"{prefix}moe_tp_size"]) * max(1, row[f"{prefix}moe_ep_size"]))


def calibration_row(row_id: str) -> bool:
    """Whether a row belongs to the calibration subset (one in four, by SHA-256 of its id)."""
    return hashlib.sha256(row_id.encode()).digest()[0] % 4 == 0


def find_silicon() -> Optional[Path]:
    """silicon_sample.csv of an installed aiconfigurator_core, else of the wheel unpacked in
    /tmp/aic/x (the module docstring of silicon_accuracy.py), else None."""
    try:
        p = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
        if p.is_file():
            return Path(str(p))
    except ModuleNotFoundError:
        pass
    p = Path("/tmp/aic/x/aiconfigurator_core/systems/silicon_sample.csv")
    return p if p.is_file() else None


def load_rows(path: Path) -> list[dict]:
    df = pd.read_csv(path)
    df[INT_COLS] = df[INT_COLS].fillna(0).astype(int)
    return df.to_dict("records")


def precision(row) -> str:
    """Weight precision of a row: fp8, fp4 or bf16 ("" for others, e.g. int4); a row that
    states none is taken as its checkpoint's bf16."""
    p = row["gemm_quant_mode"] if isinstance(row["gemm_quant_mode"], str) else row["precision"]
    p = str(p).lower() if isinstance(p, str) else "bf16"
    if p.startswith("fp8"):
        return "fp8"
    if "fp4" in p:
        return "fp4"
    return "bf16" if p in ("bf16", "float16", "fp16") else ""


def skip_reason(row) -> str:
    """Why simkit cannot model a row ("" when it can)."""
    if row["model_path"] not in SILICON_MODELS or row["system"] not in SILICON_GPUS:
        return f"model/system not shipped ({row['model_path']}, {row['system']})"
    if not precision(row):
        return f"precision {row['gemm_quant_mode']}"
    if not concurrency(row):
        return "concurrency not stated"
    return ""


def concurrency(row) -> int:
    """The row's client concurrency (``silicon_concurrency=N`` in its source, else ``_cN_`` in
    its id); 0 when it states none."""
    m = re.search(r"silicon_concurrency=(\d+)", str(row["silicon_data_source"]))
    if m:
        return int(m.group(1))
    m = re.search(r"_c(\d+)_", row["id"])
    return int(m.group(1)) if m else 0


def scenario_for(row, conc: int, overheads: Optional[dict] = None, latency_model: str = "roofline") -> dict:
    """The scenario (a dict) of a row; ``overheads`` overrides the fitted fixed overheads
    (``layer_overhead_us``, ``pass_overhead_ms``); ``latency_model`` roofline or aic (the
    database of the row's backend, latest version)."""
    model, gpu, prec = SILICON_MODELS[row["model_path"]], SILICON_GPUS[row["system"]], precision(row)
    isl = int(row["isl"])
    engine = {"max_num_batched_tokens": max(8192, isl), "enable_prefix_caching": False, "backend": row["backend"]}

    def latency(tp: int, prefix: str = "") -> dict:
        extra = dict(overheads or {})
        dp = max(1, row[f"{prefix}attention_dp_size"])
        if latency_model == "roofline" and dp > 1 and "sequence_overhead_us" not in extra:
            # attention-DP ranks prepare and sample their own requests in parallel: the
            # worker's host time per request is the per-rank one over the ranks
            extra["sequence_overhead_us"] = load_calibration(gpu, row["backend"]).sequence_overhead_us / dp
        return {"kind": latency_model, "model": model, "gpu": gpu, "precision": prec, "tensor_parallel_size": tp,
                "kv_cache_dtype": "fp8" if prec != "bf16" else "auto", "backend": row["backend"], **extra}

    if row["mode"] == "agg":
        tp = worker_gpus(row)
        # a missing batch size (some rows): the whole concurrency on one worker
        batch = row["batch_size"] * max(1, row["attention_dp_size"]) or conc
        pools = {"aggregated": {"workers": max(1, -(-conc // batch)), "max_num_seqs": batch, **engine}}
        lat = latency(tp)
    else:
        ptp, dtp = worker_gpus(row, "prefill_"), worker_gpus(row, "decode_")
        dworkers = max(1, row["decode_num_workers"])
        # a missing decode batch size (some rows): the concurrency shared by the decode workers
        dbatch = row["decode_batch_size"] * max(1, row["decode_attention_dp_size"]) or -(-conc // dworkers)
        lat = latency(dtp, "decode_")
        pools = {"prefill": {"workers": max(1, row["prefill_num_workers"]), **engine,
                             "latency": latency(ptp, "prefill_")},
                 "decode": {"workers": dworkers, "max_num_seqs": dbatch, **engine}}
    return {"name": row["id"], "latency": lat, "pools": pools,
            "workload": {"kind": "trace", "path": "silicon_sample.csv", "format": "csv"}}


def simulate_row(row, conc: int, overheads: Optional[dict] = None, staggered: bool = False,
                 rounds: int = 3, first_wave: bool = False, latency_model: str = "roofline") -> tuple[float, float]:
    """Simulated mean TTFT and TPOT (ms) of the scored requests (all but each user's first,
    unless ``first_wave``); TPOT = (last - first token) / (OSL - 1), aiconfigurator's
    definition.

    Raises:
        ConfigError: the deployment is invalid (e.g. the weights do not fit).
    """
    scenario = scenario_from_dict(scenario_for(row, conc, overheads, latency_model), source=row["id"])
    isl, osl = int(row["isl"]), int(row["osl"])
    # users start together (as a benchmark client's do) and, requests being identical, stay in
    # lockstep; staggered: user k starts at k/conc of an estimated request lifetime
    life_s = 0.0
    if staggered:
        _, pool = scenario.pools.named()[-1]
        model = make_latency_model(pool.latency or scenario.latency, 1)
        batch = min(conc, pool.max_num_seqs)
        life_s = model.pass_time_s(isl, 0, 0) + osl * model.pass_time_s(0, batch, batch * (isl + osl // 2))
    requests = [Request(rid=i, arrived_at=(i % conc) * life_s / conc, input_length=isl, output_length=osl,
                        session=i % conc, deps=(i - conc,) if i >= conc else ())
                for i in range(rounds * conc)]
    records = simulate(scenario, requests, record_token_times=False)
    done = [r for r in records.requests if (first_wave or r.rid >= conc) and r.status == "completed"]
    ttft = np.mean([r.ttft_s for r in done]) * 1e3
    tpot = np.mean([(r.last_token_at - r.first_token_at) / (osl - 1) for r in done]) * 1e3 if osl > 1 else np.nan
    return float(ttft), float(tpot)
