"""Fast-forwarded decode runs give exactly the records of pass-by-pass stepping.

Generated scenarios cover aggregated and disaggregated pools, prefix caching, chunked prefill,
KV pressure with preemption, handoff links with delays, bursts of simultaneous arrivals and
time caps. Equality is on the whole ``RunRecords``: every timestamp of every token, bit for bit.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import override, scenario_from_dict
from simkit.core.request import Request
from conftest import draw_speculative
from simkit.sim import build, simulate


@st.composite
def cases(draw):
    tbs = 64
    n = draw(st.integers(1, 30))
    reqs, t = [], 0.0
    for rid in range(n):
        if draw(st.booleans()):  # bursts: several requests at the same instant
            t += draw(st.floats(0, 0.5))
        isl = draw(st.integers(1, 2500))
        osl = draw(st.integers(0, 120))
        family = draw(st.integers(0, 3))
        ids = tuple(family * 100 + j for j in range(-(-isl // tbs)))
        reqs.append(Request(rid, t, isl, osl, ids, tbs))
    pool = {
        "workers": draw(st.integers(1, 3)),
        "block_size": draw(st.sampled_from([16, 64])),
        "num_gpu_blocks": draw(st.sampled_from([12, 40, 120, 1000])),
        "max_num_batched_tokens": draw(st.sampled_from([64, 512, 8192])),
        "max_num_seqs": draw(st.integers(1, 12)),
        "enable_prefix_caching": draw(st.booleans()),
        "enable_chunked_prefill": draw(st.booleans()),
        "async_scheduling": draw(st.booleans()),
    }
    backend = draw(st.sampled_from(["vllm", "sglang", "trtllm"]))
    pool["backend"] = backend
    if backend == "vllm":
        pool["preemption_mode"] = draw(st.sampled_from(["lifo", "fifo"]))
    if backend == "sglang":
        pool["sglang"] = {"schedule_policy": draw(st.sampled_from(["fifo", "lpm"])),
                          "max_prefill_tokens": draw(st.sampled_from([128, 16384])),
                          "clip_max_new_tokens": draw(st.sampled_from([16, 4096])),
                          "schedule_conservativeness": draw(st.sampled_from([0.3, 1.0, 2.0])),
                          "enable_mixed_chunk": draw(st.booleans()) and pool["enable_chunked_prefill"],
                          "prefill_decode_interval": draw(st.sampled_from([0, 0, 1, 3]))}
    if backend == "trtllm" and draw(st.booleans()):
        pool["trtllm"] = {"batch_wait_timeout_iters": draw(st.integers(0, 5)),
                          "batch_wait_max_tokens_ratio": draw(st.sampled_from([0.0, 0.1, 0.9]))}
    latency = draw(st.sampled_from([
        {"kind": "polynomial"},
        {"kind": "polynomial", "speedup_ratio": 3.0},
        {"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0},
        # the frontend's times: releases and ends the client hears of later
        {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100", "dispatch_overhead_ms": 2.0,
         "first_token_overhead_ms": 1.5, "dispatch_jitter_ms": 3.0},
    ]))
    data = {"latency": latency,
            "max_sim_time_s": draw(st.sampled_from([None, None, 0.5, 2.0]))}
    speculative = draw_speculative(draw, backend)
    prompt_pool = dict(pool)
    if backend == "vllm" and pool.get("enable_prefix_caching", True) and draw(st.booleans()):
        # a host KV tier on the pool that computes prompts (its decode runs fast-forward while
        # no copy to the host is under way or owed), and a storage tier behind it at times
        prompt_pool["kv_offload"] = {"host_blocks": draw(st.sampled_from([4, 400])),
                                     "d2h_gb_per_s": draw(st.sampled_from([0.05, 32.0])),
                                     "h2d_gb_per_s": draw(st.sampled_from([0.05, 32.0]))}
        if draw(st.booleans()):
            prompt_pool["kv_offload"]["storage"] = {"blocks": draw(st.sampled_from([4, 1000])),
                                                    "write_gb_per_s": draw(st.sampled_from([0.05, 10.0])),
                                                    "scope": draw(st.sampled_from(["worker", "pool"])),
                                                    "kv_events": draw(st.booleans())}
    if draw(st.booleans()):
        data["pools"] = {"aggregated": dict(prompt_pool, speculative=speculative)}
    else:
        if "sglang" in pool:  # mixed chunk and the extend interval are for aggregated pools only
            pool["sglang"]["enable_mixed_chunk"] = False
            pool["sglang"]["prefill_decode_interval"] = 0
            prompt_pool["sglang"] = pool["sglang"]
        data["pools"] = {"prefill": prompt_pool, "decode": dict(pool, workers=draw(st.integers(1, 3)),
                                                         speculative=speculative)}
        data["link"] = {"bandwidth_gb_per_s": draw(st.sampled_from([None, 2.0])),
                        "latency_ms": draw(st.sampled_from([0.0, 3.0])),
                        "channels": draw(st.integers(1, 2))}
    return scenario_from_dict(data), reqs


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_fast_forward_equals_per_pass_stepping(case):
    scenario, requests = case
    fast = simulate(scenario, requests, fast_forward=True, record_passes=True)
    slow = simulate(scenario, requests, fast_forward=False, record_passes=True)
    assert fast == slow  # every request timestamp and every pass record, bit for bit


class ReadsEverything:
    """A user routing policy that reads every documented worker view: its choice depends on
    KV use, queued prefill and cached prompt blocks, so stale state would change it."""

    def pick(self, request, workers):
        def score(w):
            cached, total = w.cached_prompt_blocks(request)
            return (w.kv_blocks_in_use + w.queued_prefill_tokens // 64 + total - cached, w.wid)
        return min(workers, key=score)


@st.composite
def routed_cases(draw):
    """Scenarios whose decisions read worker state at every instant: every router kind (KV-aware
    with its knobs and event lag, least loaded, session affinity, a Python policy), router
    queue thresholds, sessions with follow-up turns released when a turn ends, a planner that
    observes the pools, every link sharing and both placements."""
    scenario, requests = draw(cases())
    data = {}
    router = draw(st.sampled_from(["kv_aware", "least_loaded", "session_affinity", "python", "round_robin"]))
    if router == "kv_aware":
        data["router"] = {"kind": "kv_aware",
                          "overlap_score_credit": draw(st.sampled_from([1.0, 0.5, 2.0])),
                          "overlap_score_credit_decay": draw(st.sampled_from([0.0, 1.0])),
                          "decode_active_request_weight": draw(st.sampled_from([0.0, 3.0])),
                          "router_temperature": draw(st.sampled_from([0.0, 0.0, 0.7])),
                          "router_assume_kv_reuse": draw(st.booleans()),
                          "kv_event_lag_ms": draw(st.sampled_from([0.0, 0.0, 7.0]))}
    elif router != "python":
        data["router"] = {"kind": router}
    if draw(st.booleans()):
        threshold = draw(st.sampled_from([("max_kv_usage", 0.3), ("max_kv_usage", 0.8),
                                          ("max_queued_prefill_tokens", 600)]))
        data["router_queue"] = {"policy": draw(st.sampled_from(["fcfs", "lcfs", "wspt"])), threshold[0]: threshold[1]}
    paired = scenario.mode == "disaggregated" and scenario.pools.decode.backend == "sglang"
    if draw(st.booleans()) and not paired:  # (a planner cannot scale paired sglang pools)
        data["planner"] = {"kind": draw(st.sampled_from(["static", "threshold", "sla"])),
                           "interval_s": draw(st.sampled_from([0.05, 0.3]))}
        data["sla"] = {"ttft_ms": 400.0, "itl_ms": 60.0}
    if scenario.mode == "disaggregated":
        sharing = draw(st.sampled_from(["channels", "uncontended", "fair"]))
        data["link"] = {"sharing": sharing, "channels": scenario.link.channels if sharing == "channels" else 1,
                        "timing_mode": "full_prompt" if paired else draw(st.sampled_from(["full_prompt",
                                                                                           "destination_missing"]))}
    scenario = override(scenario, data)
    if draw(st.booleans()):  # sessions: turn n+1 released when turn n ends, after a think time
        turns, out = draw(st.integers(2, 4)), []
        for r in requests:
            first = r.rid - r.rid % turns
            deps = (r.rid - 1,) if r.rid != first else ()
            out.append(Request(r.rid, r.arrived_at, r.input_length, r.output_length, r.hash_ids, r.hash_block_size,
                               session=first, deps=deps, delay_s=draw(st.sampled_from([0.0, 0.01])) if deps else 0.0))
        requests = out
    return scenario, requests, router == "python"


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=routed_cases())
def test_fast_forward_equals_per_pass_stepping_for_every_router(case):
    scenario, requests, python = case
    policy = (lambda: ReadsEverything()) if python else None
    fast = build(scenario, requests, fast_forward=True, record_passes=True, router_policy=policy).run()
    slow = build(scenario, requests, fast_forward=False, record_passes=True, router_policy=policy).run()
    assert fast == slow


def test_a_reservation_reaching_a_fast_forwarded_decode_worker_at_a_pass_end_is_between_passes():
    # Found by the property above: sglang disaggregated, three requests dispatched at 1.8326 s,
    # exactly when a pass of decode worker 0 ends. Stepping, SimPy ends that pass before the
    # dispatch of the same instant, so the reservation arrives between passes (and earns its
    # retry); a fast-forwarded run took it as arriving mid-pass, answered one reservation
    # fewer at that boundary, and rid 20's first token came 244 ms late.
    pool = {"workers": 3, "block_size": 16, "num_gpu_blocks": 1000, "max_num_batched_tokens": 64, "max_num_seqs": 2,
            "backend": "sglang", "async_scheduling": True,
            "sglang": {"max_prefill_tokens": 128, "clip_max_new_tokens": 16, "schedule_conservativeness": 0.3}}
    scenario = scenario_from_dict({
        "workload": {"kind": "synthetic", "trace_block_size": 16},
        "latency": {"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0},
        "pools": {"prefill": pool, "decode": dict(pool, workers=2)}, "link": {"bandwidth_gb_per_s": None}})
    rows = [(0.24372063679906958, 1235, 40, 20), (0.5211381555375028, 304, 15, 5), (0.5211381555375028, 662, 71, 11),
            (1.6826234609466764, 876, 100, 14), (1.8226234609466765, 449, 113, 8), (1.8326234609466765, 379, 34, 6),
            (1.8326234609466765, 26, 90, 1), (1.8326234609466765, 642, 81, 11)]
    requests = [Request(i, at, isl, osl, tuple(range(blocks)), 64) for i, (at, isl, osl, blocks) in enumerate(rows)]
    fast = simulate(scenario, requests, fast_forward=True, record_passes=True)
    slow = simulate(scenario, requests, fast_forward=False, record_passes=True)
    assert fast == slow


def test_runs_cut_at_their_longest_are_equal_to_stepping(monkeypatch):
    """A run stops after MAX_RUN_PASSES passes and the next starts at that pass boundary, as
    stepping reaches it (pass times are kept only for a run under way: memory stays bounded
    for any output length). With the limit at 7 passes, plain and speculative runs."""
    import simkit.cluster.worker as worker

    monkeypatch.setattr(worker, "MAX_RUN_PASSES", 7)
    reqs = [Request(i, 0.05 * i, 300 + 40 * i, 90 + 7 * i, (i,), 512) for i in range(6)]
    for spec in (None, {"num_speculative_tokens": 2, "acceptance_rates": [0.7, 0.5]}):
        s = scenario_from_dict({"latency": {"kind": "polynomial"},
                                "pools": {"aggregated": {"workers": 2, "speculative": spec}}})
        fast = simulate(s, reqs, fast_forward=True, record_passes=True)
        assert fast == simulate(s, reqs, fast_forward=False, record_passes=True)
        assert all(r.status == "completed" for r in fast.requests)


def test_verify_rounds_on_a_worker_whose_kv_a_router_queue_watches_release_held_requests_as_stepping():
    # Found by the routed property (a local run of 12,000 examples): a verify round frees its
    # rejected drafts' blocks, so a pass end in the middle of a run of verify rounds can bring
    # KV use below the router queue's max_kv_usage and release a held request. Stepping, the
    # pass end pokes the router; a fast-forwarded run had no event there, and rid 11 left the
    # router queue 139 ms late. Such runs are now stepped on a watched worker.
    scenario = scenario_from_dict({
        "latency": {"kind": "polynomial", "speedup_ratio": 3.0},
        "pools": {"aggregated": {"workers": 2, "block_size": 64, "num_gpu_blocks": 12, "max_num_seqs": 7,
                                 "enable_prefix_caching": False, "async_scheduling": True,
                                 "speculative": {"method": "mtp", "num_speculative_tokens": 2,
                                                 "acceptance_rates": [0.5, 0.0]}}},
        "router": {"kind": "session_affinity"},
        "router_queue": {"policy": "lcfs", "max_kv_usage": 0.8},
        "planner": {"kind": "sla", "interval_s": 0.3},
        "sla": {"ttft_ms": 400.0, "itl_ms": 60.0}})
    rows = [(0.0, 186, 30, 0, (), 0.0), (0.0, 100, 30, 0, (0,), 0.0), (0.0, 1701, 93, 0, (1,), 0.0),
            (8.4e-41, 825, 0, 0, (2,), 0.0), (8.4e-41, 1281, 93, 4, (), 0.0), (8.4e-41, 16, 45, 4, (4,), 0.01),
            (8.4e-41, 313, 61, 4, (5,), 0.01), (0.48384763669765496, 334, 93, 4, (6,), 0.01),
            (0.48384763669765496, 36, 109, 8, (), 0.0), (0.48384763669765496, 1915, 0, 8, (8,), 0.01),
            (0.48384763669765496, 93, 96, 8, (9,), 0.0), (0.48384763669765496, 1242, 92, 8, (10,), 0.01),
            (0.48384763669765496, 42, 57, 12, (), 0.0), (0.48384763669765496, 501, 95, 12, (12,), 0.0),
            (0.6186572640227067, 2500, 110, 12, (13,), 0.0), (0.6186572640227067, 75, 110, 12, (14,), 0.01),
            (0.6186572640227067, 1337, 93, 16, (), 0.0), (1.0595854353406153, 285, 26, 16, (16,), 0.0)]
    requests = [Request(rid, at, isl, osl, tuple(range(-(-isl // 64))), 64, session=session, deps=deps, delay_s=delay)
                for rid, (at, isl, osl, session, deps, delay) in enumerate(rows)]
    fast = build(scenario, requests, fast_forward=True, record_passes=True).run()
    slow = build(scenario, requests, fast_forward=False, record_passes=True).run()
    assert fast == slow


def test_a_prefix_hit_at_admission_releases_a_request_held_for_prefill_load_as_stepping():
    # Found by the routed property (a local run, 9,450 examples in): admitting rid 12 with one
    # cached block takes its 64 tokens off worker 0's queued prefill at the pass's start,
    # 615 -> 551, below the router queue's 600. Nothing poked the router then: stepping, the
    # next pass end on any worker released rids 14-16 (worker 1's verify round at 0.876061 s);
    # with worker 1's verify rounds fast-forwarded they waited for worker 0's pass end at
    # 0.880825 s. An admission with a prefix hit now pokes the router as a preemption does.
    scenario = scenario_from_dict({
        "latency": {"kind": "polynomial", "speedup_ratio": 3.0},
        "pools": {"aggregated": {"workers": 3, "block_size": 64, "num_gpu_blocks": 40,
                                 "max_num_batched_tokens": 64, "max_num_seqs": 1,
                                 "speculative": {"method": "mtp", "num_speculative_tokens": 1,
                                                 "acceptance_rates": [0.0]}}},
        "router": {"kind": "least_loaded"},
        "router_queue": {"policy": "fcfs", "max_queued_prefill_tokens": 600},
        "planner": {"kind": "threshold", "interval_s": 0.05, "scale_down_delay_s": 0.0,
                    "scale_up_kv_usage": 0.7, "scale_down_kv_usage": 0.2,
                    "scale_up_queued_prefill_tokens": 16384, "scale_down_queued_prefill_tokens": 1024},
        "sla": {"ttft_ms": 400.0, "itl_ms": 60.0}})
    rows = [(0.0, 1, 0), (0.0, 1, 0), (0.0, 1, 0), (0.0, 958, 71), (0.0, 1, 0), (0.0, 1, 0), (0.0, 1, 0),
            (0.0, 1, 0), (0.375, 1, 0), (0.375, 28, 3), (0.375, 1, 0), (0.625, 1, 118), (0.875, 130, 3),
            (0.875, 485, 51), (0.875, 1, 0), (0.875, 1, 0), (0.875, 1, 0)]
    requests = [Request(rid, at, isl, osl, tuple(range(-(-isl // 64))), 64)
                for rid, (at, isl, osl) in enumerate(rows)]
    fast = build(scenario, requests, fast_forward=True, record_passes=True).run()
    slow = build(scenario, requests, fast_forward=False, record_passes=True).run()
    assert fast == slow
    assert [r.dispatched_at for r in fast.requests[14:]] == [r.dispatched_at for r in slow.requests[14:]]


def test_a_message_sent_from_a_later_ranked_boundary_at_a_pass_end_waits_for_the_next_pass_end():
    # Found by the routed property (a local run of 8,000 examples). Worker 0 is in a decode run
    # (passes end at 0.976 and 0.980 s); at 0.976 s worker 1's boundary (rank 1, after worker 0's
    # of that instant) rejects rid 20 (641 tokens > 40 x 16), which releases rid 21 to worker 0.
    # Stepping, worker 0 had already formed its 0.976 s pass, so rid 21 waits in the inbox until
    # worker 0 idles at 0.980 s and is then rejected at once: the 0.980 s routing of rid 14 sees
    # worker 0 free (queued prefill 0 <= 600). The run used to be cut at 0.976 s, deferring rid 21
    # (async scheduling) past the 0.980 s decision, where it still counted 641 > 600 queued.
    scenario = scenario_from_dict({
        "latency": {"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0},
        "pools": {"aggregated": {"workers": 1, "block_size": 16, "num_gpu_blocks": 40, "max_num_batched_tokens": 64,
                                 "max_num_seqs": 3, "enable_prefix_caching": False, "async_scheduling": True}},
        "router": {"kind": "least_loaded"},
        "router_queue": {"policy": "fcfs", "max_queued_prefill_tokens": 600},
        "planner": {"kind": "threshold", "interval_s": 0.05, "scale_down_delay_s": 0.0,
                    "scale_up_kv_usage": 0.7, "scale_down_kv_usage": 0.2,
                    "scale_up_queued_prefill_tokens": 16384, "scale_down_queued_prefill_tokens": 1024},
        "sla": {"ttft_ms": 400.0, "itl_ms": 60.0}})
    rows = [(0.0, 1, 0, (0,), 0, ()),
            (0.0, 1, 0, (0,), 0, (0,)),
            (0.0, 1, 0, (0,), 0, (1,)),
            (0.0, 1, 0, (0,), 0, (2,)),
            (0.0, 1, 0, (0,), 4, ()),
            (0.0, 1, 0, (0,), 4, (4,)),
            (0.0, 1, 0, (0,), 4, (5,)),
            (0.0, 1, 0, (0,), 4, (6,)),
            (0.0, 1, 4, (0,), 8, ()),
            (0.0, 1, 108, (0,), 8, (8,)),
            (0.0, 1, 0, (0,), 8, (9,)),
            (0.0, 1, 102, (0,), 8, (10,)),
            (0.40625, 136, 94, (0, 1, 2), 12, ()),
            (0.40625, 193, 19, (0, 1, 2, 3), 12, (12,)),
            (0.40625, 1, 0, (0,), 12, (13,)),
            (0.71875, 1, 0, (0,), 12, (14,)),
            (0.71875, 641, 0, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 16, ()),
            (0.953125, 106, 51, (0, 1), 16, (16,)),
            (0.953125, 641, 0, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 16, (17,)),
            (0.953125, 641, 0, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 16, (18,)),
            (0.96830844, 641, 0, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 20, ()),
            (0.96830844, 641, 0, (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10), 20, (20,)),
            (0.96830844, 1, 0, (0,), 20, (21,)),
            (0.96830844, 1117, 0, (300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317), 20, (22,)),
            (1.3228564347351497, 121, 117, (300, 301), 24, ()),
            (1.3228564347351497, 1, 0, (200,), 24, (24,))]

    requests = [Request(rid, at, isl, osl, hashes, 64, session=session, deps=deps)
                for rid, (at, isl, osl, hashes, session, deps) in enumerate(rows)]
    fast = build(scenario, requests, fast_forward=True, record_passes=True).run()
    slow = build(scenario, requests, fast_forward=False, record_passes=True).run()
    assert fast == slow
