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
