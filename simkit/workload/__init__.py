"""Workload sources: trace loaders (Mooncake JSONL with sessions, agentic JSONL with
dependencies, the Azure LLM inference CSV, a plain CSV, kv-cache-tester sessions) and the
synthetic generator.

Both return a tuple of :class:`~simkit.core.request.Request` sorted (stably) by arrival, with
time zero at the earliest arrival and times in seconds: milliseconds appear only here.
May import :mod:`simkit.spec` and :mod:`simkit.core` (request, rng, units); must not import
simpy, the engine, the cluster processes, output or the CLI.

Modules: :mod:`~simkit.workload.load` (load_workload, iter_workload: any workload spec, what
the composition root calls), :mod:`~simkit.workload.reader` (load_trace, stream_trace and
``READERS``, the format registry), one module per trace format family
(:mod:`~simkit.workload.mooncake`, :mod:`~simkit.workload.agentic`,
:mod:`~simkit.workload.csv` for ``azure`` and ``csv``, :mod:`~simkit.workload.weka` for
``weka`` and ``weka_requests``), :mod:`~simkit.workload.common` (TraceError, the line and field
parsers, the ``Row`` a format reader yields), :mod:`~simkit.workload.detect` (``format:
auto``) and :mod:`~simkit.workload.synthetic`.

To add a trace format ``NAME``: write ``simkit/workload/NAME.py`` with ``NAME_rows(spec)``
yielding a ``Row`` per request (helpers and ``TraceError`` from ``common``); register it in
``READERS`` in ``reader.py``; add ``"NAME"`` to the ``format`` literals in :mod:`simkit.spec.workload`
(and its docs: the TraceWorkload docstring, the ``--trace`` help, the README); add a
first-line rule to ``detect.py`` if it can be told apart; test it in
``tests/test_workloads.py``. The reader module's docstring spells out each step.
"""

from simkit.workload.common import TraceError
from simkit.workload.detect import detect_format
from simkit.workload.load import iter_workload, load_workload
from simkit.workload.reader import load_trace, stream_trace
from simkit.workload.synthetic import iter_synthetic, synthesize

__all__ = ["TraceError", "detect_format", "iter_synthetic", "iter_workload", "load_trace", "load_workload",
           "stream_trace", "synthesize"]
