"""Routing policies: exact choices on hand-built states, seeded tie-breaks, and end to end."""

from __future__ import annotations

import random

import pytest

from simkit import override, scenario_from_dict
from simkit.spec import LeastLoadedRouter, SessionAffinityRouter
from simkit.cluster.router import LeastLoaded, SessionAffinity
from simkit.sim import simulate

from conftest import P, req, scenario


class FakeWorker:
    def __init__(self, wid, blocks, queued, cached):
        self.wid, self.kv_blocks_in_use, self.queued_prefill_tokens, self._cached = wid, blocks, queued, cached

    def cached_prompt_blocks(self, request):
        return self._cached, 10


def test_least_loaded_orders_by_kv_then_queue_then_index():
    ws = [FakeWorker(0, 50, 0, 0), FakeWorker(1, 20, 900, 0), FakeWorker(2, 20, 100, 0), FakeWorker(3, 20, 100, 0)]
    assert LeastLoaded(LeastLoadedRouter(), random.Random(0)).pick(None, ws).wid == 2


def test_session_affinity_sticks_to_the_first_workers_choice():
    policy = SessionAffinity(SessionAffinityRouter(), random.Random(0))
    ws = [FakeWorker(0, 9, 0, 0), FakeWorker(1, 3, 0, 0)]
    first = policy.pick(type("R", (), {"session": 5})(), ws)
    ws[1].kv_blocks_in_use = 99  # now busier, but the session stays
    assert first.wid == 1 and policy.pick(type("R", (), {"session": 5})(), ws).wid == 1
    assert policy.pick(type("R", (), {"session": 6})(), ws).wid == 0


def test_kv_aware_routing_raises_prefix_hits_end_to_end():
    # 3 prompt families, 32 requests, 4 workers: round robin scatters each family; KV-aware
    # sends a family back to the worker that caches it
    reqs = [req(i, 40 * i, 2048, 8, [100 * (i % 3) + j for j in range(4)]) for i in range(32)]
    base = scenario(workers=4)
    rr = simulate(base, reqs)
    kv = simulate(override(base, {"router": {"kind": "kv_aware", "overlap_weight": 1.0}}), reqs)
    assert kv.prompt_hit_tokens > rr.prompt_hit_tokens
    again = simulate(override(base, {"router": {"kind": "kv_aware", "temperature": 0.5}}), reqs)
    assert again == simulate(override(base, {"router": {"kind": "kv_aware", "temperature": 0.5}}), reqs)


@pytest.mark.parametrize("kind", ["least_loaded", "kv_aware", "session_affinity"])
def test_every_policy_runs_disaggregated_and_conserves(kind):
    s = override(scenario(mode="disaggregated", workers=2, decode_workers=3), {"router": {"kind": kind}})
    reqs = [req(i, 7 * i, 900 + 37 * i, 12, [i % 3, 50 + i]) for i in range(24)]
    records = simulate(s, reqs, check=True)
    assert records.stop_reason == "completed"
    assert all(r.status == "completed" for r in records.requests)


def test_router_queue_holds_requests_while_every_worker_is_busy():
    # one worker, busy once more than 1,000 prefill tokens are queued: r0 (5,000 tokens) goes at
    # once; r1 and r2 arrive at 1 and 2 ms and wait in the router until r0's prompt is computed
    # (the worker is not busy again until its 5,000 queued tokens are computed)
    reqs = [req(0, 0, 5000, 2), req(1, 1, 300, 2), req(2, 2, 200, 2)]
    base = scenario()
    free = simulate(base, reqs).requests
    assert [r.router_queue_s for r in free] == [0.0, 0.0, 0.0]
    held = simulate(override(base, {"router_queue": {"max_queued_prefill_tokens": 1000}}), reqs, check=True)
    r0, r1, r2 = held.requests
    assert r0.router_queue_s == 0.0
    # both wait until r0's single 5,000-token pass ends at P(5000)
    assert r1.dispatched_at == r2.dispatched_at == pytest.approx(P(5000) / 1000, rel=1e-12)
    # lcfs sends the newest first: with a one-slot worker (max_num_seqs 1) r2 is served before r1
    lcfs = simulate(override(scenario(max_num_seqs=1), {"router_queue": {"max_queued_prefill_tokens": 1000,
                                                                         "policy": "lcfs"}}), reqs).requests
    assert lcfs[2].first_token_at < lcfs[1].first_token_at
    wspt = simulate(override(scenario(max_num_seqs=1), {"router_queue": {"max_queued_prefill_tokens": 1000,
                                                                         "policy": "wspt"}}), reqs).requests
    assert wspt[2].first_token_at < wspt[1].first_token_at  # 200 + 2 tokens of work before 300 + 2


def test_router_queue_kv_threshold_and_summary(tmp_path):
    from simkit.output.report import summarize

    # 47 blocks per request on 200-block workers: a worker with three admitted (141 > 100 blocks)
    # is busy, so the 7th and 8th requests wait in the router until one finishes
    reqs = [req(i, 100 * i, 3000, 80, [i, 100 + i, 200 + i, 300 + i, 400 + i, 500 + i]) for i in range(8)]
    s = override(scenario(workers=2, num_gpu_blocks=200), {"router_queue": {"max_kv_usage": 0.5}})
    records = simulate(s, reqs, check=True)
    assert records.stop_reason == "completed"
    assert [r.router_queue_s > 0 for r in records.requests] == [False] * 6 + [True] * 2
    summary = summarize(records)
    assert summary["router_queue_ms"]["p90"] > 0 and summary["router_queue_ms"]["p50"] == 0


def test_wspt_weighs_expected_work_by_priority():
    # one slot (max_num_seqs 1), busy past 1,000 queued prompt tokens: r0 runs, r1 (302 tokens
    # of work, priority 1) and r2 (2,002 tokens, priority 10: 200.2 per unit) wait; wspt sends
    # r2 first (200.2 < 302); with equal priorities r1 would go first (302 < 2,002)
    from simkit.core.request import Request

    def with_priority(r, p):
        return Request(r.rid, r.arrived_at, r.input_length, r.output_length, r.hash_ids, r.hash_block_size,
                       priority=p)

    reqs = [req(0, 0, 5000, 2), with_priority(req(1, 1, 300, 2), 1.0), with_priority(req(2, 2, 2000, 2), 10.0)]
    s = override(scenario(max_num_seqs=1), {"router_queue": {"max_queued_prefill_tokens": 1000, "policy": "wspt"}})
    r = simulate(s, reqs).requests
    assert r[2].first_token_at < r[1].first_token_at
    assert (r[1].priority, r[2].priority) == (1.0, 10.0)
    equal = simulate(s, [reqs[0], reqs[1], with_priority(reqs[2], 1.0)]).requests
    assert equal[1].first_token_at < equal[2].first_token_at


def test_priorities_from_traces_and_synthetic_workloads(tmp_path):
    from simkit import scenario_from_dict
    from simkit.spec import TraceWorkload
    from simkit.workload import TraceError, load_trace, synthesize

    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "priority": 3}\n'
                    '{"timestamp": 5, "input_length": 10, "output_length": 2}\n')
    assert [r.priority for r in load_trace(TraceWorkload(path=str(path)))] == [3.0, 1.0]
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2, "priority": 0}\n')
    with pytest.raises(TraceError, match="t.jsonl:1: field 'priority' is 0; expected a number > 0"):
        load_trace(TraceWorkload(path=str(path)))
    s = scenario_from_dict({"pools": {"aggregated": {}}, "workload": {
        "kind": "synthetic", "num_requests": 2000, "priorities": [{"value": 1, "share": 3}, {"value": 5, "share": 1}]}})
    prios = [r.priority for r in synthesize(s.workload, 0)]
    assert set(prios) == {1.0, 5.0} and 0.2 < prios.count(5.0) / 2000 < 0.3
    # other streams are untouched: same arrivals and lengths as without priorities
    plain = scenario_from_dict({"pools": {"aggregated": {}}, "workload": {"kind": "synthetic", "num_requests": 2000}})
    assert [(r.arrived_at, r.input_length) for r in synthesize(plain.workload, 0)] == [
        (r.arrived_at, r.input_length) for r in synthesize(s.workload, 0)]


def test_a_request_held_for_kv_room_goes_when_a_prefill_worker_frees_kv_after_the_handoff():
    # found by a hostile walk: disaggregated, a prefill worker's KV is freed when the decode
    # side takes it in, after the pass that computed it; the router queue was woken only at
    # pass ends, so requests held for KV room stayed held once the prefill worker idled
    # (40 requests: 18 completed, 22 stranded, the run "stuck")
    data = {"workload": {"kind": "synthetic", "num_requests": 40, "arrival": {"kind": "poisson", "rate_per_s": 20},
                         "input_tokens": {"kind": "lognormal", "mean": 2000, "sigma": 0.6, "min": 32, "max": 8000},
                         "output_tokens": {"kind": "uniform", "low": 20, "high": 200}},
            "pools": {"prefill": {"workers": 1, "num_gpu_blocks": 2000}, "decode": {"workers": 1}},
            "link": {"bandwidth_gb_per_s": 0.5, "channels": 1}, "router_queue": {"max_kv_usage": 0.2}}
    records = simulate(scenario_from_dict(data), record_token_times=False)
    assert records.stop_reason == "completed"
    assert [r.status for r in records.requests] == ["completed"] * 40
