"""The one output writer: a run's files, written into a temporary folder and renamed into
place only when complete, so no output folder is ever half-written.

Files: ``requests.parquet`` (the per-request rows as a typed table), ``summary.json`` (with ``run_digest``, a SHA-256 of the resolved scenario and the
per-request rows, so two runs can be compared at a glance), ``requests.jsonl``,
``scenario.resolved.yaml``, ``latency_cdf.png``, ``timeline.json`` (a Chrome/Perfetto trace of
the passes, when they were recorded), with a planner ``workers.csv`` (each pool's workers by
state at every change), ``planner_samples.csv`` (what the planner saw at each tick) and
``planner.png``, and ``run_info.json`` (the only file with
wall-clock facts). Part of :mod:`simkit.output`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import shutil
import tempfile
from typing import Optional

from simkit.spec import Scenario, dump_scenario
from simkit.core.records import RunRecords
from simkit.output.report import ROW_INT_COLUMNS, iter_request_rows
from simkit.output.spool import arrow_schema


def _finite_json(value):
    """``value`` with non-finite floats replaced by None: JSON has no NaN or Infinity."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_json(v) for v in value]
    return value


def rows_table(rows: list[dict]):
    """Request rows (:func:`~simkit.output.report.request_row`) as a pyarrow Table with the declared
    column types (what ``requests.parquet`` holds)."""
    import pyarrow as pa

    if not rows:
        return pa.table({})
    names = list(rows[0])
    # column by column: much cheaper than pyarrow's row-wise from_pylist
    return pa.table({n: [row[n] for row in rows] for n in names}, schema=arrow_schema(names, ROW_INT_COLUMNS))


def _write_rows(records: RunRecords, scenario_text: str, jsonl_path: str, parquet_path: str) -> str:
    """Write the per-request rows to JSONL and Parquet a batch at a time (through pyarrow
    alone: importing pandas would cost the CLI half a second and 100 MB for nothing it needs);
    return the run digest: SHA-256 of the resolved scenario, a NUL and the JSONL text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    digest = hashlib.sha256((scenario_text + "\0").encode("utf-8"))
    writer = None
    try:
        with open(jsonl_path, "w", encoding="utf-8") as f:
            for rows in iter_request_rows(records):
                # request_row gives finite floats or None; allow_nan=False would catch a slip
                text = "".join(json.dumps(row, allow_nan=False) + "\n" for row in rows)
                f.write(text)
                digest.update(text.encode("utf-8"))
                table = rows_table(rows)
                if writer is None:
                    writer = pq.ParquetWriter(parquet_path, table.schema)
                writer.write_table(table)
        if writer is None:
            pq.write_table(pa.table({}), parquet_path)
    finally:
        if writer is not None:
            writer.close()
    return digest.hexdigest()


def _write_csv(path: str, rows) -> None:
    """Frozen attrs rows as a CSV table (header: the field names; None as an empty cell)."""
    import csv

    import attrs

    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = None
        for row in rows:
            data = attrs.asdict(row)
            if writer is None:
                writer = csv.DictWriter(f, fieldnames=list(data))
                writer.writeheader()
            writer.writerow(data)


def chrome_trace(records: RunRecords) -> dict:
    """The run as a Chrome/Perfetto trace (open it in ui.perfetto.dev or chrome://tracing):
    one track per worker with a slice per forward pass (``prefill``, ``decode`` or ``mixed``,
    with its tokens and KV blocks), and one track per request's KV transfer on the handoff link
    (from its prefill's end to its arrival at the decode side). Times in microseconds."""
    events: list[dict] = []
    pools = {}
    for p in records.pass_log or ():
        pid = pools.setdefault(p.pool, len(pools) + 1)
        kind = "mixed" if p.prefill_tokens and p.decode_requests else ("prefill" if p.prefill_tokens else "decode")
        events.append({"name": kind, "ph": "X", "pid": pid, "tid": p.worker, "ts": p.start_at * 1e6,
                       "dur": (p.end_at - p.start_at) * 1e6,
                       "args": {"prefill_tokens": p.prefill_tokens, "decode_requests": p.decode_requests,
                                "decode_context_tokens": p.decode_context_tokens, "kv_blocks": p.kv_blocks,
                                "preempted": p.preempted, "admitted": p.admitted}})
    link = len(pools) + 1
    for r in records.requests:
        if r.transfer_s is not None:
            events.append({"name": f"KV of request {r.rid}", "ph": "X", "pid": link, "tid": r.prefill_worker,
                           "ts": r.prefilled_at * 1e6, "dur": r.transfer_s * 1e6,
                           "args": {"prompt_tokens": r.input_length}})
    names = [{"name": "process_name", "ph": "M", "pid": pid, "args": {"name": f"{pool} pool"}}
             for pool, pid in pools.items()]
    if any(e["pid"] == link for e in events):
        names.append({"name": "process_name", "ph": "M", "pid": link, "args": {"name": "handoff link"}})
    return {"traceEvents": names + events, "displayTimeUnit": "ms"}


def sibling_tmp_dir(out_dir: str, prefix: str = ".simkit-") -> str:
    """A new empty folder beside ``out_dir`` (same file system, so :func:`move_into_place`
    is a rename), with the permissions of an ordinary folder (mkdtemp makes 0700)."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=prefix, dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


def move_into_place(tmp: str, out_dir: str) -> None:
    """Rename the finished folder ``tmp`` to ``out_dir``, replacing a folder or file there."""
    if os.path.isdir(out_dir):
        old = out_dir + ".old-" + os.path.basename(tmp)
        os.rename(out_dir, old)
        os.rename(tmp, out_dir)
        shutil.rmtree(old, ignore_errors=True)
    elif os.path.exists(out_dir):
        os.remove(out_dir)
        os.rename(tmp, out_dir)
    else:
        os.rename(tmp, out_dir)


def write_run(out_dir: str, scenario: Scenario, records: RunRecords, summary: dict,
              run_info: dict, figures: Optional[dict] = None, force: bool = False) -> None:
    """Write a run's files to ``out_dir`` atomically (build in a sibling temp folder, rename).

    Raises:
        FileExistsError: ``out_dir`` exists and is not empty, and ``force`` is False.
        OSError: the folder cannot be written.
    """
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)) and not force:
        raise FileExistsError(out_dir)
    scenario_text = dump_scenario(scenario)
    tmp = sibling_tmp_dir(out_dir)
    try:
        # a fingerprint of everything the run computed: equal digests mean byte-identical results
        digest = _write_rows(records, scenario_text, os.path.join(tmp, "requests.jsonl"),
                             os.path.join(tmp, "requests.parquet"))
        summary = dict(summary, run_digest=digest)
        with open(os.path.join(tmp, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(_finite_json(summary), f, indent=2, allow_nan=False)
            f.write("\n")
        with open(os.path.join(tmp, "scenario.resolved.yaml"), "w", encoding="utf-8") as f:
            f.write(scenario_text)
        info = dict(run_info, python=platform.python_version(), host=platform.node())
        with open(os.path.join(tmp, "run_info.json"), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        if records.worker_counts is not None:
            _write_csv(os.path.join(tmp, "workers.csv"), records.worker_counts)
            _write_csv(os.path.join(tmp, "planner_samples.csv"), records.pool_samples or ())
        if records.pass_log is not None:
            with open(os.path.join(tmp, "timeline.json"), "w", encoding="utf-8") as f:
                json.dump(chrome_trace(records), f)
        for name, fig in (figures or {}).items():
            fig.savefig(os.path.join(tmp, f"{name}.png"), dpi=110, metadata={"Software": None})
        move_into_place(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
