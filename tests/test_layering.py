"""Import rules between simkit's packages (docs/architecture.md): each package imports only the
packages below it, no module imports another in a cycle (function-local imports included), only
the SimPy shells import simpy, and each third-party library stays in the module that owns it.
Read from the source files with ast, so a rule broken anywhere fails here."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

SIMKIT = REPO / "simkit"

#: what each package (or top-level module) may import from simkit; "<root>" is simkit/__init__.py
MAY_IMPORT = {
    "core": set(),  # data and helpers everything may import
    "spec": {"core"},  # specs are data: no behaviour
    "workload": {"core", "spec"},
    "engine": {"core", "spec"},  # one worker's pass, pure
    "cluster": {"core", "spec", "engine"},  # the SimPy processes
    "sim": {"core", "spec", "workload", "engine", "cluster"},  # the composition root
    "output": {"core", "spec"},  # never the simulation
    "api": {"core", "spec", "workload", "engine", "cluster", "sim", "output"},
    "cli": {"<root>", "api", "core", "spec", "workload", "engine", "cluster", "sim", "output"},
    "__main__": {"cli"},
    "<root>": {"api", "output", "sim", "spec"},  # the public names
    # public re-exports at their documented paths (simkit.request.Request, simkit.planner.Decision)
    "request": {"core"},
    "planner": {"cluster"},
}
#: packages whose modules may import simpy: the simulation's processes and their wiring
SIMPY = {"cluster", "sim"}
#: third-party libraries owned by one module or package
OWNERS = {
    "matplotlib": {"simkit.output.plots"},
    "cattrs": {"simkit.spec.convert"},
    "yaml": {"simkit.spec.loader"},
    "pandas": {"output", "api", "cli"},
    "pyarrow": {"output"},
    "tqdm": {"output"},
    "aiconfigurator_core": {"simkit.engine.latency.aic"},
}
#: public re-export modules: nothing inside simkit imports them
SHIMS = {"simkit.request", "simkit.planner"}


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def unit(module: str) -> str:
    """The package (or top-level module) a simkit module belongs to."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "<root>"


MODULES = {module_name(p): p for p in sorted(SIMKIT.rglob("*.py"))}


def imports(path: Path):
    """(line, imported module) of every import in ``path``, function-local ones included;
    ``from simkit.x import y`` names the module simkit.x.y when that is a module."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; simkit imports absolutely"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield node.lineno, sub if sub in MODULES else node.module


def test_every_module_belongs_to_a_package_with_rules():
    assert {unit(m) for m in MODULES} <= set(MAY_IMPORT), "a package with no rules in tests/test_layering.py"
    for name in ("core", "spec", "workload", "engine", "cluster", "output", "cli"):
        assert f"simkit.{name}" in MODULES, f"simkit/{name}/__init__.py is missing"


def test_packages_import_only_the_layers_below_them():
    problems = []
    for module, path in MODULES.items():
        src = unit(module)
        for lineno, target in imports(path):
            top = target.split(".")[0]
            where = f"{path.relative_to(REPO)}:{lineno}"
            if top == "simkit":
                dst = unit(target)
                if target in SHIMS and module != "simkit":
                    problems.append(f"{where} imports the public re-export {target}")
                elif dst != src and dst not in MAY_IMPORT[src]:
                    problems.append(f"{where} ({src}) imports {target} ({dst})")
            elif top == "simpy" and src not in SIMPY:
                problems.append(f"{where} imports simpy outside {sorted(SIMPY)}")
            elif top in OWNERS and not ({module, src} & OWNERS[top]):
                problems.append(f"{where} imports {top} (only {sorted(OWNERS[top])})")
    assert problems == []


def test_no_module_imports_another_in_a_cycle():
    graph = {m: {t for _, t in imports(p) if t in MODULES and t != m} for m, p in MODULES.items()}
    cycles = []
    state: dict[str, int] = {}  # 1: on the DFS path, 2: done

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(" -> ".join(path[path.index(t):] + [m, t]) if t in path else f"{m} -> {t}")
            elif t not in state:
                visit(t, path + [m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert cycles == []


def test_each_package_says_what_it_holds_and_what_it_may_import():
    for module, path in MODULES.items():
        if path.name == "__init__.py" and module != "simkit":
            doc = ast.get_docstring(ast.parse(path.read_text())) or ""
            assert "import" in doc and len(doc) > 200, f"{path.relative_to(REPO)}: no package docstring"


def test_a_long_module_says_why_it_is_one_module():
    for module, path in MODULES.items():
        text = path.read_text()
        if text.count("\n") > 600:
            doc = ast.get_docstring(ast.parse(text)) or ""
            assert "one module" in doc, f"{path.relative_to(REPO)}: over 600 lines, and its docstring " \
                                        "does not say why it is one module"
