"""Candidate benchmark harnesses for NVIDIA's gap-analysis rows of silicon_sample.csv, scored
on the calibration rows (never the scored ones, unless ``--scored``).

    python benchmarks/silicon_harness_variants.py [--silicon PATH] [--variants a,b] [--scored]

Those rows (``silicon_data_source`` ``aic-auto-gap-analysis``: Dynamo deployments of vLLM,
SGLang and TRT-LLM, fixed ISL and OSL) do not publish their client or server flags, and
benchmarks/silicon_rows.py simulates them with fixed lengths, 3 prompts per user and the
first wave left out. This script replays the dense H100/H200 rows under documented
alternatives and prints TTFT and TPOT MAPE per (system, model, backend) and overall for each:

* ``current``: silicon_rows.harness_for as it is.
* ``genai_perf``: aiconfigurator's ``eval`` client (``eval/benchmarks/genai_perf_runner.py``
  in ai-dynamo/aiconfigurator: ``--request-count 10 x C --warmup-request-count 2 x C``, fixed
  lengths): 12 prompts per user, the first 2 x C sent not scored.
* ``aic_rules``: the server flags aiconfigurator's generator writes for a benchmark
  (``generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule``): vLLM and TRT-LLM
  ``max_num_tokens`` = batch + ISL + 1500 (TRT-LLM without chunked prefill, its default);
  SGLang ``max_prefill_tokens`` = ISL + 1500 and ``enable_mixed_chunk`` (chunk 8192, SGLang's
  default on 80-160 GB GPUs).
* ``jitter``: ``current`` with a client turnaround: each user sends its next prompt an
  exponential time of mean 2 ms after its last token (breaks the lockstep of identical users).
* ``aic_rules_jitter``: both.

Row ids seed the turnaround draws, so results are deterministic. Takes about a minute.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_rows import (SILICON_MODELS, Harness, calibration_row, concurrency, find_silicon,  # noqa: E402
                          harness_for, load_rows, scenario_for, skip_reason)

from simkit import scenario_from_dict
from simkit.spec import ConfigError  # noqa: E402
from simkit.core.request import Request  # noqa: E402
from simkit.sim import simulate  # noqa: E402

DENSE = {"Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B"}


def aic_rules(row) -> dict:
    """aiconfigurator's benchmark generator rules as simkit pool settings (module docstring)."""
    batch, isl = int(row["batch_size"]) or concurrency(row), int(row["isl"])
    if row["backend"] == "vllm":
        return {"max_num_batched_tokens": batch + isl + 1500}
    if row["backend"] == "trtllm":
        return {"max_num_batched_tokens": batch + isl + 1500, "enable_chunked_prefill": False}
    return {"sglang": {"max_prefill_tokens": isl + 1500, "chunked_prefill_size": 8192,
                       "enable_mixed_chunk": True}}


#: name -> (server settings of a row or None, prompts per user, waves left out, turnaround ms)
VARIANTS = {
    "current": (None, 3, 1, 0.0),
    "genai_perf": (None, 12, 2, 0.0),
    "aic_rules": (aic_rules, 3, 1, 0.0),
    "jitter": (None, 3, 1, 2.0),
    "aic_rules_jitter": (aic_rules, 3, 1, 2.0),
}


def simulate_variant(row, variant: str) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) of the scored requests of ``row`` under ``variant``.

    Raises:
        ConfigError: the deployment is invalid (e.g. the weights do not fit).
    """
    engine_of, prompts, waves, turnaround_ms = VARIANTS[variant]
    conc, harness = concurrency(row), harness_for(row)
    if engine_of is not None:
        harness = Harness(harness.name, harness.range_ratio, harness.prompts_per_user,
                          harness.score_first_wave, {**harness.engine, **engine_of(row)},
                          harness.kv_cache_dtype)
    scenario = scenario_from_dict(scenario_for(row, conc, harness=harness), source=row["id"])
    rng = np.random.default_rng(int.from_bytes(hashlib.sha256(row["id"].encode()).digest()[:8], "little"))
    isl, osl = int(row["isl"]), int(row["osl"])
    requests = []
    for user in range(conc):  # each user a session: prompt k + 1 follows prompt k
        for k in range(prompts):
            rid = len(requests)
            delay = rng.exponential(turnaround_ms) / 1e3 if turnaround_ms and k else 0.0
            requests.append(Request(rid, 0.0, isl, osl, session=user, deps=(rid - 1,) if k else (),
                                    delay_s=delay))
    records = simulate(scenario, requests, record_token_times=False)
    done = sorted((r for r in records.requests if r.status == "completed"),
                  key=lambda r: (r.arrived_at, r.rid))
    done = done[waves * conc:]
    ttft = np.mean([r.ttft_s for r in done]) * 1e3
    tpot = np.mean([(r.last_token_at - r.first_token_at) / (r.output_length - 1) for r in done]) * 1e3
    return float(ttft), float(tpot)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--silicon", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of: {', '.join(VARIANTS)}")
    ap.add_argument("--scored", action="store_true", help="score the scored rows instead (after choosing)")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        sys.exit(f"--variants: unknown {', '.join(unknown)} (expected: {', '.join(VARIANTS)})")
    path = Path(args.silicon) if args.silicon else find_silicon()
    if path is None:
        sys.exit("silicon_sample.csv not found: pass --silicon (see benchmarks/silicon_accuracy.py)")
    rows = [r for r in load_rows(path) if calibration_row(r["id"]) != args.scored and not skip_reason(r)
            and r["system"] in ("h100_sxm", "h200_sxm") and SILICON_MODELS[r["model_path"]] in DENSE
            and harness_for(r).name == "nvidia" and concurrency(r) <= 1024 and r["osl"] > 1]
    out = []
    for variant in variants:
        for row in rows:
            try:
                ttft, tpot = simulate_variant(row, variant)
            except ConfigError:
                continue
            out.append({"variant": variant, "system": row["system"],
                        "model": SILICON_MODELS[row["model_path"]],
                        "backend": row["backend"], "ttft_ape": abs(ttft / row["silicon_ttft_ms"] - 1) * 100,
                        "tpot_ape": abs(tpot / row["silicon_tpot_ms"] - 1) * 100})
    df = pd.DataFrame(out)
    table = df.pivot_table(index=["system", "model", "backend"], columns="variant",
                           values=["ttft_ape", "tpot_ape"], aggfunc="mean").round(1)
    print(f"{'scored' if args.scored else 'calibration'} rows, MAPE % (TTFT then TPOT) per variant")
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(table.to_string())
    for variant in variants:
        d = df[df.variant == variant]
        print(f"ALL {variant}: {len(d)} rows, TTFT MAPE {d.ttft_ape.mean():.1f}%, "
              f"TPOT MAPE {d.tpot_ape.mean():.1f}%")


if __name__ == "__main__":
    main()
