"""Every field of every trace format, drawn hostile (issue 18): a trace line either loads into
requests that obey the simulator's rules or is refused with one ``FILE:LINE: reason`` line. Never
a traceback, a hang, a silently dropped field or an impossible request."""

from __future__ import annotations

import json
import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simkit.core.units import MAX_SIM_TIME_S
from simkit.spec import TraceWorkload
from simkit.workload import TraceError, load_trace

#: a valid two-line trace per JSONL format; the second line is the one drawn hostile
JSONL = {
    "mooncake": [{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [1], "session_id": "s"},
                 {"timestamp": 10, "input_length": 100, "output_length": 3, "hash_ids": [1], "session_id": "s",
                  "delay": 5, "delay_ms": 5, "priority": 2}],
    "agentic": [{"request_id": "a", "session_id": "s", "input_length": 100, "max_output_tokens": 3,
                 "first_ready_timestamp_ms": 0},
                {"request_id": "b", "session_id": "s", "input_length": 100, "max_output_tokens": 3, "hash_ids": [1],
                 "wait_for": ["a"], "delay_after_dependencies_ms": 5, "first_ready_timestamp_ms": 3, "priority": 1,
                 "prefix_reset": False, "output_length": 4}],
    "weka": [{"id": "s0", "block_size": 64, "requests": [{"in": 100, "out": 3}]},
             {"id": "s1", "block_size": 64, "requests": [{"t": 0, "in": 100, "out": 3, "hash_ids": [1, 2],
                                                          "think_time": 0.5},
                                                         {"type": "subagent", "requests": [{"in": 50, "out": 2}]}]}],
    "weka_requests": [{"session": "s", "seq": 0, "agent": "main", "t": 0.0, "input_length": 100,
                       "output_length": 3, "think_time": 0.0, "block_size": 64, "prefix_blocks_prev": 0},
                      {"session": "s", "seq": 1, "agent": "main", "t": 1.0, "input_length": 200,
                       "output_length": 3, "think_time": 0.5, "block_size": 64, "prefix_blocks_prev": 1}],
}
CSV = {"csv": ["arrival_ms", "input_length", "output_length"],
       "azure": ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]}
CSV_ROWS = {"csv": ["0", "100", "3"], "azure": ["2023-11-16 18:15:46.1", "100", "3"]}

json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2, 2 ** 64), st.floats(allow_nan=False, allow_infinity=False),
              st.sampled_from([0, 1, -1, 2 ** 31, 2 ** 31 + 1, 2 ** 40, 1e9, 1e12, 1e15, 1e16, 0.5, 1e-300]),
              st.text(max_size=6), st.sampled_from(["\u00b2", "\u0663", "1e5", "NaN", "a", "s0"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=2)),
    max_leaves=6)
raw_numbers = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "-0", "1" + "0" * 400])
cells = st.one_of(st.text(max_size=8), st.sampled_from(["", " ", "\u00b2", "nan", "inf", "-1", "1e300", "0x10", "5.0",
                                                        "2023-11-16 25:61:00", "9999-12-31 23:59:59", "2147483649"]))


def _fields(obj) -> list:
    """Dotted paths of an object's fields (weka requests included)."""
    out = []
    for key, value in obj.items():
        out.append((key,))
        if key == "requests":
            for i, req in enumerate(value):
                out += [("requests", i, k) for k in req]
    return out


def _set(obj, path, value, remove):
    node = obj
    for key in path[:-1]:
        node = node[key]
    if remove:
        node.pop(path[-1], None)
    else:
        node[path[-1]] = value


def _check(path: str, spec: TraceWorkload) -> None:
    try:
        requests = load_trace(spec)
    except TraceError as exc:
        message = str(exc)
        assert message.startswith(path) and "\n" not in message and "Traceback" not in message, message
        return
    rids = sorted(r.rid for r in requests)
    assert rids == list(range(len(requests)))
    for r in requests:
        assert 1 <= r.input_length <= 2 ** 31 and 0 <= r.output_length <= 2 ** 31
        assert 0 <= r.arrived_at <= MAX_SIM_TIME_S and 0 <= r.delay_s <= MAX_SIM_TIME_S
        assert math.isfinite(r.priority) and r.priority > 0
        assert all(0 <= d < len(requests) and d != r.rid for d in r.deps)
        assert r.hash_ids is None or all(isinstance(h, int) for h in r.hash_ids)
        r.block_keys(16)  # bounded by the prompt, whatever the block sizes


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data(), fmt=st.sampled_from(sorted(JSONL)), remove=st.booleans(), raw=st.booleans(),
       auto=st.booleans())
def test_every_jsonl_field_hostile_loads_right_or_is_one_line(tmp_path_factory, data, fmt, remove, raw, auto):
    lines = json.loads(json.dumps(JSONL[fmt]))
    line = data.draw(st.sampled_from([0, 1]))
    field = data.draw(st.sampled_from(_fields(lines[line])))
    value = data.draw(json_values)
    _set(lines[line], field, value, remove)
    texts = [json.dumps(obj) for obj in lines]
    if raw and not remove:  # a number JSON allows only as text (NaN, 1e999) put in the field's place
        texts[line] = texts[line].replace(json.dumps(value), data.draw(raw_numbers), 1) \
            if json.dumps(value) in texts[line] else texts[line]
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_text("\n".join(texts) + "\n")
    _check(str(path), TraceWorkload(path=str(path), format="auto" if auto else fmt))


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(fmt=st.sampled_from(sorted(CSV)), column=st.integers(0, 2), cell=cells, auto=st.booleans())
def test_every_csv_cell_hostile_loads_right_or_is_one_line(tmp_path_factory, fmt, column, cell, auto):
    row = list(CSV_ROWS[fmt])
    row[column] = cell.replace(",", ";").replace("\n", " ").replace("\r", " ")
    path = tmp_path_factory.mktemp("t") / "t.csv"
    path.write_text(",".join(CSV[fmt]) + "\n" + ",".join(CSV_ROWS[fmt]) + "\n" + ",".join(row) + "\n")
    _check(str(path), TraceWorkload(path=str(path), format="auto" if auto else fmt))
