"""Command line: ``python -m simkit SCENARIO.yaml [--trace FILE] [--set KEY=VALUE ...]
[--seed N] [--out DIR] [--force] [--no-plots] [--quiet]``.

Exit codes: 0 success (including a run cut by ``max_sim_time_s``); 2 bad input (scenario, trace,
arguments, output folder), reported as one line per problem on stderr with no traceback and no
output folder written; 1 the run stopped abnormally (stuck, or ``--check`` found a broken
invariant: the diagnostic goes to stderr and the partial results are written, marked
incomplete); 130 interrupted by Ctrl-C (partial results written, marked incomplete).
Layer L6: the only layer that touches the outside world.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

from simkit import __version__
from simkit.config import ConfigError, load_scenario, parse_overrides
from simkit.output import write_run
from simkit.report import render_text, summarize
from simkit.sim import build
from simkit.trace import TraceError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(2, f"simkit: {message} (see python -m simkit --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simkit",
        description="Simulate LLM serving (aggregated or disaggregated) on a scenario file.",
    )
    p.add_argument("scenario", help="scenario YAML file, e.g. scenarios/disagg.yaml")
    p.add_argument("--trace", metavar="FILE",
                   help="replace the workload with this Mooncake JSONL trace "
                        "(trace_block_size 512 unless set with --set workload.trace_block_size=N)")
    p.add_argument("--set", dest="overrides", metavar="KEY=VALUE", action="append", default=[],
                   help="override a scenario field by dotted path, e.g. pools.decode.workers=8 "
                        "(values are YAML scalars); repeatable")
    p.add_argument("--seed", type=int, help="override the scenario seed")
    p.add_argument("--out", metavar="DIR",
                   help="output folder (default: a new folder runs/NAME-YYYYmmdd-HHMMSS); "
                        "must be empty or absent unless --force")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    p.add_argument("--check", action="store_true",
                   help="assert conservation of requests and KV blocks at every instant (slower); "
                        "stop at the first violation")
    p.add_argument("--per-pass", action="store_true",
                   help="step every forward pass as its own SimPy event instead of fast-forwarding "
                        "runs of identical decode passes (same results, slower; for validation)")
    p.add_argument("--no-plots", action="store_true", help="do not draw the latency CDF plot")
    p.add_argument("--quiet", action="store_true", help="print only the output folder")
    p.add_argument("--version", action="version", version=f"simkit {__version__}")
    return p


def _default_out(name: str) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name).lstrip(".") or "run"
    base = os.path.join("runs", f"{safe}-{stamp}")
    out, k = base, 2
    while os.path.exists(out):
        out, k = f"{base}-{k}", k + 1
    return out


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


def _fail(lines: Sequence[str]) -> int:
    for line in lines:
        print(line, file=sys.stderr)
    return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    try:
        overrides = []
        if args.trace is not None:
            overrides.append(("workload", {"kind": "trace", "path": os.path.abspath(args.trace)}))
        overrides += parse_overrides(args.overrides)
        if args.seed is not None:
            overrides.append(("seed", args.seed))
        scenario = load_scenario(args.scenario, overrides)
    except ConfigError as exc:
        return _fail(exc.messages)
    out_dir = args.out or _default_out(scenario.name)
    inputs = [args.scenario] + ([scenario.workload.path] if hasattr(scenario.workload, "path") else [])
    problem = _check_out(out_dir, args.force, inputs)
    if problem:
        return _fail([problem])
    wall0 = time.perf_counter()
    try:
        # no output file holds token timelines yet, so they are not recorded
        sim = build(scenario, record_token_times=False, fast_forward=not args.per_pass)
    except TraceError as exc:
        return _fail([str(exc)])
    load_s = time.perf_counter() - wall0
    records = sim.run(check=args.check)
    run_s = time.perf_counter() - wall0 - load_s
    summary = summarize(records, scenario.sla)
    figures = {}
    if not args.no_plots:
        from simkit.plots import latency_cdf

        figures["latency_cdf"] = latency_cdf([(scenario.name, records)], scenario.sla)
    info = {"simkit_version": __version__, "load_s": load_s, "run_s": run_s, "check": args.check,
            "requests": len(records.requests), "argv": list(argv if argv is not None else sys.argv[1:])}
    try:
        write_run(out_dir, scenario, records, summary, info, figures, force=args.force)
    except FileExistsError:
        return _fail([f"{out_dir}: output folder exists and is not empty; "
                      "choose another --out or add --force"])
    except OSError as exc:
        return _fail([f"{out_dir}: cannot write results: {exc.strerror or exc}"])
    if not args.quiet:
        print(render_text(summary, title=f"{scenario.name} ({scenario.mode}), "
                                         f"simulated in {run_s:.2f} s"))
    print(f"wrote {out_dir}")
    if records.stop_reason in ("stuck", "check_failed", "interrupted"):
        print(f"simkit: run stopped ({records.stop_reason}): {records.stop_detail}; "
              f"partial results in {out_dir}", file=sys.stderr)
        return 130 if records.stop_reason == "interrupted" else 1
    return 0


def main_exit() -> None:
    """Console-script entry point (``simkit ...``)."""
    sys.exit(main())
