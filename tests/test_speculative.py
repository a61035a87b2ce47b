"""Speculative decoding: verify rounds derived by hand on the reference polynomial, the
reference's own measured values where simkit offers its way (ai-dynamo-runtime 1.6.1,
``aic_nextn``; README "Speculative decoding"), sampling, KV, pricing and the configuration.

Times in ms; P(n) and D(a) are the polynomial (``conftest``), C = 16384 x 64 tokens.
"""

from __future__ import annotations

import random

import pytest

from simkit import scenario_from_dict
from simkit.core.request import Request
from simkit.engine.latency import make_latency_model
from simkit.engine.latency.speculative import SpeculativeRoofline
from simkit.output.report import summarize
from simkit.sim import simulate
from simkit.spec import ConfigError

from conftest import D, P


def ms(seconds):
    return seconds * 1000


def run(reqs, speculative=None, mode="aggregated", **pool):
    engine = dict(pool)
    data = {"latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True}}
    if mode == "aggregated":
        data["pools"] = {"aggregated": dict(engine, speculative=speculative)}
    else:
        data["pools"] = {"prefill": engine, "decode": dict(engine, speculative=speculative)}
        data["link"] = {"bandwidth_gb_per_s": None, "sharing": "uncontended"}
    return simulate(scenario_from_dict(data), reqs, record_passes=True)


ONE = [Request(0, 0.0, 1000, 10, (1, 2), 512)]


def test_all_drafts_accepted_emit_k_plus_1_tokens_a_round():
    # k = 2, rates 1, 1: the prompt pass emits the first token at P(1000); then rounds at
    # contexts 1001 (prompt + 1 token), 1004, 1007 emit 3 tokens each: 1 + 3 + 3 + 3 = 10
    r = run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [1, 1]})
    times = [ms(t) for t in r.token_times[0]]
    t1 = P(1000)
    t2 = t1 + D(1001)
    t3 = t2 + D(1004)
    t4 = t3 + D(1007)
    assert times == pytest.approx([t1, t2, t2, t2, t3, t3, t3, t4, t4, t4], rel=1e-12)
    rec = r.requests[0]
    assert (rec.verify_rounds, rec.accepted_drafts, rec.accept_length) == (3, 6, 3.0)
    assert [p.decode_context_tokens for p in r.pass_log if p.decode_requests] == [1001, 1004, 1007]


def test_the_second_draft_never_accepted_emits_two_tokens_and_the_last_round_is_cut():
    # rates 1, 0: 2 tokens a round at contexts 1001, 1003, 1005, 1007 (9 tokens), then a round
    # at 1009 emits 2 cut to the 1 token left
    r = run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [1, 0]})
    assert [p.decode_context_tokens for p in r.pass_log if p.decode_requests] == [1001, 1003, 1005, 1007, 1009]
    last = P(1000) + sum(D(a) for a in (1001, 1003, 1005, 1007, 1009))
    assert ms(r.requests[0].last_token_at) == pytest.approx(last, rel=1e-12)
    assert r.requests[0].accept_length == 2.0  # counted before the cut, as the reference does
    s = summarize(r)["speculative"]
    assert s["verify_rounds"] == 5 and s["tokens_per_round"] == 9 / 5 and s["acceptance_by_position"] == [1.0, 0.0]


def test_sampled_rounds_follow_the_requests_own_stream():
    # rates 0.5, 0: draft 1 accepted when the request's stream "0/aggregated/speculative/0" draws
    # u < 0.5; draft 2 is never accepted (a rate of 0 draws nothing)
    rng = random.Random("0/aggregated/speculative/0")
    generated, contexts = 1, []
    while generated < 10:
        contexts.append(1000 + generated)
        generated += min(1 + (rng.random() < 0.5), 10 - generated)
    r = run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [0.5, 0]})
    assert [p.decode_context_tokens for p in r.pass_log if p.decode_requests] == contexts
    assert ms(r.requests[0].last_token_at) == pytest.approx(P(1000) + sum(D(a) for a in contexts), rel=1e-12)
    # the same seed replays, another seed draws otherwise
    assert run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [0.5, 0]}).requests == r.requests
    other = run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [0.5, 0], "seed": 7})
    assert other.requests[0].verify_rounds == len([p for p in other.pass_log if p.decode_requests])


def test_the_accept_length_asked_for_is_the_one_measured():
    # rates 0.85, 0.3: 1 + 0.85 + 0.85 x 0.3 = 2.105 tokens a round in expectation; 300
    # requests of 200 tokens: about 28,000 rounds, standard error about 0.005
    reqs = [Request(i, i * 0.05, 200, 200, (i,), 512) for i in range(300)]
    r = run(reqs, {"num_speculative_tokens": 2, "acceptance_rates": [0.85, 0.3]})
    s = summarize(r)["speculative"]
    assert s["accept_length"] == pytest.approx(2.105, abs=0.02)
    assert s["acceptance_by_position"] == pytest.approx([0.85, 0.3], abs=0.02)
    # expected mode: no randomness, 2.105 a round on average with a carry (floor(carry + E))
    e = run(reqs[:1], {"num_speculative_tokens": 2, "acceptance_rates": [0.85, 0.3], "sampling": "expected"})
    carry, tokens = 0.0, []
    for _ in range(5):
        total = carry + 2.105
        tokens.append(int(total))
        carry = total - int(total)
    contexts = [p.decode_context_tokens for p in e.pass_log if p.decode_requests][:5]
    assert [b - a for a, b in zip(contexts, contexts[1:])] == tokens[:4]


def test_the_references_verify_in_prefill_way_as_measured():
    # the reference's vLLM core (measured): the pass that ends the prompt is a verify round,
    # P(1000) + D(1000) = 37.897344, emitting 3 tokens; rounds at 1003, 1006, 1009 end at
    # 55.272724. With every draft rejected it runs one token a round: 90.023020
    opts = {"verify_in_prefill": True, "budget_counts_drafts": False}
    r = run(ONE, dict(opts, num_speculative_tokens=2, acceptance_rates=[1, 1]))
    assert ms(r.requests[0].ttft_s) == pytest.approx(37.897344, rel=1e-6) == pytest.approx(P(1000) + D(1000))
    assert ms(r.requests[0].last_token_at) == pytest.approx(55.272724, rel=1e-6)
    r = run(ONE, dict(opts, num_speculative_tokens=2, acceptance_rates=[0, 0]))
    assert ms(r.requests[0].last_token_at) == pytest.approx(90.023020, rel=1e-6)
    # disaggregated, only the decode worker drafts: its first round is priced D(1000) and
    # emits 3 tokens (measured: TTFT 37.897344, last token 55.272724)
    r = run(ONE, {"num_speculative_tokens": 2, "acceptance_rates": [1, 1]}, mode="disaggregated")
    assert ms(r.requests[0].ttft_s) == pytest.approx(37.897344, rel=1e-6)
    assert ms(r.requests[0].last_token_at) == pytest.approx(55.272724, rel=1e-6)


@pytest.mark.parametrize("k, contexts", [(1, (77, 78)), (3, (75, 76)), (5, (73, 74))])
def test_a_round_reserves_room_for_its_drafts(k, contexts):
    # block 16, 10 blocks (160 tokens), prompts of 48 and 49 tokens asking 40 each, every draft
    # rejected: a round at context L needs L + min(k + 1, output left) tokens of KV, so the pair
    # stops fitting earlier as k grows. The last pass that ran both, measured on the
    # reference: (79, 80) without drafts, (77, 78), (75, 76), (73, 74) for k = 1, 3, 5
    reqs = [Request(0, 0.0, 48, 40, (1, 2, 3), 16), Request(1, 0.0, 49, 40, (4, 5, 6, 7), 16)]
    spec = {"num_speculative_tokens": k, "acceptance_rates": [0.0] * k, "verify_in_prefill": True,
            "budget_counts_drafts": False}
    r = run(reqs, spec, block_size=16, num_gpu_blocks=10, enable_prefix_caching=False)
    both = [p for p in r.pass_log if p.decode_requests == 2]
    # the pair's contexts (prompt + tokens so far) of the last pass that ran both
    last = both[-1].decode_context_tokens
    assert last == sum(contexts)
    plain = run(reqs, None, block_size=16, num_gpu_blocks=10, enable_prefix_caching=False)
    assert [p for p in plain.pass_log if p.decode_requests == 2][-1].decode_context_tokens == 79 + 80


def test_the_token_budget_counts_the_drafts_or_not():
    # a 20,000-token prompt B arrives (at 20 ms) while A decodes with k = 2, budget 8192. The reference
    # charges A one token (measured first token at 471.468200: chunks 8191, 8191, 3618); vLLM charges
    # its 3 (chunks 8189, 8189, 3622)
    reqs = [Request(0, 0.0, 1000, 200, (1, 2), 512), Request(1, 0.02, 20000, 50, tuple(range(3, 43)), 512)]
    ref = run(reqs, {"num_speculative_tokens": 2, "acceptance_rates": [1, 1], "verify_in_prefill": True,
                     "budget_counts_drafts": False})
    assert ms(ref.requests[1].first_token_at) == pytest.approx(471.468200, rel=1e-6)
    assert [p.prefill_tokens for p in ref.pass_log if p.prefill_tokens and p.start_at > 0.01] == [8191, 8191, 3618]
    own = run(reqs, {"num_speculative_tokens": 2, "acceptance_rates": [1, 1]})
    assert [p.prefill_tokens for p in own.pass_log if p.prefill_tokens and p.start_at > 0.01][:2] == [8189, 8189]


def test_vllm_mtp_gives_back_the_last_matched_block_but_ngram_and_sglang_do_not():
    # vLLM with an EAGLE or MTP drafter recomputes the last matched block's last token for the
    # drafter: B (128 tokens, 3 of its 4 32-token blocks cached) hits 96 tokens without
    # drafts, 64 with MTP (measured on the reference's vllm core); TRT-LLM and SGLang keep 96
    reqs = [Request(0, 0.0, 128, 2, (1, 2, 3, 4), 32), Request(1, 0.05, 128, 5, (1, 2, 3, 9), 32)]
    mtp = {"num_speculative_tokens": 1, "acceptance_rates": [1]}
    assert run(reqs, None, block_size=32).requests[1].cached_tokens == 96
    assert run(reqs, mtp, block_size=32).requests[1].cached_tokens == 64
    assert run(reqs, dict(mtp, method="ngram"), block_size=32).requests[1].cached_tokens == 96
    assert run(reqs, mtp, block_size=32, backend="trtllm").requests[1].cached_tokens == 96
    assert run(reqs, mtp, block_size=32, backend="sglang").requests[1].cached_tokens == 96


def test_roofline_prices_the_verify_round_and_the_draft():
    base = {"kind": "roofline", "model": "Llama-3.1-70B", "gpu": "H100", "tp": 4}

    def model(spec=None):
        s = scenario_from_dict({"latency": base, "pools": {"aggregated": {"speculative": spec} if spec else {}}})
        p = s.pools.aggregated
        return make_latency_model(s.latency, p.num_gpu_blocks * p.block_size, p.speculative)

    plain, ngram, mtp = model(), model({"num_speculative_tokens": 2, "method": "ngram"}), model(
        {"num_speculative_tokens": 2})
    draft = model({"num_speculative_tokens": 2, "method": "draft_model", "draft_model": "Llama-3.1-8B"})
    assert isinstance(mtp, SpeculativeRoofline)
    for d in (1, 8, 64):
        ctx = 2000 * d
        assert plain.pass_time_s(0, d, ctx) < ngram.pass_time_s(0, d, ctx) < mtp.pass_time_s(0, d, ctx)
        # a draft model costs k of its own decode passes over the same requests
        assert draft.pass_time_s(0, d, ctx) == pytest.approx(
            ngram.pass_time_s(0, d, ctx) + 2 * draft.draft.pass_time_s(0, d, ctx), rel=1e-9)
        assert sum(op.time_s for op in mtp.breakdown(0, d, ctx)) == pytest.approx(mtp.pass_time_s(0, d, ctx), rel=1e-9)
    # a pass with no decode request is the plain one (a draft model also prefills the prompt)
    assert ngram.pass_time_s(2048, 0, 0) == plain.pass_time_s(2048, 0, 0)
    assert draft.pass_time_s(2048, 0, 0) == pytest.approx(
        plain.pass_time_s(2048, 0, 0) + draft.draft.pass_time_s(2048, 0, 0), rel=1e-9)


@pytest.mark.parametrize("pools, message", [
    ({"aggregated": {"speculative": {"num_speculative_tokens": 3, "acceptance_rates": [1, 0.5]}}},
     r"'acceptance_rates' needs a rate per draft token \(3\) or one rate for all, got 2"),
    ({"aggregated": {"speculative": {"acceptance_rates": [1.5]}}}, r"must be numbers in \[0, 1\]"),
    ({"aggregated": {"speculative": {"acceptance_rates": "0.85,0.3"}}}, "expected a list of numbers"),
    ({"aggregated": {"speculative": {"method": "draft_model"}}}, "'method: draft_model' needs 'draft_model'"),
    ({"aggregated": {"speculative": {"draft_model": "Llama-3.1-8B"}}}, "'draft_model' applies only to method"),
    ({"aggregated": {"speculative": {"method": "draft_model", "draft_model": "Llama-3.1-8B"}}},
     "a draft model is priced by a roofline latency model"),
    ({"prefill": {"speculative": {}}, "decode": {}}, "'prefill': 'speculative' applies to the pools that decode"),
    ({"aggregated": {"backend": "sglang", "speculative": {"verify_in_prefill": True}}},
     "'speculative.verify_in_prefill' is the reference's vLLM and TRT-LLM cores' way"),
])
def test_settings_that_cannot_be_honoured_are_one_line_errors(pools, message):
    with pytest.raises(ConfigError, match=message):
        scenario_from_dict({"pools": pools})


@pytest.mark.parametrize("rates, expected", [
    (0.7, (0.7, 0.7, 0.7)),                 # one number: every position
    ([0.6], (0.6, 0.6, 0.6)),               # a list of one, the same
    ([0.9, 0.8, 0.7, 0.6, 0.5], (0.9, 0.8, 0.7)),  # a longer profile: its first k
])
def test_acceptance_rates_broadcast_and_profile_cut(rates, expected):
    spec = scenario_from_dict({"pools": {"aggregated": {"speculative": {
        "num_speculative_tokens": 3, "acceptance_rates": rates}}}})
    got = spec.pools.aggregated.speculative
    assert got.acceptance_rates == expected
    # 1 + a1 + a1 a2 + a1 a2 a3, by hand for the first case: 1 + .7 + .49 + .343 = 2.533
    p, total = 1.0, 1.0
    for r in expected:
        p *= r
        total += p
    assert got.expected_tokens == pytest.approx(total, rel=1e-12)


def test_runs_of_verify_rounds_are_fast_forwarded_and_equal_stepping(monkeypatch):
    """Runs of verify rounds are laid out ahead (each request's draws taken from its stream in
    order) and give the records of pass-by-pass stepping, bit for bit, KV pressure included;
    the plans are really used (not a property that holds because nothing is fast-forwarded)."""
    from simkit.engine.scheduler.base import Scheduler

    plans = []
    original = Scheduler.verify_run

    def counting(self, batch, track_used=False):
        plan = original(self, batch, track_used)
        if plan is not None:
            plans.append(plan)
        return plan

    monkeypatch.setattr(Scheduler, "verify_run", counting)
    rng = random.Random(5)
    reqs = []
    t = 0.0
    for rid in range(120):
        t += rng.expovariate(4.0)
        isl = rng.randint(50, 3000)
        reqs.append(Request(rid, t, isl, rng.randint(1, 300), tuple(rid % 7 * 100 + j for j in range(-(-isl // 512))), 512))
    for backend, blocks in (("vllm", 16384), ("vllm", 120), ("trtllm", 400)):
        data = {"latency": {"kind": "polynomial"},
                "pools": {"aggregated": {"workers": 2, "backend": backend, "block_size": 64, "num_gpu_blocks": blocks,
                                         "speculative": {"num_speculative_tokens": 3,
                                                         "acceptance_rates": [0.9, 0.6, 0.3]}}}}
        scenario = scenario_from_dict(data)
        plans.clear()
        fast = simulate(scenario, reqs, fast_forward=True, record_passes=True)
        assert len(plans) > 20 and sum(len(p.ctxs) for p in plans) > 200
        slow = simulate(scenario, reqs, fast_forward=False, record_passes=True)
        assert fast == slow
        assert all(r.status == "completed" for r in fast.requests)


def test_a_request_that_fits_only_without_the_drafts_room_is_rejected_up_front():
    """Known difference: 48 + 17 tokens in a 64-slot cache (4 blocks of 16) complete without
    speculation (the KV holds prompt + output - 1 = 64 tokens at the end), but a round with
    k = 5 near the end needs L + min(6, output left) slots: the reference preempts it and
    prefills it again forever (measured: it never ends); simkit rejects it at once."""
    for spec, status in ((None, "completed"), ({"num_speculative_tokens": 5, "acceptance_rates": 0.0}, "rejected")):
        scenario = scenario_from_dict({"latency": {"kind": "polynomial"}, "pools": {"aggregated": {
            "block_size": 16, "num_gpu_blocks": 4, "enable_prefix_caching": False, "speculative": spec}}})
        assert simulate(scenario, [Request(0, 0.0, 48, 17, None, 16)]).requests[0].status == status


def test_sglang_decode_workers_whose_arrived_prompts_fill_the_cache_retract_one_for_the_first_drafts():
    # found by the invariant property (twice): SGLang disaggregated, MTP k = 1, a decode worker of
    # 134 16-token pages. The three prompts' KV (607, 129 and 1377 tokens: 38 + 9 + 87 = 134
    # pages) arrives and fills it; the first needs one more page for its first verify round's
    # draft, nothing runs to free one, and no pass ever ran. Now the newest is retracted (its
    # prompt computed again) and every request completes.
    pool = {"workers": 1, "block_size": 16, "num_gpu_blocks": 134, "max_num_batched_tokens": 256,
            "max_num_seqs": 1, "enable_prefix_caching": False, "enable_chunked_prefill": False,
            "backend": "sglang", "sglang": {"max_prefill_tokens": 256, "clip_max_new_tokens": 8,
                                            "schedule_conservativeness": 0.1}}
    sc = scenario_from_dict({"pools": {"prefill": pool, "decode": dict(pool, speculative={
        "method": "mtp", "num_speculative_tokens": 1, "acceptance_rates": [0.0]})},
        "latency": {"kind": "polynomial"}, "link": {"bandwidth_gb_per_s": None}})
    reqs = [Request(0, 0.0, 607, 2, tuple(range(10)), 64), Request(1, 0.0, 129, 1, (0, 1, 2), 64),
            Request(2, 0.0, 1377, 1, tuple(range(22)), 64)]
    records = simulate(sc, reqs, check=True)
    assert records.stop_reason == "completed"
    assert [r.status for r in records.requests] == ["completed"] * 3
