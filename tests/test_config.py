"""Scenario loading: strict structuring, exact error lines, YAML 1.2, round trip, overrides."""

from __future__ import annotations

import pytest

from simkit import load_scenario, override, scenario_from_dict
from simkit.spec import ConfigError, dump_scenario, parse_overrides, yaml_load

from conftest import REPO


def errors(data):
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(data, "s.yaml")
    return info.value.messages


def test_every_problem_is_one_line_with_its_path():
    msgs = errors({
        "pools": {"prefill": {"workers": 0, "block_size": 1.5}, "decode": {"workers": "2"}},
        "latency": {"kind": "quadratic"},
        "router": {"kind": "round_robin", "weight": 1},
    })
    assert sorted(msgs) == sorted([
        "s.yaml: expected an integer, got 1.5 @ $.pools.prefill.block_size",
        "s.yaml: expected an integer, got '2' @ $.pools.decode.workers",
        "s.yaml: unknown kind 'quadratic' (expected one of: aic, constant, polynomial, roofline, table) @ $.latency",
        "s.yaml: unknown field(s) weight @ $.router",
    ])


def test_range_errors_name_the_field():
    # (range validators run once a class's types are right, so they come after type errors)
    assert errors({"pools": {"prefill": {"workers": 0}, "decode": {"max_num_seqs": -1}}}) == [
        "s.yaml: 'workers' must be > 0: 0 @ $.pools.prefill.workers",
        "s.yaml: 'max_num_seqs' must be > 0: -1 @ $.pools.decode.max_num_seqs",
    ]


def test_booleans_are_not_integers_and_nan_is_refused():
    assert errors({"pools": {"aggregated": {"workers": True}}}) == [
        "s.yaml: expected an integer, got true @ $.pools.aggregated.workers"]
    assert errors({"pools": {"aggregated": {}}, "sla": {"ttft_ms": float("nan")}}) == [
        "s.yaml: expected a finite number, got nan @ $.sla.ttft_ms"]
    assert errors({"pools": {"aggregated": {"enable_prefix_caching": "no"}}}) == [
        "s.yaml: expected true or false, got 'no' @ $.pools.aggregated.enable_prefix_caching"]
    # values are shown as the YAML writes them (null, true), not as Python's None and True
    assert errors({"pools": {"aggregated": {"backend": None, "max_num_seqs": None}}}) == [
        "s.yaml: expected an integer, got null @ $.pools.aggregated.max_num_seqs",
        "s.yaml: expected one of: vllm, sglang, trtllm, got null @ $.pools.aggregated.backend"]


def test_cross_field_rules():
    assert errors({"pools": {"aggregated": {}, "decode": {}}}) == [
        "s.yaml: 'aggregated' is given with 'decode': a scenario has either an 'aggregated' pool or "
        "'prefill' and 'decode' pools @ $.pools"]
    assert errors({"pools": {"aggregated": {}}, "link": {}}) == [
        "s.yaml: 'link' applies only to disaggregated pools (prefill + decode) @ $"]
    assert errors({"pools": {}}) == ["s.yaml: give either 'aggregated' or both 'prefill' and 'decode' @ $.pools"]


def test_hostile_yaml_is_a_config_error_not_a_crash(tmp_path):
    cases = {
        "nonstr.yaml": ("1: 2\npools: {aggregated: {}}\n", "mapping key 1 is not a string"),
        "unhashable.yaml": ("? [a, b]\n: 1\n", "YAML syntax error"),
        "badtag.yaml": ("pools: {aggregated: {workers: !!int abc}}\n", "'abc' is not an integer"),
        "deep.yaml": ("x: " + "[" * 3000 + "\n", "nested too deeply"),
    }
    for name, (text, expected) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        with pytest.raises(ConfigError) as info:
            load_scenario(str(path))
        assert expected in info.value.messages[0], (name, info.value.messages)


def test_mapping_expected_and_bounds():
    assert errors({"pools": {"aggregated": 5}}) == ["s.yaml: expected a mapping, got 5 @ $.pools.aggregated"]
    assert errors({"pools": None}) == ["s.yaml: expected a mapping, got null @ $.pools"]
    assert errors({"pools": {"aggregated": {"workers": 10**20}}}) == [
        "s.yaml: 'workers' must be <= 10000: 100000000000000000000 @ $.pools.aggregated.workers"]
    assert scenario_from_dict({"pools": {"aggregated": {}}, "sla": None}).sla.is_set is False


def test_yaml_1_2_scalars():
    data = yaml_load("a: 1e-3\nb: no\nc: 010\nd: 0o10\ne: true\nf: 50.0e9\ng: ~\n")
    assert data == {"a": 0.001, "b": "no", "c": 10, "d": 8, "e": True, "f": 50e9, "g": None}


def test_yaml_syntax_error_names_line_and_column(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("pools:\n  aggregated: {workers: [1,\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path))
    (line,) = info.value.messages
    assert line.startswith(f"{path}:3:1: YAML syntax error")


def test_duplicate_keys_are_refused(tmp_path):
    path = tmp_path / "dup.yaml"
    path.write_text("seed: 1\nseed: 2\npools: {aggregated: {}}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path))
    assert info.value.messages == [f"{path}:2:1: YAML syntax error: duplicate key 'seed'"]


def test_every_shipped_scenario_loads_and_round_trips(tmp_path):
    paths = sorted((REPO / "scenarios").glob("*.yaml"))
    assert {p.name for p in paths} >= {"agg.yaml", "disagg.yaml", "reference_agg.yaml", "reference_disagg.yaml"}
    for path in paths:
        scenario = load_scenario(str(path))
        copy = tmp_path / path.name
        copy.write_text(dump_scenario(scenario))
        assert load_scenario(str(copy)) == scenario


def test_overrides_are_validated_like_the_file(tmp_path):
    path = REPO / "scenarios" / "disagg.yaml"
    s = load_scenario(str(path), parse_overrides(["pools.decode.workers=8", "link.latency_ms=1e-3"]))
    assert s.pools.decode.workers == 8 and s.link.latency_ms == 0.001
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path), parse_overrides(["pools.decode.wrokers=8"]))
    # the error names the --set that caused it, not the file
    assert info.value.messages == ["--set pools.decode.wrokers: unknown field(s) wrokers @ $.pools.decode"]
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path), parse_overrides(["pools.decode.workers=abc"]))
    assert info.value.messages == ["--set pools.decode.workers: expected an integer, got 'abc' @ $.pools.decode.workers"]
    # a rule of the enclosing mapping that names the field the --set wrote, and a scalar the
    # --set turned into a mapping, blame the --set too
    agg = str(REPO / "scenarios" / "agg.yaml")
    with pytest.raises(ConfigError) as info:
        load_scenario(agg, parse_overrides(["pools.aggregated.trtllm.batch_wait_timeout_iters=20"]))
    assert info.value.messages == ["--set pools.aggregated.trtllm.batch_wait_timeout_iters: 'trtllm' settings apply "
                                   "only to backend: trtllm @ $.pools.aggregated"]
    with pytest.raises(ConfigError) as info:
        load_scenario(agg, parse_overrides(["pools.aggregated.async_scheduling.x=1"]))
    assert info.value.messages == ["--set pools.aggregated.async_scheduling.x: expected true or false, got {'x': 1} "
                                   "@ $.pools.aggregated.async_scheduling"]
    # a rule naming the --set field by its dotted name ('sglang.enable_mixed_chunk'), or
    # naming the field another --set wrote ('enable_chunked_prefill'), blames that --set
    sg = tmp_path / "sg.yaml"
    sg.write_text("pools: {aggregated: {backend: sglang}}\n")
    rule = ("'sglang.enable_mixed_chunk' needs 'enable_chunked_prefill': true (SGLang mixes decodes only into "
            "chunked-prefill passes) @ $.pools.aggregated")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(sg), parse_overrides(["pools.aggregated.enable_chunked_prefill=false",
                                                "pools.aggregated.sglang.enable_mixed_chunk=true"]))
    assert info.value.messages == [f"--set pools.aggregated.sglang.enable_mixed_chunk: {rule}"]
    sg.write_text("pools: {aggregated: {backend: sglang, sglang: {enable_mixed_chunk: true}}}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(sg), parse_overrides(["pools.aggregated.enable_chunked_prefill=false"]))
    assert info.value.messages == [f"--set pools.aggregated.enable_chunked_prefill: {rule}"]
    # a rule that names the --set field in its arithmetic ("need min_workers (50) <= ...")
    planner = str(REPO / "scenarios" / "planner.yaml")
    with pytest.raises(ConfigError) as info:
        load_scenario(planner, parse_overrides(["pools.prefill.min_workers=50"]))
    assert info.value.messages == ["--set pools.prefill.min_workers: need min_workers (50) <= workers (1) <= "
                                   "max_workers (8) @ $.pools.prefill"]
    # the file's own error in that mapping still names the file
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: {aggregated: {backend: sglang, preemption_mode: fifo}}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(bad), parse_overrides(["pools.aggregated.workers=2"]))
    assert info.value.messages == [f"{bad}: 'preemption_mode' applies only to backend: vllm (sglang never preempts "
                                   "by it) @ $.pools.aggregated"]
    with pytest.raises(ConfigError):
        parse_overrides(["no_equals_sign"])
    assert override(s, {"pools.prefill.workers": 3}).pools.prefill.workers == 3


def test_relative_trace_path_resolves_against_the_scenario_folder(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "s.yaml"
    path.write_text("workload: {kind: trace, path: t.jsonl}\npools: {aggregated: {}}\n")
    assert load_scenario(str(path)).workload.path == str(tmp_path / "sub" / "t.jsonl")


def test_override_of_an_aliased_pool_changes_only_that_pool(tmp_path):
    # reference_disagg.yaml writes `prefill: &engine {...}` and `decode: *engine`
    s = load_scenario(str(REPO / "scenarios" / "reference_disagg.yaml"),
                      parse_overrides(["pools.decode.enable_prefix_caching=false"]))
    assert s.pools.decode.enable_prefix_caching is False
    assert s.pools.prefill.enable_prefix_caching is True


def test_missing_directory_and_empty_scenario_files(tmp_path):
    cases = {
        str(tmp_path / "absent.yaml"): "cannot read scenario file: No such file or directory",
        str(tmp_path): "cannot read scenario file: Is a directory",
    }
    empty = tmp_path / "empty.yaml"
    empty.write_text("# only a comment\n")
    cases[str(empty)] = "the file is empty; expected a scenario mapping @ $"
    for path, expected in cases.items():
        with pytest.raises(ConfigError) as info:
            load_scenario(path)
        assert info.value.messages == [f"{path}: {expected}"]


def test_unknown_kind_lists_the_accepted_ones():
    assert errors({"pools": {"aggregated": {}}, "workload": {"kind": "csv"}}) == [
        "s.yaml: unknown kind 'csv' (expected one of: synthetic, trace) @ $.workload"]
    assert errors({"pools": {"aggregated": {}}, "router": {}}) == [
        "s.yaml: missing 'kind' (expected one of: kv_aware, least_loaded, python, round_robin, session_affinity) @ $.router"]
