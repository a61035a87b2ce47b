"""FairShare and CappedShare: processor-sharing bandwidth, timings derived by hand."""

from __future__ import annotations

import pytest
import simpy

from hypothesis import given, settings, strategies as st

from simkit.cluster.transfer import CappedShare, FairShare

GB = 1e9


def _ends(env, share, starts):
    """Run transfers (start_s, bytes) on ``share``; their end times, in start order."""
    ends = [None] * len(starts)

    def one(i, at, nbytes):
        yield env.timeout(at)
        yield share.transfer(nbytes)
        ends[i] = env.now

    for i, (at, nbytes) in enumerate(starts):
        env.process(one(i, at, nbytes))
    env.run()
    return ends


def test_a_transfer_alone_moves_at_the_full_bandwidth():
    env = simpy.Environment()
    assert _ends(env, FairShare(env, 10 * GB), [(0.0, 1 * GB)]) == [pytest.approx(0.1, rel=1e-12)]


def test_a_later_transfer_halves_the_rate_and_the_first_speeds_up_again_when_it_ends():
    # 10 GB/s; A = 1 GB at 0, B = 1 GB at 0.05 s. A alone to 0.05 s: 0.5 GB done. Both at
    # 5 GB/s: A's last 0.5 GB take 0.1 s, A ends at 0.15; B has 0.5 GB by then, alone at
    # 10 GB/s: 0.05 s more, ends at 0.2 (2 GB / 10 GB/s: the link never idled)
    env = simpy.Environment()
    share = FairShare(env, 10 * GB)
    ends = _ends(env, share, [(0.0, 1 * GB), (0.05, 1 * GB)])
    assert ends == [pytest.approx(0.15, rel=1e-12), pytest.approx(0.2, rel=1e-12)]
    assert share.bytes_moved == 2 * GB and share.active == 0


def test_a_per_transfer_rate_under_a_shared_cap():
    # 32 GB/s each, 80 GB/s shared: four transfers get 20 each (1 GB: 0.05 s); two get 32 each
    # (1 GB: 1/32 s)
    env = simpy.Environment()
    four = _ends(env, FairShare(env, 80 * GB, 32 * GB), [(0.0, 1 * GB)] * 4)
    assert four == [pytest.approx(0.05, rel=1e-12)] * 4
    env = simpy.Environment()
    two = _ends(env, FairShare(env, 80 * GB, 32 * GB), [(0.0, 1 * GB)] * 2)
    assert two == [pytest.approx(1 / 32, rel=1e-12)] * 2
    # no shared cap: each at its own rate however many run
    env = simpy.Environment()
    assert _ends(env, FairShare(env, None, 2 * GB), [(0.0, 1 * GB)] * 3) == [pytest.approx(0.5, rel=1e-12)] * 3


def test_unequal_sizes_end_in_size_order_with_shares_recomputed_at_each_end():
    # 3 GB/s shared; sizes 1, 2, 3 GB at 0. Three at 1 GB/s: the 1 GB ends at 1 s (the others
    # have 1 and 2 GB left); two at 1.5 GB/s: the 2 GB ends at 1 + 1/1.5 = 5/3 s (the 3 GB has
    # 1 GB left); alone at 3 GB/s: ends at 5/3 + 1/3 = 2 s (6 GB / 3 GB/s)
    env = simpy.Environment()
    ends = _ends(env, FairShare(env, 3 * GB), [(0.0, 1 * GB), (0.0, 2 * GB), (0.0, 3 * GB)])
    assert ends == [pytest.approx(1.0, rel=1e-12), pytest.approx(5 / 3, rel=1e-12), pytest.approx(2.0, rel=1e-12)]


def test_zero_bytes_end_at_once_and_equal_transfers_end_at_the_same_instant():
    env = simpy.Environment()
    share = FairShare(env, 1 * GB)
    ends = _ends(env, share, [(0.0, 0), (0.0, 3 * GB), (0.0, 3 * GB), (0.0, 3 * GB)])
    assert ends[0] == 0.0
    assert ends[1] == ends[2] == ends[3] == pytest.approx(9.0, rel=1e-12)


def test_bad_bandwidths_are_refused():
    env = simpy.Environment()
    with pytest.raises(ValueError, match="needs a total or a per-transfer"):
        FairShare(env, None, None)
    with pytest.raises(ValueError, match="> 0"):
        FairShare(env, 0.0)


def _capped_ends(env, share, starts):
    """Run transfers (start_s, group, group bytes/s, bytes) on a CappedShare; their end times."""
    ends = [None] * len(starts)

    def one(i, at, group, rate, nbytes):
        yield env.timeout(at)
        yield share.transfer(group, rate, nbytes)
        ends[i] = env.now

    for i, start in enumerate(starts):
        env.process(one(i, *start))
    env.run()
    return ends


def test_four_workers_under_a_pool_cap_get_an_equal_share_of_it():
    # 4 workers at 32 GB/s each under an 80 GB/s cap: min(32 / 1, 80 / 4) = 20 GB/s each; 2 GB
    # each end at 0.1 s. Without the cap each moves at 32: 2 / 32 = 0.0625 s
    env = simpy.Environment()
    ends = _capped_ends(env, CappedShare(env, 80 * GB), [(0.0, w, 32 * GB, 2 * GB) for w in range(4)])
    assert ends == [pytest.approx(0.1, rel=1e-12)] * 4
    env = simpy.Environment()
    ends = _capped_ends(env, CappedShare(env), [(0.0, w, 32 * GB, 2 * GB) for w in range(4)])
    assert ends == [pytest.approx(0.0625, rel=1e-12)] * 4


def test_a_workers_share_and_the_pool_share_whichever_is_smaller_recomputed_at_each_end():
    # worker A: 10 GB/s, transfers A1 = 4 GB and A2 = 8 GB; worker B: 10 GB/s, B1 = 12 GB; pool
    # cap 12 GB/s. Three active: A's min(10/2, 12/3) = 4, B's min(10, 4) = 4: A1 ends at 1 s.
    # Two active: min(10, 6) = 6 each: A2 has 4 GB left, B1 8: A2 ends at 1 + 4/6 s; B1 then has
    # 4 GB left, alone at min(10, 12) = 10 GB/s: ends 0.4 s later. Unused shares are not handed
    # on (B never moves faster than 4 while three are active, though A's two leave 2 GB/s idle)
    env = simpy.Environment()
    share = CappedShare(env, 12 * GB)
    ends = _capped_ends(env, share, [(0.0, "A", 10 * GB, 4 * GB), (0.0, "A", 10 * GB, 8 * GB),
                                     (0.0, "B", 10 * GB, 12 * GB)])
    assert ends == [pytest.approx(1.0, rel=1e-12), pytest.approx(1 + 4 / 6, rel=1e-12),
                    pytest.approx(1 + 4 / 6 + 0.4, rel=1e-12)]
    assert share.bytes_moved == 24 * GB and share.active == 0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 2), st.floats(0, 5e9)), min_size=1, max_size=8))
def test_one_group_without_a_cap_is_the_fair_share_of_its_bandwidth(starts):
    # a single worker and no pool cap: each of its n transfers moves at rate / n, as FairShare
    env = simpy.Environment()
    fair = _ends(env, FairShare(env, 10 * GB), starts)
    env = simpy.Environment()
    capped = _capped_ends(env, CappedShare(env), [(at, 0, 10 * GB, n) for at, n in starts])
    assert capped == [pytest.approx(f, rel=1e-9, abs=1e-12) for f in fair]


def test_capped_share_refuses_a_bandwidth_that_is_not_positive():
    with pytest.raises(ValueError, match="must be > 0"):
        CappedShare(simpy.Environment(), 0.0)
