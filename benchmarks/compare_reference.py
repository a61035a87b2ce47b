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

``--prefill-decode-interval N`` (sglang, agg) sets SGLang's extend interval on both sides.
``--router kv_router`` routes KV-aware on both sides (``--router-json`` passes KvRouterConfig
fields to both) and compares the median of as many simkit seeds with the median of ``--peer-runs``
reference runs (3 by default), since both break ties at random (simkit from its seeded stream);
``--workers`` sets the pool size.

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
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared")
sys.path.insert(0, REPO)

from simkit import load_scenario, override
from simkit.spec import parse_overrides  # noqa: E402
from simkit.output.report import nearest_rank, request_rows, summarize  # noqa: E402
from simkit.sim import simulate  # noqa: E402


#: issue 3's agreement targets: per-request |relative error| of TTFT and E2E (median, p99) and
#: the summary percentiles of TTFT, ITL and E2E
MEDIAN_TOLERANCE, P99_TOLERANCE, SUMMARY_TOLERANCE = 0.01, 0.05, 0.02
#: prefix reuse (reused / prompt tokens) within 1 point (issue 17)
REUSE_TOLERANCE = 0.01


def median_summary(summaries: list, reuse_key: str = "prefix_cache_reused_ratio") -> dict:
    """Per metric and statistic, the median over runs (one run: itself)."""
    out = dict(summaries[0])
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        out[metric] = {q: statistics.median(s[metric][q] for s in summaries) for q in ("mean", "p50", "p90", "p99")}
    out[reuse_key] = statistics.median(s[reuse_key] for s in summaries)
    return out


def spread_of(summaries: list) -> dict:
    """Per metric and statistic, the reference runs' own spread: (max - min) / median."""
    out = {}
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        out[metric] = {}
        for q in ("mean", "p50", "p90", "p99"):
            values = [s[metric][q] for s in summaries]
            out[metric][q] = (max(values) - min(values)) / statistics.median(values)
    return out


def sampled_speculation(args) -> bool:
    """Whether ``--speculative`` draws acceptances (a rate strictly between 0 and 1)."""
    return bool(args.speculative) and any(0.0 < r < 1.0 for r in parse_speculative(args.speculative)[1])


def run_peer(args, out_dir: str, run: int = 0) -> tuple[float, int]:
    tool = os.path.join(SHARED, "tools", "dynamo_peer.py")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [args.peer_python, "-c",
           "import resource,runpy,sys; sys.argv=sys.argv[1:]; "
           "runpy.run_path(sys.argv[0], run_name='__main__'); "
           "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)",
           tool, args.trace, "--router", args.router, "--engine-json", engine_json(args, out_dir, run),
           "--out", out_dir]
    if args.router_json:
        cmd += ["--router-json", args.router_json]
    if args.host_offload:
        cmd += ["--peer-raw-jsonl"]  # (its per-tier reuse)
    cmd += (["--workers", str(args.workers)] if args.mode == "agg"
            else ["--prefill", str(args.workers), "--decode", str(args.decode_workers or args.workers)])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"reference run failed:\n{proc.stderr[-2000:]}")
    peak = [int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("PEAK_KB")]
    return wall, peak[-1] if peak else 0


def engine_json(args, out_dir: str, run: int = 0) -> str:
    """The reference's vLLM defaults with ``--backend`` and ``--num-gpu-blocks`` applied."""
    with open(os.path.join(SHARED, "tools", "dynamo_engine_vllm_default.json")) as f:
        engine = json.load(f)
    engine["backend"] = args.backend
    if args.num_gpu_blocks is not None:
        engine["num_gpu_blocks"] = args.num_gpu_blocks
    if args.prefill_decode_interval:
        engine["prefill_decode_interval"] = args.prefill_decode_interval
    if args.speculative:
        k, rates = parse_speculative(args.speculative)
        engine.update(aic_nextn=k, aic_nextn_accept_rates=",".join(map(str, rates)), aic_mtp_seed=42 + run)
    if args.host_offload:
        blocks, d2h, h2d = parse_host_offload(args.host_offload)
        engine.update(kv_cache_bytes_per_token=131072, native_host_offload={
            "num_host_blocks": blocks, "d2h_bandwidth_gbps": d2h, "h2d_bandwidth_gbps": h2d})
    path = os.path.join(out_dir, "engine.json")
    with open(path, "w") as f:
        json.dump(engine, f)
    return path


def parse_host_offload(text: str) -> tuple[int, float, float]:
    """``BLOCKS[:D2H:H2D]`` -> (blocks, d2h GB/s, h2d GB/s)."""
    parts = text.split(":")
    return int(parts[0]), float(parts[1]) if len(parts) > 1 else 32.0, float(parts[2]) if len(parts) > 2 else 32.0


def parse_speculative(text: str) -> tuple[int, list[float]]:
    """``K:R1,R2,...`` -> (k, rates)."""
    k, _, rates = text.partition(":")
    return int(k), [float(r) for r in rates.split(",")] if rates else []


def stats(values):
    v = sorted(x for x in values if x is not None)
    return {q: nearest_rank(v, q) for q in (50, 90, 99)} if v else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=["agg", "disagg"], default="agg")
    ap.add_argument("--trace", default=os.path.join(SHARED, "traces", "mooncake_conversation.jsonl"))
    ap.add_argument("--backend", choices=["vllm", "sglang", "trtllm"], default="vllm")
    ap.add_argument("--num-gpu-blocks", type=int, default=None, help="KV blocks per worker (both sides)")
    ap.add_argument("--router", choices=["round_robin", "kv_router"], default="round_robin",
                    help="round robin, or KV-aware routing (simkit's kv_aware, the reference's kv_router)")
    ap.add_argument("--router-json", help="KvRouterConfig fields as JSON, for both sides (kv_router)")
    ap.add_argument("--speculative", metavar="K:R1,R2,...",
                    help="speculative decoding on both sides: K draft tokens accepted with these conditional "
                         "rates (the reference's aic_nextn and aic_nextn_accept_rates; simkit with its "
                         "verify_in_prefill and budget_counts_drafts: false, the reference's way)")
    ap.add_argument("--host-offload", metavar="BLOCKS[:D2H:H2D]",
                    help="a host KV tier of BLOCKS blocks per prompt-pool worker (the reference's "
                         "native_host_offload; GB/s each way, default 32), KV 131072 bytes per token")
    ap.add_argument("--prefill-decode-interval", type=int, default=0, metavar="N",
                    help="sglang, agg: N decode passes after each extend pass on both sides (the "
                         "reference's prefill_decode_interval, simkit's sglang.prefill_decode_interval)")
    ap.add_argument("--workers", type=int, default=4, help="workers (agg) or prefill workers (disagg)")
    ap.add_argument("--decode-workers", type=int, default=None, help="disagg: decode workers (default: --workers)")
    ap.add_argument("--peer-runs", type=int, default=None,
                    help="reference runs to take the median of (default: 1 for round robin, 3 for kv_router, "
                         "whose random ties make runs differ)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a field of simkit's scenario only (repeatable)")
    group = ap.add_mutually_exclusive_group(required=True)
    group.add_argument("--peer-python", help="python of a venv with ai-dynamo-runtime==1.6.1")
    group.add_argument("--peer-dir", help="an existing dynamo_peer.py output folder for this trace and mode")
    args = ap.parse_args()

    pools = ["aggregated"] if args.mode == "agg" else ["prefill", "decode"]
    sets = [("workload", {"kind": "trace", "path": os.path.abspath(args.trace)})]
    sets += [(f"pools.{pools[0]}.workers", args.workers)]
    if args.mode == "disagg":
        sets += [("pools.decode.workers", args.decode_workers or args.workers)]
    if args.router == "kv_router":
        router = {"kind": "kv_aware"}
        if args.router_json:
            with open(args.router_json) as f:
                router.update(json.load(f))
        sets += [("router", router)]
    sets += [(f"pools.{p}.backend", args.backend) for p in pools]
    if args.backend == "sglang":  # a documented difference from SGLang, the reference's way
        sets += [(f"pools.{p}.sglang.budgets_count_chunks", True) for p in pools]
    if args.num_gpu_blocks is not None:
        sets += [(f"pools.{p}.num_gpu_blocks", args.num_gpu_blocks) for p in pools]
    if args.prefill_decode_interval:
        if args.backend != "sglang" or args.mode != "agg" or args.prefill_decode_interval < 0:
            print("compare_reference.py: --prefill-decode-interval needs --backend sglang, --mode agg "
                  "and N >= 0", file=sys.stderr)
            sys.exit(2)
        sets += [("pools.aggregated.sglang.prefill_decode_interval", args.prefill_decode_interval)]
    if args.speculative:
        k, rates = parse_speculative(args.speculative)
        sets += [(f"pools.{pools[-1]}.speculative", {
            "num_speculative_tokens": k, "acceptance_rates": rates or None, "budget_counts_drafts": False,
            "verify_in_prefill": args.backend != "sglang"})]
    if args.host_offload:
        blocks, d2h, h2d = parse_host_offload(args.host_offload)
        sets += [(f"pools.{pools[0]}.kv_offload", {"host_blocks": blocks, "d2h_gb_per_s": d2h, "h2d_gb_per_s": h2d,
                                                  "kv_bytes_per_token": 131072})]
    sets += parse_overrides(args.set)
    scenario = load_scenario(os.path.join(REPO, "scenarios", f"reference_{args.mode}.yaml"), sets)
    runs = args.peer_runs or (3 if args.router == "kv_router" or sampled_speculation(args) else 1)
    t0 = time.perf_counter()
    records = simulate(scenario, record_token_times=False)
    sim_wall = time.perf_counter() - t0
    sim_peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ours = {row["id"]: row for row in request_rows(records)}
    summary = summarize(records)
    summaries_ours = [summary]
    if sampled_speculation(args) or args.router == "kv_router":
        # the reference draws acceptances and breaks routing ties at random: compare the median
        # of as many simkit seeds (acceptance streams, the router's tie stream) as reference runs
        pool = "aggregated" if args.mode == "agg" else "decode"
        for i in range(1, runs):
            seeded = {"seed": scenario.seed + i}
            if sampled_speculation(args):
                seeded[f"pools.{pool}.speculative.seed"] = 42 + i
            summaries_ours.append(summarize(simulate(override(scenario, seeded), record_token_times=False)))
        summary = dict(median_summary(summaries_ours, reuse_key="prefix_cache_hit_ratio"))

    peer_wall = peer_peak = None
    if args.peer_dir is not None:
        peer_dirs = [args.peer_dir]
    else:
        root = tempfile.mkdtemp(prefix="peer-")
        peer_dirs = [os.path.join(root, f"run{i}") for i in range(runs)]
        walls = [run_peer(args, d, i) for i, d in enumerate(peer_dirs)]
        peer_wall, peer_peak = walls[0]
    summaries = []
    for d in peer_dirs:
        with open(os.path.join(d, "summary.json")) as f:
            summaries.append(json.load(f))
    with open(os.path.join(peer_dirs[0], "per_request.jsonl")) as f:
        theirs = {row["idx"]: row for row in map(json.loads, f)}
    peer_summary = median_summary(summaries)
    spread = spread_of(summaries)

    print(f"trace {args.trace} mode {args.mode} backend {args.backend}: simkit {summary['requests']['completed']} completed, "
          f"reference {peer_summary['completed']} completed")
    failed = []  # the agreement targets of issue 3, checked below
    many = len(summaries) > 1
    ours_spread = spread_of(summaries_ours) if len(summaries_ours) > 1 else None
    print(f"{'metric':10}{'q':>5}{'simkit':>12}{'reference':>12}{'rel diff':>10}"
          + (f"{'ref spread':>12}" if many else "") + (f"{'sim spread':>12}" if ours_spread else ""))
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        for q in ("mean", "p50", "p90", "p99"):
            a, b = summary[metric][q], peer_summary[metric][q]
            tol = max(SUMMARY_TOLERANCE, spread[metric][q])
            print(f"{metric:10}{q:>5}{a:12.2f}{b:12.2f}{(a / b - 1) * 100:9.2f}%"
                  + (f"{spread[metric][q] * 100:11.2f}%" if many else "")
                  + (f"{ours_spread[metric][q] * 100:11.2f}%" if ours_spread else ""))
            if q != "mean" and abs(a / b - 1) > tol and (metric != "itl_ms" or not many):
                failed.append(f"summary {metric} {q}")
    ours_reuse = summary["prefix_cache_hit_ratio"]
    theirs_reuse = peer_summary["prefix_cache_reused_ratio"]
    print(f"prefix reuse: simkit {ours_reuse:.4f}, reference {theirs_reuse:.4f} "
          f"(difference {(ours_reuse - theirs_reuse) * 100:+.2f} points"
          + (f", reference runs {min(s['prefix_cache_reused_ratio'] for s in summaries):.4f}.."
             f"{max(s['prefix_cache_reused_ratio'] for s in summaries):.4f})" if many else ")"))
    if abs(ours_reuse - theirs_reuse) > REUSE_TOLERANCE:
        failed.append("prefix reuse")
    if args.host_offload:  # reuse by tier at first admissions, over the prompt tokens
        raw = os.path.join(peer_dirs[0], "peer_report.jsonl")
        if os.path.exists(raw):
            with open(raw) as f:
                rows = [json.loads(line) for line in f]
            total = sum(r["input_length"] for r in rows)
            ref_host = sum(r.get("first_admission_host_reused_input_tokens") or 0 for r in rows) / total
            ref_gpu = sum(r.get("first_admission_g1_reused_input_tokens") or 0 for r in rows) / total
            mine = list(records.requests)
            total_ours = sum(r.input_length for r in mine)
            our_host = sum(r.host_cached_tokens for r in mine) / total_ours
            our_gpu = sum(r.cached_tokens - r.host_cached_tokens for r in mine) / total_ours
            print(f"reuse by tier (first admissions, of prompt tokens): GPU simkit {our_gpu:.4f}, reference "
                  f"{ref_gpu:.4f}; host simkit {our_host:.4f}, reference {ref_host:.4f}")
            if abs(our_host - ref_host) > REUSE_TOLERANCE or abs(our_gpu - ref_gpu) > REUSE_TOLERANCE:
                failed.append("reuse by tier")
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
        if metric != "itl_ms" and not many and (
                st.get(50, math.inf) > MEDIAN_TOLERANCE or st.get(99, math.inf) > P99_TOLERANCE):
            failed.append(f"per-request {metric}")
    if many:
        print(f"targets (against the median of {len(summaries)} reference runs, whose random ties make them differ: "
              "summary TTFT and E2E p50/p90/p99 within max(2%, the reference's own spread); prefix reuse within "
              "1 point; per request: reported, not judged): " + ("met" if not failed else "NOT met: " + ", ".join(failed)))
    else:
        print("targets (per-request TTFT and E2E median <= 1%, p99 <= 5%; summary p50/p90/p99 within 2%; prefix "
              "reuse within 1 point): " + ("met" if not failed else "NOT met: " + ", ".join(failed)))
    print(f"simkit: wall {sim_wall:.2f} s (simulate only), peak RSS {sim_peak_kb / 1024:.0f} MiB")
    if peer_wall is not None:
        print(f"reference: wall {peer_wall:.2f} s (whole script), peak RSS {peer_peak / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
