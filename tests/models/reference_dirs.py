"""Where `make reference-deps` puts the independent references (and Triton for its
interpreter): the git-ignored `.ref/` folder, or the one VOXGATE_REFERENCE_DIR names."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def reference_dir(*parts: str) -> Path:
    """The references' folder, or a folder inside it."""
    return Path(os.environ.get("VOXGATE_REFERENCE_DIR", REPO / ".ref"), *parts)
