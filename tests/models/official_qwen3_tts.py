"""The official Qwen3-TTS package (`qwen-tts` on PyPI) as an independent reference.

`make reference-deps` installs it with `--no-deps` into the git-ignored `.ref/` folder (or the
folder named by VOXGATE_REFERENCE_DIR), and the transformers 4.57.3 it is written for (with
the huggingface-hub and tokenizers versions that transformers accepts) into `.ref/tf457`. The
project's own environment (transformers 5.x, torch 2.13) is never changed: the reference runs
in a subprocess (qwen3_tts_reference.py) that puts those folders first on its path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.models.reference_dirs import reference_dir

SCRIPT = Path(__file__).with_name("qwen3_tts_reference.py")


def run_official(job: dict, workdir: Path) -> dict[str, np.ndarray]:
    """Run a job (see qwen3_tts_reference.py) → its arrays; skips the test with the install
    command when the reference is missing."""
    root = reference_dir()
    if not (root / "qwen_tts").is_dir() or not (root / "tf457" / "transformers").is_dir():
        pytest.skip(
            f"the official qwen-tts reference is not installed in {root}: run `make reference-deps`"
        )
    job_path, out_path = workdir / "job.json", workdir / "out.npz"
    job_path.write_text(json.dumps(job))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(root), str(job_path), str(out_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": "", "TRANSFORMERS_VERBOSITY": "error"},
    )
    if done.returncode != 0:
        raise AssertionError(f"the qwen-tts reference failed:\n{done.stderr[-4000:]}")
    with np.load(out_path) as arrays:
        return dict(arrays)
