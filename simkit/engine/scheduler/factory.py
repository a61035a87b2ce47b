"""Which scheduler a pool's ``backend`` gets: :data:`SCHEDULERS` and :func:`make_scheduler`.
A new engine's scheduler is added here (and its name to ``PoolSpec.backend`` in
:mod:`simkit.spec`).

Part of :mod:`simkit.engine`: pure, no SimPy.
"""

from __future__ import annotations

from simkit.spec import PoolSpec
from simkit.engine.scheduler.base import Scheduler
from simkit.engine.scheduler.sglang import SglangScheduler
from simkit.engine.scheduler.trtllm import TrtllmScheduler
from simkit.engine.scheduler.vllm import VllmScheduler

__all__ = ["SCHEDULERS", "make_scheduler"]

#: the scheduler class of each ``PoolSpec.backend``
SCHEDULERS: dict[str, type[Scheduler]] = {
    "vllm": VllmScheduler,
    "sglang": SglangScheduler,
    "trtllm": TrtllmScheduler,
}


def make_scheduler(spec: PoolSpec, role: str, seed: int = 0, pool: str = "pool") -> Scheduler:
    """The scheduler of ``spec.backend`` for a worker in ``role`` of ``pool``; ``seed`` (the
    scenario's) names its random streams (speculative decoding's verify rounds)."""
    cls = SCHEDULERS.get(spec.backend)
    if cls is None:
        raise ValueError(f"no scheduler for backend {spec.backend!r} (known: {', '.join(SCHEDULERS)})")
    sched = cls(spec, role)
    sched.name_streams(seed, pool)
    return sched
