"""Routing policies: exact choices on hand-built states, seeded tie-breaks, and end to end."""

from __future__ import annotations

import random

import pytest

from simkit.config import KvAwareRouter, LeastLoadedRouter, SessionAffinityRouter, override
from simkit.router import KvAware, LeastLoaded, SessionAffinity
from simkit.sim import simulate

from conftest import req, scenario


class FakeWorker:
    def __init__(self, wid, blocks, queued, cached):
        self.wid, self.kv_blocks_in_use, self.queued_prefill_tokens, self._cached = wid, blocks, queued, cached

    def cached_prompt_blocks(self, request):
        return self._cached, 10


def test_least_loaded_orders_by_kv_then_queue_then_index():
    ws = [FakeWorker(0, 50, 0, 0), FakeWorker(1, 20, 900, 0), FakeWorker(2, 20, 100, 0), FakeWorker(3, 20, 100, 0)]
    assert LeastLoaded(LeastLoadedRouter(), random.Random(0)).pick(None, ws).wid == 2


def test_kv_aware_cost_and_seeded_ties():
    # cost = 1.0 * (10 - cached) + blocks: w0 10 + 5 = 15, w1 2 + 12 = 14, w2 0 + 30 = 30
    ws = [FakeWorker(0, 5, 0, 0), FakeWorker(1, 12, 0, 8), FakeWorker(2, 30, 0, 10)]
    policy = KvAware(KvAwareRouter(overlap_weight=1.0), random.Random(0))
    assert policy.costs(None, ws) == [15.0, 14.0, 30.0]
    assert policy.pick(None, ws).wid == 1
    # with overlap_weight 3 the cached worker wins despite its load: 35, 18, 30
    assert KvAware(KvAwareRouter(overlap_weight=3.0), random.Random(0)).pick(None, ws).wid == 1
    tied = [FakeWorker(i, 10, 0, 0) for i in range(4)]
    picks = [KvAware(KvAwareRouter(), random.Random(7)).pick(None, tied).wid for _ in range(3)]
    assert picks == [KvAware(KvAwareRouter(), random.Random(7)).pick(None, tied).wid] * 3  # replayable


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
