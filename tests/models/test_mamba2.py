"""Voxgate's Mamba2 mixer (models/layers/mamba2.py) against transformers' `Mamba2Mixer` (its
pure-PyTorch path), float32 on the CPU, the same random weights loaded into both by their
shared parameter names: a prefill that spans several scan chunks, then token-by-token decode
from each side's own state. transformers' mixer reads the whole inner width through the SSM,
as mamba-ssm's Mamba2 does when `d_ssm` is unset (as in Zonos' hybrid); its gated RMSNorm's
epsilon is set to mamba-ssm's 1e-5."""

from __future__ import annotations

import pytest
import torch

from models.checkpoint_errors import CheckpointError
from models.layers.mamba2 import Mamba2Mixer, Mamba2Sizes

SIZES = Mamba2Sizes(d_model=32, d_state=8, d_conv=4, expand=2, headdim=8, ngroups=2, chunk_size=5)


def _pair():
    from transformers import Mamba2Config
    from transformers.models.mamba2.modeling_mamba2 import Mamba2Mixer as HfMixer

    torch.manual_seed(0)
    ours = Mamba2Mixer(SIZES)
    with torch.no_grad():  # move every parameter off its initial value
        for p in ours.parameters():
            p.add_(0.1 * torch.randn_like(p))
    config = Mamba2Config(
        hidden_size=SIZES.d_model,
        num_heads=SIZES.nheads,
        head_dim=SIZES.headdim,
        state_size=SIZES.d_state,
        expand=SIZES.expand,
        n_groups=SIZES.ngroups,
        conv_kernel=SIZES.d_conv,
        use_bias=False,
        use_conv_bias=True,
        chunk_size=SIZES.chunk_size,
        layer_norm_epsilon=SIZES.norm_eps,
        num_hidden_layers=1,
    )
    theirs = HfMixer(config, layer_idx=0).eval()
    theirs.load_state_dict(ours.state_dict(), strict=True)
    return ours.eval(), theirs, config


def _zero_state(rows: int):
    s = SIZES
    return torch.zeros(rows, s.conv_dim, s.d_conv - 1), torch.zeros(
        rows, s.nheads, s.headdim, s.d_state
    )


@torch.inference_mode()
def test_prefill_and_decode_equal_transformers_mamba2_mixer():
    from transformers import DynamicCache

    ours, theirs, config = _pair()
    cache = DynamicCache(config=config)
    x = torch.randn(2, 13, SIZES.d_model)  # 13 tokens: chunks of 5, 5 and 3
    want = theirs(x, cache=cache)
    got, conv, ssm = ours.sequence(x, *_zero_state(2))
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    for _ in range(5):
        token = torch.randn(2, 1, SIZES.d_model)
        want = theirs(token, cache=cache)[:, 0]
        got, conv, ssm = ours.step(token[:, 0], conv, ssm)
        torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)


@torch.inference_mode()
def test_a_prefill_in_pieces_equals_it_whole():
    """Chunked prefill: the state a piece leaves is where the next one starts."""
    ours, _, _ = _pair()
    x = torch.randn(2, 13, SIZES.d_model)
    whole, conv_w, ssm_w = ours.sequence(x, *_zero_state(2))
    first, conv, ssm = ours.sequence(x[:, :6], *_zero_state(2))
    second, conv, ssm = ours.sequence(x[:, 6:7], conv, ssm)  # a piece of one token
    third, conv, ssm = ours.sequence(x[:, 7:], conv, ssm)
    torch.testing.assert_close(torch.cat([first, second, third], 1), whole, atol=2e-6, rtol=1e-5)
    torch.testing.assert_close(ssm, ssm_w, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(conv, conv_w)


def test_ssm_cfg_reads_mamba_ssm_defaults_and_refuses_what_it_cannot_run():
    published = Mamba2Sizes.from_ssm_cfg(2048, {"layer": "Mamba2"})  # Zonos-v0.1-hybrid's
    assert (published.d_state, published.d_conv, published.headdim, published.ngroups) == (
        128,
        4,
        64,
        1,
    )
    assert (published.d_inner, published.nheads, published.conv_dim) == (4096, 64, 4352)
    assert Mamba2Sizes.from_ssm_cfg(64, SIZES.to_ssm_cfg() | {"d_state": 8}).d_state == 8
    with pytest.raises(CheckpointError, match="norm_before_gate"):
        Mamba2Sizes.from_ssm_cfg(64, {"layer": "Mamba2", "norm_before_gate": True})
    with pytest.raises(CheckpointError, match="Mamba2 only"):
        Mamba2Sizes.from_ssm_cfg(64, {"layer": "Mamba1"})
    with pytest.raises(CheckpointError, match="does not read"):
        Mamba2Sizes.from_ssm_cfg(64, {"layer": "Mamba2", "d_hidden": 3})
