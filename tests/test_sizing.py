"""Sizing answers: the overload verdict, ``capacity`` and the sweep table's SLA columns.

Each test runs the shipped ``scenarios/agg.yaml`` (Llama-3.1-8B on 4 H100s, SLA TTFT 500 ms and
ITL 15 ms) on fewer requests, to stay quick.
"""

from __future__ import annotations

import json

import attrs

import pandas as pd
import pytest

from simkit.cli import main
from simkit.cli.capacity import Search, load_overrides
from simkit.output.report import summarize
from simkit.sim import load_scenario, simulate

from conftest import REPO

AGG = str(REPO / "scenarios" / "agg.yaml")


def test_an_overloaded_run_says_so_in_the_summary_on_stderr_and_in_the_table(tmp_path, capsys):
    """agg.yaml at 200 requests/s: about 30/s served, the backlog grows while requests arrive."""
    out = tmp_path / "o"
    code = main([AGG, "--set", "workload.arrival.rate_per_s=200", "--set", "workload.num_requests=1500",
                 "--out", str(out), "--no-plots"])
    assert code == 0
    captured = capsys.readouterr()
    sat = json.loads((out / "summary.json").read_text())["saturation"]
    assert sat["overloaded"] is True
    assert sat["offered_requests_per_s"] == pytest.approx(200, rel=0.1)
    assert 20 < sat["served_requests_per_s"] < 40
    # at the last arrival (7.5 s) more than half of the 1,500 requests still wait for a first
    # token (at most ~300 served by then, and the 4 x 256 slots fill only as KV allows)
    assert sat["backlog_growth_per_s"] > 100 and sat["backlog_at_last_arrival"] > 750
    assert "simkit: overloaded: " in captured.err
    assert "OVERLOADED: " in captured.out


def test_a_run_that_keeps_up_is_not_called_overloaded():
    scenario = load_scenario(AGG, [("workload.num_requests", 1000), ("workload.arrival.rate_per_s", 5.0)])
    sat = summarize(simulate(scenario), scenario.sla)["saturation"]
    assert sat["overloaded"] is False and sat["verdict"].startswith("keeps up")
    assert sat["served_requests_per_s"] == pytest.approx(sat["offered_requests_per_s"], rel=0.15)


def test_a_short_run_that_keeps_up_is_not_called_overloaded():
    """disagg.yaml on its first 200 requests: the requests being decoded climb from 0 to about
    rate x E2E during any run (Little's law), which is not a backlog; the requests waiting for a
    first token stay few. (Counting every request not yet ended called this run overloaded.)"""
    scenario = load_scenario(str(REPO / "scenarios" / "disagg.yaml"), [("workload.num_requests", 200)])
    sat = summarize(simulate(scenario), scenario.sla)["saturation"]
    assert sat["overloaded"] is False and sat["verdict"].startswith("keeps up")
    assert sat["backlog_at_last_arrival"] < 20


def test_a_run_whose_requests_are_all_rejected_says_so_not_that_it_keeps_up():
    scenario = load_scenario(AGG, [("workload.num_requests", 50), ("pools.aggregated.num_gpu_blocks", 1)])
    sat = summarize(simulate(scenario), scenario.sla)["saturation"]
    assert sat["rejected"] == 50 and sat["overloaded"] is False and sat["backlog_at_last_arrival"] == 0
    assert sat["verdict"].startswith("serves nothing: all 50 requests rejected")


def test_the_backlog_counts_requests_waiting_for_a_first_token():
    """Hand-built records: 3 requests arrive at 0, 1 and 2 s; the first has its first token at
    0.5 s, the second at 2.5 s, the third never (incomplete). Sampled at 20 times over [0, 2],
    the last sample (t = 2 s) holds rid 1 (arrived 1, first token 2.5) and rid 2: 2 deep."""
    from simkit.core.records import RequestRecord

    recs = [RequestRecord(rid=rid, arrived_at=arrived, dispatched_at=arrived, input_length=10,
                          requested_output_length=5, output_length=5 if first else 0, status=status,
                          first_admitted_at=arrived, first_token_at=first, second_token_at=None, last_token_at=end,
                          finished_at=end, prefilled_at=None, handed_off_at=None, decode_admitted_at=None,
                          cached_tokens=0, prefill_worker=None, decode_worker=0)
            for rid, (arrived, first, end, status) in enumerate([(0.0, 0.5, 1.0, "completed"),
                                                                 (1.0, 2.5, 3.0, "completed"),
                                                                 (2.0, None, None, "incomplete")])]
    from simkit.output.report import _saturation, record_columns

    sat = _saturation(record_columns(recs))
    assert sat["backlog_at_last_arrival"] == 2 and sat["offered_requests_per_s"] == 1.0
    assert sat["served_requests_per_s"] == 2 / 3.0  # 2 completed over (3.0 - 0.0) s
    # arrivals 1e-290 s apart (a generated case): no rate is measured over that, nothing raised
    tiny = [attrs.evolve(r, arrived_at=r.arrived_at * 1e-290) for r in recs]
    assert _saturation(record_columns(tiny)) is None


def test_capacity_finds_a_rate_that_holds_and_10_percent_more_does_not(tmp_path, capsys):
    out = tmp_path / "cap"
    code = main(["capacity", AGG, "--set", "workload.num_requests=600", "--jobs", "1", "--tolerance", "0.05",
                 "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "capacity.csv")
    found = table[table["meets"]]["multiplier"].max()
    assert table.loc[table["multiplier"] == found, "sla_fraction"].iloc[0] >= 0.9
    assert "capacity: " in capsys.readouterr().out
    # rerun by hand: at the capacity the SLA fraction holds, 10% above it it does not
    base = load_scenario(AGG, [("workload.num_requests", 600)])
    for multiplier, holds in ((found, True), (found * 1.1, False)):
        scenario = load_scenario(AGG, [("workload.num_requests", 600)] + load_overrides(base, multiplier))
        fraction = summarize(simulate(scenario), scenario.sla)["goodput"]["fraction"]
        assert (fraction >= 0.9) is holds, (multiplier, fraction)


def test_capacity_search_brackets_then_bisects():
    """Passing below 0.7, failing from it: 1 fails, halving finds 0.5, bisection closes in."""
    search = Search(fraction=0.9, tolerance=0.02, jobs=1)
    tried = []
    while True:
        todo = search.next_points()
        if not todo:
            break
        for m in todo:
            tried.append(m)
            search.tell(m, m < 0.7)
    lo, hi = search.bracket()
    assert tried[:2] == [1.0, 0.5] and lo < 0.7 <= hi and hi / lo - 1 <= 0.02


@pytest.mark.parametrize("argv, message", [
    (["--set", "sla=null"], "capacity needs an SLA"),
    (["--sla-fraction", "0"], "--sla-fraction 0: expected a share in (0, 1]"),
    (["--tolerance", "1"], "--tolerance 1: expected a share in (0, 1)"),
    (["--trace", str(REPO / "scenarios" / "traces" / "sessions.jsonl"), "--set", "workload.max_in_flight=4"],
     "capacity: the workload is closed-loop (max_in_flight)"),
])
def test_capacity_refuses_what_it_cannot_answer(argv, message, tmp_path, capsys):
    assert main(["capacity", AGG, "--out", str(tmp_path / "x"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_recommend_ranks_configurations_within_the_budget_and_its_yaml_reruns_its_row(tmp_path, capsys):
    """agg.yaml (600 requests) within 8 GPUs: the top configuration meets the SLA fraction, no
    trial exceeds the budget, and rerunning the top YAML gives the trial's figures."""
    out = tmp_path / "rec"
    code = main(["recommend", AGG, "--gpus", "8", "--trials", "8", "--jobs", "1", "--set",
                 "workload.num_requests=600", "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "recommend.csv")
    assert len(table) == 8 and (table["gpus"] <= 8).all()
    top = table.iloc[0]
    assert top["meets_sla"] and top["goodput_fraction"] >= 0.9
    assert "recommended (goodput_per_gpu): " in capsys.readouterr().out
    trial = json.loads((out / top["trial"] / "summary.json").read_text())
    assert main([str(out / "ranked" / "01.yaml"), "--out", str(tmp_path / "again"), "--no-plots", "--quiet"]) == 0
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["run_digest"] == trial["run_digest"] and again["goodput"] == trial["goodput"]
    assert (out / "pareto.png").is_file()


def test_recommend_is_deterministic_for_a_seed_whatever_the_jobs(tmp_path):
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / f"r{jobs}"
        assert main(["recommend", AGG, "--gpus", "8", "--trials", "6", "--jobs", jobs, "--seed", "3",
                     "--set", "workload.num_requests=300", "--out", str(out)]) == 0
        tables.append(pd.read_csv(out / "recommend.csv").drop(columns=["trial"]))
    pd.testing.assert_frame_equal(tables[0], tables[1])


def test_recommend_says_when_nothing_within_the_budget_meets_the_sla(tmp_path, capsys):
    """An ITL bound of 1 ms no deployment of agg.yaml meets: it names the closest and the bound."""
    code = main(["recommend", AGG, "--gpus", "4", "--trials", "4", "--jobs", "1", "--set", "sla.itl_ms=1",
                 "--set", "workload.num_requests=200", "--out", str(tmp_path / "r")])
    assert code == 0
    err = capsys.readouterr().err
    assert "no configuration within 4 GPUs meets the SLA for 90% of requests (4 tried); the closest: " in err
    assert "ITL binding" in err


def test_recommend_grid_sampler_stops_when_every_combination_ran(tmp_path):
    out = tmp_path / "g"
    assert main(["recommend", AGG, "--gpus", "4", "--trials", "50", "--sampler", "grid", "--jobs", "1",
                 "--space", "mode=aggregated", "--space", "tp=1", "--space", "workers=1..2",
                 "--space", "max_num_seqs=128", "--space", "max_num_batched_tokens=8192",
                 "--space", "router=round_robin,kv_aware", "--set", "workload.num_requests=100", "--out", str(out)]) == 0
    table = pd.read_csv(out / "recommend.csv")
    assert sorted(zip(table["workers"], table["router"])) == [(1, "kv_aware"), (1, "round_robin"),
                                                              (2, "kv_aware"), (2, "round_robin")]


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "4", "--set", "sla=null"], "recommend needs an SLA to meet"),
    (["--gpus", "0"], "--gpus 0: expected 1 to 100000"),
    (["--gpus", "4", "--space", "warp=1,2"], "--space warp: not a knob"),
    (["--gpus", "4", "--space", "workers=3..1"], "--space workers: expected 0 <= LOW <= HIGH"),
    (["--gpus", "4", "--space", "workers"], "--space 'workers': expected KEY=V1,V2,... or KEY=LOW..HIGH"),
    (["--gpus", "4", "--set", "planner={kind: static}"], "recommend sizes fixed deployments"),
])
def test_recommend_refuses_what_it_cannot_search(argv, message, tmp_path, capsys):
    assert main(["recommend", AGG, "--out", str(tmp_path / "x"), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def test_recommend_tries_aggregated_layouts_of_a_scenario_with_a_link(tmp_path):
    """disagg.yaml has a link section: an aggregated trial drops it instead of failing with
    "'link' applies only to disaggregated pools"."""
    out = tmp_path / "rec"
    code = main(["recommend", str(REPO / "scenarios" / "disagg.yaml"), "--gpus", "4", "--space", "mode=aggregated",
                 "--space", "tp=1", "--space", "workers=2", "--trials", "1", "--set", "workload.num_requests=40",
                 "--jobs", "1", "--out", str(out)])
    assert code == 0
    table = pd.read_csv(out / "recommend.csv")
    assert list(table["status"]) == ["ok"] and list(table["mode"]) == ["aggregated"]


def test_recommend_with_every_trial_failed_writes_nothing_and_exits_2(tmp_path, capsys):
    """A trace whose second line is not JSON: the scenario loads (traces are read by the runs),
    every trial fails on it."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 5, "hash_ids": [1]}\nnot json\n')
    out = tmp_path / "rec"
    code = main(["recommend", AGG, "--gpus", "4", "--space", "tp=1", "--space", "workers=1", "--trials", "1",
                 "--trace", str(trace), "--jobs", "1", "--out", str(out)])
    assert code == 2
    err = capsys.readouterr().err
    assert "every trial of recommend failed; the first: " in err and f"{trace}:2" in err
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


@pytest.mark.parametrize("space, message", [
    ("nope.knob=1,2", "--space nope.knob=1: unknown field(s) nope @ $"),
    ("max_num_seqs=4,0", "--space max_num_seqs=0: 'max_num_seqs' must be > 0: 0 @ $.pools.aggregated.max_num_seqs"),
    ("router=round_robin,bogus", "--space router=bogus: unknown kind 'bogus'"),
])
def test_recommend_refuses_a_space_value_the_scenario_refuses_before_any_trial(tmp_path, capsys, space, message):
    out = tmp_path / "rec"
    assert main(["recommend", AGG, "--gpus", "4", "--space", space, "--trials", "1", "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_point_labels_stay_inside_the_axes_and_apart():
    # a label at the right edge was clipped ('prefil...'): it is now written left of its point;
    # two points at one place get labels one above the other
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from simkit.output.plots import _labels

    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.set_xlim(0, 10)
    ax.set_ylim(0, 10)
    _labels(fig, ax, [(9.9, 5.0, "pools.prefill.workers=2, pools.decode.workers=3"), (5.0, 5.0, "a=1"),
                      (5.0, 5.0, "a=2")])
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.canvas.draw()
    boxes = [t.get_window_extent(renderer) for t in ax.texts]
    right = ax.get_window_extent(renderer).x1
    assert len(boxes) == 3 and all(b.x1 <= right + 1 for b in boxes)
    assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
