"""What every command of :mod:`simkit.cli` shares: the argument parser class (errors in one line,
exit 2), the output-folder checks and default folder, one-line failure messages on stderr, and
the SIGINT/SIGTERM handling that lets a stopped run still write its results.

The command modules (run, compare, step, sweep, ...) import these from here, never from the
:mod:`simkit.cli` package, which imports them in turn. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, pointing at this command's help
        self.exit(2, f"simkit: {message} (see {self.prog} --help)\n")


def _default_out(name: str) -> str:
    """A new folder ``runs/NAME-YYYYmmdd-HHMMSS[-k]``, created (reserved) at once so that runs
    started together never pick the same one.

    Raises:
        OSError: ``runs/`` cannot be created.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).lstrip(".") or "run"
    base = os.path.join("runs", f"{safe}-{stamp}")
    os.makedirs("runs", exist_ok=True)
    out, k = base, 2
    while True:
        try:
            os.mkdir(out)
            return out
        except FileExistsError:
            out, k = f"{base}-{k}", k + 1


def _check_out(out_dir: str, force: bool, inputs: Sequence[str]) -> Optional[str]:
    """Why ``out_dir`` cannot receive results, or None. Checked before the run starts."""
    out = os.path.realpath(out_dir)
    here = os.path.realpath(os.getcwd())
    if here == out or here.startswith(out + os.sep):
        return f"{out_dir}: refusing to write results over the current folder or one that contains it"
    for path in inputs:
        real = os.path.realpath(path)
        if real.startswith(out + os.sep):
            return f"{out_dir}: refusing to replace a folder that holds the input {path}"
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            return f"{out_dir}: exists and is not a folder; choose another --out"
        if os.listdir(out_dir) and not force:
            return f"{out_dir}: output folder exists and is not empty; choose another --out or add --force"
    parent = os.path.dirname(out) or "."
    probe = parent
    while not os.path.exists(probe):
        probe = os.path.dirname(probe)
    if not os.path.isdir(probe):
        return f"{out_dir}: cannot create the output folder: {probe} is not a folder"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{out_dir}: cannot create the output folder: {probe} is not writable"
    return None


def _printable(line: str, limit: int = 400) -> str:
    """One safe terminal line: control characters escaped (no newlines or escape sequences
    from a hostile key), cut to ``limit`` characters."""
    safe = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in line)
    return safe if len(safe) <= limit else safe[: limit - 3] + "..."


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(_printable(line), file=sys.stderr)
    return 2


class _Interrupts:
    """SIGINT/SIGTERM handling: the first signal stops the simulation (a KeyboardInterrupt that
    Simulation.run turns into partial results); later ones, and any once the simulation has
    ended, are only counted, so the results are always written."""

    def __init__(self) -> None:
        self.count = 0
        self.defer = False
        self.saved: dict = {}

    def __enter__(self) -> "_Interrupts":
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self.saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.count += 1
        if self.count == 1 and not self.defer:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        import signal

        for sig, handler in self.saved.items():
            signal.signal(sig, handler)
