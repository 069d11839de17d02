"""--compile-codec's regional compile (engine/cuda_graphs.py) on the CPU: a compile that
fails falls back to the eager blocks with a warning instead of stopping the server."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from engine.cuda_graphs import compile_regions, compiled_of, uncompile_regions, warm_up


class HostBranch(nn.Module):
    """A block `fullgraph` cannot compile: its branch depends on a tensor's value."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2 if x.sum().item() > 0 else x - 1


class Plain(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) + 1


def test_a_failed_compile_falls_back_to_eager_with_a_warning(caplog):
    torch._dynamo.reset()
    block = HostBranch()
    compile_regions([block])
    x = torch.ones(3)
    refused = (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError)
    with pytest.raises(refused):  # compiled (fullgraph), the block cannot run at all
        block(x)
    with caplog.at_level(logging.WARNING, logger="voxgate.graphs"):
        assert warm_up(block, [x], [block])
    assert "--no-compile-codec" in caplog.text
    torch.testing.assert_close(block(x), x * 2)  # eager again
    assert compiled_of([block]) == []


def test_an_error_outside_compiled_blocks_still_raises():
    def broken(x: torch.Tensor) -> torch.Tensor:
        raise ValueError("a capture's own bug")

    with pytest.raises(ValueError, match="own bug"):
        warm_up(broken, [torch.ones(2)], [])


def test_a_working_compile_is_kept_and_uncompile_undoes_it():
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    block = Plain()
    compile_regions([block])
    x = torch.randn(4)
    assert not warm_up(block, [x], [block])
    graphs = counters["stats"]["unique_graphs"]
    assert graphs == 1
    torch.testing.assert_close(block(x), torch.relu(x) + 1)
    assert compiled_of([block, Plain()]) == [block]
    uncompile_regions([block])
    assert compiled_of([block]) == []
    block(torch.randn(5, 2))  # a new shape: eager, so nothing compiles
    assert counters["stats"]["unique_graphs"] == graphs
