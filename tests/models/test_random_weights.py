"""models/random_weights.py: one recipe for random backbones, with the switches the families
need (Step-Audio 2's encoder: zero biases, LayerNorms named `*_ln`)."""

from __future__ import annotations

import torch

from models.random_weights import randomise


class _Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)
        self.attn_ln = torch.nn.LayerNorm(4)


def test_norms_are_one_and_the_rest_drawn():
    block = _Block()
    torch.manual_seed(0)
    randomise(block)
    assert torch.equal(block.norm.weight, torch.ones(4))
    assert torch.equal(block.norm.bias, torch.ones(4))
    assert not torch.equal(block.attn_ln.weight, torch.ones(4))  # not a norm by this name
    assert block.proj.bias.abs().sum() > 0


def test_biases_can_start_at_zero_and_other_names_count_as_norms():
    block = _Block()
    torch.manual_seed(0)
    randomise(block, zero_biases=True, norm_names=("norm", "_ln.weight"))
    assert torch.equal(block.attn_ln.weight, torch.ones(4))
    assert torch.equal(block.attn_ln.bias, torch.zeros(4))
    assert torch.equal(block.proj.bias, torch.zeros(4))
    assert 0 < block.proj.weight.std() < 0.1
