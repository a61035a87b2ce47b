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
import os
import shutil
import sys
from typing import Any, Optional, Sequence

from simkit.cli.common import _check_out, _fail, _Interrupts, _Parser
from simkit.sim import load_scenario
from simkit.spec import ConfigError, parse_overrides, yaml_load

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
]


def parse_grid(items: Sequence[str]) -> list[tuple[str, list[Any]]]:
    """``KEY=V1,V2`` strings to ``[(key, [v1, v2])]``; values are YAML scalars.

    Raises:
        ConfigError: a malformed item, or a key given twice.
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
        grid.append((key, [yaml_load(v.strip(), source=f"--grid {key}") for v in text.split(",")]))
    return grid


def combinations(grid: list[tuple[str, list[Any]]]) -> list[dict[str, Any]]:
    """Every combination, the last key varying fastest."""
    keys = [k for k, _ in grid]
    return [dict(zip(keys, values)) for values in itertools.product(*(v for _, v in grid))]


def _run_one(scenario_path: str, overrides: list, out_dir: str) -> dict:
    """Run one combination in this process and write its folder.

    Returns ``{"status": "ok"|"failed", "error": str|None, "summary": dict|None, "gpus": float}``;
    never raises for a bad point (its error is the message).
    """
    from simkit.output.files import write_run
    from simkit.output.report import summarize
    from simkit.sim import build
    from simkit.workload import TraceError

    try:
        scenario = load_scenario(scenario_path, overrides)
        records = build(scenario, record_token_times=False).run()
    except ConfigError as exc:
        return {"status": "failed", "error": "; ".join(m.removeprefix("--set ") for m in exc.messages),
                "summary": None, "gpus": None}
    except TraceError as exc:
        return {"status": "failed", "error": str(exc), "summary": None, "gpus": None}
    summary = summarize(records, scenario.sla)
    write_run(out_dir, scenario, records, summary, {"sweep": True}, figures={}, force=True)
    failed = records.stop_reason in ("stuck", "check_failed", "policy_error")
    # GPUs: TP x DP per worker; with a planner, the time-weighted mean of the GPUs provisioned
    if scenario.planner is None or records.end_at <= 0:
        gpus = sum(spec.workers * spec.gpus_per_worker for _, spec in scenario.pools.named())
    else:
        gpus = sum(records.gpu_seconds.values()) / records.end_at
    return {"status": "failed" if failed else "ok", "error": records.stop_detail if failed else None,
            "summary": summary, "gpus": gpus}


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
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override applied to every run")
    p.add_argument("--out", metavar="DIR", help="sweep folder (default: runs/sweep-NAME-YYYYmmdd-HHMMSS)")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out folder")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                       help="local worker processes (default: one per core)")
    group.add_argument("--scheduler", metavar="ADDRESS", help="run on this Dask scheduler (tcp://host:8786)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        return _fail([f"--jobs {args.jobs}: expected at least 1"])
    try:
        grid = parse_grid(args.grid)
        common = parse_overrides(args.overrides)
        combos = combinations(grid)
        base = load_scenario(args.scenario, common)
    except ConfigError as exc:
        return _fail(exc.messages)
    import time

    # a point whose values are invalid is recorded as failed and the others run; but when no
    # point is valid (a misspelt key, say) nothing is run or written
    problems = []
    for combo in combos:
        try:
            load_scenario(args.scenario, common + list(combo.items()))
        except ConfigError as exc:
            problems.append(exc.messages[0])
    if problems and len(problems) == len(combos):
        return _fail([f"no point of the grid is a valid scenario; the first: {problems[0]}"])
    out = args.out or os.path.join("runs", f"sweep-{base.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    problem = _check_out(out, args.force, [args.scenario])
    if problem:
        return _fail([problem])
    # the sweep is built in a sibling temp folder and renamed into place at the end, so a
    # --force sweep never mixes with, or loses, what the folder held unless it completes
    from simkit.output.files import move_into_place, sibling_tmp_dir

    work = sibling_tmp_dir(out, prefix=".simkit-sweep-")
    scenario_path = os.path.abspath(args.scenario)
    jobs = [(scenario_path, common + list(combo.items()), os.path.join(work, f"run{i:03d}"))
            for i, combo in enumerate(combos)]
    try:
        with _Interrupts():  # SIGTERM too stops the sweep as Ctrl-C does
            outcomes = _execute(jobs, args.jobs, args.scheduler)
    except (ImportError, OSError) as exc:
        shutil.rmtree(work, ignore_errors=True)  # nothing ran: leave nothing behind
        if isinstance(exc, ImportError):
            return _fail(["--scheduler needs the 'distributed' package: pip install 'dask[distributed]'"])
        return _fail([f"--scheduler {args.scheduler}: cannot reach the Dask scheduler ({exc})"])
    except KeyboardInterrupt:
        if os.listdir(work) and not (os.path.exists(out) and os.listdir(out)):
            move_into_place(work, out)
            print(f"simkit: sweep interrupted; finished runs are in {out}", file=sys.stderr)
        elif os.listdir(work):  # --force over results: those stay, the new runs beside them
            print(f"simkit: sweep interrupted; {out} is as it was, finished runs are in {work}",
                  file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
            print("simkit: sweep interrupted before a run finished; nothing written", file=sys.stderr)
        return 130
    import pandas as pd

    for outcome in outcomes:  # errors name the scenario as the user gave it, not its absolute path
        if outcome["error"]:
            outcome["error"] = outcome["error"].replace(scenario_path, args.scenario)
    failures = [o["error"] for o in outcomes if o["status"] != "ok"]
    if len(failures) == len(outcomes):  # a bad trace, say: one error, nothing written
        shutil.rmtree(work, ignore_errors=True)
        return _fail([f"every point of the sweep failed; the first: {failures[0]}"])
    table = sweep_table(combos, outcomes)
    table.to_csv(os.path.join(work, "sweep.csv"), index=False)
    table.to_parquet(os.path.join(work, "sweep.parquet"), index=False)
    from simkit.output.plots import pareto

    pareto(table, [k for k, _ in grid]).savefig(os.path.join(work, "pareto.png"), dpi=110,
                                                metadata={"Software": None})
    move_into_place(work, out)
    with pd.option_context("display.width", 200, "display.max_columns", 30, "display.max_colwidth", 60):
        shown = table.copy()
        for column in ("completed", "rejected", "error"):  # <NA> and None print as "-" like the rest
            shown[column] = shown[column].astype(object).where(shown[column].notna(), "-")
        print(shown.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.2f}"))
    print(f"wrote {out} ({len(table)} runs, {len(failures)} failed; sweep.csv, pareto.png)")
    if failures:
        print(f"simkit: {len(failures)} of {len(table)} points failed (the error column of sweep.csv); "
              f"the first: {failures[0]}", file=sys.stderr)
    return 1 if failures else 0


def sweep_table(combos: list[dict], outcomes: list[dict]):
    """One row per run: ``run``, the swept values, ``status``, ``error``, the headline metrics
    and ``output_tokens_per_s_per_gpu``."""
    import pandas as pd

    rows = []
    for i, (combo, outcome) in enumerate(zip(combos, outcomes)):
        row = {"run": f"run{i:03d}"}
        row.update({k: str(v) if isinstance(v, (dict, list)) else v for k, v in combo.items()})
        row.update(status=outcome["status"], error=outcome["error"])
        summary = outcome["summary"] or {}
        row.update({name: _get(summary, path) for name, path in COLUMNS})
        tokens, gpus = row["output_tokens_per_s"], outcome["gpus"]
        row["output_tokens_per_s_per_gpu"] = tokens / gpus if tokens is not None and gpus else None
        rows.append(row)
    table = pd.DataFrame(rows)
    for key in combos[0] if combos else ():
        # a grid of values of several kinds (true and maybe, 2 and x) is one column of their
        # YAML text: a table column (and parquet) holds one type
        kinds = {_kind(combo[key]) for combo in combos} - {"null"}
        if len(kinds) > 1:
            table[key] = [None if combo[key] is None else _yaml_text(combo[key]) for combo in combos]
    for column in ("completed", "rejected"):  # counts stay integers beside failed (empty) rows
        table[column] = table[column].astype("Int64")
    return table


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    return "number" if isinstance(value, (int, float)) else "text"


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _execute(jobs: list, n_jobs: int, dask_address: Optional[str]) -> list[dict]:
    if dask_address:
        from distributed import Client

        with Client(dask_address) as client:
            futures = [client.submit(_run_one, *job, pure=False) for job in jobs]
            return client.gather(futures)
    if n_jobs == 1 or len(jobs) == 1:
        return [_run_one(*job) for job in jobs]
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs))) as pool:
        return list(pool.map(_run_one, *zip(*jobs)))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
