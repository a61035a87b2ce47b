"""Command line. ``python -m simkit SCENARIO.yaml [--trace FILE] [--set KEY=VALUE ...] [--seed N]
[--out DIR] [--force] [--check] [--per-pass] [--no-plots] [--quiet] ...`` runs a scenario
(:mod:`simkit.cli.run`); the subcommands are ``python -m simkit compare RUN_DIR ... [--plot
FILE]`` (:mod:`simkit.cli.compare`), ``python -m simkit step --model M --gpu G ...``
(:mod:`simkit.cli.step`), ``python -m simkit sweep SCENARIO.yaml --grid KEY=V1,V2 ...``
(:mod:`simkit.cli.sweep`), ``python -m simkit capacity SCENARIO.yaml`` (:mod:`simkit.cli.capacity`)
and ``python -m simkit recommend SCENARIO.yaml --gpus N`` (:mod:`simkit.cli.recommend`).
Each has its own ``--help``.

Exit codes: 0 success (including a run cut by ``max_sim_time_s``); 2 bad input (scenario, trace,
arguments, output folder), reported as one line per problem on stderr with no traceback and no
output folder written; 1 the run stopped abnormally (stuck, a policy's error, ``--check`` found
a broken invariant, the clock's 1e9 s limit, results that cannot be written: the diagnostic
goes to stderr and the partial results are written, marked incomplete; they never replace
earlier results); 130 interrupted by Ctrl-C or SIGTERM (partial results written, marked
incomplete).

Layout: :func:`main` gives a first argument that names a subcommand (``_subcommand``) to it and
anything else to the run command. What the commands share (the parser class ``_Parser``,
``_fail`` and ``_printable``, the output-folder checks ``_check_out`` and ``_default_out``, the
signal handling ``_Interrupts``) is in :mod:`simkit.cli.common`. A command's module imports from
there and never from this package, so there is no import cycle. The version (``--version``,
``run_info.json``) is ``simkit.__version__``: the commands may import the root package, which never
imports this one.

A new subcommand (the coming one: ``serve``) goes in its own module
``simkit/cli/NAME.py``: an entry function that takes the arguments after NAME and returns the
exit code, a parser built as ``common._Parser(prog="python -m simkit NAME", ...)``, and messages
through ``common._fail``. Then import its entry function in ``_subcommand`` below, name it in the
run parser's epilog (``_parser`` in :mod:`simkit.cli.run`) and in this docstring, and add its
tests. A module is imported only when its subcommand runs, so one that needs an optional
package (``serve``, say) slows no other command and breaks none when the package is missing.

The only package that touches the outside world (arguments, exit codes, the terminal): it may
import every other package, and nothing imports it but ``simkit/__main__.py``.
"""

from __future__ import annotations

import os
import sys
from typing import Optional, Sequence

# re-exported: these were importable from simkit.cli before the commands had modules of their own
from simkit.cli.common import _check_out, _fail, _Interrupts, _Parser  # noqa: F401
from simkit.spec import parse_overrides  # noqa: F401

def _subcommand(name: str):
    """The entry function of subcommand ``name`` (its module imported only now), or None when
    ``name`` is not a subcommand (then it is the run command's scenario)."""
    if name == "compare":
        from simkit.cli.compare import compare_main as entry
    elif name == "step":
        from simkit.cli.step import step_main as entry
    elif name == "sweep":
        from simkit.cli.sweep import main as entry
    elif name == "capacity":
        from simkit.cli.capacity import main as entry
    elif name == "recommend":
        from simkit.cli.recommend import main as entry
    else:
        return None
    return entry


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``) and return its exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    entry = _subcommand(argv[0]) if argv else None
    if entry is not None:
        return entry(argv[1:])
    from simkit.cli.run import run_main

    return run_main(argv)


def main_exit() -> None:
    """Console-script and ``python -m simkit`` entry point. A closed stdout (``| head``) ends
    the program quietly: the results were written before anything was printed."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot fail
        code = 0
    sys.exit(code)
