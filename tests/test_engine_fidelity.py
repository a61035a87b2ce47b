"""Engine behaviours with exact, hand-derived outcomes: preemption order, backends, and the
engine bug classes of REFERENCE.md section 8 not covered in test_timing.py / test_kvcache.py.

Times use the constant latency model (prefill pass 10 ms, decode pass 4 ms, a mixed pass
both) unless a derivation says otherwise; compared in ms up to float rounding.
"""

from __future__ import annotations

import pytest

from simkit import scenario_from_dict
from simkit.sim import simulate

from conftest import REPO, D, P, req, run

ms = lambda x: pytest.approx(x, rel=1e-9)  # noqa: E731
CONST = {"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0}


@pytest.mark.parametrize("mode, victim", [("lifo", 2), ("fifo", 0)])
def test_preemption_order_lifo_takes_the_newest_fifo_the_oldest(mode, victim):
    # 5 blocks of 16 tokens; three 16-token prompts (1 block each), 4 output tokens each.
    # pass 1 [0, 10]: prefill 48 tokens, token 1 for all (3 blocks used).
    # pass 2 at 10: each decode needs a 2nd block; r0 and r1 take the last two; r2 finds none.
    #   lifo: the newest running request, r2 itself, is preempted.
    #   fifo: the oldest, r0, is preempted: its pass-2 entry and blocks are taken back and r2
    #   gets a block. Either way two decode [10, 14], [14, 18], [18, 22]: they end at 22 ms.
    #   The victim's prompt block stays cached but its recompute needs 1 more block, free only
    #   at 22: pass [22, 32] recomputes 1 token (16 cached) and emits token 2; then 36, 40.
    recs = run([req(i, 0, 16, 4, [i], tbs=16) for i in range(3)], block_size=16, num_gpu_blocks=5,
               latency=CONST, preemption_mode=mode)
    for r in recs:
        assert r.ttft_s * 1000 == ms(10.0)
        assert r.finished_at * 1000 == ms(40.0 if r.rid == victim else 22.0)
    assert recs[victim].cached_tokens == 0  # first admission: nothing cached yet


def test_preemption_mode_is_validated():
    from simkit.spec import ConfigError
    with pytest.raises(ConfigError, match=r"expected one of: lifo, fifo, got 'random' @ \$\.pools\.aggregated\.preemption_mode"):
        scenario_from_dict({"pools": {"aggregated": {"preemption_mode": "random"}}})


def test_trtllm_guaranteed_no_evict_admits_only_whole_requests_that_fit():
    # 10 blocks of 16 tokens. r0: 64-token prompt + 64 output = 128 tokens = 8 blocks to
    # completion; r1: 32 + 8 = 40 tokens = 3 blocks. 8 + 3 > 10, so under trtllm r1 waits
    # although its prompt (2 blocks) fits beside r0's (4 blocks).
    # r0: prefill [0, 10], then 63 decode passes: ends at 10 + 63 * 4 = 262 ms.
    # r1: admitted at 262: prefill [262, 272], 7 decode passes: ends at 300 ms.
    reqs = [req(0, 0, 64, 64, tbs=16), req(1, 0, 32, 8, tbs=16)]
    r0, r1 = run(reqs, block_size=16, num_gpu_blocks=10, latency=CONST, backend="trtllm")
    assert (r0.ttft_s * 1000, r0.finished_at * 1000) == (ms(10.0), ms(262.0))
    assert (r1.first_admitted_at * 1000, r1.ttft_s * 1000, r1.finished_at * 1000) == (ms(262.0), ms(272.0), ms(300.0))
    # vllm admits r1 at once (its prompt fits): both prompts in the first pass
    v0, v1 = run(reqs, block_size=16, num_gpu_blocks=10, latency=CONST)
    assert v0.ttft_s == v1.ttft_s == pytest.approx(0.010)


def test_trtllm_cuts_the_output_to_the_cache_and_rejects_prompts_that_fill_it():
    # 160-token cache: a 150-token prompt asking 20 tokens generates the 10 that fit (as the
    # reference does: measured 1200 + 200 on 1280 tokens gives 80); a 160-token prompt leaves
    # no room and is rejected; the request behind both completes.
    reqs = [req(0, 0, 150, 20, tbs=16), req(1, 0, 160, 5, tbs=16), req(2, 0, 16, 3, tbs=16)]
    r0, r1, r2 = run(reqs, block_size=16, num_gpu_blocks=10, latency=CONST, backend="trtllm")
    assert (r0.status, r0.output_length, r0.requested_output_length) == ("completed", 10, 20)
    assert (r1.status, r1.output_length) == ("rejected", 0)
    # r0 reserves all 10 blocks: r2 waits until r0 ends (10 + 9 * 4 = 46 ms), then 10 + 2 * 4
    assert (r0.finished_at * 1000, r2.first_admitted_at * 1000, r2.finished_at * 1000) == (ms(46.0), ms(46.0), ms(64.0))


SGLANG = {"backend": "sglang", "block_size": 4, "num_gpu_blocks": 1000, "sglang": {"chunked_prefill_size": 8}}


def run_pages_of_4(requests, **pool):
    """``requests`` on one aggregated worker with 4-token blocks (pages) and ``pool`` settings."""
    data = {"workload": {"kind": "synthetic", "trace_block_size": 4}, "pools": {"aggregated": pool}}
    return simulate(scenario_from_dict(data), requests).requests


def test_sglang_packs_a_prompt_and_a_chunk_of_another_into_the_chunk_budget():
    # chunk budget 8 tokens, pages of 4: r0's 4-token prompt takes 4; r1's 8-token prompt does
    # not fit what is left, so it takes a page-aligned chunk of 4. Pass 1 [0, P(8)]: r0's
    # token 1. Pass 2 is an extend pass for r1's last 4 tokens (r0 does not decode in it):
    # r1's token 1 at P(8) + P(4). Then decode passes of both (a = 5 + 9, then 6 + 10, ...).
    # Measured on the reference (sglang core, same settings): TTFT 16.622914 and 33.185074 ms.
    r0, r1 = run_pages_of_4([req(0, 0, 4, 3, [1], tbs=4), req(1, 0, 8, 4, [2, 3], tbs=4)], **SGLANG)
    C = 1000 * 4
    assert r0.ttft_s * 1000 == ms(P(8))
    assert r1.ttft_s * 1000 == ms(P(8) + P(4))
    assert r0.ttft_s * 1000 == pytest.approx(16.622914, abs=1e-6)
    assert r1.ttft_s * 1000 == pytest.approx(33.185074, abs=1e-6)
    assert r0.second_token_at * 1000 == ms(P(8) + P(4) + D(5 + 9, C))
    # vllm mixes: pass 2 is r1's last 4 prompt tokens plus r0's decode
    v0, v1 = run_pages_of_4([req(0, 0, 4, 3, [1], tbs=4), req(1, 0, 8, 4, [2, 3], tbs=4)], block_size=4,
                            num_gpu_blocks=1000, max_num_batched_tokens=8)
    assert v1.ttft_s * 1000 == ms(P(8) + P(4) + D(5, C))


@pytest.mark.parametrize("mixed, r0_tokens_ms, r1_tokens_ms", [  # (first, second, last) and (first, last)
    # not mixed: pass 3 [14, 24] extends r1's first 64 tokens, pass 4 [24, 34] its last 36
    # (r0 waits in both); then decode passes of both [34, 38] and of r0 [38, 42]
    (False, [10, 14, 42], [34, 38]),
    # mixed: r0 decodes in every extend pass, one token of the 64 chunk budget: pass 3 is
    # r1's page-aligned 48 tokens (63 // 16 * 16) + r0's decode [14, 28], pass 4 r1's last 52
    # + r0's decode [28, 42]; then r1 decodes alone [42, 46]
    (True, [10, 14, 42], [42, 46]),
])
def test_sglang_mixed_chunk_decodes_the_running_requests_in_extend_passes(mixed, r0_tokens_ms, r1_tokens_ms):
    # constant model: extend pass 10 ms, decode pass 4 ms, a mixed pass 14 ms; pages of 16,
    # chunk budget 64. r0 (16-token prompt, 4 tokens) at 0: extend [0, 10], decode [10, 14];
    # r1 (100-token prompt, 2 tokens) arrives at 12 ms, during r0's decode pass.
    pool = {"backend": "sglang", "block_size": 16, "num_gpu_blocks": 1000,
            "sglang": {"chunked_prefill_size": 64, "enable_mixed_chunk": mixed}}
    reqs = [req(0, 0, 16, 4, tbs=16), req(1, 12, 100, 2, tbs=16)]
    r0, r1 = run(reqs, latency=CONST, **pool)
    assert (r0.first_token_at * 1000, r0.second_token_at * 1000, r0.finished_at * 1000) == (
        ms(r0_tokens_ms[0]), ms(r0_tokens_ms[1]), ms(r0_tokens_ms[2]))
    assert (r1.first_token_at * 1000, r1.finished_at * 1000) == (ms(r1_tokens_ms[0]), ms(r1_tokens_ms[1]))


@pytest.mark.parametrize("interval, r1_first_ms", [
    # constant model: extend 10 ms, decode 4 ms. r0 (16 tokens, 6 out) extends [0, 10]; r1
    # (16 tokens, 2 out) arrives at 5 ms, during it. 0: r1 extends next [10, 20]; 1: one
    # decode pass of r0 first [10, 14], then r1 [14, 24]; 2: [10, 14], [14, 18], r1 [18, 28]
    (0, 20), (1, 24), (2, 28),
])
def test_sglang_prefill_decode_interval_puts_decode_passes_between_extends(interval, r1_first_ms):
    pool = {"backend": "sglang", "block_size": 16, "num_gpu_blocks": 1000,
            "sglang": {"prefill_decode_interval": interval}}
    r0, r1 = run([req(0, 0, 16, 6, tbs=16), req(1, 5, 16, 2, tbs=16)], latency=CONST, **pool)
    assert r0.first_token_at * 1000 == ms(10)
    assert r1.first_token_at * 1000 == ms(r1_first_ms)


@pytest.mark.parametrize("interval, first_tokens_ms", [
    (0, (64.981, 64.981)), (1, (70.774, 70.774)), (2, (76.567, 76.567)), (4, (88.153, 88.153)),
])
def test_sglang_prefill_decode_interval_as_the_reference_measures_it(interval, first_tokens_ms):
    # The reference (ai-dynamo-runtime 1.6.1, SGLang core, its polynomial model, one worker):
    # two 512-token prompts at 0 (60 out) and two more at 1 and 2 ms; their first tokens come
    # one decode pass (5.793 ms) later per unit of the interval. Measured with
    # `python benchmarks/probe_reference_dp.py --probes sglang_prefill_decode_interval` (dp 1 rows:
    # TTFT 63.981 / 69.774 / 75.567 / 87.153 ms for the 1 ms prompt, 1 ms less for the other).
    from simkit import load_scenario, override
    scenario = override(load_scenario(str(REPO / "scenarios" / "reference_agg.yaml")), {
        "pools.aggregated.workers": 1, "pools.aggregated.backend": "sglang",
        "pools.aggregated.sglang.budgets_count_chunks": True,
        "pools.aggregated.sglang.prefill_decode_interval": interval})
    prompts = [(0.0, 60), (0.0, 60), (1.0, 2), (2.0, 2)]
    records = simulate(scenario, [req(i, at, 512, out, ids=[i + 1]) for i, (at, out) in enumerate(prompts)])
    got = tuple(round(r.first_token_at * 1000, 3) for r in records.requests[2:])
    assert got == first_tokens_ms


def test_sglang_prefill_decode_interval_never_holds_an_idle_worker():
    # r0 (16 tokens, 2 out) is done at 14 ms; r1 arrives at 100 ms with nothing running: it
    # extends at once whatever the interval (nothing to decode first), first token at 110
    pool = {"backend": "sglang", "block_size": 16, "num_gpu_blocks": 1000,
            "sglang": {"prefill_decode_interval": 3}}
    r0, r1 = run([req(0, 0, 16, 2, tbs=16), req(1, 100, 16, 2, tbs=16)], latency=CONST, **pool)
    assert (r0.finished_at * 1000, r1.first_token_at * 1000) == (ms(14), ms(110))
    from simkit.spec import ConfigError
    with pytest.raises(ConfigError, match=r"'decode': 'sglang.prefill_decode_interval' applies only to an "
                                          r"aggregated pool"):
        held = {"backend": "sglang", "sglang": {"prefill_decode_interval": 2}}
        scenario_from_dict({"pools": {"prefill": {"backend": "sglang"}, "decode": held}})


def test_sglang_mixed_chunk_needs_chunked_prefill_and_an_aggregated_pool():
    # SGLang's is_mixed_chunk is off without chunked prefill, and mixes nothing on a prefill
    # or decode worker; simkit says so instead of ignoring the setting
    from simkit.spec import ConfigError
    mixed = {"backend": "sglang", "sglang": {"enable_mixed_chunk": True}}
    with pytest.raises(ConfigError, match=r"'sglang.enable_mixed_chunk' needs 'enable_chunked_prefill': true "
                                          r".* @ \$\.pools\.aggregated$"):
        scenario_from_dict({"pools": {"aggregated": {**mixed, "enable_chunked_prefill": False}}})
    with pytest.raises(ConfigError, match=r"'decode': 'sglang.enable_mixed_chunk' applies only to an aggregated "
                                          r"pool .* @ \$\.pools$"):
        scenario_from_dict({"pools": {"prefill": {"backend": "sglang"}, "decode": mixed}})


def test_sglang_chunk_budget_must_hold_a_page():
    # a prompt longer than the chunk budget is cut into whole pages of it: a budget below one
    # page would never let it start (found by a hostile walk: the run ended "stuck")
    from simkit.spec import ConfigError
    with pytest.raises(ConfigError, match=r"'sglang.chunked_prefill_size' \(16\) must be at least 'block_size' "
                                          r"\(64\).* @ \$\.pools\.aggregated$"):
        scenario_from_dict({"pools": {"aggregated": {"backend": "sglang", "sglang": {"chunked_prefill_size": 16}}}})
    # the default chunk budget is SGLang's 8192, not max_num_batched_tokens (the reference's too)
    with pytest.raises(ConfigError, match=r"the default chunk budget \(8192, 'sglang.chunked_prefill_size'\) "
                                          r"\(8192\) must be at least 'block_size' \(16384\)"):
        scenario_from_dict({"pools": {"aggregated": {"backend": "sglang", "block_size": 16384}}})
    scenario_from_dict({"pools": {"aggregated": {"backend": "sglang", "max_num_batched_tokens": 32}}})
    # without chunking, or on vllm (chunks of any token count), such budgets are valid
    scenario_from_dict({"pools": {"aggregated": {"backend": "sglang", "block_size": 16384,
                                                 "enable_chunked_prefill": False}}})
    scenario_from_dict({"pools": {"aggregated": {"max_num_batched_tokens": 32}}})


def test_sglang_decode_waits_while_another_prompt_extends():
    # r0 (1000 tokens, 100 output) decodes; r1's 20000-token prompt arrives at 100 ms and takes
    # three extend passes (8192, 8192, 3616 tokens) in which r0 produces nothing. Measured on
    # the reference: r0 ends at 1022.940723 ms, r1's TTFT is 416.791015 ms.
    recs = run([req(0, 0, 1000, 100), req(1, 100, 20000, 3)], backend="sglang",
               latency={"kind": "polynomial", "prefill_tokens_from_batch_means": True})
    assert recs[0].finished_at * 1000 == pytest.approx(1022.940723, abs=1e-5)
    assert recs[1].ttft_s * 1000 == pytest.approx(416.791015, abs=1e-5)


def run_sglang_pages_of_16(requests, num_gpu_blocks):
    """``requests`` on one sglang worker with 16-token pages, as the reference was probed."""
    data = {"workload": {"kind": "synthetic", "trace_block_size": 16},
            "latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True},
            "pools": {"aggregated": {"backend": "sglang", "block_size": 16, "num_gpu_blocks": num_gpu_blocks,
                                     "sglang": {"budgets_count_chunks": True}}}}
    return simulate(scenario_from_dict(data), requests).requests


def test_sglang_frees_a_duplicate_prompt_page_when_the_tree_already_has_it():
    # 12 pages of 16 tokens. t=0: r0 and r1 bring the same 64-token prompt (4 pages each, in
    # one extend pass, so neither reuses the other's). After the pass the radix tree keeps r0's
    # pages; r1 is switched to them and its 4 duplicates are free at once. r0 ends with its
    # only token; r1's 3 tokens need a 5th page (partial, freed when it ends). t=1 s: r2's 8
    # unique pages fit the 8 free ones, so nothing is evicted, and at t=2 s r3 (the same 4
    # pages + 1) reuses all 64 tokens and computes 16: TTFT P(16). Kept duplicates (vLLM's
    # way) would be cached after r0's pages, and r2 would evict those first (r3: 0 cached).
    # Measured on the reference (sglang core, same settings): 64 cached, TTFT 16.744 ms.
    recs = run_sglang_pages_of_16([req(0, 0, 64, 1, [1, 2, 3, 4], tbs=16), req(1, 0, 64, 3, [1, 2, 3, 4], tbs=16),
                                   req(2, 1000, 128, 1, range(11, 19), tbs=16),
                                   req(3, 2000, 80, 1, [1, 2, 3, 4, 5], tbs=16)], num_gpu_blocks=12)
    assert [r.cached_tokens for r in recs] == [0, 0, 0, 64]
    assert recs[3].ttft_s * 1000 == ms(P(16))
    assert recs[3].ttft_s * 1000 == pytest.approx(16.744, abs=1e-3)


@pytest.mark.parametrize("output, cached", [(3, 48), (4, 32)])
def test_sglang_gives_each_generated_token_a_kv_slot(output, cached):
    # 16 pages of 16 tokens. r0's 4 prompt pages are cached from t=0. r1 (t=1 s) has a
    # 60-token prompt: 3 full pages + 12 tokens. The reference's sglang core gives every
    # generated token a slot as it is emitted, so r1 ends holding 60 + output tokens: with 3
    # tokens 63 (its 4th page partial, freed), with 4 tokens 64 (4th page full, cached). So
    # 16 - 4 - 3 = 9 or 16 - 4 - 4 = 8 pages are free when r2's 10 unique pages come at t=3 s:
    # it evicts 1 or 2 pages, oldest leaf first, from the tail: r0's last ones. r3 (r0's 4
    # pages + 1, t=4 s) then reuses 3 or 2 pages: 48 or 32 tokens, TTFT P(80 - cached).
    # Measured on the reference: 48 cached (TTFT 16.988 ms) and 32 (17.231 ms).
    recs = run_sglang_pages_of_16([req(0, 0, 64, 1, [31, 32, 33, 34], tbs=16),
                                   req(1, 1000, 60, output, [1, 2, 3, 4], tbs=16),
                                   req(2, 3000, 160, 1, range(11, 21), tbs=16),
                                   req(3, 4000, 80, 1, [31, 32, 33, 34, 35], tbs=16)], num_gpu_blocks=16)
    assert recs[3].cached_tokens == cached
    assert recs[3].ttft_s * 1000 == ms(P(80 - cached))
    assert recs[3].ttft_s * 1000 == pytest.approx({48: 16.988, 32: 17.231}[cached], abs=1e-3)


@pytest.mark.parametrize("x_output, y_at_ms, cached", [(10, 20, 48), (20, 20, 64), (20, 340, 48)])
def test_sglang_evicts_the_least_recently_used_leaf(x_output, y_at_ms, cached):
    # 16 pages of 16 tokens. x (t=0): 4 prompt pages, inserted into the radix tree at the end
    # of its prefill (17.5 ms), which uses its path; then it decodes one token per ~20 ms pass.
    # y (4 unique pages, 1 token) is inserted at the end of its own prefill. z (t=1 s) needs 9
    # pages with 8 free: it evicts 1 page of the least recently *used* leaf, from its tail.
    # w (t=2 s) is x's 4 pages + 1: it reuses 3 pages (48 tokens) if x's path is the older.
    # - x with 10 tokens holds 74 slots: no generated page completes, so its path was last
    #   used at 17.5 ms, before y's (~37 ms), though x ends last (~200 ms): x loses a page.
    #   (vLLM's least recently freed order would take y's page.)
    # - x with 20 tokens completes its 5th page at token 16 (~318 ms); the page is inserted
    #   then, which uses x's path after y's: y loses a page, w reuses all 64 tokens.
    # - the same with y at 340 ms (inserted ~358 ms, before x ends at ~400 ms): x's last use
    #   is the page insertion at ~318 ms, older than y's: x loses a page again.
    # w's TTFT is P(80 - cached). Measured on the reference (sglang core, same settings):
    # 48, 64, 48 tokens reused, TTFT 16.988, 16.744, 16.988 ms.
    recs = run_sglang_pages_of_16([req(0, 0, 64, x_output, [1, 2, 3, 4], tbs=16),
                                   req(1, y_at_ms, 64, 1, [11, 12, 13, 14], tbs=16),
                                   req(2, 1000, 144, 1, range(21, 30), tbs=16),
                                   req(3, 2000, 80, 1, [1, 2, 3, 4, 5], tbs=16)], num_gpu_blocks=16)
    assert recs[3].cached_tokens == cached
    assert recs[3].ttft_s * 1000 == ms(P(80 - cached))
    assert recs[3].ttft_s * 1000 == pytest.approx({48: 16.988, 64: 16.744}[cached], abs=1e-3)


@pytest.mark.parametrize("pool, message", [
    ({"sglang": {"schedule_policy": "lpm"}}, "'sglang' settings apply only to backend: sglang @ $.pools.aggregated"),
    ({"backend": "trtllm", "preemption_mode": "fifo"},
     "'preemption_mode' applies only to backend: vllm (trtllm never preempts by it) @ $.pools.aggregated"),
    ({"backend": "sglang", "sglang": {"schedule_policy": "longest"}},
     "expected one of: fifo, lpm, got 'longest' @ $.pools.aggregated.sglang.schedule_policy"),
])
def test_backend_settings_that_would_be_ignored_are_refused(pool, message):
    # bug class 5: an accepted key must change behaviour, so settings of another backend fail
    from simkit.spec import ConfigError
    with pytest.raises(ConfigError) as err:
        scenario_from_dict({"pools": {"aggregated": pool}})
    assert err.value.messages == [f"<scenario>: {message}"]


def sglang_disagg(reqs, prefill=4, decode=1, num_gpu_blocks=1000, prefill_blocks=None):
    """Run ``reqs`` on sglang prefill and decode workers with 16-token pages and the
    reference's polynomial pricing, as the reference was probed."""
    data = {"workload": {"kind": "synthetic", "trace_block_size": 16},
            "latency": {"kind": "polynomial", "prefill_tokens_from_batch_means": True},
            "pools": {role: {"backend": "sglang", "block_size": 16, "num_gpu_blocks": blocks, "workers": n,
                             "sglang": {"budgets_count_chunks": True}}
                      for role, n, blocks in (("prefill", prefill, prefill_blocks or num_gpu_blocks),
                                              ("decode", decode, num_gpu_blocks))}}
    return simulate(scenario_from_dict(data), reqs)


def test_sglang_decode_worker_left_idle_holds_pending_reservations_until_kv_arrives():
    # 4 prefill workers, 1 decode worker, 16-token pages (the reference's sglang core pairs a
    # request with its decode worker at dispatch; the decode worker reserves room for it, one
    # pending request per pass end, before it goes to a prefill worker). r0 (t=1 s) decodes 4
    # tokens; r1..r4 arrive at 1025..1028 ms while it runs and are reserved at its pass ends:
    # r1, r2, then r3 at r0's last pass end (r0 is done). The decode worker is then idle, and
    # r4 stays pending until the next event reaches it: r1's KV, at r1's prefill end
    # (1029.39 + P(64) = 1046.86 ms), not at once. Measured on the reference (same settings):
    # r1..r4 admitted by their prefill workers 4.39, 9.35, 14.32, 18.86 ms after arriving.
    reqs = [req(0, 1000, 64, 4, [21, 22, 23, 24], tbs=16)]
    reqs += [req(i, 1024 + i, 64, 2, [10 * i + 21 + j for j in range(4)], tbs=16) for i in range(1, 5)]
    r0, r1, r2, r3, r4 = sglang_disagg(reqs).requests
    assert r3.first_admitted_at == r0.finished_at  # reserved at r0's last pass end
    assert r4.first_admitted_at == r1.decode_admitted_at == r1.prefilled_at  # r1's KV arrives
    assert r1.prefilled_at * 1000 == ms(r1.first_admitted_at * 1000 + P(64))
    waits = [(r.first_admitted_at - r.arrived_at) * 1000 for r in (r1, r2, r3, r4)]
    assert waits == pytest.approx([4.39, 9.35, 14.32, 18.86], abs=0.01)


def test_sglang_kv_arriving_during_a_decode_pass_reserves_one_more_at_its_end():
    # 8 prefill workers (each reserved request is admitted by one at once), 1 decode worker.
    # r0 (t=0) decodes 60 tokens, one pass every ~6 ms (D(a, 16000) ~ 5.96 ms); r1..r6 (64
    # tokens, 2 each) arrive at 25 ms, during its pass 23.43 -> 29.39 ms. A reservation that
    # reaches a busy worker waits for the pass end, and each pass end reserves one: 29.39,
    # 35.35, 41.32 ms. The first reserved prompt's KV arrives at 29.39 + P(64) = 46.86 ms,
    # during the pass that ends at 47.29 ms: that pass end reserves two (its own retry and
    # the arrival's); likewise the second's KV (52.83 ms) before the 53.47 ms pass end, which
    # reserves the last. So the prefill admissions, in order, are the pass ends e2, e3, e4,
    # e5, e5, e6 of r0's tokens 2..6 (one per pass end alone would end at e7).
    # Measured on the reference: 29.390, 35.352, 41.318, 47.287, 47.287, 53.474 ms (which
    # request takes which is random there; the times are not).
    reqs = [req(0, 0, 64, 60, [21, 22, 23, 24], tbs=16)]
    reqs += [req(i, 25, 64, 2, [100 + 10 * i + j for j in range(4)], tbs=16) for i in range(1, 7)]
    records = sglang_disagg(reqs, prefill=8)
    e = records.token_times[0]  # r0's token times: e[k - 1] is pass end e_k
    admitted = sorted(r.first_admitted_at for r in records.requests[1:])
    assert admitted == [e[1], e[2], e[3], e[4], e[4], e[5]]
    assert [t * 1000 for t in admitted] == pytest.approx([29.390, 35.352, 41.318, 47.287, 47.287, 53.474],
                                                         abs=1e-3)


def test_sglang_reservation_holds_the_prompt_pages_until_the_request_ends():
    # 20 pages of 16 tokens. r0 (t=0, 64 tokens, 60 out) decodes holding 5 pages. r1 and r2
    # (t=25 ms, 160-token prompts: 10 pages each) are paired with the decode worker; the
    # first pass end after 25 ms reserves r1: 10 pages, 5 left. r2 does not fit (10 > 5) and
    # waits, though r1's prompt is not computed yet, until pages free: at r1's end (its 10
    # pages then cached, so evictable). Its prefill admission is r1's finish time.
    # Measured on the reference: the first reserved at 32.987 ms, the second at 126.730 ms,
    # when the first ends (there, which of r1 and r2 goes first is random).
    reqs = [req(0, 0, 64, 60, [21, 22, 23, 24], tbs=16)]
    reqs += [req(i, 25, 160, 2, [100 + 20 * i + j for j in range(10)], tbs=16) for i in (1, 2)]
    r0, r1, r2 = sglang_disagg(reqs, num_gpu_blocks=20).requests
    assert r2.first_admitted_at == r1.finished_at
    assert (r1.first_admitted_at * 1000, r2.first_admitted_at * 1000) == pytest.approx((32.987, 126.730), abs=1e-3)


@pytest.mark.parametrize("reused_prompt, cached", [([11, 12, 13, 14], 64), ([21, 22, 23, 24], 0)])
def test_sglang_prefill_pages_enter_the_cache_when_the_decode_side_takes_the_kv(reused_prompt, cached):
    # 1 prefill worker (47 pages of 16 tokens), 2 decode workers (round robin from r0). A
    # (t=0) keeps decode worker 0 busy for 300 tokens; X, P0 (32 pages), Y, B, C follow. P0, B
    # and C are prefilled in one pass (56.74 -> 83.12 ms). C's decode worker is idle: it takes
    # C's KV at once, and the prefill side frees C's pages, which enter its prefix cache, used
    # now. P0's and B's decode worker is mid-pass: it takes their KV at its pass end (86.74
    # ms), and only then do their pages enter the cache, used later than C's. The cache then
    # holds 43 pages (A, X, Y 1 each, P0 32, B and C 4 each), 4 free. D (t=200, 41 pages)
    # evicts 37, least recently used first: A, X, Y, C's 4 and 30 of P0's, not B's. So E
    # (t=300, B's 4 pages + 1) reuses 64 tokens, and with C's 4 pages + 1 it reuses none.
    # Measured on the reference: 64 and 0. (At the prefill pass end, as before, C's pages
    # would be the newer: E would reuse 32 and 64.)
    reqs = [req(0, 0, 16, 300, [1], tbs=16), req(1, 0, 16, 1, [2], tbs=16),
            req(2, 40, 512, 1, range(100, 132), tbs=16), req(3, 40, 16, 1, [3], tbs=16),
            req(4, 42, 64, 2, [11, 12, 13, 14], tbs=16), req(5, 48, 64, 2, [21, 22, 23, 24], tbs=16),
            req(6, 200, 41 * 16, 1, range(300, 341), tbs=16), req(7, 300, 80, 1, reused_prompt + [99], tbs=16)]
    recs = sglang_disagg(reqs, prefill=1, decode=2, prefill_blocks=47).requests
    p0, b, c = recs[2], recs[4], recs[5]
    assert p0.prefilled_at == b.prefilled_at == c.prefilled_at == c.decode_admitted_at
    assert b.decode_admitted_at * 1000 == pytest.approx(86.738, abs=1e-3)  # the busy worker's pass end
    assert recs[7].cached_tokens == cached


def test_sglang_lone_decode_request_starved_by_reservations_is_retracted():
    # 12 pages of 64 tokens, max_num_seqs 1. r0 (266 tokens, 120 out) decodes on the decode
    # worker; r1..r6 (1 token, 1 out, t=500 ms) each reserve a page there and their KV
    # arrives, but max_num_seqs keeps them waiting while r0 grows: r0 holds 6 pages by then
    # (~80 tokens out: ~346 KV tokens) and the 6 reservations the other 6, so at its 385th KV
    # token r0 cannot take a 7th page. The reference's core stalls there for good (measured: the
    # replay never ends); simkit retracts r0, runs r1..r6 one per decode pass, then recomputes
    # r0, so every request completes and r0 ends last.
    reqs = [req(0, 0, 266, 120, [1, 2, 3, 4, 5], tbs=64)]
    reqs += [req(i, 500, 1, 1, [10 + i], tbs=64) for i in range(1, 7)]
    data = {"pools": {role: {"backend": "sglang", "block_size": 64, "num_gpu_blocks": 12, "max_num_seqs": 1,
                             "max_num_batched_tokens": 64, "enable_prefix_caching": False}
                      for role in ("prefill", "decode")}}
    recs = simulate(scenario_from_dict(data), reqs, check=True).requests
    assert [r.status for r in recs] == ["completed"] * 7
    assert max(r.finished_at for r in recs[1:]) < recs[0].finished_at
    firsts = sorted(r.decode_admitted_at for r in recs[1:])
    assert all(b > a for a, b in zip(firsts, firsts[1:]))  # one at a time (max_num_seqs 1)


STARVED = [  # (pool settings, requests (at_s, prompt, output, hash ids)), found by hypothesis
    # lpm put retracted prompts before requests whose KV had arrived
    ({"block_size": 16, "num_gpu_blocks": 105, "max_num_batched_tokens": 2048, "max_num_seqs": 2,
      "enable_chunked_prefill": False,
      "sglang": {"schedule_policy": "lpm", "max_prefill_tokens": 256, "chunked_prefill_size": 128,
                 "clip_max_new_tokens": 8, "schedule_conservativeness": 0.1}},
     [(0, 1, 0, [100]), (0, 1, 0, [0]), (0, 1, 43, [0]), (0, 91, 60, [200, 201]), (0, 15, 9, [0]),
      (0, 465, 30, range(100, 108)), (0, 1, 1, [0]), (0.125, 161, 1, [0, 1, 2]), (0.125, 1, 0, [0]),
      (0.125, 25, 23, [0]), (0.125, 913, 3, range(200, 215)), (0.125, 2, 0, [0]), (0.125, 14, 32, [0]),
      (0.125, 1, 0, [100])]),
    # a retraction that left the pass empty, with a prompt it made room for
    ({"block_size": 16, "num_gpu_blocks": 47, "max_num_seqs": 4,
      "sglang": {"max_prefill_tokens": 256, "chunked_prefill_size": 128, "clip_max_new_tokens": 8}},
     [(0, 166, 60, [300, 301, 302]), (0, 59, 18, [0]), (0.125, 1548, 60, range(25)), (0.1875, 169, 58, [0, 1, 2]),
      (0.1875, 417, 49, range(7)), (0.1875, 735, 60, range(300, 312)), (0.1875, 418, 60, range(300, 307))]),
    # requests without output, queued for a reservation, bring no KV arrival to retry the next
    ({"block_size": 64, "num_gpu_blocks": 15, "max_num_batched_tokens": 256, "max_num_seqs": 1,
      "enable_prefix_caching": False, "enable_chunked_prefill": False,
      "sglang": {"max_prefill_tokens": 256, "clip_max_new_tokens": 8, "schedule_conservativeness": 0.1}},
     [(0, 833, 2, range(14))] + [(0, 1, out, [0]) for out in (0, 1, 1, 0, 0, 0, 0)]),
    # a recomputed prompt short of pages held the only seat while a ready request waited
    ({"block_size": 64, "num_gpu_blocks": 35, "max_num_batched_tokens": 256, "max_num_seqs": 1,
      "enable_prefix_caching": False,
      "sglang": {"max_prefill_tokens": 256, "clip_max_new_tokens": 8, "schedule_conservativeness": 0.1,
                 "budgets_count_chunks": True}},
     [(0, 966, 60, range(16)), (0, 1, 0, [0]), (0, 449, 1, range(8)), (0, 1, 0, [0]), (0, 641, 1, range(11)),
      (0, 1, 0, [0]), (0, 1, 0, [0]), (0, 1, 0, [0]), (0, 1153, 1, range(19))]),
]


@pytest.mark.parametrize("pool, spec", STARVED)
def test_sglang_reservations_never_starve_the_decode_worker(pool, spec):
    # small caches where held reservations, retracted prompts and ready requests compete: every
    # request completes (each of these once stopped with requests left and nothing to happen),
    # but one that can never fit the cache (the 1548-token prompt of 752 slots)
    pool = dict(pool, backend="sglang", workers=1)
    data = {"pools": {"prefill": pool, "decode": pool}, "link": {"bandwidth_gb_per_s": None}}
    reqs = [req(i, t * 1000, isl, osl, ids, tbs=64) for i, (t, isl, osl, ids) in enumerate(spec)]
    records = simulate(scenario_from_dict(data), reqs, check=True)
    assert records.stop_reason == "completed", records.stop_detail
    capacity = pool["num_gpu_blocks"] * pool["block_size"]
    assert [r.status for r in records.requests] == [
        "completed" if isl + osl + pool["block_size"] <= capacity else "rejected" for _, isl, osl, _ in spec]


@pytest.mark.parametrize("ratio, b_ttft_ms, b_end_ms", [(0.5, 35.0, 40.0), (0.1, 23.0, 28.0)])
def test_trtllm_batch_waiting_holds_prefill_back_while_requests_decode(ratio, b_ttft_ms, b_end_ms):
    # TRT-LLM batch waiting: at most 3 held passes; token threshold ratio x 1000-token budget.
    # A (100 tokens, 8 out) at 0: prefill [0, 10] (nothing decodes, so no wait): token 1.
    # B (100 tokens, 2 out) arrives at 1 ms. From 10, a pass would run B's prompt beside A's
    # decode: 100 + 1 = 101 scheduled tokens.
    # ratio 0.5 (threshold 500 > 101): three passes hold B back and decode A only: [10, 14],
    #   [14, 18], [18, 22]; the fourth runs both: [22, 36]: B's token 1 at 36 (TTFT 35), its
    #   token 2 at 40. A's tokens: 10, 14, 18, 22, 36, 40, 44, 48.
    # ratio 0.1 (threshold 100 <= 101): no wait: [10, 24] runs both (TTFT 23), then [24, 28]
    #   ends B. A's tokens: 10, 24, 28, 32, 36, 40, 44, 48.
    reqs = [req(0, 0, 100, 8), req(1, 1, 100, 2)]
    a, b = run(reqs, latency=CONST, backend="trtllm", max_num_batched_tokens=1000,
               trtllm={"batch_wait_timeout_iters": 3, "batch_wait_max_tokens_ratio": ratio})
    assert a.ttft_s * 1000 == ms(10.0)
    assert (b.ttft_s * 1000, b.finished_at * 1000) == (ms(b_ttft_ms), ms(b_end_ms))
    assert a.finished_at * 1000 == ms(48.0)


def test_trtllm_settings_apply_only_to_trtllm():
    from simkit.spec import ConfigError
    with pytest.raises(ConfigError, match=r"'trtllm' settings apply only to backend: trtllm"):
        scenario_from_dict({"pools": {"aggregated": {"trtllm": {"batch_wait_timeout_iters": 3}}}})


@pytest.mark.parametrize("async_scheduling, b_ttft_ms, a_tokens_ms", [
    (False, 16.0, [10, 14, 28, 32, 36]), (True, 20.0, [10, 14, 18, 32, 36])])
def test_async_scheduling_defers_arrivals_during_a_pass_by_one_pass(async_scheduling, b_ttft_ms, a_tokens_ms):
    # A (100 tokens, 5 out) and C (50 tokens, 2 out) reach the idle worker together at 0: one
    # prefill pass [0, 10] for both (an idle worker takes arrivals at once, deferred or not);
    # [10, 14] decodes both (C ends). B (100 tokens) arrives at 12, during that pass.
    # Without async scheduling the pass at 14 takes it: [14, 28] = B's prefill + A's decode,
    # TTFT 28 - 12 = 16. With it, the pass at 14 was formed when [10, 14] started: [14, 18]
    # decodes A alone and B joins at 18: [18, 32], TTFT 20.
    reqs = [req(0, 0, 100, 5), req(1, 12, 100, 2), req(2, 0, 50, 2)]
    records = simulate(scenario_from_dict({"latency": CONST, "pools": {"aggregated": {
        "async_scheduling": async_scheduling}}}), reqs)
    a, b, c = records.requests
    assert a.ttft_s * 1000 == c.ttft_s * 1000 == ms(10.0)
    assert c.finished_at * 1000 == ms(14.0)
    assert b.ttft_s * 1000 == ms(b_ttft_ms)
    assert [t * 1000 for t in records.token_times[0]] == [ms(t) for t in a_tokens_ms]
