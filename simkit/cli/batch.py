"""What the commands that run many simulations share (``capacity``, ``recommend``): an output
folder built beside its target and moved into place when the batch ends, and the runs
executed on local processes or a Dask cluster (:func:`simkit.cli.points._execute`). Part of
:mod:`simkit.cli`.
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Callable, Optional, Sequence

from simkit.cli.common import _check_out, _default_out, _fail, _Interrupts, _printable
from simkit.cli.points import DaskMissing, SchedulerUnreachable
from simkit.sim import input_files, load_scenario
from simkit.spec import ConfigError, Scenario, parse_overrides
from simkit.output.files import beside, claim_folder, folder_content, move_into_place, sibling_tmp_dir


class OutputError(Exception):
    """The output folder cannot be used; the message is the one-line reason."""


class OutputFolder:
    """``with OutputFolder(out, force, name, prefix, inputs) as folder:`` checks ``out`` (or
    reserves ``runs/PREFIXNAME-STAMP``), claims it against concurrent runs and gives
    ``folder.work``, a fresh folder beside it to fill. :meth:`commit` moves ``work`` into place
    (replacing an earlier result only with ``force``). Leaving the block without a commit keeps
    what ``work`` holds beside ``out`` (``OUT.partial``) when it holds anything, and removes it
    otherwise, so earlier results are never replaced by an unfinished batch.

    Raises:
        OutputError: on entry, ``out`` cannot receive results (one line).
    """

    def __init__(self, out: Optional[str], force: bool, name: str, prefix: str, inputs: Sequence[str]) -> None:
        self.requested, self.force, self.name, self.prefix, self.inputs = out, force, name, prefix, list(inputs)
        self.out = out or ""
        self.work = ""
        self.reserved: Optional[str] = None
        self.claim = None
        self.kept: Optional[str] = None  #: where an uncommitted batch's results went

    def __enter__(self) -> "OutputFolder":
        if self.requested is None:
            try:
                self.reserved = self.out = _default_out(self.name, prefix=self.prefix)
            except OSError as exc:
                raise OutputError(f"runs: cannot create the default output folder: {exc.strerror or exc}; "
                                  "choose one with --out") from None
        problem = _check_out(self.out, self.force, self.inputs)
        if problem:
            self._release()
            raise OutputError(problem)
        try:
            self.claim = claim_folder(self.out)
            self.work = sibling_tmp_dir(self.out, prefix=f".simkit-{self.prefix.rstrip('-') or 'batch'}-")
        except OSError as exc:
            self._release()
            raise OutputError(f"{self.out}: cannot use the output folder: {exc.strerror or exc}") from None
        return self

    def commit(self) -> None:
        """Move the finished ``work`` folder into place.

        Raises:
            OSError: it cannot be moved (a full disk); ``work`` is then kept as on an exit
                without commit.
        """
        move_into_place(self.work, self.out, force=True)
        self.work = ""

    def __exit__(self, *exc) -> None:
        try:
            if self.work and os.path.isdir(self.work):
                if os.listdir(self.work):
                    target = (self.out if not (os.path.isdir(self.out) and folder_content(self.out))
                              else beside(self.out, "partial"))
                    try:
                        move_into_place(self.work, target, force=False)
                        self.kept = target
                    except OSError:
                        self.kept = self.work
                else:
                    shutil.rmtree(self.work, ignore_errors=True)
        finally:
            self._release()

    def _release(self) -> None:
        if self.claim is not None:
            self.claim.release()
            self.claim = None
        if self.reserved is not None and os.path.isdir(self.reserved) and not os.listdir(self.reserved):
            os.rmdir(self.reserved)


def run_points(scenario_path: str, points: Sequence[list], work: str, names: Sequence[str], jobs: int,
               scheduler: Optional[str]) -> list[dict]:
    """Run ``scenario_path`` with each override list of ``points`` into ``work/NAME`` (in
    parallel: ``jobs`` local processes or the Dask ``scheduler``); outcomes in order, as
    :func:`simkit.cli.points._run_one` gives them (a progress bar on a terminal)."""
    from simkit.cli.points import _execute

    runs = [(scenario_path, list(overrides), os.path.join(work, name)) for overrides, name in zip(points, names)]
    return _execute(runs, jobs, scheduler, progress=sys.stderr.isatty())


def scheduler_problem(address: Optional[str], exc: BaseException) -> str:
    """The line for a ``--scheduler`` that cannot be used (the distributed package missing, or
    the scheduler unreachable)."""
    if isinstance(exc, DaskMissing):
        return "--scheduler needs the 'distributed' package: pip install 'dask[distributed]'"
    return f"--scheduler {address}: cannot reach the Dask scheduler ({exc})"


def say(line: str, err: bool = False) -> None:
    """Print one safe line (stdout, or stderr with ``err``)."""
    print(_printable(line, 2000), file=sys.stderr if err else sys.stdout)


def add_batch_arguments(p, out_help: str, set_help: str = "override a scenario field (repeatable)") -> None:
    """The options every batch command takes: ``--set``, ``--trace``, ``--sla-fraction``,
    ``--out``, ``--force`` and ``--jobs`` or ``--scheduler``."""
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=set_help)
    p.add_argument("--trace", metavar="FILE", help="replace the workload with this trace file (as the run "
                   "command's --trace)")
    p.add_argument("--sla-fraction", type=float, default=0.9, metavar="F",
                   help="share of requests within the scenario's SLA for a configuration to meet it (default 0.9)")
    p.add_argument("--out", metavar="DIR", help=out_help)
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                       help="runs at once on local processes (default: one per core)")
    group.add_argument("--scheduler", metavar="ADDRESS", help="run on this Dask scheduler (tcp://host:8786)")


def batch_problem(args) -> Optional[str]:
    """What is wrong with the options of :func:`add_batch_arguments`, or None."""
    if args.jobs < 1:
        return f"--jobs {args.jobs}: expected at least 1"
    if args.scheduler is not None and not args.scheduler.strip():  # '' would quietly run locally
        return f"--scheduler {args.scheduler!r}: expected a Dask scheduler's address (tcp://host:8786)"
    if not 0.0 < args.sla_fraction <= 1.0:
        return f"--sla-fraction {args.sla_fraction:g}: expected a share in (0, 1]"
    return None


def batch_overrides(args) -> list:
    """``--trace`` (first) and ``--set`` as overrides.

    Raises:
        ConfigError: a malformed ``--set``.
    """
    common = parse_overrides(args.overrides)
    if args.trace is not None:
        common.insert(0, ("workload", {"kind": "trace", "path": os.path.abspath(os.path.expanduser(args.trace))}))
    return common


def batch_scenario(args, command: str, verb: str) -> tuple[list, Scenario]:
    """The overrides (:func:`batch_overrides`) and the scenario they give, which must set an
    SLA for ``command`` to ``verb`` (hold, meet).

    Raises:
        ConfigError: a bad scenario or override, or no SLA.
    """
    common = batch_overrides(args)
    base = load_scenario(args.scenario, common)
    if base.sla is None or not base.sla.is_set:
        raise ConfigError([f"{args.scenario}: {command} needs an SLA to {verb}: set sla.ttft_ms, sla.itl_ms or "
                           "sla.e2e_ms (e.g. --set sla.ttft_ms=500)"])
    return common, base


def run_batch(args, base: Scenario, command: str, runs: str, body: Callable[[OutputFolder], int]) -> int:
    """``body(folder)`` in the batch's :class:`OutputFolder` (``--out``, or
    ``runs/COMMAND-NAME-STAMP``; every file the scenario reads protected), its exit code; an
    unusable folder is exit 2, an interrupt exit 130 with a line naming where the ``runs`` so
    far were kept."""
    inputs = [args.scenario] + [path for _, path in input_files(base)]
    folder = OutputFolder(args.out, args.force, base.name, f"{command}-", inputs)
    try:
        with folder, _Interrupts():
            return body(folder)
    except OutputError as exc:
        return _fail([str(exc)])
    except (DaskMissing, SchedulerUnreachable) as exc:
        problem = scheduler_problem(args.scheduler, exc)
        if folder.kept:  # the scheduler went away after some runs: they are kept, as on a stop
            say(f"{problem}; the {runs} run so far are in {folder.kept}", err=True)
            return 1
        return _fail([problem])
    except KeyboardInterrupt:
        kept = f"; the {runs} run so far are in {folder.kept}" if folder.kept else ""
        say(f"simkit: {command} interrupted{kept}", err=True)
        return 130
