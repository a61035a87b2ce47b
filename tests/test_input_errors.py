"""Bad input found by a hostile walk through the newer features: each gives one line naming
what was wrong, exit 2, and writes nothing."""

from __future__ import annotations

import pytest

from simkit.cli import main
from simkit.sweep import main as sweep_main

from conftest import REPO

DISAGG = str(REPO / "scenarios" / "disagg.yaml")
ROOFLINE = str(REPO / "scenarios" / "roofline.yaml")
TABLE = str(REPO / "scenarios" / "table.yaml")


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("args, message", [
    ([DISAGG, "--set", "planner.kind=bogus"],
     "unknown kind 'bogus' (expected one of: python, sla, static, threshold) @ $.planner"),
    ([ROOFLINE, "--set", "latency.tp=3"],
     "tensor_parallel_size 3 does not divide Llama-3.1-70B's 64 attention heads @ $.latency.tensor_parallel_size"),
    (["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--decode-contexts", "1000,,3000"],
     "simkit step: --decode-contexts '1000,,3000': expected comma-separated integers, e.g. 1000,2500"),
    (["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--tp", "3", "--prefill-tokens", "10"],
     "simkit step: tensor_parallel_size 3 does not divide Llama-3.1-8B's 32 attention heads"),
    (["step", "--model", "Qwen3-32B", "--gpu", "H200", "--tp", "2", "--prefill-tokens", "50000"],
     "simkit step: Qwen3-32B takes sequences of at most 40960 tokens (max_position_embeddings); got 50000"),
    (["step", "--model", "DeepSeek-V3", "--gpu", "L40S", "--prefill-tokens", "100"],
     "less than one KV block; raise tensor_parallel_size or lower the precision"),
])
def test_bad_values_are_one_line_errors(tmp_path, capsys, args, message):
    out = tmp_path / "out"
    argv = args + ([] if args[0] == "step" else ["--out", str(out)])
    assert main(argv) == 2
    assert one_error(capsys).endswith(message)
    assert not out.exists()


def test_a_pass_table_with_two_times_for_one_shape_is_refused(tmp_path, capsys):
    table = tmp_path / "t.csv"
    table.write_text("prefill_tokens,decode_requests,decode_context_tokens,pass_ms\n128,0,0,6.2\n128,0,0,99\n")
    assert main([TABLE, "--set", f"latency.path={table}", "--out", str(tmp_path / "o")]) == 2
    assert "t.csv:3: a second row for the same pass shape (128,0,0)" in one_error(capsys)


def test_a_policy_switched_to_python_by_set_imports_from_the_scenario_folder(tmp_path):
    out = tmp_path / "out"
    assert main([DISAGG, "--set", "router.kind=python", "--set", "router.path=policies.examples:ShortestPromptQueue",
                 "--set", "workload.num_requests=40", "--out", str(out), "--quiet", "--no-plots"]) == 0


def test_compare_refuses_a_plot_format_it_cannot_write(tmp_path, capsys):
    run = tmp_path / "run"
    assert main([DISAGG, "--set", "workload.num_requests=20", "--out", str(run), "--quiet", "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["compare", str(run), "--plot", str(tmp_path / "cmp.txt")]) == 2
    assert one_error(capsys).endswith("--plot writes .png, .pdf or .svg, not .txt")


def test_a_sweep_with_no_valid_point_runs_nothing(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert sweep_main([DISAGG, "--grid", "pools.bogus.workers=1,2", "--out", str(out)]) == 2
    assert "no point of the grid is a valid scenario" in one_error(capsys)
    assert not out.exists()


def test_a_roofline_pool_defaults_max_model_len_to_the_models_limit():
    from simkit.config import load_scenario

    s = load_scenario(ROOFLINE, [("latency", {"kind": "roofline", "model": "Qwen3-32B", "gpu": "H200", "tp": 2})])
    # Qwen3-32B's config.json: max_position_embeddings 40960; vLLM's max_model_len default
    assert s.pools.prefill.max_model_len == s.pools.decode.max_model_len == 40960
    explicit = load_scenario(ROOFLINE, [("pools.decode.max_model_len", 8192)])
    assert explicit.pools.decode.max_model_len == 8192 and explicit.pools.prefill.max_model_len == 131072
