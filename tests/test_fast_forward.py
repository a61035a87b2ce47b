"""Fast-forwarded decode runs give exactly the records of pass-by-pass stepping.

Generated scenarios cover aggregated and disaggregated pools, prefix caching, chunked prefill,
KV pressure with preemption, handoff links with delays, bursts of simultaneous arrivals and
time caps. Equality is on the whole ``RunRecords``: every timestamp of every token, bit for bit.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit.config import scenario_from_dict
from simkit.request import Request
from simkit.sim import simulate


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
                          "enable_mixed_chunk": draw(st.booleans()) and pool["enable_chunked_prefill"]}
    if backend == "trtllm" and draw(st.booleans()):
        pool["trtllm"] = {"batch_wait_timeout_iters": draw(st.integers(0, 5)),
                          "batch_wait_max_tokens_ratio": draw(st.sampled_from([0.0, 0.1, 0.9]))}
    latency = draw(st.sampled_from([
        {"kind": "polynomial"},
        {"kind": "polynomial", "speedup_ratio": 3.0},
        {"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0},
    ]))
    data = {"latency": latency,
            "max_sim_time_s": draw(st.sampled_from([None, None, 0.5, 2.0]))}
    if draw(st.booleans()):
        data["pools"] = {"aggregated": pool}
    else:
        data["pools"] = {"prefill": pool, "decode": dict(pool, workers=draw(st.integers(1, 3)))}
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
