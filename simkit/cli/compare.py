"""``python -m simkit compare RUN_DIR ... [--plot FILE] [--force]``: finished runs side by side,
a summary table and, with ``--plot``, their overlaid TTFT/ITL CDFs. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import argparse
import os
from typing import Sequence

from simkit.cli.common import _fail, _Parser, _printable, yaml_text
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


def _flat(value, prefix: str = "") -> dict:
    """A scenario mapping as ``{dotted.path: value}`` (lists and scalars are leaves)."""
    if isinstance(value, dict) and value:
        out: dict = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def differing_fields(results) -> dict:
    """The scenario fields whose values differ between ``results`` (each a :class:`simkit.Result`),
    as ``{dotted.path: [value per run]}`` in path order; a field one run lacks is ``None`` there.
    The scenario's ``name`` is left out (a label, not a knob)."""
    from simkit.spec import to_dict

    flats = [_flat(to_dict(r.scenario)) for r in results]
    keys = sorted(set().union(*flats) - {"name"})
    return {k: [f.get(k) for f in flats] for k in keys if len({repr(f.get(k)) for f in flats}) > 1}


def _value_text(value) -> str:
    return _printable(yaml_text(value))


def column_labels(results, differing: dict) -> list[str]:
    """Column headings: ``leaf=value`` of the one field that differs when it tells every run
    apart, else the runs' labels (folder names; the differing fields are rows then)."""
    if len(differing) == 1 and len(results) > 1:
        (key, values), = differing.items()
        labels = [f"{key.rsplit('.', 1)[-1]}={_value_text(v)}" for v in values]
        if len(set(labels)) == len(labels):
            return labels
    return [_printable(r.label) for r in results]


def _row_name(path: str, width: int = 20) -> str:
    """A dotted field path in at most ``width`` characters: its last components that fit (a
    longer last component cut, ending in "~")."""
    parts = _printable(path).split(".")
    name = parts[-1] if len(parts[-1]) <= width else parts[-1][:width - 1] + "~"
    for part in reversed(parts[:-1]):
        if len(part) + 1 + len(name) > width:
            break
        name = f"{part}.{name}"
    return name


def _row_names(paths: Sequence[str], width: int = 20) -> list[str]:
    """:func:`_row_name` of each path; where two come out alike, ``parent.leaf`` cut to
    ``width`` (ending in "~") for those (``latency.tensor_par~``, ``aggregated.tensor_~``)."""
    def parent_leaf(path: str) -> str:
        text = ".".join(_printable(path).split(".")[-2:])
        return text if len(text) <= width else text[:width - 1] + "~"

    names = [_row_name(p, width) for p in paths]
    return [n if names.count(n) == 1 else parent_leaf(p) for n, p in zip(names, paths)]


#: the TTFT components ``compare`` shows (summary ``ttft_components``), in a request's order,
#: with their row names
TTFT_PARTS = {"frontend": "frontend", "router_queue": "router queue", "engine_queue": "queue",
              "prefill": "prefill", "transfer": "transfer", "decode_queue": "decode queue",
              "first_token_overhead": "1st token ovh"}


def compare_table(results) -> str:
    """A side-by-side table of run summaries (columns: runs, headed by the one scenario field
    that differs between them where it tells them apart, :func:`column_labels`). Above the
    figures, one row per differing field (:func:`differing_fields`, at most 12, then a count);
    the ``stopped`` row marks a run that ended abnormally (interrupted, stuck...) as partial;
    the TTFT components some run spent time in (``ttft_components``, p50 and p90 ms) follow
    the latencies."""
    differing = differing_fields(results) if len(results) > 1 else {}
    shown = list(differing.items())[:12]
    names = _row_names([key for key, _ in shown])
    fields = [(name, [_value_text(v) for v in values]) for name, (_, values) in zip(names, shown)]
    if len(differing) > 12:
        fields.append((f"(+{len(differing) - 12} fields)", [""] * len(results)))
    rows = [("completed / total", lambda s: f"{s['requests']['completed']}/{s['requests']['total']}"),
            ("stopped", _stop)]
    for metric, name in (("ttft_ms", "TTFT"), ("itl_ms", "ITL"), ("e2e_ms", "E2E")):
        for q in ("p50", "p90", "p99"):
            rows.append((f"{name} {q} ms", lambda s, m=metric, q=q: _fmt(s[m] and s[m][q])))

    def part(summary: dict, name: str, q: str):
        parts = summary.get("ttft_components") if isinstance(summary, dict) else None
        one = parts.get(name) if isinstance(parts, dict) else None
        return one.get(q) if isinstance(one, dict) else None

    # the components some run spent time in (a scenario without a frontend or a link shows none)
    for name, short in TTFT_PARTS.items():
        if any(part(r.summary, name, "p90") for r in results):
            for q in ("p50", "p90"):
                rows.append((f"  {short} {q}", lambda s, n=name, q=q: _fmt(part(s, n, q))))
    rows += [
        ("throughput req/s", lambda s: _fmt(s["throughput"]["requests_per_s"], ".3f")),
        ("output tokens/s", lambda s: _fmt(s["throughput"]["output_tokens_per_s"], ".1f")),
        ("goodput fraction", lambda s: _fmt(s.get("goodput", {}).get("fraction"), ".3f")),
        ("worker-seconds", lambda s: _fmt(sum(s["worker_seconds"].values()), ".1f")),
        ("GPU-hours", lambda s: _fmt(sum(s["gpu_hours"].values()) if "gpu_hours" in s else None, ".3f")),
        ("prefix hit ratio", lambda s: _fmt(s["prefix_cache_hit_ratio"], ".3f")),
    ]
    labels = column_labels(results, differing)
    cells = fields + [(name, [get(r.summary) for r in results]) for name, get in rows]
    width = min(40, max(14, *(len(label) for label in labels), *(len(c) for _, row in cells for c in row)))
    lines = [f"{'':20}" + "".join(f"{label[-width:]:>{width + 2}}" for label in labels)]
    for name, row in cells:
        lines.append(f"{name:20}" + "".join(f"{c[-width:]:>{width + 2}}" for c in row))
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
