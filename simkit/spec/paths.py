"""The path fields of a scenario, in one place: which fields name a file or folder, how a
relative one is made absolute, and which ones a run reads.

Path fields, wherever they sit (the workload, a pool's latency, an empirical length of a
session's turns...), are told by the ``kind`` of the mapping that holds them:

- ``path`` of a ``trace`` workload, an ``empirical`` length and a ``table`` latency model: a file;
- ``model`` of a ``roofline`` or ``aic`` latency model, and ``draft_model`` of a pool's
  ``speculative`` settings (``method: draft_model``), when it names a file (ends in ``.json``
  or holds a ``/``; a shipped model name does neither);
- ``search_path`` of a ``python`` router or planner: the folder its module is imported from.

:func:`resolve_paths` makes them absolute (the loader: against the scenario file's folder for
values from the file, against the current folder for ``--set`` overrides and dicts built in
Python), so that ``scenario.resolved.yaml`` reruns from any folder. :func:`path_fields` lists
them on a structured scenario. Imports attrs and the other spec modules only.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import attrs

from simkit.spec.cluster import PythonPlanner, PythonRouter
from simkit.spec.latency import DeploymentLatency, TableLatency
from simkit.spec.pools import SpeculativeSpec
from simkit.spec.workload import EmpiricalLength, TraceWorkload

__all__ = ["is_model_file", "path_fields", "resolve_paths"]

#: kinds whose ``path`` names a file
_FILE_KINDS = ("trace", "empirical", "table")
#: kinds whose ``model`` may name a config.json
_MODEL_KINDS = ("roofline", "aic")


def is_model_file(model: str) -> bool:
    """Whether a latency model's ``model`` names a config.json file rather than a shipped
    model (shipped names have no ``.json`` and no ``/``)."""
    return model.endswith(".json") or "/" in model or os.sep in model


def _absolute(value: str, base_dir: str) -> str:
    return os.path.normpath(os.path.join(base_dir, os.path.expanduser(value)))


def resolve_paths(node: Any, base_dir: str) -> Any:
    """A copy of ``node`` (a scenario mapping, or any part of one) whose relative path fields
    are made absolute against ``base_dir``; absolute ones are kept as they are, so resolving
    twice changes nothing."""
    if isinstance(node, list):
        return [resolve_paths(item, base_dir) for item in node]
    if not isinstance(node, dict):
        return node
    out = {key: resolve_paths(value, base_dir) for key, value in node.items()}
    kind = out.get("kind")
    fields = []
    if kind in _FILE_KINDS:
        fields.append("path")
    if kind in _MODEL_KINDS and isinstance(out.get("model"), str) and is_model_file(out["model"]):
        fields.append("model")
    if out.get("method") == "draft_model" and isinstance(out.get("draft_model"), str) and is_model_file(
            out["draft_model"]):
        fields.append("draft_model")
    if kind == "python":
        fields.append("search_path")
    for name in fields:
        if isinstance(out.get(name), str) and out[name]:
            out[name] = _absolute(out[name], base_dir)
    return out


def path_fields(spec: Any, where: str = "$") -> Iterator[tuple[str, str, Any]]:
    """The path fields of a structured scenario (or any spec in it), walked through nested
    specs and lists: ``(field path, kind, value)`` with kind ``file`` (value: the path of a
    file it reads: a trace, an empirical length, a pass table, a model's or a draft model's
    config.json) or ``module`` (value: a Python policy's spec, whose module is found on its
    ``search_path``)."""
    if isinstance(spec, (TraceWorkload, EmpiricalLength, TableLatency)):
        yield f"{where}.path", "file", spec.path
    elif isinstance(spec, DeploymentLatency) and is_model_file(spec.model):
        yield f"{where}.model", "file", spec.model
    elif isinstance(spec, SpeculativeSpec) and spec.draft_model and is_model_file(spec.draft_model):
        yield f"{where}.draft_model", "file", spec.draft_model
    elif isinstance(spec, (PythonRouter, PythonPlanner)):
        yield f"{where}.path", "module", spec
    if not attrs.has(type(spec)):
        return
    for a in attrs.fields(type(spec)):
        value = getattr(spec, a.name)
        if attrs.has(type(value)):
            yield from path_fields(value, f"{where}.{a.name}")
        elif isinstance(value, (list, tuple)):
            for i, item in enumerate(value):
                if attrs.has(type(item)):
                    yield from path_fields(item, f"{where}.{a.name}[{i}]")
