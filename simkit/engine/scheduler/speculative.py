"""Speculative decoding in the scheduler: how many tokens each verify round of a request emits
(:class:`Acceptance`), and the counts a request keeps of its rounds (:class:`SpecStats`).

A verify round of a request with k draft tokens accepts drafts one after another, draft i
with probability ``a_i`` given that drafts 1..i-1 were accepted (Dynamo's
``aic_nextn_accept_rates``, measured on ai-dynamo-runtime 1.6.1: rates 0.5, 1 give 1 or 3
tokens, never 2), and emits 1 + the accepted drafts, cut to the output left. Each request
draws from its own stream, named after the scenario's (or the spec's) seed, the pool and the
request, so its rounds are the same whatever else runs, in any order, and however the passes
are grouped (fast-forward stays exact); a rate of 0 or 1 draws nothing. ``sampling:
expected`` emits the expected count with a fractional carry instead: floor(carry + E) tokens,
E = 1 + a1 + a1 a2 + ..., the rest carried to the next round.

Part of :mod:`simkit.engine`: pure, no SimPy.
"""

from __future__ import annotations

import random
from collections import deque
from typing import Optional

from simkit.spec import SpeculativeSpec

__all__ = ["Acceptance", "SpecStats", "VerifyRun"]


class Acceptance:
    """The verify rounds of one request: :meth:`accepted` gives the drafts accepted in its next
    round (0..k), in round order."""

    __slots__ = ("rates", "k", "rng", "expected", "carry", "ahead")

    def __init__(self, spec: SpeculativeSpec, stream: str) -> None:
        self.rates = spec.rates
        self.k = spec.num_speculative_tokens
        self.expected: Optional[float] = spec.expected_tokens if spec.sampling == "expected" else None
        self.rng = random.Random(stream) if self.expected is None else None
        self.carry = 0.0
        #: rounds drawn ahead by :meth:`peek` (a fast-forward plan), handed out first, in order
        self.ahead: deque = deque()

    def accepted(self) -> int:
        """Drafts accepted in the next round (conditional acceptance, or the expected count)."""
        if self.ahead:
            return self.ahead.popleft()
        return self._draw()

    def peek(self, i: int) -> int:
        """What :meth:`accepted` will return ``i`` rounds from now (0: the next), drawn ahead
        and kept, so that peeking changes nothing the rounds get."""
        ahead = self.ahead
        while len(ahead) <= i:
            ahead.append(self._draw())
        return ahead[i]

    def _draw(self) -> int:
        if self.expected is not None:
            total = self.carry + self.expected
            tokens = int(total)
            self.carry = total - tokens
            return min(tokens - 1, self.k)
        j = 0
        rng = self.rng
        for rate in self.rates:
            if rate >= 1.0 or (rate > 0.0 and rng.random() < rate):
                j += 1
            else:
                break
        return j


class SpecStats:
    """A request's verify rounds: ``rounds``, ``accepted`` drafts in all, ``tokens`` emitted
    (cut to the output left) and ``by_count[j]`` the rounds that accepted j drafts, from which
    ``by_position[i]`` (the rounds whose draft i + 1 was accepted) and ``tried[i]`` (those that
    tried it: the first i were accepted) follow."""

    __slots__ = ("rounds", "accepted", "by_count", "tokens")

    def __init__(self, k: int) -> None:
        self.rounds = 0
        self.accepted = 0
        self.by_count = [0] * (k + 1)
        self.tokens = 0

    def record(self, j: int, emitted: int) -> None:
        """One round that accepted ``j`` drafts and emitted ``emitted`` tokens."""
        self.rounds += 1
        self.accepted += j
        self.tokens += emitted
        self.by_count[j] += 1

    @property
    def by_position(self) -> list[int]:
        """Per draft position i (0-based), the rounds that accepted draft i + 1."""
        out, total = [], 0
        for count in reversed(self.by_count[1:]):
            total += count
            out.append(total)
        return out[::-1]

    @property
    def tried(self) -> list[int]:
        """Per draft position i (0-based), the rounds that tried draft i + 1."""
        return [self.rounds] + self.by_position[:-1] if len(self.by_count) > 1 else []


class VerifyRun:
    """The plan of a fast-forwarded run of pure-decode passes of verify rounds (the same
    requests every pass, nothing waiting): pass by pass, each request's round draws ahead from
    its own stream (:meth:`Acceptance.peek`), so the context each pass prices is known before it
    runs. The plan ends (``closed``) with the pass in which a request finishes, or before a
    pass whose KV room would have to evict a cached block or preempt: such passes are left to
    pass-by-pass stepping. Laying a pass out applies nothing; the scheduler applies the passes
    with the same operations as stepping (``Scheduler.advance_decode_run``).

    KV: after a round a request holds blocks for its computed tokens (the rejected drafts'
    given back, ``Scheduler._trim``; its keyed prompt blocks are fewer), and the next round
    takes room for min(k + 1, output left) more (``Scheduler.decode_width``), so pass p holds
    sum over requests of ceil((computed + 1 + width) / block_size) blocks; it runs without
    evicting while that exceeds the first pass's by no more than the free empty blocks. Passes
    for which k + 1 tokens per round could not use them up are not checked.

    ``ctxs[i]``: pass i's ``decode_context_tokens`` (pass 0: the batch ``schedule`` formed);
    ``used[i]`` (kept with ``track_used``, for pass records): the KV blocks in use once it is
    scheduled.
    """

    __slots__ = ("seqs", "computed", "left", "drawn", "ctxs", "used", "closed", "k", "block_size", "blocks0",
                 "room", "safe", "track_used")

    def __init__(self, seqs: list, decode_context_tokens: int, used_blocks: int, free_anon: int, k: int,
                 block_size: int, track_used: bool = False) -> None:
        self.seqs = seqs
        self.computed = [s.computed for s in seqs]  #: at the last laid-out pass's scheduling
        self.left = [s.output_len - s.generated for s in seqs]  #: output tokens left, likewise
        self.drawn = [0] * len(seqs)  #: rounds planned per request (its peeks so far)
        self.ctxs = [decode_context_tokens]
        self.used = [used_blocks]
        self.closed = False
        self.k = k
        self.block_size = block_size
        self.blocks0 = sum(len(s.held) + s.anon for s in seqs)  #: held once the first pass is scheduled
        self.room = free_anon  #: blocks later passes may add without evicting
        # passes certain to fit: a request grows by at most ceil(p (k + 1) / bs) + 1 blocks by pass p
        per_request = free_anon // len(seqs) - 1
        self.safe = per_request * block_size // (k + 1) if per_request > 0 else 0
        self.track_used = track_used

    def extend(self, passes: int) -> None:
        """Lay the run out to ``passes`` passes, or to its end if it ends sooner."""
        bs, k1 = self.block_size, self.k + 1
        seqs, computed, left, drawn, ctxs = self.seqs, self.computed, self.left, self.drawn, self.ctxs
        check_all = self.track_used
        while len(ctxs) < passes and not self.closed:
            # the last laid-out pass completes: each round emits 1 + accepted, cut to the output left
            grown = 0
            for i, seq in enumerate(seqs):
                acc = seq.acc
                ahead = acc.ahead
                d = drawn[i]
                if d < len(ahead):
                    j = ahead[d]
                else:
                    j = acc._draw()
                    ahead.append(j)
                drawn[i] = d + 1
                rest = left[i]
                tokens = 1 + j if j < rest else (rest if rest > 1 else 1)
                if tokens >= rest:
                    self.closed = True  # it finishes: the run's last pass
                left[i] = rest - tokens
                computed[i] += tokens
                grown += tokens
            if self.closed:
                return
            # the next pass is scheduled: room for each round's drafts
            p = len(ctxs)
            if check_all or p > self.safe:
                blocks = 0
                for c, rest in zip(computed, left):
                    blocks += -(-(c + 1 + (k1 if k1 < rest else rest)) // bs)
                if blocks - self.blocks0 > self.room:
                    self.closed = True  # it would evict (or preempt): stepped pass by pass
                    return
                if check_all:
                    self.used.append(self.used[0] + blocks - self.blocks0)
            ctxs.append(ctxs[-1] + grown)
