"""simkit's roofline model against real TTFT/TPOT measurements (aiconfigurator-core's
``systems/silicon_sample.csv``, 5,221 rows: model, GPU, backend, precision, ISL, OSL,
concurrency, TP/DP, aggregated or disaggregated with worker counts).

    pip download aiconfigurator-core --no-deps -d /tmp/aic && (cd /tmp/aic && unzip -oq *.whl -d x)
    python benchmarks/silicon_accuracy.py [--silicon PATH] [--systems h100_sxm,h200_sxm]
        [--models Qwen3-32B,...] [--backends vllm,...] [--modes agg,disagg] [--limit N]
        [--max-concurrency 1024] [--latency-model roofline|aic] [--csv FILE] [--quiet]

For each row that benchmarks/calibrate_roofline.py did NOT use (``calibration_row`` false),
the deployment is simulated under the benchmark client that measured it
(``silicon_rows.harness_for``: InferenceMAX's ``benchmark_serving.py`` with lengths drawn from
``[0.8 x, x]``, 10 x concurrency prompts, the first wave scored, and its servers' settings; or
NVIDIA's gap-analysis rows: fixed ISL and OSL, 3 x concurrency prompts with the first wave not
scored, or per family the client its calibration rows chose, ``GAP_ANALYSIS_CLIENTS``): a closed loop at the row's concurrency (each slot sends the next prompt when its
request ends), each worker following the row's engine (``backend``: vllm, sglang or trtllm scheduling),
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
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_rows import (SILICON_MODELS, calibration_row, concurrency, find_silicon, harness_for, input_error,  # noqa: E402
                          load_rows, precision, simulate_row, skip_reason, speculative_for, ttft_band)

from simkit.spec import ConfigError  # noqa: E402
from simkit.engine.hardware import load_model  # noqa: E402


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
    ap.add_argument("--csv", metavar="FILE", help="also write one row per scored measurement")
    ap.add_argument("--latency-model", choices=("roofline", "aic"), default="roofline",
                    help="aic: aiconfigurator-core's measured database (pip install 'simkit[aic]')")
    ap.add_argument("--calibration-rows", action="store_true",
                    help="score the calibration rows instead (to choose settings without the scored rows)")
    ap.add_argument("--speculative", choices=("auto", "off"), default="auto",
                    help="auto: the rows whose server ran MTP (silicon_rows.speculative_for) are simulated with "
                         "it; off: without (to measure what it changes)")
    ap.add_argument("--only-speculative", action="store_true", help="only the rows whose server ran MTP")
    ap.add_argument("--mtp-acceptance", type=float, default=None, metavar="A",
                    help="the MTP rows' conditional acceptance per draft (default silicon_rows.MTP_ACCEPTANCE)")
    ap.add_argument("--band", action="store_true",
                    help="also simulate each row with its users desynchronized: the TTFT band [desynchronized, "
                         "lockstep] and whether the measurement lies in it")
    args = ap.parse_args()
    path = Path(args.silicon) if args.silicon else find_silicon()
    if path is None:
        input_error("silicon_sample.csv not found: pass --silicon (see the module docstring)")
    split = lambda s: set(s.split(",")) if s else None  # noqa: E731
    systems, models, backends, modes = map(split, (args.systems, args.models, args.backends, args.modes))
    skipped: Counter = Counter()
    out = []
    for row in load_rows(path):
        if calibration_row(row) != args.calibration_rows:
            skipped["calibration row" if not args.calibration_rows else "scored row"] += 1
            continue
        model = SILICON_MODELS.get(row["model_path"])
        if (systems and row["system"] not in systems) or (backends and row["backend"] not in backends) or (
                modes and row["mode"] not in modes) or (models and model not in models):
            continue
        if args.only_speculative and not speculative_for(row):
            continue
        reason = skip_reason(row)
        if reason:
            skipped[reason] += 1
            continue
        conc = concurrency(row)
        if conc > args.max_concurrency:
            skipped[f"concurrency > {args.max_concurrency}"] += 1
            continue
        if args.limit is not None and len(out) >= args.limit:
            break
        harness = harness_for(row)
        if harness.speculative:
            spec = None if args.speculative == "off" else speculative_for(row, args.mtp_acceptance)
            harness = replace(harness, speculative=spec)
        try:
            ttft, tpot = simulate_row(row, conc, None, args.latency_model, harness)
        except ConfigError as exc:
            skipped["does not fit: " + exc.messages[0].split(": ", 1)[1].split(" at TP")[0]] += 1
            continue
        except Exception as exc:  # aiconfigurator: no data for this system, backend or shape
            if args.latency_model != "aic":
                raise
            skipped[f"aic: {type(exc).__name__}: {str(exc)[:80]}"] += 1
            continue
        band = ttft_band(row, conc, None, args.latency_model, harness) if args.band else (None, None)
        e_ttft = abs(ttft / row["silicon_ttft_ms"] - 1)
        e_tpot = abs(tpot / row["silicon_tpot_ms"] - 1)
        out.append({"system": row["system"], "model": model, "backend": row["backend"], "mode": row["mode"],
                    "harness": harness.name,
                    "speculative": (harness.speculative or {}).get("num_speculative_tokens", 0),
                    "precision": precision(row), "ape_ttft": e_ttft, "ape_tpot": e_tpot,
                    "id": row["id"], "isl": row["isl"], "osl": row["osl"], "concurrency": conc,
                    "ttft_ms": ttft, "silicon_ttft_ms": row["silicon_ttft_ms"],
                    "tpot_ms": tpot, "silicon_tpot_ms": row["silicon_tpot_ms"],
                    "ttft_desync_ms": band[0], "ttft_lockstep_ms": band[1],
                    "dense": not load_model(model).is_moe})
        if not args.quiet:
            print(f"{row['id'][:60]:60s} c={conc:<5d} TTFT {ttft:9.1f} vs {row['silicon_ttft_ms']:9.1f} "
                  f"TPOT {tpot:7.2f} vs {row['silicon_tpot_ms']:7.2f} ms", flush=True)
    res = pd.DataFrame(out)
    if args.csv:
        res.to_csv(args.csv, index=False)
    for reason, n in skipped.most_common():
        print(f"skipped {n:5d}: {reason}")
    if res.empty:
        print("no rows scored")
        return
    agg = {"rows": ("ape_ttft", "size"), "TTFT_MAPE": ("ape_ttft", "mean"), "TTFT_MdAPE": ("ape_ttft", "median"),
           "TPOT_MAPE": ("ape_tpot", "mean"), "TPOT_MdAPE": ("ape_tpot", "median")}
    table = res.groupby(["system", "model", "backend", "mode", "harness"]).agg(**agg)
    pd.set_option("display.width", 200)
    print((table * [1, 100, 100, 100, 100]).round(1).to_string())
    total = res.agg({"ape_ttft": ["mean", "median"], "ape_tpot": ["mean", "median"]}) * 100
    print(f"ALL {len(res)} rows: TTFT MAPE {total.ape_ttft['mean']:.1f}% MdAPE {total.ape_ttft['median']:.1f}%  "
          f"TPOT MAPE {total.ape_tpot['mean']:.1f}% MdAPE {total.ape_tpot['median']:.1f}%")
    print_targets(res)
    if args.band:
        inside = (res.silicon_ttft_ms >= res.ttft_desync_ms) & (res.silicon_ttft_ms <= res.ttft_lockstep_ms)
        print(f"TTFT band [desynchronized, lockstep]: {int(inside.sum())} of {len(res)} measurements inside; "
              f"{int((res.silicon_ttft_ms > res.ttft_lockstep_ms).sum())} above, "
              f"{int((res.silicon_ttft_ms < res.ttft_desync_ms).sum())} below")


BLACKWELL = ("b200_sxm", "gb200", "b300_sxm")


def print_targets(res: pd.DataFrame) -> None:
    """MAPE of the slices issue 19 sets targets on (dense rows; MoE reported apart)."""
    def line(label, d, ttft_target=None, tpot_target=None):
        if d.empty:
            print(f"{label}: no rows")
            return
        t, p = d.ape_ttft.mean() * 100, d.ape_tpot.mean() * 100
        goal = f" (targets {ttft_target}% / {tpot_target}%)" if ttft_target else ""
        print(f"{label}: {len(d)} rows, TTFT MAPE {t:.1f}%, TPOT MAPE {p:.1f}%{goal}")

    dense = res[res.dense]
    for system in sorted(dense.system.unique()):
        line(f"  published-client dense, {system}", dense[(dense.system == system) & (dense.harness == "inferencemax")],
             12, 8)
    line("  published-client dense, every GPU", dense[dense.harness == "inferencemax"], 12, 8)
    line("  Blackwell dense (every harness)", dense[dense.system.isin(BLACKWELL)], 15, 10)
    line("  H100/H200 dense (every harness)", dense[dense.system.isin(("h100_sxm", "h200_sxm"))], 25, 8)
    line("  MoE (reported, not tuned for)", res[~res.dense])
    if "speculative" in res and (res.speculative > 0).any():
        line("  rows whose server ran MTP (speculative decoding)", res[res.speculative > 0])


if __name__ == "__main__":
    main()
