"""Fuzzing the loaders and short simulations: the only exceptions allowed are simkit's own input
errors (ConfigError, TraceError). 2,300 generated examples in all."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit import load_scenario, scenario_from_dict
from simkit.spec import ConfigError, parse_overrides, yaml_load
from simkit.sim import simulate
from simkit.workload import TraceError, load_trace
from simkit.spec import TraceWorkload

FIELDS = ["name", "seed", "workload", "pools", "aggregated", "prefill", "decode", "workers", "block_size",
          "num_gpu_blocks", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
          "enable_prefix_caching", "enable_chunked_prefill", "latency", "kind", "polynomial", "constant",
          "prefill_ms", "decode_ms", "speedup_ratio", "link", "bandwidth_gb_per_s", "latency_ms",
          "channels", "kv_bytes_per_token", "router", "round_robin", "sla", "ttft_ms", "itl_ms", "e2e_ms",
          "max_sim_time_s", "synthetic", "trace", "num_requests", "arrival", "poisson", "rate_per_s",
          "input_tokens", "output_tokens", "fixed", "uniform", "lognormal", "value", "low", "high", "mean",
          "sigma", "min", "max", "shared_prefix", "num_groups", "prefix_tokens", "trace_block_size",
          "path", "arrival_speedup_ratio", "bogus"]

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10**6), st.integers(), st.floats(allow_nan=True),
    st.sampled_from(["", "no", "1e-3", "fixed", "poisson", "round_robin", "constant", "lognormal"]),
    st.text(max_size=8),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(FIELDS), inner, max_size=5)), max_leaves=25)


def valid_ish():
    """Mostly-valid scenarios with a few fields swapped for random values."""
    pool = st.fixed_dictionaries({}, optional={
        "workers": st.one_of(st.integers(1, 3), values), "num_gpu_blocks": st.one_of(st.integers(4, 200), values),
        "max_num_batched_tokens": st.one_of(st.sampled_from([64, 8192]), values),
        "max_num_seqs": st.one_of(st.integers(1, 8), values), "max_model_len": st.one_of(st.integers(1, 5000), values),
        "enable_chunked_prefill": st.one_of(st.booleans(), values)})
    workload = st.fixed_dictionaries({"kind": st.just("synthetic"), "num_requests": st.integers(1, 12)}, optional={
        "input_tokens": st.one_of(st.fixed_dictionaries({"kind": st.just("uniform"), "low": st.integers(1, 50),
                                                          "high": st.integers(50, 3000)}), values),
        "output_tokens": st.one_of(st.fixed_dictionaries({"kind": st.just("fixed"), "value": st.integers(1, 30)}), values),
        "arrival": st.one_of(st.fixed_dictionaries({"kind": st.just("poisson"), "rate_per_s": st.floats(0.5, 50)}), values),
        "shared_prefix": st.one_of(st.none(), st.fixed_dictionaries({"num_groups": st.integers(1, 3),
                                                                      "prefix_tokens": st.integers(16, 512)}), values)})
    pools = st.one_of(st.fixed_dictionaries({"aggregated": pool}),
                      st.fixed_dictionaries({"prefill": pool, "decode": pool}), values)
    return st.fixed_dictionaries({"pools": pools, "workload": workload}, optional={
        "latency": st.one_of(st.sampled_from([{"kind": "polynomial"}, {"kind": "constant", "prefill_ms": 5, "decode_ms": 2}]), values),
        "max_sim_time_s": st.one_of(st.none(), st.floats(0.01, 5), values), "sla": values, "seed": values,
        "link": values})


@settings(max_examples=1000, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.one_of(values, valid_ish()))
def test_scenario_dicts_give_a_scenario_or_config_error(data):
    try:
        s = scenario_from_dict(data, "fuzz.yaml")
    except ConfigError as exc:
        assert exc.messages and all(m.startswith("fuzz.yaml: ") and "\n" not in m for m in exc.messages)
        return
    records = simulate(s, check=True)  # small synthetic workloads: run them, checked
    assert records.stop_reason in ("completed", "time_cap"), records.stop_detail
    assert len(records.requests) == s.workload.num_requests


line_values = st.one_of(st.none(), st.booleans(), st.integers(-5, 3000), st.floats(allow_nan=True),
                        st.text(max_size=5), st.lists(st.integers(-2, 20), max_size=8))


@st.composite
def trace_lines(draw):
    if draw(st.integers(0, 9)) == 0:
        return draw(st.text(max_size=30))  # garbage
    obj = {}
    for key, good in (("timestamp", st.integers(0, 5000)), ("input_length", st.integers(1, 2000)),
                      ("output_length", st.integers(0, 40)), ("hash_ids", st.lists(st.integers(0, 9), min_size=4, max_size=5))):
        choice = draw(st.integers(0, 11))
        if choice == 0:
            continue  # missing
        obj[key] = draw(line_values) if choice == 1 else draw(good)
    return json.dumps(obj) if draw(st.integers(0, 15)) else json.dumps(obj)[:-2]


@settings(max_examples=700, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(trace_lines(), min_size=0, max_size=8), crlf=st.booleans(), bom=st.booleans())
def test_trace_files_load_or_fail_with_file_and_line(tmp_path_factory, lines, crlf, bom):
    path = tmp_path_factory.mktemp("fuzz") / "t.jsonl"
    text = ("\r\n" if crlf else "\n").join(lines)
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8", "surrogatepass"))
    try:
        requests = load_trace(TraceWorkload(path=str(path), format="mooncake"))
    except TraceError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc)
        return
    scenario = scenario_from_dict({"pools": {"aggregated": {"workers": 2, "num_gpu_blocks": 40}}})
    records = simulate(scenario, requests, check=True)
    assert records.stop_reason == "completed", records.stop_detail
    assert all(r.status in ("completed", "rejected") for r in records.requests)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.text(alphabet=st.sampled_from(list("ab:{}[]-,&*!?#|>'\"\n 019.e")), max_size=60))
def test_yaml_text_loads_or_fails_with_a_config_error(tmp_path_factory, text):
    try:
        yaml_load(text, "fuzz.yaml")
    except ConfigError as exc:
        assert exc.messages[0].startswith("fuzz.yaml")
    path = tmp_path_factory.mktemp("fuzzyaml") / "s.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        load_scenario(str(path))
    except ConfigError as exc:
        assert all("\n" not in m for m in exc.messages)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(pairs=st.lists(st.tuples(st.sampled_from(["pools.aggregated.workers", "seed", "workload.num_requests",
                                                  "pools.x", "a..b", "", "seed.x", "latency.kind", "sla"]),
                                st.text(max_size=10)), max_size=3))
def test_overrides_apply_or_fail_with_a_config_error(pairs):
    from conftest import REPO

    try:
        load_scenario(str(REPO / "scenarios" / "agg.yaml"), parse_overrides([f"{k}={v}" for k, v in pairs]))
    except ConfigError as exc:
        assert exc.messages and all("\n" not in m for m in exc.messages)
