"""Running a batch's points (``sweep``, ``capacity``, ``recommend``): each point is one scenario
with its overrides, run into its own folder on this process, on local worker processes, or on
a Dask cluster; a point that fails, or whose worker dies, is an outcome, never lost with the
rest.

An interrupt (Ctrl-C, SIGTERM) stops the batch at once: no point starts after it, and a point
it stops mid-run is dropped, never recorded as a result (its folder is not written). On this
process the simulation's own stop becomes a KeyboardInterrupt again (:func:`_run_one`). Local
worker processes ignore SIGINT (a Ctrl-C at the terminal reaches the whole process group: the
batch's process alone decides) and are terminated by the batch's process, which starts at most
``--jobs`` of them at a time, one per point, so nothing is queued that could start later.
On Dask the futures are cancelled; a point already running on a worker cannot be stopped
there, but it writes nothing once the batch's folder has moved away. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from typing import Callable, Optional

from simkit.core.records import ABNORMAL_STOPS
from simkit.output.progress import run_bar
from simkit.sim import load_scenario
from simkit.spec import ConfigError

#: how long a terminated worker process gets to exit before it is killed (s)
TERMINATE_WAIT_S = 5.0

#: a remote point's answer when its run was interrupted (it is not a result)
INTERRUPTED = "interrupted"


def _run_one(scenario_path: str, overrides: list, out_dir: str,
             wanted: Optional[Callable[[], bool]] = None) -> dict:
    """Run one combination in this process and write its folder.

    Returns ``{"status": "ok"|"failed", "error": str|None, "summary": dict|None, "gpus": float}``;
    never raises for a bad point (its error is the message). ``wanted``: asked before the
    folder is written; False (the batch is gone) writes nothing and returns None.

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
    if wanted is not None and not wanted():
        return None
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
    return _worker_failed(reason)


def _worker_failed(reason: str) -> dict:
    return {"status": "failed", "error": f"its worker failed: {reason}", "summary": None, "gpus": None}


def _execute(jobs: list, n_jobs: int, dask_address: Optional[str], progress: bool = False) -> list[dict]:
    """Run every job; a point whose worker dies is recorded as failed, not lost with the rest.
    ``progress``: a progress bar on stderr (tqdm), as points finish. Results are in job order.

    Raises:
        DaskMissing: ``dask_address`` without the distributed package.
        SchedulerUnreachable: the scheduler cannot be reached.
        KeyboardInterrupt: a signal stopped the batch (module docstring: no point starts after
            it, the points under way are stopped and dropped).
    """
    if dask_address is not None:
        return _execute_dask(jobs, dask_address, progress)
    bar = run_bar(len(jobs), progress)
    try:
        if n_jobs == 1 or len(jobs) == 1:
            out = []
            for job in jobs:
                out.append(_run_one(*job))
                bar.update(1)
            return out
        return _execute_local(jobs, n_jobs, bar)
    finally:
        bar.close()


# ---------------------------------------------------------------- local worker processes

_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_MASKABLE = hasattr(signal, "pthread_sigmask")


def _context():
    """The multiprocessing start method: fork on Linux (cheap per point; the signal mask it
    inherits closes the window before the child ignores SIGINT), else the platform's default."""
    import multiprocessing

    if sys.platform.startswith("linux"):
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context()


def _child(job: tuple, conn) -> None:
    """A worker process: run one point, send its outcome (or :data:`INTERRUPTED`) and exit.
    SIGINT is ignored (the batch's process stops its workers); SIGTERM ends it at once."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if _MASKABLE:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    try:
        try:
            answer = _run_one(*job)
        except KeyboardInterrupt:  # a run that stopped as interrupted (a policy raised it): not a result
            answer = INTERRUPTED
        except BaseException as exc:  # noqa: BLE001 - a simkit bug or out of memory: this point fails
            answer = _failed_point(exc)
        conn.send(answer)
    finally:
        conn.close()


def _died(exitcode: Optional[int]) -> dict:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return _worker_failed(f"its process was killed by {name}")
    return _worker_failed(f"its process exited (code {exitcode}) without a result")


def _execute_local(jobs: list, n_jobs: int, bar) -> list[dict]:
    """At most ``n_jobs`` worker processes at a time, one per point; on an interrupt the ones
    under way are terminated (their folders dropped) and no other starts."""
    from multiprocessing.connection import wait

    ctx = _context()
    results: list = [None] * len(jobs)
    running: dict = {}  # result pipe -> (job index, process)
    todo = 0
    try:
        while todo < len(jobs) or running:
            while todo < len(jobs) and len(running) < n_jobs:
                reader, writer = ctx.Pipe(duplex=False)
                process = ctx.Process(target=_child, args=(jobs[todo], writer), daemon=True)
                if _MASKABLE:  # a signal now waits until the process is known, then stops it
                    signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
                try:
                    process.start()
                    running[reader] = (todo, process)
                    todo += 1
                finally:
                    writer.close()
                    if _MASKABLE:
                        signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
            for reader in wait(list(running)):
                index, process = running[reader]
                try:
                    answer = reader.recv()
                except (EOFError, OSError):  # it died before answering
                    answer = None
                process.join()
                del running[reader]
                reader.close()
                if answer == INTERRUPTED:
                    raise KeyboardInterrupt
                results[index] = answer if answer is not None else _died(process.exitcode)
                bar.update(1)
    except BaseException:
        _stop(running, jobs)
        raise
    return results


def _stop(running: dict, jobs: list) -> None:
    """Terminate the worker processes under way, wait for them, and remove what a point
    stopped mid-write left (its temporary folder: a finished folder is a finished run)."""
    for _, process in running.values():
        if process.is_alive():
            process.terminate()
    for reader, (index, process) in running.items():
        process.join(TERMINATE_WAIT_S)
        if process.is_alive():
            process.kill()
            process.join()
        reader.close()
    for index, _ in running.values():
        parent = os.path.dirname(os.path.realpath(jobs[index][2]))
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if name.startswith(".simkit-") and os.path.isdir(os.path.join(parent, name)):
                shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


# ---------------------------------------------------------------- Dask


def _run_remote(scenario_path: str, overrides: list, out_dir: str):
    """:func:`_run_one` on a Dask worker: nothing is run or written once the batch's folder
    (made before the point was submitted) has gone, an interrupted batch having moved it."""
    parent = os.path.dirname(out_dir)

    def wanted() -> bool:
        return os.path.isdir(parent)

    if not wanted():
        return None
    try:
        return _run_one(scenario_path, overrides, out_dir, wanted)
    except KeyboardInterrupt:
        return INTERRUPTED


def _execute_dask(jobs: list, address: str, progress: bool) -> list[dict]:
    try:
        from distributed import Client
    except ImportError:
        raise DaskMissing("distributed") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SchedulerUnreachable(str(exc) or type(exc).__name__) from None
    with client:
        for _, _, out_dir in jobs:  # the folder a remote point checks for before it writes
            os.makedirs(os.path.dirname(out_dir), exist_ok=True)
        futures = [client.submit(_run_remote, *job, pure=False) for job in jobs]
        try:
            return _gather(futures, progress)
        except BaseException:
            client.cancel(futures, force=True)  # those not started never start
            raise


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
        answer = future.result()
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # the worker process died, or the future was cancelled
        return _failed_point(exc)
    if answer == INTERRUPTED:
        raise KeyboardInterrupt
    if answer is None:  # it found the batch's folder gone (another run moved it)
        return _worker_failed("the batch's folder was gone when it ran")
    return answer
