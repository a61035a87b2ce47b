"""The run command, ``python -m simkit SCENARIO.yaml [--trace FILE] [--set KEY=VALUE ...] [--seed N]
[--out DIR] [--force] [--check] [--per-pass] [--timeline] [--stream] [--no-plots] [--quiet]``: one
scenario simulated and its output folder written; the exit codes are in :mod:`simkit.cli`.
Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from typing import Sequence

from simkit import __version__
from simkit.cli.common import _check_out, _default_out, _fail, _Interrupts, _Parser, _printable
from simkit.spec import TRACE_FORMATS, ConfigError, parse_overrides
from simkit.core.records import ABNORMAL_STOPS
from simkit.output.files import beside, claim_folder, folder_content, sibling_tmp_dir, write_run
from simkit.output.report import render_text, summarize
from simkit.sim import build, changed_inputs, input_files, load_scenario, record_inputs
from simkit.workload import TraceError


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simkit",
        description="Simulate LLM serving (aggregated or disaggregated) on a scenario file.",
        epilog="Other commands: 'python -m simkit compare RUN_DIR ...' (side-by-side summaries), "
               "'python -m simkit step --model M --gpu G ...' (one pass's roofline breakdown), "
               "'python -m simkit sweep SCENARIO.yaml --grid KEY=V1,V2 ...' (parameter sweeps), "
               "'python -m simkit capacity SCENARIO.yaml' (the highest rate within the SLA) and "
               "'python -m simkit recommend SCENARIO.yaml --gpus N' (what to deploy within a GPU budget); "
               "each has its own --help.",
    )
    p.add_argument("scenario", help="scenario YAML file, e.g. scenarios/disagg.yaml")
    p.add_argument("--trace", metavar="FILE",
                   help=f"replace the workload with this trace file, its format ({', '.join(TRACE_FORMATS)}) "
                        "detected from its first line (trace_block_size 512 unless set with --set "
                        "workload.trace_block_size=N)")
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
    p.add_argument("--timeline", action="store_true",
                   help="record every forward pass: write timeline.json (Chrome/Perfetto trace of passes per "
                        "worker and KV transfers) and a pass-timeline plot; memory grows with the passes")
    p.add_argument("--stream", action="store_true",
                   help="replay a long workload with memory bounded by the requests in flight: requests are "
                        "read as the run reaches them and records written to disk as requests end (rows of "
                        "requests.jsonl then come in completion order)")
    p.add_argument("--no-plots", action="store_true", help="draw no plots (latency CDF, planner, pass timeline, worker series)")
    p.add_argument("--quiet", action="store_true",
                   help="print only the output folder's path (no table, no progress bar)")
    p.add_argument("--version", action="version", version=f"simkit {__version__}")
    return p


def run_main(argv: Sequence[str]) -> int:
    """``python -m simkit SCENARIO.yaml ...``: the exit codes are in :mod:`simkit.cli`."""
    argv = list(argv)
    args = _parser().parse_args(argv)
    with _Interrupts() as interrupts:
        try:
            return _run_cli(args, argv, interrupts)
        except KeyboardInterrupt:
            print("simkit: interrupted before the simulation started; nothing written", file=sys.stderr)
            return 130


def _run_cli(args, argv: list, interrupts: _Interrupts) -> int:
    try:
        overrides = []
        if args.trace is not None:
            overrides.append(("workload", {"kind": "trace", "path": os.path.abspath(os.path.expanduser(args.trace))}))
        overrides += parse_overrides(args.overrides)
        if args.seed is not None:
            if any(key == "seed" for key, _ in overrides):
                return _fail(["--seed and --set seed=... both set the seed; give one"])
            overrides.append(("seed", args.seed))
        scenario = record_inputs(load_scenario(args.scenario, overrides))
    except ConfigError as exc:
        return _fail(exc.messages)
    if args.out is not None and not args.out.strip():
        return _fail(["--out: expected a folder name, got an empty one"])
    try:
        reserved = None if args.out else _default_out(scenario.name)
    except OSError as exc:
        return _fail([f"runs: cannot create the default output folder: {exc.strerror or exc}; choose one with --out"])
    out_dir = args.out or reserved
    claim = None
    try:
        inputs = [args.scenario] + [path for _, path in input_files(scenario)]
        problem = _check_out(out_dir, args.force, inputs)
        if problem:
            return _fail([problem])
        if args.stream and getattr(scenario.workload, "max_in_flight", None) is not None:
            return _fail([f"{args.scenario}: --stream cannot replay a closed loop (workload.max_in_flight): "
                          "it needs the whole workload; run without --stream"])
        try:  # two runs started together with one --out: the second is refused here
            claim = claim_folder(out_dir)
        except OSError as exc:
            return _fail([f"{out_dir}: cannot use the output folder: {exc.strerror or exc}"])
        return _simulate_and_write(args, argv, interrupts, scenario, out_dir)
    finally:
        if claim is not None:
            claim.release()
        # the default folder is reserved before the run; one that got no results goes again
        if reserved is not None and os.path.isdir(reserved) and not os.listdir(reserved):
            os.rmdir(reserved)


def _simulate_and_write(args, argv: list, interrupts: _Interrupts, scenario, out_dir: str) -> int:
    wall0 = time.perf_counter()
    sink = spool_dir = None
    try:
        if args.stream:
            from simkit.output.spool import RequestSpool

            try:
                spool_dir = sibling_tmp_dir(out_dir, prefix=".simkit-spool-")
                sink = RequestSpool(os.path.join(spool_dir, "records.parquet"))
            except OSError as exc:
                return _fail([f"{out_dir}: cannot create the records spool beside it: {exc.strerror or exc}"])
        try:
            # no output file holds token timelines yet, so they are not recorded
            sim = build(scenario, record_token_times=False, fast_forward=not args.per_pass,
                        record_passes=args.timeline, stream=args.stream, sink=sink)
        except ConfigError as exc:  # a kind: python policy that does not import or fit its protocol
            return _fail([f"{args.scenario}: {m}" for m in exc.messages])
        return _run_and_write(args, argv, interrupts, scenario, out_dir, sim, wall0)
    except TraceError as exc:  # a bad trace, met while building or (streamed) during the run
        return _fail([str(exc)])
    finally:
        if spool_dir is not None:
            shutil.rmtree(spool_dir, ignore_errors=True)


def _run_and_write(args, argv: list, interrupts: _Interrupts, scenario, out_dir: str, sim, wall0: float) -> int:
    load_s = time.perf_counter() - wall0
    if not args.quiet and sys.stderr.isatty():
        from simkit.output.progress import attach_progress

        attach_progress(sim)
    try:
        records = sim.run(check=args.check)
    except OSError as exc:  # the streamed records' spool: a full disk, say
        print(_printable(f"simkit: the run stopped: cannot write the streamed records beside {out_dir}: "
                         f"{exc.strerror or exc}; nothing written"), file=sys.stderr)
        return 1
    interrupts.defer = True  # from here on a signal only waits for the results to be written
    if args.stream:  # read while the run went on: a file changed meanwhile gave mixed records
        changed = changed_inputs(scenario.inputs)
        if changed:
            path, digest, now = changed[0]
            print(_printable(f"simkit: the run stopped: {path} (SHA-256 {digest[:12]}... at the start, "
                             f"{'gone' if now is None else now[:40] + ' now'}) changed while the run read it "
                             "(--stream reads it as the run goes): the records mix both versions; nothing "
                             "written, rerun"), file=sys.stderr)
            return 1
    run_s = time.perf_counter() - wall0 - load_s
    summary = summarize(records, scenario.sla)
    figures = {}
    if not args.no_plots:
        from simkit.output.plots import latency_cdf

        figures["latency_cdf"] = latency_cdf([(scenario.name, records)], scenario.sla)
        if records.pool_samples is not None:
            from simkit.output.plots import planner_series

            figures["planner"] = planner_series(records, scenario.sla)
        if args.timeline:
            from simkit.output.plots import pass_timeline, worker_series

            figures["pass_timeline"] = pass_timeline(records)
            figures["worker_series"] = worker_series(records)
    info = {"simkit_version": __version__, "load_s": load_s, "run_s": run_s, "check": args.check,
            "per_pass": args.per_pass, "timeline": args.timeline,
            "requests": len(records.requests), "argv": argv}
    partial = records.stop_reason in ABNORMAL_STOPS
    target, kept = out_dir, None
    if partial and os.path.isdir(out_dir) and folder_content(out_dir):
        # --force over earlier results: partial results never replace them; they go beside
        target, kept = beside(out_dir, "partial"), out_dir
    try:
        try:
            write_run(target, scenario, records, summary, info, figures, force=args.force and kept is None)
        except FileExistsError:  # filled by another program while we ran: keep our results anyway
            taken, target = target, beside(target, "new")
            print(_printable(f"simkit: {taken} was filled by another process during the run; writing to {target}"),
                  file=sys.stderr)
            write_run(target, scenario, records, summary, info, figures, force=False)
    except OSError as exc:
        print(_printable(f"simkit: {target}: cannot write the results: {exc.strerror or exc}; nothing written"),
              file=sys.stderr)
        return 1
    shown = target if kept is None else os.path.relpath(target)
    if args.quiet:
        print(shown)  # just the path: OUT=$(python -m simkit ... --quiet)
    else:
        print(render_text(summary, title=_printable(f"{scenario.name} ({scenario.mode}), "
                                                    f"simulated in {run_s:.2f} s")))
        print(_printable(f"wrote {shown}"))
    saturation = summary.get("saturation")
    if saturation is not None and saturation["overloaded"]:
        print(_printable(f"simkit: {saturation['verdict']}"), file=sys.stderr)
    if partial:
        where = f"partial results in {shown}" + (f" ({kept} keeps its earlier results)" if kept else "")
        print(_printable(f"simkit: run stopped ({records.stop_reason}): {records.stop_detail}; {where}", 2000),
              file=sys.stderr)
        return 130 if records.stop_reason == "interrupted" else 1
    if interrupts.count:
        print(_printable(f"simkit: interrupted after the simulation had finished; the complete results are in "
                         f"{shown}"), file=sys.stderr)
        return 130
    return 0
