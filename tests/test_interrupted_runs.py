"""A run interrupted at an arbitrary instant keeps every request (issue: a partial run of a
sweep interrupted by Ctrl-C reported 29,999 of its 30,000 requests).

A Ctrl-C lands between any two bytecodes of the simulation: a request may be half way through
being released, recorded as ended, popped from a Store, held by the router, on the link, in a
worker's hand. The property below sends a real SIGINT (or SIGTERM under the command line's
handler) at the n-th line executed by simkit's or SimPy's code while the run steps its events,
for n drawn over the whole run, over aggregated and disaggregated pools, every router kind,
router queues, sessions, planners, streamed workloads and time caps, and asserts that every
request appears exactly once in the records (completed, rejected or incomplete), that the
summary's counts add up, and that what the cut run recorded as ended is what the whole run
recorded for those requests.
"""

from __future__ import annotations

import math
import os
import signal
import sys

import simpy
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import simkit
from simkit.cli.common import _Interrupts
from simkit.cluster.messages import Environment
from simkit.output.report import summarize
from simkit.sim import build

from test_fast_forward import ReadsEverything, routed_cases

_TRACED = (os.path.dirname(simkit.__file__) + os.sep, os.path.dirname(simpy.__file__) + os.sep)


class _Tracer:
    """Counts the lines (calls and returns) run by simkit and SimPy inside ``Environment.step``;
    at the ``at``-th it sends this process ``signum``, as a Ctrl-C at that instant would."""

    def __init__(self, at=None, signum=signal.SIGINT) -> None:
        self.count, self.at, self.signum, self.fired = 0, at, signum, False

    def trace(self, frame, event, arg):
        if self.fired or not frame.f_code.co_filename.startswith(_TRACED):
            return None
        return self.line(frame, event, arg)

    def line(self, frame, event, arg):
        if self.fired:
            return None
        self.count += 1
        if self.count == self.at:
            self.fired = True
            signal.raise_signal(self.signum)
        return self.line


def _traced_run(monkeypatch, scenario, requests, tracer, stream, policy):
    original = Environment.step

    def step(env):
        previous = sys.gettrace()
        sys.settrace(tracer.trace)
        try:
            return original(env)
        finally:
            sys.settrace(previous)

    monkeypatch.setattr(Environment, "step", step)
    try:
        return build(scenario, iter(requests) if stream else requests, fast_forward=True, router_policy=policy,
                     stream=stream).run()
    finally:
        monkeypatch.setattr(Environment, "step", original)


@st.composite
def interrupted_cases(draw):
    scenario, requests, python = draw(routed_cases())
    stream = draw(st.booleans())
    handler = draw(st.sampled_from(["default", "cli-int", "cli-term"]))
    return scenario, requests, python, stream, handler, draw(st.floats(0.0, 1.0))


# (no explain phase: it traces the test with sys.settrace, as the test does itself)
@settings(max_examples=150, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(case=interrupted_cases())
def test_a_run_interrupted_at_any_instant_records_every_request_once(monkeypatch, case):
    scenario, requests, python, stream, handler, where = case
    policy = (lambda: ReadsEverything()) if python else None
    counted = _Tracer()
    whole = _traced_run(monkeypatch, scenario, requests, counted, stream, policy)
    at = max(1, math.ceil(where * counted.count))
    signum = signal.SIGTERM if handler == "cli-term" else signal.SIGINT
    before = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    tracer = _Tracer(at, signum)
    if handler == "default":
        cut = _traced_run(monkeypatch, scenario, requests, tracer, stream, policy)
    else:
        with _Interrupts() as interrupts:
            cut = _traced_run(monkeypatch, scenario, requests, tracer, stream, policy)
        assert interrupts.count == 1
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    assert tracer.fired and cut.stop_reason == "interrupted", (at, counted.count, cut.stop_reason)
    n = len(requests)
    rids = sorted(r.rid for r in cut.requests)
    assert rids == list(range(n)), (at, counted.count, sorted(set(range(n)) - set(rids)))
    counts = summarize(cut, None)["requests"]
    assert counts["total"] == n
    assert counts["completed"] + counts["rejected"] + counts["incomplete"] == n
    assert counts["incomplete"] == sum(r.status == "incomplete" for r in cut.requests)
    # what the cut run saw end, it saw as the whole run did
    full = {r.rid: r for r in whole.requests}
    for r in cut.requests:
        if r.status != "incomplete":
            assert r == full[r.rid]
