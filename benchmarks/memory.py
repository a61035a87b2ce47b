#!/usr/bin/env python3
"""Peak memory of a long replay, streamed (``--stream``) and held in memory.

Runs the simkit CLI (each case a fresh process, ``--no-plots`` unless ``--plots``) on a
synthetic workload of ``--requests`` requests (Poisson at ``--rate`` req/s, prompts uniform
128-2,048 tokens, outputs uniform 16-256, on 16 aggregated workers) and prints wall seconds,
peak RSS (from ``os.wait4``), and peak RSS per 1,000 requests. With ``--compare N``, also runs
N requests both ways, to show what grows with the workload's length and what does not.

Example (the issue's target: a million requests under 4 GB):
    python benchmarks/memory.py --requests 1000000
    python benchmarks/memory.py --requests 100000 --compare 100000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

SCENARIO = """\
name: memory_{n}
seed: 1
workload:
  kind: synthetic
  num_requests: {n}
  arrival: {{kind: poisson, rate_per_s: {rate}}}
  input_tokens: {{kind: uniform, low: 128, high: 2048}}
  output_tokens: {{kind: uniform, low: 16, high: 256}}
latency: {{kind: polynomial}}
pools:
  aggregated: {{workers: 16, max_num_batched_tokens: 8192, max_num_seqs: 256}}
router: {{kind: round_robin}}
"""


def run_case(tmp: str, n: int, rate: float, stream: bool, plots: bool) -> tuple[float, float]:
    """(wall seconds, peak RSS MiB) of one CLI run."""
    path = os.path.join(tmp, f"memory_{n}.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(SCENARIO.format(n=n, rate=rate))
    out = os.path.join(tmp, f"out_{n}_{'stream' if stream else 'memory'}")
    cmd = [sys.executable, "-m", "simkit", path, "--out", out, "--force", "--quiet"]
    cmd += ["--stream"] if stream else []
    cmd += [] if plots else ["--no-plots"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"simkit failed on {n} requests (exit {os.waitstatus_to_exitcode(status)})")
    return wall, usage.ru_maxrss / 1024.0  # KiB on Linux


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=1_000_000)
    ap.add_argument("--rate", type=float, default=100.0, help="arrivals per second (default 100)")
    ap.add_argument("--compare", type=int, metavar="N", help="also run N requests streamed and in memory")
    ap.add_argument("--plots", action="store_true", help="draw the latency CDF too (as the CLI does by default)")
    args = ap.parse_args()
    cases = [(args.requests, True)]
    if args.compare:
        cases += [(args.compare, True), (args.compare, False)]
    print(f"{'requests':>10} {'mode':>9} {'wall s':>8} {'peak MiB':>9} {'KiB/1k req':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for n, stream in cases:
            wall, peak = run_case(tmp, n, args.rate, stream, args.plots)
            print(f"{n:>10,} {'stream' if stream else 'memory':>9} {wall:8.1f} {peak:9.0f} "
                  f"{peak * 1024 / (n / 1000):11.1f}", flush=True)


if __name__ == "__main__":
    main()
