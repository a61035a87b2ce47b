"""User policies written in Python: import ``package.module:ClassName`` and check its protocol.

A ``kind: python`` router or planner names a class by ``path`` and gives it free-form
``params``; the class is imported with its ``search_path`` (the scenario file's folder unless
set) at the front of ``sys.path``, checked for the protocol's method, and built once at load
time as ``ClassName(params)`` so a bad constructor fails before the run. Every failure is one
:class:`~simkit.spec.ConfigError` line naming the field: ``$.router.path: module
'policies.x' has no class 'Y'``.

Part of :mod:`simkit.cluster`: imports specs and the standard library only.
"""

from __future__ import annotations

import importlib
import sys
from typing import Callable

from simkit.spec import ConfigError, PythonPlanner, PythonRouter

__all__ = ["load_policy", "policy_factory"]

#: what each kind of user policy must provide
PROTOCOLS = {"router": ("pick", "pick(request, workers) -> one of workers"),
             "planner": ("plan", "plan(snapshot) -> Decision or {pool: workers}")}


def load_policy(spec, what: str) -> Callable[[], object]:
    """A factory building fresh instances of the class ``spec`` names (``spec`` is a
    :class:`~simkit.spec.PythonRouter` or :class:`~simkit.spec.PythonPlanner`; ``what`` is
    ``router`` or ``planner``).

    Raises:
        ConfigError: the module does not import, the class is missing, lacks the protocol's
            method, or its constructor fails on ``params``.
    """
    assert isinstance(spec, (PythonRouter, PythonPlanner))
    where = f"$.{what}.path"
    module_name, _, class_name = spec.path.partition(":")
    added = spec.search_path is not None and spec.search_path not in sys.path
    if added:
        sys.path.insert(0, spec.search_path)
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # the user's module: any error while importing it is theirs
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        raise ConfigError([f"{what}: cannot import module {module_name!r} (search path "
                           f"{spec.search_path}): {reason} @ {where}"]) from None
    finally:
        if added:
            sys.path.remove(spec.search_path)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ConfigError([f"{what}: module {module_name!r} has no {class_name!r} @ {where}"])
    factory = policy_factory(cls, what, dict(spec.params), where)
    factory()  # fail now, not mid-run, if the constructor rejects its params
    return factory


def policy_factory(obj, what: str, params: dict | None = None, where: str = "") -> Callable[[], object]:
    """A factory for a user policy given as a class (built as ``cls(params)``, or ``cls()`` when
    ``params`` is None) or as an instance (returned as is, so shared by every decision point).

    Raises:
        ConfigError: it lacks the protocol's method, or its constructor fails.
    """
    method, signature = PROTOCOLS[what]
    name = getattr(obj, "__name__", type(obj).__name__)
    if not callable(getattr(obj, method, None)):
        raise ConfigError([f"{what}: {name} is not a {what} policy: it needs a method {signature}"
                           + (f" @ {where}" if where else "")])
    if not isinstance(obj, type):
        return lambda: obj

    def build():
        try:
            return obj(params) if params is not None else obj()
        except Exception as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise ConfigError([f"{what}: {name}({params!r}) failed: {reason}" + (f" @ {where}" if where else "")]) \
                from None

    return build
