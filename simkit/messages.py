"""Messages and mailboxes shared by the SimPy components.

Layer L3 base: the worker, the link and the router exchange these instead of importing each
other's classes.
"""

from __future__ import annotations

import simpy


class Released:
    """Handoff link -> prefill worker: the KV of ``rid`` has been moved; free it."""

    __slots__ = ("rid",)

    def __init__(self, rid: int) -> None:
        self.rid = rid

    def __repr__(self) -> str:
        return f"Released({self.rid})"


class Inbox(simpy.Store):
    """A worker's message queue (unbounded, FIFO); only its owner takes from it."""

    def drain(self) -> list:
        """Take every queued message at once (the owner is busy, not waiting on ``get``)."""
        items = self.items
        if items:
            self.items = []
        return items
