"""Fidelity against the reference (Dynamo mocker 1.6.1) on the real Mooncake conversation trace.

The reference's numbers are in tests/data/reference_mooncake_conversation.json (how they were
made is in its ``_source``). simkit's p50 and p90 of TTFT, ITL and E2E must each be within 5%.
Needs ../shared/traces (skipped with a reason elsewhere); about 30 s.
"""

from __future__ import annotations

import json

import pytest

from simkit import load_scenario
from simkit.output.report import summarize
from simkit.sim import simulate

from conftest import REPO, shared_path

REFERENCE = json.loads((REPO / "tests" / "data" / "reference_mooncake_conversation.json").read_text())


@pytest.mark.reference
@pytest.mark.parametrize("mode", ["agg", "disagg"])
def test_mooncake_conversation_matches_reference_within_5_percent(mode):
    trace = shared_path("traces", "mooncake_conversation.jsonl")
    scenario = load_scenario(str(REPO / "scenarios" / f"reference_{mode}.yaml"),
                             [("workload", {"kind": "trace", "path": str(trace)})])
    summary = summarize(simulate(scenario, record_token_times=False))
    ref = REFERENCE[mode]
    assert summary["requests"] == {"total": 12031, "completed": 12031, "rejected": 0, "incomplete": 0, "not_arrived": 0}
    for metric in ("ttft_ms", "itl_ms", "e2e_ms"):
        for q in ("p50", "p90"):
            ours, theirs = summary[metric][q], ref[metric][q]
            assert abs(ours / theirs - 1) <= 0.05, f"{metric} {q}: simkit {ours:.2f} vs reference {theirs:.2f}"


CONCURRENCY = json.loads((REPO / "tests" / "data" / "reference_mooncake_synthetic_concurrency.json").read_text())


@pytest.mark.reference
@pytest.mark.parametrize("max_in_flight", [16, 64])
def test_closed_loop_matches_reference_within_5_percent(max_in_flight):
    trace = shared_path("traces", "mooncake_synthetic.jsonl")
    scenario = load_scenario(str(REPO / "scenarios" / "reference_agg.yaml"),
                             [("workload", {"kind": "trace", "path": str(trace), "max_in_flight": max_in_flight})])
    summary = summarize(simulate(scenario, record_token_times=False))
    ref = CONCURRENCY[str(max_in_flight)]
    assert summary["requests"]["completed"] == ref["completed"] == 3993
    for metric in ("ttft_ms", "e2e_ms"):
        for q in ("p50", "p90"):
            ours, theirs = summary[metric][q], ref[metric][q]
            assert abs(ours / theirs - 1) <= 0.05, f"{metric} {q}: simkit {ours:.2f} vs reference {theirs:.2f}"
