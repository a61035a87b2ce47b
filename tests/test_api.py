"""The Python API (run, Result, load_result), Parquet output and `python -m simkit compare`."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import simkit
from simkit.cli import main

from conftest import REPO

SMALL = {"workload.num_requests": 80}


def test_run_from_a_path_a_dict_or_a_scenario_gives_the_cli_numbers(tmp_path):
    path = REPO / "scenarios" / "disagg.yaml"
    a = simkit.run(path, SMALL)
    b = simkit.run(simkit.override(simkit.load_scenario(str(path)), SMALL))
    c = simkit.run(simkit.spec.to_dict(b.scenario))
    assert a.summary == b.summary == c.summary
    out = tmp_path / "cli"
    assert main([str(path), "--out", str(out), "--quiet", "--no-plots", "--set", "workload.num_requests=80"]) == 0
    cli_summary = json.loads((out / "summary.json").read_text())
    cli_summary.pop("run_digest")
    assert cli_summary == json.loads(json.dumps(a.summary))
    assert list(a.requests.columns[:3]) == ["id", "arrival_ms", "input_length"]
    assert len(a.requests) == 80 and (a.requests["status"] == "completed").all()


def test_save_and_load_round_trip_with_parquet(tmp_path):
    result = simkit.run(REPO / "scenarios" / "agg.yaml", SMALL)
    out = result.save(str(tmp_path / "r"))
    loaded = simkit.load_result(out)
    assert loaded.summary["requests"] == result.summary["requests"]
    pd.testing.assert_frame_equal(loaded.requests, result.requests)
    assert loaded.scenario == result.scenario and loaded.records is None
    jsonl = pd.read_json(tmp_path / "r" / "requests.jsonl", lines=True)
    assert list(jsonl["id"]) == list(loaded.requests["id"])
    with pytest.raises(ValueError):
        loaded.save(str(tmp_path / "again"))


def test_bad_override_is_a_config_error():
    with pytest.raises(simkit.ConfigError) as info:
        simkit.run(REPO / "scenarios" / "agg.yaml", {"pools.aggregated.workers": 0})
    assert info.value.messages[0].endswith("'workers' must be > 0: 0 @ $.pools.aggregated.workers")


def test_compare_prints_a_table_and_writes_overlaid_cdfs(tmp_path, capsys, monkeypatch):
    dirs = []
    for name, scen in (("agg", "agg.yaml"), ("dis", "disagg.yaml")):
        d = tmp_path / name
        assert main([str(REPO / "scenarios" / scen), "--out", str(d), "--quiet", "--no-plots",
                     "--set", "workload.num_requests=80"]) == 0
        dirs.append(str(d))
    capsys.readouterr()
    monkeypatch.chdir(tmp_path)
    assert main(["compare", *dirs, "--plot", "compare_cdf.png"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["agg", "dis"]
    # the scenario fields that differ come first, a row each (the pools, the link), named by
    # their paths' tails, then the figures
    first = next(i for i, line in enumerate(out) if line.startswith("completed / total"))
    assert first > 2 and out[first].split() == ["completed", "/", "total", "80/80", "80/80"]
    assert any(line.split()[:1] == ["bandwidth_gb_per_s"] and line.split()[1] == "null" for line in out[1:first])
    assert (tmp_path / "compare_cdf.png").stat().st_size > 10_000
    assert main(["compare", *dirs, "--plot", "compare_cdf.png"]) == 2  # exists: refuse without --force
    assert "exists; choose another --plot or add --force" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nothing")]) == 2


def test_compare_names_its_columns_by_the_one_field_that_differs(tmp_path, capsys):
    dirs = []
    for workers in (2, 3):
        d = tmp_path / f"w{workers}"
        assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(d), "--quiet", "--no-plots",
                     "--set", "workload.num_requests=40", "--set", f"pools.aggregated.workers={workers}"]) == 0
        dirs.append(str(d))
    same = tmp_path / "again"
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(same), "--quiet", "--no-plots",
                 "--set", "workload.num_requests=40", "--set", "pools.aggregated.workers=2"]) == 0
    capsys.readouterr()
    assert main(["compare", *dirs]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["workers=2", "workers=3"] and out[1].split() == ["aggregated.workers", "2", "3"]
    assert out[2].startswith("completed / total")
    # the TTFT components some run spent time in: agg.yaml has no frontend, link or decode pool
    names = [line[:20].strip() for line in out]
    assert "queue p90" in names and "prefill p50" in names
    assert not any(n.startswith(("frontend", "transfer", "decode queue")) for n in names)
    # nothing differs but the folder: the folders head the columns, and no field row
    assert main(["compare", dirs[0], str(same)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["w2", "again"] and out[1].startswith("completed / total")


def test_compare_shows_lists_and_tells_alike_field_names_apart(tmp_path, capsys):
    # found by trying it: a list-valued field (acceptance rates) was a traceback
    dirs = []
    for name, extra in (("a", []), ("b", ["--set", "pools.aggregated.speculative.acceptance_rates=[0.5,0.4,0.3]"])):
        assert main([str(REPO / "scenarios" / "speculative.yaml"), "--out", str(tmp_path / name), "--quiet",
                     "--no-plots", "--set", "workload.num_requests=20", *extra]) == 0
        dirs.append(str(tmp_path / name))
    capsys.readouterr()
    assert main(["compare", *dirs]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split("  ")[-1].strip() == "acceptance_rates=[0.5, 0.4, 0.3]"
    assert out[1].split() == ["acceptance_rates", "[0.8,", "0.7,", "0.6]", "[0.5,", "0.4,", "0.3]"]
    # latency.tensor_parallel_size and pools.aggregated.tensor_parallel_size differ against agg.yaml:
    # each row says whose it is
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--out", str(tmp_path / "c"), "--quiet", "--no-plots",
                 "--set", "workload.num_requests=20"]) == 0
    capsys.readouterr()
    assert main(["compare", dirs[0], str(tmp_path / "c")]) == 0
    names = [line[:20].strip() for line in capsys.readouterr().out.splitlines()]
    assert "latency.tensor_para~" in names and "aggregated.tensor_p~" in names


def test_sweep_runs_every_combination_in_parallel_with_the_same_results(tmp_path, capsys, monkeypatch):
    out = tmp_path / "sweep"
    args = ["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "pools.aggregated.workers=1,2",
            "--grid", "pools.aggregated.max_num_seqs=4,64", "--set", "workload.num_requests=60",
            "--out", str(out), "--jobs", "2"]
    assert main(args) == 0
    table = pd.read_csv(out / "sweep.csv")
    assert list(table["pools.aggregated.workers"]) == [1, 1, 2, 2]
    assert list(table["pools.aggregated.max_num_seqs"]) == [4, 64, 4, 64]
    # run002 (2 workers, max_num_seqs 4) equals the same scenario run on its own
    alone = simkit.run(REPO / "scenarios" / "agg.yaml", {"workload.num_requests": 60,
                                                          "pools.aggregated.workers": 2,
                                                          "pools.aggregated.max_num_seqs": 4})
    swept = json.loads((out / "run002" / "summary.json").read_text())
    swept.pop("run_digest")
    assert swept == json.loads(json.dumps(alone.summary))
    assert table.loc[2, "ttft_p90_ms"] == pytest.approx(alone.summary["ttft_ms"]["p90"])
    assert (out / "pareto.png").stat().st_size > 10_000
    # a failing point is recorded with its error; the others complete; exit code 1
    bad = ["sweep", str(REPO / "scenarios" / "agg.yaml"), "--grid", "pools.aggregated.workers=1,0",
           "--set", "workload.num_requests=30", "--out", str(tmp_path / "bad"), "--jobs", "1"]
    assert main(bad) == 1
    table = pd.read_csv(tmp_path / "bad" / "sweep.csv")
    assert list(table["status"]) == ["ok", "failed"]
    assert table.loc[1, "error"] == ("pools.aggregated.workers: 'workers' must be > 0: 0 "
                                     "@ $.pools.aggregated.workers")
    assert table.loc[0, "completed"] == 30
    # values of several kinds in one grid: one column of their YAML text (parquet holds one
    # type per column; a hostile walk crashed the table write here); errors name the scenario
    # as given, not by its absolute path
    mixed = ["sweep", "scenarios/agg.yaml", "--grid", "pools.aggregated.enable_prefix_caching=true,maybe",
             "--set", "workload.num_requests=30", "--out", str(tmp_path / "mixed"), "--jobs", "1"]
    monkeypatch.chdir(REPO)
    assert main(mixed) == 1
    table = pd.read_parquet(tmp_path / "mixed" / "sweep.parquet")
    assert list(table["pools.aggregated.enable_prefix_caching"]) == ["true", "maybe"]
    assert list(table["status"]) == ["ok", "failed"]
    assert table.loc[1, "error"] == ("pools.aggregated.enable_prefix_caching: expected true or false, got 'maybe' "
                                     "@ $.pools.aggregated.enable_prefix_caching")
    assert (tmp_path / "mixed" / "pareto.png").exists()
    # an error the file is blamed for names it as the user gave it (here: relative); one the
    # grid's value caused names the grid's field (the file's sglang settings with backend vllm)
    (tmp_path / "sg.yaml").write_text("workload: {kind: synthetic, num_requests: 30}\n"
                                      "pools: {aggregated: {backend: sglang, sglang: {schedule_policy: lpm}}}\n")
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "sg.yaml", "--grid", "pools.aggregated.backend=sglang,vllm", "--out", "sg", "--jobs", "1"]) == 1
    assert pd.read_csv(tmp_path / "sg" / "sweep.csv").loc[1, "error"] == (
        "pools.aggregated.backend: 'sglang' settings apply only to backend: sglang @ $.pools.aggregated")
    (tmp_path / "sg2.yaml").write_text("workload: {kind: synthetic, num_requests: 30}\n"
                                       "pools: {aggregated: {backend: sglang, max_num_seqs: 0}}\n")
    assert main(["sweep", "sg2.yaml", "--grid", "pools.aggregated.workers=1,2", "--out", "sg2", "--jobs", "1"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "sg2.yaml: 'max_num_seqs' must be > 0: 0 @ $.pools.aggregated.max_num_seqs")


def test_sweep_of_12_points_is_identical_on_local_processes_and_a_dask_cluster(tmp_path):
    distributed = pytest.importorskip("distributed")
    args = [str(REPO / "scenarios" / "disagg.yaml"), "--grid", "pools.prefill.workers=1,2",
            "--grid", "pools.decode.workers=1,2,3", "--grid", "link.bandwidth_gb_per_s=10,50",
            "--set", "workload.num_requests=60"]
    assert main(["sweep", *args, "--out", str(tmp_path / "local"), "--jobs", "2"]) == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        assert main(["sweep", *args, "--out", str(tmp_path / "dask"),
                     "--scheduler", cluster.scheduler_address]) == 0
    local = pd.read_parquet(tmp_path / "local" / "sweep.parquet")
    remote = pd.read_parquet(tmp_path / "dask" / "sweep.parquet")
    assert len(local) == 12 and (local["status"] == "ok").all()
    pd.testing.assert_frame_equal(local, remote)


def test_timeline_flag_writes_a_chrome_trace_and_pass_plots(tmp_path):
    out = tmp_path / "tl"
    assert main([str(REPO / "scenarios" / "disagg.yaml"), "--timeline", "--out", str(out), "--quiet",
                 "--set", "workload.num_requests=40"]) == 0
    trace = json.loads((out / "timeline.json").read_text())
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M"}
    assert names == {"prefill pool", "decode pool", "handoff link"}
    passes = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["name"] in ("prefill", "decode", "mixed")]
    summary = json.loads((out / "summary.json").read_text())
    assert len(passes) == sum(summary["passes"].values())
    transfers = [e for e in trace["traceEvents"] if e["name"].startswith("KV of request")]
    assert len(transfers) == 40 and all(e["dur"] > 0 for e in transfers)  # a 25 GB/s link takes time
    for name in ("pass_timeline.png", "worker_series.png"):
        assert (out / name).stat().st_size > 10_000


def test_pass_records_are_needed_for_pass_plots():
    result = simkit.run(REPO / "scenarios" / "agg.yaml", {"workload.num_requests": 20})
    with pytest.raises(ValueError, match="record_passes=True"):
        result.plot_passes()
    result = simkit.run(REPO / "scenarios" / "agg.yaml", {"workload.num_requests": 20}, record_passes=True)
    assert len(result.records.pass_log) == sum(result.summary["passes"].values())
    assert result.plot_passes() is not None and result.plot_series() is not None


def test_grid_values_may_be_lists_and_mappings():
    from simkit.cli.sweep import parse_grid
    grid = parse_grid(["pools.aggregated.speculative.acceptance_rates=[0.8,0.6],[0.5, 0.5],0.7",
                       "router={kind: kv_aware, router_temperature: 0.5},{kind: round_robin}",
                       "name='a,b',c"])
    assert grid == [
        ("pools.aggregated.speculative.acceptance_rates", [[0.8, 0.6], [0.5, 0.5], 0.7]),
        ("router", [{"kind": "kv_aware", "router_temperature": 0.5}, {"kind": "round_robin"}]),
        ("name", ["a,b", "c"]),
    ]


def test_an_api_override_error_names_the_override_not_the_clis_set():
    with pytest.raises(simkit.ConfigError) as info:
        simkit.run(str(REPO / "scenarios" / "agg.yaml"), {"pools.aggregated.wrkers": 2})
    assert info.value.messages == ["override pools.aggregated.wrkers: unknown field(s) wrkers @ $.pools.aggregated"]


def test_a_set_that_changes_a_sections_kind_says_to_replace_the_section(capsys):
    from simkit.cli import main

    assert main([str(REPO / "scenarios" / "roofline.yaml"), "--set", "latency.kind=polynomial"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "(the section keeps its other fields; replace it whole: --set 'latency={kind: polynomial}') @ $.latency")


@pytest.mark.parametrize("overrides, expected", [
    # a mapping the --set made: a problem inside it is the --set's
    (["pools.aggregated.kv_offload.storage.scope=pool"],
     "--set pools.aggregated.kv_offload.storage.scope: required field missing @ $.pools.aggregated.kv_offload.storage.blocks"),
    # a rule of the pool that names, as 'backend: ...', the field the --set changed
    (["pools.aggregated.backend=sglang"],
     "--set pools.aggregated.backend: 'kv_offload' is modelled for backend: vllm only (vLLM's OffloadingConnector), "
     "not sglang yet @ $.pools.aggregated"),
])
def test_a_set_error_names_the_set_that_made_it_not_the_file(capsys, overrides, expected):
    from simkit.cli import main

    args = [str(REPO / "scenarios" / "kv_offload.yaml")]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith(expected)
