"""Where generated preset checkpoints live, and how they are written exactly once.

Tiny presets (seeded random weights) and the real configurations of `--random-weights` are
written in their published layout on first use and loaded through the real loaders. Writing
happens in a temporary folder that is renamed into place, so concurrent first uses (tests in
parallel, a server and a CLI) never see half a checkpoint.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_root() -> Path:
    return Path(os.environ.get("VOXGATE_CACHE", Path.home() / ".cache" / "voxgate"))


def materialise(name: str, write: Callable[[Path], None], root: Path | None = None) -> Path:
    """The folder `root/name` (default root: $VOXGATE_CACHE), filled by `write(folder)` the
    first time it is asked for."""
    target = (root or cache_root()) / name
    if not (target / "done").exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{name}-"))
        write(staging)
        (staging / "done").write_text("ok\n")
        try:
            staging.rename(target)
        except OSError:  # another process won the race; its copy is identical
            shutil.rmtree(staging, ignore_errors=True)
    return target
