"""Private prompt blocks (no other request has them) are tracked as counted runs instead of
keys (simkit.engine.kvcache). The cache must behave exactly as when every key is tracked: the same
records, bit for bit, on generated workloads that mix shared prefixes with private tails,
under KV pressure (evictions that split runs, preemptions that release private blocks as keys),
aggregated and disaggregated, on every backend, with block conservation checked at every
instant."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import scenario_from_dict
from simkit.engine.kvcache import KvCache
from simkit.core.request import Request
from simkit.engine.scheduler import private_suffixes
from simkit.sim import build


@st.composite
def cases(draw):
    tbs = 64
    n = draw(st.integers(1, 25))
    reqs, t, fresh = [], 0.0, 10_000
    for rid in range(n):
        if draw(st.booleans()):
            t += draw(st.floats(0, 0.3))
        isl = draw(st.integers(1, 2000))
        blocks = -(-isl // tbs)
        shared = draw(st.integers(0, blocks))  # a family's prefix, then a tail of its own
        family = draw(st.integers(0, 2))
        ids = [family * 100 + j for j in range(shared)] + list(range(fresh, fresh + blocks - shared))
        fresh += blocks - shared
        reqs.append(Request(rid, t, isl, draw(st.integers(0, 80)), tuple(ids), tbs))
    pool = {
        "workers": draw(st.integers(1, 2)),
        "block_size": draw(st.sampled_from([16, 32, 64])),
        "num_gpu_blocks": draw(st.sampled_from([10, 30, 80, 400])),
        "max_num_batched_tokens": draw(st.sampled_from([64, 512, 4096])),
        "max_num_seqs": draw(st.integers(1, 8)),
        "enable_chunked_prefill": draw(st.booleans()),
        "backend": draw(st.sampled_from(["vllm", "vllm", "sglang", "trtllm"])),
    }
    if pool["backend"] == "vllm":
        pool["preemption_mode"] = draw(st.sampled_from(["lifo", "fifo"]))
    data = {"latency": {"kind": "polynomial"}, "max_sim_time_s": draw(st.sampled_from([None, 1.0]))}
    if draw(st.booleans()):
        data["pools"] = {"aggregated": pool}
    else:
        data["pools"] = {"prefill": pool, "decode": dict(pool, workers=draw(st.integers(1, 2)))}
    return scenario_from_dict(data), reqs


def run(scenario, requests, private: bool):
    sim = build(scenario, requests, record_passes=True)
    if not private:
        for workers in sim.pools.values():
            for w in workers:
                w.sched.private_ids = None
    return sim.run(check=True)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=cases())
def test_private_runs_behave_exactly_like_tracked_keys(case):
    scenario, requests = case
    fast, slow = run(scenario, requests, True), run(scenario, requests, False)
    assert fast.stop_reason != "check_failed", fast.stop_detail
    assert fast == slow


def test_private_suffix_of_each_request():
    reqs = [Request(0, 0.0, 300, 1, (1, 2, 3), 128), Request(1, 0.0, 300, 1, (1, 2, 4), 128),
            Request(2, 0.0, 300, 1, (5, 5, 6), 128), Request(3, 0.0, 10, 1, None, 128)]
    # id 3 and 4 are each in one request; 5 twice in one request is not private; 6 is
    assert private_suffixes(reqs, [64]) == [2, 2, 2, 0]
    assert private_suffixes(reqs, [96]) is None  # 96 does not divide the 128-token trace blocks
    assert private_suffixes(reqs + [Request(4, 0.0, 5, 1, (7,), 64)], [64]) is None  # mixed sizes


def test_a_run_is_evicted_block_by_block_in_lru_order():
    kv = KvCache(10)
    kv.allocate(6)  # request A: 2 shared keys, then 4 private blocks
    kv.register_many([1, 2])
    kv.release([1, 2], anon=4, anon_full=4)
    # LRU: [run of 4, key 2, key 1] (the prompt's last blocks first)
    assert kv.free_blocks == 10 and kv.cached_blocks == 6 and kv.used_blocks == 0
    kv.allocate(4 + 3)  # 4 anonymous free blocks, then evict 3 of the run's 4
    assert kv.match([1, 2], 2) == (2, 2) and kv.cached_blocks == 3
    kv.check()
    kv.allocate(2)  # the run's last block, then key 2
    assert kv.match([1, 2], 2) == (1, 1) and list(kv.lru) == [1]
    kv.check()
