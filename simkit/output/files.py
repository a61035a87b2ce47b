"""The one output writer: a run's files, written into a temporary folder and renamed into
place only when complete, so no output folder is ever half-written.

Files: ``requests.parquet`` (the per-request rows as a typed table), ``summary.json`` (with ``run_digest``, a SHA-256 of the resolved scenario and the
per-request rows, so two runs can be compared at a glance), ``requests.jsonl``,
``scenario.resolved.yaml``, ``latency_cdf.png``, ``timeline.json`` (a Chrome/Perfetto trace of
the passes, when they were recorded), with a planner ``workers.csv`` (each pool's workers by
state at every change), ``planner_samples.csv`` (what the planner saw at each tick) and
``planner.png``, and ``run_info.json`` (the only file with
wall-clock facts). Reading a folder back (``simkit.load_result``): :func:`read_run_json`,
:func:`read_run_text`, :func:`read_request_rows`, whose errors name the file and the line.
Part of :mod:`simkit.output`.
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

from simkit.core.files import NotUtf8, open_regular, read_text
from simkit.spec import Scenario, dump_scenario
from simkit.core.records import PoolSample, RunRecords, WorkerCount
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


def _write_csv(path: str, rows, row_class: type) -> None:
    """Frozen attrs rows of ``row_class`` as a CSV table (header: its field names, also when
    there is no row; None as an empty cell)."""
    import csv

    import attrs

    with open(path, "w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[a.name for a in attrs.fields(row_class)])
        writer.writeheader()
        for row in rows:
            writer.writerow(attrs.asdict(row))


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
                                "preempted": p.preempted, "admitted": p.admitted,
                                **({} if p.host_blocks is None else {"host_blocks": p.host_blocks}),
                                **({} if p.storage_blocks is None else {"storage_blocks": p.storage_blocks})}})
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
    is a rename), with the permissions of an ordinary folder (mkdtemp makes 0700).

    Raises:
        OSError: the parent cannot be created or written.
    """
    parent = os.path.dirname(os.path.realpath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=prefix, dir=parent)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    return tmp


#: the file by which a run claims its output folder while it runs (removed with the folder's
#: old content when the results move in, or when the run ends without results)
CLAIM = ".simkit-claim"


class FolderClaimed(OSError):
    """Another live simkit process writes into this output folder."""


def _claim_owner(folder: str) -> Optional[tuple[int, str]]:
    """``(pid, host)`` of the claim in ``folder`` (None: no claim, or an unreadable one)."""
    try:
        with open(os.path.join(folder, CLAIM), encoding="utf-8") as f:
            pid, _, host = f.read().strip().partition(" ")
        return int(pid), host
    except (OSError, ValueError):
        return None


def _alive(pid: int, host: str) -> bool:
    """Whether the claiming process still runs (a claim from another host counts as alive)."""
    if host != platform.node():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


def live_claim(folder: str) -> Optional[tuple[int, str]]:
    """``(pid, host)`` of another live process claiming ``folder``, or None."""
    owner = _claim_owner(folder)
    if owner is None or owner == (os.getpid(), platform.node()) or not _alive(*owner):
        return None
    return owner


def folder_content(folder: str) -> list[str]:
    """What ``folder`` holds, a stale or own claim aside (its results, if any)."""
    names = os.listdir(folder)
    if CLAIM in names and live_claim(folder) is None:
        names.remove(CLAIM)
    return names


class Claim:
    """This process's claim on an output folder (see :func:`claim_folder`)."""

    def __init__(self, folder: str, created: bool) -> None:
        self.folder = folder
        self.created = created  #: the folder did not exist before the claim

    def release(self) -> None:
        """Drop the claim if it is still there (the results replaced the folder otherwise),
        and the folder itself if the claim created it and it is empty."""
        if _claim_owner(self.folder) == (os.getpid(), platform.node()):
            try:
                os.remove(os.path.join(self.folder, CLAIM))
            except OSError:
                pass
        if self.created:
            try:
                os.rmdir(self.folder)  # only when empty
            except OSError:
                pass


def claim_folder(out_dir: str) -> Claim:
    """Claim ``out_dir`` for this run, atomically: create it if absent, then its claim file
    (exclusive create), so that two runs started together with the same folder never both
    write it. A stale claim (its process gone, on this host) is taken over.

    Raises:
        FolderClaimed: a live process claims it (``strerror`` names it).
        OSError: the folder or the claim file cannot be created.
    """
    folder = os.path.realpath(out_dir)
    created = False
    try:
        os.mkdir(folder)
        created = True
    except FileExistsError:
        pass
    except FileNotFoundError:
        os.makedirs(folder)
        created = True
    path = os.path.join(folder, CLAIM)
    for _ in range(2):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            owner = live_claim(folder)
            if owner is not None:
                raise FolderClaimed(0, f"another simkit run (pid {owner[0]} on {owner[1]}) is writing into it; "
                                       "choose another --out", out_dir) from None
            try:
                os.remove(path)  # stale: its process is gone
            except FileNotFoundError:
                pass
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{os.getpid()} {platform.node()}\n")
        return Claim(folder, created)
    raise FolderClaimed(0, "another simkit run claimed it at the same moment; choose another --out", out_dir)


def held_input(out_dir: str, paths) -> Optional[str]:
    """The first of ``paths`` (files or folders a run reads, the current folder) that the
    folder ``out_dir`` is or contains: replacing ``out_dir`` would delete it. None when none."""
    out = os.path.realpath(out_dir)
    for path in paths:
        real = os.path.realpath(path)
        if real == out or real.startswith(out + os.sep):
            return path
    return None


def beside(out_dir: str, suffix: str) -> str:
    """A name next to ``out_dir`` that is free: ``OUT.SUFFIX``, else ``OUT.SUFFIX-2``, ..."""
    base = os.path.realpath(out_dir).rstrip(os.sep) + "." + suffix
    name, k = base, 2
    while os.path.lexists(name):
        name, k = f"{base}-{k}", k + 1
    return name


def move_into_place(tmp: str, out_dir: str, force: bool = True) -> None:
    """Rename the finished folder ``tmp`` to ``out_dir`` (a symbolic link's target: the link
    keeps pointing at the results).

    ``out_dir`` absent, empty or holding only this process's (or a stale) claim: replaced at
    once. Holding anything else: replaced only with ``force`` (its old content is removed
    once the new one is in place), else :class:`FileExistsError`. A plain file there is
    replaced only with ``force``.

    Raises:
        FileExistsError: ``out_dir`` holds results and ``force`` is False (or another process
            filled it meanwhile).
        OSError: the rename fails.
    """
    target = os.path.realpath(out_dir)
    if os.path.isdir(target):
        if folder_content(target) and not force:
            raise FileExistsError(out_dir)
        old = beside(target, "old-" + os.path.basename(tmp).lstrip("."))
        os.rename(target, old)
        try:
            os.rename(tmp, target)
        except OSError:
            os.rename(old, target)  # put the old content back
            raise
        shutil.rmtree(old, ignore_errors=True)
    elif os.path.lexists(target):
        if not force:
            raise FileExistsError(out_dir)
        os.remove(target)
        os.rename(tmp, target)
    else:
        try:
            os.rename(tmp, target)  # atomic: fails if another process made a folder there meanwhile
        except OSError as exc:
            if os.path.isdir(target) and folder_content(target):
                raise FileExistsError(out_dir) from exc
            raise


def write_run(out_dir: str, scenario: Scenario, records: RunRecords, summary: dict,
              run_info: dict, figures: Optional[dict] = None, force: bool = False, keep=()) -> None:
    """Write a run's files to ``out_dir`` atomically (build in a sibling temp folder, rename).
    ``keep``: paths that must survive (the run's inputs, the current folder): a folder that is
    or holds one is never replaced.

    Raises:
        ValueError: ``out_dir`` is or holds a path of ``keep``.
        FileExistsError: ``out_dir`` holds results (or a file) and ``force`` is False, checked
            again when the results move in.
        OSError: the folder cannot be written.
    """
    out_dir = os.path.abspath(out_dir)
    kept = held_input(out_dir, keep)
    if kept is not None:
        raise ValueError(f"{out_dir}: refusing to replace a folder that holds {kept}")
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or folder_content(out_dir)) and not force:
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
        skipped = {}
        for name, fig in (figures or {}).items():
            try:
                fig.savefig(os.path.join(tmp, f"{name}.png"), dpi=110, metadata={"Software": None})
            except (ValueError, RuntimeError) as exc:  # a plot that cannot be drawn never costs the results
                skipped[f"{name}.png"] = " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
        info = dict(run_info, python=platform.python_version(), host=platform.node())
        if skipped:
            info["plots_not_drawn"] = skipped
        with open(os.path.join(tmp, "run_info.json"), "w", encoding="utf-8") as f:
            json.dump(info, f, indent=2)
            f.write("\n")
        if records.worker_counts is not None:
            _write_csv(os.path.join(tmp, "workers.csv"), records.worker_counts, WorkerCount)
            _write_csv(os.path.join(tmp, "planner_samples.csv"), records.pool_samples or (), PoolSample)
        if records.pass_log is not None:
            with open(os.path.join(tmp, "timeline.json"), "w", encoding="utf-8") as f:
                json.dump(chrome_trace(records), f)
        move_into_place(tmp, out_dir, force)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# ------------------------------------------------------------------ reading a run folder back


def read_run_text(path: str) -> str:
    """The text of a run folder's file (``scenario.resolved.yaml``...), opened only as a
    regular file.

    Raises:
        OSError: missing or not a regular file (the error names the path).
        ValueError: not UTF-8 text (``PATH:LINE``).
    """
    try:
        return read_text(path, encoding="utf-8-sig")  # a BOM an editor added is fine
    except NotUtf8 as exc:
        raise ValueError(f"{exc}; expected a file simkit wrote") from None


def read_run_json(path: str, what: str = "a simkit summary"):
    """The parsed JSON of a run folder's file (``summary.json``; ``what`` it should be, for the
    messages).

    Raises:
        OSError: missing or not a regular file.
        ValueError: not UTF-8 (``PATH:LINE``), not JSON (its line and column; NaN and Infinity
            are not JSON), nested too deeply.
    """
    text = read_run_text(path)

    def not_a_number(name: str):  # Python's json reads NaN and Infinity; simkit never writes them
        raise ValueError(f"{path}: not JSON ({name} is not a JSON value); expected {what}")

    try:
        return json.loads(text, parse_constant=not_a_number)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not JSON ({exc.msg}, line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ValueError(f"{path}: JSON nested too deeply; expected {what}") from None


def _rows_jsonl(path: str):
    """``requests.jsonl`` as a pyarrow Table typed as ``requests.parquet`` (:func:`rows_table`).

    Raises:
        ValueError: a line that is not a JSON object, whose fields differ from the first
            line's or whose value does not fit its column (``PATH:LINE: ...``).
    """
    import pyarrow as pa

    rows: list[dict] = []
    lines: list[int] = []
    names: Optional[dict] = None
    for lineno, text in enumerate(read_run_text(path).split("\n"), start=1):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{lineno}: not a JSON object ({exc.msg}, column {exc.colno}); expected one "
                             "request row per line") from None
        except RecursionError:
            raise ValueError(f"{path}:{lineno}: JSON nested too deeply; expected one request row per line") from None
        if not isinstance(row, dict):
            kind = {list: "array", str: "string", bool: "boolean", type(None): "null"}.get(type(row), "number")
            raise ValueError(f"{path}:{lineno}: found a JSON {kind}; expected a request row object")
        if names is None:
            names = dict.fromkeys(row)
            first = lineno
        elif row.keys() != names.keys():
            missing = [k for k in names if k not in row]
            field = f"lacks field {missing[0]!r}" if missing else f"has field {next(k for k in row if k not in names)!r}"
            raise ValueError(f"{path}:{lineno}: {field}, unlike line {first}; expected the same fields on every line")
        rows.append(row)
        lines.append(lineno)
    try:
        return rows_table(rows)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    # a value does not fit its column: the shortest prefix that fails ends on its line
    lo, hi = 1, len(rows)
    while lo < hi:
        mid = (lo + hi) // 2
        try:
            rows_table(rows[:mid])
            lo = mid + 1
        except (pa.ArrowException, TypeError, ValueError, OverflowError):
            hi = mid
    try:
        rows_table(rows[:lo])
    except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueError(f"{path}:{lines[lo - 1]}: a value does not fit its column ({reason[:120]}); expected "
                         "numbers, null, and a string status") from None
    raise ValueError(f"{path}: the request rows do not form one table")  # pragma: no cover - prefixes passed


def read_request_rows(out_dir: str):
    """A run folder's per-request rows as a pyarrow Table: ``requests.parquet``, else
    ``requests.jsonl`` (typed the same way). Either is opened only as a regular file.

    Raises:
        OSError: neither file exists, or the one read is not a regular file.
        ValueError: a corrupt Parquet file (named) or a malformed JSONL line (``PATH:LINE``).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    parquet = os.path.join(out_dir, "requests.parquet")
    if not os.path.lexists(parquet):
        return _rows_jsonl(os.path.join(out_dir, "requests.jsonl"))
    with open_regular(parquet) as f:  # never a FIFO or a device (a read would block)
        try:
            return pq.read_table(f.buffer)
        except pa.ArrowException as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueError(f"{parquet}: not a Parquet table ({reason[:160]})") from None
