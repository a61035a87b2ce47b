"""Reading scenarios: YAML 1.2 loading (``1e-3`` is a number, ``no`` is a string, ``010`` is
ten), dotted ``--set`` overrides (and naming the ``--set`` that made a value bad), relative
paths resolved against the scenario file's folder, and :func:`dump_scenario`, which writes the
resolved scenario back so that loading it gives the same run.

The only simkit module that imports yaml. Imports the other spec modules only.
"""

from __future__ import annotations

import os
import re
from typing import Any, Optional

import yaml

from simkit.core.files import NotUtf8, read_text
from simkit.spec.base import ConfigError
from simkit.spec.convert import Resolve, scenario_from_dict, to_dict
from simkit.spec.paths import resolve_paths
from simkit.spec.scenario import Scenario

# ----------------------------------------------------------------------------- YAML 1.2


class _Yaml12Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 core-schema scalars: ``1e-3`` is a float, only true/false are
    booleans (``no`` stays a string), ``010`` is decimal ten, ``0o10`` octal eight."""


_Yaml12Loader.yaml_implicit_resolvers = {}
_RESOLVERS = [
    ("tag:yaml.org,2002:bool", r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    ("tag:yaml.org,2002:int", r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
    ("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
]
for _tag, _rx, _first in _RESOLVERS:
    _Yaml12Loader.add_implicit_resolver(_tag, re.compile(_rx), _first)


def _construct_int(loader: yaml.SafeLoader, node: yaml.Node) -> int:
    text = loader.construct_scalar(node)
    try:
        if text.startswith("0o"):
            return int(text[2:], 8)
        if text.startswith("0x"):
            return int(text[2:], 16)
        return int(text, 10)
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not an integer", node.start_mark) from None


def _construct_float(loader: yaml.SafeLoader, node: yaml.Node) -> float:
    text = loader.construct_scalar(node)
    try:
        return float(text.lower().replace(".inf", "inf").replace(".nan", "nan"))
    except ValueError:
        raise yaml.constructor.ConstructorError(
            None, None, f"{text!r} is not a number", node.start_mark) from None


def _construct_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> dict:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if not isinstance(key, str):
            raise yaml.constructor.ConstructorError(
                None, None, f"mapping key {key!r} is not a string", key_node.start_mark)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen[key] = True
    return loader.construct_mapping(node)


_Yaml12Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:float", _construct_float)
_Yaml12Loader.add_constructor("tag:yaml.org,2002:map", _construct_mapping)


def yaml_load(text: str, source: str = "<yaml>") -> Any:
    """Parse YAML 1.2 text.

    Raises:
        ConfigError: ``SOURCE:LINE:COLUMN: problem`` for a syntax error.
    """
    try:
        return yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 - a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark else source
        problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
        raise ConfigError([f"{where}: YAML syntax error: {problem}"]) from None
    except yaml.YAMLError as exc:  # e.g. a control character: one line, whatever PyYAML says
        raise ConfigError([f"{source}: YAML error: {' '.join(str(exc).split())}"]) from None
    except RecursionError:
        raise ConfigError([f"{source}: YAML nested too deeply"]) from None


# ----------------------------------------------------------------------------- loading


def _set_dotted(data: dict, dotted: str, value: Any, source: str, created: Optional[dict] = None) -> None:
    """Set ``data`` at ``dotted`` to ``value``, making the mappings on the way that are missing
    (each recorded in ``created``, ``"$.path" -> dotted``, when given: a problem found inside
    one is the override's, not the file's)."""
    keys = dotted.split(".")
    if not all(keys):
        raise ConfigError([f"{source}: bad key {dotted!r}: expected a dotted path like pools.decode.workers"])
    node = data
    for i, key in enumerate(keys[:-1]):
        child = node.get(key)
        if child is None:
            child = node[key] = {}
            if created is not None:
                created.setdefault("$." + ".".join(keys[: i + 1]), dotted)
        if not isinstance(child, dict):
            path = ".".join(keys[: i + 1])
            raise ConfigError([f"{source}: cannot set {dotted!r}: {path} is {child!r}, not a mapping"])
        node = child
    node[keys[-1]] = value


def parse_overrides(pairs: list[str]) -> list[tuple[str, Any]]:
    """Parse ``KEY=VALUE`` strings; values are YAML 1.2 scalars (``8``, ``1e-3``, ``null``).

    Raises:
        ConfigError: a pair without ``=`` or with a value that is not valid YAML.
    """
    out = []
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError([f"--set {pair!r}: expected KEY=VALUE, e.g. pools.decode.workers=8"])
        out.append((key.strip(), yaml_load(text, source=f"--set {key.strip()}")))
    return out


#: values a scenario may expand to once YAML aliases are copied out (a "billion laughs" guard)
MAX_VALUES = 1_000_000


def _unalias(node: Any, budget: Optional[list] = None) -> Any:
    """A copy in which no two places share a mapping or list: YAML aliases (``*engine``) load
    as one shared object, and an override of one place must not change the other.

    Raises:
        ValueError: the copy would hold more than :data:`MAX_VALUES` values.
    """
    budget = [MAX_VALUES] if budget is None else budget
    budget[0] -= 1
    if budget[0] < 0:
        raise ValueError(f"the scenario expands to more than {MAX_VALUES:,} values (aliases of aliases?)")
    if isinstance(node, dict):
        return {key: _unalias(value, budget) for key, value in node.items()}
    if isinstance(node, list):
        return [_unalias(value, budget) for value in node]
    return node


def _default_search_path(data: dict, base_dir: str) -> None:
    """A ``kind: python`` router or planner imports from the scenario file's folder unless it
    says otherwise (written absolute into the resolved scenario)."""
    for key in ("router", "planner"):
        node = data.get(key)
        if isinstance(node, dict) and node.get("kind") == "python" and node.get("search_path") is None:
            node["search_path"] = base_dir


def load_scenario(path: str, overrides: Optional[list[tuple[str, Any]]] = None, *,
                  resolve: Optional[Resolve]) -> Scenario:
    """Read a scenario YAML file, apply ``(dotted.key, value)`` overrides, validate it and pass
    it through ``resolve`` (see :func:`~simkit.spec.convert.scenario_from_dict`;
    :func:`simkit.load_scenario` resolves).

    A relative path field (:mod:`simkit.spec.paths`: a trace, an empirical length, a pass
    table, a model config, a policy's ``search_path``) in the file is resolved against the
    file's folder; one given as an override against the current folder.

    Raises:
        ConfigError: unreadable file (a FIFO or device included: never read), YAML syntax
            error, or invalid fields (one line each).
    """
    try:
        text = read_text(path, encoding="utf-8-sig")
    except NotUtf8 as exc:
        raise ConfigError([f"{exc}; expected a YAML scenario"]) from None
    except OSError as exc:
        raise ConfigError([f"{path}: cannot read scenario file: {exc.strerror or exc}"]) from None
    data = yaml_load(text, source=path)
    if data is None:
        raise ConfigError([f"{path}: the file is empty; expected a scenario mapping @ $"])
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: expected a mapping at the top level, got {type(data).__name__} @ $"])
    try:
        data = resolve_paths(_unalias(data), os.path.dirname(os.path.abspath(path)))  # against its folder
    except RecursionError:
        raise ConfigError([f"{path}: the scenario is nested too deeply @ $"]) from None
    except ValueError as exc:
        raise ConfigError([f"{path}: {exc} @ $"]) from None
    base_dir = os.path.dirname(os.path.abspath(path))
    created: dict = {}  #: mappings the overrides made -> the override that made each
    for key, value in overrides or []:
        _set_dotted(data, key, value, source=f"--set {key}", created=created)
    # the overrides' paths against the current folder (scenario_from_dict does it again: the
    # file's are absolute by now); then a policy switched to ``kind: python`` by --set imports
    # from the scenario's folder
    data = resolve_paths(data, os.getcwd())
    _default_search_path(data, base_dir)
    try:
        return scenario_from_dict(data, source=path, resolve=resolve)
    except ConfigError as exc:
        raise ConfigError([_blame_override(m, path, overrides or [], created) for m in exc.messages]) from None


def _blame_override(message: str, path: str, overrides: list[tuple[str, Any]],
                    created: Optional[dict] = None) -> str:
    """Name the ``--set`` that introduced the bad value instead of the file, when one did
    (``created``: the mappings the overrides made, each the problem of the one that made it)."""
    where = message.rpartition(" @ ")[2]
    for made, key in (created or {}).items():
        if where == made or where.startswith(made + "."):
            return f"--set {key}" + message[len(path):]
    for key, value in reversed(overrides):
        target = "$." + key
        if target == where + ".kind" and "unknown field(s)" in message:
            # the other fields of the section are the old kind's: a new kind replaces the whole section
            section = key.rpartition(".")[0]
            text, _, at = message.rpartition(" @ ")
            return (f"--set {key}{text[len(path):]} (the section keeps its other fields; replace it whole: "
                    f"--set '{section}={{kind: {value}}}') @ {at}")
        if where == target or where.startswith(target + ".") or target == where + ".kind":
            return f"--set {key}" + message[len(path):]
        if target.startswith(where + "."):
            below = target[len(where) + 1:].split(".")[0]  # the segment the override wrote
            text = message.rpartition(" @ ")[0]
            if "unknown field(s)" in message:
                if below in text.partition("unknown field(s) ")[2].split(", "):
                    return f"--set {key}" + message[len(path):]
            elif (f"'{below}'" in text or f"'{below}." in text or f" {below} (" in text or f" {below}:" in text
                  or " expected " in f" {text.split(': ', 1)[-1]}"):
                # a rule of the mapping that names the field the override set ("'trtllm'
                # settings apply only to ...", "'sglang.enable_mixed_chunk' needs ...", "need
                # min_workers (5) <= workers (1)"), or a scalar the override turned into a mapping
                return f"--set {key}" + message[len(path):]
    return message


def override(scenario: Scenario, changes: dict[str, Any], *, resolve: Optional[Resolve]) -> Scenario:
    """A copy of ``scenario`` with dotted-path ``changes`` applied, re-validated and passed
    through ``resolve`` (:func:`simkit.override` resolves).

    Example: ``override(s, {"pools.decode.workers": 8})``.

    Raises:
        ConfigError: a change makes the scenario invalid.
    """
    data = to_dict(scenario)
    for key, value in changes.items():
        _set_dotted(data, key, value, source=f"override {key}")
    return scenario_from_dict(data, source="override", resolve=resolve)  # new relative paths: the current folder


class _Yaml12Dumper(yaml.SafeDumper):
    """SafeDumper that quotes every string the YAML 1.2 loader above would read as another
    type: PyYAML decides by YAML 1.1's rules, so it wrote a name ``1e5`` or ``0o17`` plain,
    and the resolved scenario then read it back as a number."""


_Yaml12Dumper.yaml_implicit_resolvers = {}
for _tag, _rx, _first in _RESOLVERS:
    _Yaml12Dumper.add_implicit_resolver(_tag, re.compile(_rx), _first)


def dump_scenario(scenario: Scenario) -> str:
    """YAML text of the resolved scenario; ``load_scenario`` on it gives an equal scenario."""
    return yaml.dump(to_dict(scenario), Dumper=_Yaml12Dumper, sort_keys=False, default_flow_style=False)
