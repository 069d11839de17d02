"""SNAC's residual units, and its Snakes with the convs after them, as Triton kernels (how
CUDA graphs run them, models/codecs/snac_triton.py) decode what the torch ops do: the
kernels run in Triton's interpreter on the CPU, in a subprocess (snac_triton_interpreted.py)
with Triton from `make reference-deps` (.ref/triton-interpreter): the project's own
environment has no Triton on the CPU. On the GPU, tests/gpu/test_gpu_engine.py's
test_compiled_detokenizer_graphs_equal_eager runs them compiled, in CUDA graphs. Compiled
for sm_90 here (no GPU needed), no tile spills registers or outgrows shared memory."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.reference_dirs import reference_dir

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("snac_triton_interpreted.py")
RESOURCES = REPO / "bench" / "triton_resources.py"
HOPPER_SHARED_BYTES = 232_448  # an H100's or H200's shared memory a block may take


def triton_dir() -> Path:
    return reference_dir("triton-interpreter")


def _triton_or_skip() -> Path:
    root = triton_dir()
    if not (root / "triton").is_dir():
        pytest.skip(f"Triton is not installed in {root}: run `make reference-deps`")
    return root


def _run(script: Path, root: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env={**os.environ, **env, "PYTHONPATH": f"{REPO}{os.pathsep}{root}"},
    )


def test_the_triton_kernels_decode_a_stream_as_the_torch_ops_do():
    """Four calls of two streams (a first call of one latent step, shorter than the widest
    units' reach; one stream ending inside the second call and flushed by the last): the
    audio and the carried state equal the torch ops' to float32 rounding, and the residual
    units leave the blocks to compile (the convs after a Snake stay, on their joined line). Each tile the GPU tunes the taps-and-mix kernel over
    computes the same unit."""
    done = _run(SCRIPT, _triton_or_skip(), TRITON_INTERPRET="1")
    assert done.returncode == 0, done.stderr[-4000:]
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    blocks, calls, tiles = lines[0], lines[1:-1], lines[-1]["tiles"]
    # 22 blocks compile with torch ops. With the kernels the 12 residual units run them, each
    # upsampling step and the output conv take their Snake's line from a join kernel,
    # and the noise step after each upsampling runs in the upsampling's kernel: of the
    # compiled blocks only the two symmetric convs' remain.
    assert blocks == {"compiled_blocks": 2, "compiled_blocks_torch": 22, "joined_convs": 9}
    assert [c["steps"] for c in calls] == [1, 4, 1, 1]
    for call in calls:
        assert call["samples"] == call["steps"] * 512
        assert call["rms"] > 0.01 and call["state_rms"] > 0.01
        assert call["max_err"] < 1e-5
        assert call["state_max_err"] < 1e-5
    # Every tile the GPU may pick computes the same unit.
    assert tiles and max(tiles) < 1e-5


def test_every_tile_the_gpu_may_pick_fits_an_sm_without_spilling():
    """The kernels compiled for sm_90 here (bench/triton_resources.py: Triton's compiler and
    ptxas, no GPU): at each SNAC width every taps-and-mix tile, and the join (a residual
    unit's, a Snake's before a conv), keep to their registers (no spilled bytes) and to the
    shared memory a block may take, so none is slowed by local-memory traffic or refused at launch (a three-stage 128 × 128 tile
    asked for 297 KB and did not launch on an H100)."""
    done = _run(RESOURCES, _triton_or_skip())
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads(line) for line in done.stdout.splitlines()]
    assert {r["kernel"] for r in reports} == {"_unit_taps_mix", "_join", "_upsample_noise"}
    assert {r.get("width") for r in reports} == {64, 128, 256, 512, None}
    for used in reports:
        assert used["spilled"] == 0, used
        assert 0 < used["registers"] <= 255 and used["shared"] <= HOPPER_SHARED_BYTES, used
        # One stage: Triton's default of three made the taps-and-mix tiles ~30 % slower.
        assert used.get("stages", 1) == 1, used
