"""Parameter sweeps: every combination of ``--grid`` values, run in parallel.

``python -m simkit sweep SCENARIO.yaml --grid KEY=V1,V2,... [--grid ...] [--set ...]
[--out DIR] [--jobs N | --dask ADDRESS]`` validates every combination first (one bad value
fails the whole sweep before anything runs), then runs them on local worker processes (default:
one per core) or on a Dask cluster, writes each run's usual folder under ``DIR/runNNN`` and a
``sweep.csv`` / ``sweep.parquet`` table (one row per run: the swept values, then the headline
metrics), and prints the table. Results do not depend on where or in which order runs execute.
Layer L6.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
from typing import Any, Optional, Sequence

from simkit.config import ConfigError, load_scenario, yaml_load

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
    """Run one combination in this process and write its folder; returns its summary."""
    from simkit.output import write_run
    from simkit.report import summarize
    from simkit.sim import build

    scenario = load_scenario(scenario_path, overrides)
    records = build(scenario, record_token_times=False).run()
    summary = summarize(records, scenario.sla)
    write_run(out_dir, scenario, records, summary, {"sweep": True}, figures={}, force=True)
    return summary


def _get(summary: dict, path: tuple) -> Any:
    node: Any = summary
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def main(argv: Sequence[str]) -> int:
    from simkit.cli import _Parser, _fail, _check_out, parse_overrides

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
    group.add_argument("--dask", metavar="ADDRESS", help="run on this Dask scheduler (tcp://host:8786)")
    args = p.parse_args(argv)
    if args.jobs < 1:
        return _fail([f"--jobs {args.jobs}: expected at least 1"])
    try:
        grid = parse_grid(args.grid)
        common = parse_overrides(args.overrides)
        combos = combinations(grid)
        base = load_scenario(args.scenario, common)
        for combo in combos:  # validate every run before starting any
            load_scenario(args.scenario, common + list(combo.items()))
    except ConfigError as exc:
        return _fail(exc.messages)
    import time

    out = args.out or os.path.join("runs", f"sweep-{base.name}-{time.strftime('%Y%m%d-%H%M%S')}")
    problem = _check_out(out, args.force, [args.scenario])
    if problem:
        return _fail([problem])
    os.makedirs(out, exist_ok=True)
    scenario_path = os.path.abspath(args.scenario)
    jobs = [(scenario_path, common + list(combo.items()), os.path.join(out, f"run{i:03d}"))
            for i, combo in enumerate(combos)]
    try:
        summaries = _execute(jobs, args.jobs, args.dask)
    except ImportError:
        return _fail(["--dask needs the 'distributed' package: pip install 'dask[distributed]'"])
    except KeyboardInterrupt:
        print(f"simkit: sweep interrupted; finished runs are in {out}", file=sys.stderr)
        return 130
    import pandas as pd

    rows = []
    for i, (combo, summary) in enumerate(zip(combos, summaries)):
        row = {"run": f"run{i:03d}"}
        row.update({k: str(v) if isinstance(v, (dict, list)) else v for k, v in combo.items()})
        row.update({name: _get(summary, path) for name, path in COLUMNS})
        rows.append(row)
    table = pd.DataFrame(rows)
    table.to_csv(os.path.join(out, "sweep.csv"), index=False)
    table.to_parquet(os.path.join(out, "sweep.parquet"), index=False)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        print(table.to_string(index=False, float_format=lambda x: f"{x:.2f}"))
    print(f"wrote {out} ({len(rows)} runs, sweep.csv)")
    return 0


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
