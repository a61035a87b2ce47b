"""Named random streams derived from the scenario seed.

``RngStreams(seed).get("arrivals")`` is ``random.Random(f"{seed}/arrivals")``: Python seeds a
``Random`` from a string through SHA-512, so a stream is the same in every process and under
every ``PYTHONHASHSEED``. Each component draws from its own stream, so adding randomness in one
place never shifts another. Part of :mod:`simkit.core`.
"""

from __future__ import annotations

import random


class RngStreams:
    """Factory of independent, reproducible ``random.Random`` streams keyed by name."""

    def __init__(self, seed: int) -> None:
        self.seed = seed

    def get(self, name: str) -> random.Random:
        """A fresh stream for ``name``; the same name always gives the same sequence."""
        return random.Random(f"{self.seed}/{name}")
