"""The resolve step (simkit.engine.resolve): specs are data, and what the hardware implies is
filled in after they are read, the same way by every loader and by build; and the public names
the README documents stay importable from their documented paths."""

from __future__ import annotations

import attrs
import pytest

from simkit import scenario_from_dict
from simkit.engine.resolve import resolve_scenario
from simkit.sim import build
from simkit.spec import ConfigError, LinkSpec, PoolSpec, PoolsSpec, RooflineLatency, Scenario
from simkit.spec import scenario_from_dict as structure_only

ROOFLINE_8B = {"kind": "roofline", "model": "Llama-3.1-8B", "gpu": "H100", "tp": 1}


def test_specs_alone_never_look_at_the_hardware():
    # an unknown model is well-formed data: only the resolve step refuses it
    data = {"pools": {"aggregated": {}}, "latency": dict(ROOFLINE_8B, model="nope")}
    s = structure_only(data, "x.yaml", resolve=None)
    assert s.latency.model == "nope" and s.pools.aggregated.num_gpu_blocks is None
    with pytest.raises(ConfigError) as e:
        scenario_from_dict(data, "x.yaml")
    assert len(e.value.messages) == 1
    assert e.value.messages[0].startswith("x.yaml: unknown model 'nope'")
    assert e.value.messages[0].endswith(" @ $.latency.model")


def test_every_hardware_problem_is_one_line_at_its_field():
    data = {"pools": {"prefill": {"latency": dict(ROOFLINE_8B, model="nope")},
                      "decode": {"latency": dict(ROOFLINE_8B, gpu="V100")}},
            "latency": dict(ROOFLINE_8B, tp=3)}
    with pytest.raises(ConfigError) as e:
        scenario_from_dict(data, "x.yaml")
    # pools first, then the scenario's latency, as the fields are read
    assert [m.rpartition(" @ ")[2] for m in e.value.messages] == [
        "$.pools.prefill.latency.model", "$.pools.decode.latency.gpu", "$.latency.tensor_parallel_size"]
    assert e.value.messages[2] == ("x.yaml: tensor_parallel_size 3 does not divide Llama-3.1-8B's 32 "
                                   "attention heads @ $.latency.tensor_parallel_size")


def test_resolving_fills_the_hardware_defaults_once_and_is_idempotent():
    s = scenario_from_dict({"pools": {"prefill": {}, "decode": {"num_gpu_blocks": 100}}, "latency": ROOFLINE_8B})
    # 6853 blocks of Llama-3.1-8B on one H100 (derived by hand in test_roofline.py); the
    # decode pool's explicit value wins; Llama-3.1-8B's 131,072 KV bytes per token on the link;
    # max_model_len: its max_position_embeddings (131,072)
    assert (s.pools.prefill.num_gpu_blocks, s.pools.decode.num_gpu_blocks) == (6853, 100)
    assert s.link.kv_bytes_per_token == 131_072
    assert s.pools.prefill.max_model_len == 131_072
    assert resolve_scenario(s) == s


def test_a_scenario_built_in_python_is_resolved_by_build_as_by_the_loader():
    by_hand = Scenario(pools=PoolsSpec(prefill=PoolSpec(), decode=PoolSpec()),
                       latency=RooflineLatency(model="Llama-3.1-8B", gpu="H100"), link=LinkSpec())
    assert by_hand.pools.prefill.num_gpu_blocks is None  # data only, until resolved
    loaded = scenario_from_dict({"pools": {"prefill": {}, "decode": {}}, "latency": ROOFLINE_8B})
    assert build(by_hand, []).scenario == loaded
    # the reference's defaults when no latency model names a model on a GPU
    plain = build(Scenario(pools=PoolsSpec(prefill=PoolSpec(), decode=PoolSpec()), link=LinkSpec()), [])
    assert plain.scenario.pools.decode.num_gpu_blocks == 16384
    assert plain.scenario.link.kv_bytes_per_token == 131_072
    with pytest.raises(ConfigError, match=r"^<scenario>: unknown gpu 'V100'.* @ \$\.latency\.gpu$"):
        build(attrs.evolve(by_hand, latency=RooflineLatency(gpu="V100")), [])


def test_public_names_keep_their_documented_paths():
    import simkit.planner
    import simkit.request
    from simkit.cluster import planner as planner_process
    from simkit.core import request as core_request

    for name in ("run", "load_scenario", "scenario_from_dict", "override", "simulate", "summarize",
                 "load_result", "build", "ConfigError", "Scenario", "Result"):
        assert callable(getattr(simkit, name)), name
    assert simkit.request.Request is core_request.Request
    for name in ("Decision", "Snapshot", "PoolView", "WorkerView", "Traffic"):
        assert getattr(simkit.planner, name) is getattr(planner_process, name)
    decision = simkit.planner.Decision({"decode": 2}, next_tick_s=None)
    assert decision.targets == {"decode": 2}


#: string fields of the specs that never name a file (a GPU, a version, a scenario's name, a
#: policy's ``module:Class``); every other string field must be a path field that
#: simkit.spec.path_fields reports, so that --force protects it, inputs: records its SHA-256
#: and a rerun resolves it. A new string field must be classified here.
NOT_PATHS = {("AicLatency", "gpu"), ("AicLatency", "aic_version"), ("DeploymentLatency", "gpu"),
             ("RooflineLatency", "gpu"), ("Scenario", "name"), ("PythonPlanner", "path"), ("PythonRouter", "path"),
             ("PythonPlanner", "search_path"), ("PythonRouter", "search_path")}
#: the string fields that name a file a run reads (simkit.spec.paths)
PATHS = {("DeploymentLatency", "model"), ("AicLatency", "model"), ("RooflineLatency", "model"),
         ("EmpiricalLength", "path"), ("TraceWorkload", "path"), ("TableLatency", "path"),
         ("SpeculativeSpec", "draft_model")}


def test_every_string_field_of_the_specs_is_a_path_field_or_declared_not_one():
    import importlib
    import inspect

    from simkit.spec import path_fields

    unknown = []
    for module in ("workload", "latency", "pools", "cluster", "scenario"):
        for name, cls in inspect.getmembers(importlib.import_module(f"simkit.spec.{module}"), inspect.isclass):
            if attrs.has(cls):
                unknown += [(cls.__name__, f.name) for f in attrs.fields(cls)
                            if "str" in str(f.type) and "Literal" not in str(f.type)
                            and (cls.__name__, f.name) not in NOT_PATHS]
    assert set(unknown) == PATHS
    # each of them, set to a file, is reported
    data = {"latency": {"kind": "roofline", "model": "/m/target.json", "gpu": "H100"},
            "workload": {"kind": "synthetic", "num_requests": 1, "input_tokens": {"kind": "empirical", "path": "/e.jsonl"}},
            "pools": {"aggregated": {"speculative": {"method": "draft_model", "draft_model": "/m/draft.json",
                                                     "num_speculative_tokens": 1}}}}
    found = {(where, value) for where, kind, value in path_fields(structure_only(data, resolve=None)) if kind == "file"}
    assert found == {("$.latency.model", "/m/target.json"), ("$.workload.input_tokens.path", "/e.jsonl"),
                     ("$.pools.aggregated.speculative.draft_model", "/m/draft.json")}
