#!/usr/bin/env python3
"""Differential check against the reference on tiny traces: KV-aware routing decision by
decision, and every request's TTFT and E2E.

The reference (Dynamo's mocker offline replay, ai-dynamo-runtime 1.6.1) breaks KV-router cost
ties at random, so two runs can route differently and per-request comparisons drift apart after
the first tie. This script removes that: it runs the reference on a trace (with ``DYN_LOG=info``
so that its router logs each decision's worker and cost), then replays the same trace in simkit
with the router *forced* to the reference's choices. At every decision simkit computes its own
costs from its own state; the script checks that the reference's chosen worker is one of
simkit's cheapest and that its cost equals the cost the reference logged (to 1e-9 blocks).
Round robin (``--router round_robin``, or ``mixed``) needs no forcing: the reference is
deterministic there. Each request's TTFT and E2E must agree to 1e-6 relative, except where the
reference run preempted a request (priced differently there: README, known differences).

Random tiny traces (``--random N``: prefix families, bursts, small and large caches, both pool
kinds, random ``KvRouterConfig`` knobs, the ``--backend`` core or a random one) or one trace
file. Needs ``--peer-python`` (a venv with ai-dynamo-runtime==1.6.1).

Example:
    python benchmarks/fuzz_reference.py --random 40 --peer-python PEER_VENV/bin/python
    python benchmarks/fuzz_reference.py --random 40 --router round_robin --backend sglang --peer-python ...
    python benchmarks/fuzz_reference.py --trace ../shared/traces/mooncake_synthetic.jsonl --workers 4 \\
        --peer-python PEER_VENV/bin/python
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)

from simkit import scenario_from_dict  # noqa: E402
from simkit.cluster.kv_router import KvAware  # noqa: E402
from simkit.sim import build  # noqa: E402
from simkit.workload import load_workload  # noqa: E402

#: the reference's router log line of one decision (DYN_LOG=info)
SELECTED = re.compile(r'Selected worker .*?request_id="([^"]+)" worker_id=(\d+) worker_type=(\w+) dp_rank=(\d+) '
                      r'logit=([-\d.e+]+)')
ANSI = re.compile(r"\x1b\[[0-9;]*m")

PEER_DRIVER = r"""
import json, os, sys
import dynamo._core as core
spec = json.loads(sys.argv[1])
eng = spec["engine"]
kw = dict(trace_block_size=spec["tbs"], router_mode=spec["mode"], capture_per_request=True)
if spec["router"] and spec["mode"] == "kv_router":
    kw["router_config"] = core.KvRouterConfig(**spec["router"])
dec = dict(eng, **spec.get("decode_engine", {}))  # speculative decoding: the pools that decode
if spec["decode"]:
    kw.update(prefill_engine_args=core._normalize_mocker_config({"engine": dict(eng, worker_type="prefill")}),
              decode_engine_args=core._normalize_mocker_config({"engine": dict(dec, worker_type="decode")}),
              num_prefill_workers=spec["workers"], num_decode_workers=spec["decode"])
else:
    kw.update(extra_engine_args=core._normalize_mocker_config({"engine": dec}), num_workers=spec["workers"])
res = core.run_mocker_trace_replay([spec["trace"]], **kw)
keep = ("uuid", "arrival_time_ms", "input_length", "requested_output_length", "ttft_ms", "e2e_latency_ms",
        "prefill_worker_idx", "decode_worker_idx", "first_admit_ms", "first_admission_host_reused_input_tokens", "first_admission_g1_reused_input_tokens", "terminal_status", "session_id", "turn_index", "readmission_count")
print("RESULT" + json.dumps([dict({k: r.get(k) for k in keep}, pools=[h["pool"] for h in r["routing_history"]])
                             for r in res.per_request]))
"""


class ReferenceAborted(Exception):
    """The reference stopped its replay on an invariant of its own (a livelock guard)."""


def run_reference(peer_python: str, trace: str, spec: dict) -> tuple[list, dict]:
    """The reference's per-request records and, by request uuid, its decisions (pool role,
    worker, cost)."""
    env = dict(os.environ, DYN_LOG="info")
    proc = subprocess.run([peer_python, "-c", PEER_DRIVER, json.dumps(dict(spec, trace=trace))],
                          capture_output=True, text=True, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT")]
    if proc.returncode or not lines:
        if "replay invariant violated" in proc.stderr:  # the reference aborts its own replay
            raise ReferenceAborted(proc.stderr.strip().splitlines()[-1])
        raise SystemExit(f"reference run failed:\n{proc.stderr[-3000:]}")
    decisions: dict = {}
    for m in SELECTED.finditer(ANSI.sub("", proc.stderr)):
        decisions.setdefault(m.group(1), []).append((int(m.group(2)), float(m.group(5))))
    return json.loads(lines[-1][6:]), decisions


def match(rows: list, records: list) -> dict:
    """Trace line index -> reference record, by (input, output, arrival), for rows with
    distinct keys (the random traces make them distinct)."""
    t0 = min(r["timestamp"] for r in rows)
    by_key = {(r["input_length"], r["output_length"], round(r["timestamp"] - t0, 6)): i for i, r in enumerate(rows)}
    out = {}
    for rec in records:
        key = (rec["input_length"], rec["requested_output_length"], round(rec["arrival_time_ms"], 6))
        if key in by_key:
            out[by_key[key]] = rec
    return out


class Forced(KvAware):
    """simkit's KV-aware policy, made to pick ``choice[rid]`` (the reference's worker); it
    records its own costs at each decision."""

    def __init__(self, spec, rng, role, choice: dict, log: list) -> None:
        super().__init__(spec, rng, role)
        self.choice = choice
        self.log = log

    def pick(self, request, workers):
        costs, overlap, keys = self.costs(request, workers)
        wid = self.choice.get(request.rid)
        index = next((i for i, w in enumerate(workers) if w.wid == wid), None)
        if index is None:
            index = self._choose(costs)
        worker = workers[index]
        self.log.append((self.role, request.rid, worker.wid, costs[index], min(costs)))
        self._route(request, worker, overlap.get(worker.wid, 0), keys)
        return worker


def simulate_forced(scenario, requests, prefill_choice: dict, decode_choice: dict):
    sim = build(scenario, requests, record_token_times=False)
    log: list = []
    router = sim.router
    entry, decode = router.entry_policy, router.decode_policy
    new_entry = Forced(entry.spec, entry.rng, entry.role, prefill_choice, log)
    _swap(sim, entry, new_entry)
    router.entry_policy = new_entry
    if isinstance(decode, KvAware):
        new_decode = Forced(decode.spec, decode.rng, decode.role, decode_choice, log)
        _swap(sim, decode, new_decode)
        router.decode_policy = new_decode
    return sim.run(), log


def _swap(sim, old, new) -> None:
    """Point the collector's and the workers' hooks at ``new`` instead of ``old``."""
    new.pool_workers = old.pool_workers
    new.private_ids = old.private_ids
    col = sim.collector
    col.prefill_listeners[:] = [new.prefill_done if getattr(f, "__self__", None) is old else f
                                for f in col.prefill_listeners]
    col.listeners[:] = [new.ended if getattr(f, "__self__", None) is old else f for f in col.listeners]
    col.release_listeners[:] = [new.released if getattr(f, "__self__", None) is old else f
                                for f in col.release_listeners]
    for workers in sim.pools.values():
        for w in workers:
            if getattr(w.kv_listener, "__self__", None) is old:
                w.kv_listener = new.kv_event
                if w.offload is not None and w.offload.host.tier.on_change is not None:  # its host tier too
                    w.offload.host.tier.on_change = (lambda stored, keys, wid=w.wid:
                                                     new.host_event(wid, stored, keys))
    if getattr(sim, "_kv_listener", None) is not None and sim._kv_listener.__self__ is old:
        sim._kv_listener = new.kv_event


def random_case(rng: random.Random, backend: str = "vllm", router_mode: str = "kv_router",
                speculative: bool = False, host_offload: bool = False) -> tuple[list, dict]:
    tbs = rng.choice([16, 32, 64])
    bs = tbs if rng.random() < 0.7 else tbs // 2 or tbs
    rows, t = [], 0.0
    families = rng.randint(1, 2 if host_offload else 4)  # (host tiers: prefixes come back after eviction)
    n = rng.randint(3, 25)
    seen = set()
    for i in range(n):
        if rng.random() < 0.6:
            t += rng.choice([0.0, rng.uniform(0, 40), rng.uniform(0, 400)])
        fam = rng.randrange(families)
        shared = rng.randint(0, 12 if host_offload else 6)
        isl = rng.randint(1, 12) * tbs - rng.choice([0, 0, rng.randint(1, tbs - 1)])
        blocks = -(-isl // tbs)
        ids = [1000 * fam + j for j in range(min(shared, blocks))]
        ids += [100000 + 100 * i + j for j in range(blocks - len(ids))]
        osl = rng.choice([1, rng.randint(2, 40), rng.randint(40, 300)])
        while (isl, osl, round(t, 6)) in seen:
            osl += 1
        seen.add((isl, osl, round(t, 6)))
        rows.append({"timestamp": round(t, 3), "input_length": isl, "output_length": osl, "hash_ids": ids})
    engine = {"block_size": bs, "num_gpu_blocks": rng.choice([64, 200, 16384]), "max_num_seqs": rng.choice([4, 256]),
              "max_num_batched_tokens": rng.choice([256, 8192]), "enable_prefix_caching": True,
              "enable_chunked_prefill": True, "speedup_ratio": 1.0}
    router = {}
    for key, values in (("prefill_load_scale", [0.5, 2.0]), ("overlap_score_credit", [0.0, 0.5, 2.0]),
                        ("overlap_score_credit_decay", [1.0, 3.0]), ("decode_active_request_weight", [1.0, 10.0]),
                        ("router_track_prefill_tokens", [False]), ("router_track_active_blocks", [False]),
                        ("router_assume_kv_reuse", [False])):
        if rng.random() < 0.15:
            router[key] = rng.choice(values)
    disagg = rng.random() < 0.35 and not host_offload  # (simkit's host tier: aggregated and prefill pools)
    if host_offload:  # small GPU caches that evict, host tiers small and large, slow and fast copies
        engine["num_gpu_blocks"] = rng.choice([16, 32, 64, 200])
        engine["kv_cache_bytes_per_token"] = rng.choice([131072, 16384])
        engine["native_host_offload"] = {"num_host_blocks": rng.choice([4, 16, 64, 1000]),
                                         "d2h_bandwidth_gbps": rng.choice([0.05, 1.0, 32.0]),
                                         "h2d_bandwidth_gbps": rng.choice([0.05, 1.0, 32.0])}
        if rng.random() < 0.5:  # a storage tier behind it
            engine["g3_offload"] = {"num_g3_blocks": rng.choice([8, 1000]),
                                    "scope": rng.choice(["worker_local", "cluster_shared"]),
                                    "latency_to_first_byte_ms": rng.choice([0.1, 5.0]),
                                    "read_bandwidth_gbps": rng.choice([0.1, 10.0]),
                                    "write_bandwidth_gbps": rng.choice([0.1, 10.0])}
    engine["backend"] = rng.choice(["vllm", "sglang", "trtllm"]) if backend == "random" else backend
    mode = rng.choice(["kv_router", "round_robin"]) if router_mode == "mixed" else router_mode
    spec = {"engine": engine, "tbs": tbs, "router": router if mode == "kv_router" else {}, "mode": mode,
            "workers": rng.randint(1 if mode == "round_robin" else 2, 4),
            "decode": rng.randint(1 if mode == "round_robin" else 2, 3) if disagg else 0}
    if speculative:  # acceptance 0 or 1 only: both sides then emit the same tokens, no sampling
        k = rng.randint(1, 3)
        rates = [rng.choice([0.0, 1.0]) for _ in range(k)]
        spec["decode_engine"] = {"aic_nextn": k, "aic_nextn_accept_rates": ",".join(str(r) for r in rates)}
        spec["speculative"] = {"num_speculative_tokens": k, "acceptance_rates": rates, "budget_counts_drafts": False,
                               "verify_in_prefill": engine["backend"] != "sglang"}
    return rows, spec


def scenario_of(path: str, spec: dict):
    eng = spec["engine"]
    pool = {"block_size": eng["block_size"], "num_gpu_blocks": eng["num_gpu_blocks"],
            "max_num_seqs": eng["max_num_seqs"], "max_num_batched_tokens": eng["max_num_batched_tokens"],
            "backend": eng.get("backend", "vllm")}
    host = eng.get("native_host_offload")
    if host is not None:
        pool["kv_offload"] = {"host_blocks": host["num_host_blocks"], "d2h_gb_per_s": host["d2h_bandwidth_gbps"],
                              "h2d_gb_per_s": host["h2d_bandwidth_gbps"],
                              "kv_bytes_per_token": eng["kv_cache_bytes_per_token"]}
        g3 = eng.get("g3_offload")
        if g3 is not None:
            tier = {"blocks": g3["num_g3_blocks"], "read_gb_per_s": g3.get("read_bandwidth_gbps", 10.0),
                    "write_gb_per_s": g3.get("write_bandwidth_gbps", 10.0),
                    "first_byte_latency_ms": g3.get("latency_to_first_byte_ms", 0.1),
                    "scope": "worker" if g3["scope"] == "worker_local" else "pool"}
            if tier["scope"] == "pool":
                tier.update(shared_read_gb_per_s=g3.get("shared_read_bandwidth_gbps", 80.0),
                            shared_write_gb_per_s=g3.get("shared_write_bandwidth_gbps", 80.0))
            pool["kv_offload"]["storage"] = tier
    if pool["backend"] == "sglang":  # the reference's way: a documented difference from SGLang
        pool["sglang"] = {"budgets_count_chunks": True}
    router = {"kind": "kv_aware", **spec["router"]} if spec["mode"] == "kv_router" else {"kind": "round_robin"}
    decode_pool = dict(pool, speculative=spec["speculative"]) if spec.get("speculative") else pool
    data = {"workload": {"kind": "trace", "path": path, "trace_block_size": spec["tbs"]},
            "latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True},
            "router": router}
    if spec["decode"]:
        data["pools"] = {"prefill": dict(pool, workers=spec["workers"]),
                         "decode": dict(decode_pool, workers=spec["decode"])}
        data["link"] = {"bandwidth_gb_per_s": None, "sharing": "uncontended"}
    else:
        data["pools"] = {"aggregated": dict(decode_pool, workers=spec["workers"])}
    return scenario_from_dict(data)


def check_case(peer_python: str, rows: list, spec: dict, label: str, verbose: bool) -> list:
    """Problems found (empty: every decision and every request agree)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.jsonl")
        with open(path, "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in rows)
        records, decisions = run_reference(peer_python, path, spec)
        by_idx = match(rows, records)
        scenario = scenario_of(path, spec)
        requests = load_workload(scenario.workload, scenario.seed)
        disagg = bool(spec["decode"])
        prefill_choice = {i: (r["prefill_worker_idx"] if disagg else r["decode_worker_idx"]) for i, r in by_idx.items()}
        decode_choice = {i: r["decode_worker_idx"] for i, r in by_idx.items()} if disagg else {}
        ref_cost = {}
        for i, r in by_idx.items():
            pools = r.get("pools") or []
            for j, (wid, cost) in enumerate(decisions.get(r["uuid"], [])):
                # the decisions come in the order of the request's routing history (sglang
                # pairs the decode worker first)
                side = "decode" if j < len(pools) and pools[j] == "decode" else "entry"
                ref_cost[(side, i)] = (wid, cost)
        if spec["mode"] == "kv_router":
            result, log = simulate_forced(scenario, requests, prefill_choice, decode_choice)
        else:
            result, log = build(scenario, requests, record_token_times=False).run(), []
    problems = []
    for role, rid, wid, cost, low in log:
        side = "decode" if role == "decode" else "entry"
        ref = ref_cost.get((side, rid))
        if ref is None:
            continue
        if cost > low + 1e-9:
            problems.append(f"{label} r{rid} {side}: reference picked w{wid} at cost {ref[1]:g}; simkit's cost there "
                            f"{cost:g} > its minimum {low:g}")
        elif abs(cost - ref[1]) > 1e-9:
            problems.append(f"{label} r{rid} {side}: cost of w{wid}: simkit {cost:g}, reference {ref[1]:g}")
    ours = {r.rid: r for r in result.requests}
    if any(rec.get("readmission_count") for rec in by_idx.values()):
        # a preempted request is priced differently by the reference (README, known
        # differences): its decisions are compared, its timings not
        if verbose:
            print(f"{label}: preemptions in the reference run; timings not compared")
        by_idx = {}
    for i, rec in by_idx.items():
        mine = ours[i]
        for name, a, b in (("ttft", mine.ttft_s, rec["ttft_ms"]), ("e2e", mine.e2e_s, rec["e2e_latency_ms"])):
            a = None if a is None else a * 1000
            if (a is None) != (b is None) or (a is not None and abs(a - b) > 1e-6 * max(1.0, abs(b))):
                problems.append(f"{label} r{i} {name}: simkit {a}, reference {b}")
    if verbose:
        print(f"{label}: {len(log)} decisions, {len(by_idx)} requests timed, {len(problems)} problems "
              f"({'disagg' if disagg else 'agg'} {spec['engine'].get('backend', 'vllm')}, {spec['workers']} workers, "
              f"{spec['engine']['num_gpu_blocks']} blocks of {spec['engine']['block_size']}, {spec['mode']} "
              f"{spec['router']})" + (f"; host hits {result.kv_offload['host_hit_tokens']} tokens, "
                                     f"{result.kv_offload['stored_blocks']} blocks stored"
                                     + (f", {result.kv_offload['staged_blocks']} staged from storage"
                                        if "staged_blocks" in result.kv_offload else "")
                                     if getattr(result, "kv_offload", None) else ""))
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer-python", required=True, help="python of a venv with ai-dynamo-runtime==1.6.1")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="N random tiny traces")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--trace", help="a Mooncake trace instead")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--decode-workers", type=int, default=0, help="disaggregated: decode workers")
    ap.add_argument("--router", choices=["kv_router", "round_robin", "mixed"], default="kv_router")
    ap.add_argument("--backend", choices=["vllm", "sglang", "trtllm", "random"], default="vllm",
                    help="the engine core on both sides")
    ap.add_argument("--speculative", action="store_true",
                    help="speculative decoding on the decoding pools (k 1 to 3, acceptance rates 0 or 1)")
    ap.add_argument("--host-offload", action="store_true",
                    help="a host KV tier on every worker (native_host_offload; aggregated pools, vllm)")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()
    problems = []
    aborted = 0
    if args.trace:
        with open(args.trace) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        engine = {"block_size": 64, "num_gpu_blocks": 16384, "max_num_seqs": 256, "max_num_batched_tokens": 8192,
                  "enable_prefix_caching": True, "enable_chunked_prefill": True, "speedup_ratio": 1.0}
        engine["backend"] = "vllm" if args.backend in ("random",) else args.backend
        mode = "kv_router" if args.router == "mixed" else args.router
        spec = {"engine": engine, "tbs": 512, "router": {}, "mode": mode, "workers": args.workers,
                "decode": args.decode_workers}
        problems += check_case(args.peer_python, rows, spec, os.path.basename(args.trace), True)
    rng = random.Random(args.seed)
    for case in range(args.random):
        rows, spec = random_case(rng, args.backend, args.router, args.speculative, args.host_offload)
        try:
            problems += check_case(args.peer_python, rows, spec, f"case {case}", args.verbose)
        except ReferenceAborted as exc:
            aborted += 1
            print(f"case {case}: the reference aborted its replay ({exc}); not compared")
    for line in problems[:60]:
        print(line)
    print(f"{len(problems)} problems" + (" (first 60 shown)" if len(problems) > 60 else "")
          + (f"; {aborted} cases the reference aborted" if aborted else ""))
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
