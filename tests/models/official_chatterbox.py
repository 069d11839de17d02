"""The official Chatterbox package (`chatterbox-tts` on PyPI) as an independent reference.

`make reference-deps` installs it with `--no-deps` into the git-ignored `.ref/` folder (or
the folder named by VOXGATE_REFERENCE_DIR), with only what its S3Gen modules import beyond
the project's own environment: the project's pinned torch, numpy and transformers are never
replaced. The folder goes at the *end* of sys.path, so the project's packages win.

The package's `__init__` files import everything (the TTS front end, torchaudio, librosa,
the watermarker), none of which the decoder modules need; so the packages are registered
here as bare namespaces and only the named submodules run."""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("chatterbox", "chatterbox.models", "chatterbox.models.s3gen")


def reference_dir() -> Path:
    return Path(os.environ.get("VOXGATE_REFERENCE_DIR", REPO / ".ref"))


def import_official(*modules: str) -> list[types.ModuleType]:
    """The named `chatterbox.…` modules, imported from the reference folder; skips the test
    with the install command when the reference is missing."""
    root = reference_dir()
    if not (root / "chatterbox" / "models" / "s3gen").is_dir():
        pytest.skip(
            f"the official chatterbox-tts reference is not installed in {root}: "
            "run `make reference-deps`"
        )
    if str(root) not in sys.path:
        sys.path.append(str(root))
    for name in PACKAGES:
        if name not in sys.modules:
            package = types.ModuleType(name)
            package.__path__ = [str(root / name.replace(".", "/"))]
            sys.modules[name] = package
    # An incomplete install fails loudly (ImportError names the module to add to
    # `make reference-deps`), rather than skipping the comparison unnoticed.
    return [importlib.import_module(m) for m in modules]
