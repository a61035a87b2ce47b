"""Invariants on many generated runs: every request ends exactly once, KV blocks are conserved
and never exceed ``num_gpu_blocks`` at any pass, tokens never exceed the requested output."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit.config import scenario_from_dict
from simkit.request import Request
from simkit.sim import build


@st.composite
def workloads(draw):
    n = draw(st.integers(1, 25))
    tbs = 64
    reqs = []
    t = 0.0
    for rid in range(n):
        t += draw(st.floats(0, 0.2))
        isl = draw(st.integers(1, 3000))
        osl = draw(st.integers(0, 60))
        # prompts drawn from a small pool of prefixes so that prefix caching is in play
        family = draw(st.integers(0, 3))
        n_blocks = -(-isl // tbs)
        ids = tuple(family * 100 + j for j in range(n_blocks))
        reqs.append(Request(rid, t, isl, osl, ids, tbs))
    return reqs


@st.composite
def scenarios(draw):
    pool = {
        "workers": draw(st.integers(1, 3)),
        "block_size": draw(st.sampled_from([16, 64])),
        "num_gpu_blocks": draw(st.integers(8, 300)),
        "max_num_batched_tokens": draw(st.sampled_from([256, 2048, 8192])),
        "max_num_seqs": draw(st.integers(1, 8)),
        "enable_prefix_caching": draw(st.booleans()),
        "enable_chunked_prefill": draw(st.booleans()),
    }
    if draw(st.booleans()):
        data = {"pools": {"aggregated": pool}}
    else:
        data = {"pools": {"prefill": pool, "decode": dict(pool, workers=draw(st.integers(1, 3)))},
                "link": {"bandwidth_gb_per_s": draw(st.sampled_from([None, 5.0])),
                         "latency_ms": draw(st.sampled_from([0.0, 2.0]))}}
    return scenario_from_dict(data)


def _check_every_pass(sched) -> None:
    """Wrap one worker's scheduler so block conservation is asserted around every pass."""
    schedule, complete = sched.schedule, sched.complete

    def checked_schedule():
        batch = schedule()
        sched.kv.check()
        assert sched.kv.used_blocks <= sched.kv.capacity
        return batch

    def checked_complete(batch):
        out = complete(batch)
        sched.kv.check()
        return out

    sched.schedule, sched.complete = checked_schedule, checked_complete


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios(), requests=workloads())
def test_every_request_ends_exactly_once_and_kv_is_conserved(scenario, requests):
    sim = build(scenario, requests)
    workers = [w for ws in sim.pools.values() for w in ws]
    for w in workers:
        _check_every_pass(w.sched)
    records = sim.run()
    assert [r.rid for r in records.requests] == list(range(len(requests)))
    for rec, req in zip(records.requests, requests):
        assert rec.status in ("completed", "rejected")  # no cap: nothing left incomplete
        assert rec.output_length <= req.output_length
        if rec.status == "completed":
            assert rec.output_length == req.output_length
            assert rec.finished_at >= rec.arrived_at
            if req.output_length:
                assert rec.arrived_at <= rec.first_token_at <= rec.last_token_at == rec.finished_at
    # after the run every worker holds no blocks (all requests ended; handoffs released)
    for w in workers:
        assert w.sched.kv.used_blocks == 0 and not w.sched.held and not w.sched.running
