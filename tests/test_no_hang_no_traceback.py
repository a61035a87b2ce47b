"""Nothing hangs, no traceback, messages that say what happened (issue 18): a FIFO where a
file is expected, huge per-line block sizes, startup times and planner ticks a run cannot
reach, values that Python's parsers accept and reject, unwritable or full output folders,
long names, impossible model configs, nested summaries; and the messages: a full disk in a
sweep, a closed-loop deadlock, weka fields, planner_samples.csv's header, control characters
in titles, partial runs in ``compare``. A generated-input property covers every path field."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit.cli import main
from simkit.spec import TraceWorkload
from simkit.workload import TraceError, load_trace

from conftest import REPO, one_line
from conftest import write as write_file

SMALL = ["--no-plots", "--quiet"]


def write(path: Path, text: str) -> str:
    return str(write_file(path, text))


# ---------------------------------------------------------------- FIFOs are never opened for ever


@pytest.mark.parametrize("where", ["scenario", "table", "model", "trace", "empirical", "plot"])
def test_a_fifo_where_a_file_is_expected_is_refused_at_once(tmp_path, capsys, where):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    body = {"table": f"latency: {{kind: table, path: {fifo}}}\npools: {{aggregated: {{}}}}\n",
            "model": f"latency: {{kind: roofline, model: {fifo}.json, gpu: H100}}\npools: {{aggregated: {{}}}}\n",
            "empirical": "pools: {aggregated: {}}\nworkload: {kind: synthetic, input_tokens: "
                         f"{{kind: empirical, path: {fifo}}}}}\n"}.get(where, "pools: {aggregated: {}}\n")
    if where == "model":
        os.rename(fifo, f"{fifo}.json")
    scen = write(tmp_path / "s.yaml", body)
    out = str(tmp_path / "out")
    if where == "scenario":
        argv = [str(fifo), "--out", out]
    elif where == "trace":
        argv = [scen, "--trace", str(fifo), "--out", out]
    elif where == "plot":
        argv = ["compare", str(REPO / "tests" / "data"), "--plot", f"{fifo}.png"]
        os.rename(fifo, f"{fifo}.png")
    else:
        argv = [scen, "--out", out]
    code = main(argv)
    message = one_line(capsys)
    if where == "plot":
        assert code == 2 and ("not a regular file" in message or "not a simkit run folder" in message)
    else:
        assert code == 2 and ("FIFO" in message or "not a regular file" in message), message
    assert not os.path.exists(out)


# ---------------------------------------------------------------- bounds a run can reach


@pytest.mark.parametrize("line, message", [
    ({"id": "s", "block_size": 10 ** 12, "requests": [{"in": 100, "out": 3}]},
     "field 'block_size' is 1000000000000; expected an integer from 1 to 2147483648"),
    ({"id": "s", "block_size": True, "requests": []}, "field 'block_size' is true"),
])
def test_a_huge_weka_block_size_is_refused(tmp_path, line, message):
    path = write(tmp_path / "w.jsonl", json.dumps(line) + "\n")
    with pytest.raises(TraceError, match=rf"^{path}:1: {message}"):
        load_trace(TraceWorkload(path=path, format="weka"))


def test_the_largest_weka_block_size_loads_and_runs_in_bounded_memory(tmp_path):
    import simkit

    path = write(tmp_path / "w.jsonl", json.dumps(
        {"id": "s", "block_size": 2 ** 31, "requests": [{"in": 100, "out": 3, "hash_ids": [1]}]}) + "\n")
    result = simkit.run({"pools": {"aggregated": {"block_size": 16}}, "workload": {"kind": "trace", "path": path}})
    assert result.summary["requests"]["completed"] == 1


def test_a_weka_requests_prompt_of_too_many_blocks_is_refused(tmp_path):
    path = write(tmp_path / "w.jsonl", json.dumps({"session": 1, "agent": "main", "t": 0, "block_size": 1,
                                                   "input_length": 2 ** 31, "output_length": 1}) + "\n")
    with pytest.raises(TraceError, match=r"input_length 2147483648 at block_size 1 is 2147483648 blocks"):
        load_trace(TraceWorkload(path=path, format="weka_requests"))


def test_a_startup_time_the_planner_would_tick_through_for_ever_is_refused(capsys):
    code = main([str(REPO / "scenarios" / "planner.yaml"), "--set", "pools.prefill.startup_time_s=1e9"])
    assert code == 2
    assert one_line(capsys) == (
        "--set pools.prefill.startup_time_s: 'startup_time_s' (1e+09 s) is 100,000,000 planner ticks of interval_s "
        "(10 s), more than 100,000 for a worker to start; raise planner.interval_s or lower startup_time_s "
        "@ $.pools.prefill.startup_time_s")


def test_a_trace_spanning_more_planner_ticks_than_a_run_makes_is_refused_before_it_runs(tmp_path, capsys):
    trace = write(tmp_path / "t.jsonl", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
                                        '{"timestamp": 2e9, "input_length": 5, "output_length": 1}\n')
    scen = write(tmp_path / "s.yaml", f"workload: {{kind: trace, path: {trace}}}\npools: {{aggregated: {{}}}}\n"
                                      "planner: {kind: threshold, interval_s: 1}\n")
    assert main([scen, "--out", str(tmp_path / "o")]) == 2
    assert "the workload's arrivals span 2e+06 s, 2,000,000 planner ticks of interval_s (1 s), more than the " \
           "1,000,000 a run makes" in one_line(capsys)
    assert not (tmp_path / "o").exists()


def test_a_policy_asking_for_more_ticks_than_a_run_makes_is_stopped(monkeypatch):
    import simkit
    from simkit.cluster import planner
    from simkit.planner import Decision

    monkeypatch.setattr(planner, "MAX_TICKS", 50)

    class Tiny:
        def plan(self, snapshot):
            return Decision({}, next_tick_s=0.001)

    result = simkit.run({"pools": {"aggregated": {}}, "workload": {"kind": "synthetic", "num_requests": 3},
                         "planner": {"kind": "static", "interval_s": 0.001}}, planner=Tiny())
    stop = result.summary["stop"]
    assert stop["reason"] == "stuck" and stop["detail"].startswith("the planner ticked 50 times")


# ---------------------------------------------------------------- no tracebacks


def test_a_csv_cell_that_isdigit_accepts_and_int_refuses_is_one_error(tmp_path, capsys):
    trace = write(tmp_path / "t.csv", "arrival_ms,input_length,output_length\n0,\u00b2,5\n")
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--trace", trace, "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys) == f"{trace}:2: input_length is \"\u00b2\"; expected an integer from 1 to 2147483648"


def test_stream_with_an_output_parent_that_cannot_be_written(tmp_path, monkeypatch, capsys):
    from simkit.cli import run

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(run, "sibling_tmp_dir", refuse)
    out = tmp_path / "o"
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--stream", "--out", str(out), *SMALL,
                 "--set", "workload.num_requests=4"]) == 2
    assert one_line(capsys) == f"{out}: cannot create the records spool beside it: Permission denied"
    assert not out.exists()


def test_stream_on_a_disk_that_fills_during_the_run(tmp_path, monkeypatch, capsys):
    from simkit.output.spool import RequestSpool

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(RequestSpool, "append", full)
    out = tmp_path / "o"
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--stream", "--out", str(out), *SMALL,
                 "--set", "workload.num_requests=4"]) == 1
    assert one_line(capsys) == (f"simkit: the run stopped: cannot write the streamed records beside {out}: "
                                "No space left on device; nothing written")
    assert not out.exists() and not [n for n in os.listdir(tmp_path) if n.startswith(".simkit")]


def test_a_300_character_name_gets_a_default_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scen = write(tmp_path / "s.yaml", f"name: '{'n' * 300}/../x\\u001b'\npools: {{aggregated: {{}}}}\n"
                                      "workload: {kind: synthetic, num_requests: 3}\n")
    assert main([scen, *SMALL]) == 0
    (folder,) = os.listdir(tmp_path / "runs")
    assert folder.startswith("n" * 80 + "-") and len(folder) < 100 and "/" not in folder
    assert main(["sweep", scen, "--grid", "seed=1,2", "--jobs", "1"]) == 0
    assert len(os.listdir(tmp_path / "runs")) == 2 and "\x1b" not in capsys.readouterr().out


def test_a_moe_config_with_more_experts_per_token_than_experts_is_one_error(tmp_path, capsys):
    cfg = json.loads((REPO / "simkit" / "engine" / "data" / "models" / "Qwen3-235B-A22B.json").read_text())
    cfg["num_experts_per_tok"] = cfg["num_experts"] + 1
    path = write(tmp_path / "moe.json", json.dumps(cfg))
    assert main(["step", "--model", path, "--gpu", "H100", "--tp", "8", "--prefill-tokens", "100"]) == 2
    assert "gives 129 experts per token (num_experts_per_tok) but only 128 experts" in one_line(capsys)


@pytest.mark.parametrize("text", ["[" * 100000 + "]" * 100000, '{"a": ' * 50000 + "1" + "}" * 50000])
def test_compare_on_a_deeply_nested_summary_is_one_error(tmp_path, capsys, text):
    run = tmp_path / "run"
    shutil.copytree(REPO / "tests" / "data", run) if (REPO / "tests" / "data" / "summary.json").exists() \
        else run.mkdir()
    (run / "summary.json").write_text(text)
    assert main(["compare", str(run)]) == 2
    assert "nested too deeply" in one_line(capsys)


# ---------------------------------------------------------------- messages


def test_a_full_disk_in_a_sweep_is_not_reported_as_an_unreachable_scheduler(tmp_path, monkeypatch, capsys):
    from simkit.output import files

    original = files._write_rows
    calls = {"n": 0}

    def full_once(*args):
        calls["n"] += 1
        if calls["n"] == 1:
            raise OSError(errno.ENOSPC, "No space left on device")
        return original(*args)

    monkeypatch.setattr(files, "_write_rows", full_once)
    out = tmp_path / "sw"
    code = main(["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "seed=1,2", "--out", str(out),
                 "--set", "workload.num_requests=4", "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 1 and "scheduler" not in err
    assert "the first: cannot write its results: No space left on device" in err
    import pandas as pd

    table = pd.read_csv(out / "sweep.csv")
    assert list(table.status) == ["failed", "ok"]


def test_a_closed_loop_deadlock_across_sessions_says_so(tmp_path, capsys):
    trace = write(tmp_path / "t.jsonl", "\n".join(json.dumps(x) for x in [
        {"request_id": "a1", "session_id": "A", "input_length": 100, "output_length": 5},
        {"request_id": "b1", "session_id": "B", "input_length": 100, "output_length": 5},
        {"request_id": "a2", "session_id": "A", "input_length": 100, "output_length": 5, "wait_for": ["b1"]},
    ]) + "\n")
    scen = write(tmp_path / "s.yaml", f"workload: {{kind: trace, path: {trace}, max_in_flight: 1}}\n"
                                      "pools: {aggregated: {}}\n")
    assert main([scen, "--out", str(tmp_path / "o"), *SMALL]) == 1
    message = capsys.readouterr().err
    assert "no worker holds them" not in message
    assert ("2 request(s) not released: 1 wait for a closed-loop slot (max_in_flight 1, every slot held by a "
            "session not ended: those sessions wait for requests of sessions still waiting for a slot, a "
            "dependency across sessions that no slot frees); 1 wait for requests that have not ended") in message


@pytest.mark.parametrize("lines, message", [
    ([{"id": 1, "requests": [{"in": 1, "out": 1}]}, {"id": 1, "requests": [{"in": 1, "out": 1}]}],
     ":2: session id 1 repeats line 1's; each line is one session with its own id"),
    ([{"id": 1, "requests": [{"in": 1, "out": 1}]}, {"id": "1", "requests": [{"in": 1, "out": 1}]}], None),
    ([{"id": 1, "requests": [{"in": 1, "out": 1, "think_time": 2e9}]}],
     ":1: request 0: field 'think_time' is 2000000000.0; expected seconds from 0 to 1e9"),
    ([{"session": 1, "agent": "main", "t": -1, "input_length": 1, "output_length": 1}],
     ":1: field 't' is -1; expected seconds from 0 to 1e9"),
])
def test_weka_messages_name_the_file_s_own_fields_in_their_units(tmp_path, lines, message):
    path = write(tmp_path / "w.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    if message is None:  # ids 1 and "1" are two sessions
        assert len(load_trace(TraceWorkload(path=path))) == 2
        return
    with pytest.raises(TraceError) as info:
        load_trace(TraceWorkload(path=path))
    assert str(info.value) == path + message and "#" not in str(info.value)


def test_planner_samples_has_its_header_when_no_tick_ran(tmp_path):
    out = tmp_path / "o"
    assert main([str(REPO / "scenarios" / "planner.yaml"), "--set", "workload.num_requests=3",
                 "--set", "planner.interval_s=100", "--out", str(out), *SMALL]) == 0
    header = (out / "planner_samples.csv").read_text().splitlines()
    assert len(header) == 1 and header[0].startswith("pool,at,")


def test_the_summary_title_escapes_control_characters(tmp_path, capsys):
    scen = write(tmp_path / "s.yaml", "name: \"evil\\u001b[2J\\u0007\"\npools: {aggregated: {}}\n"
                                      "workload: {kind: synthetic, num_requests: 3}\n")
    assert main([scen, "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "evil\\x1b[2J\\x07" in out


def test_compare_marks_an_interrupted_run_as_partial(tmp_path, monkeypatch, capsys):
    from conftest import interrupt_at_pass

    done, cut = tmp_path / "done", tmp_path / "cut"
    args = [str(REPO / "scenarios" / "reference_agg.yaml"), "--set", "workload.num_requests=6", *SMALL]
    assert main(args + ["--out", str(done)]) == 0
    interrupt_at_pass(monkeypatch, 3)
    assert main(args + ["--out", str(cut)]) == 130
    capsys.readouterr()
    assert main(["compare", str(done), str(cut)]) == 0
    stopped = [line for line in capsys.readouterr().out.splitlines() if line.startswith("stopped")]
    assert stopped[0].split() == ["stopped", "completed", "interrupted", "(partial)"]


# ---------------------------------------------------------------- every path field (property)

#: every path field: (how to place a relative value in a scenario, the file it names)
PATH_FIELDS = {
    "workload.path": lambda v: {"workload": {"kind": "trace", "path": v}},
    "workload.input_tokens.path": lambda v: {"workload": {"kind": "synthetic", "num_requests": 3,
                                                          "input_tokens": {"kind": "empirical", "path": v}}},
    "workload.output_tokens.path": lambda v: {"workload": {"kind": "synthetic", "num_requests": 3,
                                                           "output_tokens": {"kind": "empirical", "path": v}}},
    "workload.sessions.turns.path": lambda v: {"workload": {"kind": "synthetic", "num_requests": 3, "sessions": {
        "turns": {"kind": "empirical", "path": v}}}},
    "latency.path": lambda v: {"latency": {"kind": "table", "path": v}},
    "pools.aggregated.latency.path": lambda v: {"pools": {"aggregated": {"latency": {"kind": "table", "path": v}}}},
    "latency.model": lambda v: {"latency": {"kind": "roofline", "model": v, "gpu": "H100"}},
    "router.search_path": lambda v: {"router": {"kind": "python", "path": "pol:R", "search_path": v}},
    "planner.search_path": lambda v: {"planner": {"kind": "python", "path": "plan:P", "search_path": v}},
}


def _project(root: Path) -> dict:
    """A folder with one file (or folder) for each kind of path field."""
    files = {"trace": write(root / "in" / "t.jsonl", '{"timestamp": 0, "input_length": 30, "output_length": 2}\n'),
             "table": str(root / "in" / "p.csv"), "model": str(root / "in" / "m.json"),
             "pol": write(root / "in" / "pol.py", "class R:\n    def __init__(self, p): pass\n"
                                                  "    def pick(self, request, workers): return workers[0]\n"),
             "plan": write(root / "in" / "plan.py", "class P:\n    def __init__(self, p): pass\n"
                                                    "    def plan(self, snapshot): return {}\n")}
    shutil.copy(REPO / "scenarios" / "tables" / "llama8b_h100_passes.csv", files["table"])
    shutil.copy(REPO / "simkit" / "engine" / "data" / "models" / "Llama-3.1-8B.json", files["model"])
    return files


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(sorted(PATH_FIELDS)), via_set=st.booleans(),
       run_from=st.sampled_from(["in", "up", "other"]))
def test_every_path_field_resolves_reruns_from_any_folder_and_is_protected(tmp_path_factory, field, via_set,
                                                                           run_from):
    # a relative value, given in the file (against its folder) or with --set (against the
    # current folder); the resolved scenario names the same file, absolute, from any folder,
    # and --out --force never replaces a folder holding it
    from simkit import load_scenario
    from simkit.sim import input_files
    from simkit.spec import dump_scenario, yaml_load

    root = tmp_path_factory.mktemp("p")
    files = _project(root)
    target = {"workload.path": "trace", "latency.path": "table", "pools.aggregated.latency.path": "table",
              "latency.model": "model", "router.search_path": "in", "planner.search_path": "in"}.get(field, "trace")
    wanted = str(root / "in") if target == "in" else files[target]
    cwd = {"in": root / "in", "up": root, "other": root / "elsewhere"}[run_from]
    (root / "elsewhere").mkdir(exist_ok=True)
    scen_dir = root / "in"
    base = {"pools": {"aggregated": {}}}
    if field.startswith("planner"):
        base["pools"]["aggregated"] = {"workers": 1}
    relative = os.path.relpath(wanted, cwd if via_set else scen_dir)
    placed = PATH_FIELDS[field](relative)
    data = json.loads(json.dumps(base))
    for key, value in placed.items():
        data[key] = value if key != "pools" else {"aggregated": {**value["aggregated"]}}
    scen = root / "in" / "s.yaml"
    overrides = []
    if via_set:  # the file names something else; --set gives the relative value
        top = next(iter(placed))
        overrides = [(top, placed[top])]
        data.pop(top, None) if top != "pools" else None
    scen.write_text(json.dumps(data))
    old = os.getcwd()
    os.chdir(cwd)
    try:
        scenario = load_scenario(str(scen), overrides)
    finally:
        os.chdir(old)
    node = scenario
    for key in field.split("."):
        node = getattr(node, key)
    assert node == wanted
    os.chdir(root / "elsewhere" if run_from != "other" else root)
    try:
        again = load_scenario(write(root / "resolved.yaml", dump_scenario(scenario)))
        assert again == scenario and yaml_load(dump_scenario(again)) == yaml_load(dump_scenario(scenario))
    finally:
        os.chdir(old)
    inputs = [path for _, path in input_files(scenario)]
    assert inputs and all(os.path.isabs(p) and os.path.exists(p) for p in inputs)
    from simkit.cli.common import _check_out

    assert "holds the input" in _check_out(str(root / "in"), True, inputs)
