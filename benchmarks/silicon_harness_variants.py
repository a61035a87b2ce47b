"""Candidate benchmark harnesses for NVIDIA's gap-analysis rows of silicon_sample.csv, scored
on the calibration rows (never the scored ones, unless ``--scored``).

    python benchmarks/silicon_harness_variants.py [--silicon PATH] [--variants a,b] [--scored] [--csv FILE]
        [--systems h100_sxm,...] [--backends trtllm,...] [--refit-frontend]

Those rows (``silicon_data_source`` ``aic-auto-gap-analysis``: Dynamo deployments of vLLM,
SGLang and TRT-LLM, fixed ISL and OSL) do not publish their client or server flags, and
benchmarks/silicon_rows.py simulates them with fixed lengths, 3 prompts per user and the
first wave left out. This script replays the dense rows under documented
alternatives and prints TTFT and TPOT MAPE per (system, model, backend) and overall for each:

* ``current``: silicon_rows.harness_for as it is (each family's client:
  ``silicon_rows.GAP_ANALYSIS_CLIENTS``).
* ``steady3``: the default client: 3 prompts per user, the first wave not scored.
* ``genai_perf``: aiconfigurator's ``eval`` client (``eval/benchmarks/genai_perf_runner.py``
  in ai-dynamo/aiconfigurator: ``--request-count 10 x C --warmup-request-count 2 x C``, fixed
  lengths): 12 prompts per user, the first 2 x C sent not scored.
* ``aic_rules``: the server flags aiconfigurator's generator writes for a benchmark
  (``generator/rule_plugin/benchmark/{vllm,trtllm,sglang}.rule``): vLLM and TRT-LLM
  ``max_num_tokens`` = batch + ISL + 1500 (TRT-LLM without chunked prefill, its default);
  SGLang ``max_prefill_tokens`` = ISL + 1500 and ``enable_mixed_chunk`` (chunk 8192, SGLang's
  default on 80-160 GB GPUs).
* ``aiperf10``, ``aiperf20``: aiperf, the client NVIDIA names for these rows (warm-up until
  every response is in, then a synchronized burst of C users; aiconfigurator's recipes score
  10 x C or 20 x C prompts, the burst included).
* ``*_jitterMS``: a frontend delay per prompt uniform in [0, MS) ms (``dispatch_jitter_ms``,
  inside the measured TTFT), which breaks the lockstep of identical users.
* ``*_thinkMS``: a client turnaround per prompt uniform in [0, MS) ms before it is sent
  (outside the measured TTFT), which breaks the lockstep too. Spreads are chosen on
  calibration rows.
* ``desyncF``: every family's users spread over F of a cycle (user u starts u / C x F of a
  lockstep run's mean E2E late; 0 lockstep, 1 the desynchronized client), instead of each
  family's own choice (``silicon_rows.GAP_ANALYSIS_CLIENTS``).
* ``slots_c_minus_1`` (``_desync1``): the server holds C - 1 requests at once (one user more
  than slots: the signature of TTFT growing by E2E / C with the output length, seen in the
  H100 Llama-3.1-8B TRT-LLM rows; ``Harness.slots_short``), in lockstep (or desynchronized).
  Every other variant has as many slots as users.
* ``*_cache``: aiconfigurator's ``bench_run.sh`` (its generated benchmark script) as written:
  aiperf with ``--warmup-request-count 2 x C`` and no ``--num-dataset-entries``, so every
  prompt is one of aiperf's default 100 dataset entries, drawn with replacement; on vLLM and
  SGLang servers, whose prefix caches are on unless the generator is told otherwise, a
  repeated prompt hits the blocks its earlier copy left (``Harness.dataset_entries``,
  ``warmup_per_user``; the server's ``enable_prefix_caching``). Every other variant sends
  distinct prompts to a server without prefix caching.

Every dense row of that harness, on every GPU. The seeds are the scenario's, so results are
deterministic.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from silicon_rows import (SILICON_MODELS, Harness, aiconfigurator_flags, calibration_row,  # noqa: E402
                          concurrency, find_silicon, frontend_shift_ms, input_error,
                          harness_for, load_rows, simulate_row, skip_reason)

from simkit.spec import ConfigError  # noqa: E402

DENSE = {"Llama-3.1-8B", "Llama-3.1-70B", "Qwen3-32B"}


#: name -> (server settings of a row or None, prompts per user, whether the first wave is
#: scored, frontend jitter in ms, client turnaround in ms[, desynchronized fraction of a cycle];
#: without it, the family's), or None: the row's harness as it is
VARIANTS = {
    "current": None,
    "steady3": (None, 3, False, 0.0, 0.0),
    "genai_perf": (None, 12, False, 0.0, 0.0),  # (2 x C warm-up prompts, then 10 x C scored)
    "aic_rules": (aiconfigurator_flags, 3, False, 0.0, 0.0),
    # aiperf: warm-up until every response is in (the engine idle again; no prefix caching,
    # so the warm-up leaves nothing behind), then a burst of C, 10 x C (or 20 x C) scored
    "aiperf10": (None, 10, True, 0.0, 0.0),
    "aiperf20": (None, 20, True, 0.0, 0.0),
    **{f"aiperf10_jitter{ms:g}": (None, 10, True, float(ms), 0.0) for ms in (2, 10, 50, 200)},
    **{f"steady3_jitter{ms:g}": (None, 3, False, float(ms), 0.0) for ms in (2, 10, 50, 200)},
    **{f"steady3_think{ms:g}": (None, 3, False, 0.0, float(ms)) for ms in (10, 50, 200, 1000)},
    **{f"genai_perf_think{ms:g}": (None, 12, False, 0.0, float(ms)) for ms in (50, 200, 1000)},
    **{f"desync{f:g}": (None, 3, False, 0.0, 0.0, f) for f in (0.0, 0.25, 0.5, 0.75, 1.0)},
    "slots_c_minus_1": (None, 3, False, 0.0, 0.0, 0.0),
    "slots_c_minus_1_desync1": (None, 3, False, 0.0, 0.0, 1.0),
    # aiperf's protocol combined with the above
    **{f"aiperf{n}_desync{f:g}": (None, n, True, 0.0, 0.0, f) for n in (10, 20) for f in (0.5, 1.0)},
    **{f"aiperf{n}_slots_c_minus_1": (None, n, True, 0.0, 0.0, 0.0) for n in (10, 20)},
    **{f"aiperf{n}_slots_c_minus_1_desync1": (None, n, True, 0.0, 0.0, 1.0) for n in (10, 20)},
    **{f"aiperf{n}_aic_rules": (aiconfigurator_flags, n, True, 0.0, 0.0) for n in (10, 20)},
    # aiconfigurator's bench_run.sh as it is: aiperf's 100 dataset entries reused, a 2 x C
    # warm-up, the server's prefix cache on (vLLM's and SGLang's default)
    **{f"aiperf{n}_cache": (None, n, True, 0.0, 0.0, 0.0) for n in (10, 20)},
    **{f"aiperf{n}_cache_desync1": (None, n, True, 0.0, 0.0, 1.0) for n in (10, 20)},
    "steady3_cache": (None, 3, False, 0.0, 0.0, 0.0),
}

#: the variants whose client reuses aiperf's 100 dataset entries after a 2 x C warm-up, on a
#: server with prefix caching
CACHED = {name for name in VARIANTS if "_cache" in name}


def variant_harness(row, variant: str) -> Harness:
    """The row's harness under ``variant`` (see :data:`VARIANTS`)."""
    harness = harness_for(row)
    if VARIANTS[variant] is None:
        return harness
    engine_of, prompts, first_wave, jitter_ms, think_ms, *desync = VARIANTS[variant]
    engine = {**harness.engine, **engine_of(row)} if engine_of is not None else dict(harness.engine)
    cached = variant in CACHED
    engine["enable_prefix_caching"] = cached
    # one slot fewer than users (the server's max batch C - 1) only where the variant says so
    harness = replace(harness, prompts_per_user=prompts, score_first_wave=first_wave, engine=engine,
                      jitter_ms=jitter_ms, think_ms=think_ms, slots_short=int("slots_c_minus_1" in variant),
                      dataset_entries=100 if cached else 0, warmup_per_user=2 if cached else 0)
    return replace(harness, desync=desync[0]) if desync else harness


#: the serving frontend switched off (``--refit-frontend``)
NO_FRONTEND = {"dispatch_overhead_ms": 0.0, "first_token_overhead_ms": 0.0}


def simulate_variant(row, variant: str, frontend: bool = True) -> tuple[float, float]:
    """Mean TTFT and TPOT (ms) of the scored requests of ``row`` under ``variant``; without
    ``frontend``, with no serving-frontend time (:data:`NO_FRONTEND`).

    Raises:
        ConfigError: the deployment is invalid (e.g. the weights do not fit).
    """
    return simulate_row(row, concurrency(row), None if frontend else dict(NO_FRONTEND),
                        harness=variant_harness(row, variant))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--silicon", default=None)
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma list of: {', '.join(VARIANTS)}")
    ap.add_argument("--scored", action="store_true", help="score the scored rows instead (after choosing)")
    ap.add_argument("--csv", metavar="FILE", help="also write one line per (variant, row): its figures and errors")
    ap.add_argument("--systems", default=None, help="only these systems, e.g. h100_sxm,h200_sxm")
    ap.add_argument("--backends", default=None, help="only these engines, e.g. trtllm")
    ap.add_argument("--refit-frontend", action="store_true",
                    help="simulate without the fitted frontend term and refit it per (system, backend) and "
                         "variant, "
                         "as calibrate_roofline.py does, before scoring TTFT")
    args = ap.parse_args()
    variants = args.variants.split(",")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        input_error(f"--variants: unknown {', '.join(unknown)} (expected: {', '.join(VARIANTS)})")
    path = Path(args.silicon) if args.silicon else find_silicon()
    if path is None:
        input_error("silicon_sample.csv not found: pass --silicon (see benchmarks/silicon_accuracy.py)")
    rows = [r for r in load_rows(path) if calibration_row(r) != args.scored and not skip_reason(r)
            and SILICON_MODELS[r["model_path"]] in DENSE
            and harness_for(r).name == "nvidia" and concurrency(r) <= 1024 and r["osl"] > 1
            and (not args.systems or r["system"] in args.systems.split(","))
            and (not args.backends or r["backend"] in args.backends.split(","))]
    out = []
    for variant in variants:
        for row in rows:
            try:
                ttft, tpot = simulate_variant(row, variant, frontend=not args.refit_frontend)
            except ConfigError:
                continue
            out.append({"variant": variant, "id": row["id"], "system": row["system"],
                        "model": SILICON_MODELS[row["model_path"]],
                        "backend": row["backend"], "ttft_ms": ttft, "silicon_ttft_ms": row["silicon_ttft_ms"],
                        "tpot_ms": tpot, "silicon_tpot_ms": row["silicon_tpot_ms"],
                        "ttft_ape": abs(ttft / row["silicon_ttft_ms"] - 1) * 100,
                        "tpot_ape": abs(tpot / row["silicon_tpot_ms"] - 1) * 100})
    df = pd.DataFrame(out)
    if args.refit_frontend:  # each family's frontend term refitted for each variant
        for _, part in df.groupby(["variant", "system", "backend"]):
            shift = frontend_shift_ms(part.ttft_ms, part.silicon_ttft_ms)
            df.loc[part.index, "ttft_ms"] = part.ttft_ms + shift
            df.loc[part.index, "frontend_ms"] = shift
        df["ttft_ape"] = (df.ttft_ms / df.silicon_ttft_ms - 1).abs() * 100
    if args.csv:
        df.to_csv(args.csv, index=False)
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
