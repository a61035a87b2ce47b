"""Nothing lost (issue 18): every input a run reads survives ``--out DIR --force``, an output
folder is claimed by one run at a time, partial results never replace complete ones, a sweep
interrupted while it writes still leaves its results in view, and a finished run is read back
from its folder alone while a rerun names an input that is missing or changed. Also: the
resolved scenario reruns from any folder."""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
from pathlib import Path

import pytest

from simkit.cli import main
from simkit.output.files import CLAIM

from conftest import REPO, interrupt_at_pass, one_line, signal_at_pass, write

SMALL = ["--set", "workload.num_requests=6", "--no-plots", "--quiet"]
TRACE = ('{"timestamp": 0, "input_length": 300, "output_length": 4}\n'
         '{"timestamp": 20, "input_length": 200, "output_length": 3}\n')


def fill_old_results(out: Path) -> None:
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(out), *SMALL]) == 0


# ---------------------------------------------------------------- every input survives --force


def _scenario_reading_from(out: Path, tmp_path: Path, what: str) -> Path:
    """A scenario (outside ``out``) that reads one input of kind ``what`` living in ``out``."""
    if what == "table":
        shutil.copy(REPO / "scenarios" / "tables" / "llama8b_h100_passes.csv", out / "passes.csv")
        body = f"latency: {{kind: table, path: {out}/passes.csv}}\npools: {{aggregated: {{}}}}\n" \
               "workload: {kind: synthetic, num_requests: 4}\n"
    elif what == "empirical":
        write(out / "lengths.jsonl", TRACE)
        body = ("pools: {aggregated: {}}\nworkload: {kind: synthetic, num_requests: 4, input_tokens: "
                f"{{kind: empirical, path: {out}/lengths.jsonl}}}}\n")
    elif what == "policy":
        write(out / "mypol.py", "class R:\n    def __init__(self, p): pass\n"
                                "    def pick(self, request, workers): return workers[0]\n")
        body = f"pools: {{aggregated: {{}}}}\nworkload: {{kind: synthetic, num_requests: 4}}\n" \
               f"router: {{kind: python, path: 'mypol:R', search_path: {out}}}\n"
    elif what == "draft":  # a speculative draft model's config.json
        shutil.copy(REPO / "simkit" / "engine" / "data" / "models" / "Llama-3.1-8B.json", out / "draft.json")
        body = ("latency: {kind: roofline, model: Llama-3.1-8B, gpu: H100}\nworkload: {kind: synthetic, "
                "num_requests: 4}\npools: {aggregated: {speculative: {method: draft_model, draft_model: "
                f"{out}/draft.json, num_speculative_tokens: 2, acceptance_rates: 0.5}}}}}}\n")
    else:  # a model config.json
        shutil.copy(REPO / "simkit" / "engine" / "data" / "models" / "Llama-3.1-8B.json", out / "config.json")
        body = (f"latency: {{kind: roofline, model: {out}/config.json, gpu: H100}}\npools: {{aggregated: {{}}}}\n"
                "workload: {kind: synthetic, num_requests: 4}\n")
    return write(tmp_path / "s.yaml", body)


@pytest.mark.parametrize("what", ["table", "empirical", "policy", "config", "draft"])
def test_force_never_deletes_an_input_that_lives_in_the_output_folder(tmp_path, capsys, what):
    out = tmp_path / "out"
    fill_old_results(out)
    scen = _scenario_reading_from(out, tmp_path, what)
    before = sorted(os.listdir(out))
    assert main([str(scen), "--out", str(out), "--force", "--no-plots", "--quiet"]) == 2
    assert "refusing to replace a folder that holds the input" in one_line(capsys)
    assert sorted(os.listdir(out)) == before


def test_a_sweep_protects_the_trace_of_every_point(tmp_path, capsys):
    out = tmp_path / "out"
    fill_old_results(out)
    write(out / "t.jsonl", TRACE)
    write(tmp_path / "first.jsonl", TRACE)
    scen = write(tmp_path / "s.yaml", "pools: {aggregated: {}}\nworkload: {kind: trace, path: first.jsonl}\n")
    code = main(["sweep", str(scen), "--grid", f"workload.path={tmp_path}/first.jsonl,{out}/t.jsonl",
                 "--out", str(out), "--force", "--jobs", "1"])
    assert code == 2 and "holds the input" in one_line(capsys)
    assert (out / "t.jsonl").read_text() == TRACE


# ---------------------------------------------------------------- one run per folder


def test_a_folder_claimed_by_a_live_run_is_refused_even_with_force(tmp_path, capsys):
    # another simkit process (here: our parent, alive) claims the folder while it runs
    out = tmp_path / "out"
    out.mkdir()
    (out / CLAIM).write_text(f"{os.getppid()} {platform.node()}\n")
    for extra in ([], ["--force"]):
        assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(out), *SMALL, *extra]) == 2
        assert f"another simkit run (pid {os.getppid()}" in one_line(capsys)
    assert os.listdir(out) == [CLAIM]
    assert main(["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "seed=1,2", "--out", str(out),
                 "--set", "workload.num_requests=4"]) == 2
    assert "another simkit run" in one_line(capsys)


def test_a_stale_claim_is_taken_over_and_no_claim_is_left_behind(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / CLAIM).write_text(f"{2 ** 22 + 12345} {platform.node()}\n")  # no such process
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(out), *SMALL]) == 0
    assert CLAIM not in os.listdir(out) and (out / "summary.json").exists()


def test_two_runs_racing_for_one_folder_never_both_write_it(tmp_path):
    # the claim is taken with an exclusive create: the second claim fails while the first holds
    from simkit.output.files import FolderClaimed, claim_folder

    out = tmp_path / "out"
    first = claim_folder(str(out))
    (out / CLAIM).write_text(f"{os.getppid()} {platform.node()}\n")  # as if another process held it
    with pytest.raises(FolderClaimed):
        claim_folder(str(out))
    first.release()


def test_results_never_replace_a_folder_filled_meanwhile(tmp_path):
    from simkit.output.files import move_into_place, sibling_tmp_dir

    out = tmp_path / "out"
    out.mkdir()
    (out / "theirs.txt").write_text("x")
    tmp = sibling_tmp_dir(str(out))
    with pytest.raises(FileExistsError):
        move_into_place(tmp, str(out), force=False)
    assert os.listdir(out) == ["theirs.txt"]


# ---------------------------------------------------------------- partial results beside


def test_an_interrupted_force_run_keeps_the_earlier_results_and_writes_beside(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    assert main([str(REPO / "scenarios" / "reference_agg.yaml"), "--out", str(out), *SMALL]) == 0
    old = (out / "summary.json").read_text()
    interrupt_at_pass(monkeypatch, 5)
    assert main([str(REPO / "scenarios" / "reference_agg.yaml"), "--out", str(out), "--force", *SMALL]) == 130
    err = one_line(capsys)
    partial = tmp_path / "out.partial"
    assert f"partial results in {os.path.relpath(partial)} ({out} keeps its earlier results)" in err
    assert (out / "summary.json").read_text() == old
    assert json.loads((partial / "summary.json").read_text())["stop"]["reason"] == "interrupted"


def test_a_signal_while_a_sweep_writes_its_table_waits_for_the_table(tmp_path, monkeypatch, capsys):
    import pandas as pd

    original = pd.DataFrame.to_csv

    def signalled(self, *args, **kwargs):  # SIGTERM arrives while the table is being written
        os.kill(os.getpid(), signal.SIGTERM)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(pd.DataFrame, "to_csv", signalled)
    out = tmp_path / "sw"
    code = main(["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "seed=1,2", "--out", str(out),
                 "--set", "workload.num_requests=4", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 130 and "interrupted after the sweep had finished; its results are in" in err
    assert {"sweep.csv", "run000", "run001"} <= set(os.listdir(out))
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".simkit")]


def _interrupt_the_second_point(monkeypatch) -> None:
    """A batch's second point is stopped by Ctrl-C as it starts (the first runs for real)."""
    from simkit.cli import points

    original, calls = points._run_one, {"n": 0}

    def second_interrupts(*a):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return original(*a)

    monkeypatch.setattr(points, "_run_one", second_interrupts)


def test_an_interrupted_force_sweep_keeps_the_old_one_and_shows_the_new_runs(tmp_path, monkeypatch, capsys):

    out = tmp_path / "sw"
    args = ["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "seed=1,2", "--out", str(out),
            "--set", "workload.num_requests=4", "--jobs", "1"]
    assert main(args) == 0
    old = (out / "sweep.csv").read_text()
    _interrupt_the_second_point(monkeypatch)
    assert main(args + ["--force"]) == 130
    assert f"the finished runs are in {tmp_path / 'sw.partial'} ({out} keeps its earlier results)" \
        in capsys.readouterr().err
    assert (out / "sweep.csv").read_text() == old
    assert os.listdir(tmp_path / "sw.partial") == ["run000"]


def test_an_interrupted_sweep_into_a_new_relative_folder_claims_no_earlier_results(tmp_path, monkeypatch, capsys):
    # --out given relative and new: the message said "(sw keeps its earlier results)"
    _interrupt_the_second_point(monkeypatch)
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "seed=1,2", "--out", "sw",
                 "--set", "workload.num_requests=4", "--jobs", "1"]) == 130
    assert capsys.readouterr().err.strip() == "simkit: sweep interrupted; the finished runs are in sw (no sweep.csv)"
    assert os.listdir(tmp_path / "sw") == ["run000"]


#: a small scenario priced by the polynomial model (so that signal_at_pass can stop it)
POLY = """name: base
seed: 1
workload:
  kind: synthetic
  num_requests: 20
  arrival: {kind: poisson, rate_per_s: 10.0}
  input_tokens: {kind: uniform, low: 100, high: 500}
  output_tokens: {kind: uniform, low: 5, high: 20}
latency: {kind: polynomial}
pools:
  aggregated: {workers: 1}
sla: {ttft_ms: 500, itl_ms: 50}
"""


def _signal_in_point(monkeypatch, k: int, signum=None) -> list:
    """Send a signal in the middle of the ``k``-th point run in this process (at its 3rd pass);
    returns the list of the run folders of the points started, in order."""
    from simkit.cli import points

    started = []
    original = points._run_one

    def tracked(*job):
        started.append(os.path.basename(job[2]))
        if len(started) == k:
            signal_at_pass(monkeypatch, 3, signum)
        return original(*job)

    monkeypatch.setattr(points, "_run_one", tracked)
    return started


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_inside_a_point_stops_the_sweep_there_and_drops_that_point(tmp_path, monkeypatch, capsys, signum):
    # the simulation stops itself on Ctrl-C and returns partial records; the sweep took them for
    # a failed point, ran the others and replaced the earlier sweep with its own
    scen = write(tmp_path / "base.yaml", POLY)
    out = tmp_path / "s16"
    assert main(["sweep", str(scen), "--grid", "pools.aggregated.workers=1,2", "--out", str(out), "--jobs", "1"]) == 0
    old = (out / "sweep.csv").read_text()
    capsys.readouterr()
    started = _signal_in_point(monkeypatch, 2, signum)
    assert main(["sweep", str(scen), "--grid", "pools.aggregated.workers=1,2,3,4", "--out", str(out), "--force",
                 "--jobs", "1"]) == 130
    err = capsys.readouterr().err
    partial = tmp_path / "s16.partial"
    assert err == f"simkit: sweep interrupted; the finished runs are in {partial} ({out} keeps its earlier results) " \
                  "(no sweep.csv)\n"
    assert started == ["run000", "run001"]  # no point started after the signal
    assert (out / "sweep.csv").read_text() == old
    assert os.listdir(partial) == ["run000"]  # the interrupted point is not a result
    assert json.loads((partial / "run000" / "summary.json").read_text())["requests"]["completed"] == 20
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".simkit")]


def test_a_signal_inside_the_first_point_writes_nothing(tmp_path, monkeypatch, capsys):
    scen = write(tmp_path / "base.yaml", POLY)
    _signal_in_point(monkeypatch, 1)
    assert main(["sweep", str(scen), "--grid", "pools.aggregated.workers=1,2", "--out", str(tmp_path / "sw"),
                 "--jobs", "1"]) == 130
    assert one_line(capsys) == "simkit: sweep interrupted before a run finished; nothing written"
    assert sorted(os.listdir(tmp_path)) == ["base.yaml"]


@pytest.mark.parametrize("command", ["capacity", "recommend"])
def test_a_signal_inside_a_capacity_or_recommend_point_stops_it_and_drops_that_point(tmp_path, monkeypatch, capsys,
                                                                                     command):
    scen = write(tmp_path / "base.yaml", POLY)
    out = tmp_path / "out"
    started = _signal_in_point(monkeypatch, 2)
    extra = ["--gpus", "2", "--trials", "6", "--space", "mode=aggregated", "--space", "router=round_robin"] \
        if command == "recommend" else []
    assert main([command, str(scen), "--out", str(out), "--jobs", "1", *extra]) == 130
    runs = "points" if command == "capacity" else "trials"
    assert one_line(capsys) == f"simkit: {command} interrupted; the {runs} run so far are in {out}"
    assert len(started) == 2
    assert os.listdir(out / runs) == [started[0]]  # the first point only; the second is dropped
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".simkit")]


def test_an_interrupted_parallel_sweep_stops_its_workers_and_starts_no_other_point(tmp_path, monkeypatch, capsys):
    # --jobs 2: ProcessPoolExecutor queued points that still started after Ctrl-C, and the runs
    # under way finished. Now: run000 finishes its folder and signals the sweep; run001 is
    # stopped half way through writing; nothing else starts. The workers ignore SIGINT (a
    # terminal's Ctrl-C reaches the process group): run000's own SIGINT does not stop it.
    import multiprocessing

    from simkit.cli import points

    started, ready_r, ready_w = tmp_path / "started", *os.pipe()
    started.mkdir()

    def fake_point(scenario_path, overrides, out_dir, wanted=None):
        name = os.path.basename(out_dir)
        (started / name).touch()
        if name == "run001":  # half way through writing its folder, then still running
            os.mkdir(os.path.join(os.path.dirname(out_dir), ".simkit-half-written"))
            os.write(ready_w, b"x")
        else:
            signal.raise_signal(signal.SIGINT)  # ignored by a worker
            os.read(ready_r, 1)
            os.mkdir(out_dir)
            (Path(out_dir) / "summary.json").write_text("{}")
            os.kill(os.getppid(), signal.SIGINT)  # Ctrl-C in the sweep's process
        signal.pause()  # busy until stopped

    monkeypatch.setattr(points, "_run_one", fake_point)
    out = tmp_path / "sw"
    code = main(["sweep", str(write(tmp_path / "base.yaml", POLY)), "--grid", "seed=1,2,3,4,5",
                 "--out", str(out), "--jobs", "2"])
    assert code == 130
    assert one_line(capsys) == f"simkit: sweep interrupted; the finished runs are in {out} (no sweep.csv)"
    assert sorted(os.listdir(started)) == ["run000", "run001"]
    assert os.listdir(out) == ["run000"]  # run001, stopped mid-run, is dropped with its temp folder
    assert multiprocessing.active_children() == []
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".simkit")]


def test_a_worker_that_dies_fails_its_point_only(tmp_path, monkeypatch, capsys):
    import pandas as pd

    from simkit.cli import points

    original = points._run_one

    def dies_on_seed_2(scenario_path, overrides, out_dir, wanted=None):
        if ("seed", 2) in overrides:
            os.kill(os.getpid(), signal.SIGKILL)  # out of memory, say
        return original(scenario_path, overrides, out_dir)

    monkeypatch.setattr(points, "_run_one", dies_on_seed_2)
    out = tmp_path / "sw"
    assert main(["sweep", str(write(tmp_path / "base.yaml", POLY)), "--grid", "seed=1,2,3", "--out", str(out),
                 "--jobs", "2"]) == 1
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["status"]) == ["ok", "failed", "ok"]
    assert table.loc[1, "error"] == "its worker failed: its process was killed by SIGKILL"
    assert list(table["completed"].fillna(-1)) == [20, -1, 20]
    assert "1 of 3 points failed" in capsys.readouterr().err


def test_an_interrupted_dask_sweep_cancels_its_points_and_a_running_one_writes_nothing(tmp_path, monkeypatch,
                                                                                     capsys):
    import threading

    distributed = pytest.importorskip("distributed")
    from simkit.cli import points

    started, release, done, wrote = [], threading.Event(), threading.Event(), []

    def fake_point(scenario_path, overrides, out_dir, wanted=None):
        started.append(os.path.basename(out_dir))
        if len(started) > 1:
            return None
        os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while this point runs on a Dask worker
        release.wait()
        wrote.append(wanted())  # the sweep's folder has gone: it writes nothing
        done.set()
        return None

    monkeypatch.setattr(points, "_run_one", fake_point)
    out = tmp_path / "sw"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=None) as cluster:
        code = main(["sweep", str(write(tmp_path / "base.yaml", POLY)), "--grid", "seed=1,2,3", "--out", str(out),
                     "--scheduler", cluster.scheduler_address])
        release.set()
        assert done.wait(60)
    assert code == 130
    assert "simkit: sweep interrupted before a run finished; nothing written" in capsys.readouterr().err
    assert started == ["run000"] and wrote == [False]
    assert os.listdir(tmp_path) == ["base.yaml"]


def test_a_symlinked_out_keeps_its_link_and_leaves_nothing_behind(tmp_path):
    (tmp_path / "real").mkdir()
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    for extra in ([], ["--force"]):
        assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(link), *SMALL, *extra]) == 0
    assert link.is_symlink() and (tmp_path / "real" / "summary.json").exists()
    assert sorted(os.listdir(tmp_path)) == ["link", "real"]


# ---------------------------------------------------------------- read back, rerun


def _run_on_a_trace(tmp_path: Path) -> tuple[Path, Path]:
    trace = write(tmp_path / "data" / "t.jsonl", TRACE)
    out = tmp_path / "run"
    assert main([str(REPO / "scenarios" / "reference_agg.yaml"), "--trace", str(trace), "--out", str(out),
                 "--no-plots", "--quiet"]) == 0
    return trace, out


def test_a_run_records_each_input_with_its_sha256(tmp_path):
    import hashlib

    from simkit.spec import yaml_load

    trace, out = _run_on_a_trace(tmp_path)
    resolved = yaml_load((out / "scenario.resolved.yaml").read_text())
    assert resolved["inputs"] == {str(trace): hashlib.sha256(trace.read_bytes()).hexdigest()}


def test_a_run_is_read_back_from_its_folder_alone(tmp_path, capsys):
    import simkit

    trace, out = _run_on_a_trace(tmp_path)
    shutil.rmtree(tmp_path / "data")  # its trace is gone
    result = simkit.load_result(str(out))
    assert result.summary["requests"]["completed"] == 2 and len(result.requests) == 2
    assert main(["compare", str(out), str(out)]) == 0
    assert "completed" in capsys.readouterr().out


def test_a_rerun_names_the_input_that_is_missing_or_changed(tmp_path, capsys):
    trace, out = _run_on_a_trace(tmp_path)
    resolved = str(out / "scenario.resolved.yaml")
    trace.write_text(TRACE.replace("300", "301"))
    assert main([resolved, "--out", str(tmp_path / "b")]) == 2
    assert f"input {trace} changed since the run that wrote this scenario read it" in one_line(capsys)
    trace.unlink()
    assert main([resolved, "--out", str(tmp_path / "b")]) == 2
    assert f"input {trace}, which the run that wrote this scenario read, is missing" in one_line(capsys)
    # another trace given on the command line replaces the recorded one: no check of the old
    other = write(tmp_path / "other.jsonl", TRACE)
    assert main([resolved, "--trace", str(other), "--out", str(tmp_path / "c"), "--no-plots", "--quiet"]) == 0
    assert not (tmp_path / "b").exists()


def test_the_resolved_scenario_reruns_from_any_folder_with_the_same_digest(tmp_path, monkeypatch):
    # every path field given relative: in the file (sessions.turns), with --set (a table) and
    # a policy's search_path; the rerun happens from another folder
    project = tmp_path / "project"
    shutil.copytree(REPO / "scenarios" / "policies", project / "pol")
    shutil.copy(REPO / "scenarios" / "tables" / "llama8b_h100_passes.csv", project / "passes.csv")
    write(project / "turns.jsonl", '{"timestamp": 0, "input_length": 3, "output_length": 1}\n')
    write(project / "lengths.jsonl", TRACE)
    scen = write(project / "s.yaml", "\n".join([
        "pools: {aggregated: {workers: 2}}",
        "workload: {kind: synthetic, num_requests: 6, input_tokens: {kind: empirical, path: lengths.jsonl},",
        "           sessions: {turns: {kind: empirical, path: turns.jsonl, field: input}, think_time_s: 0.1}}",
        "router: {kind: python, path: 'examples:ShortestPromptQueue', params: {block_tokens: 64},",
        "         search_path: pol}", ""]))
    monkeypatch.chdir(project)
    out = tmp_path / "first"
    assert main([str(scen), "--set", "latency={kind: table, path: passes.csv}", "--out", str(out),
                 "--no-plots", "--quiet"]) == 0
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    again = tmp_path / "again"
    assert main([str(out / "scenario.resolved.yaml"), "--out", str(again), "--no-plots", "--quiet"]) == 0
    digest = [json.loads((d / "summary.json").read_text())["run_digest"] for d in (out, again)]
    assert digest[0] == digest[1]


def test_a_rerun_names_every_missing_input_a_policy_module_too(tmp_path, capsys):
    # both the trace and the router's module deleted: the rerun named only the trace (the
    # module was looked up in its folder, found nowhere, and left out of the check)
    import textwrap

    from test_policies import MODULE

    data = tmp_path / "data"
    data.mkdir()
    (data / "pol.py").write_text(textwrap.dedent(MODULE))
    write(data / "t.jsonl", TRACE)
    (data / "s.yaml").write_text("pools: {aggregated: {workers: 2}}\nrouter: {kind: python, path: 'pol:LastWorker'}\n"
                                 "workload: {kind: trace, path: t.jsonl}\n")
    out = tmp_path / "run"
    assert main([str(data / "s.yaml"), "--out", str(out), "--no-plots", "--quiet"]) == 0
    (data / "pol.py").unlink()
    (data / "t.jsonl").unlink()
    assert main([str(out / "scenario.resolved.yaml"), "--out", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert f"input {data / 't.jsonl'}, which the run" in err and f"input {data / 'pol.py'}, which the run" in err
    assert not (tmp_path / "b").exists()
