"""KV-aware routing against the reference's measured costs (ai-dynamo-runtime 1.6.1).

Each case below was run on the reference with ``DYN_LOG=info``, whose KV router logs the cost
(``logit``) of the worker it picks; the expected values are those logged costs, derived term by
term in the comments (``bs`` = block size 64, costs in blocks). simkit's policy records its own
decisions (``KvAware.decisions``) and must give the same costs. The reference breaks ties at
random, so the picked worker's *label* may differ there; the costs of the picks do not.
"""

from __future__ import annotations

import random

import pytest

from simkit import scenario_from_dict
from simkit.cluster.kv_router import KvAware, leading_runs
from simkit.core.request import Request
from simkit.sim import build, simulate


def R(rid, at_ms, isl, osl, ids):
    """A request with 64-token trace blocks (``ids``) arriving at ``at_ms``."""
    return Request(rid, at_ms / 1000.0, isl, osl, tuple(ids), 64)


def route(reqs, mode="aggregated", workers=2, decode_workers=2, router=None, seed=0, **pool):
    """Run ``reqs`` KV-aware on the reference's engine (polynomial latency, 64-token blocks);
    returns (records, prompt-pool decisions, decode-pool decisions)."""
    engine = dict({"block_size": 64, "num_gpu_blocks": 16384}, **pool)
    if mode == "aggregated":
        pools = {"aggregated": dict(engine, workers=workers)}
    else:
        pools = {"prefill": dict(engine, workers=workers), "decode": dict(engine, workers=decode_workers)}
    data = {"seed": seed, "pools": pools, "router": dict({"kind": "kv_aware"}, **(router or {})),
            "latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True}}
    if mode != "aggregated":
        data["link"] = {"bandwidth_gb_per_s": None, "sharing": "uncontended"}
    sim = build(scenario_from_dict(data), reqs)
    sim.router.entry_policy.decisions = []
    sim.router.decode_policy.decisions = []
    records = sim.run(check=True)
    return records, sim.router.entry_policy.decisions, sim.router.decode_policy.decisions


def costs(decisions):
    """The chosen workers' costs, by request id (a pool decides in time order)."""
    return [cost for _, _, cost, _ in sorted(decisions, key=lambda d: d[0])]


def test_default_cost_counts_queued_prefill_new_blocks_and_shared_active_blocks_once():
    # r0: 256 tokens, 4 blocks [1,2,3,4] on an idle cluster: prefill 256/64 = 4 + active blocks
    # 4 (its own) = 8. r1 (same instant): 200 tokens, 3 full blocks [1,2,3] + 8 tokens. On r0's
    # worker: prefill (256 + 200)/64 = 7.125 (r0 counts at once, before any pass) + active 4
    # (its blocks 1-3 are r0's: counted once) = 11.125; on the other: 3.125 + 3 = 6.125, picked.
    # r2 at 10 ms, 300 tokens [1,2,3,5,6] (4 full blocks): r1's blocks are not announced yet (its
    # pass ends at 19.55 ms), so no overlap: on r1's worker (200 + 300)/64 = 7.8125 + active 3
    # + its block 4 = 11.8125, picked (r0's: (256 + 300)/64 + 4 + 1 = 13.6875)
    records, entry, _ = route([R(0, 0, 256, 5, [1, 2, 3, 4]), R(1, 0, 200, 6, [1, 2, 3, 5]),
                               R(2, 10, 300, 6, [1, 2, 3, 5, 6])])
    assert costs(entry) == [8.0, 6.125, 11.8125]
    assert entry[1][3][records.requests[0].decode_worker] == 11.125
    assert records.requests[2].decode_worker == records.requests[1].decode_worker
    assert records.requests[2].cached_tokens == 192  # it does hit r1's 3 blocks once admitted


def test_blocks_are_announced_at_the_end_of_their_pass_and_prefill_leaves_the_queue_there():
    # r0's prefill (one pass, P(256) = 20.416 ms) stores blocks 1-4 and ends its prompt at its
    # end. r1 [1,2,3,9] arriving exactly then is routed after that pass end (the reference
    # applies completions before routing): on r0's worker (0 + 256)/64 - 3 cached = 1 + active
    # 4 + its block 9 = 5 -> 6; elsewhere 4 + 4 = 8
    first = simulate(scenario_from_dict({"pools": {"aggregated": {"block_size": 64}}}),
                     [R(0, 0, 256, 50, [1, 2, 3, 4])]).requests[0].first_token_at
    records, entry, _ = route([R(0, 0, 256, 50, [1, 2, 3, 4]), Request(1, first, 256, 5, (1, 2, 3, 9), 64)])
    assert costs(entry) == [8.0, 6.0]
    assert records.requests[1].decode_worker == records.requests[0].decode_worker
    # 30 ms later than the prompt's end: the same
    _, entry, _ = route([R(0, 0, 256, 50, [1, 2, 3, 4]), R(1, 30, 256, 5, [1, 2, 3, 9])])
    assert costs(entry) == [8.0, 6.0]


def test_chunked_prefill_announces_each_chunk_at_its_pass_end():
    # budget 256: r0 (1,024 tokens) prefills in 4 passes of 20.4 ms on one worker, a 60-block
    # decoding request fills the other. At 30 ms r0's first chunk (blocks 1-4) is announced, its
    # prompt not done: r2 [1..8] costs (1024 + 512)/64 - 4 = 20 + active 16 (its 8 blocks are
    # r0's) = 36 there, picked (the reference logged 36.0 with 4 cached blocks)
    big = R(0, 0, 3840, 3000, range(200, 260))
    records, entry, _ = route([big, R(1, 0, 1024, 50, range(1, 17)), R(2, 30, 512, 5, range(1, 9))],
                              max_num_batched_tokens=256)
    assert costs(entry) == [120.0, 32.0, 36.0]


def test_queued_prefill_counts_the_uncached_prompt_at_routing():
    # r0 (50 blocks, decoding) on one worker, r1 [1..16] on the other. r2 [1..17] at 400 ms hits
    # r1's 16 blocks: (0 + 1088)/64 - 16 = 1 + 16 + 1 = 18, and queues 1088 - 1024 = 64 tokens.
    # r3 (10 unique blocks) at 401 ms while r2 prefills: (64 + 640)/64 = 11 + 17 + 10 = 38 there,
    # against 10 + 50 + 10 = 70 beside r0
    _, entry, _ = route([R(0, 0, 3200, 2000, range(200, 250)), R(1, 0, 1024, 2000, range(1, 17)),
                         R(2, 400, 1088, 5, range(1, 18)), R(3, 401, 640, 5, range(300, 310))])
    assert costs(entry) == [100.0, 32.0, 18.0, 38.0]


def test_a_request_ending_now_has_left_the_router_state_before_routing():
    # r0 (2 output tokens) ends at 26.169 ms on worker X; r2 arriving exactly then finds X empty:
    # 128/64 = 2 + 2 blocks = 4 (beside r1's 3 active blocks it would be 7)
    end = simulate(scenario_from_dict({"pools": {"aggregated": {"block_size": 64}}}),
                   [R(0, 0, 256, 2, [1, 2, 3, 4])]).requests[0].finished_at
    records, entry, _ = route([R(0, 0, 256, 2, [1, 2, 3, 4]), R(1, 0, 192, 100, [11, 12, 13]),
                               Request(2, end, 128, 5, (21, 22), 64)])
    assert costs(entry) == [8.0, 6.0, 4.0]
    assert records.requests[2].decode_worker == records.requests[0].decode_worker


@pytest.mark.parametrize("router, expected", [
    ({}, [8.0, 6.0]),
    # prefill term x 2: 2 * 4 + 4 = 12; 2 * (4 - 3) + 5 = 7
    ({"prefill_load_scale": 2.0}, [12.0, 7.0]),
    ({"overlap_score_weight": 2.0}, [12.0, 7.0]),  # Dynamo's deprecated alias of prefill_load_scale
    ({"overlap_weight": 2.0}, [12.0, 7.0]),  # simkit's old name, an alias too
    # 0 also zeroes the cache credit: 0 + 4 = 4; r1: 0 + (4 + 1) = 5 there, 0 + 4 elsewhere
    ({"overlap_score_weight": 0.0}, [4.0, 4.0]),
    ({"overlap_score_credit": 0.5}, [8.0, 7.5]),  # (4 - 0.5 * 3) + 5
    # 10 per request not done: r1 goes to the empty worker, 4 + 4
    ({"decode_active_request_weight": 10.0}, [8.0, 8.0]),
    ({"router_track_prefill_tokens": False}, [4.0, 4.0]),  # the whole prefill term goes
    ({"router_track_active_blocks": False}, [4.0, 1.0]),  # the decode-blocks term goes
    ({"router_assume_kv_reuse": False}, [8.0, 8.0]),  # no sharing: 1 + 4 + 4 = 9 there, 8 elsewhere
])
def test_each_knob_as_the_reference_measured(router, expected):
    _, entry, _ = route([R(0, 0, 256, 50, [1, 2, 3, 4]), R(1, 30, 256, 5, [1, 2, 3, 9])], router=router)
    assert costs(entry) == expected


def test_overlap_credit_decay_divides_by_the_prompt_blocks_rounded_up():
    # r0 (100 blocks) on one worker; r1 [1..40] on the other; r2 (40 unique blocks) joins r1 at
    # 200 ms and queues 2,560 tokens; r3 at 201 ms [1..40, 700] (41 blocks): raw prefill
    # (2560 + 2624)/64 = 81, excess queued 40 blocks, normalised by 41 -> credit 1/(1 + d 40/41);
    # cost 81 - 40 credit + active 80 + 1. The reference logged 122.0 (d = 0), 141.7530864197531
    # (d = 1) and 151.8136645962733 (d = 3); a 2,600-token r3 (40.625 blocks, 41 rounded up)
    # 140.3780864197531
    reqs = [R(0, 0, 6400, 3000, range(500, 600)), R(1, 0, 2560, 1000, range(1, 41)),
            R(2, 200, 2560, 1000, range(100, 140)), R(3, 201, 2624, 5, list(range(1, 41)) + [700])]
    for decay, expected in ((0.0, 122.0), (1.0, 141.7530864197531), (3.0, 151.8136645962733)):
        _, entry, _ = route(reqs, router={"overlap_score_credit_decay": decay})
        assert costs(entry)[3] == pytest.approx(expected, abs=1e-12)
    reqs[3] = R(3, 201, 2600, 5, list(range(1, 41)) + [700])
    _, entry, _ = route(reqs, router={"overlap_score_credit_decay": 1.0})
    assert costs(entry)[3] == pytest.approx(140.3780864197531, abs=1e-12)


def test_disaggregated_costs_prefill_and_decode_pools_apart():
    # prefill pool: the prefill term only (4; 3.125; r2 hits 3 blocks: 300/64 - 3 = 1.6875;
    # r3: 640/64 = 10). Decode pool: every request's full blocks apart, no sharing: 4; 3
    # (empty worker); r2 where r1's 3 blocks are: 3 + 4 = 7; r3 beside r0: 4 + 10 = 14
    reqs = [R(0, 0, 256, 50, [1, 2, 3, 4]), R(1, 0, 200, 60, [1, 2, 3, 5]), R(2, 40, 300, 6, [1, 2, 3, 5, 6]),
            R(3, 41, 640, 6, range(20, 30))]
    _, entry, decode = route(reqs, mode="disaggregated")
    assert costs(entry) == [4.0, 3.125, 1.6875, 10.0]
    assert costs(decode) == [4.0, 3.0, 7.0, 14.0]
    # decode_active_request_weight 10 on both pools: the decode picks add 10 per request there
    _, entry, decode = route(reqs, mode="disaggregated", router={"decode_active_request_weight": 10.0})
    assert costs(decode) == [4.0, 3.0, 17.0, 24.0]


def test_a_prefill_worker_counts_a_request_until_it_frees_its_kv():
    # r0 [1..40] prefilled; r1 [1..50] hits its 40 blocks and queues 640 tokens; r2 [1..40, 901]
    # while r1 prefills: (640 + 2624)/64 - 40 = 11, + 10 for r1 not yet released (the reference
    # logged 11.0 and, with the weight, 21.0)
    reqs = [R(0, 0, 2560, 50, range(1, 41)), R(1, 100, 3200, 50, range(1, 51)), R(2, 101, 2624, 5, list(range(1, 41)) + [901])]
    _, entry, _ = route(reqs, mode="disaggregated")
    assert costs(entry) == [40.0, 10.0, 11.0]
    _, entry, _ = route(reqs, mode="disaggregated", router={"decode_active_request_weight": 10.0})
    assert costs(entry)[2] == 21.0


def test_a_burst_in_one_instant_spreads_over_the_workers():
    # the newcomer's report: every request of a same-millisecond burst went to one worker.
    # Each one routed counts at once: 8 identical unrelated prompts go 2 per worker
    reqs = [R(i, 0, 1024, 20, range(100 * i, 100 * i + 16)) for i in range(8)]
    records, entry, _ = route(reqs, workers=4)
    per_worker = sorted([r.decode_worker for r in records.requests].count(w) for w in range(4))
    assert per_worker == [2, 2, 2, 2]


def test_ties_are_broken_by_the_seeded_stream():
    reqs = [R(i, 0, 640, 5, range(100 * i, 100 * i + 10)) for i in range(6)]
    picks = {seed: [r.decode_worker for r in route(reqs, workers=3, seed=seed)[0].requests] for seed in range(6)}
    assert picks[0] == [r.decode_worker for r in route(reqs, workers=3, seed=0)[0].requests]  # replays
    assert len({tuple(p) for p in picks.values()}) > 1  # and the seed decides the ties
    # every tie broken: two requests per worker whatever the seed
    assert all(sorted(p.count(w) for w in range(3)) == [2, 2, 2] for p in picks.values())


def test_temperature_draws_by_the_normalised_softmax():
    # costs 0, 5, 10 at temperature 1: weights exp(0), exp(-0.5), exp(-1) over the range 10
    policy = KvAware(scenario_from_dict({"pools": {"aggregated": {}}, "router": {
        "kind": "kv_aware", "router_temperature": 1.0}}).router, random.Random(3))
    picks = [policy._choose([0.0, 5.0, 10.0]) for _ in range(20000)]
    total = 1 + 2.718281828459045 ** -0.5 + 2.718281828459045 ** -1
    for index, weight in enumerate((1.0, 2.718281828459045 ** -0.5, 2.718281828459045 ** -1)):
        assert picks.count(index) / 20000 == pytest.approx(weight / total, abs=0.015)
    assert {policy._choose([2.0, 2.0]) for _ in range(200)} == {0, 1}  # equal costs: uniform


def test_leading_runs_finds_each_workers_prefix_with_one_pass():
    index = {10: 0b111, 11: 0b011, 12: 0b001, 13: 0b101}
    assert leading_runs([10, 11, 12, 13], index, 0b1111) == {3: 0, 2: 1, 1: 2, 0: 4}
    assert leading_runs([99], index, 0b11) == {0: 0, 1: 0}


def test_kv_events_reach_the_router_after_the_lag():
    # r0 (8 full blocks, decoding for ~3 s) on one of two workers; its blocks are announced at
    # its pass end, P(513) = 24.4 ms, and with a 2 s lag the router hears of them at 2.0244 s.
    # r1 (same prompt) at 2.02 s is routed blind: 513/64 = 8.015625 + 8 active blocks on r0's
    # worker (shared with r0: counted once) or on the empty one: a tie at 16.015625. r2 at
    # 2.1 s knows r0's blocks: 8.015625 - 8 + 8 = 8.015625 on r0's worker
    reqs = [R(0, 0, 513, 500, range(8)), R(1, 2020, 513, 2, range(8)), R(2, 2100, 513, 2, range(8))]
    records, entry, _ = route(reqs, router={"kv_event_lag_ms": 2000.0})
    assert costs(entry) == [16.015625, 16.015625, 8.015625]
    assert records.requests[2].decode_worker == records.requests[0].decode_worker
    # without the lag r1 already follows r0's blocks
    records, entry, _ = route(reqs)
    assert costs(entry) == [16.015625, 8.015625, 8.015625]
    assert {r.decode_worker for r in records.requests} == {records.requests[0].decode_worker}


@pytest.mark.parametrize("mode", ["full_prompt", "destination_missing"])
def test_destination_missing_moves_only_the_kv_the_decode_worker_lacks(mode):
    # 1 prefill, 2 decode workers, a 1 GB/s link: a 1,030-token prompt is 16 full 64-token
    # blocks + 6 tokens. r0 leaves its 16 blocks cached on its decode worker X; r1 (same prompt)
    # is placed on the cheaper decode worker: both are empty, a tie the seed breaks. Where it
    # lands on X, destination_missing moves only the 6 tokens X lacks; full_prompt all 1,030
    per_token = 131072 / 1e9
    for seed in range(4):
        data = {"seed": seed, "pools": {"prefill": {"workers": 1}, "decode": {"workers": 2}},
                "router": {"kind": "kv_aware"}, "link": {"bandwidth_gb_per_s": 1.0, "timing_mode": mode}}
        reqs = [Request(0, 0.0, 1030, 4, (1, 2, 3), 512), Request(1, 2.0, 1030, 4, (1, 2, 3), 512)]
        a, b = simulate(scenario_from_dict(data), reqs, check=True).requests
        assert a.transfer_s == pytest.approx(1030 * per_token, rel=1e-12)
        moved = 6 if (mode == "destination_missing" and b.decode_worker == a.decode_worker) else 1030
        assert b.transfer_s == pytest.approx(moved * per_token, rel=1e-12)


@pytest.mark.parametrize("router, message", [
    ({"count_queued_prefill": True}, "'count_queued_prefill' is replaced by 'router_track_prefill_tokens'"),
    ({"router_track_output_blocks": True}, "'router_track_output_blocks: true' is not modelled"),
    ({"overlap_weight": 1.0, "overlap_score_weight": 2.0}, "give one of 'overlap_weight' and 'overlap_score_weight'"),
    ({"temperature": 1.0, "router_temperature": 2.0}, "give one of 'temperature' and 'router_temperature'"),
    # an alias and the field it names, given together: one would silently win
    ({"overlap_weight": 1.0, "prefill_load_scale": 5.0}, "give one of 'overlap_weight' and 'prefill_load_scale'"),
    ({"overlap_score_weight": 1.0, "prefill_load_scale": 5.0},
     "give one of 'overlap_score_weight' and 'prefill_load_scale'"),
    ({"overlap_score_weight": 0, "overlap_score_credit": 2.0},
     "'overlap_score_weight: 0' also sets overlap_score_credit to 0"),
    ({"prefill_load_scale": -1.0}, "'prefill_load_scale' must be >= 0"),
])
def test_router_settings_that_cannot_be_honoured_are_one_line_errors(router, message):
    from simkit.spec import ConfigError

    with pytest.raises(ConfigError, match=message):
        scenario_from_dict({"pools": {"aggregated": {}}, "router": dict({"kind": "kv_aware"}, **router)})


@pytest.mark.parametrize("sharing", ["uncontended", "fair"])
def test_an_uncontended_or_fair_link_takes_no_channels(sharing):
    from simkit.spec import ConfigError

    with pytest.raises(ConfigError, match=f"'channels' has no effect with 'sharing: {sharing}'"):
        scenario_from_dict({"pools": {"prefill": {}, "decode": {}}, "link": {"sharing": sharing, "channels": 2}})


def test_a_kv_router_alias_is_read_as_its_field_and_the_resolved_scenario_names_only_the_field():
    from simkit.spec import dump_scenario

    scenario = scenario_from_dict({"pools": {"aggregated": {}}, "router": {"kind": "kv_aware", "overlap_score_weight": 0}})
    assert scenario.router.prefill_load_scale == 0.0 and scenario.router.overlap_score_credit == 0.0
    text = dump_scenario(scenario)
    assert "overlap_score_weight" not in text and "prefill_load_scale: 0.0" in text


def test_host_tier_blocks_count_host_cache_hit_weight_each_in_the_prefill_term():
    # one worker, 8 GPU blocks and a host tier: A (4 blocks) is stored to the host, B (7 blocks)
    # evicts A's blocks from the GPU (the router hears both). C, A's prompt: no GPU overlap, 4
    # host blocks credited 0.75 each: prefill 256 / 64 - 3 = 1, + its 4 active blocks = 5
    # (measured on the reference: 4 host blocks lower a cost by 3); without a tier 4 + 4 = 8
    reqs = [R(0, 0, 256, 2, [1, 2, 3, 4]), R(1, 1000, 448, 2, range(10, 17)), R(2, 2000, 256, 2, [1, 2, 3, 4])]
    tier = {"host_blocks": 100, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0, "kv_bytes_per_token": 131072}
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=tier)
    assert costs(entry)[2] == 5.0
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=tier, router={"host_cache_hit_weight": 0.5})
    assert costs(entry)[2] == 6.0
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8)
    assert costs(entry)[2] == 8.0


def test_storage_tier_blocks_count_disk_cache_hit_weight_each_when_the_tier_announces_them():
    # as above with a 7-block host tier and a storage tier behind it: B's 7 blocks push A's 4 off
    # the host, and both are written to storage. C, A's prompt: no GPU or host overlap, 4
    # storage blocks credited 0.25 each (Dynamo's default) when the tier announces its blocks:
    # prefill 4 - 1 = 3, + 4 active blocks = 7; 0.5 each: 4 - 2 + 4 = 6. A tier that announces
    # nothing, the default and the reference replay's way, leaves 4 + 4 = 8
    reqs = [R(0, 0, 256, 2, [1, 2, 3, 4]), R(1, 1000, 448, 2, range(10, 17)), R(2, 2000, 256, 2, [1, 2, 3, 4])]
    tier = {"host_blocks": 7, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0, "kv_bytes_per_token": 131072,
            "storage": {"blocks": 100, "kv_events": True}}
    records, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=tier)
    assert costs(entry)[2] == 7.0 and records.requests[2].host_cached_tokens == 192  # (staged, restored)
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=tier, router={"disk_cache_hit_weight": 0.5})
    assert costs(entry)[2] == 6.0
    quiet = dict(tier, storage={"blocks": 100})
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=quiet)
    assert costs(entry)[2] == 8.0
    shared = dict(tier, storage={"blocks": 100, "kv_events": True, "scope": "pool"})
    _, entry, _ = route(reqs, workers=1, num_gpu_blocks=8, kv_offload=shared)
    assert costs(entry)[2] == 7.0  # a pool's shared tier: announced for every worker
