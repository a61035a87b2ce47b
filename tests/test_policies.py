"""User policies in Python: plugged from a scenario (kind: python) or the API, exact effects,
and one-line errors (exit 2) for a module, class or protocol that is wrong."""

from __future__ import annotations

import textwrap

import pytest

from simkit.cli import main
from simkit import override, scenario_from_dict
from simkit.spec import ConfigError
from simkit.cluster.planner import Decision
from simkit.cluster.plugins import policy_factory
from simkit.sim import build, simulate

from conftest import REPO, req, scenario

MODULE = '''
from simkit.cluster.planner import Decision


class LastWorker:
    """Always the highest-index worker offered."""
    def __init__(self, params):
        self.params = params
    def pick(self, request, workers):
        return workers[-1]


class TwoAtFirstTick:
    def __init__(self, params):
        self.pool = params["pool"]
    def plan(self, snap):
        return Decision({self.pool: 2}, next_tick_s=1000.0)


class Stranger:
    def __init__(self, params):
        pass
    def pick(self, request, workers):
        return "not a worker"


class NoMethod:
    def __init__(self, params):
        pass


class Picky:
    def __init__(self, params):
        raise ValueError("needs 'alpha'")
    def pick(self, request, workers):
        return workers[0]
'''


@pytest.fixture
def plugin_dir(tmp_path):
    pkg = tmp_path / "userpol"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(textwrap.dedent(MODULE))
    return tmp_path


def with_router(plugin_dir, cls, **extra):
    data = {"pools": {"aggregated": {"workers": 3}}, "latency": {"kind": "constant"},
            "router": {"kind": "python", "path": f"userpol.mod:{cls}", "search_path": str(plugin_dir),
                       "params": {"x": 1}}}
    data.update(extra)
    return scenario_from_dict(data)


def test_python_router_from_a_scenario_decides(plugin_dir):
    reqs = [req(i, 10 * i, 100, 2) for i in range(6)]
    records = simulate(with_router(plugin_dir, "LastWorker"), reqs)
    assert [r.decode_worker for r in records.requests] == [2] * 6


def test_python_planner_from_a_scenario_scales(plugin_dir):
    s = with_router(plugin_dir, "LastWorker", planner={
        "kind": "python", "path": "userpol.mod:TwoAtFirstTick", "search_path": str(plugin_dir),
        "params": {"pool": "aggregated"}, "interval_s": 1.0}, max_sim_time_s=5.0)
    s = override(s, {"pools.aggregated.workers": 1, "pools.aggregated.max_workers": 3})
    records = simulate(s, [req(0, 4000, 100, 2)])
    # first tick at 1 s: 2 workers; the policy asks for its next tick in 1000 s
    assert [(c.at, c.active) for c in records.worker_counts] == [(0.0, 1), (1.0, 2)]
    assert records.requests[0].decode_worker == 1  # LastWorker: the new one
    assert [p.at for p in records.pool_samples] == [1.0]


def test_policies_from_the_python_api():
    class Zero:
        def pick(self, request, workers):
            return workers[0]

    class ScaleTo3:
        def plan(self, snap):
            return {"aggregated": 3}

    s = override(scenario(workers=2), {"planner": {"kind": "static", "interval_s": 0.5},
                                      "pools.aggregated.max_workers": 4})
    reqs = [req(i, 400 * i, 100, 2) for i in range(4)]
    records = build(s, reqs, router_policy=policy_factory(Zero(), "router"),
                    planner_policy=policy_factory(ScaleTo3, "planner")).run()
    assert [r.decode_worker for r in records.requests] == [0] * 4
    assert max(c.active for c in records.worker_counts) == 3


@pytest.mark.parametrize("path, message", [
    ("nosuch.mod:X", "router: cannot import module 'nosuch.mod'"),
    ("userpol.mod:Missing", "router: module 'userpol.mod' has no 'Missing' @ $.router.path"),
    ("userpol.mod:NoMethod", "router: NoMethod is not a router policy: it needs a method "
                             "pick(request, workers) -> one of workers @ $.router.path"),
    ("userpol.mod:Picky", "router: Picky({'x': 1}) failed: ValueError: needs 'alpha' @ $.router.path"),
])
def test_bad_python_policy_is_one_line_exit_2(plugin_dir, tmp_path, capsys, path, message):
    s = tmp_path / "s.yaml"
    s.write_text(f"pools: {{aggregated: {{workers: 1}}}}\n"
                 f"router: {{kind: python, path: '{path}', params: {{x: 1}}, search_path: '{plugin_dir}'}}\n"
                 f"workload: {{kind: synthetic, num_requests: 3}}\n")
    assert main([str(s), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"{s}: {message}")
    assert not (tmp_path / "out").exists()


def test_bad_class_path_is_a_config_error():
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"pools": {"aggregated": {}}, "router": {"kind": "python", "path": "mod.Class"}}, "s.yaml")
    assert info.value.messages == ["s.yaml: 'path' must be package.module:ClassName, got 'mod.Class' @ $.router"]


def test_a_policy_breaking_its_protocol_mid_run_stops_the_run(plugin_dir):
    records = simulate(with_router(plugin_dir, "Stranger"), [req(0, 0, 100, 2)])
    assert records.stop_reason == "policy_error"
    assert records.stop_detail == ("router policy Stranger.pick returned 'not a worker', not one of the "
                                   "3 workers offered (request 0)")

    class Bad:
        def plan(self, snap):
            return {"nosuch": 1}

    s = override(scenario(), {"planner": {"kind": "static", "interval_s": 1.0}})
    records = build(s, [req(0, 1500, 100, 2)], planner_policy=policy_factory(Bad(), "planner")).run()
    assert records.stop_reason == "policy_error" and "unknown pool(s) nosuch" in records.stop_detail


def test_shipped_example_runs_its_policies():
    from simkit import load_scenario

    s = load_scenario(str(REPO / "scenarios" / "custom_policies.yaml"))
    assert s.router.search_path == str(REPO / "scenarios")
    records = simulate(s, record_token_times=False)
    assert records.stop_reason == "completed"
    assert max(c.active for c in records.worker_counts if c.pool == "prefill") > 1  # it scaled


def test_decision_defaults():
    assert Decision() == Decision({}, None)


def test_api_run_takes_policy_classes_and_instances(tmp_path):
    import simkit
    from simkit.api import run

    class First:
        def pick(self, request, workers):
            return workers[0]

    data = {"pools": {"aggregated": {"workers": 2}}, "workload": {"kind": "synthetic", "num_requests": 20},
            "planner": {"kind": "static", "interval_s": 1.0}}
    result = run(data, router=First)
    assert set(result.requests["decode_worker"]) == {0}
    result.save(str(tmp_path / "out"))
    assert (tmp_path / "out" / "planner.png").exists() and (tmp_path / "out" / "workers.csv").exists()
    with pytest.raises(simkit.ConfigError):
        run({"pools": {"aggregated": {}}}, planner=object())


@pytest.mark.parametrize("policy, detail", [
    # found by a hostile walk: a tick of 1e-300 s never let time pass (the run hung)
    (lambda snap: Decision({}, next_tick_s=1e-300), "asked for its next tick in 1e-300 s; expected a number of "
                                                     "seconds >= 0.001"),
    (lambda snap: Decision({}, next_tick_s=True), "asked for its next tick in True s"),
    # SystemExit from the user's code is the policy's error too, not the process's exit
    (lambda snap: (_ for _ in ()).throw(SystemExit(3)), "plan raised SystemExit: 3"),
])
def test_a_planner_policy_asking_the_impossible_stops_the_run(policy, detail):
    class P:
        def plan(self, snap):
            return policy(snap)

    s = override(scenario(), {"planner": {"kind": "static", "interval_s": 1.0}})
    records = build(s, [req(0, 1500, 100, 2)], planner_policy=policy_factory(P(), "planner")).run()
    assert records.stop_reason == "policy_error" and detail in records.stop_detail


def test_a_huge_planner_target_is_capped_at_once():
    # found by a hostile walk: 10**9 workers with a GPU budget gave one up per loop turn (the run
    # hung); without max_workers nothing capped it. Now: max_workers, PoolSpec's 10,000, or the
    # budget (4 GPUs: 4 workers of 1 GPU) cap it in one step
    class Huge:
        def plan(self, snap):
            return {name: 10**9 for name in snap.pools}

    for extra, most in (({"planner.gpu_budget": 4}, 4), ({"pools.aggregated.max_workers": 6}, 6)):
        s = override(scenario(), {"planner": {"kind": "static", "interval_s": 0.5}, **extra})
        records = build(s, [req(i, 300 * i, 100, 2) for i in range(4)],
                        planner_policy=policy_factory(Huge(), "planner")).run()
        assert records.stop_reason == "completed"
        assert max(c.starting + c.active for c in records.worker_counts) == most


def test_a_failed_policy_run_exits_1_with_its_diagnostic(plugin_dir, tmp_path, capsys):
    # the README's promise; a policy_error run exited 0 with nothing on stderr
    s = tmp_path / "s.yaml"
    s.write_text(f"pools: {{aggregated: {{workers: 1}}}}\n"
                 f"router: {{kind: python, path: 'userpol.mod:Stranger', search_path: '{plugin_dir}'}}\n"
                 f"workload: {{kind: synthetic, num_requests: 3}}\n")
    assert main([str(s), "--out", str(tmp_path / "out"), "--quiet", "--no-plots"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("simkit: run stopped (policy_error): router policy Stranger.pick "
                                               "returned 'not a worker'")


def test_policy_params_must_be_a_mapping_and_short_intervals_say_what_they_need():
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"pools": {"aggregated": {}}, "router": {"kind": "python", "path": "a.b:C",
                                                                    "params": [1, 2]}}, "s.yaml")
    assert info.value.messages == ["s.yaml: expected a mapping, got a list [1, 2] @ $.router.params"]
    # 0 is refused as > 0, so a too-short interval does not offer it
    with pytest.raises(ConfigError) as info:
        scenario_from_dict({"pools": {"aggregated": {}}, "planner": {"kind": "static", "interval_s": 1e-4}}, "s.yaml")
    assert info.value.messages == ["s.yaml: 'interval_s' must be at least 0.001: 0.0001 @ $.planner.interval_s"]


def test_a_policy_module_found_only_in_the_current_folder_is_not_imported(tmp_path, monkeypatch, capsys):
    # the module lives where the command runs, not in the scenario's folder: Python's import
    # found it through the current folder on sys.path, the run did not record it as an input,
    # and its resolved scenario failed to rerun from elsewhere. Now it is refused at once.
    scen, here = tmp_path / "scen", tmp_path / "here"
    scen.mkdir()
    here.mkdir()
    (here / "onlyhere.py").write_text(textwrap.dedent(MODULE))
    s = scen / "s.yaml"
    s.write_text("pools: {aggregated: {workers: 2}}\nrouter: {kind: python, path: 'onlyhere:LastWorker'}\n"
                 "workload: {kind: synthetic, num_requests: 3}\n")
    monkeypatch.chdir(here)
    monkeypatch.syspath_prepend(str(here))  # as `python -m` puts the current folder first
    assert main([str(s), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "cannot import module 'onlyhere'" in err and str(scen) in err
    assert not (tmp_path / "o").exists()


def test_a_policy_module_that_is_a_fifo_is_named_as_such(tmp_path, capsys):
    import os

    os.mkfifo(tmp_path / "fifopol.py")
    s = tmp_path / "s.yaml"
    s.write_text("pools: {aggregated: {workers: 1}}\nrouter: {kind: python, path: 'fifopol:P'}\n"
                 "workload: {kind: synthetic, num_requests: 2}\n")
    assert main([str(s), "--out", str(tmp_path / "o"), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'fifopol.py'} is not a regular file" in err and not (tmp_path / "o").exists()
