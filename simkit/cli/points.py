"""Running a batch's points (``sweep``, ``capacity``, ``recommend``): each point is one scenario
with its overrides, run into its own folder on this process, on local worker processes, or on
a Dask cluster; a point that fails, or whose worker dies, is an outcome, never lost with the
rest. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

from typing import Optional

from simkit.core.records import ABNORMAL_STOPS
from simkit.output.progress import run_bar
from simkit.sim import load_scenario
from simkit.spec import ConfigError


def _run_one(scenario_path: str, overrides: list, out_dir: str) -> dict:
    """Run one combination in this process and write its folder.

    Returns ``{"status": "ok"|"failed", "error": str|None, "summary": dict|None, "gpus": float}``;
    never raises for a bad point (its error is the message).

    Raises:
        KeyboardInterrupt: the run was interrupted (the simulation stops itself on Ctrl-C and
            returns partial records: those are not this point's result).
    """
    from simkit.output.files import write_run
    from simkit.output.report import summarize
    from simkit.sim import build, record_inputs
    from simkit.workload import TraceError

    try:
        scenario = record_inputs(load_scenario(scenario_path, overrides))
        records = build(scenario, record_token_times=False).run()
    except ConfigError as exc:
        return {"status": "failed", "error": "; ".join(m.removeprefix("--set ") for m in exc.messages),
                "summary": None, "gpus": None}
    except TraceError as exc:
        return {"status": "failed", "error": str(exc), "summary": None, "gpus": None}
    if records.stop_reason == "interrupted":
        raise KeyboardInterrupt
    summary = summarize(records, scenario.sla)
    try:
        write_run(out_dir, scenario, records, summary, {"sweep": True}, figures={}, force=True)
    except OSError as exc:  # a full disk, say: this point's results are lost, and it says so
        return {"status": "failed", "error": f"cannot write its results: {exc.strerror or exc}",
                "summary": summary, "gpus": None}
    failed = records.stop_reason in ABNORMAL_STOPS
    # GPUs: TP x DP per worker; with a planner, the time-weighted mean of the GPUs provisioned
    if scenario.planner is None or records.end_at <= 0:
        gpus = sum(spec.workers * spec.gpus_per_worker for _, spec in scenario.pools.named())
    else:
        gpus = sum(records.gpu_seconds.values()) / records.end_at
    return {"status": "failed" if failed else "ok", "error": records.stop_detail if failed else None,
            "summary": summary, "gpus": gpus}


class SchedulerUnreachable(Exception):
    """The Dask scheduler of ``--scheduler`` cannot be reached."""


class DaskMissing(ImportError):
    """``--scheduler`` without the distributed package."""


def _failed_point(exc: BaseException) -> dict:
    """The outcome of a point whose worker failed outside simkit (killed, out of memory)."""
    reason = " ".join(f"{type(exc).__name__}: {exc}".split()) or type(exc).__name__
    return {"status": "failed", "error": f"its worker failed: {reason}", "summary": None, "gpus": None}


def _execute(jobs: list, n_jobs: int, dask_address: Optional[str], progress: bool = False) -> list[dict]:
    """Run every job; a point whose worker dies is recorded as failed, not lost with the rest.
    ``progress``: a progress bar on stderr (tqdm), as points finish. Results are in job order.

    Raises:
        DaskMissing: ``dask_address`` without the distributed package.
        SchedulerUnreachable: the scheduler cannot be reached.
        KeyboardInterrupt: a signal stopped the sweep (points not started are cancelled).
    """
    if dask_address is not None:
        try:
            from distributed import Client
        except ImportError:
            raise DaskMissing("distributed") from None

        try:
            client = Client(dask_address, timeout=30)
        except (OSError, TimeoutError, ValueError) as exc:
            raise SchedulerUnreachable(str(exc) or type(exc).__name__) from None
        with client:
            futures = [client.submit(_run_one, *job, pure=False) for job in jobs]
            return _gather(futures, progress)
    bar = run_bar(len(jobs), progress)
    if n_jobs == 1 or len(jobs) == 1:
        out = []
        for job in jobs:
            out.append(_run_one(*job))
            bar.update(1)
        bar.close()
        return out
    from concurrent.futures import ProcessPoolExecutor

    bar.close()
    pool = ProcessPoolExecutor(max_workers=min(n_jobs, len(jobs)))
    try:
        futures = [pool.submit(_run_one, *job) for job in jobs]
        return _gather(futures, progress)
    except KeyboardInterrupt:
        pool.shutdown(wait=True, cancel_futures=True)  # the runs under way finish; the rest never start
        raise
    finally:
        pool.shutdown(wait=True)


def _gather(futures: list, progress: bool) -> list[dict]:
    """The futures' outcomes in their order, a progress bar advancing as each finishes."""
    bar = run_bar(len(futures), progress)
    for future in futures:
        future.add_done_callback(lambda _f: bar.update(1))
    try:
        return [_result(f) for f in futures]
    finally:
        bar.close()


def _result(future) -> dict:
    try:
        return future.result()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the worker process died, or the future was cancelled
        return _failed_point(exc)
