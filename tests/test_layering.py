"""Import rules (ARCHITECTURE.md 2.6): each module imports only its own layer or lower ones;
only L3/L4 import simpy; only plots imports matplotlib; only config imports cattrs and yaml."""

from __future__ import annotations

import ast

from conftest import REPO

LAYERS = {
    "units": 0, "rng": 0,
    "config": 1, "request": 1, "records": 1, "hardware": 1,
    "trace": 2, "spool": 2, "engine": 2, "aic": 2, "kvcache": 2, "scheduler": 2,
    "probe": 3, "messages": 3, "source": 3, "worker": 3, "link": 3, "router": 3, "collector": 3,
    "pool": 3, "planner": 3, "plugins": 1,
    "sim": 4,
    "report": 5, "plots": 5,
    "output": 6, "cli": 6, "__main__": 6, "api": 6, "progress": 6, "sweep": 6,
}
ONLY = {"simpy": {3, 4}, "matplotlib": {5}, "cattrs": {1}, "yaml": {1}, "pandas": {5, 6}, "tqdm": {6}}
ONLY_MODULES = {"matplotlib": {"plots"}, "cattrs": {"config"}, "yaml": {"config"}}


def imports(path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.lineno, node.module


def test_every_module_has_a_layer_and_respects_it():
    problems = []
    for path in sorted((REPO / "simkit").glob("*.py")):
        name = path.stem
        if name == "__init__":
            continue
        assert name in LAYERS, f"simkit/{name}.py has no layer in tests/test_layering.py"
        layer = LAYERS[name]
        for lineno, module in imports(path):
            top, _, rest = module.partition(".")
            if top == "simkit" and rest:
                target = rest.split(".")[0]
                if LAYERS[target] > layer:
                    problems.append(f"simkit/{name}.py:{lineno} imports higher-layer simkit.{target}")
            if top in ONLY and layer not in ONLY[top]:
                problems.append(f"simkit/{name}.py:{lineno} imports {top} (layer {layer})")
            if top in ONLY_MODULES and name not in ONLY_MODULES[top]:
                problems.append(f"simkit/{name}.py:{lineno} imports {top}")
    assert problems == []
