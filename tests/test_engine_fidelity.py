"""Engine behaviours with exact, hand-derived outcomes: preemption order, backends, and the
engine bug classes of REFERENCE.md section 8 not covered in test_timing.py / test_kvcache.py.

Times use the constant latency model (prefill pass 10 ms, decode pass 4 ms, a mixed pass
both) unless a derivation says otherwise; compared in ms up to float rounding.
"""

from __future__ import annotations

import pytest

from conftest import req, run

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
    from simkit.config import ConfigError, scenario_from_dict
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
