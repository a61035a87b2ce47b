"""Mooncake loader and synthetic generator."""

from __future__ import annotations

import pytest

from simkit.config import SyntheticWorkload, TraceWorkload, scenario_from_dict
from simkit.trace import TraceError, load_trace, synthesize


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
    ('{"timestamp": 0, "input_length": "10", "output_length": 1}', "field 'input_length' is '10'"),
    ('{"timestamp": 0, "input_length": true, "output_length": 1}', "field 'input_length' is True"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 1}', "field 'input_length' is 0; expected an integer >= 1"),
    ('{"timestamp": 0, "input_length": 5, "output_length": -1}', "field 'output_length' is -1"),
    ('{"timestamp": NaN, "input_length": 5, "output_length": 1}', "field 'timestamp' is nan"),
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
    with pytest.raises(TraceError, match="expected finite milliseconds"):
        load(tmp_path, '{"timestamp": 1' + "0" * 400 + ', "input_length": 5, "output_length": 1}\n')
    with pytest.raises(TraceError, match="found a JSON null"):
        load(tmp_path, "null\n")
