"""Command line: ``python -m simkit SCENARIO.yaml [--trace FILE] [--set KEY=VALUE ...]
[--seed N] [--out DIR] [--force] [--check] [--per-pass] [--no-plots] [--quiet]`` and
``python -m simkit compare RUN_DIR ... [--plot FILE]`` and ``python -m simkit sweep SCENARIO.yaml
--grid KEY=V1,V2 ...`` (see :mod:`simkit.cli.sweep`).

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
import shutil
import sys
import tempfile
import time
from typing import Optional, Sequence

from simkit import __version__
from simkit.spec import ConfigError, parse_overrides
from simkit.output.files import write_run
from simkit.output.report import render_text, summarize
from simkit.sim import build, load_scenario
from simkit.workload import TraceError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, pointing at this command's help
        self.exit(2, f"simkit: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="python -m simkit",
        description="Simulate LLM serving (aggregated or disaggregated) on a scenario file.",
        epilog="Other commands: 'python -m simkit compare RUN_DIR ...' (side-by-side summaries), "
               "'python -m simkit step --model M --gpu G ...' (one pass's roofline breakdown) and "
               "'python -m simkit sweep SCENARIO.yaml --grid KEY=V1,V2 ...' (parameter sweeps); "
               "each has its own --help.",
    )
    p.add_argument("scenario", help="scenario YAML file, e.g. scenarios/disagg.yaml")
    p.add_argument("--trace", metavar="FILE",
                   help="replace the workload with this trace file, its format (mooncake, agentic, azure, csv, "
                        "weka, weka_requests) detected from its first line (trace_block_size 512 unless "
                        "set with --set workload.trace_block_size=N)")
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
    p.add_argument("--no-plots", action="store_true", help="do not draw the latency CDF plot")
    p.add_argument("--quiet", action="store_true",
                   help="print only the output folder's path (no table, no progress bar)")
    p.add_argument("--version", action="version", version=f"simkit {__version__}")
    return p


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


def _compare_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simkit compare",
                description="Compare finished runs side by side: a summary table and overlaid CDFs.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="output folders of earlier runs")
    p.add_argument("--plot", metavar="FILE", help="also save the overlaid TTFT/ITL CDFs to this PNG file")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")
    return p


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def compare_table(results) -> str:
    """A side-by-side table of run summaries (columns: runs)."""
    rows = [("completed / total", lambda s: f"{s['requests']['completed']}/{s['requests']['total']}")]
    for metric, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        for q in ("p50", "p90", "p99"):
            rows.append((f"{name} {q} ms", lambda s, m=metric, q=q: _fmt(s[m] and s[m][q])))
    rows += [
        ("throughput req/s", lambda s: _fmt(s["throughput"]["requests_per_s"], ".3f")),
        ("output tokens/s", lambda s: _fmt(s["throughput"]["output_tokens_per_s"], ".1f")),
        ("goodput fraction", lambda s: _fmt(s.get("goodput", {}).get("fraction"), ".3f")),
        ("worker-seconds", lambda s: _fmt(sum(s["worker_seconds"].values()), ".1f")),
        ("GPU-hours", lambda s: _fmt(sum(s["gpu_hours"].values()) if "gpu_hours" in s else None, ".3f")),
        ("prefix hit ratio", lambda s: _fmt(s["prefix_cache_hit_ratio"], ".3f")),
    ]
    width = max(14, *(len(r.label) for r in results))
    lines = [f"{'':20}" + "".join(f"{r.label[-width:]:>{width + 2}}" for r in results)]
    for name, get in rows:
        lines.append(f"{name:20}" + "".join(f"{get(r.summary):>{width + 2}}" for r in results))
    return "\n".join(lines)


def compare_main(argv: Sequence[str]) -> int:
    """``python -m simkit compare RUN_DIR ...``: exit 0, or 2 for a folder that is not a run."""
    args = _compare_parser().parse_args(argv)
    from simkit.api import load_result

    if args.plot:
        ext = os.path.splitext(args.plot)[1].lower()
        if ext not in (".png", ".pdf", ".svg"):
            return _fail([f"{args.plot}: --plot writes .png, .pdf or .svg, not {ext or 'a file without extension'}"])
        if os.path.exists(args.plot) and not args.force:
            return _fail([f"{args.plot}: exists; choose another --plot or add --force"])
    results = []
    for run_dir in args.runs:
        if not os.path.exists(run_dir):
            return _fail([f"{run_dir}: no such folder"])
        if not os.path.isfile(os.path.join(run_dir, "summary.json")):
            return _fail([f"{run_dir}: not a simkit run folder (no summary.json)"])
        try:
            results.append(load_result(run_dir))
            compare_table(results[-1:])  # a summary.json of another shape fails here, named
        except (OSError, ValueError, ConfigError) as exc:
            lines = exc.messages if isinstance(exc, ConfigError) else [str(exc)]
            return _fail([f"{run_dir}: cannot read the run: {lines[0]}"])
        except (KeyError, TypeError, AttributeError) as exc:
            return _fail([f"{run_dir}: summary.json is not a simkit summary ({type(exc).__name__}: {exc})"])
    print(compare_table(results))
    if args.plot:
        fig = results[0].plot_cdf(*results[1:])
        try:
            fig.savefig(args.plot, dpi=110, metadata={"Software": None})
        except OSError as exc:
            return _fail([f"{args.plot}: cannot write the plot: {exc.strerror or exc}"])
        print(f"wrote {args.plot}")
    return 0


def _step_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simkit step",
                description="Time one forward pass with the roofline model and show its breakdown.")
    p.add_argument("--model", required=True, help="a shipped model name or a config.json path")
    p.add_argument("--gpu", required=True, help="a shipped GPU name (H100, H200, B200, ...)")
    p.add_argument("--tp", "--tensor-parallel-size", dest="tp", type=int, default=1, help="GPUs per worker")
    p.add_argument("--precision", choices=("bf16", "fp8", "fp4"), default="bf16", help="weight precision")
    p.add_argument("--kv-cache-dtype", choices=("auto", "bf16", "fp8"), default="auto")
    p.add_argument("--backend", choices=("vllm", "sglang", "trtllm"), default=None,
                   help="the serving engine whose fitted overheads apply (default: the GPU's fit)")
    p.add_argument("--prefill-tokens", type=int, default=0, help="prompt tokens computed in the pass (one chunk)")
    p.add_argument("--decode-contexts", default="", metavar="C1,C2,...",
                   help="KV length of each decode request after the pass, comma-separated")
    return p


def step_table(model, prefill_tokens: int, contexts: list[int]) -> str:
    """The pass's operator table and totals (``model`` a RooflineModel)."""
    ops = model.breakdown(prefill_tokens, len(contexts), sum(contexts))
    spec, gpu = model.spec, model.gpu
    lines = [f"{model.arch.name} on {model.tp} x {gpu.name} ({spec.precision} weights, {spec.kv_precision} KV): "
             f"{prefill_tokens} prefill tokens, {len(contexts)} decode requests ({sum(contexts)} context tokens)",
             f"{'op':18}{'GFLOP':>10}{'MB':>10}{'compute ms':>12}{'memory ms':>11}{'time ms':>10}  bound"]
    for op in ops:
        lines.append(f"{op.name:18}{op.flops / 1e9:10.2f}{op.bytes / 1e6:10.1f}{op.compute_s * 1e3:12.3f}"
                     f"{op.memory_s * 1e3:11.3f}{op.time_s * 1e3:10.3f}  {op.bound}")
    total = sum(op.time_s for op in ops) * 1e3
    by = {"gemm": ("gemm", "experts", "lm_head", "elementwise"),
          "attention": ("attention_prefill", "attention_decode"),
          "communication": ("allreduce",), "overhead": ("overhead",)}
    parts = ", ".join(f"{k} {sum(o.time_s for o in ops if o.name in names) * 1e3:.3f}" for k, names in by.items())
    compute = sum(o.time_s for o in ops if o.bound == "compute") * 1e3
    memory = sum(o.time_s for o in ops if o.bound == "memory") * 1e3
    lines.append(f"pass time {total:.3f} ms: {parts} ms; compute-bound ops {compute:.3f} ms, "
                 f"memory-bound ops {memory:.3f} ms ({'compute' if compute >= memory else 'memory'}-bound pass)")
    return "\n".join(lines)


def step_main(argv: Sequence[str]) -> int:
    """``python -m simkit step ...``: exit 0, or 2 for a bad name or value (one line)."""
    args = _step_parser().parse_args(argv)
    from simkit.spec import RooflineLatency
    from simkit.engine.latency import RooflineModel
    from simkit.engine.hardware import HardwareError, kv_capacity_blocks, load_gpu, load_model
    from simkit.engine.resolve import check_latency

    try:
        items = args.decode_contexts.split(",") if args.decode_contexts.strip() else []
        contexts = [int(c) for c in items]
    except ValueError:
        return _fail([f"simkit step: --decode-contexts {args.decode_contexts!r}: expected comma-separated "
                      "integers, e.g. 1000,2500"])
    if args.prefill_tokens < 0:
        return _fail([f"simkit step: --prefill-tokens must be >= 0, got {args.prefill_tokens}"])
    if any(c < 1 for c in contexts):
        return _fail([f"simkit step: --decode-contexts must each be >= 1, got {min(contexts)}"])
    if args.tp < 1:
        return _fail([f"simkit step: --tp must be >= 1, got {args.tp}"])
    if not args.prefill_tokens and not contexts:
        return _fail(["simkit step: empty pass: give --prefill-tokens and/or --decode-contexts"])
    try:
        load_model(args.model)
        load_gpu(args.gpu)
        spec = RooflineLatency(model=args.model, gpu=args.gpu, tensor_parallel_size=args.tp,
                               precision=args.precision, kv_cache_dtype=args.kv_cache_dtype,
                               backend=args.backend)
        check_latency(spec)  # the tensor-parallel size must split the heads
        kv_capacity_blocks(spec, 16)  # the weights must leave room for KV, as a scenario requires
    except (HardwareError, ValueError) as exc:
        return _fail([f"simkit step: {exc}"])
    longest = load_model(args.model).max_position_embeddings
    if longest and max([args.prefill_tokens] + contexts) > longest:
        return _fail([f"simkit step: {args.model} takes sequences of at most {longest} tokens "
                      f"(max_position_embeddings); got {max([args.prefill_tokens] + contexts)}"])
    print(step_table(RooflineModel(spec), args.prefill_tokens, contexts))
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        return compare_main(argv[1:])
    if argv and argv[0] == "step":
        return step_main(argv[1:])
    if argv and argv[0] == "sweep":
        from simkit.cli.sweep import main as sweep_main

        return sweep_main(argv[1:])
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
            overrides.append(("workload", {"kind": "trace", "path": os.path.abspath(args.trace)}))
        overrides += parse_overrides(args.overrides)
        if args.seed is not None:
            if any(key == "seed" for key, _ in overrides):
                return _fail(["--seed and --set seed=... both set the seed; give one"])
            overrides.append(("seed", args.seed))
        scenario = load_scenario(args.scenario, overrides)
    except ConfigError as exc:
        return _fail(exc.messages)
    if args.out is not None and not args.out.strip():
        return _fail(["--out: expected a folder name, got an empty one"])
    reserved = None if args.out else _default_out(scenario.name)
    out_dir = args.out or reserved
    try:
        inputs = [args.scenario] + ([scenario.workload.path] if hasattr(scenario.workload, "path") else [])
        problem = _check_out(out_dir, args.force, inputs)
        if problem:
            return _fail([problem])
        if args.stream and getattr(scenario.workload, "max_in_flight", None) is not None:
            return _fail([f"{args.scenario}: --stream cannot replay a closed loop (workload.max_in_flight): "
                          "it needs the whole workload; run without --stream"])
        return _simulate_and_write(args, argv, interrupts, scenario, out_dir)
    finally:
        # the default folder is reserved before the run; one that got no results goes again
        if reserved is not None and os.path.isdir(reserved) and not os.listdir(reserved):
            os.rmdir(reserved)


def _simulate_and_write(args, argv: list, interrupts: _Interrupts, scenario, out_dir: str) -> int:
    wall0 = time.perf_counter()
    sink = spool_dir = None
    try:
        if args.stream:
            from simkit.output.spool import RequestSpool

            parent = os.path.dirname(os.path.abspath(out_dir))
            os.makedirs(parent, exist_ok=True)
            spool_dir = tempfile.mkdtemp(prefix=".simkit-spool-", dir=parent)
            sink = RequestSpool(os.path.join(spool_dir, "records.parquet"))
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
    records = sim.run(check=args.check)
    interrupts.defer = True  # from here on a signal only waits for the results to be written
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
    try:
        try:
            write_run(out_dir, scenario, records, summary, info, figures, force=args.force)
        except FileExistsError:  # filled by someone else while we ran: keep our results anyway
            taken, k = out_dir, 2
            while os.path.exists(f"{taken}-{k}"):
                k += 1
            out_dir = f"{taken}-{k}"
            print(f"simkit: {taken} was filled by another process during the run; writing to {out_dir}",
                  file=sys.stderr)
            write_run(out_dir, scenario, records, summary, info, figures, force=False)
    except OSError as exc:
        return _fail([f"{out_dir}: cannot write results: {exc.strerror or exc}"])
    if args.quiet:
        print(out_dir)  # just the path: OUT=$(python -m simkit ... --quiet)
    else:
        print(render_text(summary, title=f"{scenario.name} ({scenario.mode}), "
                                         f"simulated in {run_s:.2f} s"))
        print(f"wrote {out_dir}")
    if records.stop_reason in ("stuck", "check_failed", "policy_error", "interrupted"):
        print(_printable(f"simkit: run stopped ({records.stop_reason}): {records.stop_detail}; "
                         f"partial results in {out_dir}", 2000), file=sys.stderr)
        return 130 if records.stop_reason == "interrupted" else 1
    if interrupts.count:
        print(f"simkit: interrupted after the simulation had finished; the complete results are in {out_dir}",
              file=sys.stderr)
        return 130
    return 0


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
