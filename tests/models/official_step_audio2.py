"""StepFun's official Step-Audio2 code (github.com/stepfun-ai/Step-Audio2: `token2wav.py` and
the `cosyvoice2/` modules it builds from flow.yaml) as the independent reference of the
token2wav parity tests. It is not a package on PyPI: `make reference-deps` clones it at a
pinned commit into the git-ignored `.ref/step_audio2` (or $VOXGATE_REFERENCE_DIR/step_audio2);
offline, or where its modules do not import, the tests that need it skip and say why."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from tests.models.reference_dirs import reference_dir


def official_dir() -> Path:
    return reference_dir("step_audio2")


def import_official(*names: str):
    """The official modules by dotted name (e.g. "cosyvoice2.flow.decoder_dit"), or a skip."""
    root = official_dir()
    if not (root / "cosyvoice2").is_dir():
        pytest.skip(
            f"StepFun's Step-Audio2 code is not in {root} (`make reference-deps` clones it from "
            "GitHub; offline it cannot)"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        return tuple(importlib.import_module(n) for n in names)
    except ImportError as exc:  # a module it imports that this venv lacks
        pytest.skip(f"StepFun's Step-Audio2 code does not import here: {exc}")
