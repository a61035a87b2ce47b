"""Host KV offload (``pools.<pool>.kv_offload``): timings derived by hand from the reference
polynomial (conftest P, D), each also measured on the reference (ai-dynamo-runtime 1.6.1 with
``native_host_offload`` and ``kv_cache_bytes_per_token: 131072``, block size 64, 8 GPU blocks,
trace block size 64): the reference's figure is in each comment.

A 64-token block of KV is 64 x 131072 = 8388608 bytes: 0.8388608 ms at 10 GB/s, 838.8608 ms at
0.01 GB/s, 8.388608 ms at 1 GB/s, 0.262144 ms at 32 GB/s.
"""

from __future__ import annotations

import pytest

from conftest import D, P, req, run
from simkit import scenario_from_dict
from simkit.spec import ConfigError

ms = lambda x: pytest.approx(x, rel=1e-9, abs=1e-9)  # noqa: E731
BLOCK_BYTES = 64 * 131072


def copy_ms(blocks: int, gb_per_s: float) -> float:
    return blocks * BLOCK_BYTES / (gb_per_s * 1e9) * 1000


TIER_FIELDS = ("first_byte_latency_ms", "shared_d2h_gb_per_s", "shared_h2d_gb_per_s")


def offload_run(requests, d2h=10.0, h2d=10.0, host_blocks=100, storage=None, **pool):
    tier = {"host_blocks": host_blocks, "d2h_gb_per_s": d2h, "h2d_gb_per_s": h2d, "kv_bytes_per_token": 131072}
    tier.update({k: pool.pop(k) for k in TIER_FIELDS if k in pool})
    pool = dict(dict(block_size=64, num_gpu_blocks=8, max_num_seqs=4), **pool)
    if storage is not None:
        tier["storage"] = storage
    return run(requests, kv_offload=tier, **pool)


def three(d2h=10.0, h2d=10.0, host_blocks=100, b_osl=2):
    # A (4 blocks) at 0; B (7 blocks) at 1 s takes the GPU cache over; C = A's prompt at 2 s
    return offload_run([req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, b_osl, range(10, 17), 64),
                        req(2, 2000, 256, 2, [1, 2, 3, 4], 64)], d2h=d2h, h2d=h2d, host_blocks=host_blocks)


def test_a_prefix_evicted_from_the_gpu_is_restored_from_the_host_and_the_restore_is_in_its_ttft():
    # A's 4 prompt blocks are stored at the end of its prefill pass; B evicts them from the GPU.
    # C finds none on the GPU and all 4 on the host: they are restored (4 blocks at 10 GB/s,
    # 3.3554432 ms) before it is admitted, and it reuses 192 tokens (vLLM computes the last
    # block of a fully cached prompt again): TTFT = 3.3554432 + P(64) (reference: admitted at
    # 2003.3554432 ms, first token 2020.8303282 ms, 192 host tokens)
    a, b, c = three()
    assert c.first_admitted_at * 1000 == ms(2000 + copy_ms(4, 10))
    assert c.cached_tokens == 192 and c.host_cached_tokens == 192
    assert c.ttft_s * 1000 == ms(copy_ms(4, 10) + P(64))
    assert c.restore_s * 1000 == ms(copy_ms(4, 10))
    parts = c.ttft_components
    assert parts["restore"] * 1000 == ms(copy_ms(4, 10)) and parts["engine_queue"] == ms(0.0)
    assert a.host_cached_tokens == b.host_cached_tokens == 0 and a.ttft_components["restore"] is None


def test_the_reference_default_rates_are_32_gb_per_s():
    # (reference: C admitted at 2001.048576 ms)
    recs = run([req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                req(2, 2000, 256, 2, [1, 2, 3, 4], 64)],
               block_size=64, num_gpu_blocks=8, max_num_seqs=4,
               kv_offload={"host_blocks": 100, "kv_bytes_per_token": 131072})
    assert recs[2].first_admitted_at * 1000 == ms(2000 + copy_ms(4, 32))


def test_a_cohort_larger_than_the_host_tier_is_not_stored():
    # 2 host blocks cannot take A's 4: nothing is stored, C computes its whole prompt (reference:
    # C's first token at 2020.415971 ms = 2000 + P(256))
    c = three(host_blocks=2)[2]
    assert c.host_cached_tokens == 0 and c.ttft_s * 1000 == ms(P(256))


def test_a_pass_that_takes_gpu_blocks_still_being_copied_starts_when_the_copy_ends():
    # X (7 blocks) prefills at 0 and ends; Y arrives at 20 ms and is admitted at X's end,
    # over X's blocks, whose store (7 blocks at 1 GB/s, 58.720256 ms) is under way: Y's pass
    # waits for it. Y: admitted at P(448), first token at P(448) + 58.720256 + P(448)
    # (reference: 23.388097 and 105.49645 ms)
    x, y = offload_run([req(0, 0, 448, 1, range(1, 8), 64), req(1, 20, 448, 1, range(10, 17), 64)], d2h=1.0)
    assert y.first_admitted_at * 1000 == ms(P(448))
    assert y.first_token_at * 1000 == ms(P(448) + copy_ms(7, 1) + P(448))


def test_stores_of_one_worker_run_one_after_another():
    # A1 and A2 (2 blocks each) prefill together: their stores at 0.01 GB/s run in turn, A1's
    # over [P(256), P(256) + 1677.7216], A2's after it. B (5 blocks) at 1 s takes the 4 free
    # blocks and one of A1's (freed first): its pass waits for A1's store only. First token at
    # P(256) + 1677.7216 + P(320) (reference: 1719.540802 ms)
    recs = offload_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 128, 1, [3, 4], 64),
                        req(2, 1000, 320, 1, range(10, 15), 64)], d2h=0.01)
    assert recs[2].first_token_at * 1000 == ms(P(256) + copy_ms(2, 0.01) + P(320))
    # 7 blocks take blocks of both: the pass waits for both stores (reference: 3399.247268 ms)
    recs = offload_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 128, 1, [3, 4], 64),
                        req(2, 1000, 448, 1, range(10, 17), 64)], d2h=0.01)
    assert recs[2].first_token_at * 1000 == ms(P(256) + copy_ms(4, 0.01) + P(448))


def test_a_fenced_prompt_is_stored_a_pass_late_and_a_request_waits_for_blocks_still_being_stored():
    # d2h 0.01 GB/s. A's store (4 blocks) ends at P(256) + 3355.4432 = 3375.859171 ms; B's
    # prefill, over A's blocks, waits for it, so B's first token is at 3375.859171 + P(448). B's
    # blocks being fenced, its store is prepared at its next pass and starts at that pass's
    # end, B's second token (3432.556242 ms); it takes 7 x 838.8608 ms. C (A's prompt, at 2 s)
    # finds A's blocks on the host but no GPU room until B ends, and that room is B's blocks,
    # still being stored: its restore starts after B's store and takes 3.3554432 ms
    # (reference: B's tokens at 3399.247268 and 3432.556242, C admitted at 9307.937285 ms)
    for b_osl in (2, 5):
        a, b, c = three(d2h=0.01, b_osl=b_osl)
        a_stored = P(256) + copy_ms(4, 0.01)
        assert b.first_token_at * 1000 == ms(a_stored + P(448))
        b_second = a_stored + P(448) + D(449, 8 * 64)
        assert b.second_token_at * 1000 == ms(b_second)
        assert c.first_admitted_at * 1000 == ms(b_second + copy_ms(7, 0.01) + copy_ms(4, 10))
        assert c.host_cached_tokens == 192


def test_a_prompt_whose_every_block_is_on_the_gpu_looks_nothing_up_on_the_host():
    # A (1 block), then B (7 blocks) at 1 s; C = B's prompt at 2 s while B's store (0.01 GB/s,
    # 5872.0256 ms from B's prefill end) is under way. All 7 of C's blocks are on the GPU: no
    # host look-up (which would wait for the store), C is admitted at once reusing 384 tokens;
    # its decode step needs a new block, which takes one B's store still reads: it waits
    # (reference: C's first token at 2017.474885, its end at 6928.722671 ms)
    a, b, c = offload_run([req(0, 0, 64, 2, [1], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                           req(2, 2000, 448, 2, range(10, 17), 64)], d2h=0.01)
    assert c.first_admitted_at * 1000 == ms(2000) and c.cached_tokens == 384 and c.host_cached_tokens == 0
    assert c.first_token_at * 1000 == ms(2000 + P(64))
    b_stored = 1000 + P(448) + copy_ms(7, 0.01)
    assert c.finished_at * 1000 == ms(b_stored + D(449, 8 * 64))


def test_the_summary_counts_hits_by_tier_and_the_bytes_copied():
    from simkit.sim import simulate
    from conftest import scenario

    sc = scenario(block_size=64, num_gpu_blocks=8, max_num_seqs=4,
                  kv_offload={"host_blocks": 100, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0,
                              "kv_bytes_per_token": 131072})
    records = simulate(sc, [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                            req(2, 2000, 256, 2, [1, 2, 3, 4], 64)])
    # stores: A's 4 blocks, B's 7; C's restore of 4 blocks; C's last block, computed again, is
    # already on the host (not stored twice)
    assert records.kv_offload == {"host_hit_tokens": 192, "stored_blocks": 11, "restored_blocks": 4,
                                  "d2h_bytes": 11 * BLOCK_BYTES, "h2d_bytes": 4 * BLOCK_BYTES}
    from simkit.output.report import summarize
    summary = summarize(records)
    assert summary["kv_offload"]["host_hit_tokens"] == 192 and summary["kv_offload"]["gpu_hit_tokens"] == 0
    assert summary["ttft_components"]["restore"]["mean"] == pytest.approx(copy_ms(4, 10) / 3, rel=1e-9)


@pytest.mark.parametrize("pool, message", [
    ({"kv_offload": {"host_blocks": 4, "offload": "prompt_and_output"}}, "not modelled yet"),
    ({"kv_offload": {"host_blocks": 4, "scope": "pool"}}, "'scope: pool' .* is not modelled yet"),
    ({"kv_offload": {"host_blocks": 4, "storage": {"blocks": 10, "scope": "node"}}}, "scope"),
    ({"kv_offload": {"host_blocks": 4, "storage": {"blocks": 10, "shared_read_gb_per_s": 5}}},
     "applies only with 'scope: pool'"),
    ({"kv_offload": {"host_blocks": 4, "storage": {"blocks": 10, "scope": "pool", "shared_write_gb_per_s": 0}}},
     "'shared_write_gb_per_s' must be > 0"),
    ({"kv_offload": {"host_blocks": 4, "shared_h2d_gb_per_s": -1}}, "'shared_h2d_gb_per_s' must be > 0"),
    ({"kv_offload": {"host_blocks": 4}, "backend": "sglang"}, "backend: vllm only"),
    ({"kv_offload": {"host_blocks": 4}, "enable_prefix_caching": False}, "enable_prefix_caching"),
    ({"kv_offload": {"host_blocks": 0}}, "'host_blocks' must be > 0"),
    ({"kv_offload": {"host_blocks": 4, "d2h_gb_per_s": 0}}, "'d2h_gb_per_s' must be > 0"),
])
def test_kv_offload_settings_that_cannot_be_honoured_are_refused(pool, message):
    with pytest.raises(ConfigError, match=message):
        scenario_from_dict({"pools": {"aggregated": pool}})


def test_a_decode_pool_takes_no_host_tier_yet():
    with pytest.raises(ConfigError, match="not on a decode pool yet"):
        scenario_from_dict({"pools": {"prefill": {}, "decode": {"kv_offload": {"host_blocks": 4}}}})


def test_restored_requests_that_hold_the_whole_gpu_cache_give_it_back_instead_of_waiting_for_good():
    # A and B (4 blocks each) are stored, X (8 blocks) evicts both from the GPU. C1 (A's prompt +
    # 3 blocks) and C2 (B's + 3) arrive together: each restores its 4 blocks, which fills the 8
    # GPU blocks, and neither can then take the 3 more it needs, nothing running to free any
    # (the reference aborts such a replay: "effect-free zero-duration pass"). simkit gives the
    # restored blocks back to the GPU cache: C1 finds its 4 there again and goes first (256
    # tokens reused), then C2 computes its prompt (its blocks were taken by C1's).
    recs = offload_run([req(0, 0, 256, 1, [1, 2, 3, 4], 64), req(1, 100, 256, 1, [5, 6, 7, 8], 64),
                        req(2, 200, 512, 1, range(10, 18), 64),
                        req(3, 300, 448, 1, [1, 2, 3, 4, 20, 21, 22], 64),
                        req(4, 300, 448, 1, [5, 6, 7, 8, 30, 31, 32], 64)])
    assert [r.status for r in recs] == ["completed"] * 5
    c1, c2 = recs[3], recs[4]
    assert c1.cached_tokens == 256 and c1.host_cached_tokens == 256
    assert c1.first_admitted_at * 1000 == ms(300 + 2 * copy_ms(4, 10))  # the two restores in turn
    assert c2.first_admitted_at > c1.finished_at - 1e-12


def test_a_prefill_pool_stores_and_restores_too():
    # disaggregated: the prefill worker has the host tier. A's 4 prompt blocks are freed when
    # the decode side takes A (last block first in the free queue); B's 7 take the 4 never-used
    # blocks and A's last 3, so A's first block is still on the prefill GPU when C (A's prompt)
    # comes: 1 GPU block, 3 restored (3 x 0.8388608 ms), 192 tokens reused of which 128 restored
    recs = run([req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                req(2, 2000, 256, 2, [1, 2, 3, 4], 64)], mode="disaggregated",
               block_size=64, num_gpu_blocks=8, max_num_seqs=4)
    assert recs[2].host_cached_tokens == 0  # (no tier: nothing restored)
    from conftest import scenario
    from simkit.sim import simulate
    sc = scenario(mode="disaggregated", block_size=64, num_gpu_blocks=8, max_num_seqs=4)
    import attrs
    sc = attrs.evolve(sc, pools=attrs.evolve(sc.pools, prefill=attrs.evolve(
        sc.pools.prefill, kv_offload=scenario_from_dict({"pools": {"aggregated": {"kv_offload": {
            "host_blocks": 100, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0,
            "kv_bytes_per_token": 131072}}}}).pools.aggregated.kv_offload)))
    c = simulate(sc, [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                      req(2, 2000, 256, 2, [1, 2, 3, 4], 64)]).requests[2]
    assert c.cached_tokens == 192 and c.host_cached_tokens == 128
    assert c.first_admitted_at * 1000 == ms(2000 + copy_ms(3, 10))


def test_a_lone_running_request_that_preempts_itself_gets_the_room_restored_requests_hold():
    # found by the invariant property: r1 (1040 tokens, block 16, 82 blocks) decodes alone while
    # r2, preempted earlier, has restored its prompt and holds 15 blocks; r1's next block does not
    # fit, it preempts itself, and nothing would run again: the restored blocks go back to the
    # GPU cache and r1 is admitted at once
    from simkit.core.request import Request
    recs = run([Request(0, 0.0, 1, 20, (0,), 64), Request(1, 0.0, 1040, 34, tuple(range(17)), 64),
                Request(2, 0.0, 240, 2, (100, 101, 102, 103), 64), Request(3, 0.0, 1, 0, (0,), 64)],
               block_size=16, num_gpu_blocks=82, max_num_batched_tokens=256, max_num_seqs=2,
               kv_offload={"host_blocks": 16, "d2h_gb_per_s": 0.05, "h2d_gb_per_s": 0.05,
                           "kv_bytes_per_token": 131072})
    assert [r.status for r in recs] == ["completed"] * 4
    assert [r.output_length for r in recs] == [20, 34, 2, 0]


def test_passes_record_the_host_tier_and_the_worker_series_plots_it():
    from conftest import scenario
    from simkit.output.plots import worker_series
    from simkit.sim import simulate

    sc = scenario(block_size=64, num_gpu_blocks=8, max_num_seqs=4,
                  kv_offload={"host_blocks": 100, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0,
                              "kv_bytes_per_token": 131072})
    records = simulate(sc, [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64)],
                       record_passes=True)
    # A's prefill pass (the tier empty), its decode pass (A's 4 blocks being stored), B's passes
    assert [p.host_blocks for p in records.pass_log] == [0, 4, 4, 11]
    assert len(worker_series(records).axes) == 4
    plain = simulate(scenario(), [req(0, 0, 256, 2)], record_passes=True)
    assert {p.host_blocks for p in plain.pass_log} == {None} and len(worker_series(plain).axes) == 3
    assert {p.storage_blocks for p in records.pass_log} == {None}
    # with a storage tier: A's 4 blocks are written from the end of its decode pass (when the
    # worker takes their store's end), so B's first pass sees them; B's 7 are stored at its
    # prefill's end and written after its last pass
    tiered = simulate(scenario(block_size=64, num_gpu_blocks=8, max_num_seqs=4, kv_offload={
        "host_blocks": 100, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0, "kv_bytes_per_token": 131072,
        "storage": {"blocks": 100}}), [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64)],
        record_passes=True)
    assert [(p.host_blocks, p.storage_blocks) for p in tiered.pass_log] == [(0, 0), (4, 0), (4, 4), (11, 4)]
    assert len(worker_series(tiered).axes) == 4



@pytest.mark.parametrize("blocks, read, latency, expected_ms", [
    # (reference: C admitted 3.4554432, 18.5549376, 3.3554432, 6.8108864, 37.0098752, 6.7108864 ms
    # after its arrival)
    (2, None, None, 0.1 + copy_ms(2, 10) + copy_ms(2, 10)),
    (2, 1.0, None, 0.1 + copy_ms(2, 1) + copy_ms(2, 10)),
    (2, None, 0.0, copy_ms(2, 10) + copy_ms(2, 10)),
    (4, None, None, 0.1 + copy_ms(4, 10) + copy_ms(4, 10)),
    (4, 1.0, None, 0.1 + copy_ms(4, 1) + copy_ms(4, 10)),
    (4, None, 0.0, copy_ms(4, 10) + copy_ms(4, 10)),
])
def test_a_storage_hit_is_staged_through_the_host_then_restored(blocks, read, latency, expected_ms):
    # A (``blocks`` blocks) is stored to the host (7 blocks) and written on to storage; B's 7
    # blocks evict A's from the GPU and from the host. C, A's prompt: no GPU or host hit, its
    # blocks in storage: staged to the host (0.1 ms to the first byte by default, then at the
    # read rate, 10 GB/s by default), then restored to the GPU at 10 GB/s, then admitted
    storage = {"blocks": 100}
    if read is not None:
        storage["read_gb_per_s"] = read
    if latency is not None:
        storage["first_byte_latency_ms"] = latency
    n = blocks * 64
    recs = offload_run([req(0, 0, n, 2, range(1, blocks + 1), 64), req(1, 1000, 448, 2, range(10, 17), 64),
                        req(2, 2000, n, 2, range(1, blocks + 1), 64)], host_blocks=7, storage=storage)
    c = recs[2]
    assert (c.first_admitted_at * 1000 - 2000) == ms(expected_ms)
    assert c.host_cached_tokens == (blocks - 1) * 64  # (the last block computed again)


def test_the_summary_counts_the_storage_tier():
    from conftest import scenario
    from simkit.output.report import summarize
    from simkit.sim import simulate

    sc = scenario(block_size=64, num_gpu_blocks=8, max_num_seqs=4,
                  kv_offload={"host_blocks": 7, "d2h_gb_per_s": 10.0, "h2d_gb_per_s": 10.0,
                              "kv_bytes_per_token": 131072, "storage": {"blocks": 100}})
    records = simulate(sc, [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                            req(2, 2000, 256, 2, [1, 2, 3, 4], 64)])
    off = summarize(records)["kv_offload"]
    # A's 4 and B's 7 written to storage; A's 4 staged back for C, which reuses 3 of them (the
    # last block of a fully cached prompt is computed again): 192 of the 960 prompt tokens
    assert (off["written_blocks"], off["staged_blocks"]) == (11, 4)
    assert off["storage_read_gb"] == pytest.approx(4 * BLOCK_BYTES / 1e9)
    assert off["storage_hit_tokens"] == off["host_hit_tokens"] == 192
    assert off["storage_hit_ratio"] == pytest.approx(192 / 960) and off["bypassed_restores"] == 0


def test_a_pool_wide_storage_tier_is_shared_by_its_workers():
    # two workers, round robin: A on worker 0 is stored to its host and written on to the pool's
    # storage tier; C (A's prompt) goes to worker 1, which never saw A: it stages A's 4 blocks
    # from the shared tier (0.1 ms + 4 blocks at 10 GB/s) and restores them (4 at 10 GB/s); with
    # a tier per worker, worker 1's has nothing for it
    reqs = [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 256, 2, [1, 2, 3, 4], 64)]
    shared = offload_run(reqs, workers=2, host_blocks=7, storage={"blocks": 100, "scope": "pool"})
    local = offload_run(reqs, workers=2, host_blocks=7, storage={"blocks": 100})
    assert shared[1].decode_worker == 1 and shared[1].host_cached_tokens == 192
    assert local[1].host_cached_tokens == 0
    assert shared[1].first_admitted_at * 1000 == ms(1000 + 0.1 + copy_ms(4, 10) + copy_ms(4, 10))


def test_the_host_tier_evicts_its_least_recently_used_blocks_and_a_look_up_refreshes_them():
    # host tier of 4 blocks. A [1,2] and B [3,4] fill it (A older). A' (A's prompt) hits A on
    # the GPU, and its look-up touches A's host blocks: now B's are the least recently used, and
    # D's store evicts them. E (8 blocks) evicts every GPU block. F (A's prompt + a block)
    # restores A's 2 blocks (2 x 0.8388608 ms) and reuses them; G (B's + a block) finds nothing
    # (reference: F admitted at 501.677722 ms with 128 host tokens, G computes, first token at
    # 619.43216 ms = 600 + P(192))
    recs = offload_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 100, 128, 1, [3, 4], 64),
                        req(2, 200, 128, 1, [1, 2], 64), req(3, 300, 128, 1, [5, 6], 64),
                        req(4, 400, 512, 1, range(10, 18), 64), req(5, 500, 192, 1, [1, 2, 7], 64),
                        req(6, 600, 192, 1, [3, 4, 8], 64)], d2h=32.0, h2d=10.0, host_blocks=4)
    f, g = recs[5], recs[6]
    assert f.host_cached_tokens == 128 and f.first_admitted_at * 1000 == ms(500 + copy_ms(2, 10))
    assert g.cached_tokens == 0 and g.first_token_at * 1000 == ms(600 + P(192))


def test_a_stage_reads_only_the_storage_blocks_the_host_lacks():
    # found by a newcomer's --check run: a prompt's host hit stops at its first missing block, but
    # a block further along may still be on the host; the stage used to reserve it again, so a
    # block was both on the host and being stored. The shipped scenario with a storage tier
    # behind a 500-block host tier now passes --check
    import os
    from simkit import load_scenario, override
    from simkit.sim import simulate

    s = load_scenario(os.path.join(os.path.dirname(__file__), "..", "scenarios", "kv_offload.yaml"))
    s = override(s, {"pools.aggregated.kv_offload.host_blocks": 500,
                     "pools.aggregated.kv_offload.storage": {"blocks": 1000}})
    records = simulate(s, check=True)
    assert records.stop_reason == "completed" and records.kv_offload["staged_blocks"] > 0


# The storage tier's reads and writes, each rule measured on the reference with these very
# traces (two workers, round robin, a pool-wide tier: cluster_shared; reference figures in ms).
measured = lambda x: pytest.approx(x, abs=1e-5)  # noqa: E731  (the reference's figure, to 10 ns)


def pool_storage_run(requests, **storage):
    return offload_run(requests, workers=2, storage=dict({"blocks": 100, "scope": "pool"}, **storage))


def test_a_write_to_storage_starts_at_its_workers_next_pass_boundary():
    # A (2 blocks, 3 tokens) on worker 0: its blocks reach the host at P(128) + 2 blocks at
    # 10 GB/s, during its first decode pass; the worker takes that copy's end, and starts the
    # write (0.1 ms, then 2 blocks at 0.1 GB/s), at that pass's end: A's second token. B (A's
    # prefix, worker 1) finds them being written, waits, stages them (0.1 ms + 2 at 10 GB/s) and
    # restores them (2 at 10 GB/s). (reference: B admitted at 207.4934042, 128 host tokens)
    a, b = pool_storage_run([req(0, 0, 128, 3, [1, 2], 64), req(1, 100, 192, 2, [1, 2, 9], 64)],
                            write_gb_per_s=0.1)
    assert P(128) + copy_ms(2, 10) < a.second_token_at * 1000  # the copy ended during the pass
    expected = a.second_token_at * 1000 + 0.1 + copy_ms(2, 0.1) + 0.1 + copy_ms(2, 10) + copy_ms(2, 10)
    assert b.first_admitted_at * 1000 == ms(expected) == measured(207.4934042)
    assert b.host_cached_tokens == 128


def test_writes_of_one_worker_under_way_together_share_its_bandwidth_equally():
    # worker 0: A's 2 blocks written from P(128) + copy + 0.1 ms; C's 1 block from 50 + P(64) +
    # copy + 0.1 ms, while A's is under way: both at 0.05 GB/s, C's ends first, then A's alone.
    # No byte waits, so A's write ends after 3 blocks at 0.1 GB/s (one after another, it would
    # end after 2). D (A's prefix, worker 1) waits for it, stages 2 blocks and restores them.
    # (reference: D admitted at 275.3432028)
    recs = pool_storage_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 64, 1, [20], 64),
                             req(2, 50, 64, 1, [5], 64), req(3, 100, 192, 2, [1, 2, 9], 64)],
                            write_gb_per_s=0.1)
    write_end = P(128) + copy_ms(2, 10) + 0.1 + copy_ms(3, 0.1)
    assert recs[3].first_admitted_at * 1000 == ms(write_end + 0.1 + copy_ms(2, 10) + copy_ms(2, 10))
    assert recs[3].first_admitted_at * 1000 == measured(275.3432028)


def test_a_cohort_larger_than_the_storage_tier_leaves_its_leading_blocks_there():
    # A's 4 blocks, a 2-block storage tier: the write keeps A's first 2. B (A's prompt, worker 1)
    # stages those 2 and computes the rest. (reference: admitted at 1003.4554432, 128 host tokens)
    _a, b = pool_storage_run([req(0, 0, 256, 1, [1, 2, 3, 4], 64),
                              req(1, 1000, 256, 2, [1, 2, 3, 4], 64)], blocks=2)
    assert b.first_admitted_at * 1000 == ms(1000 + 0.1 + copy_ms(2, 10) + copy_ms(2, 10)) == measured(1003.4554432)
    assert b.host_cached_tokens == 128


def test_blocks_already_written_are_staged_while_the_next_are_still_being_written():
    # A writes [1, 2] (done at 188 ms); C at 200 ms on worker 0 hits them on the GPU, computes
    # [3, 4] and writes them from 200 + P(128) + copy + 0.1 ms. D at 300 ms on worker 1 (prompt
    # [1..5]): [1, 2] are written, [3, 4] are being written: it stages [1, 2] at once, [3, 4] when
    # their write ends (0.1 ms + 2 at 10 GB/s), then restores all 4 (4 at 10 GB/s). Staging all
    # 4 after the write would take a 2-block read longer. (reference: D admitted at 393.1348444)
    recs = pool_storage_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 64, 1, [20], 64),
                             req(2, 200, 256, 1, [1, 2, 3, 4], 64), req(3, 300, 320, 2, [1, 2, 3, 4, 5], 64)],
                            write_gb_per_s=0.1)
    write_end = 200 + P(128) + copy_ms(2, 10) + 0.1 + copy_ms(2, 0.1)
    assert recs[3].first_admitted_at * 1000 == ms(write_end + 0.1 + copy_ms(2, 10) + copy_ms(4, 10))
    assert recs[3].first_admitted_at * 1000 == measured(393.1348444)
    assert recs[3].host_cached_tokens == 256


@pytest.mark.parametrize("shared, write_ms, reference_ms", [
    (0.1, copy_ms(2, 0.05), 359.2292828),  # two writes under a 0.1 GB/s pool cap: 0.05 each
    (None, copy_ms(2, 0.1), 191.4571228),  # the default cap, 80 GB/s: each at its worker's 0.1
])
def test_writes_of_a_pool_share_its_cap_equally(shared, write_ms, reference_ms):
    # A on worker 0 and B on worker 1 write 2 blocks each from P(128) + copy + 0.1 ms, together;
    # C (B's prefix, worker 0) waits for B's write, stages 2 blocks and restores them
    storage = {"write_gb_per_s": 0.1} if shared is None else {"write_gb_per_s": 0.1, "shared_write_gb_per_s": shared}
    recs = pool_storage_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 128, 1, [5, 6], 64),
                             req(2, 100, 192, 2, [5, 6, 7], 64)], **storage)
    expected = P(128) + copy_ms(2, 10) + 0.1 + write_ms + 0.1 + copy_ms(2, 10) + copy_ms(2, 10)
    assert recs[2].first_admitted_at * 1000 == ms(expected) == measured(reference_ms)


def test_a_request_whose_storage_restores_keep_being_undone_computes_them_after_1024_rounds():
    # The reference's G3 restore bypass (AISimulate's documented rule; vLLM has none): each
    # look-up that stages new storage blocks while the worker runs nothing is a round; here a
    # 2-block host tier loses the request's staged blocks to other copies after each stage, so
    # every look-up stages them again. At round 1024 the request stops restoring from storage
    # (its look-ups then return what the GPU and host hold: 0), once; a pass that runs resets
    # the count
    from simkit.engine.offload import DEFERRED, RESTORE_ROUNDS_BEFORE_BYPASS, HostOffload, StorageTier

    storage = StorageTier(10)
    storage.reserve([1, 2])
    storage.written([1, 2])
    host = HostOffload(2, 1, storage)
    stages = []
    host.submit_stage = lambda stage_id, keys, nbytes: stages.append((stage_id, keys))
    other = iter(range(1000, 10 ** 6))

    def one_round():
        assert host.lookup(7, [1, 2], 0) == DEFERRED
        stage_id, keys = stages.pop()
        host.store_done(stage_id, keys)  # staged to the host...
        host.tier.reserve([next(other), next(other)], -1)  # ...and evicted by other copies
        host.tier.pending.clear()

    for _ in range(RESTORE_ROUNDS_BEFORE_BYPASS - 1):
        one_round()
    host.progressed()  # the worker ran a pass: the count starts over
    for _ in range(RESTORE_ROUNDS_BEFORE_BYPASS - 1):
        one_round()
    assert host.bypassed_restores == 0
    one_round()  # the 1024th consecutive round
    assert host.bypassed_restores == 1 and RESTORE_ROUNDS_BEFORE_BYPASS == 1024
    assert host.lookup(7, [1, 2], 0) == 0 and not stages  # computes them: no stage
    host.preempted(7)  # a preemption ends the bypass
    assert host.lookup(7, [1, 2], 0) == DEFERRED and stages


def test_a_prompt_stages_its_next_storage_blocks_while_another_request_stages_its_first():
    # worker 0 writes A's [1, 2, 3] (among other writes, at 0.1 GB/s); on worker 1, B ([1, 2, 9])
    # and then C wait for that write. When it ends B stages [1, 2]; C's first blocks are then
    # coming to the host (B's stage), and C stages its next, [3], at once, beside B's: the two
    # reads share worker 1's 0.1 GB/s, so B's stage ends one block's read (83.886 ms) later
    # than when C wants only [1, 2] ([1, 2, 8]), which stages nothing. (reference: B admitted at
    # 709.8734066 and 625.9873266; C at 727.3482916, when B's first pass ends, and 625.9873266)
    def run_with(c_ids, c_isl):
        return pool_storage_run([req(0, 0, 192, 1, [1, 2, 3], 64), req(1, 0, 64, 1, [20], 64),
                                 req(2, 10, 64, 1, [21], 64), req(3, 50, 192, 2, [1, 2, 9], 64),
                                 req(4, 50, 64, 1, [22], 64), req(5, 50.001, c_isl, 2, c_ids, 64)],
                                read_gb_per_s=0.1, write_gb_per_s=0.1)
    both = run_with([1, 2, 3, 8], 256)
    alone = run_with([1, 2, 8], 192)
    assert (both[3].first_admitted_at - alone[3].first_admitted_at) * 1000 == ms(copy_ms(1, 0.1))
    assert both[3].first_admitted_at * 1000 == measured(709.8734066)
    assert alone[3].first_admitted_at * 1000 == alone[5].first_admitted_at * 1000 == measured(625.9873266)
    assert both[5].first_admitted_at * 1000 == measured(727.3482916) == measured(both[3].first_token_at * 1000)


def test_the_host_tier_is_sized_in_blocks_in_gib_or_from_the_gpus_host_memory():
    # 64 GiB of 64-token blocks of 131072 bytes per token (8 MiB each): 8192 blocks
    assert scenario_from_dict({"pools": {"aggregated": {"kv_offload": {"kv_offloading_size_gib": 64}}}}
                              ).pools.aggregated.kv_offload.host_blocks == 8192
    # Llama-3.1-70B (327680 KV bytes per token: 20 MiB a block) at TP 4 on H100s: a DGX H100's
    # 2 TiB over 8 GPUs is 256 GiB per GPU, 1 TiB per worker: 52428 blocks
    sc = scenario_from_dict({"latency": {"kind": "roofline", "model": "Llama-3.1-70B", "gpu": "H100",
                                         "tensor_parallel_size": 4},
                             "pools": {"aggregated": {"tensor_parallel_size": 4, "kv_offload": {}}}})
    assert sc.pools.aggregated.kv_offload.host_blocks == 2**40 // (64 * 327680) == 52428


@pytest.mark.parametrize("data, message", [
    ({"pools": {"aggregated": {"kv_offload": {}}}}, "the latency model names no GPU"),
    ({"latency": {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "L40S"}, "pools": {"aggregated": {"kv_offload": {}}}},
     "L40S has no host memory figure"),
    ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "kv_offloading_size_gib": 1}}}}, "not both"),
    ({"pools": {"aggregated": {"kv_offload": {"kv_offloading_size_gib": 0.001}}}}, "holds no 8388608-byte KV block"),
])
def test_a_host_tier_that_cannot_be_sized_is_refused_in_one_line(data, message):
    with pytest.raises(ConfigError, match=message) as exc:
        scenario_from_dict(data, "f.yaml")
    assert len(exc.value.messages) == 1 and exc.value.messages[0].startswith("f.yaml: ")


def test_a_host_copys_first_byte_latency_counts_from_when_it_was_accepted():
    # C's restore waits 5 ms before its first byte (reference, latency_to_first_byte_ms 5:
    # admitted at 2008.3554432 ms, 5 ms later than without)
    c = offload_run([req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 1000, 448, 2, range(10, 17), 64),
                     req(2, 2000, 256, 2, [1, 2, 3, 4], 64)], first_byte_latency_ms=5.0)[2]
    assert c.first_admitted_at * 1000 == ms(2000 + 5 + copy_ms(4, 10)) == measured(2008.3554432)
    # two stores accepted together at 0.01 GB/s, 50 ms to the first byte: the second's latency
    # runs during the first's copy, so B's pass, which waits for both, starts 50 ms later than
    # without, not 100 (reference: first token at 3449.247268 ms)
    recs = offload_run([req(0, 0, 128, 1, [1, 2], 64), req(1, 0, 128, 1, [3, 4], 64),
                        req(2, 1000, 448, 1, range(10, 17), 64)], d2h=0.01, first_byte_latency_ms=50.0)
    assert recs[2].first_token_at * 1000 == ms(P(256) + 50 + copy_ms(4, 0.01) + P(448))
    assert recs[2].first_token_at * 1000 == measured(3449.247268)


def test_two_workers_restores_under_way_together_share_a_pool_wide_cap():
    # round robin over 2 workers: each restores 4 blocks at 2000 ms (as C in ``three``), at
    # 10 GB/s each. Under a 10 GB/s pool-wide cap both move at min(10, 10 / 2) = 5 GB/s: 4
    # blocks take 6.7108864 ms, not 3.3554432. (Not the reference's: its per-worker host tiers
    # take no pool cap; a node's shared host link, say, which simkit offers as a what-if)
    reqs = [req(0, 0, 256, 2, [1, 2, 3, 4], 64), req(1, 0, 256, 2, [21, 22, 23, 24], 64),
            req(2, 1000, 448, 2, range(10, 17), 64), req(3, 1000, 448, 2, range(30, 37), 64),
            req(4, 2000, 256, 2, [1, 2, 3, 4], 64), req(5, 2000, 256, 2, [21, 22, 23, 24], 64)]
    capped = offload_run(reqs, workers=2, shared_h2d_gb_per_s=10.0)
    free = offload_run(reqs, workers=2)
    for rid in (4, 5):
        assert capped[rid].first_admitted_at * 1000 == ms(2000 + copy_ms(4, 5))
        assert free[rid].first_admitted_at * 1000 == ms(2000 + copy_ms(4, 10))
    assert {capped[4].decode_worker, capped[5].decode_worker} == {0, 1}
