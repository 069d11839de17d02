"""`voxgate serve` start-up errors an operator can fix, each one line (gateway/startup.py,
models/loader.py): a --host that does not resolve, a mistyped preset, weights it cannot read."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gateway.config import GatewaySettings
from gateway.startup import explain, listen_host
from tests.gateway.test_startup import ROOT, assert_one_line, serve


def test_a_host_that_does_not_resolve_is_one_line():
    result = serve("--model", "tiny-orpheus", "--port", "8877", "--host", "foo.invalid")
    line = assert_one_line(result, "cannot resolve --host foo.invalid", "address of this machine")
    assert "engine ready" not in result.stderr  # refused before loading anything
    assert line.count("\n") == 0
    unresolved = socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    assert explain(unresolved, GatewaySettings(host="x.invalid", port=1)) == (
        "cannot resolve --host x.invalid: Name or service not known; give an address of this "
        "machine or a name it resolves"
    )


def test_a_bracketed_ipv6_host_is_the_address_inside():
    assert listen_host("[::]") == "::" and listen_host("[::1]") == "::1"
    assert listen_host("0.0.0.0") == "0.0.0.0" and listen_host("::") == "::"


def test_a_mistyped_preset_is_one_line_with_the_closest_presets():
    result = serve("--model", "tiny-orpheuss", "--port", "0")
    assert_one_line(result, "'tiny-orpheuss' is neither a preset", "did you mean tiny-orpheus?")


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="needs setpriv to drop root")
def test_an_unreadable_weights_folder_is_named_as_the_file_refused():
    """As a user who cannot read the folder (root reads anything: the check runs as nobody)."""
    top = Path(tempfile.mkdtemp(prefix="voxgate-perm-"))
    try:
        top.chmod(0o755)
        folder = top / "weights"
        folder.mkdir()
        (folder / "config.json").write_text('{"model_type": "llama"}')
        folder.chmod(0)
        as_user = [] if os.geteuid() else ["setpriv", "--reuid=65534", "--regid=65534"]
        result = subprocess.run(
            [
                *as_user,
                *(["--clear-groups"] if as_user else []),
                sys.executable,
                "-c",
                PROBE,
                str(folder),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=ROOT,
        )
    finally:
        folder.chmod(0o755)
        shutil.rmtree(top)
    assert result.stdout.strip() == (
        f"cannot read the model's files ({folder}): check --model's path and its permissions"
    ), result.stderr[-2000:]


PROBE = """import sys
sys.path.insert(0, ".")
from gateway.config import GatewaySettings
from gateway.startup import explain
from models.families import family_of
try:
    family_of(sys.argv[1])
except Exception as exc:
    print(explain(exc, GatewaySettings()))
"""
