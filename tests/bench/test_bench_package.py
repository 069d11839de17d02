"""The `voxbench` package's place in the repository: it imports the gateway, the engine and the
models, none of them imports it (the `voxgate` entry point names it only to register `bench`),
and `voxgate bench --help` stays light."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# The one module outside voxbench that may name it: the command line registers `voxgate bench`.
ENTRY_POINT = REPO / "gateway" / "cli.py"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_nothing_in_the_gateway_engine_or_models_imports_the_bench_package():
    offenders = []
    for package in ("gateway", "engine", "models", "training"):
        for path in sorted((REPO / package).rglob("*.py")):
            if path == ENTRY_POINT:
                continue
            bench = {m for m in imported_modules(path) if m.split(".")[0] == "voxbench"}
            if bench:
                offenders.append(f"{path.relative_to(REPO)}: {sorted(bench)}")
    assert not offenders, "imports pointing back at voxbench:\n" + "\n".join(offenders)


def test_the_bench_package_reaches_the_engine_through_its_contract_for_serving_values():
    # Building engines (engine.config, engine.factory) and reading traces is the benchmark's
    # own business; what a request, its stream and its errors are comes from engine.api. The
    # admission simulator is the exception: it drives the scheduler itself, with no server.
    contract_only = {"engine.client", "engine.core", "engine.outputs", "engine.request"}
    simulator = REPO / "voxbench" / "realtime_sim.py"
    offenders = {
        f"{path.relative_to(REPO)}: {sorted(imported_modules(path) & contract_only)}"
        for path in sorted((REPO / "voxbench").glob("*.py"))
        if imported_modules(path) & contract_only and path != simulator
    }
    assert not offenders, sorted(offenders)


def test_voxgate_bench_help_loads_no_torch_and_no_server_stack():
    code = (
        "import sys\n"
        "from gateway.cli import build_parser\n"
        "try:\n"
        "    build_parser().parse_args(['bench', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = [m for m in ('torch', 'websockets', 'starlette', 'uvicorn') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=os.environ.copy(),
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    assert "--capacity" in result.stdout  # the bench's own options were printed
    assert "HEAVY []" in result.stdout
