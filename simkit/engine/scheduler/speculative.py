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
from typing import Optional

from simkit.spec import SpeculativeSpec

__all__ = ["Acceptance", "SpecStats"]


class Acceptance:
    """The verify rounds of one request: :meth:`accepted` gives the drafts accepted in its next
    round (0..k), in round order."""

    __slots__ = ("rates", "k", "rng", "expected", "carry")

    def __init__(self, spec: SpeculativeSpec, stream: str) -> None:
        self.rates = spec.rates
        self.k = spec.num_speculative_tokens
        self.expected: Optional[float] = spec.expected_tokens if spec.sampling == "expected" else None
        self.rng = random.Random(stream) if self.expected is None else None
        self.carry = 0.0

    def accepted(self) -> int:
        """Drafts accepted in the next round (conditional acceptance, or the expected count)."""
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
    """A request's verify rounds: ``rounds``, ``accepted`` drafts in all, ``by_position[i]``
    the rounds whose draft i + 1 was accepted (the ``tried`` ones: draft i + 1 tried after the
    first i were accepted), and ``tokens`` emitted by its rounds (cut to the output left)."""

    __slots__ = ("rounds", "accepted", "by_position", "tried", "tokens")

    def __init__(self, k: int) -> None:
        self.rounds = 0
        self.accepted = 0
        self.by_position = [0] * k
        self.tried = [0] * k
        self.tokens = 0

    def record(self, j: int, emitted: int) -> None:
        """One round that accepted ``j`` drafts and emitted ``emitted`` tokens."""
        self.rounds += 1
        self.accepted += j
        self.tokens += emitted
        for i in range(min(j + 1, len(self.tried))):
            self.tried[i] += 1
        for i in range(j):
            self.by_position[i] += 1
