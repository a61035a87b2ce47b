"""User policies written in Python: import ``package.module:ClassName`` and check its protocol.

A ``kind: python`` router or planner names a class by ``path`` and gives it free-form
``params``; the class is imported from its ``search_path`` (the scenario file's folder unless
set), checked for the protocol's method, and built once at load time as ``ClassName(params)``
so a bad constructor fails before the run.

Each load reads the module's source afresh: the modules found in ``search_path`` are compiled
from their files (no bytecode cache) and taken out of ``sys.modules`` again afterwards (what
they shadowed is put back). So two sweep points, or two ``simkit.run`` calls, whose policies
share a module name but not a folder each get their own, and an edited policy file is read
again in a notebook. A module not found in ``search_path`` (an installed package) is imported
as Python does. Every failure is one
:class:`~simkit.spec.ConfigError` line naming the field: ``$.router.path: module
'policies.x' has no class 'Y'``.

Part of :mod:`simkit.cluster`: imports specs and the standard library only.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
from typing import Callable, Optional

from simkit.spec import ConfigError, PythonPlanner, PythonRouter

__all__ = ["load_policy", "module_files", "policy_factory"]

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
    try:
        module = _import_fresh(module_name, spec.search_path)
    except (Exception, SystemExit) as exc:  # the user's module: any error while importing it is theirs
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())
        if spec.search_path is not None:  # its file is there but not one Python reads (a FIFO)
            candidate = os.path.join(spec.search_path, *module_name.split(".")) + ".py"
            if os.path.lexists(candidate) and not os.path.isfile(candidate):
                reason = f"{candidate} is not a regular file"
        raise ConfigError([f"{what}: cannot import module {module_name!r} (search path "
                           f"{spec.search_path}): {reason} @ {where}"]) from None
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
        except (Exception, SystemExit) as exc:
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            raise ConfigError([f"{what}: {name}({params!r}) failed: {reason}" + (f" @ {where}" if where else "")]) \
                from None

    return build


class _SourceLoader(importlib.machinery.SourceFileLoader):
    """Compiles a module from its source every time: no cached bytecode is read (a file
    edited within the same second as its .pyc would otherwise look unchanged) or written."""

    def path_stats(self, path):  # SourceLoader then skips the bytecode cache
        raise OSError("simkit policies are always compiled from source")


def _under(path: Optional[str], root: str) -> bool:
    if not isinstance(path, str) or not path:
        return False
    real = os.path.realpath(path)
    return real == root or real.startswith(root + os.sep)


class _FolderFinder:
    """A meta path finder for the modules in one folder (a policy's ``search_path``), loaded
    from source by :class:`_SourceLoader`; anything else is left to Python's finders."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        found = importlib.machinery.PathFinder.find_spec(fullname, [self.root] if path is None else path)
        if found is None or not (found.origin or "").endswith(".py") or not _under(found.origin, self.root):
            return None
        found.loader = _SourceLoader(fullname, found.origin)
        return found


def module_files(spec) -> list[str]:
    """The source files a Python policy's module is made of, found in its ``search_path``
    without importing it: each package's ``__init__.py`` on the way and the module's own file.
    A module not in ``search_path`` gives the file it would be there (``MODULE/PATH.py``,
    absent): a run does not record it (an installed module), a rerun whose recorded module
    was deleted names it among the missing inputs."""
    module_name = spec.path.partition(":")[0]
    if spec.search_path is None:
        return []
    files, locations = [], [spec.search_path]
    parts = module_name.split(".")
    for i in range(len(parts)):
        found = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations)
        if found is None:
            return [os.path.abspath(os.path.join(spec.search_path, *parts) + ".py")]
        if found.origin and os.path.isfile(found.origin):
            files.append(os.path.abspath(found.origin))
        locations = list(found.submodule_search_locations or [])
    return files


def _import_installed(module_name: str):
    """``importlib.import_module`` without the current folder on the path: a module that is
    not in the policy's folder comes from the installed packages, never from wherever the
    command happens to run (such a module was used, not recorded as an input, and a rerun from
    another folder could not find it)."""
    cwd = os.path.realpath(os.getcwd())
    saved = list(sys.path)
    sys.path[:] = [p for p in saved if os.path.realpath(p or os.curdir) != cwd]
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path[:] = saved


def _import_fresh(module_name: str, search_path: Optional[str]):
    """Import ``module_name`` from ``search_path`` afresh (see the module docstring). Only the
    policy's own module tree is shadowed while it loads; other modules already imported (simkit
    itself, when the folder holds it) are left alone, and those first imported by this load
    from the folder are dropped after it."""
    top = module_name.split(".")[0]
    if search_path is None or top == "simkit" or importlib.machinery.PathFinder.find_spec(top, [search_path]) is None:
        return _import_installed(module_name)  # not in the folder: Python's own import
    root = os.path.realpath(search_path)
    importlib.invalidate_caches()  # a module or folder created since the last import is seen

    def in_tree(name: str) -> bool:
        return name == top or name.startswith(top + ".")

    shadowed = {name: module for name, module in list(sys.modules.items()) if in_tree(name)}
    for name in shadowed:
        del sys.modules[name]
    before = set(sys.modules)
    finder = _FolderFinder(root)
    sys.meta_path.insert(0, finder)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.meta_path.remove(finder)
        for name, module in list(sys.modules.items()):
            if in_tree(name) or (name not in before and _under(getattr(module, "__file__", None), root)):
                del sys.modules[name]
        sys.modules.update(shadowed)
