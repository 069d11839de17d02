"""voxgate.client's place: a client of the gateway's wire vocabulary and codecs, which imports no
server stack (torch, the engine, Starlette, uvicorn) and which nothing on the server imports."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_client_loads_no_server_stack():
    code = (
        "import sys\n"
        "import voxgate.client, voxgate.client.sync\n"
        "heavy = [m for m in ('torch', 'engine', 'models', 'starlette', 'uvicorn')"
        " if m in sys.modules]\n"
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
    assert "HEAVY []" in result.stdout


def test_nothing_on_the_server_imports_the_client():
    offenders = []
    for package in ("gateway", "engine", "models", "training"):
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                if any(n.split(".")[0] == "voxgate" for n in names):
                    offenders.append(str(path.relative_to(REPO)))
    assert not offenders, offenders
