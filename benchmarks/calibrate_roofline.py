"""Fit the roofline model's efficiencies and overheads per GPU; writes simkit/data/calibration.json.

    python benchmarks/calibrate_roofline.py [--vidur ../shared/data/vidur_profiling]
                                            [--silicon PATH/silicon_sample.csv] [--dry-run]

Data (none of it is scored by benchmarks/silicon_accuracy.py except as stated):

1. GEMM and elementwise ops: Vidur's per-layer operator medians (microsoft/vidur, MIT;
   ``../shared/data/vidur_profiling/{a100,h100}_llama2_*_mlp.csv``): QKV, O, MLP up and down
   projections plus norms, rotary, activation and residual adds of one layer, for 1..4096
   tokens at TP 1/2/4/8. Fits ``gemm_compute_eff``, ``gemm_memory_eff`` and the per-layer
   fixed time ``layer_overhead_us`` (least squares on log time, scipy).
2. Attention: ``a100_llama2_70b_tp2_attention.csv`` (prefill by chunk and context, decode by
   batch and context). Fits ``attention_compute_eff`` and ``attention_memory_eff`` (A100; the
   other GPUs take the A100 fractions: Vidur has no attention table for them).
3. All-reduce: ``{a100,h100}_dgx_all_reduce.csv`` (message bytes x GPUs). Fits ``comm_eff``
   and ``allreduce_latency_us``.
4. Fixed overheads: a calibration subset of aiconfigurator-core's ``silicon_sample.csv``,
   the rows whose ``calibration_row(id)`` is true (SHA-256 of the row id, one in four). For
   each, TPOT is compared with the roofline time of one steady-state pass at that concurrency
   (decode of the batch plus its share of prefill tokens, ISL x batch / OSL, aggregated);
   ``layer_overhead_us`` and ``pass_overhead_ms`` per GPU are the least-squares fit (log
   TPOT), on the dense-model rows when a GPU has at least 10 of them. Vidur's per-layer fixed time (kernels timed one by one, no CUDA graphs) is kept as
   ``vidur_layer_overhead_us`` for reference. benchmarks/silicon_accuracy.py scores only the
   other rows.

GPUs without Vidur tables (H200, B200, GB200, B300, L40S) take the H100 efficiencies (H200 is
the same Hopper die; for the others it is an assumption, stated in each entry's ``source``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from simkit.config import RooflineLatency
from simkit.engine import RooflineModel
from simkit.hardware import Calibration, ModelArch, gpu_names, load_gpu, load_model

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "simkit" / "data" / "calibration.json"
GEMM_OPS = ["attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj"]
ELEMENTWISE_OPS = ["input_layernorm", "attn_rope", "post_attention_layernorm", "mlp_act", "add"]


def calibration_row(row_id: str) -> bool:
    """Whether a silicon_sample.csv row belongs to the calibration subset (1 in 4, by hash)."""
    return hashlib.sha256(row_id.encode()).digest()[0] % 4 == 0


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

    res = least_squares(lambda x: np.log(predict(x) / measured_s), x0=[0.6, 0.7, 20.0],
                        bounds=([0.05, 0.05, 0.0], [1.0, 1.0, 500.0]))
    ape = np.abs(predict(res.x) / measured_s - 1)
    return {"gemm_compute_eff": round(res.x[0], 4), "gemm_memory_eff": round(res.x[1], 4),
            "layer_overhead_us": round(res.x[2], 2),
            "fit_gemm": f"{len(rows)} Vidur rows, median |rel err| {np.median(ape):.3f}"}


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

    res = least_squares(lambda x: np.log(predict(x) / measured), x0=[0.5, 0.6, 10.0],
                        bounds=([0.02, 0.02, 0.0], [1.0, 1.0, 200.0]))
    ape = np.abs(predict(res.x) / measured - 1)
    return {"attention_compute_eff": round(res.x[0], 4), "attention_memory_eff": round(res.x[1], 4),
            "attention_launch_us": round(res.x[2], 2),
            "fit_attention": f"{len(measured)} Vidur rows (A100, Llama-2-70B TP2), median |rel err| {np.median(ape):.3f}"}


def fit_allreduce(gpu: str, path: Path) -> dict:
    df = pd.read_csv(path)
    df = df[df["devices_per_node"] == df["num_workers"]]  # one node, NVLink (the engine's case)
    g = load_gpu(gpu)
    t = df["num_workers"].to_numpy(float)
    nbytes = df["size"].to_numpy(float)
    measured = df["time_stats.all_reduce.median"].to_numpy() * 1e-3

    def predict(x):  # the engine's formula: latency + 2 (t-1)/t bytes / (link * eff)
        return x[1] * 1e-6 + 2 * (t - 1) / t * nbytes / (g.intra_node_gb_per_s * 1e9 * x[0])

    res = least_squares(lambda x: np.log(predict(x) / measured), x0=[0.7, 10.0],
                        bounds=([0.05, 0.0], [1.5, 500.0]))
    ape = np.abs(predict(res.x) / measured - 1)
    return {"comm_eff": round(res.x[0], 4), "allreduce_latency_us": round(res.x[1], 2),
            "fit_allreduce": f"{len(df)} Vidur rows, median |rel err| {np.median(ape):.3f}"}


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


def silicon_precision(row) -> str:
    """The weight precision of a silicon_sample.csv row (int4 and other formats: None)."""
    p = row["gemm_quant_mode"] if isinstance(row["gemm_quant_mode"], str) else row["precision"]
    p = str(p).lower() if isinstance(p, str) else "bf16"  # unstated: the checkpoint's bf16
    if p.startswith("fp8"):
        return "fp8"
    if "fp4" in p:
        return "fp4"
    if p in ("bf16", "float16", "fp16"):
        return "bf16"
    return ""


def silicon_shape(row) -> dict:
    """Deployment of a silicon row: model, gpu, precision, TP, per-worker batch (aggregated or
    decode worker), ISL, OSL; None when simkit cannot model it (unknown model or GPU)."""
    model = SILICON_MODELS.get(row["model_path"])
    gpu = SILICON_GPUS.get(row["system"])
    precision = silicon_precision(row)
    if not model or not gpu or not precision:
        return {}
    agg = row["mode"] == "agg"
    prefix = "" if agg else "decode_"
    tp = int(row[f"{prefix}tp_size"] or 1) * int(row[f"{prefix}pp_size"] or 1)
    dp = int(row[f"{prefix}attention_dp_size"] or 1)
    return {"model": model, "gpu": gpu, "precision": precision, "tp": tp * dp,
            "batch": int(row[f"{prefix}batch_size"] or 1), "isl": int(row["isl"]), "osl": int(row["osl"]),
            "agg": agg}


def steady_pass_ms(shape: dict, cal: Calibration) -> float:
    spec = RooflineLatency(model=shape["model"], gpu=shape["gpu"], precision=shape["precision"],
                           tensor_parallel_size=shape["tp"])
    m = RooflineModel(spec, calibration=cal)
    b, isl, osl = shape["batch"], shape["isl"], shape["osl"]
    prefill = b * isl // max(osl, 1) if shape["agg"] else 0
    return m.pass_time_s(prefill, b, b * (isl + osl // 2), prefill * isl // 2) * 1e3


def fit_overheads(silicon: Path, fitted: dict) -> dict:
    """Per GPU: (layer_overhead_us, pass_overhead_ms, rows) fitted on the calibration subset."""
    df = pd.read_csv(silicon).fillna({c: 0 for c in ("tp_size", "pp_size", "attention_dp_size",
                                                     "decode_tp_size", "decode_pp_size",
                                                     "decode_attention_dp_size", "batch_size",
                                                     "decode_batch_size")})
    rows: dict[str, list] = {}
    for row in df.to_dict("records"):
        if not calibration_row(row["id"]):
            continue
        shape = silicon_shape(row)
        if shape:
            rows.setdefault(shape["gpu"], []).append((shape, row["silicon_tpot_ms"]))
    out = {}
    for gpu, items in rows.items():
        # dense models only when there are enough: MoE rows mix in expert and attention
        # parallelism the engine approximates, which would bend the overheads
        dense = [it for it in items if not load_model(it[0]["model"]).is_moe]
        items = dense if len(dense) >= 10 else items
        entry = {k: v for k, v in fitted[gpu].items() if k in Calibration.__annotations__}
        base, layers, measured = [], [], []
        for shape, tpot in items:  # pass time is linear in the two overheads
            try:
                ms = steady_pass_ms(shape, Calibration(**{**entry, "pass_overhead_ms": 0.0,
                                                          "layer_overhead_us": 0.0}))
            except ValueError:  # does not fit in memory
                continue
            base.append(ms)
            layers.append(load_model(shape["model"]).num_layers)
            measured.append(tpot)
        base, layers, measured = map(np.array, (base, layers, measured))

        def predict(x):
            return base + layers * x[0] * 1e-3 + x[1]

        res = least_squares(lambda x: np.log(predict(x) / measured), x0=[10.0, 1.0],
                            bounds=([0.0, 0.0], [200.0, 50.0]))
        ape = np.abs(predict(res.x) / measured - 1)
        out[gpu] = (round(res.x[0], 2), round(res.x[1], 3), len(measured), float(np.median(ape)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vidur", default=str(ROOT.parent / "shared" / "data" / "vidur_profiling"))
    ap.add_argument("--silicon", default=None, help="silicon_sample.csv (default: the installed aiconfigurator_core's, or /tmp/aic)")
    ap.add_argument("--dry-run", action="store_true", help="print, do not write calibration.json")
    args = ap.parse_args()
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
    overheads = fit_overheads(silicon, fitted) if silicon else {}
    pooled = (float(np.median([v[0] for v in overheads.values()])),
              float(np.median([v[1] for v in overheads.values()]))) if overheads else (10.0, 1.0)
    for gpu, entry in fitted.items():
        if gpu in overheads:
            layer_us, pass_ms, n, ape = overheads[gpu]
            note = f"{n} calibration rows of silicon_sample.csv, median |rel err| of TPOT {ape:.3f}"
        else:
            (layer_us, pass_ms), note = pooled, "median of the other GPUs' fits (no calibration rows)"
        entry["vidur_layer_overhead_us"] = entry["layer_overhead_us"]
        entry.update(layer_overhead_us=layer_us, pass_overhead_ms=pass_ms, fit_overheads=note)
    fitted["default"] = {**fitted["H100"], "source": "H100 fit (GPU given by a path or unknown)"}
    out = {gpu: {k: v for k, v in e.items()} for gpu, e in fitted.items()}
    text = json.dumps(out, indent=1) + "\n"
    print(text)
    if not args.dry_run:
        OUT.write_text(text)
        print(f"wrote {OUT}")


def find_silicon():
    try:
        from importlib import resources

        p = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
        if p.is_file():
            return Path(str(p))
    except ModuleNotFoundError:
        pass
    p = Path("/tmp/aic/x/aiconfigurator_core/systems/silicon_sample.csv")
    return p if p.is_file() else None


if __name__ == "__main__":
    main()
