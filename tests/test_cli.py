"""The command line: the main command, outputs, determinism and bad-input handling."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from simkit.cli import main

from conftest import REPO

SMALL = ["--set", "workload.num_requests=60"]


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "simkit", *args], capture_output=True, text=True,
                          cwd=cwd or REPO, timeout=300)


def test_main_command_writes_every_output(tmp_path):
    out = tmp_path / "run"
    proc = run_cli("scenarios/disagg.yaml", "--out", str(out), *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "TTFT ms" in proc.stdout and f"wrote {out}" in proc.stdout
    assert sorted(os.listdir(out)) == ["latency_cdf.png", "requests.jsonl", "requests.parquet", "run_info.json",
                                       "scenario.resolved.yaml", "summary.json"]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 60, "completed": 60, "rejected": 0, "incomplete": 0, "not_arrived": 0}
    for key in ("ttft_ms", "itl_ms", "e2e_ms"):
        assert set(summary[key]) == {"mean", "p50", "p90", "p99"}
    assert set(summary["worker_seconds"]) == {"prefill", "decode"}
    assert set(summary["goodput"]) == {"requests_per_s", "output_tokens_per_s", "fraction", "fraction_by_bound"}
    # each bound alone is met by at least the requests that meet them all
    assert set(summary["goodput"]["fraction_by_bound"]) == {"ttft_ms", "itl_ms"}
    assert min(summary["goodput"]["fraction_by_bound"].values()) >= summary["goodput"]["fraction"]
    rows = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == list(range(60))
    assert set(rows[0]) >= {"id", "arrival_ms", "input_length", "output_length", "ttft_ms", "itl_ms",
                            "e2e_ms", "status", "prefill_worker", "decode_worker"}
    # the resolved scenario reproduces the run exactly
    again = tmp_path / "again"
    assert main([str(out / "scenario.resolved.yaml"), "--out", str(again), "--quiet", "--no-plots"]) == 0
    assert (again / "requests.jsonl").read_text() == (out / "requests.jsonl").read_text()


def test_same_seed_same_records_across_processes(tmp_path):
    outs = []
    for i, hashseed in enumerate(("1", "2")):
        out = tmp_path / f"r{i}"
        env = dict(os.environ, PYTHONHASHSEED=hashseed)
        proc = subprocess.run([sys.executable, "-m", "simkit", "scenarios/agg.yaml", "--out", str(out),
                               "--no-plots", *SMALL], cwd=REPO, env=env, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    for name in ("requests.jsonl", "summary.json", "scenario.resolved.yaml"):
        assert (outs[0] / name).read_bytes() == (outs[1] / name).read_bytes()
    other = tmp_path / "seed2"
    assert main(["scenarios/agg.yaml", "--out", str(other), "--seed", "2", "--quiet", "--no-plots", *SMALL]) == 0
    assert (other / "requests.jsonl").read_bytes() != (outs[0] / "requests.jsonl").read_bytes()


def test_bad_scenario_is_one_line_exit_2_and_no_folder(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools:\n  aggregated: {workers: -1}\n")
    out = tmp_path / "out"
    assert main([str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"{bad}: 'workers' must be > 0: -1 @ $.pools.aggregated.workers\n"
    assert not out.exists()
    assert main(["scenarios/agg.yaml", "--set", "pools.aggregated.workrs=2", "--out", str(out)]) == 2
    assert "unknown field(s) workrs @ $.pools.aggregated" in capsys.readouterr().err
    assert not out.exists()


def test_bad_trace_line_is_one_line_exit_2_and_no_folder(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 100, "output_length": 2, "hash_ids": [1]}\n'
                     '{"timestamp": 5, "input_length": "x", "output_length": 2, "hash_ids": [1]}\n')
    out = tmp_path / "out"
    assert main(["scenarios/agg.yaml", "--trace", str(trace), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == f"{trace}:2: field 'input_length' is \"x\"; expected an integer from 1 to 2147483648\n"
    assert not out.exists() and os.listdir(tmp_path) == ["t.jsonl"]


def test_non_empty_out_is_refused_without_force(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("earlier result")
    args = ["scenarios/agg.yaml", "--out", str(out), "--quiet", "--no-plots", *SMALL]
    assert main(args) == 2
    assert "exists and is not empty" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "earlier result"
    assert main(args + ["--force"]) == 0
    assert not (out / "keep.txt").exists() and (out / "summary.json").exists()


def test_trace_flag_replays_a_mooncake_file_relative_to_cwd(tmp_path):
    (tmp_path / "t.jsonl").write_text(
        '{"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2]}\n')
    proc = run_cli(str(REPO / "scenarios" / "reference_agg.yaml"), "--trace", "t.jsonl", "--out", "o",
                   "--no-plots", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    row = json.loads((tmp_path / "o" / "requests.jsonl").read_text())
    assert row["ttft_ms"] == pytest.approx(32.1058589, rel=1e-9)  # P(1000)
    resolved = (tmp_path / "o" / "scenario.resolved.yaml").read_text()
    assert f"path: {tmp_path / 't.jsonl'}" in resolved and "trace_block_size: 512" in resolved


def test_oversized_request_is_rejected_and_the_rest_complete(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 10000, "output_length": 5}\n'
                     '{"timestamp": 1, "input_length": 100, "output_length": 5}\n')
    out = tmp_path / "o"
    assert main(["scenarios/reference_agg.yaml", "--trace", str(trace), "--out", str(out), "--quiet",
                 "--no-plots", "--set", "pools.aggregated.num_gpu_blocks=100",
                 "--set", "pools.aggregated.workers=1"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"] == {"total": 2, "completed": 1, "rejected": 1, "incomplete": 0, "not_arrived": 0}


def test_out_must_not_swallow_the_current_folder_or_inputs(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "keep.txt").write_text("x")
    scen = tmp_path / "s.yaml"
    scen.write_text((REPO / "scenarios" / "agg.yaml").read_text())
    assert main([str(scen), "--out", ".", "--force", *SMALL]) == 2
    assert "refusing to write results over the current folder" in capsys.readouterr().err
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "s.yaml").write_text(scen.read_text())
    assert main([str(sub / "s.yaml"), "--out", str(sub), "--force", *SMALL]) == 2
    assert "holds the input" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main([str(scen), "--out", "afile/out", *SMALL]) == 2
    assert "afile is not a folder" in capsys.readouterr().err
    assert (tmp_path / "keep.txt").exists() and (sub / "s.yaml").exists()


def test_run_where_nothing_completes_still_plots_without_warnings(tmp_path):
    out = tmp_path / "o"
    # every request is larger than a 2-block cache: all rejected, the plot says so
    assert main(["scenarios/agg.yaml", "--out", str(out), "--quiet", *SMALL,
                 "--set", "pools.aggregated.num_gpu_blocks=2"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["requests"]["rejected"] == 60 and summary["ttft_ms"] is None
    assert (out / "latency_cdf.png").exists()
    assert oct(os.stat(out).st_mode & 0o777) != oct(0o700)


def test_the_latency_table_keeps_its_columns_apart_for_huge_values():
    # a cell is 2 decimals while they fit in 10 characters, else 4 significant digits
    # (found by a newcomer: a run throttled to 1e-9 GB/s printed p50, p90 and p99 run together)
    from simkit.output.report import _cell
    assert [_cell(v) for v in (12.3456, 9999999.99, 100501969110.52, 1e9)] == [
        "      12.35", " 9999999.99", "  1.005e+11", "      1e+09"]
