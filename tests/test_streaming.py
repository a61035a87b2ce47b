"""Streaming replay: requests read as the run reaches them, records spooled to disk as they
end. A streamed run must give exactly the records of the same run held in memory, keep only
requests in flight, and refuse what a one-pass reader cannot follow with a clear error."""

from __future__ import annotations

import json

import pytest

from simkit.cli import main
from simkit import load_scenario, override
from simkit.output.report import summarize
from simkit.sim import build
from simkit.output.spool import RequestSpool
from simkit.workload import TraceError, stream_trace

from conftest import REPO

SESSIONS = str(REPO / "scenarios" / "synthetic_sessions.yaml")
DISAGG = str(REPO / "scenarios" / "disagg.yaml")


def runs(scenario, tmp_path):
    """The same scenario in memory, streamed into a list, and streamed into a spool."""
    plain = build(scenario).run()
    listed = build(scenario, stream=True).run()
    spool = RequestSpool(str(tmp_path / "spool.parquet"), batch_rows=64)
    spooled = build(scenario, stream=True, sink=spool).run()
    return plain, listed, spooled


@pytest.mark.parametrize("path, changes", [
    (SESSIONS, {"workload.num_requests": 300}),  # sessions: dependents, think time, shared prefixes
    (DISAGG, {"workload.num_requests": 300}),  # the handoff link and two pools
    (SESSIONS, {"workload.num_requests": 300, "max_sim_time_s": 40.0}),  # cut: incomplete, not arrived
])
def test_streamed_records_equal_the_in_memory_records(tmp_path, path, changes):
    s = override(load_scenario(path), changes)
    plain, listed, spooled = runs(s, tmp_path)
    assert listed.requests == plain.requests  # a list sink is ordered by id
    assert sorted(spooled.requests, key=lambda r: r.rid) == list(plain.requests)
    assert summarize(spooled, s.sla) == summarize(plain, s.sla)
    if "max_sim_time_s" in changes:
        statuses = {r.status for r in plain.requests}
        assert statuses == {"completed", "incomplete"}
        assert any(r.arrived_at is None for r in plain.requests)  # not-arrived records too
        assert plain.stop_reason == "time_cap"


def test_a_stream_keeps_only_requests_in_flight():
    # 2,000 requests in sessions starting at 2 per second: requests are read as their sessions
    # start and dropped as they end, so at most a few hundred are held (reading the whole
    # workload ahead would hold all 2,000)
    s = override(load_scenario(SESSIONS), {"workload.num_requests": 2000})
    sim = build(s, stream=True, sink=_Null())
    peak = [0]
    sim.collector.listeners.append(lambda rid, at, status: peak.__setitem__(
        0, max(peak[0], len(sim.source.live), len(sim.collector.live))))
    records = sim.run()
    assert records.stop_reason == "completed" and sim.collector.ended_count == 2000
    assert 10 < peak[0] < 400
    assert not sim.source.live and not sim.collector.live


class _Null:
    def append(self, record):
        pass

    def close(self):
        pass


def write(tmp_path, lines):
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def spec(path):
    return override(load_scenario(DISAGG), {"workload": {"kind": "trace", "path": path}}).workload


def test_a_trace_out_of_time_order_cannot_stream(tmp_path):
    path = write(tmp_path, ['{"timestamp": 10, "input_length": 5, "output_length": 1}',
                            '{"timestamp": 5, "input_length": 5, "output_length": 1}'])
    with pytest.raises(TraceError, match=r"t.jsonl:2: timestamp 5 is earlier than the previous line's 10"):
        list(stream_trace(spec(path)))


def test_a_follow_up_turn_cannot_stream(tmp_path):
    path = write(tmp_path, ['{"timestamp": 0, "input_length": 5, "output_length": 1, "session_id": 1}',
                            '{"input_length": 9, "output_length": 1, "session_id": 1, "delay": 5}'])
    with pytest.raises(TraceError, match=r"t.jsonl:2: a request that waits for others"):
        list(stream_trace(spec(path)))


def test_cli_stream_writes_the_same_rows_and_refuses_bad_input(tmp_path, capsys):
    plain, streamed = tmp_path / "plain", tmp_path / "streamed"
    args = [DISAGG, "--quiet", "--no-plots", "--set", "workload.num_requests=200"]
    assert main(args + ["--out", str(plain)]) == 0
    assert main(args + ["--out", str(streamed), "--stream"]) == 0
    rows = lambda d: sorted((d / "requests.jsonl").read_text().splitlines())  # noqa: E731
    assert rows(plain) == rows(streamed)
    a, b = (json.loads((d / "summary.json").read_text()) for d in (plain, streamed))
    a.pop("run_digest"), b.pop("run_digest")  # rows in completion order: another digest
    assert a == b
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".simkit")]  # spool removed
    # a trace line that breaks streaming mid-run: exit 2, one line, nothing written
    bad = write(tmp_path, ['{"timestamp": 9, "input_length": 5, "output_length": 1}'] * 3
                + ['{"timestamp": 1, "input_length": 5, "output_length": 1}'])
    capsys.readouterr()
    out = tmp_path / "bad"
    assert main([DISAGG, "--trace", bad, "--stream", "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "t.jsonl:4: timestamp 1 is earlier" in err[0]
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".simkit")]
    closed = str(REPO / "scenarios" / "closed_loop.yaml")
    assert main([closed, "--stream", "--out", str(tmp_path / "c"), "--quiet"]) == 2
    assert "--stream cannot replay a closed loop" in capsys.readouterr().err


def test_a_trace_changed_while_a_stream_reads_it_is_named_and_nothing_written(tmp_path, monkeypatch, capsys):
    # --stream reads the trace as the run goes: a file edited meanwhile gave records of both
    # versions, exit 0, and the old file's SHA-256 under inputs. Now: exit 1, nothing written.
    from simkit.sim import Simulation

    lines = [f'{{"timestamp": {i * 100}, "input_length": 50, "output_length": 3}}' for i in range(50)]
    path = write(tmp_path, lines)
    original = Simulation.run

    def edit_then_run(self, *a, **k):
        with open(path, "a") as f:
            f.write('{"timestamp": 99999, "input_length": 50, "output_length": 3}\n')
        return original(self, *a, **k)

    monkeypatch.setattr(Simulation, "run", edit_then_run)
    out = tmp_path / "o"
    assert main([DISAGG, "--trace", path, "--stream", "--out", str(out), "--quiet", "--no-plots"]) == 1
    err = capsys.readouterr().err
    assert f"{path} (SHA-256 " in err and "changed while the run read it" in err and "nothing written" in err
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".simkit")]
