"""Scenario specs: frozen attrs classes that describe an experiment, the one strict cattrs
converter, and YAML loading with ``--set`` overrides. Specs are data: they validate their own
fields and the rules between them, and nothing else. What the hardware implies (a model's KV
capacity on a GPU, its longest sequence, the link's KV bytes per token, whether a model, GPU or
pass table exists) is the resolve step's, :mod:`simkit.engine.resolve`, which the loaders are
given by :mod:`simkit.sim` (``simkit.load_scenario`` resolves; ``simkit.spec.load_scenario``
takes the step as its ``resolve`` argument). Modules by area: ``base`` (errors, validators),
``workload``, ``latency``, ``pools`` (pools and engines), ``cluster`` (link, router, router
queue, SLA, planner), ``scenario``, ``convert`` (the converter) and ``loader`` (YAML, overrides,
dump). May import attrs, cattrs, yaml and :mod:`simkit.core`; must not import any other simkit
package (no behaviour), nor simpy.

Engine knob names follow vLLM (``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``,
``num_gpu_blocks``, ``enable_prefix_caching``, ``enable_chunked_prefill``).
"""

from simkit.spec.base import MAX_FLOAT, ConfigError, FieldValueError, ResolveError
from simkit.spec.cluster import (KvAwareRouter, LeastLoadedRouter, LinkSpec, PlannerSpec, PythonPlanner,
                                 PythonRouter, RoundRobinRouter, RouterQueueSpec, RouterSpec,
                                 SessionAffinityRouter, SlaPlanner, SlaSpec, StaticPlanner, ThresholdPlanner)
from simkit.spec.convert import Resolve, converter, scenario_from_dict, to_dict
from simkit.spec.latency import (AicLatency, ConstantLatency, DeploymentLatency, LatencySpec,
                                 PolynomialLatency, RooflineLatency, TableLatency)
from simkit.spec.paths import path_fields, resolve_paths
from simkit.spec.loader import MAX_VALUES, dump_scenario, load_scenario, override, parse_overrides, yaml_load
from simkit.spec.pools import (DEFAULT_NUM_GPU_BLOCKS, SGLANG_CHUNKED_PREFILL_SIZE, SGLANG_CHUNKED_PREFILL_SIZE_LARGE,
                               KvOffloadSpec, PoolSpec, PoolsSpec, SglangSpec, SpeculativeSpec, StorageTierSpec, TrtllmSpec)
from simkit.spec.scenario import Scenario
from simkit.spec.workload import (ArrivalSpec, ConstantArrival, DiurnalArrival, EmpiricalLength, FixedLength,
                                  GammaArrival, LengthSpec, LognormalLength, NormalLength, PiecewiseArrival,
                                  PoissonArrival, PriorityClass, RateSegment, SharedPrefix, SyntheticSessions,
                                  SyntheticWorkload, TRACE_FORMATS, TraceWorkload, UniformLength, WorkloadSpec,
                                  ZipfLength)

__all__ = [
    "AicLatency", "ArrivalSpec", "ConfigError", "ConstantArrival", "ConstantLatency",
    "DEFAULT_NUM_GPU_BLOCKS", "SGLANG_CHUNKED_PREFILL_SIZE", "SGLANG_CHUNKED_PREFILL_SIZE_LARGE", "DeploymentLatency", "DiurnalArrival", "EmpiricalLength",
    "FieldValueError", "FixedLength", "GammaArrival", "KvAwareRouter", "KvOffloadSpec", "LatencySpec",
    "LeastLoadedRouter", "LengthSpec", "LinkSpec", "LognormalLength", "MAX_FLOAT", "MAX_VALUES",
    "NormalLength", "PiecewiseArrival", "PlannerSpec", "PoissonArrival", "PolynomialLatency",
    "PoolSpec", "PoolsSpec", "PriorityClass", "PythonPlanner", "PythonRouter", "RateSegment",
    "Resolve", "ResolveError", "RooflineLatency", "RoundRobinRouter", "RouterQueueSpec",
    "RouterSpec", "Scenario", "SessionAffinityRouter", "SglangSpec", "SpeculativeSpec", "SharedPrefix", "StorageTierSpec", "SlaPlanner",
    "SlaSpec", "StaticPlanner", "SyntheticSessions", "SyntheticWorkload", "TRACE_FORMATS", "TableLatency",
    "ThresholdPlanner", "TraceWorkload", "TrtllmSpec", "UniformLength", "WorkloadSpec",
    "ZipfLength", "converter", "dump_scenario", "load_scenario", "override", "parse_overrides",
    "path_fields", "resolve_paths", "scenario_from_dict", "to_dict", "yaml_load",
]
