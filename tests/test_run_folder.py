"""Reading a run folder back (``simkit.load_result``, ``python -m simkit compare``): every file
it reads, when damaged, is named in one line, with the line where the damage is."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

import simkit
from simkit.cli import main

from conftest import REPO, one_line

N = 6  # requests of the run, so requests.jsonl has 6 lines


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    run = tmp_path_factory.mktemp("base") / "run"
    assert main([str(REPO / "scenarios" / "agg.yaml"), "--set", f"workload.num_requests={N}", "--out", str(run),
                 "--quiet", "--no-plots"]) == 0
    return run


@pytest.fixture
def run(finished, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(finished, copy)
    return copy


def _jsonl_only(run):
    (run / "requests.parquet").unlink()
    return run / "requests.jsonl"


def test_the_jsonl_rows_load_as_the_parquet_rows(run):
    with_parquet = simkit.load_result(str(run))
    _jsonl_only(run)
    from_jsonl = simkit.load_result(str(run))
    assert len(from_jsonl.requests) == N
    # typed as requests.parquet (nullable int64 ids and workers, float64 times, string status)
    pd.testing.assert_frame_equal(from_jsonl.requests, with_parquet.requests)


def _lines(path, change):
    rows = path.read_text().splitlines()
    change(rows)
    path.write_text("\n".join(rows) + "\n")


def _row(rows, i, **fields):
    rows[i] = json.dumps(dict(json.loads(rows[i]), **fields))


def _drop(rows, i, name):
    row = json.loads(rows[i])
    del row[name]
    rows[i] = json.dumps(row)


@pytest.mark.parametrize("change, line, message", [
    (lambda rows: rows.append("garbage"), N + 1,
     "not a JSON object (Expecting value, column 1); expected one request row per line"),
    (lambda rows: rows.__setitem__(2, rows[2][:-1]), 3,
     "not a JSON object (Expecting ',' delimiter, column"),
    (lambda rows: rows.append("[1, 2]"), N + 1, "found a JSON array; expected a request row object"),
    (lambda rows: _drop(rows, 1, "arrival_ms"), 2,
     "lacks field 'arrival_ms', unlike line 1; expected the same fields on every line"),
    (lambda rows: _row(rows, 4, extra=1), 5, "has field 'extra', unlike line 1"),
    (lambda rows: _row(rows, 3, status=5), 4, "a value does not fit its column"),
    (lambda rows: _row(rows, 5, ttft_ms="fast"), 6, "a value does not fit its column"),
])
def test_a_damaged_requests_jsonl_is_named_with_its_line(run, capsys, change, line, message):
    path = _jsonl_only(run)
    _lines(path, change)
    assert main(["compare", str(run)]) == 2
    assert one_line(capsys).startswith(f"{run}: cannot read the run: {path}:{line}: {message}")
    with pytest.raises(ValueError, match=rf"^{path}:{line}: "):
        simkit.load_result(str(run))


@pytest.mark.parametrize("name", ["summary.json", "scenario.resolved.yaml", "requests.jsonl"])
def test_a_file_of_the_run_that_is_not_utf8_is_named_with_its_line(run, capsys, name):
    if name == "requests.jsonl":
        _jsonl_only(run)
    path = run / name
    text = path.read_bytes()
    cut = text.index(b"\n", text.index(b"\n") + 1) + 1  # after line 2
    path.write_bytes(text[:cut] + b"\xff\xfe" + text[cut:])
    assert main(["compare", str(run)]) == 2
    assert one_line(capsys) == (f"{run}: cannot read the run: {path}:3: not UTF-8 text (invalid start byte); "
                                "expected a file simkit wrote")


def test_a_corrupt_parquet_file_is_named(run, capsys):
    (run / "requests.parquet").write_bytes(b"PAR1 not really")
    assert main(["compare", str(run)]) == 2
    assert one_line(capsys).startswith(f"{run}: cannot read the run: {run / 'requests.parquet'}: not a Parquet "
                                       "table (")
