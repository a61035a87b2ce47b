#!/usr/bin/env python3
"""Wall time and peak memory of simkit against the reference (Dynamo mocker, Rust core).

For each case, runs the simkit CLI and the reference's ``../shared/tools/dynamo_peer.py``
alternately ``--repeats`` times (each a fresh process; simkit with ``--no-plots``, since the
reference draws none) and prints per-run wall seconds and peak RSS, and the median over pairs
of the ratio simkit / reference. Then, in-process, simkit's simulated events per second and
forward passes per second, with fast-forward on and off.

Cases:
  reference_agg     mooncake_conversation.jsonl, 4 aggregated workers (REFERENCE defaults)
  reference_disagg  the same trace, 4 prefill + 4 decode workers
  synthetic_50k     50,000 synthetic requests at 32 req/s on 8 aggregated workers, written to
                    a Mooncake JSONL file first so that both simulators replay the same trace
  sglang_agg, sglang_disagg
                    reference_agg and reference_disagg with ``backend: sglang`` on both sides
                    (not run unless named in ``--cases``)

Example (the reference needs its own venv with ai-dynamo-runtime==1.6.1):
    python benchmarks/speed.py --peer-python /path/to/peer-venv/bin/python --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SHARED = os.path.join(os.path.dirname(REPO), "shared")
sys.path.insert(0, REPO)

from simkit import load_scenario, scenario_from_dict  # noqa: E402
from simkit.sim import build  # noqa: E402
from simkit.workload import synthesize  # noqa: E402

# Runs a module or script and reports its own peak RSS (KiB) on stderr as its last line.
PEAK = ("import resource, runpy, sys\n"
        "target, sys.argv = sys.argv[1], sys.argv[1:]\n"
        "try:\n"
        "    if target.endswith('.py'):\n"
        "        runpy.run_path(target, run_name='__main__')\n"
        "    else:\n"
        "        sys.argv[0] = target; runpy.run_module(target, run_name='__main__', alter_sys=True)\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "else:\n"
        "    code = 0\n"
        "print('PEAK_KB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
        "sys.exit(code)\n")


def timed(cmd: list[str]) -> tuple[float, int]:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - t0
    if proc.returncode:
        sys.exit(f"failed: {' '.join(cmd)}\n{proc.stderr[-3000:]}")
    peak = [int(x.split()[1]) for x in proc.stderr.splitlines() if x.startswith("PEAK_KB")]
    return wall, peak[-1]


def synthetic_trace(path: str) -> None:
    spec = scenario_from_dict({"pools": {"aggregated": {}}, "workload": {
        "kind": "synthetic", "num_requests": 50_000, "arrival": {"kind": "poisson", "rate_per_s": 32.0},
        "input_tokens": {"kind": "lognormal", "mean": 2000, "sigma": 0.8, "min": 16, "max": 32000},
        "output_tokens": {"kind": "lognormal", "mean": 250, "sigma": 0.7, "min": 1, "max": 2000},
        "shared_prefix": {"num_groups": 32, "prefix_tokens": 1024}, "trace_block_size": 16}}).workload
    with open(path, "w") as f:
        for r in synthesize(spec, seed=1):
            # re-express the 16-token identity blocks as 512-token Mooncake blocks: a block of
            # 512 is identified by the chain of its 32 sub-blocks' last id (ids are chained)
            ids = [r.hash_ids[min(i + 31, len(r.hash_ids) - 1)] for i in range(0, len(r.hash_ids), 32)]
            f.write(json.dumps({"timestamp": round(r.arrived_at * 1000, 3), "input_length": r.input_length,
                                "output_length": r.output_length, "hash_ids": ids}) + "\n")


def _sglang(pools: list[str]) -> list[tuple[str, object]]:
    return [(f"pools.{p}.{k}", v) for p in pools for k, v in (("backend", "sglang"),
                                                             ("sglang.budgets_count_chunks", True))]


#: case: (scenario, the reference's topology, simkit overrides, the reference's engine backend)
CASES = {
    "reference_agg": ("reference_agg.yaml", ["--workers", "4"], [], "vllm"),
    "reference_disagg": ("reference_disagg.yaml", ["--prefill", "4", "--decode", "4"], [], "vllm"),
    "synthetic_50k": ("reference_agg.yaml", ["--workers", "8"], [("pools.aggregated.workers", 8)], "vllm"),
    "sglang_agg": ("reference_agg.yaml", ["--workers", "4"], _sglang(["aggregated"]), "sglang"),
    "sglang_disagg": ("reference_disagg.yaml", ["--prefill", "4", "--decode", "4"], _sglang(["prefill", "decode"]),
                      "sglang"),
}
DEFAULT_CASES = "reference_agg,reference_disagg,synthetic_50k"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-python", help="python of a venv with ai-dynamo-runtime==1.6.1 "
                                          "(without it only simkit is measured)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--cases", default=DEFAULT_CASES, help=f"comma list of {', '.join(CASES)}")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="simkit-speed-")
    conv = os.path.join(SHARED, "traces", "mooncake_conversation.jsonl")
    synth = os.path.join(tmp, "synthetic_50k.jsonl")
    rows = []
    for case in args.cases.split(","):
        scen, peer_topology, overrides, backend = CASES[case]
        extra = [a for k, v in overrides for a in ("--set", f"{k}={json.dumps(v)}")]
        trace = synth if case == "synthetic_50k" else conv
        if case == "synthetic_50k" and not os.path.exists(synth):
            synthetic_trace(synth)
        sim_cmd = [sys.executable, "-c", PEAK, "simkit", os.path.join("scenarios", scen), "--trace", trace,
                   "--no-plots", "--quiet", "--force", "--out", os.path.join(tmp, "out-" + case)] + extra
        peer_cmd = None
        if args.peer_python:
            with open(os.path.join(SHARED, "tools", "dynamo_engine_vllm_default.json")) as f:
                engine = {**json.load(f), "backend": backend}
            engine_json = os.path.join(tmp, f"engine-{backend}.json")
            with open(engine_json, "w") as f:
                json.dump(engine, f)
            peer_cmd = [args.peer_python, "-c", PEAK, os.path.join(SHARED, "tools", "dynamo_peer.py"), trace,
                        *peer_topology, "--router", "round_robin", "--engine-json", engine_json,
                        "--out", os.path.join(tmp, "peer-" + case)]
        sims, peers = [], []
        for _ in range(args.repeats):
            sims.append(timed(sim_cmd))
            if peer_cmd:
                peers.append(timed(peer_cmd))
        line = f"{case:17} simkit wall " + " ".join(f"{w:6.2f}" for w, _ in sims) + \
               f" s, peak {max(m for _, m in sims) / 1024:5.0f} MiB"
        if peers:
            ratio = statistics.median(s[0] / p[0] for s, p in zip(sims, peers))
            mem = max(m for _, m in sims) / max(m for _, m in peers)
            line += (" | reference wall " + " ".join(f"{w:6.2f}" for w, _ in peers) +
                     f" s, peak {max(m for _, m in peers) / 1024:5.0f} MiB | median wall ratio {ratio:.2f},"
                     f" peak memory ratio {mem:.2f}")
        print(line, flush=True)
        # in-process: events and passes per second, with and without fast-forward
        scenario = load_scenario(os.path.join(REPO, "scenarios", scen),
                                 [("workload", {"kind": "trace", "path": trace})] + overrides)
        for ff in (True, False):
            sim = build(scenario, fast_forward=ff, record_token_times=False)
            t0 = time.perf_counter()
            records = sim.run()
            wall = time.perf_counter() - t0
            events = next(sim.env._eid)  # SimPy's running event id: events scheduled so far
            passes = sum(records.passes.values())
            rows.append((case, ff, wall, events, passes))
            print(f"{'':17} fast_forward={str(ff):5} simulate {wall:6.2f} s: {events / wall:10,.0f} events/s,"
                  f" {passes / wall:10,.0f} passes/s ({passes:,} passes, {events:,} events)", flush=True)


if __name__ == "__main__":
    main()
