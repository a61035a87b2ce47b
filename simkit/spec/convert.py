"""The one strict cattrs converter: no extra keys, no silent coercion (``"8"`` is not 8, ``true``
is not 1), ``kind``-tagged unions with the expected kinds named, and every problem reported as
one ``message @ $.path`` line. :func:`scenario_from_dict` structures a plain mapping into a
:class:`~simkit.spec.scenario.Scenario`; :func:`to_dict` is its inverse.

The only simkit module that imports cattrs (with the loader, the only one that reads spec data).
Imports the other spec modules only.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any, Callable, Literal, Optional

import attrs
import cattrs
from cattrs.errors import ClassValidationError, ForbiddenExtraKeysError, IterableValidationError
from cattrs.gen import make_dict_structure_fn

from simkit.spec.base import ConfigError, FieldValueError, ResolveError
from simkit.spec.cluster import (KV_ROUTER_ALIASES, ZERO_CLEARS_CREDIT, KvAwareRouter, LeastLoadedRouter, PlannerSpec,
                                 PythonPlanner, PythonRouter, RoundRobinRouter, RouterSpec, SessionAffinityRouter,
                                 SlaPlanner, StaticPlanner, ThresholdPlanner)
from simkit.spec.paths import resolve_paths
from simkit.spec.latency import (_LATENCY_ALIASES, AicLatency, ConstantLatency, DeploymentLatency,
                                 LatencySpec, PolynomialLatency, RooflineLatency, TableLatency)
from simkit.spec.pools import PoolsSpec
from simkit.spec.scenario import Scenario
from simkit.spec.workload import (ArrivalSpec, ConstantArrival, DiurnalArrival, EmpiricalLength, FixedLength,
                                  GammaArrival, LengthSpec, LognormalLength, NormalLength, PiecewiseArrival,
                                  PoissonArrival, SyntheticWorkload, TraceWorkload, UniformLength,
                                  WorkloadSpec, ZipfLength)

_UNIONS: dict[Any, dict[str, type]] = {
    LengthSpec: {"fixed": FixedLength, "uniform": UniformLength, "lognormal": LognormalLength,
                 "normal": NormalLength, "zipf": ZipfLength, "empirical": EmpiricalLength},
    ArrivalSpec: {"poisson": PoissonArrival, "gamma": GammaArrival, "constant": ConstantArrival,
                  "piecewise": PiecewiseArrival, "diurnal": DiurnalArrival},
    WorkloadSpec: {"synthetic": SyntheticWorkload, "trace": TraceWorkload},
    LatencySpec: {"polynomial": PolynomialLatency, "constant": ConstantLatency,
                  "roofline": RooflineLatency, "table": TableLatency, "aic": AicLatency},
    RouterSpec: {"round_robin": RoundRobinRouter, "least_loaded": LeastLoadedRouter,
                 "kv_aware": KvAwareRouter, "session_affinity": SessionAffinityRouter,
                 "python": PythonRouter},
    PlannerSpec: {"static": StaticPlanner, "threshold": ThresholdPlanner, "sla": SlaPlanner,
                  "python": PythonPlanner},
}


class UnknownKind(ValueError):
    """A ``kind`` tag names no known variant."""


def _kind_hook(kinds: dict[str, type]):
    expected = ", ".join(sorted(kinds))
    # per-class structuring functions: a one-variant Union[X] *is* X, so the hook registered
    # for it must not call back into converter.structure(value, X)
    fns = {k: make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)
           for k, cls in kinds.items()}

    def structure(value: Any, _type: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping with a 'kind' (one of: {expected}), got {_describe(value)}")
        kind = value.get("kind")
        if kind in ("roofline", "aic"):
            for alias, name in _LATENCY_ALIASES.items():
                if alias in value and name not in value:
                    value = {(name if k == alias else k): v for k, v in value.items()}
        if kind == "kv_aware":
            value = _rename_router_aliases(value)
        if kind not in kinds:
            if "kind" not in value:
                raise UnknownKind(f"missing 'kind' (expected one of: {expected})")
            raise UnknownKind(f"unknown kind {kind!r} (expected one of: {expected})")
        return fns[kind](value, kinds[kind])

    return structure


def _rename_router_aliases(value: dict) -> dict:
    """A kv_aware router mapping with its aliases (``overlap_weight``, ``temperature``) under
    their field names; both an alias and its field given is an error."""
    if "count_queued_prefill" in value:
        raise ValueError("'count_queued_prefill' is replaced by 'router_track_prefill_tokens' (Dynamo's name, "
                         "default true: each worker's queued prefill tokens count in its prefill term)")
    given = [alias for alias in KV_ROUTER_ALIASES if alias in value]
    for alias in given:
        name = KV_ROUTER_ALIASES[alias]
        same = [other for other in given if other != alias and KV_ROUTER_ALIASES[other] == name]
        if name in value or same:
            raise ValueError(f"give one of '{alias}' and '{same[0] if same else name}' (the same field), not both")
        number = value[alias]
        if alias in ZERO_CLEARS_CREDIT and number == 0 and not isinstance(number, bool):
            if "overlap_score_credit" in value:
                raise ValueError(f"'{alias}: 0' also sets overlap_score_credit to 0 (Dynamo's rule), so it cannot "
                                 "go with 'overlap_score_credit'; give prefill_load_scale: 0 with the credit you want")
            value = dict(value, overlap_score_credit=0.0)
        value = {(name if k == alias else k): v for k, v in value.items()}
    return value


def _strict(kind: type, label: str):
    def structure(value: Any, _type: Any) -> Any:
        if isinstance(value, bool) and kind is not bool:
            raise TypeError(f"expected {label}, got {_describe(value)}")
        if kind is float:
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                value = float(value)
                if not math.isfinite(value):
                    raise ValueError(f"expected a finite number, got {_describe(value)}")
                return value
            raise TypeError(f"expected {label}, got {_describe(value)}")
        if not isinstance(value, kind):
            raise TypeError(f"expected {label}, got {_describe(value)}")
        return value

    return structure


def _free_mapping(value: Any, _type: Any) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected a mapping, got {_describe(value)}")
    return dict(value)


def _literal_hook(value: Any, type_: Any) -> Any:
    allowed = type_.__args__
    if value not in allowed or isinstance(value, bool):
        raise ValueError(f"expected one of: {', '.join(map(str, allowed))}, got {_describe(value)}")
    return value


def _mapping_factory(cls: type):
    inner = make_dict_structure_fn(cls, converter, _cattrs_forbid_extra_keys=True)

    def structure(value: Any, type_: Any) -> Any:
        if not isinstance(value, dict):
            raise TypeError(f"expected a mapping, got {_describe(value)}")
        return inner(value, type_)

    return structure


def _describe(value: Any) -> str:
    """A value as the YAML that wrote it would show it (null, true, false), else its repr."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return f"a list {value!r}"[:80]
    return repr(value)[:80]


def _float_tuple(value: Any, _type: Any) -> tuple:
    """A list of numbers, or one number as a list of one (a string such as Dynamo's
    ``"0.85,0.3"`` is neither)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (converter.structure(value, float),)
    if not isinstance(value, (list, tuple)):
        raise TypeError(f"expected a list of numbers such as [0.85, 0.3], got {_describe(value)}")
    return tuple(converter.structure(v, float) for v in value)


def _make_converter() -> cattrs.Converter:
    conv = cattrs.Converter(forbid_extra_keys=True)
    conv.register_structure_hook(int, _strict(int, "an integer"))
    conv.register_structure_hook(float, _strict(float, "a number"))
    conv.register_structure_hook(bool, _strict(bool, "true or false"))
    conv.register_structure_hook(str, _strict(str, "a string"))
    conv.register_structure_hook(dict, _free_mapping)  # a policy's free-form params
    conv.register_structure_hook_func(
        lambda t: getattr(t, "__origin__", None) is Literal, _literal_hook
    )
    return conv


#: The one strict converter: no extra keys, no silent coercion, ``kind``-tagged unions.
converter = _make_converter()
converter.register_structure_hook_factory(attrs.has, _mapping_factory)
converter.register_structure_hook_func(lambda t: t == tuple[float, ...], _float_tuple)
for _union, _kinds in _UNIONS.items():
    converter.register_structure_hook(_union, _kind_hook(_kinds))
for _union in (LatencySpec, PlannerSpec):  # optional kind-tagged fields: null or a tagged mapping
    converter.register_structure_hook(
        Optional[_union], lambda v, t, hook=_kind_hook(_UNIONS[_union]): None if v is None else hook(v, t))
# model-on-GPU latency specs: ``kind`` first in dumps (attrs puts base-class fields first)
converter.register_unstructure_hook_func(
    lambda t: isinstance(t, type) and issubclass(t, DeploymentLatency) and t is not DeploymentLatency,
    lambda spec: {"kind": spec.kind, **{a.name: getattr(spec, a.name) for a in attrs.fields(type(spec))
                                        if a.name != "kind"}},
)
converter.register_unstructure_hook(
    PoolsSpec,
    lambda pools: {name: converter.unstructure(spec) for name, spec in pools.named()},
)


_FIELD_MARK = re.compile(r"^<<([\w.\[\]]+)>>(.*) @ (\S+)$")


def _format_exception(exc: BaseException, type_: Any) -> str:
    if isinstance(exc, FieldValueError):
        return f"<<{exc.field}>>{exc}"  # _messages moves the field name onto the path
    if isinstance(exc, ForbiddenExtraKeysError):
        return f"unknown field(s) {', '.join(sorted(map(str, exc.extra_fields)))}"
    if isinstance(exc, KeyError):
        return "required field missing"
    if isinstance(exc, (TypeError, ValueError)) and str(exc):
        msg = str(exc)
        if msg.startswith("__init__() missing"):
            return "required field missing: " + msg.split(":", 1)[-1].strip()
        return msg
    return cattrs.v.format_exception(exc, type_)


def _messages(exc: BaseException) -> list[str]:
    if isinstance(exc, (ClassValidationError, IterableValidationError)):
        lines = cattrs.transform_error(exc, format_exception=_format_exception)
    else:
        lines = [f"{_format_exception(exc, None)} @ $"]
    out = []
    for line in lines:
        m = _FIELD_MARK.match(line)
        out.append(f"{m.group(2)} @ {m.group(3)}.{m.group(1)}" if m else line)
    return out


#: the resolve step a loader may be given: the scenario with its hardware-derived defaults
#: filled in (:func:`simkit.engine.resolve.resolve_scenario`), raising :class:`ResolveError`
Resolve = Callable[[Scenario], Scenario]


def scenario_from_dict(data: Any, source: str = "<scenario>", *, resolve: Optional[Resolve]) -> Scenario:
    """Structure a plain dict (as read from YAML) into a validated :class:`Scenario` (its
    relative path fields made absolute against the current folder), then pass it through
    ``resolve`` (None: the scenario as written, its hardware-derived defaults unset;
    :func:`simkit.scenario_from_dict` gives the resolved one).

    Raises:
        ConfigError: one ``SOURCE: message @ $.path`` line per problem.
    """
    if not isinstance(data, dict):
        raise ConfigError([f"{source}: expected a mapping at the top level, got {_describe(data)} @ $"])
    try:
        # relative path fields against the current folder, so a dumped scenario reruns anywhere
        data = resolve_paths(data, os.getcwd())
        scenario = converter.structure(data, Scenario)
    except RecursionError:
        raise ConfigError([f"{source}: the scenario is nested too deeply @ $"]) from None
    except Exception as exc:  # cattrs wraps every field error; we report them all
        raise ConfigError([f"{source}: {m}" for m in _messages(exc)]) from None
    if resolve is None:
        return scenario
    try:
        return resolve(scenario)
    except ResolveError as exc:
        raise ConfigError(exc.lines(source)) from None


def to_dict(scenario: Scenario) -> dict:
    """The scenario as plain data (every default filled in), the inverse of structuring."""
    return converter.unstructure(scenario)
