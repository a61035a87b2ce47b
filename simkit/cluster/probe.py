"""The observation interface model code knows: one call per fact, no aggregation.

Part of :mod:`simkit.cluster`: model processes call a :class:`Probe`; the collector implements it; tests may use
:class:`NullProbe`. Times are simulation seconds.
"""

from __future__ import annotations

from typing import Protocol, Sequence

COMPLETED = "completed"
REJECTED = "rejected"
INCOMPLETE = "incomplete"


class Probe(Protocol):
    def arrived(self, rid: int, at: float) -> None:
        """Request ``rid`` entered the router queue."""

    def frontend(self, rid: int, seconds: float) -> None:
        """The frontend holds ``rid`` this long before the router sees it (when not the run's
        constant: a drawn client delay)."""

    def dispatched(self, rid: int, at: float) -> None:
        """The router sent ``rid`` to a worker (after any wait in the router queue)."""

    def admitted(self, rid: int, at: float, pool: str, worker: int, cached_tokens: int,
                 lookup_tokens: int) -> None:
        """A worker admitted ``rid`` into its running batch; on a prompt admission
        ``lookup_tokens`` prompt tokens were looked up and ``cached_tokens`` of them hit."""

    def restored(self, rid: int, host_tokens: int, seconds: float) -> None:
        """At its admission ``rid`` reused ``host_tokens`` prompt tokens restored from the host KV
        tier, after a restore of ``seconds`` (asked for to ended)."""

    def tokens(self, rids: Sequence[int], at: float) -> None:
        """Each of ``rids`` produced one output token at the end of a pass ending at ``at``."""

    def token_run(self, rids: Sequence[int], times: Sequence[float]) -> None:
        """Each of ``rids`` produced one token at each of ``times`` (ascending): a
        fast-forwarded run of passes, equal to one :meth:`tokens` call per time."""

    def prefilled(self, rid: int, at: float) -> None:
        """A prefill worker finished ``rid``'s prompt; its KV now waits for the handoff link."""

    def handed_off(self, rid: int, at: float) -> None:
        """The prompt KV of ``rid`` reached the decode side of the handoff link."""

    def released(self, rid: int, at: float) -> None:
        """The prefill worker of ``rid`` freed its prompt KV: the decode side took it over."""

    def speculated(self, rid: int, rounds: int, accepted: int, tokens: int, by_position: Sequence[int],
                   tried: Sequence[int]) -> None:
        """``rid`` (about to end) ran ``rounds`` verify rounds that accepted ``accepted`` draft
        tokens and emitted ``tokens``; per draft position, accepted and tried counts."""

    def finished(self, rid: int, at: float, status: str) -> None:
        """``rid`` ended: ``completed`` or ``rejected``."""


class NullProbe:
    """A probe that ignores everything."""

    def arrived(self, rid, at): pass
    def frontend(self, rid, seconds): pass
    def dispatched(self, rid, at): pass
    def admitted(self, rid, at, pool, worker, cached_tokens, lookup_tokens): pass
    def restored(self, rid, host_tokens, seconds): pass
    def tokens(self, rids, at): pass
    def token_run(self, rids, times): pass
    def prefilled(self, rid, at): pass
    def handed_off(self, rid, at): pass
    def released(self, rid, at): pass
    def speculated(self, rid, rounds, accepted, tokens, by_position, tried): pass
    def finished(self, rid, at, status): pass
