"""Signals delivered between two events of a run (:class:`SignalsBetweenEvents`), so that a
Ctrl-C or SIGTERM never lands half way through one (a request half released, routed or
recorded as ended).

Part of :mod:`simkit.core`: the standard library only.
"""

from __future__ import annotations

import signal
import threading

__all__ = ["SignalsBetweenEvents"]


class SignalsBetweenEvents:
    """``with SignalsBetweenEvents() as signals:`` while a run steps its events, a SIGINT or
    SIGTERM handled by Python (the default KeyboardInterrupt, the command line's handler) waits
    for the event under way to end: the run calls :meth:`deliver` between two events, which
    calls the handler in place then. In the middle of an event a request may be half way
    through being released, routed or recorded as ended; a KeyboardInterrupt there lost it
    from the partial records. A second signal before the first is delivered is delivered at
    once (an event that never ends is still interrupted). Leaving the block restores the
    handlers and delivers what is pending. Only on the main thread (the only one signals
    reach); handlers that are not Python functions (SIG_DFL, SIG_IGN) are left alone.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.pending: list = []  #: (signal number, frame) not yet delivered
        self.saved: dict = {}

    def __enter__(self) -> "SignalsBetweenEvents":
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                handler = signal.getsignal(sig)
                if callable(handler):
                    self.saved[sig] = handler
                    signal.signal(sig, self._defer)
        return self

    def _defer(self, signum, frame) -> None:
        self.pending.append((signum, frame))
        if len(self.pending) > 1:
            self.deliver()

    def deliver(self) -> None:
        """Call the saved handler of each pending signal, in order; the first exception one
        raises (KeyboardInterrupt) is raised once all were called."""
        raised = None
        while self.pending:
            signum, frame = self.pending.pop(0)
            try:
                self.saved[signum](signum, frame)
            except BaseException as exc:  # noqa: BLE001 - raised below, after the others
                raised = raised or exc
        if raised is not None:
            raise raised

    def __exit__(self, *exc) -> None:
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
        self.deliver()  # a signal during the last event is not lost
