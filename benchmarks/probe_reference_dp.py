#!/usr/bin/env python3
"""Probe the reference's attention data parallelism (``dp_size``) with tiny traces.

    python benchmarks/probe_reference_dp.py --peer-python PEER_VENV/bin/python [--out DIR]

(``PEER_VENV``: a venv with ``ai-dynamo-runtime==1.6.1``; the reference runs through
``../shared/tools/dynamo_peer.py``.) Groundwork for the attention-DP issue: each probe is a
trace of 2-4 requests replayed on one or two workers with the reference's default polynomial
latency (block size 64), once with ``dp_size`` 1 and once with 2 (or with the knob under test),
and prints every request's TTFT and E2E (ms), the prompt tokens it reused and the DP rank it ran
on (``decode_worker`` in the peer's records: ``worker x dp_size + rank``). The rules they show
(measured 2026-12-07; f(n) is the reference's prefill pass time of n tokens, 24.386 ms for 512,
32.491 for 1024, 40.816 for 1536, 49.363 for 2048, 125.681 for 6144):

* ``lockstep``: 4 prompts of 512 tokens at t = 0 on one worker: dp 1 prefills 2048 tokens in
  one pass (TTFT 49.363); dp 2 gives each rank 1024 (32.491 for all four).
* ``slowest_rank``: prompts of 2048 and 512 tokens: dp 2 puts one on each rank and both get
  TTFT f(2048) = 49.363 (the pass ends when the slowest rank ends; dp 1: 58.13 for 2560).
* ``placement``: prompts of 512, 1024, 1536, 2048 tokens on two workers with dp 2: ranks 0, 2,
  1, 3 (round robin over workers first, then over each worker's ranks).
* ``rank_round_robin``: six prompts 100 ms apart on one worker with dp 3: ranks 0, 1, 2, 0, 1, 2
  in every run; six at once: each rank takes two, in an order that changes from run to run (2,
  0, 1, 2, 0, 1 / 0, 1, 2, 0, 1, 2 / 1, 0, 1, 0, 2, 2 ...): a round robin over the ranks in the
  order requests reach the worker, simultaneous ones reaching it in no fixed order. So the rank
  printed for simultaneous lines can change between runs; their times do not.
* ``idle_rank_waits``: 2048 tokens at t = 0 (rank 0) and 512 at t = 10 ms (rank 1): the second
  starts at the group's pass end (49.363) and its first token comes at 49.363 + f(512) = 73.749;
  the first request's next token waits for that pass too (E2E 73.749).
* ``budget_per_rank``: two prompts of 6144 tokens, ``max_num_batched_tokens`` 8192: dp 1 chunks
  (TTFTs 169.1 and 260.9); dp 2 prefills each on its own rank in one pass (125.681 both).
* ``kv_per_rank``: ``num_gpu_blocks`` 20 and two prompts of 1024 tokens (16 blocks, 64 out): dp
  1 runs them one after the other (TTFT 32.5 and 2129.7); dp 2 at once (32.5 both): the block
  count is per rank.
* ``kv_router_scores_ranks``: one worker, dp 2, the same 2048-token prompt at 0 and 500 ms:
  without the KV router the second went to the other rank (reused 0, TTFT 49.363); the KV
  router sends it to the rank holding the blocks (reused 1984, TTFT 17.475), as dp 1 does.
* ``dp_rank_field``: a trace line's ``dp_rank`` (both 0) does not pin the rank in this replay:
  the two requests run on ranks 0 and 1.
* ``prefill_interval``: ``prefill_schedule_interval`` N = 1, 2, 3 on a request arriving
  mid-decode changed nothing with dp 1 or 2 (TTFT 33.371 and 27.604): with dp 2 it went to the
  rank with nothing running, and with dp 1 the interval is not applied at all.
* ``prefill_interval_busy``: dp 2, both ranks decoding (two prompts at t = 0, 60 tokens out;
  decode passes 5.767 ms after the 24.386 ms prefill, so pass k starts at 24.386 + (k - 1) x
  5.767), a third prompt at 56 ms: its first token at 89.137 / 94.904 / 100.671 / 94.904 ms for
  N = 1 / 2 / 3 / 4, i.e. admitted in pass 7 / 8 / 9 / 8 (arriving at 50 ms instead: passes 6 /
  6 / 6 / 8). So a busy rank admits prefill only in a pass whose number (counting the group's
  passes from 1) N divides; a rank with nothing running admits at once (after the group falls
  idle, a new prompt prefilled in the next pass whatever N and the passes before).
* ``sglang_chunk_per_rank``: SGLang, one prompt of 6144 tokens, ``chunked_prefill_size`` 8192
  (its default here): dp 1 prefills it in one pass (TTFT 125.681), dp 2 in chunks of 4096 and
  2048 (85.756 + 49.363 = 135.119): each rank's chunk is the size over the DP size.
* ``sglang_prefill_decode_interval``: SGLang, two prompts decoding and two more arriving at 1 and
  2 ms (during the first extend round): each unit of ``prefill_decode_interval`` N holds their
  extend back by one decode round: TTFT 63.981 / 69.774 / 75.567 / 87.153 ms for N = 0 / 1 / 2 /
  4 with dp 1 (rounds of 5.793 ms), 47.771 / 53.538 / 59.304 / 70.837 with dp 2 (5.767): unlike
  vLLM's interval it applies without DP too.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.join(os.path.dirname(os.path.dirname(HERE)), "shared")
PEER = os.path.join(SHARED, "tools", "dynamo_peer.py")


def _prompt(first_block: int, tokens: int, output: int, at_ms: float = 0.0, **extra) -> dict:
    """A trace line of ``tokens`` prompt tokens in 512-token blocks numbered from ``first_block``."""
    return {"timestamp": at_ms, "input_length": tokens, "output_length": output,
            "hash_ids": list(range(first_block, first_block + -(-tokens // 512))), **extra}


#: the runs of a probe that compares dp 1 with dp 2 on one worker
ONE_TWO = [(1, 1, {}, "round_robin"), (1, 2, {}, "round_robin")]
SMALL_KV = {"num_gpu_blocks": 20}

#: name -> (trace lines, [(workers, dp_size, engine fields, router)] runs)
PROBES = {
    "lockstep": ([_prompt(100 * i, 512, 4) for i in range(4)], ONE_TWO),
    "slowest_rank": ([_prompt(0, 2048, 4), _prompt(100, 512, 4)], ONE_TWO),
    "placement": ([_prompt(100 * i, n, 2) for i, n in enumerate((512, 1024, 1536, 2048))],
                  [(2, 2, {}, "round_robin")]),
    "rank_round_robin": ([_prompt(100 * i, 512, 2, at_ms=100.0 * i) for i in range(6)],
                         [(1, 3, {}, "round_robin")]),
    "idle_rank_waits": ([_prompt(0, 2048, 2), _prompt(100, 512, 2, at_ms=10.0)], [(1, 2, {}, "round_robin")]),
    "budget_per_rank": ([_prompt(100 * i, 6144, 2) for i in range(2)], ONE_TWO),
    "kv_per_rank": ([_prompt(100 * i, 1024, 64) for i in range(2)],
                    [(1, 1, SMALL_KV, "round_robin"), (1, 2, SMALL_KV, "round_robin")]),
    "kv_router_scores_ranks": ([_prompt(1, 2048, 2), _prompt(1, 2048, 2, at_ms=500.0)],
                               [(1, 2, {}, "round_robin"), (1, 2, {}, "kv_router"),
                                (1, 1, {}, "round_robin")]),
    "dp_rank_field": ([_prompt(0, 2048, 2, dp_rank=0), _prompt(100, 512, 2, dp_rank=0)],
                      [(1, 2, {}, "round_robin")]),
    "prefill_interval": ([_prompt(1, 512, 40), _prompt(2, 512, 2, at_ms=50.0)],
                         [(1, dp, {"prefill_schedule_interval": n}, "round_robin")
                          for dp in (1, 2) for n in (1, 2, 3)]),
    "prefill_interval_busy": ([_prompt(1, 512, 60), _prompt(2, 512, 60), _prompt(3, 512, 2, at_ms=56.0)],
                              [(1, 2, {"prefill_schedule_interval": n}, "round_robin")
                               for n in (1, 2, 3, 4)]),
    "sglang_chunk_per_rank": ([_prompt(0, 6144, 2)],
                              [(1, dp, {"backend": "sglang"}, "round_robin") for dp in (1, 2)]),
    "sglang_prefill_decode_interval": ([_prompt(1, 512, 60), _prompt(2, 512, 60),
                                        _prompt(3, 512, 2, at_ms=1.0), _prompt(4, 512, 2, at_ms=2.0)],
                                       [(1, dp, {"backend": "sglang", "prefill_decode_interval": n},
                                         "round_robin") for dp in (1, 2) for n in (0, 1, 2, 4)]),
}


def run(peer_python: str, lines: list, workers: int, dp: int, engine: dict, router: str, folder: str) -> list:
    """The peer's per-request records of one replay."""
    os.makedirs(folder, exist_ok=True)
    trace, config = os.path.join(folder, "trace.jsonl"), os.path.join(folder, "engine.json")
    with open(trace, "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    with open(config, "w") as f:
        json.dump({"dp_size": dp, "engine": {"block_size": 64, "num_gpu_blocks": 16384, **engine}}, f)
    out = os.path.join(folder, "out")
    cmd = [peer_python, PEER, trace, "--workers", str(workers), "--engine-json", config,
           "--router", router, "--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    records = os.path.join(out, "per_request.jsonl")
    if proc.returncode or not os.path.isfile(records):
        tail = proc.stderr.strip().splitlines()[-1:] or ["no message"]
        why = f"exit {proc.returncode}: {tail[0]}" if proc.returncode else "it wrote no per_request.jsonl"
        shutil.rmtree(folder, ignore_errors=True)  # no half-written probe left behind
        print(f"probe_reference_dp.py: the reference failed on {os.path.basename(folder)} ({why}); is "
              f"{peer_python} the python of a venv with ai-dynamo-runtime==1.6.1?", file=sys.stderr)
        sys.exit(1)
    with open(records) as f:
        return [json.loads(line) for line in f if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peer-python", required=True,
                    help="python of a venv with ai-dynamo-runtime==1.6.1")
    ap.add_argument("--out", default=None, help="keep the traces and the reference's outputs here")
    ap.add_argument("--probes", default=",".join(PROBES), help=f"comma list of: {', '.join(PROBES)}")
    args = ap.parse_args()
    names = [n for n in args.probes.split(",") if n]
    unknown = [n for n in names if n not in PROBES]
    if unknown or not names:
        what = f"unknown {', '.join(unknown)}" if unknown else "none given"
        print(f"probe_reference_dp.py: --probes: {what} (expected a comma list of: {', '.join(PROBES)})",
              file=sys.stderr)
        sys.exit(2)
    if not (os.path.isfile(args.peer_python) and os.access(args.peer_python, os.X_OK)):
        print(f"probe_reference_dp.py: --peer-python {args.peer_python}: not an executable file "
              "(expected the python of a venv with ai-dynamo-runtime==1.6.1)", file=sys.stderr)
        sys.exit(2)
    if not os.path.exists(PEER):
        print(f"probe_reference_dp.py: {PEER} not found (the reference harness lives in ../shared)",
              file=sys.stderr)
        sys.exit(2)
    root = args.out or tempfile.mkdtemp(prefix="simkit_dp_probe_")
    for name in names:
        lines, runs = PROBES[name]
        for i, (workers, dp, engine, router) in enumerate(runs):
            folder = os.path.join(root, f"{name}_{i}")
            records = run(args.peer_python, lines, workers, dp, engine, router, folder)
            knobs = " ".join(f"{k}={v}" for k, v in engine.items())
            print(f"{name}: workers={workers} dp_size={dp} {router} {knobs}".rstrip())
            for r in records:
                print(f"  request {r['idx']}: rank {r['decode_worker']}, TTFT {r['ttft_ms']:.3f}, "
                      f"E2E {r['e2e_ms']:.3f}, reused {r['reused_input_tokens']}")


if __name__ == "__main__":
    main()
