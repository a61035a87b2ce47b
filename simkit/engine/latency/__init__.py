"""Engine-step latency models: how long one forward pass takes on one worker.

A pass is described by three numbers: ``prefill_tokens`` (prompt tokens computed in the pass,
summed over its prefill chunks), ``decode_requests`` (requests generating one token each) and
``decode_context_tokens`` (the sum over those requests of their KV length after the pass:
prompt + tokens generated so far). Models return seconds.

One module per ``latency.kind``:

* ``polynomial`` (:class:`PolynomialModel`, :mod:`.polynomial`): the reference mocker's default;
* ``constant`` (:class:`ConstantModel`, :mod:`.constant`): fixed pass times;
* ``roofline`` (:class:`RooflineModel`, :class:`OpCost`, :mod:`.roofline`): from the model's
  architecture and the GPU;
* ``table`` (:class:`TableModel`, :mod:`.table`): interpolated from a measured per-pass table;
* ``aic`` (:class:`~simkit.engine.latency.aic.AicModel`, :mod:`.aic`): NVIDIA aiconfigurator's
  measured per-op database (the optional aiconfigurator-core, imported only when one is built).

What every model shares (the :class:`LatencyModel` protocol the worker calls, the helpers for
``decode_run``) is in :mod:`.base`; which model a spec gets is :func:`make_latency_model`
(:mod:`.factory`), where a new kind is added.

Part of :mod:`simkit.engine`: pure functions of the pass shape; no SimPy. May import
:mod:`simkit.core`, :mod:`simkit.spec`, :mod:`simkit.engine.hardware` and numpy; must not
import simpy, the cluster processes, output or the CLI.
"""

from simkit.engine.latency.base import LatencyModel, _accumulate, _decode_run_by_passes  # noqa: F401
from simkit.engine.latency.constant import ConstantModel
from simkit.engine.latency.factory import make_latency_model
from simkit.engine.latency.polynomial import PolynomialModel
from simkit.engine.latency.roofline import OpCost, RooflineModel
from simkit.engine.latency.table import TableModel, _interp  # noqa: F401

__all__ = ["LatencyModel", "PolynomialModel", "ConstantModel", "RooflineModel", "TableModel", "OpCost",
           "make_latency_model"]
