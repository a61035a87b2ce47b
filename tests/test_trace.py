"""Mooncake loader and synthetic generator."""

from __future__ import annotations

import pytest

from simkit import scenario_from_dict
from simkit.spec import SyntheticWorkload, TraceWorkload
from simkit.workload import TraceError, load_trace, synthesize


def load(tmp_path, text: str, **kw):
    path = tmp_path / "t.jsonl"
    path.write_bytes(text.encode("utf-8") if isinstance(text, str) else text)
    return load_trace(TraceWorkload(path=str(path), **kw)), str(path)


def test_loads_sorts_stably_and_rebases_time(tmp_path):
    text = ('\ufeff{"timestamp": 2000, "input_length": 10, "output_length": 2, "hash_ids": [1]}\r\n'
            "\r\n"
            '{"timestamp": 1000, "input_length": 600, "output_length": 1, "hash_ids": [1, 2, 9]}\r\n'
            '{"timestamp": 1000, "input_length": 5, "output_length": 0}\n')
    reqs, _ = load(tmp_path, text, arrival_speedup_ratio=2.0)
    assert [(r.rid, r.arrived_at) for r in reqs] == [(1, 0.0), (2, 0.0), (0, 0.5)]
    assert reqs[0].hash_ids == (1, 2)  # surplus ids beyond ceil(600 / 512) are ignored
    assert reqs[1].hash_ids is None


@pytest.mark.parametrize("line, message", [
    ('{"timestamp": 0, "input_length": 10', "not valid JSON"),
    ("[1, 2]", "found a JSON array; expected an object"),
    ('{"input_length": 10, "output_length": 1}', "missing field 'timestamp'"),
    ('{"timestamp": 0, "output_length": 1}', "missing field 'input_length'"),
    ('{"timestamp": 0, "input_length": "10", "output_length": 1}', "field 'input_length' is \"10\""),
    ('{"timestamp": 0, "input_length": true, "output_length": 1}', "field 'input_length' is true"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1}', "field 'input_length' is 0; expected an integer from 1 to 2147483648"),
    ('{"timestamp": 0, "input_length": 5, "output_length": -1}', "field 'output_length' is -1"),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 1}', "field 'timestamp' is NaN"),
    ('{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1]}',
     "input_length 600 is larger than its hash_ids cover (1 ids * trace_block_size 512 = 512 tokens)"),
])
def test_a_bad_line_names_file_and_line(tmp_path, line, message):
    good = '{"timestamp": 0, "input_length": 5, "output_length": 1}\n'
    with pytest.raises(TraceError) as info:
        load(tmp_path, good + "\n" + line + "\n")
    path = str(tmp_path / "t.jsonl")
    assert str(info.value).startswith(f"{path}:3: ")
    assert message in str(info.value)


def test_empty_missing_and_directory(tmp_path):
    with pytest.raises(TraceError, match="has no requests"):
        load(tmp_path, "\n\n")
    with pytest.raises(TraceError, match="cannot read trace"):
        load_trace(TraceWorkload(path=str(tmp_path / "absent.jsonl")))
    with pytest.raises(TraceError, match="is a directory"):
        load_trace(TraceWorkload(path=str(tmp_path)))


def test_synthetic_is_seeded_and_shares_prefixes():
    spec = scenario_from_dict({"pools": {"aggregated": {}}, "workload": {
        "kind": "synthetic", "num_requests": 200, "shared_prefix": {"num_groups": 2, "prefix_tokens": 64},
        "input_tokens": {"kind": "uniform", "low": 100, "high": 200}}}).workload
    a, b = synthesize(spec, 1), synthesize(spec, 1)
    assert a == b and synthesize(spec, 2) != a
    assert a[0].arrived_at == 0.0 and all(x.arrived_at <= y.arrived_at for x, y in zip(a, a[1:]))
    firsts = {r.hash_ids[:4] for r in a}  # 64 prefix tokens = 4 blocks of 16
    assert len(firsts) == 2
    assert all(100 <= r.input_length <= 200 for r in a)
    assert isinstance(spec, SyntheticWorkload)


def test_huge_numbers_are_refused_not_crashed(tmp_path):
    with pytest.raises(TraceError, match="expected milliseconds from 0 to 1e15"):
        load(tmp_path, '{"timestamp": 1' + "0" * 400 + ', "input_length": 5, "output_length": 1}\n')
    with pytest.raises(TraceError, match="found a JSON null"):
        load(tmp_path, "null\n")


def workload(**kw):
    return scenario_from_dict({"pools": {"aggregated": {}}, "workload": dict({"kind": "synthetic"}, **kw)}).workload


def gaps(reqs):
    return [b.arrived_at - a.arrived_at for a, b in zip(reqs, reqs[1:])]


def test_arrival_processes():
    const = synthesize(workload(num_requests=5, arrival={"kind": "constant", "rate_per_s": 4.0}), 0)
    assert [r.arrived_at for r in const] == [0.0, 0.25, 0.5, 0.75, 1.0]
    import statistics

    for cv in (0.5, 3.0):  # gamma: the gaps' coefficient of variation follows cv (20,000 draws)
        g = gaps(synthesize(workload(num_requests=20000, arrival={"kind": "gamma", "rate_per_s": 10.0, "cv": cv}), 1))
        assert statistics.mean(g) == pytest.approx(0.1, rel=0.05)
        assert statistics.stdev(g) / statistics.mean(g) == pytest.approx(cv, rel=0.1)
    # piecewise: 10 s at 5/s, then 10 s with no arrivals, repeating
    pw = synthesize(workload(num_requests=300, arrival={"kind": "piecewise", "segments": [
        {"duration_s": 10, "rate_per_s": 5}, {"duration_s": 10, "rate_per_s": 0}]}), 2)
    assert all(r.arrived_at % 20 <= 10 for r in pw)
    assert pw[-1].arrived_at > 40
    # diurnal: the busy half of the period gets about 3x the quiet half's arrivals (amplitude 0.8)
    di = synthesize(workload(num_requests=20000, arrival={"kind": "diurnal", "mean_rate_per_s": 2.0,
                                                          "amplitude": 0.8, "period_s": 100.0}), 3)
    busy = sum(1 for r in di if (r.arrived_at % 100) < 50)
    assert busy / (len(di) - busy) == pytest.approx((1 + 0.8 * 2 / 3.14159) / (1 - 0.8 * 2 / 3.14159), rel=0.1)


def test_length_distributions(tmp_path):
    normal = synthesize(workload(num_requests=2000, input_tokens={"kind": "normal", "mean": 500, "std": 300,
                                                                  "min": 100, "max": 800}), 0)
    assert min(r.input_length for r in normal) == 100 and max(r.input_length for r in normal) == 800
    zipf = synthesize(workload(num_requests=5000, input_tokens={"kind": "zipf", "alpha": 2.0, "min": 10, "max": 5000}), 0)
    lengths = sorted(r.input_length for r in zipf)
    assert lengths[0] == 10 and lengths[-1] <= 5000
    assert sum(1 for n in lengths if n == 10) / len(lengths) == pytest.approx(1 / 1.6449, rel=0.05)  # 1/zeta(2)
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_ms,input_length,output_length\n0,111,7\n5,222,9\n")
    emp = synthesize(workload(num_requests=200, input_tokens={"kind": "empirical", "path": str(trace)},
                              output_tokens={"kind": "empirical", "path": str(trace), "field": "output"}), 0)
    assert {r.input_length for r in emp} == {111, 222} and {r.output_length for r in emp} == {7, 9}


def test_synthetic_sessions_chain_turns_with_think_time_and_growing_prompts():
    reqs = synthesize(workload(num_requests=40, trace_block_size=16,
                               input_tokens={"kind": "fixed", "value": 100}, output_tokens={"kind": "fixed", "value": 5},
                               sessions={"turns": {"kind": "fixed", "value": 4}, "think_time_s": 2.0}), 0)
    assert len(reqs) == 40 and len({r.session for r in reqs}) == 10
    first, second = reqs[0], reqs[1]
    assert (first.deps, second.deps, second.session) == ((), (0,), first.session)
    assert second.delay_s > 0 and second.input_length == 200
    # the history's 6 full 16-token blocks keep their identity in the next turn
    assert second.hash_ids[:6] == first.hash_ids[:6] and second.hash_ids[6] != first.hash_ids[6]


#: one valid first line per trace format, then a line that is not UTF-8
FIRST_LINES = {
    "mooncake": '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]}',
    "agentic": '{"request_id": "a", "input_length": 10, "max_output_tokens": 5}',
    "weka": '{"id": "s", "block_size": 64, "requests": [{"in": 10, "out": 5}]}',
    "weka_requests": '{"session": "s", "seq": 0, "agent": "main", "t": 0, "input_length": 10, "output_length": 5, '
                     '"prefix_blocks_prev": 0}',
    "csv": "arrival_ms,input_length,output_length\n0,10,5",
    "azure": "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,10,5",
}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("fmt", [*FIRST_LINES, "auto"])
def test_a_line_that_is_not_utf8_is_named_in_every_format(tmp_path, fmt, stream):
    # found by a hostile tester: "not UTF-8 text (invalid start byte)" named no line (the strict
    # decoder fails on a whole buffered chunk)
    from simkit.workload import stream_trace

    first = FIRST_LINES["mooncake" if fmt == "auto" else fmt]
    n = first.count("\n") + 2
    path = tmp_path / "t.jsonl"
    path.write_bytes(first.encode() + b"\n\xff\xfe\n")
    spec = TraceWorkload(path=str(path), format=fmt)
    with pytest.raises(TraceError) as info:
        list(stream_trace(spec)) if stream else load_trace(spec)
    assert str(info.value) == f"{path}:{n}: not UTF-8 text (invalid start byte); expected a text trace"


def test_a_bad_byte_far_into_the_file_is_named_on_its_own_line(tmp_path):
    line = '{"timestamp": 0, "input_length": 10, "output_length": 5, "session_id": "caf\u00e9"}\n'
    body = (line * 499).encode() + b'{"timestamp": 0, "input_length": 10, "output_length": 5, "session_id": "\xc3"}\n'
    path = tmp_path / "t.jsonl"
    path.write_bytes(body)  # 40 KB: several of the decoder's chunks; UTF-8 text (é) before it is fine
    with pytest.raises(TraceError) as info:
        load_trace(TraceWorkload(path=str(path)))
    assert str(info.value) == f"{path}:500: not UTF-8 text (invalid continuation byte); expected a text trace"
    path.write_bytes((line * 499).encode())
    assert len(load_trace(TraceWorkload(path=str(path)))) == 499


@pytest.mark.parametrize("fmt, text, key", [
    ("mooncake", '{"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1], "timestamp": 9999}',
     "timestamp"),
    ("agentic", '{"request_id": "a", "input_length": 10, "max_output_tokens": 5, "request_id": "b"}', "request_id"),
    ("weka", '{"id": "s", "block_size": 64, "requests": [{"in": 10, "out": 5}], "block_size": 1}', "block_size"),
    ("weka", '{"id": "s", "block_size": 64, "requests": [{"in": 10, "out": 5, "out": 500}]}', "out"),  # nested
    ("weka_requests", '{"session": "s", "seq": 0, "agent": "main", "t": 0, "input_length": 10, '
                      '"output_length": 5, "t": 7}', "t"),
])
@pytest.mark.parametrize("stream", [False, True])
def test_a_key_given_twice_in_a_json_line_is_refused(tmp_path, fmt, text, key, stream):
    # found by a hostile tester: the mooncake line above arrived at 9999 ms (JSON's last value wins)
    from simkit.workload import stream_trace

    path = tmp_path / "t.jsonl"
    path.write_text(FIRST_LINES[fmt] + "\n" + text + "\n")
    spec = TraceWorkload(path=str(path), format=fmt)
    with pytest.raises(TraceError) as info:
        list(stream_trace(spec)) if stream else load_trace(spec)
    assert str(info.value) == (f'{path}:2: key "{key}" appears twice in one object; expected each field once '
                               "(JSON readers keep the last value silently)")
    path.write_text(text + "\n")  # detected from the first line, then refused
    with pytest.raises(TraceError, match=rf'^{path}:1: key "{key}" appears twice'):
        load_trace(TraceWorkload(path=str(path)))


def test_equal_keys_in_different_objects_of_a_line_are_fine(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"id": "s", "block_size": 64, "requests": [{"in": 10, "out": 5}, {"in": 20, "out": 6}]}\n')
    reqs = load_trace(TraceWorkload(path=str(path), format="weka"))
    assert [(r.input_length, r.output_length) for r in reqs] == [(10, 5), (20, 6)]
