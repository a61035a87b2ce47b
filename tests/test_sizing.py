"""Sizing answers: the overload verdict, ``capacity`` and the sweep table's SLA columns.

Each test runs the shipped ``scenarios/agg.yaml`` (Llama-3.1-8B on 4 H100s, SLA TTFT 500 ms and
ITL 15 ms) on fewer requests, to stay quick.
"""

from __future__ import annotations

import json

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
    assert sat["backlog_growth_per_s"] > 100 and sat["backlog_at_last_arrival"] > 1000
    assert "simkit: overloaded: " in captured.err
    assert "OVERLOADED: " in captured.out


def test_a_run_that_keeps_up_is_not_called_overloaded():
    scenario = load_scenario(AGG, [("workload.num_requests", 1000), ("workload.arrival.rate_per_s", 5.0)])
    sat = summarize(simulate(scenario), scenario.sla)["saturation"]
    assert sat["overloaded"] is False and sat["verdict"].startswith("keeps up")
    assert sat["served_requests_per_s"] == pytest.approx(sat["offered_requests_per_s"], rel=0.15)


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
