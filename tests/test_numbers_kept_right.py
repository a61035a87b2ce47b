"""Nothing silently wrong (issue 18): time zero comes only from timestamps that count, a trace's
format is told by its parsed keys, every time-like field obeys one rule after every scaling
(a simulated time stays within 1e9 s), requests built in Python are checked as trace lines are,
``wait_for`` must be a list, a Python policy is read afresh from its own folder, and the
threshold planner counts the workers still starting. Generated-input properties cover every
time-like scenario field and every trace format's time fields."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simkit
from simkit import scenario_from_dict
from simkit.core.request import Request
from simkit.core.units import MAX_SIM_TIME_S
from simkit.sim import simulate
from simkit.spec import ConfigError, TraceWorkload
from simkit.workload import TraceError, load_trace, stream_trace

from conftest import REPO

AGG = {"pools": {"aggregated": {}}}


def trace(tmp_path: Path, lines, name: str = "t.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return str(path)


# ---------------------------------------------------------------- time zero


def test_an_agentic_request_without_a_ready_time_arrives_at_time_zero_not_at_epoch_zero(tmp_path):
    path = trace(tmp_path, [
        {"request_id": "a", "input_length": 100, "output_length": 5, "first_ready_timestamp_ms": 1.7e12},
        {"request_id": "b", "input_length": 100, "output_length": 5},
        {"request_id": "c", "input_length": 100, "output_length": 5, "first_ready_timestamp_ms": 1.7e12 + 100},
    ])
    reqs = sorted(load_trace(TraceWorkload(path=path)), key=lambda r: r.rid)
    assert [r.arrived_at for r in reqs] == [0.0, 0.0, pytest.approx(0.1)]
    summary = simkit.run(dict(AGG, workload={"kind": "trace", "path": path})).summary
    # three short requests finish within a second: not 54 years of worker time
    assert summary["duration_s"] < 1 and sum(summary["worker_seconds"].values()) < 1


def test_an_ignored_follow_up_timestamp_never_moves_time_zero(tmp_path):
    path = trace(tmp_path, [
        {"timestamp": 5000, "input_length": 100, "output_length": 2, "session_id": "s"},
        {"timestamp": 0, "input_length": 200, "output_length": 2, "session_id": "s", "delay": 10},
        {"timestamp": 5250, "input_length": 100, "output_length": 2},
    ])
    first, follow_up, other = sorted(load_trace(TraceWorkload(path=path)), key=lambda r: r.rid)
    assert (first.arrived_at, other.arrived_at) == (0.0, 0.25)
    # the follow-up is released 10 ms after the first turn ends (its arrival is that lower bound)
    assert follow_up.deps == (0,) and follow_up.delay_s == 0.01 and follow_up.arrived_at == 0.01


# ---------------------------------------------------------------- format detection


def test_a_mooncake_line_with_a_request_id_is_read_as_mooncake(tmp_path):
    path = trace(tmp_path, [{"timestamp": 0, "input_length": 10, "output_length": 1, "request_id": 1},
                            {"timestamp": 5000, "input_length": 10, "output_length": 1, "request_id": 2}])
    assert [r.arrived_at for r in load_trace(TraceWorkload(path=path))] == [0.0, 5.0]


@pytest.mark.parametrize("first, message", [
    ({"timestamp": 0, "request_id": 1, "wait_for": [], "input_length": 1, "output_length": 1},
     "agentic field 'wait_for' and Mooncake field 'timestamp', so its format is ambiguous"),
    ({"first_ready_timestamp_ms": 0, "delay": 3, "request_id": 1, "input_length": 1, "output_length": 1},
     "agentic field 'first_ready_timestamp_ms' and Mooncake field 'delay'"),
])
def test_a_first_line_that_fits_two_formats_is_refused(tmp_path, first, message):
    with pytest.raises(TraceError, match=message):
        load_trace(TraceWorkload(path=trace(tmp_path, [first])))


@pytest.mark.parametrize("lines, fmt, field", [
    ([{"timestamp": 0, "input_length": 1, "output_length": 1},
      {"timestamp": 1, "input_length": 1, "output_length": 1, "wait_for": []}], "mooncake", "wait_for"),
    ([{"request_id": 1, "input_length": 1, "output_length": 1},
      {"request_id": 2, "input_length": 1, "output_length": 1, "timestamp": 7}], "agentic", "timestamp"),
])
def test_a_later_line_with_the_other_formats_field_is_refused(tmp_path, lines, fmt, field):
    path = trace(tmp_path, lines)
    with pytest.raises(TraceError) as info:
        load_trace(TraceWorkload(path=path))
    assert str(info.value).startswith(f"{path}:2: field '{field}' belongs to the ")
    assert f"this trace is read as {fmt}" in str(info.value)


def test_the_format_hint_names_every_format(tmp_path):
    from simkit.spec import TRACE_FORMATS

    with pytest.raises(TraceError) as info:
        load_trace(TraceWorkload(path=trace(tmp_path, ["what,is,this"], "t.csv")))
    assert str(info.value).endswith("set workload.format to one of: " + ", ".join(TRACE_FORMATS))
    assert len(TRACE_FORMATS) == 6


# ---------------------------------------------------------------- wait_for


@pytest.mark.parametrize("value", [{}, False, 0, "a", {"a": 1}, [None], [1.5]])
def test_a_wait_for_that_is_not_a_list_of_ids_is_refused(tmp_path, value):
    path = trace(tmp_path, [{"request_id": "a", "input_length": 1, "output_length": 1},
                            {"request_id": "b", "input_length": 1, "output_length": 1, "wait_for": value}])
    with pytest.raises(TraceError, match=rf"^{path}:2: field 'wait_for' is .*; expected a list of request ids"):
        load_trace(TraceWorkload(path=path))


def test_a_null_wait_for_means_no_dependency(tmp_path):
    path = trace(tmp_path, [{"request_id": "a", "input_length": 1, "output_length": 1, "wait_for": None}])
    assert load_trace(TraceWorkload(path=path))[0].deps == ()


# ---------------------------------------------------------------- one time rule: trace fields

#: every time field of every trace format: (format, line builder from a value, field name, unit)
TIME_FIELDS = [
    ("mooncake", lambda v: [{"timestamp": 0, "input_length": 1, "output_length": 1},
                            {"timestamp": v, "input_length": 1, "output_length": 1}], "timestamp", "ms"),
    ("mooncake", lambda v: [{"timestamp": 0, "input_length": 1, "output_length": 1, "session_id": 1},
                            {"input_length": 1, "output_length": 1, "session_id": 1, "delay": v}], "delay", "ms"),
    ("mooncake", lambda v: [{"timestamp": 0, "input_length": 1, "output_length": 1, "session_id": 1},
                            {"input_length": 1, "output_length": 1, "session_id": 1, "delay_ms": v}], "delay_ms",
     "ms"),
    ("agentic", lambda v: [{"request_id": 0, "input_length": 1, "output_length": 1, "first_ready_timestamp_ms": 0},
                           {"request_id": 1, "input_length": 1, "output_length": 1, "first_ready_timestamp_ms": v}],
     "first_ready_timestamp_ms", "ms"),
    ("agentic", lambda v: [{"request_id": 0, "input_length": 1, "output_length": 1},
                           {"request_id": 1, "input_length": 1, "output_length": 1, "wait_for": [0],
                            "delay_after_dependencies_ms": v}], "delay_after_dependencies_ms", "ms"),
    ("csv", lambda v: ["arrival_ms,input_length,output_length", "0,1,1", f"{v!r},1,1"], "arrival_ms", "ms"),
    ("weka", lambda v: [{"id": "s", "requests": [{"in": 1, "out": 1}, {"in": 1, "out": 1, "think_time": v}]}],
     "think_time", "s"),
    ("weka_requests", lambda v: [{"session": 1, "agent": "main", "t": 0, "input_length": 1, "output_length": 1},
                                 {"session": 1, "agent": "main", "t": 0, "input_length": 1, "output_length": 1,
                                  "think_time": v}], "think_time", "s"),
    ("weka_requests", lambda v: [{"session": 1, "agent": "main", "t": v, "input_length": 1, "output_length": 1}],
     "t", "s"),
]

times = st.one_of(st.floats(0, 1e16), st.sampled_from([1e9, 1e12, 1e12 + 1, 1e15, 9.99e8]),
                  st.floats(allow_nan=True, allow_infinity=True), st.integers(-10, 10**20))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=st.sampled_from(TIME_FIELDS), value=times,
       speedup=st.sampled_from([1.0, 1e-6, 1e-300, 1e3]))
def test_every_trace_time_field_after_every_scaling_stays_within_the_clocks_limit(tmp_path_factory, case, value,
                                                                                   speedup):
    fmt, lines, field, unit = case
    if fmt == "csv" and not isinstance(value, float):
        value = float(value)
    path = trace(tmp_path_factory.mktemp("t"), lines(value), "t.csv" if fmt == "csv" else "t.jsonl")
    spec = TraceWorkload(path=path, format=fmt, arrival_speedup_ratio=speedup)
    try:
        requests = load_trace(spec)
    except TraceError as exc:  # one line, naming the file, the line and (for a bad value) the field and unit
        message = str(exc)
        assert message.startswith(f"{path}:") and "\n" not in message
        assert field in message or "time zero" in message or "delays along" in message
        if "expected" in message and field in message:
            assert ("milliseconds" if unit == "ms" else "seconds") in message
        return
    for r in requests:
        assert 0 <= r.arrived_at <= MAX_SIM_TIME_S and 0 <= r.delay_s <= MAX_SIM_TIME_S
    if not any(r.deps for r in requests) and fmt not in ("weka", "weka_requests"):
        assert [r.arrived_at for r in stream_trace(spec)] == sorted(r.arrived_at for r in requests)


def test_a_chain_of_delays_beyond_the_limit_is_refused_at_its_line(tmp_path):
    lines = [{"request_id": 0, "input_length": 1, "output_length": 1}]
    lines += [{"request_id": i, "input_length": 1, "output_length": 1, "wait_for": [i - 1],
               "delay_after_dependencies_ms": 4e11} for i in range(1, 4)]
    path = trace(tmp_path, lines)
    with pytest.raises(TraceError, match=rf"^{path}:4: the delays along the requests it waits for put this "
                                         r"request at least 1.2e\+09 s after time zero"):
        load_trace(TraceWorkload(path=path))


def test_sessions_per_s_is_checked_after_its_scaling(tmp_path):
    lines = [{"id": i, "requests": [{"in": 1, "out": 1}]} for i in range(3)]
    path = trace(tmp_path, lines)
    with pytest.raises(TraceError, match=rf"^{path}:3: sessions_per_s 1e-09 starts this session"):
        load_trace(TraceWorkload(path=path, format="weka", sessions_per_s=1e-9))


# ---------------------------------------------------------------- one time rule: scenario fields


def _time_fields(cls, seen=None):
    """Every attrs spec class reachable from ``cls`` and its time-like field names."""
    import typing

    seen = {} if seen is None else seen
    if cls in seen or not attrs.has(cls):
        return seen
    hints = typing.get_type_hints(cls)
    seen[cls] = [a.name for a in attrs.fields(cls) if a.name.endswith(("_s", "_ms", "_us"))]
    for a in attrs.fields(cls):
        stack = [hints[a.name]]
        while stack:
            t = stack.pop()
            stack.extend(typing.get_args(t))
            if isinstance(t, type) and attrs.has(t):
                _time_fields(t, seen)
    return seen


#: where each time-like field sits in a valid scenario: (field, scenario, dotted path of its parent)
PLACES = {
    "duration_s": ({"workload": {"arrival": {"kind": "piecewise", "segments": [{}]}}}, "workload.arrival.segments"),
    "period_s": ({"workload": {"arrival": {"kind": "diurnal"}}}, "workload.arrival"),
    "phase_s": ({"workload": {"arrival": {"kind": "diurnal"}}}, "workload.arrival"),
    "rate_per_s": ({"workload": {"arrival": {"kind": "poisson"}}}, "workload.arrival"),
    "mean_rate_per_s": ({"workload": {"arrival": {"kind": "diurnal"}}}, "workload.arrival"),
    "think_time_s": ({"workload": {"kind": "synthetic", "sessions": {}}}, "workload.sessions"),
    "sessions_per_s": ({"workload": {"kind": "trace", "path": "t.jsonl", "format": "weka"}}, "workload"),
    "prefill_ms": ({"latency": {"kind": "constant"}}, "latency"),
    "decode_ms": ({"latency": {"kind": "constant"}}, "latency"),
    "layer_overhead_us": ({"latency": {"kind": "roofline"}}, "latency"),
    "pass_overhead_ms": ({"latency": {"kind": "roofline"}}, "latency"),
    "sequence_overhead_us": ({"latency": {"kind": "roofline"}}, "latency"),
    "request_layer_overhead_us": ({"latency": {"kind": "roofline"}}, "latency"),
    "allreduce_latency_us": ({"latency": {"kind": "roofline"}}, "latency"),
    "dispatch_overhead_ms": ({"latency": {"kind": "roofline"}}, "latency"),
    "first_token_overhead_ms": ({"latency": {"kind": "roofline"}}, "latency"),
    "dispatch_jitter_ms": ({"latency": {"kind": "roofline"}}, "latency"),
    "host_output_tokens_per_s": ({"latency": {"kind": "roofline"}}, "latency"),
    "latency_ms": ({"pools": {"prefill": {}, "decode": {}}, "link": {}}, "link"),
    "bandwidth_gb_per_s": ({"pools": {"prefill": {}, "decode": {}}, "link": {}}, "link"),
    "d2h_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4}}}}, "pools.aggregated.kv_offload"),
    "h2d_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4}}}}, "pools.aggregated.kv_offload"),
    "read_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "storage": {"blocks": 4}}}}},
                      "pools.aggregated.kv_offload.storage"),
    "write_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "storage": {"blocks": 4}}}}},
                       "pools.aggregated.kv_offload.storage"),
    "first_byte_latency_ms": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "storage": {"blocks": 4}}}}},
                              "pools.aggregated.kv_offload.storage"),
    "shared_d2h_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4}}}}, "pools.aggregated.kv_offload"),
    "shared_h2d_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4}}}}, "pools.aggregated.kv_offload"),
    "shared_read_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "storage": {
        "blocks": 4, "scope": "pool"}}}}}, "pools.aggregated.kv_offload.storage"),
    "shared_write_gb_per_s": ({"pools": {"aggregated": {"kv_offload": {"host_blocks": 4, "storage": {
        "blocks": 4, "scope": "pool"}}}}}, "pools.aggregated.kv_offload.storage"),
    "kv_event_lag_ms": ({"router": {"kind": "kv_aware"}}, "router"),
    "ttft_ms": ({"sla": {}}, "sla"), "itl_ms": ({"sla": {}}, "sla"), "e2e_ms": ({"sla": {}}, "sla"),
    "max_sim_time_s": ({}, ""),
    "interval_s": ({"planner": {"kind": "static"}}, "planner"),
    "scale_down_delay_s": ({"planner": {"kind": "static"}}, "planner"),
    "startup_time_s": ({"planner": {"kind": "static", "interval_s": 1e6}}, "pools.aggregated"),
}


def test_every_time_like_scenario_field_has_a_place_in_the_property_below():
    fields = {name for names in _time_fields(simkit.Scenario).values() for name in names}
    assert fields <= set(PLACES), f"time-like fields the property does not draw: {sorted(fields - set(PLACES))}"


def _set(data: dict, dotted: str, value) -> None:
    node = data
    for key in dotted.split(".") if dotted else []:
        node = node[key][0] if isinstance(node[key], list) else node[key]
    node.update(value)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(sorted(PLACES)),
       value=st.one_of(st.floats(-1e16, 1e16), st.sampled_from([1e9, 1e9 * 1.0000001, 1e12, 1e12 + 1e3, 1e15,
                                                               1e15 + 1e8, 1e-9, 9e-10, 1e-300, 0.0])))
def test_every_time_like_scenario_field_stays_within_the_clocks_limit(name, value):
    data, where = PLACES[name]
    data = json.loads(json.dumps(dict({"pools": {"aggregated": {}}}, **data)))
    data.get("workload", {}).setdefault("kind", "synthetic")
    _set(data, where, {name: value})
    if name == "sessions_per_s":
        data["workload"]["path"] = str(REPO / "scenarios" / "traces" / "sessions.jsonl")
    unit_limit = 1e9 if name.endswith("_s") and not name.endswith("_per_s") else \
        1e12 if name.endswith("_ms") else 1e15 if name.endswith("_us") else None
    try:
        s = scenario_from_dict(data, "f.yaml")
    except ConfigError as exc:  # refused in one line naming the field
        message = exc.messages[0]
        assert message.startswith("f.yaml: ") and (message.endswith(f".{name}") or "beyond 1e9 s" in message), message
        if unit_limit is not None and value > unit_limit:  # for the clock's limit, saying so
            assert f"'{name}' must be at most" in message and "within 1e9 s" in message, message
        elif name.endswith("_per_s") and 0 < value < 1e-9:
            assert f"'{name}' must be" in message and ("1e-9" in message or "1e-09" in message), message
        else:  # for another reason (a negative duration, a zero rate...)
            assert "must be" in message or "beyond 1e9 s" in message, message
        return
    # accepted: the value is within its limit
    if unit_limit is not None:
        assert abs(value) <= unit_limit
    assert s is not None


@pytest.mark.parametrize("arrival, n, expected", [
    ({"kind": "poisson", "rate_per_s": 1e-6}, 1002,
     "1002 requests at a mean rate of 1e-06/s arrive over about 1e+09 s"),
    ({"kind": "piecewise", "segments": [{"duration_s": 10, "rate_per_s": 1e-6}, {"duration_s": 1e5, "rate_per_s": 0}]},
     10, "10 requests at a mean rate of 9.999e-11/s arrive over about 9e+10 s"),
    ({"kind": "diurnal", "mean_rate_per_s": 1e-8}, 12,
     "12 requests at a mean rate of 1e-08/s arrive over about 1.1e+09"),
])
def test_a_synthetic_workload_spanning_beyond_the_limit_is_refused(arrival, n, expected):
    data = {"pools": {"aggregated": {}}, "workload": {"kind": "synthetic", "num_requests": n, "arrival": arrival}}
    with pytest.raises(ConfigError) as info:
        scenario_from_dict(data)
    assert expected in info.value.messages[0] and info.value.messages[0].endswith("@ $.workload")
    data["workload"]["num_requests"] = 2  # a short one at the same rate is fine
    if arrival["kind"] != "piecewise":
        scenario_from_dict(data)


def test_a_run_whose_times_add_up_beyond_the_limit_stops_there_and_says_so():
    # prefill passes of 1e12 ms: the first ends at 1e9 s exactly (within the limit), the next
    # one would end beyond it
    s = scenario_from_dict({"pools": {"aggregated": {}}, "latency": {"kind": "constant", "prefill_ms": 1e12,
                                                                       "decode_ms": 1e12}})
    reqs = [Request(0, 0.0, 100, 3)]
    fast, per_pass = simulate(s, reqs), simulate(s, reqs, fast_forward=False)
    assert fast == per_pass
    assert fast.stop_reason == "time_limit" and fast.end_at == 1e9
    assert fast.stop_detail.startswith("an event was due at t=2e+09 s, beyond the simulated clock's limit of "
                                       "1e9 s (about 31 years), with 1 request(s) not ended")
    (r,) = fast.requests
    assert r.status == "incomplete" and r.first_token_at == 1e9


# ---------------------------------------------------------------- requests built in Python


@pytest.mark.parametrize("changes, message", [
    ({"input_length": 0}, "input_length is 0; expected an integer from 1"),
    ({"input_length": -5}, "input_length is -5"),
    ({"output_length": -1}, "output_length is -1"),
    ({"input_length": 2.5}, "input_length is 2.5"),
    ({"arrived_at": math.nan}, "arrived_at is nan; expected seconds from 0 to 1e9 s"),
    ({"arrived_at": math.inf}, "arrived_at is inf"),
    ({"arrived_at": -1.0}, "arrived_at is -1.0"),
    ({"arrived_at": 2e9}, "arrived_at is 2000000000.0"),
    ({"delay_s": math.nan}, "delay_s is nan"),
    ({"priority": 0.0}, "priority is 0.0; expected a number > 0"),
    ({"priority": math.nan}, "priority is nan"),
    ({"deps": (7,)}, "deps is (7,); expected a tuple of the ids of other requests (0..1)"),
    ({"deps": (0,)}, "deps is (0,)"),  # itself
    ({"hash_ids": (-1,)}, "hash_ids must be None or a tuple of integers"),
    ({"hash_block_size": 0}, "hash_block_size is 0"),
    ({"rid": 5}, "ids must be 0..1, each once"),
])
def test_impossible_requests_are_refused_by_the_api_as_trace_lines_are(changes, message):
    good = Request(1, 0.0, 10, 2)
    bad = attrs.evolve(Request(0, 0.0, 10, 2), **changes)
    with pytest.raises(ValueError) as info:
        simkit.run(AGG, requests=[bad, good] if changes.get("rid") is None else [bad, good])
    assert "requests[0]" in str(info.value) and message in str(info.value)


def test_a_cycle_of_dependencies_is_refused():
    reqs = [Request(0, 0.0, 10, 2, deps=(1,)), Request(1, 0.0, 10, 2, deps=(0,))]
    with pytest.raises(ValueError, match=r"requests\[0\] \(rid 0\): its deps form a cycle"):
        simkit.run(AGG, requests=reqs)


def test_a_chain_of_delays_beyond_the_clocks_limit_is_refused_as_in_a_trace():
    # 4 requests, each 4e8 s after the previous ends: the last is released at least 1.2e9 s in
    reqs = [Request(i, 0.0, 10, 2, deps=(i - 1,) if i else (), delay_s=4e8) for i in range(4)]
    with pytest.raises(ValueError, match=r"requests\[3\] \(rid 3\): the delays along the requests it waits for put "
                                         r"it at least 1.2e\+09 s after time zero; expected at most 1e9 s"):
        simkit.run(AGG, requests=reqs)


request_values = st.one_of(st.integers(-3, 3), st.floats(allow_nan=True, allow_infinity=True), st.none(),
                           st.booleans(), st.just(2 ** 40), st.tuples(st.integers(-2, 3)))


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(["rid", "arrived_at", "input_length", "output_length", "hash_ids", "hash_block_size",
                              "deps", "delay_s", "priority"]), value=request_values)
def test_any_request_the_api_accepts_runs_to_completion(field, value):
    reqs = [Request(0, 0.0, 20, 2), attrs.evolve(Request(1, 0.001, 20, 2), **{field: value})]
    try:
        records = simulate(scenario_from_dict(AGG), reqs)
    except ValueError as exc:
        assert str(exc).startswith("requests[")
        return
    if field == "arrived_at" and records.stop_reason == "time_limit":
        # accepted at the clock's very limit (1e9 s), its service lies beyond it: the run stops
        # there, as the README says of times that add up beyond it; nothing else may
        assert value > MAX_SIM_TIME_S - 1 and [r.status for r in records.requests] == ["completed", "incomplete"]
        return
    assert records.stop_reason == "completed"
    assert all(r.status in ("completed", "rejected") for r in records.requests)
    assert all(r.ttft_s is None or r.ttft_s > 0 for r in records.requests)


# ---------------------------------------------------------------- Python policies read afresh


POLICY = ("class R:\n    def __init__(self, params=None): pass\n"
          "    def pick(self, request, workers): return workers[{index}]\n")


def test_a_policy_module_is_read_from_its_own_folder_and_afresh_each_time(tmp_path):
    for folder, index in (("a", 0), ("b", -1)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "pol.py").write_text(POLICY.format(index=index))
    base = {"pools": {"aggregated": {"workers": 2}}, "workload": {"kind": "synthetic", "num_requests": 6}}

    def workers(folder):
        router = {"kind": "python", "path": "pol:R", "search_path": str(tmp_path / folder)}
        return set(simkit.run(dict(base, router=router)).requests.decode_worker)

    assert (workers("a"), workers("b"), workers("a")) == ({0}, {1}, {0})
    (tmp_path / "a" / "pol.py").write_text(POLICY.format(index=-1))  # edited in place (same size)
    assert workers("a") == {1}


def test_a_sweep_over_policy_folders_runs_each_folders_policy(tmp_path, capsys):
    from simkit.cli import main

    for folder, index in (("a", 0), ("b", -1)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "pol.py").write_text(POLICY.format(index=index))
    scen = tmp_path / "s.yaml"
    scen.write_text("pools: {aggregated: {workers: 2}}\nworkload: {kind: synthetic, num_requests: 6}\n"
                    "router: {kind: python, path: 'pol:R'}\n")
    out = tmp_path / "sw"
    assert main(["sweep", str(scen), "--grid", f"router.search_path={tmp_path}/a,{tmp_path}/b", "--out", str(out),
                 "--jobs", "1"]) == 0
    import pandas as pd

    used = [set(pd.read_parquet(out / f"run00{i}" / "requests.parquet").decode_worker) for i in (0, 1)]
    assert used == [{0}, {1}]


# ---------------------------------------------------------------- the threshold planner


def test_the_threshold_planner_never_starts_a_worker_while_one_is_starting(tmp_path):
    # four 100k-token prompts keep the pool busy; startups take 20 ticks. Before the fix every
    # tick added a worker (9 for 4 requests); now one at a time
    s = scenario_from_dict({
        "workload": {"kind": "synthetic", "num_requests": 4, "arrival": {"kind": "poisson", "rate_per_s": 100},
                     "input_tokens": {"kind": "fixed", "value": 100000},
                     "output_tokens": {"kind": "fixed", "value": 1000}},
        "pools": {"aggregated": {"workers": 1, "startup_time_s": 20}},
        "planner": {"kind": "threshold", "interval_s": 1}})
    records = simulate(s)
    assert records.stop_reason == "completed"
    assert max(c.starting for c in records.worker_counts) == 1
    assert max(c.starting + c.active for c in records.worker_counts) == 2
