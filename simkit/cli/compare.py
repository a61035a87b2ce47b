"""``python -m simkit compare RUN_DIR ... [--plot FILE] [--force]``: finished runs side by side,
a summary table and, with ``--plot``, their overlaid TTFT/ITL CDFs. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from simkit.cli.common import _fail, _Parser, _printable
from simkit.core.records import ABNORMAL_STOPS
from simkit.spec import ConfigError


def _compare_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m simkit compare",
                description="Compare finished runs side by side: a summary table and overlaid CDFs.")
    p.add_argument("runs", nargs="+", metavar="RUN_DIR", help="output folders of earlier runs")
    p.add_argument("--plot", metavar="FILE", help="also save the overlaid TTFT/ITL CDFs to this PNG file")
    p.add_argument("--force", action="store_true", help="replace an existing --plot file")
    return p


def _fmt(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _stop(summary: dict) -> str:
    """How the run ended: its stop reason, marked when its results are partial."""
    stop = summary.get("stop") if isinstance(summary, dict) else None
    reason = str(stop.get("reason", "?")) if isinstance(stop, dict) else "?"
    return f"{reason} (partial)" if reason in ABNORMAL_STOPS else reason


def compare_table(results) -> str:
    """A side-by-side table of run summaries (columns: runs); the ``stopped`` row marks a run
    that ended abnormally (interrupted, stuck...) as partial."""
    rows = [("completed / total", lambda s: f"{s['requests']['completed']}/{s['requests']['total']}"),
            ("stopped", _stop)]
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
    labels = [_printable(r.label) for r in results]
    width = max(14, *(len(label) for label in labels), *(len(_stop(r.summary)) for r in results))
    lines = [f"{'':20}" + "".join(f"{label[-width:]:>{width + 2}}" for label in labels)]
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
        if os.path.lexists(args.plot) and not os.path.isfile(args.plot):  # a FIFO would block the write
            return _fail([f"{args.plot}: exists and is not a regular file; choose another --plot"])
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
        try:
            fig = results[0].plot_cdf(*results[1:])
        except (KeyError, TypeError, ValueError) as exc:  # request rows of another shape
            return _fail([f"{args.plot}: cannot plot these runs: their request rows are not simkit's "
                          f"({type(exc).__name__}: {exc})"])
        try:
            fig.savefig(args.plot, dpi=110, metadata={"Software": None})
        except OSError as exc:
            return _fail([f"{args.plot}: cannot write the plot: {exc.strerror or exc}"])
        print(_printable(f"wrote {args.plot}"))
    return 0
