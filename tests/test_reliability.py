"""Liveness guard, --check mode, Ctrl-C, time caps, max_model_len and run digests."""

from __future__ import annotations

import json

import pytest

from simkit import override
from simkit.cli import main
from simkit.engine.scheduler import VllmScheduler
from simkit.sim import build, simulate

from conftest import REPO, interrupt_at_pass, req, scenario

SMALL = ["--set", "workload.num_requests=40"]


def test_a_worker_that_stalls_is_stopped_with_a_diagnostic(monkeypatch):
    # a scheduler whose passes never produce anything: the guard fires instead of hanging
    monkeypatch.setattr(VllmScheduler, "complete", lambda self, batch: ([], [], []))
    records = simulate(scenario(), [req(0, 0, 100, 5)])
    assert records.stop_reason == "stuck"
    # the guard allows STALL_PASSES (10,000) + twice the passes the remaining prompt needs
    # (100 tokens, one pass: the no-op complete never advances it): it fires at pass 10,003
    assert records.stop_detail.startswith("worker aggregated/0 ran 10003 passes without producing")
    assert "1 running [0]" in records.stop_detail
    assert records.requests[0].status == "incomplete"


def test_nothing_left_to_happen_while_requests_wait_is_diagnosed(monkeypatch):
    # a scheduler that never admits: the request waits and no event is left
    monkeypatch.setattr(VllmScheduler, "_admit", lambda self, batch, budget: None)
    records = simulate(scenario(), [req(0, 0, 100, 5), req(1, 5, 100, 5)])
    assert records.stop_reason == "stuck"
    assert records.stop_detail == (
        "no event left at t=0.005000 s with 2 released request(s) not ended; aggregated/0: 2 waiting [0, 1], "
        "0 running [], 0 held for handoff; KV 0 of 16384 blocks in use, 16384 free")
    assert [r.status for r in records.requests] == ["incomplete", "incomplete"]


def test_check_mode_catches_a_leaked_block_with_its_time(monkeypatch):
    original = VllmScheduler.complete

    def leaky(self, batch):
        out = original(self, batch)
        self.kv.free_anon -= 1  # a block vanishes: free + cached + used != capacity
        return out

    monkeypatch.setattr(VllmScheduler, "complete", leaky)
    records = simulate(scenario(), [req(0, 0, 1000, 3)], check=True)
    assert records.stop_reason == "check_failed"
    # the first pass ends at P(1000) = 32.1058589 ms; the leak is seen when that instant settles
    assert records.stop_detail.startswith("at t=0.032106 s, worker aggregated/0: KV blocks not conserved")


def test_check_mode_passes_and_changes_nothing_on_every_shipped_scenario():
    from simkit import load_scenario, override

    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        s = load_scenario(str(path))
        if s.workload.kind == "synthetic":
            s = override(s, {"workload.num_requests": 400})
        checked = simulate(s, check=True)
        assert checked.stop_reason == "completed", (path.name, checked.stop_detail)
        assert checked == simulate(s)


def test_time_cap_leaves_requests_incomplete():
    s = scenario()
    from simkit import override

    s = override(s, {"max_sim_time_s": 0.05})
    records = simulate(s, [req(0, 0, 1000, 50), req(1, 100, 100, 2)])
    assert records.stop_reason == "time_cap" and records.end_at == 0.05
    r0, r1 = records.requests
    assert r0.status == "incomplete" and 0 < r0.output_length < 50
    assert r1.status == "incomplete" and r1.first_admitted_at is None


def test_max_model_len_cuts_the_output_or_rejects_and_counts():
    # as the reference (measured, max_model_len 1000): 990 + 11 is cut to 10 tokens, 990 + 10
    # fits, a 1000-token prompt is rejected (no room for a token), 999 + 5 is cut to 1 token
    reqs = [req(0, 0, 990, 11), req(1, 0, 990, 10), req(2, 0, 1000, 5), req(3, 0, 999, 5)]
    recs = simulate(scenario(max_model_len=1000), reqs).requests
    assert [(r.status, r.output_length, r.requested_output_length) for r in recs] == [
        ("completed", 10, 11), ("completed", 10, 10), ("rejected", 0, 5), ("completed", 1, 5)]
    # max_model_len_action: reject (vLLM's OpenAI server answers 400) rejects every long request
    recs = simulate(scenario(max_model_len=1000, max_model_len_action="reject"), reqs).requests
    assert [r.status for r in recs] == ["rejected", "completed", "rejected", "rejected"]


def test_ctrl_c_writes_partial_results_marked_incomplete(tmp_path, monkeypatch, capsys):
    interrupt_at_pass(monkeypatch, 50)
    out = tmp_path / "o"
    # a scenario priced by the polynomial model (interrupted from inside it)
    assert main(["scenarios/reference_agg.yaml", "--out", str(out), "--no-plots", "--quiet", *SMALL]) == 130
    assert "run stopped (interrupted)" in capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["stop"]["reason"] == "interrupted" and summary["stop"]["incomplete"] is True
    assert summary["requests"]["incomplete"] > 0


def test_run_digest_is_equal_for_equal_runs_and_differs_otherwise(tmp_path):
    digests = []
    for i, seed in enumerate((1, 1, 2)):
        out = tmp_path / f"r{i}"
        assert main(["scenarios/agg.yaml", "--out", str(out), "--no-plots", "--quiet", "--seed",
                     str(seed), *SMALL]) == 0
        digests.append(json.loads((out / "summary.json").read_text())["run_digest"])
    assert digests[0] == digests[1] != digests[2]


def test_cli_check_flag_runs_clean(tmp_path):
    out = tmp_path / "o"
    assert main(["scenarios/disagg.yaml", "--check", "--out", str(out), "--no-plots", "--quiet", *SMALL]) == 0
    assert json.loads((out / "summary.json").read_text())["stop"]["reason"] == "completed"


def test_build_accepts_per_pass_stepping_with_identical_results():
    s = scenario(mode="disaggregated")
    reqs = [req(i, 3 * i, 500 + 100 * i, 20) for i in range(6)]
    assert build(s, reqs, fast_forward=False).run() == build(s, reqs).run()


@pytest.mark.parametrize("bad", ["--set", "--out"])
def test_argument_errors_are_one_line_exit_2(capsys, bad):
    with pytest.raises(SystemExit) as info:
        main(["scenarios/agg.yaml", bad])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("simkit: ")


def test_yaml_alias_bomb_is_refused_quickly(tmp_path):
    from simkit import load_scenario
    from simkit.spec import ConfigError

    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(lines) + "\npools: {aggregated: {}}\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(str(path))
    assert info.value.messages == [f"{path}: the scenario expands to more than 1,000,000 values "
                                   "(aliases of aliases?) @ $"]


@pytest.mark.parametrize("key, value, message", [
    ("workload.input_tokens", {"kind": "lognormal", "mean": 1e308}, "'mean' must be <= 2147483648"),
    ("workload.input_tokens", {"kind": "lognormal", "sigma": 1e200}, "'sigma' must be <= 10"),
    ("workload.arrival", {"kind": "poisson", "rate_per_s": 1e-308}, "'rate_per_s' must be at least 1e-09"),
    ("link.latency_ms", 1e308, "'latency_ms' must be at most 1e12 ms (simulated times stay within 1e9 s"),
])
def test_values_that_would_overflow_are_refused(key, value, message):
    from simkit import load_scenario
    from simkit.spec import ConfigError

    with pytest.raises(ConfigError) as info:
        load_scenario(str(REPO / "scenarios" / "disagg.yaml"), [(key, value)])
    assert message in info.value.messages[0]


def test_a_device_is_not_read_as_a_trace(capsys):
    assert main(["scenarios/agg.yaml", "--trace", "/dev/zero", "--out", "/tmp/never-written"]) == 2
    assert capsys.readouterr().err == ("/dev/zero: is not a regular file (a device or a socket); "
                                       "expected a trace file\n")


def test_hostile_keys_are_escaped_on_one_line(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text('pools: {aggregated: {}}\n"bad\\nkey\\u001b[2J": 1\n')
    assert main([str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "\x1b" not in err and "bad\\nkey\\x1b[2J" in err


def test_quiet_prints_only_the_path_and_default_folders_never_collide(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scen = str(REPO / "scenarios" / "agg.yaml")
    for _ in range(3):  # same name, same second: each run reserves its own folder
        assert main([scen, "--quiet", "--no-plots", *SMALL]) == 0
    paths = capsys.readouterr().out.split()
    assert len(set(paths)) == 3 and all((tmp_path / p / "summary.json").exists() for p in paths)


def test_without_chunked_prefill_a_request_whose_recompute_cannot_fit_a_pass_is_rejected():
    # regression (found by hypothesis): on a 17-block decode worker a 248-token request was
    # preempted after 9 tokens; its recompute (257 tokens) exceeded the 256-token budget with
    # chunked prefill off, so it could never be readmitted. Now it is rejected on arrival.
    pool = dict(block_size=16, num_gpu_blocks=17, max_num_batched_tokens=256, max_num_seqs=2,
                enable_prefix_caching=False, enable_chunked_prefill=False)
    from simkit import scenario_from_dict
    from simkit.core.request import Request

    s = scenario_from_dict({"pools": {"prefill": dict(pool, workers=2), "decode": dict(pool, workers=1)}})
    records = simulate(s, [Request(0, 0.0, 248, 10, (0, 1, 2, 3), 64), Request(1, 0.0, 1, 11, (0,), 64)], check=True)
    assert records.stop_reason == "completed"
    assert [r.status for r in records.requests] == ["rejected", "completed"]
    # 248 + 8 = 256 fits: served
    records = simulate(s, [Request(0, 0.0, 248, 9, (0, 1, 2, 3), 64), Request(1, 0.0, 1, 11, (0,), 64)], check=True)
    assert [r.status for r in records.requests] == ["completed", "completed"]


@pytest.mark.parametrize("prefill_backend", ["vllm", "sglang", "trtllm"])
@pytest.mark.parametrize("why", ["kv", "max_model_len"])
def test_a_request_its_prefill_worker_rejects_frees_the_room_its_decode_worker_reserved(prefill_backend, why):
    """SGLang pairs the decode worker at dispatch and reserves the prompt's pages there before
    the prefill; a prefill worker that rejects the request must give that room back. Four
    1000-token prompts the prefill side rejects (63 pages of 16 against 40, or beyond
    max_model_len 500) would otherwise hold 3 x 63 of the decode worker's 200 pages for good
    and the fifth request would wait forever. The fifth's records equal those of a run
    without the four."""
    from simkit import scenario_from_dict

    prefill = {"workers": 1, "backend": prefill_backend, "block_size": 16, "num_gpu_blocks": 40}
    if why == "max_model_len":
        prefill.update(num_gpu_blocks=4000, max_model_len=500, max_model_len_action="reject")
    data = {"latency": {"kind": "constant", "prefill_ms": 30.0, "decode_ms": 8.0},
            "pools": {"prefill": prefill,
                      "decode": {"workers": 1, "backend": "sglang", "block_size": 16, "num_gpu_blocks": 200}}}
    reqs = [req(i, 10.0 * i, 1000, 5) for i in range(4)] + [req(4, 1000.0, 100, 5)]
    records = simulate(scenario_from_dict(data), reqs)
    assert [r.status for r in records.requests] == ["rejected"] * 4 + ["completed"]
    alone = simulate(scenario_from_dict(data), [req(0, 1000.0, 100, 5, ids=reqs[4].hash_ids)])
    last, ref = records.requests[4], alone.requests[0]
    assert (last.first_token_at, last.last_token_at) == (ref.first_token_at, ref.last_token_at)
    # 30 ms prefill, then the first of 5 decode steps of 8 ms on the decode worker
    assert last.first_token_at - last.arrived_at == pytest.approx(0.038, abs=1e-12)


class _FailsOnSecond:
    def __init__(self):
        self.calls = 0

    def pick(self, request, workers):
        self.calls += 1
        if self.calls == 2:
            raise ValueError("no second pick")
        return workers[0]


@pytest.mark.parametrize("stop", ["policy_error", "interrupt"])
def test_a_run_stopped_mid_decode_run_records_what_stepping_records(stop):
    """A long request decodes in fast-forwarded runs; the run stops at t = 10 s (a router
    policy's error at the second arrival, or Ctrl-C): the partial records (tokens so far, pass
    counts, pass records) equal those of pass-by-pass stepping: a 10 ms prefill emits the first
    token, then one per 4 ms decode step, so 2,498 tokens by t = 10 s, the last at 9.998 s."""
    from simkit.cluster.plugins import policy_factory

    s = scenario(latency={"kind": "constant", "prefill_ms": 10.0, "decode_ms": 4.0})
    reqs = [req(0, 0.0, 100, 20000), req(1, 10000.0, 100, 5)]
    results = []
    for fast in (True, False):
        if stop == "policy_error":
            sim = build(s, reqs, fast_forward=fast, record_passes=True,
                        router_policy=policy_factory(_FailsOnSecond, "router"))
        else:
            sim = build(s, reqs[:1], fast_forward=fast, record_passes=True)

            def ctrl_c(env):
                yield env.timeout(10.0)
                raise KeyboardInterrupt

            sim.env.process(ctrl_c(sim.env))
        results.append(sim.run())
    fast, slow = results
    assert fast == slow
    first = fast.requests[0]
    assert fast.stop_reason != "completed" and first.status == "incomplete"
    # 1 + floor((10 - 0.010) / 0.004) = 2498 tokens, the last at 0.010 + 2497 x 0.004 = 9.998 s
    assert first.output_length == 2498
    assert first.first_token_at == pytest.approx(0.010) and first.last_token_at == pytest.approx(9.998)


@pytest.mark.parametrize("isl", [1000, 100])
def test_check_mode_runs_the_same_events_at_the_time_cap(isl):
    """The cap's instant is part of the run, everything that happens at it included: a request
    arriving exactly at max_sim_time_s (60 s) is released, and rejected there (isl 1000 >
    max_model_len 256) or admitted and left incomplete (isl 100). Checking every instant must
    not change that (with --check the order of that instant's events once differed)."""
    s = override(scenario(max_model_len=256, max_model_len_action="reject"), {"max_sim_time_s": 60.0})
    reqs = [req(0, 0.0, 100, 5), req(1, 60000.0, isl, 5)]
    plain = simulate(s, reqs)
    checked = simulate(s, reqs, check=True)
    assert plain == checked
    assert plain.stop_reason == ("completed" if isl == 1000 else "time_cap")  # every request ended by then
    assert [r.status for r in plain.requests] == ["completed", "rejected" if isl == 1000 else "incomplete"]
    assert plain.requests[1].dispatched_at == 60.0
    if isl == 100:
        assert plain.requests[1].first_admitted_at == 60.0 and plain.requests[1].first_token_at is None


@pytest.mark.parametrize("action", ["cut", "reject"])
def test_a_prefill_pools_max_model_len_counts_the_prompt_only(action):
    """A prefill worker computes the prompt and the first token: at max_model_len 160 a
    150-token prompt with 60 output tokens is served whole (the decode pool has no limit),
    a 160-token prompt is rejected, whatever the action."""
    from simkit import scenario_from_dict

    data = {"pools": {"prefill": {"workers": 1, "max_model_len": 160, "max_model_len_action": action},
                      "decode": {"workers": 1}}}
    recs = simulate(scenario_from_dict(data), [req(0, 0.0, 150, 60), req(1, 0.0, 160, 5)]).requests
    assert [(r.status, r.output_length) for r in recs] == [("completed", 60), ("rejected", 0)]
