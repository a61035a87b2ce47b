#!/usr/bin/env python3
"""Compare simkit with the reference (Dynamo mocker) on one Mooncake trace, side by side.

Runs simkit's ``scenarios/reference_{agg,disagg}.yaml`` on the trace and the reference through
``../shared/tools/dynamo_peer.py`` (with the interpreter given by ``--peer-python``, a venv that
has ``ai-dynamo-runtime==1.6.1``), or reads an existing peer output folder (``--peer-dir``).
``--backend`` picks the engine core on both sides (vllm, sglang, trtllm) and
``--num-gpu-blocks`` the KV pool of every worker; ``--set KEY=VALUE`` changes simkit's scenario
only (e.g. ``latency.prefill_tokens_from_batch_means=false`` to see a documented difference).
Prints summary mean/p50/p90/p99 of TTFT, ITL and E2E side by side and, per request (matched by
trace line), the median, p90 and p99 of |relative error|, plus wall time and peak memory.

Example:
    python benchmarks/compare_reference.py --mode disagg --backend sglang \
        --trace ../shared/traces/mooncake_synthetic.jsonl --peer-python PEER_VENV/bin/python  # a venv with ai-dynamo-runtime==1.6.1
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared")
sys.path.insert(0, REPO)

from simkit import load_scenario
from simkit.spec import parse_overrides  # noqa: E402
from simkit.output.report import nearest_rank, request_rows, summarize  # noqa: E402
from simkit.sim import simulate  # noqa: E402


#: issue 3's agreement targets: per-request |relative error| of TTFT and E2E (median, p99) and
#: the summary percentiles of TTFT, ITL and E2E
MEDIAN_TOLERANCE, P99_TOLERANCE, SUMMARY_TOLERANCE = 0.01, 0.05, 0.02


def run_peer(args, out_dir: str) -> tuple[float, int]:
    tool = os.path.join(SHARED, "tools", "dynamo_peer.py")
    cmd = [args.peer_python, "-c",
           "import resource,runpy,sys; sys.argv=sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__'); "
           "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)",
           tool, args.trace, "--router", "round_robin", "--engine-json", engine_json(args, out_dir),
           "--out", out_dir]
    cmd += ["--workers", "4"] if args.mode == "agg" else ["--prefill", "4", "--decode", "4"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"reference run failed:\n{proc.stderr[-2000:]}")
    peak = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_KB")]
    return wall, peak[-1] if peak else 0


def engine_json(args, out_dir: str) -> str:
    """The reference's vLLM defaults with ``--backend`` and ``--num-gpu-blocks`` applied."""
    with open(os.path.join(SHARED, "tools", "dynamo_engine_vllm_default.json")) as f:
        engine = json.load(f)
    engine["backend"] = args.backend
    if args.num_gpu_blocks is not None:
        engine["num_gpu_blocks"] = args.num_gpu_blocks
    path = os.path.join(out_dir, "engine.json")
    with open(path, "w") as f:
        json.dump(engine, f)
    return path


def stats(values):
    v = sorted(x for x in values if x is not None)
    return {q: nearest_rank(v, q) for q in (50, 90, 99)} if v else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["agg", "disagg"], default="agg")
    ap.add_argument("--trace", default=os.path.join(SHARED, "traces", "mooncake_conversation.jsonl"))
    ap.add_argument("--backend", choices=["vllm", "sglang", "trtllm"], default="vllm")
    ap.add_argument("--num-gpu-blocks", type=int, default=None, help="KV blocks per worker (both sides)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a field of simkit's scenario only (repeatable)")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--peer-python", help="python of a venv with ai-dynamo-runtime==1.6.1")
    group.add_argument("--peer-dir", help="an existing dynamo_peer.py output folder for this trace and mode")
    args = ap.parse_args()

    pools = ["aggregated"] if args.mode == "agg" else ["prefill", "decode"]
    sets = [("workload", {"kind": "trace", "path": os.path.abspath(args.trace)})]
    sets += [(f"pools.{p}.backend", args.backend) for p in pools]
    if args.backend == "sglang":  # a documented difference from SGLang, the reference's way
        sets += [(f"pools.{p}.sglang.budgets_count_chunks", True) for p in pools]
    if args.num_gpu_blocks is not None:
        sets += [(f"pools.{p}.num_gpu_blocks", args.num_gpu_blocks) for p in pools]
    sets += parse_overrides(args.set)
    scenario = load_scenario(os.path.join(REPO, "scenarios", f"reference_{args.mode}.yaml"), sets)
    t0 = time.perf_counter()
    records = simulate(scenario, record_token_times=False)
    sim_wall = time.perf_counter() - t0
    sim_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours = {row["id"]: row for row in request_rows(records)}
    summary = summarize(records)

    peer_dir = args.peer_dir
    peer_wall = peer_peak = None
    if peer_dir is None:
        peer_dir = tempfile.mkdtemp(prefix="peer-")
        peer_wall, peer_peak = run_peer(args, peer_dir)
    with open(os.path.join(peer_dir, "per_request.jsonl")) as f:
        theirs = {row["idx"]: row for row in map(json.loads, f)}
    with open(os.path.join(peer_dir, "summary.json")) as f:
        peer_summary = json.load(f)

    print(f"trace {args.trace} mode {args.mode} backend {args.backend}: simkit {summary['requests']['completed']} completed, "
          f"reference {peer_summary['completed']} completed")
    failed = []  # the agreement targets of issue 3, checked below
    print(f"{'metric':10}{'q':>5}{'simkit':>12}{'reference':>12}{'rel diff':>10}")
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        for q in ("mean", "p50", "p90", "p99"):
            a, b = summary[metric][q], peer_summary[metric][q]
            print(f"{metric:10}{q:>5}{a:12.2f}{b:12.2f}{(a / b - 1) * 100:9.2f}%")
            if q != "mean" and abs(a / b - 1) > SUMMARY_TOLERANCE:
                failed.append(f"summary {metric} {q}")
    print("per request |relative error| (matched by trace line):")
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        errs = []
        for idx, row in theirs.items():
            a, b = ours.get(idx, {}).get(metric), row.get(metric)
            if a is not None and b not in (None, 0):
                errs.append(abs(a / b - 1))
        st = stats(errs)
        print(f"  {metric:8} n={len(errs):6d}  median {st.get(50, math.nan):.4%}  p90 {st.get(90, math.nan):.4%}  "
              f"p99 {st.get(99, math.nan):.4%}")
        if metric != "itl_ms" and (st.get(50, math.inf) > MEDIAN_TOLERANCE or st.get(99, math.inf) > P99_TOLERANCE):
            failed.append(f"per-request {metric}")
    print("targets (per-request TTFT and E2E median <= 1%, p99 <= 5%; summary p50/p90/p99 within 2%): "
          + ("met" if not failed else "NOT met: " + ", ".join(failed)))
    print(f"simkit: wall {sim_wall:.2f} s (simulate only), peak RSS {sim_peak_kb / 1024:.0f} MiB")
    if peer_wall is not None:
        print(f"reference: wall {peer_wall:.2f} s (whole script), peak RSS {peer_peak / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
