"""--compile-codec's regional compile (engine/cuda_graphs.py) on the CPU: a block whose
compile fails falls back to its eager forward, with the blocks of its kind, and a warning
naming it; other kinds stay compiled, and the server starts either way."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import torch
from torch import nn

from engine.cuda_graphs import compile_regions, compiled_of, uncompile_regions, warm_up

ROOT = Path(__file__).resolve().parents[2]


class HostBranch(nn.Module):
    """A block `fullgraph` cannot compile: its branch depends on a tensor's value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum().item() > 0 else x - 1


class Plain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1


class Chain(nn.Module):
    def __init__(self, *blocks: nn.Module) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def test_a_failed_compile_puts_its_kind_back_on_eager_and_keeps_the_others(caplog):
    torch._dynamo.reset()
    broken, sibling, plain = HostBranch(), HostBranch(), Plain()
    chain = Chain(broken, sibling, plain)
    compile_regions([broken, sibling, plain])
    x = torch.ones(3)
    with caplog.at_level(logging.WARNING, logger="voxgate.graphs"):
        warm_up(chain, [x])
        out = chain(x)
    torch.testing.assert_close(out, torch.relu(x * 4) + 1)
    assert compiled_of([broken, sibling, plain]) == [plain]
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1  # the kind fell back once, not once a block
    assert "compiling HostBranch (2 blocks) failed" in warned[0]
    assert "--no-compile-codec" in warned[0]
    assert "Unsupported" in warned[0] or "UserError" in warned[0]


def test_an_error_of_the_blocks_own_code_still_raises():
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ torch.ones(5, 5)  # wrong shape for a 3-vector: the block's own bug

    torch._dynamo.reset()
    block = Broken()
    compile_regions([block])
    with pytest.raises(RuntimeError):
        warm_up(block, [torch.ones(3)])
    with pytest.raises(RuntimeError):  # and eager says the same
        uncompile_regions([block])
        block(torch.ones(3))


def test_a_working_compile_is_kept_and_uncompile_undoes_it():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    block = Plain()
    compile_regions([block])
    x = torch.randn(4)
    warm_up(block, [x])
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1
    torch.testing.assert_close(block(x), torch.relu(x) + 1)
    assert compiled_of([block, Plain()]) == [block]
    uncompile_regions([block])
    assert compiled_of([block]) == []
    block(torch.randn(5, 2))  # a new shape: eager, so nothing compiles
    assert counters["stats"]["unique_graphs"] == graphs


class Scaled(nn.Module):
    """One kind of block whose attribute makes a program of its own per value (as SNAC's
    residual steps' dilations do)."""

    def __init__(self, k: int) -> None:
        super().__init__()
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.k


def test_more_programs_than_the_default_recompile_limit_all_compile(monkeypatch):
    """Every block's program is cached on one code object, which dynamo refuses to compile
    past its recompile limit under fullgraph (SNAC's 22 programs in float32, then its float16
    ones, in one process): compile_regions raises the limit with the blocks it was given.
    The limit is dynamo's, whatever compiles the graphs it captures: they run as captured
    here (backend "eager"), where Inductor would spend ~20 s of CPU on 34 programs."""
    monkeypatch.setattr(torch, "compile", partial(torch.compile, backend="eager"))
    torch._dynamo.reset()
    blocks = [Scaled(k) for k in range(1, 35)]  # 34 programs: past a limit of 32
    compile_regions(blocks)
    x = torch.ones(2)
    with torch.inference_mode():
        outs = [block(x) for block in blocks]
    assert compiled_of(blocks) == blocks
    assert [float(o[0]) for o in outs] == [float(k) for k in range(1, 35)]


def test_a_compile_refused_at_the_recompile_limit_falls_back_to_eager(caplog):
    """Should the limit still be hit (another library compiling on the same code object), the
    block runs eagerly, with the compile warning, rather than failing the caller."""
    from engine.compile_guard import CompiledOrEager

    def refused(x):
        raise torch._dynamo.exc.FailOnRecompileLimitHit("Hard failure due to fullgraph=True")

    guarded = CompiledOrEager(refused, lambda x: x + 1, "Scaled (3 blocks)")
    with caplog.at_level(logging.WARNING, logger="voxgate.graphs"):
        assert guarded(1) == 2 and guarded(2) == 3
    assert guarded.failed
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 1 and "FailOnRecompileLimitHit" in warned[0]


def test_a_server_that_compiles_nothing_never_loads_the_compiler(tmp_path):
    """torch._dynamo is ~70 MB resident: the default model's engine on a CPU (no codec
    compiled) is built without importing it, as a fresh `voxgate serve` builds it."""
    script = (
        "import sys\n"
        "from engine.config import EngineConfig\n"
        "from engine.factory import load_engine_loop, serving_defaults\n"
        "from models.registry import DEFAULT_MODEL\n"
        "config = serving_defaults(EngineConfig(), DEFAULT_MODEL)\n"
        "load_engine_loop(DEFAULT_MODEL, None, config)\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "False"
