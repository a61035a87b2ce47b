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


#: the longest scenario name a default output folder carries (file names stop at 255 bytes)
MAX_NAME_IN_FOLDER = 80


def _safe_name(name: str) -> str:
    """``name`` as a folder name: ASCII letters, digits, ``-_.`` (others become ``_``), no
    leading dot, at most :data:`MAX_NAME_IN_FOLDER` characters."""
    safe = "".join(ch if ch.isascii() and (ch.isalnum() or ch in "-_.") else "_" for ch in name)
    return safe.lstrip(".")[:MAX_NAME_IN_FOLDER] or "run"


def _default_out(name: str, prefix: str = "") -> str:
    """A new folder ``runs/PREFIXNAME-YYYYmmdd-HHMMSS[-k]`` (the name made safe by
    :func:`_safe_name`), created (reserved) at once so that runs started together never pick
    the same one.

    Raises:
        OSError: ``runs/`` cannot be created.
    """
    stamp = time.strftime("%Y%m%d-%H%M%S")
    base = os.path.join("runs", f"{prefix}{_safe_name(name)}-{stamp}")
    os.makedirs("runs", exist_ok=True)
    out, k = base, 2
    while True:
        try:
            os.mkdir(out)
            return out
        except FileExistsError:
            out, k = f"{base}-{k}", k + 1


def _check_out(out_dir: str, force: bool, inputs: Sequence[str]) -> Optional[str]:
    """Why ``out_dir`` cannot receive results, or None. Checked before the run starts.

    ``inputs``: every file (or folder) the run reads: a folder that is or holds one is never
    replaced, even with ``force``."""
    from simkit.output.files import folder_content, held_input, live_claim

    out = os.path.realpath(out_dir)
    if held_input(out, [os.getcwd()]):
        return f"{out_dir}: refusing to write results over the current folder or one that contains it"
    kept = held_input(out, inputs)
    if kept is not None:
        return f"{out_dir}: refusing to replace a folder that holds the input {kept}"
    if os.path.exists(out_dir):
        if not os.path.isdir(out_dir):
            return f"{out_dir}: exists and is not a folder; choose another --out"
        owner = live_claim(out)
        if owner is not None:
            return (f"{out_dir}: another simkit run (pid {owner[0]} on {owner[1]}) is writing into it; "
                    "choose another --out")
        try:
            content = folder_content(out)
        except OSError as exc:
            return f"{out_dir}: cannot read the output folder: {exc.strerror or exc}"
        if content and not force:
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


def yaml_text(value) -> str:
    """A scenario value as YAML writes it in flow style: null, true/false, numbers exactly
    (``repr``), lists and mappings in brackets and braces, strings as they are."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yaml_text(x) for x in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_text(x)}" for k, x in value.items()) + "}"
    return repr(value) if isinstance(value, float) else str(value)


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
