"""Parameter sweeps: every combination of ``--grid`` values, run in parallel.

``python -m simkit sweep SCENARIO.yaml --grid KEY=V1,V2,... [--grid ...] [--set ...] [--out
DIR] [--jobs N | --scheduler ADDRESS]`` runs every combination on local worker processes
(default: one per core) or on a Dask cluster, writes each run's usual folder under
``DIR/runNNN``, a ``sweep.csv`` / ``sweep.parquet`` table (one row per run: the swept values,
``status`` and ``error``, then the headline metrics) and ``pareto.png`` (output tokens/s per
GPU against p90 TTFT), and prints the table. A point that fails (an invalid value, a trace
error, a stuck run) is recorded as failed with its error and the rest complete; the exit code
is then 1, with a line on stderr. When every point fails (a bad trace, say), nothing is written
and the exit code is 2. The sweep folder is built beside ``DIR`` and renamed into place when
the sweep ends, so ``--force`` replaces an earlier folder whole, and only then. Results do not
depend on where or in which order runs execute. GPUs per point: each pool's workers x TP x DP
(with a planner, the time-weighted mean provisioned). Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import sys
from typing import Any, Sequence

from simkit.cli.batch import add_batch_arguments, batch_overrides, batch_problem, scheduler_problem
from simkit.cli.points import DaskMissing, SchedulerUnreachable, _execute
from simkit.cli.common import _check_out, _default_out, _fail, _Interrupts, _Parser, _printable, yaml_text
from simkit.output.files import beside, claim_folder, folder_content, move_into_place, sibling_tmp_dir
from simkit.sim import input_files, load_scenario
from simkit.spec import ConfigError, yaml_load

#: the most points a sweep runs
MAX_POINTS = 10_000

#: summary values copied into the sweep table, as (column, path in summary.json)
COLUMNS = [
    ("completed", ("requests", "completed")),
    ("rejected", ("requests", "rejected")),
    ("ttft_p50_ms", ("ttft_ms", "p50")), ("ttft_p90_ms", ("ttft_ms", "p90")), ("ttft_p99_ms", ("ttft_ms", "p99")),
    ("itl_p50_ms", ("itl_ms", "p50")), ("itl_p90_ms", ("itl_ms", "p90")),
    ("e2e_p50_ms", ("e2e_ms", "p50")), ("e2e_p90_ms", ("e2e_ms", "p90")),
    ("requests_per_s", ("throughput", "requests_per_s")),
    ("output_tokens_per_s", ("throughput", "output_tokens_per_s")),
    ("goodput_fraction", ("goodput", "fraction")),
    ("ttft_sla_fraction", ("goodput", "fraction_by_bound", "ttft_ms")),
    ("itl_sla_fraction", ("goodput", "fraction_by_bound", "itl_ms")),
    ("overloaded", ("saturation", "overloaded")),
]

#: the terminal's table: these columns (the swept values first), the rest in sweep.csv
SHOWN = ["status", "ttft_p90_ms", "itl_p50_ms", "goodput_fraction", "output_tokens_per_s_per_gpu", "overloaded",
         "gpus"]


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """``KEY=V1,V2`` strings to ``[(key, [v1, v2])]``; values are YAML scalars or flow
    collections (``KEY=[0.8,0.6],[0.5,0.5]`` is two lists: commas inside brackets, braces or
    quotes do not split values).

    Raises:
        ConfigError: a malformed item, an empty value, or a key given twice.
    """
    grid, seen = [], set()
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key or not text.strip():
            raise ConfigError([f"--grid {item!r}: expected KEY=V1,V2,... e.g. pools.decode.workers=2,4,8"])
        if key in seen:
            raise ConfigError([f"--grid {key}: given twice"])
        seen.add(key)
        values = _split_values(text)
        if any(not v.strip() for v in values):  # 'workers=1,,2': a slip, not a null point
            raise ConfigError([f"--grid {item!r}: an empty value; give each value (write null for none)"])
        grid.append((key, [yaml_load(v.strip(), source=f"--grid {key}") for v in values]))
    return grid


def _split_values(text: str) -> list[str]:
    """``text`` split at its commas outside brackets, braces and quotes (unbalanced brackets
    are left to the YAML parser to report)."""
    parts, depth, quote, start = [], 0, None, 0
    for i, ch in enumerate(text):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth = max(0, depth - 1)
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def combinations(grid: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """Every combination, the last key varying fastest."""
    keys = [k for k, _ in grid]
    return [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in grid))]


def _get(summary: dict, path: tuple) -> Any:
    node: Any = summary
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def main(argv: Sequence[str]) -> int:
    p = _Parser(prog="python -m simkit sweep", description="Run every combination of --grid values.")
    p.add_argument("scenario")
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...", required=True,
                   help="a scenario field and its values; repeat for a cross product")
    add_batch_arguments(p, "sweep folder (default: runs/sweep-NAME-YYYYmmdd-HHMMSS)",
                        set_help="override applied to every run")
    args = p.parse_args(argv)
    problem = batch_problem(args)
    if problem:
        return _fail([problem])
    try:
        grid = parse_grid(args.grid)
        points = math.prod(len(values) for _, values in grid)
        if points > MAX_POINTS:  # each point is a run: a grid that size would never end
            return _fail([f"--grid: {points:,} points; a sweep runs at most {MAX_POINTS:,} (split it into sweeps)"])
        common = batch_overrides(args)
        combos = combinations(grid)
        base = load_scenario(args.scenario, common)
    except ConfigError as exc:
        return _fail(exc.messages)
    # a point whose values are invalid is recorded as failed and the others run; but when no
    # point is valid (a misspelt key, say) nothing is run or written
    problems, inputs = [], {args.scenario}
    for combo in combos:
        try:
            point = load_scenario(args.scenario, common + list(combo.items()))
        except ConfigError as exc:
            problems.append(exc.messages[0])
            continue
        inputs.update(path for _, path in input_files(point))  # every file any point reads is kept
    if problems and len(problems) == len(combos):
        return _fail([f"no point of the grid is a valid scenario; the first: {problems[0]}"])
    try:
        reserved = None if args.out else _default_out(base.name, prefix="sweep-")
    except OSError as exc:
        return _fail([f"runs: cannot create the default output folder: {exc.strerror or exc}; choose one with --out"])
    out = args.out or reserved
    claim = None
    try:
        problem = _check_out(out, args.force, sorted(inputs))
        if problem:
            return _fail([problem])
        try:  # two sweeps started together with one --out: the second is refused here
            claim = claim_folder(out)
            work = sibling_tmp_dir(out, prefix=".simkit-sweep-")
        except OSError as exc:
            return _fail([f"{out}: cannot use the output folder: {exc.strerror or exc}"])
        return _sweep(args, grid, combos, common, out, work)
    finally:
        if claim is not None:
            claim.release()
        if reserved is not None and os.path.isdir(reserved) and not os.listdir(reserved):
            os.rmdir(reserved)


def _keep(work: str, out: str) -> str:
    """Put the sweep folder ``work`` in place: at ``out`` when it holds no results, else
    beside it (``OUT.partial``), so earlier results are never replaced by an unfinished
    sweep. Returns where it went."""
    target = out if not (os.path.isdir(out) and folder_content(out)) else beside(out, "partial")
    move_into_place(work, target, force=False)
    return target


def _sweep(args, grid: list, combos: list, common: list, out: str, work: str) -> int:
    """Run the points into ``work``, then write the table and move ``work`` to ``out``. The
    sweep is built in a sibling temp folder and renamed into place at the end, so a --force
    sweep never mixes with, or loses, what the folder held unless it completes."""
    scenario_path = os.path.abspath(args.scenario)
    jobs = [(scenario_path, common + list(combo.items()), os.path.join(work, f"run{i:03d}"))
            for i, combo in enumerate(combos)]
    with _Interrupts() as interrupts:  # SIGTERM too stops the sweep as Ctrl-C does
        try:
            outcomes = _execute(jobs, args.jobs, args.scheduler, progress=sys.stderr.isatty())
        except (DaskMissing, SchedulerUnreachable) as exc:
            shutil.rmtree(work, ignore_errors=True)  # nothing ran: leave nothing behind
            return _fail([scheduler_problem(args.scheduler, exc)])
        except KeyboardInterrupt:
            interrupts.defer = True  # moving the finished runs is not interrupted in turn
            if not os.listdir(work):
                shutil.rmtree(work, ignore_errors=True)
                print("simkit: sweep interrupted before a run finished; nothing written", file=sys.stderr)
                return 130
            where = _keep(work, out)
            kept = f" ({out} keeps its earlier results)" if os.path.realpath(where) != os.path.realpath(out) else ""
            print(_printable(f"simkit: sweep interrupted; the finished runs are in {where}{kept} (no sweep.csv)"),
                  file=sys.stderr)
            return 130
        # from here on a signal only waits for the table and the folder to be written
        interrupts.defer = True
        code = _finish(args, grid, combos, outcomes, scenario_path, out, work)
        if interrupts.count and code in (0, 1):
            print(_printable(f"simkit: interrupted after the sweep had finished; its results are in {out}"),
                  file=sys.stderr)
            return 130
        return code


def _finish(args, grid: list, combos: list, outcomes: list, scenario_path: str, out: str, work: str) -> int:
    """Write the sweep's table and plot into ``work``, move it to ``out`` and print the table."""

    for outcome in outcomes:  # errors name the scenario as the user gave it, not its absolute path
        if outcome["error"]:
            outcome["error"] = outcome["error"].replace(scenario_path, args.scenario)
    failures = [o["error"] for o in outcomes if o["status"] != "ok"]
    if len(failures) == len(outcomes):  # a bad trace, say: one error, nothing written
        shutil.rmtree(work, ignore_errors=True)
        return _fail([f"every point of the sweep failed; the first: {failures[0]}"])
    table = sweep_table(combos, outcomes, args.sla_fraction)
    try:
        table.to_csv(os.path.join(work, "sweep.csv"), index=False)
        table.to_parquet(os.path.join(work, "sweep.parquet"), index=False)
        from simkit.output.plots import pareto

        title = f"{os.path.basename(args.scenario)}: sweep of {', '.join(k for k, _ in grid)}"
        pareto(table, [k for k, _ in grid], args.sla_fraction, title).savefig(
            os.path.join(work, "pareto.png"), dpi=110, metadata={"Software": None})
        move_into_place(work, out, force=True)
    except OSError as exc:  # a full disk: the finished runs are kept where they can be found
        try:
            where = _keep(work, out)
        except OSError:
            where = work
        print(_printable(f"simkit: cannot write the sweep's table and plot: {exc.strerror or exc}; the finished "
                         f"runs are in {where}"), file=sys.stderr)
        return 1
    print("\n".join(_printable(line, 10_000) for line in terminal_table(table, [k for k, _ in grid]).splitlines()))
    print(_printable(f"wrote {out} ({len(table)} runs, {len(failures)} failed; sweep.csv, pareto.png)"))
    if failures:
        print(_printable(f"simkit: {len(failures)} of {len(table)} points failed (the error column of sweep.csv); "
                         f"the first: {failures[0]}"), file=sys.stderr)
    return 1 if failures else 0


def sweep_table(combos: list[dict], outcomes: list[dict], sla_fraction: float = 0.9):
    """One row per run: ``run``, the swept values, ``status``, ``error``, the headline metrics
    (:data:`COLUMNS`), ``gpus`` (per point: workers x TP x DP over the pools), ``gpu_hours``
    (summed over the pools), ``output_tokens_per_s_per_gpu`` and ``meets_sla`` (at least
    ``sla_fraction`` of the requests meet the scenario's SLA; None without an SLA)."""
    import pandas as pd

    rows = []
    for i, (combo, outcome) in enumerate(zip(combos, outcomes)):
        row = {"run": f"run{i:03d}"}
        row.update({k: str(v) if isinstance(v, (dict, list)) else v for k, v in combo.items()})
        row.update(status=outcome["status"], error=outcome["error"])
        summary = outcome["summary"] or {}
        row.update({name: _get(summary, path) for name, path in COLUMNS})
        tokens, gpus = row["output_tokens_per_s"], outcome["gpus"]
        row["gpus"] = gpus
        hours = summary.get("gpu_hours")
        row["gpu_hours"] = sum(hours.values()) if hours else None
        row["output_tokens_per_s_per_gpu"] = tokens / gpus if tokens is not None and gpus else None
        fraction = row["goodput_fraction"]
        row["meets_sla"] = None if fraction is None else bool(fraction >= sla_fraction)
        rows.append(row)
    table = pd.DataFrame(rows)
    for key in combos[0] if combos else ():
        # a grid of values of several kinds (true and maybe, 2 and x) is one column of their
        # YAML text: a table column (and parquet) holds one type
        kinds = {_kind(combo[key]) for combo in combos} - {"null"}
        if len(kinds) > 1:
            table[key] = [None if combo[key] is None else yaml_text(combo[key]) for combo in combos]
    for column in ("completed", "rejected"):  # counts stay integers beside failed (empty) rows
        table[column] = table[column].astype("Int64")
    return table


def terminal_table(table, knobs: Sequence[str], width: int = 100) -> str:
    """The sweep table as the terminal shows it: the run, the swept values (each cut to 24
    characters) and the headline columns of :data:`SHOWN` under short names (``ttft_p90``,
    ``itl_p50`` in ms, ``sla_met`` the goodput fraction, ``tok/s/gpu``), dropped from the right
    until the lines fit ``width`` columns; ``sweep.csv`` has every column."""
    import pandas as pd

    columns = ["run"] + list(knobs) + SHOWN
    shown = table[[c for c in columns if c in table]].copy()
    for column in shown.columns:
        if shown[column].dtype == object:  # <NA> and None print as "-" like the rest
            shown[column] = shown[column].astype(object).where(shown[column].notna(), "-")
            shown[column] = [v if len(str(v)) <= 24 else str(v)[:23] + "~" for v in shown[column]]
    names = {k: ".".join(k.split(".")[-2:]) for k in knobs}  # pools.decode.workers -> decode.workers
    names.update(ttft_p90_ms="ttft_p90", itl_p50_ms="itl_p50", goodput_fraction="sla_met",
                 output_tokens_per_s_per_gpu="tok/s/gpu")
    shown = shown.rename(columns=names)
    while True:
        with pd.option_context("display.width", 10_000, "display.max_columns", 100):
            text = shown.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.2f}")
        if max(len(line) for line in text.splitlines()) <= width or len(shown.columns) <= 2 + len(knobs):
            return text
        shown = shown.iloc[:, :-1]


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "text"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
