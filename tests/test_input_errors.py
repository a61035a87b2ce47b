"""Bad input found by a hostile walk through the newer features: each gives one line naming
what was wrong, exit 2, and writes nothing."""

from __future__ import annotations

import pytest

from simkit.cli import main
from simkit.cli.sweep import main as sweep_main

from conftest import REPO

DISAGG = str(REPO / "scenarios" / "disagg.yaml")
ROOFLINE = str(REPO / "scenarios" / "roofline.yaml")
TABLE = str(REPO / "scenarios" / "table.yaml")


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_argument_errors_point_at_the_subcommands_help(capsys):
    with pytest.raises(SystemExit) as info:
        main(["step", "--model", "Llama-3.1-8B"])
    assert info.value.code == 2
    assert one_error(capsys) == "simkit: the following arguments are required: --gpu (see python -m simkit step --help)"


@pytest.mark.parametrize("args, message", [
    ([DISAGG, "--set", "planner.kind=bogus"],
     "unknown kind 'bogus' (expected one of: python, sla, static, threshold) @ $.planner"),
    ([DISAGG, "--seed", "1", "--set", "seed=2"], "--seed and --set seed=... both set the seed; give one"),
    ([ROOFLINE, "--set", "latency.tp=3"],
     "tensor_parallel_size 3 does not divide Llama-3.1-70B's 64 attention heads @ $.latency.tensor_parallel_size"),
    (["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--tp", "0", "--prefill-tokens", "8"],
     "simkit step: --tp must be >= 1, got 0"),
    (["step", "--model", "Llama-3.1-8B", "--gpu", "H100", "--decode-contexts", "1000,-5"],
     "simkit step: --decode-contexts must each be >= 1, got -5"),
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


def test_a_sweep_whose_every_point_fails_writes_nothing_and_force_replaces_a_sweep_whole(tmp_path, capsys):
    out = tmp_path / "sweep"
    base = [DISAGG, "--set", "workload.num_requests=20", "--out", str(out), "--jobs", "1"]
    assert sweep_main(base + ["--grid", "pools.decode.workers=1,2,3"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run")) == ["run000", "run001", "run002"]
    capsys.readouterr()
    # a trace that fails every point (found at run time, not by validation): one line, exit 2,
    # and the earlier sweep untouched even with --force
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\nnot json\n')
    assert sweep_main(base + ["--grid", "pools.decode.workers=1,2", "--set", f"workload={{kind: trace, path: {bad}}}",
                              "--force"]) == 2
    assert one_error(capsys).startswith(f"every point of the sweep failed; the first: {bad}:2: ")
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run")) == ["run000", "run001", "run002"]
    # a --force sweep of fewer points replaces the folder whole: no stale run002 beside it
    assert sweep_main(base + ["--grid", "pools.decode.workers=1,2", "--force"]) == 0
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("run")) == ["run000", "run001"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".simkit-")]  # no temp folder left


def test_a_sweep_with_no_valid_point_runs_nothing(tmp_path, capsys):
    out = tmp_path / "sweep"
    assert sweep_main([DISAGG, "--grid", "pools.bogus.workers=1,2", "--out", str(out)]) == 2
    assert "no point of the grid is a valid scenario" in one_error(capsys)
    assert not out.exists()


def test_a_roofline_pool_defaults_max_model_len_to_the_models_limit():
    from simkit import load_scenario

    s = load_scenario(ROOFLINE, [("latency", {"kind": "roofline", "model": "Qwen3-32B", "gpu": "H200", "tp": 2})])
    # Qwen3-32B's config.json: max_position_embeddings 40960; vLLM's max_model_len default
    assert s.pools.prefill.max_model_len == s.pools.decode.max_model_len == 40960
    explicit = load_scenario(ROOFLINE, [("pools.decode.max_model_len", 8192)])
    assert explicit.pools.decode.max_model_len == 8192 and explicit.pools.prefill.max_model_len == 131072


def test_an_error_after_validation_leaves_no_default_run_folder(tmp_path, monkeypatch, capsys):
    # without --out a runs/NAME-... folder is reserved before the trace is read; a trace that
    # fails there (exit 2) takes it away again, and an empty --out is refused
    monkeypatch.chdir(tmp_path)
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\nnot json\n')
    assert main([DISAGG, "--trace", str(bad), "--no-plots"]) == 2
    assert one_error(capsys).startswith(f"{bad}:2: not valid JSON")
    assert not list((tmp_path / "runs").iterdir())
    assert main([DISAGG, "--out", ""]) == 2
    assert one_error(capsys) == "--out: expected a folder name, got an empty one"


@pytest.mark.parametrize("field, value, shown", [
    ("num_attention_heads", 0, "0"), ("num_hidden_layers", -4, "-4"), ("num_key_value_heads", 0, "0"),
    ("head_dim", "x", "'x'"), ("hidden_size", 1e308, "1e+308"),
])
def test_a_config_json_with_a_bad_size_is_one_error(tmp_path, capsys, field, value, shown):
    # found by a hostile walk: zero heads or layers divided by zero (a traceback), a float
    # hidden_size was reported missing
    import json

    cfg = {"hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32, "vocab_size": 128256,
           field: value}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert main(["step", "--model", str(path), "--gpu", "H100", "--prefill-tokens", "10"]) == 2
    assert one_error(capsys) == (f"simkit step: {path}: config.json field {field} must be an integer from 1 to "
                                 f"1099511627776, got {shown}")


@pytest.mark.parametrize("text, message", [
    ('{"foo": 1}', "summary.json is not a simkit summary (KeyError: 'requests')"),
    ("[1, 2]", "summary.json is not a simkit summary (TypeError: list indices must be integers or slices, not str)"),
])
def test_compare_names_a_summary_of_another_shape(tmp_path, capsys, text, message):
    # found by a hostile walk: valid JSON of another shape gave a traceback
    run = tmp_path / "run"
    assert main([DISAGG, "--set", "workload.num_requests=20", "--out", str(run), "--quiet", "--no-plots"]) == 0
    capsys.readouterr()
    (run / "summary.json").write_text(text)
    assert main(["compare", str(run)]) == 2
    assert one_error(capsys) == f"{run}: {message}"
    assert main(["compare", str(tmp_path / "nothing")]) == 2
    assert one_error(capsys) == f"{tmp_path / 'nothing'}: no such folder"


@pytest.mark.parametrize("value", ["1.5", "1e300"])
def test_a_fraction_beyond_its_bound_names_its_own_bound_not_the_float_limit(capsys, value):
    code = main([str(REPO / "scenarios" / "planner.yaml"), "--set", f"planner.target_fraction={value}"])
    assert code == 2
    assert capsys.readouterr().err.strip() == (f"--set planner.target_fraction: 'target_fraction' must be <= 1: "
                                               f"{float(value)!r} @ $.planner.target_fraction")
