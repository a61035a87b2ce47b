"""Workload semantics with exact outcomes: sessions, closed-loop concurrency, agentic
dependencies, and the Azure and CSV loaders."""

from __future__ import annotations

import json

import pytest

from simkit import override
from simkit.spec import TraceWorkload
from simkit.sim import simulate
from simkit.workload import TraceError, detect_format, load_trace

from conftest import P, D, scenario

ms = lambda x: pytest.approx(x, rel=1e-9)  # noqa: E731


def write(tmp_path, name, lines):
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def run_trace(path, max_in_flight=None, **kw):
    s = override(scenario(**kw), {"workload": {"kind": "trace", "path": path, "max_in_flight": max_in_flight}})
    return simulate(s).requests


def test_follow_up_turn_arrives_delay_after_its_predecessor_completes(tmp_path):
    path = write(tmp_path, "s.jsonl", [
        '{"timestamp": 0, "input_length": 1000, "output_length": 3, "hash_ids": [1, 2], "session_id": "a"}',
        '{"timestamp": 0, "input_length": 1500, "output_length": 2, "hash_ids": [1, 2, 3], "session_id": "a", "delay": 250}',
    ])
    t0, t1 = run_trace(path)
    # turn 0 alone: P(1000) + D(1001) + D(1002); turn 1 arrives 250 ms after that
    assert t0.e2e_s * 1000 == ms(P(1000) + D(1001) + D(1002))
    assert t1.arrived_at == pytest.approx(t0.finished_at + 0.250, rel=1e-12)
    # its first 960 tokens hit turn 0's cached blocks (15 full blocks): it computes 540
    assert t1.cached_tokens == 960 and t1.ttft_s * 1000 == ms(P(540))


def test_closed_loop_cap_of_one_session_queues_the_next_session(tmp_path):
    path = write(tmp_path, "c.jsonl", [
        '{"timestamp": 0, "input_length": 1000, "output_length": 2, "session_id": 1}',
        '{"timestamp": 5, "input_length": 1000, "output_length": 2, "session_id": 2}',
        '{"input_length": 500, "output_length": 2, "session_id": 1, "delay_ms": 100}',
    ])
    first, second, follow = run_trace(path, max_in_flight=1)
    # session 1: turn 0 at 0, its follow-up 100 ms after turn 0 ends; session 2 only when
    # session 1's last turn ends, think time included
    assert follow.arrived_at == pytest.approx(first.finished_at + 0.1, rel=1e-12)
    assert second.arrived_at == follow.finished_at
    # TTFT counts from dispatch: session 2 runs alone, so TTFT = P(1000) exactly
    assert second.ttft_s * 1000 == ms(P(1000))
    # without the cap, session 2 arrives at its own timestamp, 5 ms in
    open_loop = run_trace(path)
    assert open_loop[1].arrived_at == 0.005


def test_agentic_step_waits_for_all_its_dependencies_plus_delay(tmp_path):
    path = write(tmp_path, "a.jsonl", [
        '{"request_id": "plan", "session_id": "s", "input_length": 600, "max_output_tokens": 4}',
        '{"request_id": "tool1", "session_id": "s", "input_length": 300, "max_output_tokens": 40, "wait_for": ["plan"]}',
        '{"request_id": "tool2", "session_id": "s", "input_length": 300, "max_output_tokens": 2, "wait_for": ["plan"]}',
        '{"request_id": "merge", "session_id": "s", "input_length": 900, "max_output_tokens": 2,'
        ' "wait_for": ["tool1", "tool2"], "delay_after_dependencies_ms": 30, "prefix_reset": false}',
    ])
    plan, tool1, tool2, merge = run_trace(path, workers=2)
    assert tool1.arrived_at == tool2.arrived_at == plan.finished_at
    assert tool2.finished_at < tool1.finished_at
    assert merge.arrived_at == pytest.approx(tool1.finished_at + 0.030, rel=1e-12)


def test_agentic_errors_name_the_line(tmp_path):
    bad = {
        '{"request_id": 1, "input_length": 5, "max_output_tokens": 1, "wait_for": [2]}':
            ":1: wait_for names 2, which is not the request_id of an earlier line",
        '{"request_id": 1, "input_length": "5", "max_output_tokens": 1}':
            ":1: field 'input_length' is \"5\"; expected an integer from 1 to 2147483648",
        '{"request_id": 1, "input_length": 5, "max_output_tokens": 1, "delay_after_dependencies_ms": "x"}':
            ":1: field 'delay_after_dependencies_ms' is \"x\"; expected milliseconds from 0 to 1e12",
    }
    for line, message in bad.items():
        path = write(tmp_path, "bad.jsonl", [line])
        with pytest.raises(TraceError) as info:
            load_trace(TraceWorkload(path=path))
        assert str(info.value) == path + message


def test_azure_and_plain_csv(tmp_path):
    azure = write(tmp_path, "az.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens",
                                       "2023-11-16 23:59:59.5000000,374,44",
                                       "2023-11-17 00:00:00.2500000,396,1"])
    assert detect_format(azure) == "azure"
    a, b = load_trace(TraceWorkload(path=azure))
    assert (a.arrived_at, a.input_length, a.output_length, a.hash_ids) == (0.0, 374, 44, None)
    assert b.arrived_at == pytest.approx(0.75)  # across midnight
    plain = write(tmp_path, "p.csv", ["input_length,output_length,arrival_ms", "100,5,20", "200,0,10"])
    assert detect_format(plain) == "csv"
    reqs = load_trace(TraceWorkload(path=plain))
    assert [(r.rid, r.arrived_at, r.input_length, r.output_length) for r in reqs] == [(1, 0.0, 200, 0), (0, 0.01, 100, 5)]
    for lines, message in (
        (["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 25:00:00,1,1"], ":2: TIMESTAMP '2023-11-16 25:00:00'"),
        (["TIMESTAMP,ContextTokens,GeneratedTokens", "2023-11-16 10:00:00,x,1"], ":2: ContextTokens is \"x\"; expected an integer from 1 to 2147483648"),
        (["arrival_ms,input_length,output_length", "1,2"], ":2: 2 columns; expected 3"),
        (["arrival_ms,input_length", "1,2"], ":1: CSV header is 'arrival_ms,input_length'"),
        (["time,a,b"], ":1: cannot tell the trace format from the first line"),
    ):
        path = write(tmp_path, "bad.csv", lines)
        with pytest.raises(TraceError) as info:
            load_trace(TraceWorkload(path=path))
        assert str(info.value).startswith(path + message), str(info.value)


def test_sessions_in_a_real_shaped_trace_end_exactly_once(tmp_path):
    lines = []
    for s in range(6):
        lines.append(json.dumps({"timestamp": 10 * s, "input_length": 700 + s, "output_length": 5,
                                 "session_id": s, "hash_ids": [s * 10, s * 10 + 1]}))
        for turn in range(3):
            lines.append(json.dumps({"input_length": 1200 + 100 * turn, "output_length": 4, "session_id": s,
                                     "delay": 20, "hash_ids": [s * 10, s * 10 + 1, s * 10 + 2 + turn]}))
    path = write(tmp_path, "m.jsonl", lines)
    for cap in (None, 2):
        s = override(scenario(workers=2), {"workload": {"kind": "trace", "path": path, "max_in_flight": cap}})
        records = simulate(s, check=True)
        assert records.stop_reason == "completed"
        assert all(r.status == "completed" for r in records.requests)


def test_weka_sessions_chain_main_requests_and_wait_for_subagents(tmp_path):
    session = {"id": "trace_x", "block_size": 64, "requests": [
        {"t": 0.0, "type": "n", "in": 130, "out": 3, "hash_ids": [1, 2], "think_time": 0.0},
        {"type": "subagent", "t": 5.0, "agent_id": "a1", "requests": [
            {"t": 0.0, "in": 100, "out": 2, "hash_ids": [7], "think_time": 1.5},
            {"t": 3.0, "in": 200, "out": 2, "hash_ids": [7, 8, 9], "think_time": 0.5}]},
        {"t": 9.0, "type": "n", "in": 192, "out": 2, "hash_ids": [1, 2, 3], "think_time": 2.0},
    ]}
    path = write(tmp_path, "w.jsonl", [json.dumps(session), json.dumps(dict(session, id="trace_y"))])
    assert detect_format(path) == "weka"
    reqs = {r.rid: r for r in load_trace(TraceWorkload(path=path))}
    # within a session: main 0 -> subagent steps 1, 2 -> main 3, which also waits for main 0
    assert [reqs[i].deps for i in range(4)] == [(), (0,), (1,), (0, 2)]
    assert [reqs[i].delay_s for i in range(4)] == [0.0, 1.5, 0.5, 2.0]
    # hash ids are local to a session: the two copies share no prompt identity
    assert not set(reqs[0].hash_ids) & set(reqs[4].hash_ids)
    # 130 tokens with 2 ids of 64: the 2-token partial tail is accepted, without identity
    assert len(reqs[0].block_keys(64)) == 2
    recs = run_trace(path, workers=2)
    sub_end = recs[2].finished_at
    assert recs[3].arrived_at == pytest.approx(sub_end + 2.0, rel=1e-12)
    staggered = override(scenario(), {"workload": {"kind": "trace", "path": path, "format": "weka",
                                                   "sessions_per_s": 0.5}})
    recs = simulate(staggered).requests
    assert recs[4].arrived_at == 2.0  # the second session starts 1 / 0.5 s later


def test_weka_flat_requests_rebuild_prefixes_and_threads(tmp_path):
    rows = [
        {"session": "s1", "seq": 0, "agent": "main", "t": 0, "input_length": 256, "output_length": 2,
         "think_time": 0, "block_size": 64, "prefix_blocks_prev": 0},
        {"session": "s1", "seq": 1, "agent": "agent_001", "t": 4, "input_length": 128, "output_length": 2,
         "think_time": 1, "block_size": 64, "prefix_blocks_prev": 0},
        {"session": "s1", "seq": 2, "agent": "main", "t": 9, "input_length": 384, "output_length": 2,
         "think_time": 3, "block_size": 64, "prefix_blocks_prev": 4},
    ]
    path = write(tmp_path, "r.jsonl", [json.dumps(r) for r in rows])
    assert detect_format(path) == "weka_requests"
    r0, r1, r2 = sorted(load_trace(TraceWorkload(path=path)), key=lambda r: r.rid)
    assert r2.hash_ids[:4] == r0.hash_ids and len(r2.hash_ids) == 6
    assert (r1.deps, r1.delay_s, r2.deps, r2.delay_s) == ((0,), 1.0, (0,), 3.0)


def test_sessions_per_s_is_refused_for_formats_with_a_clock():
    from simkit import scenario_from_dict
    from simkit.spec import ConfigError

    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"pools": {"aggregated": {}}, "workload": {"kind": "trace", "path": "x.jsonl",
                                                                      "sessions_per_s": 1.0}}, "s.yaml")
    assert info.value.messages == ["s.yaml: 'sessions_per_s' applies to format weka or weka_requests "
                                   "(set format) @ $.workload"]
