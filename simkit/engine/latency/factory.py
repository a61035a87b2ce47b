"""Which latency model a ``latency`` spec gets: :func:`make_latency_model`. A new kind of
latency model is added here (with its spec class in :mod:`simkit.spec`).

Part of :mod:`simkit.engine`: pure, no SimPy. Importing :mod:`.aic` does not import the optional
aiconfigurator-core; building an :class:`~simkit.engine.latency.aic.AicModel` does.
"""

from __future__ import annotations

from typing import Optional

import attrs

from simkit.spec import (AicLatency, ConstantLatency, LatencySpec, PolynomialLatency, RooflineLatency,
                         SpeculativeSpec, TableLatency)
from simkit.engine.latency.aic import AicModel
from simkit.engine.latency.base import LatencyModel
from simkit.engine.latency.constant import ConstantModel
from simkit.engine.latency.polynomial import PolynomialModel
from simkit.engine.latency.roofline import RooflineModel
from simkit.engine.latency.speculative import SpeculativeRoofline
from simkit.engine.latency.table import TableModel

__all__ = ["make_latency_model"]


def make_latency_model(spec: LatencySpec, kv_capacity_tokens: int,
                       speculative: Optional[SpeculativeSpec] = None, async_scheduling: bool = False) -> LatencyModel:
    """The latency model for ``spec`` on a worker with ``kv_capacity_tokens`` of KV cache whose
    decode passes are verify rounds of ``speculative`` (None: plain decode steps). The
    roofline model prices the rounds and the draft (:class:`SpeculativeRoofline`); aic its
    ``nextn`` path; the polynomial, constant and table models a round as a plain decode step,
    as the reference does. ``async_scheduling`` (the pool's) picks the host overheads fitted
    for it, where they exist (:func:`simkit.engine.hardware.load_calibration`)."""
    if isinstance(spec, PolynomialLatency):
        return PolynomialModel(spec, kv_capacity_tokens)
    if isinstance(spec, ConstantLatency):
        return ConstantModel(spec)
    if isinstance(spec, RooflineLatency):
        if speculative is None:
            return RooflineModel(spec, async_scheduling=async_scheduling)
        draft = None
        if speculative.method == "draft_model":
            draft = RooflineModel(attrs.evolve(spec, model=speculative.draft_model), async_scheduling=async_scheduling)
        return SpeculativeRoofline(RooflineModel(spec, async_scheduling=async_scheduling), speculative, draft)
    if isinstance(spec, TableLatency):
        return TableModel(spec)
    if isinstance(spec, AicLatency):
        # imports the optional aiconfigurator-core, only now
        return AicModel(spec, nextn=speculative.num_speculative_tokens if speculative else 0,
                        async_scheduling=async_scheduling)
    raise TypeError(f"no latency model for {spec!r}")
