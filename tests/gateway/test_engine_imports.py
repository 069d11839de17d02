"""The gateway talks to the engine through engine/api.py alone; the only other engine modules
it imports build an engine or serve its process, each where engine/api.py's docstring says."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"

# Engine modules besides engine.api, and the gateway modules allowed to import each.
ALLOWED = {
    "engine.config": {"config.py", "settings.py", "synth.py"},
    # ConfigError without torch, for the command line (engine.api loads torch).
    "engine.request": {"config.py", "settings.py"},
    "engine.factory": {"app.py", "synth.py"},
    "engine.engine_host": {"ray_cluster.py"},
    "engine.ray_engine": {"ray_cluster.py"},
    "engine.parent_watch": {"gateway_processes.py"},
    "engine.gc_pauses": {"metrics.py"},
}


def engine_imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "engine" or name.startswith("engine.")}


def test_the_gateway_imports_of_the_engine_only_its_contract_and_what_builds_it():
    strays = []
    for path in sorted(GATEWAY.glob("*.py")):
        for module in engine_imports(path) - {"engine.api"}:
            if path.name not in ALLOWED.get(module, set()):
                strays.append(f"gateway/{path.name} imports {module}")
    assert not strays, "import these from engine.api instead: " + "; ".join(strays)
