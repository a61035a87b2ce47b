"""Exact pass timings, derived by hand from the reference polynomial (REFERENCE.md s3-s5).

Each expected value was also observed on the reference (ai-dynamo-runtime 1.6.1) with the
same settings; the comments give the derivation. Times compare in ms with a 1e-9 relative
tolerance, i.e. exactly up to float rounding.
"""

from __future__ import annotations

import pytest

from conftest import D, P, req, run

ms = lambda x: pytest.approx(x, rel=1e-9)  # noqa: E731


def ttft(r):
    return r.ttft_s * 1000


def test_single_request_alone_ttft_is_one_prefill_pass_then_decode_passes():
    # idle worker starts at once: token 1 at P(1000) = 32.1058589 ms; token 2 after a decode
    # pass with a = 1000 + 1 (prompt + first token); token 3 with a = 1002
    (r,) = run([req(0, 0, 1000, 3)])
    assert ttft(r) == ms(P(1000))
    assert ttft(r) == ms(32.1058589)
    assert (r.second_token_at - r.first_token_at) * 1000 == ms(D(1001))
    assert r.e2e_s * 1000 == ms(P(1000) + D(1001) + D(1002))
    assert r.itl_s * 1000 == ms((D(1001) + D(1002)) / 2)
    assert r.status == "completed" and r.output_length == 3


def test_ten_thousand_token_prompt_takes_two_chunks():
    # token budget 8192: chunk 1 = 8192 tokens, chunk 2 = 1808; first token after both
    (r,) = run([req(0, 0, 10000, 2)])
    assert ttft(r) == ms(P(8192) + P(1808))
    assert ttft(r) == ms(214.4661860724992)
    assert (r.last_token_at - r.first_token_at) * 1000 == ms(D(10001))


def test_decode_gap_uses_context_over_kv_capacity():
    # a small KV cache makes u = a / C large: C = 100 * 64 = 6400 tokens
    (r,) = run([req(0, 0, 3000, 3)], num_gpu_blocks=100)
    assert (r.second_token_at - r.first_token_at) * 1000 == ms(D(3001, 6400))
    assert (r.last_token_at - r.second_token_at) * 1000 == ms(D(3002, 6400))


def test_request_arriving_during_a_pass_joins_at_the_next_boundary():
    # r0 prefills over [0, P(1000)); r1 arrives at 10 ms and is admitted at P(1000) into a mixed
    # pass: P(500) for its prompt + D(1001) for r0's decode
    r0, r1 = run([req(0, 0, 1000, 3), req(1, 10, 500, 3)])
    assert r1.first_admitted_at * 1000 == ms(P(1000))
    assert r1.queue_s * 1000 == ms(P(1000) - 10)
    assert r1.first_token_at * 1000 == ms(P(1000) + P(500) + D(1001))
    assert r0.second_token_at * 1000 == ms(P(1000) + P(500) + D(1001))
    # next pass: both decode, a = (1000 + 2) + (500 + 1)
    assert (r0.last_token_at - r0.second_token_at) * 1000 == ms(D(1503))


def test_simultaneous_arrivals_share_the_first_pass():
    r0, r1 = run([req(0, 0, 1000, 3), req(1, 0, 500, 3)])
    assert ttft(r0) == ttft(r1) == ms(P(1500))


def test_two_long_prompts_split_the_budget_in_arrival_order():
    # pass 1: r0's 6000 tokens + r1's first 2192; pass 2: r1's last 3808 + r0's decode (a=6001)
    r0, r1 = run([req(0, 0, 6000, 3), req(1, 0, 6000, 3)])
    assert ttft(r0) == ms(P(8192))
    assert ttft(r1) == ms(P(8192) + P(3808) + D(6001))


def test_disaggregated_ttft_is_prefill_plus_transfer_plus_one_decode_pass():
    # prefill pass P(1000); instantaneous handoff; the decode worker's first pass (a = 1000)
    # emits token 1, the next ones a = 1001, 1002
    (r,) = run([req(0, 0, 1000, 3)], mode="disaggregated")
    assert ttft(r) == ms(P(1000) + D(1000))
    assert r.e2e_s * 1000 == ms(P(1000) + D(1000) + D(1001) + D(1002))
    assert r.handed_off_at * 1000 == ms(P(1000))
    assert (r.prefill_worker, r.decode_worker) == (0, 0)


def test_disaggregated_ttft_counts_link_transfer_and_latency_once():
    # 2000 tokens * 131072 B / 10 GB/s = 26.2144 ms serialisation + 1.5 ms latency
    (r,) = run([req(0, 0, 2000, 2)], mode="disaggregated",
               link={"bandwidth_gb_per_s": 10.0, "latency_ms": 1.5, "channels": 1})
    transfer = 2000 * 131072 / 10e9 * 1000 + 1.5
    assert ttft(r) == ms(P(2000) + transfer + D(2000))
    # the breakdown: prefill ends at P(2000); the link takes `transfer`; the idle decode worker
    # admits at once, so TTFT = queue 0 + P + transfer + decode queue 0 + D
    assert r.prefilled_at * 1000 == ms(P(2000))
    assert r.transfer_s * 1000 == ms(transfer) and r.decode_queue_s == 0.0


def test_link_channels_serialise_transfers():
    # two prompts prefilled in one pass on one prefill worker; one channel: the second transfer
    # waits for the first, so its handoff lands one serialisation time later
    recs = run([req(0, 0, 1000, 2), req(1, 0, 1000, 2)], mode="disaggregated",
               link={"bandwidth_gb_per_s": 1.0, "latency_ms": 0.0, "channels": 1})
    ser = 1000 * 131072 / 1e9 * 1000
    assert recs[0].handed_off_at * 1000 == ms(P(2000) + ser)
    assert recs[1].handed_off_at * 1000 == ms(P(2000) + 2 * ser)


def test_link_fair_sharing_splits_the_bandwidth_between_transfers_under_way():
    # the same two prompts, prefilled in one pass, end together: with 'sharing: fair' both move
    # at once at half the bandwidth each, so both land after twice one serialisation time
    recs = run([req(0, 0, 1000, 2), req(1, 0, 1000, 2)], mode="disaggregated",
               link={"bandwidth_gb_per_s": 1.0, "latency_ms": 0.5, "sharing": "fair"})
    ser = 1000 * 131072 / 1e9 * 1000
    assert recs[0].handed_off_at * 1000 == ms(P(2000) + 2 * ser + 0.5)
    assert recs[1].handed_off_at * 1000 == ms(P(2000) + 2 * ser + 0.5)
    # one prompt alone: the whole bandwidth
    (r,) = run([req(0, 0, 1000, 2)], mode="disaggregated",
               link={"bandwidth_gb_per_s": 1.0, "sharing": "fair"})
    assert r.handed_off_at * 1000 == ms(P(1000) + ser)


def test_constant_latency_model():
    # prefill pass 10 ms, then one decode pass of 4 ms per further token
    (r,) = run([req(0, 0, 100, 4)], latency={"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0})
    assert ttft(r) == ms(10.0)
    assert r.e2e_s * 1000 == ms(22.0)
    assert r.itl_s * 1000 == ms(4.0)


def test_prefix_cache_reuses_whole_blocks_and_recomputes_last_block_of_full_hit():
    # r0 caches 15 full 64-token blocks of [1, 2] (1000 tokens); r1 identical: hits 960, computes
    # 40; r2 1024 tokens of [1, 2]: its 16th block was never full before: hits 960, computes 64;
    # r3 shares trace block 1 only: 512 cached, computes 88
    recs = run([req(0, 0, 1000, 3, [1, 2]), req(1, 1000, 1000, 3, [1, 2]),
                req(2, 2000, 1024, 3, [1, 2]), req(3, 3000, 600, 3, [1, 3])])
    assert [r.cached_tokens for r in recs] == [0, 960, 960, 512]
    assert [ttft(r) for r in recs] == [ms(P(1000)), ms(P(40)), ms(P(64)), ms(P(88))]
    # a full-prompt hit of 1024 tokens still recomputes its last block
    recs = run([req(0, 0, 1024, 2, [1, 2]), req(1, 1000, 1024, 2, [1, 2])])
    assert recs[1].cached_tokens == 960 and ttft(recs[1]) == ms(P(64))


def test_whole_prompt_must_fit_before_admission():
    # 100 blocks; 3000-token prompts need 47 blocks each: two are admitted (94 blocks), the
    # third waits until both finish, then prefills alone
    recs = run([req(i, 0, 3000, 50) for i in range(3)], num_gpu_blocks=100)
    assert recs[0].first_token_at == recs[1].first_token_at
    assert recs[2].first_admitted_at == recs[0].finished_at
    assert ttft(recs[2]) == ms(recs[0].finished_at * 1000 + P(3000))


def test_output_length_zero_and_one():
    # 0 output tokens: done when the prompt is (no token: no TTFT, and no E2E, which ends at
    # the last token, as the reference reports it); 1 token: TTFT, no ITL
    r0, r1 = run([req(0, 0, 1000, 0), req(1, 0, 1000, 1)])
    assert (r0.status, r0.output_length, r0.ttft_s, r0.itl_s, r0.e2e_s) == ("completed", 0, None, None, None)
    assert r0.finished_at * 1000 == ms(P(2000))
    assert (r1.status, r1.output_length, r1.itl_s) == ("completed", 1, None)
    assert ttft(r1) == ms(P(2000)) and r1.e2e_s == r1.ttft_s
    # disaggregated: a 0-token request never crosses the link
    (d0,) = run([req(0, 0, 1000, 0)], mode="disaggregated")
    assert (d0.status, d0.handed_off_at, d0.decode_worker) == ("completed", None, None)


def test_reference_prices_prefill_from_batch_means_when_asked():
    # r0 (512 tokens, trace block [0]) warms block 0; at 1 s r1 (898 tokens, [0, 1]) and r2
    # (7543 tokens, [0, 100..114]) hit 512 each and prefill together: 386 + 7031 = 7417 tokens.
    # The reference prices k * (E // k - S // k) with k = 2, S = 512 + 512, E = 898 + 7543:
    # 2 * (4220 - 512) = 7416 (measured on ai-dynamo-runtime 1.6.1: TTFT 152.255511 ms).
    reqs = [req(0, 0, 512, 1, [0]), req(1, 1000, 898, 2, [0, 1]), req(2, 1000, 7543, 3, [0] + list(range(100, 115)))]
    exact = run(reqs)
    assert ttft(exact[1]) == ttft(exact[2]) == ms(P(7417))
    means = run(reqs, latency={"kind": "polynomial", "prefill_tokens_from_batch_means": True})
    assert ttft(means[1]) == ttft(means[2]) == ms(P(7416))
    assert ttft(means[1]) == pytest.approx(152.255511, abs=1e-6)


def test_goodput_counts_requests_within_every_bound_and_each_bound_alone():
    # constant model: prefill pass 10 ms, decode pass 4 ms, a mixed pass 14 ms. r0 (16 tokens,
    # 3 out) at 0: pass [0, 10] gives its token 1. r1 (16, 2) arrives at 5 ms: pass [10, 24]
    # decodes r0 and prefills r1 (tokens at 24); pass [24, 28] gives both their last token.
    # r0: TTFT 10 ms, mean ITL (28 - 10) / 2 = 9 ms; r1: TTFT 24 - 5 = 19 ms, ITL 4 ms.
    # SLA TTFT 15 ms, ITL 5 ms: r0 meets only TTFT, r1 only ITL; neither meets both.
    from simkit.spec import SlaSpec
    from simkit.output.report import summarize
    from simkit.sim import simulate
    from conftest import scenario

    s = scenario(latency={"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0}, block_size=16)
    records = simulate(s, [req(0, 0, 16, 3, tbs=16), req(1, 5, 16, 2, tbs=16)])
    assert [r.ttft_s * 1000 for r in records.requests] == [pytest.approx(10.0), pytest.approx(19.0)]
    g = summarize(records, SlaSpec(ttft_ms=15.0, itl_ms=5.0))["goodput"]
    assert g["fraction"] == 0.0 and g["requests_per_s"] == 0.0
    assert g["fraction_by_bound"] == {"ttft_ms": 0.5, "itl_ms": 0.5}
    # with ITL 10 ms, r0 meets both: half the requests, 3 of the 5 output tokens over 28 ms
    g = summarize(records, SlaSpec(ttft_ms=15.0, itl_ms=10.0))["goodput"]
    assert g["fraction"] == 0.5 and g["fraction_by_bound"] == {"ttft_ms": 0.5, "itl_ms": 1.0}
    assert g["output_tokens_per_s"] == pytest.approx(3 / 0.028)
