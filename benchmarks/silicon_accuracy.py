"""simkit's roofline model against real TTFT/TPOT measurements (aiconfigurator-core's
``systems/silicon_sample.csv``, 5,221 rows: model, GPU, backend, precision, ISL, OSL,
concurrency, TP/DP, aggregated or disaggregated with worker counts).

    pip download aiconfigurator-core --no-deps -d /tmp/aic && (cd /tmp/aic && unzip -oq *.whl -d x)
    python benchmarks/silicon_accuracy.py [--silicon PATH] [--systems h100_sxm,h200_sxm]
        [--models Qwen3-32B,...] [--backends vllm,...] [--modes agg,disagg] [--limit N]
        [--max-concurrency 1024] [--quiet]

For each row that benchmarks/calibrate_roofline.py did NOT use (``calibration_row`` false),
the deployment is simulated: closed loop at the row's concurrency (each of ``concurrency``
users sends its next request when its previous one ends: a dependency chain), fixed
ISL and OSL, 3 x concurrency requests (the first ``concurrency`` are warm-up and not scored;
the users start together, as a benchmark client's do, and identical requests keep them in
lockstep; ``--staggered`` spreads their starts over one estimated request lifetime instead),
aggregated (one worker of TP x attention-DP GPUs per ``batch_size`` of concurrency) or
disaggregated (``prefill_num_workers`` and ``decode_num_workers``, each pool with its own
tensor_parallel_size, an instantaneous KV link). Simulated TTFT and TPOT are the means over
the scored requests (TPOT = (last - first token) / (OSL - 1), aiconfigurator's definition).
Prints one line per row and, last, MAPE and median APE of TTFT and TPOT per
(system, model, backend, mode) and overall. Rows simkit cannot model (unknown model or GPU,
int4 weights, concurrency above ``--max-concurrency``, weights that do not fit) are counted
as skipped with their reason.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from calibrate_roofline import calibration_row, find_silicon, silicon_precision, SILICON_GPUS, SILICON_MODELS  # noqa: E402

from simkit.config import ConfigError, scenario_from_dict  # noqa: E402
from simkit.engine import RooflineModel  # noqa: E402
from simkit.request import Request  # noqa: E402
from simkit.sim import simulate  # noqa: E402

INT_COLS = ["tp_size", "pp_size", "attention_dp_size", "batch_size", "prefill_num_workers",
            "prefill_tp_size", "prefill_attention_dp_size", "decode_num_workers", "decode_tp_size",
            "decode_attention_dp_size", "decode_batch_size", "prefill_batch_size"]


def concurrency(row) -> int:
    m = re.search(r"silicon_concurrency=(\d+)", str(row["silicon_data_source"]))
    if m:
        return int(m.group(1))
    m = re.search(r"_c(\d+)_", row["id"])
    if m:
        return int(m.group(1))
    if row["mode"] == "agg":
        return max(1, row["batch_size"])
    return max(1, row["decode_batch_size"]) * max(1, row["decode_num_workers"])


def _latency(model: str, gpu: str, precision: str, tp: int, max_len: int) -> dict:
    return {"kind": "roofline", "model": model, "gpu": gpu, "precision": precision,
            "tensor_parallel_size": tp, "kv_cache_dtype": "fp8" if precision != "bf16" else "auto"}


def scenario_for(row, conc: int) -> dict:
    model, gpu, precision = SILICON_MODELS[row["model_path"]], SILICON_GPUS[row["system"]], silicon_precision(row)
    isl, osl = int(row["isl"]), int(row["osl"])
    engine = {"max_num_batched_tokens": max(8192, isl), "enable_prefix_caching": False}
    if row["mode"] == "agg":
        tp = max(1, row["tp_size"]) * max(1, row["pp_size"]) * max(1, row["attention_dp_size"])
        batch = max(1, row["batch_size"]) * max(1, row["attention_dp_size"])
        workers = max(1, -(-conc // batch))
        pools = {"aggregated": {"workers": workers, "max_num_seqs": batch, **engine}}
        latency = _latency(model, gpu, precision, tp, isl + osl)
    else:
        ptp = max(1, row["prefill_tp_size"]) * max(1, row["prefill_attention_dp_size"])
        dtp = max(1, row["decode_tp_size"]) * max(1, row["decode_attention_dp_size"])
        dbatch = max(1, row["decode_batch_size"]) * max(1, row["decode_attention_dp_size"])
        latency = _latency(model, gpu, precision, dtp, isl + osl)
        pools = {"prefill": {"workers": max(1, row["prefill_num_workers"]), **engine,
                             "latency": _latency(model, gpu, precision, ptp, isl + osl)},
                 "decode": {"workers": max(1, row["decode_num_workers"]), "max_num_seqs": dbatch, **engine}}
    return {"name": row["id"], "latency": latency, "pools": pools,
            "workload": {"kind": "trace", "path": "silicon_sample.csv", "format": "csv"}}


def simulate_row(row, conc: int, staggered: bool = False) -> tuple[float, float]:
    """Simulated mean TTFT and TPOT (ms) of the scored requests."""
    scenario = scenario_from_dict(scenario_for(row, conc), source=row["id"])
    isl, osl = int(row["isl"]), int(row["osl"])
    n = 3 * conc
    # each of the ``conc`` users sends its next request when the previous one ends (a chain of
    # dependencies, open loop). Together (the default, as a benchmark client starts): users
    # start at 0 and, requests being identical, stay in lockstep. Staggered: user k starts at
    # k/conc of an estimated request lifetime
    life_s = 0.0
    if staggered:
        lat = scenario.pools.named()[-1][1].latency or scenario.latency
        model = RooflineModel(lat)
        batch = min(conc, scenario.pools.named()[-1][1].max_num_seqs)
        life_s = model.pass_time_s(isl, 0, 0) + osl * model.pass_time_s(0, batch, batch * (isl + osl // 2))
    requests = [Request(rid=i, arrived_at=(i % conc) * life_s / conc, input_length=isl, output_length=osl,
                        session=i % conc, deps=(i - conc,) if i >= conc else ())
                for i in range(n)]
    records = simulate(scenario, requests, record_token_times=False)
    rows = [r for r in records.requests if r.rid >= conc and r.status == "completed"]
    ttft = np.mean([r.ttft_s for r in rows]) * 1e3
    tpot = np.mean([(r.last_token_at - r.first_token_at) / (osl - 1) for r in rows]) * 1e3 if osl > 1 else float("nan")
    return float(ttft), float(tpot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--silicon", default=None)
    ap.add_argument("--systems", default=None, help="comma list, e.g. h100_sxm,h200_sxm")
    ap.add_argument("--models", default=None, help="comma list of simkit model names, e.g. Qwen3-32B")
    ap.add_argument("--backends", default=None, help="comma list: vllm,sglang,trtllm")
    ap.add_argument("--modes", default=None, help="comma list: agg,disagg")
    ap.add_argument("--limit", type=int, default=None, help="at most N rows (after filtering)")
    ap.add_argument("--max-concurrency", type=int, default=1024)
    ap.add_argument("--quiet", action="store_true", help="only the summary tables")
    ap.add_argument("--staggered", action="store_true",
                    help="start the users spread over a request lifetime instead of all at 0")
    args = ap.parse_args()
    path = Path(args.silicon) if args.silicon else find_silicon()
    if path is None:
        sys.exit("silicon_sample.csv not found: pass --silicon (see the module docstring)")
    df = pd.read_csv(path)
    df[INT_COLS] = df[INT_COLS].fillna(0).astype(int)
    split = lambda s: set(s.split(",")) if s else None  # noqa: E731
    systems, models, backends, modes = map(split, (args.systems, args.models, args.backends, args.modes))
    skipped: Counter = Counter()
    out = []
    for row in df.to_dict("records"):
        if calibration_row(row["id"]):
            skipped["calibration row"] += 1
            continue
        model = SILICON_MODELS.get(row["model_path"])
        if (systems and row["system"] not in systems) or (backends and row["backend"] not in backends) or (
                modes and row["mode"] not in modes) or (models and model not in models):
            continue
        if not model or row["system"] not in SILICON_GPUS:
            skipped[f"model/system not shipped ({row['model_path']}, {row['system']})"] += 1
            continue
        if not silicon_precision(row):
            skipped[f"precision {row['gemm_quant_mode']}"] += 1
            continue
        conc = concurrency(row)
        if conc > args.max_concurrency:
            skipped[f"concurrency > {args.max_concurrency}"] += 1
            continue
        if args.limit is not None and len(out) >= args.limit:
            break
        try:
            ttft, tpot = simulate_row(row, conc, args.staggered)
        except ConfigError as exc:
            skipped["does not fit: " + exc.messages[0].split(": ", 1)[1].split(" at TP")[0]] += 1
            continue
        e_ttft = abs(ttft / row["silicon_ttft_ms"] - 1)
        e_tpot = abs(tpot / row["silicon_tpot_ms"] - 1)
        out.append({"system": row["system"], "model": model, "backend": row["backend"], "mode": row["mode"],
                    "precision": silicon_precision(row), "ape_ttft": e_ttft, "ape_tpot": e_tpot})
        if not args.quiet:
            print(f"{row['id'][:60]:60s} c={conc:<5d} TTFT {ttft:9.1f} vs {row['silicon_ttft_ms']:9.1f} "
                  f"TPOT {tpot:7.2f} vs {row['silicon_tpot_ms']:7.2f} ms", flush=True)
    res = pd.DataFrame(out)
    for reason, n in skipped.most_common():
        print(f"skipped {n:5d}: {reason}")
    if res.empty:
        print("no rows scored")
        return
    agg = {"rows": ("ape_ttft", "size"), "TTFT_MAPE": ("ape_ttft", "mean"), "TTFT_MdAPE": ("ape_ttft", "median"),
           "TPOT_MAPE": ("ape_tpot", "mean"), "TPOT_MdAPE": ("ape_tpot", "median")}
    table = res.groupby(["system", "model", "backend", "mode"]).agg(**agg)
    pd.set_option("display.width", 200)
    print((table * [1, 100, 100, 100, 100]).round(1).to_string())
    total = res.agg({"ape_ttft": ["mean", "median"], "ape_tpot": ["mean", "median"]}) * 100
    print(f"ALL {len(res)} rows: TTFT MAPE {total.ape_ttft['mean']:.1f}% MdAPE {total.ape_ttft['median']:.1f}%  "
          f"TPOT MAPE {total.ape_tpot['mean']:.1f}% MdAPE {total.ape_tpot['median']:.1f}%")


if __name__ == "__main__":
    main()
