"""The serving frontend's time (``dispatch_overhead_ms`` before the router, ``first_token_overhead_ms``
from the engine's tokens to the client) and the TTFT's components.

One request alone on a roofline worker: the engine's timeline does not move, so the client's
TTFT and E2E grow by exactly a + b and ITL not at all; in a closed loop the next request is sent
when the client receives the last token, b after the engine emitted it.
"""

from __future__ import annotations

import random

import pytest

from simkit import override, scenario_from_dict
from simkit.core.request import Request
from simkit.output.report import summarize
from simkit.sim import simulate

BASE = {"latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100", "dispatch_overhead_ms": 0.0,
                    "first_token_overhead_ms": 0.0},
        "pools": {"aggregated": {"workers": 1}}}


def test_one_request_alone_grows_by_the_frontend_times_and_its_itl_does_not():
    requests = [Request(0, 0.0, 500, 8)]
    plain = simulate(scenario_from_dict(BASE), requests).requests[0]
    framed = simulate(override(scenario_from_dict(BASE), {"latency.dispatch_overhead_ms": 20.0,
                                                          "latency.first_token_overhead_ms": 5.0}), requests).requests[0]
    assert framed.ttft_s == pytest.approx(plain.ttft_s + 0.025, abs=1e-12)
    assert framed.e2e_s == pytest.approx(plain.e2e_s + 0.025, abs=1e-12)
    assert framed.itl_s == pytest.approx(plain.itl_s, abs=1e-12)
    assert framed.router_queue_s == pytest.approx(0.0, abs=1e-12)  # the frontend time is its own part
    parts = framed.ttft_components
    assert parts["frontend"] == 0.020 and parts["first_token_overhead"] == 0.005
    assert parts["transfer"] is None and parts["first_decode"] is None  # aggregated
    assert sum(v for v in parts.values() if v is not None) == pytest.approx(framed.ttft_s, abs=1e-12)
    assert parts["prefill"] == pytest.approx(plain.ttft_s, abs=1e-12)  # the engine's own first token


def test_a_closed_loop_sends_the_next_request_when_the_client_has_the_last_token():
    data = dict(BASE, workload={"kind": "trace", "path": "unused.jsonl", "max_in_flight": 1})
    scenario = override(scenario_from_dict(data, source="t"), {"latency.first_token_overhead_ms": 7.0})
    a, b = simulate(scenario, [Request(0, 0.0, 300, 4), Request(1, 0.0, 300, 4)]).requests
    # rid 1 is released at the instant rid 0's last token reaches the client (7 ms after the engine)
    assert b.arrived_at == pytest.approx(a.last_token_at, abs=1e-12)
    assert a.ttft_components["first_token_overhead"] == 0.007


def test_the_summary_splits_ttft_into_parts_whose_shares_sum_to_one():
    disagg = {"latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100", "dispatch_overhead_ms": 3.0,
                          "first_token_overhead_ms": 2.0},
              "pools": {"prefill": {"workers": 1}, "decode": {"workers": 1}},
              "link": {"bandwidth_gb_per_s": 25.0}}
    requests = [Request(i, i * 0.01, 800, 6) for i in range(6)]
    records = simulate(scenario_from_dict(disagg), requests)
    parts = summarize(records)["ttft_components"]
    assert list(parts) == ["frontend", "router_queue", "engine_queue", "prefill", "transfer", "decode_queue",
                           "first_decode", "first_token_overhead"]
    assert parts["frontend"]["mean"] == pytest.approx(3.0) and parts["first_token_overhead"]["p99"] == pytest.approx(2.0)
    assert sum(p["share"] for p in parts.values()) == pytest.approx(1.0, abs=1e-9)
    assert parts["transfer"]["mean"] > 0  # 800 tokens of KV at 25 GB/s
    # the summary's columns and each request's own parts are one definition, computed two ways
    for name, stats in parts.items():
        mine = [r.ttft_components[name] for r in records.requests]
        assert stats["mean"] == pytest.approx(1e3 * sum(mine) / len(mine), rel=1e-9, abs=1e-9)


def test_models_without_a_frontend_fit_add_nothing():
    """The polynomial model (the reference's) has no frontend: its runs are as before."""
    records = simulate(scenario_from_dict({"pools": {"aggregated": {}}}), [Request(0, 0.0, 100, 3)])
    r = records.requests[0]
    assert r.frontend_s == 0.0 and r.first_token_overhead_s == 0.0
    assert r.ttft_components["prefill"] == r.ttft_s


def test_a_drawn_client_delay_breaks_a_burst_of_identical_clients_and_replays_for_a_seed():
    """8 identical requests at time 0: without jitter they reach the router together; with
    dispatch_jitter_ms 40, each waits its own draw in [0, 40) ms (by request id), recorded as
    its frontend time, and a second run draws the same."""
    requests = [Request(i, 0.0, 400, 4) for i in range(8)]
    jittered = override(scenario_from_dict(BASE), {"latency.dispatch_jitter_ms": 40.0})
    first = simulate(jittered, requests).requests
    again = simulate(jittered, requests).requests
    delays = [r.frontend_s for r in first]
    assert delays == [r.frontend_s for r in again]
    assert len(set(delays)) == 8 and all(0.0 <= d < 0.040 for d in delays)
    assert delays[3] == random.Random("0/frontend/3").random() * 0.040  # the scenario's seed 0, rid 3
    assert all(r.dispatched_at >= r.arrived_at + r.frontend_s for r in first)
    other_seed = simulate(override(jittered, {"seed": 1}), requests).requests
    assert [r.frontend_s for r in other_seed] != delays


def test_a_host_output_limit_sets_a_floor_on_each_pass_and_is_off_by_default():
    from simkit.engine.latency.roofline import RooflineModel
    from simkit.spec import RooflineLatency

    free = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100"))
    capped = RooflineModel(RooflineLatency(model="Llama-3.1-8B", gpu="H100", host_output_tokens_per_s=1000.0))
    # 64 decode requests sample 64 tokens: at most 1000 tokens/s, so at least 64 ms
    assert free.pass_time_s(0, 64, 64 * 500) < 0.064
    assert capped.pass_time_s(0, 64, 64 * 500) == 0.064
    # a prefill pass samples one token (its last prompt token's): 1 ms at least, below its compute
    assert capped.pass_time_s(2048, 0, 0) == free.pass_time_s(2048, 0, 0)
