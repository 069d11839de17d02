"""The flow estimators' query, key and value projections joined into one GEMM for serving
(models/codecs/flow_hift/qkv.py; FlowHiftDetokenizer.enable_cuda_graphs joins them): each
attention, and CosyVoice 2's whole estimator, computes what the separate projections did, and
a joined attention keeps its weights once."""

from __future__ import annotations

import copy

import torch

from models.codecs.flow_hift.dit_estimator import DitAttention
from models.codecs.flow_hift.estimator import Attention
from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.qkv import join_qkv
from models.cosyvoice2.config import parse_config, parse_yaml_text
from models.cosyvoice2.configs import TINY_SIZES, cosyvoice2_yaml


def test_joined_projections_compute_what_the_separate_ones_do():
    torch.manual_seed(0)
    for attention in (Attention(32, 2, 16), DitAttention(32, 2, 16)):
        x, bias = torch.randn(3, 7, 32), torch.zeros(3, 7, 7)
        bias[:, :, 5:] = -1.0e10  # two frames masked
        with torch.no_grad():
            want = attention(x, bias)
            assert join_qkv(attention) == 1
            got = attention(x, bias)
            join_qkv(attention)  # a second join changes nothing
            again = attention(x, bias)
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
        assert torch.equal(again, got)
        names = {name for name, _ in attention.named_parameters()}
        assert names & {"to_qkv.weight"} and not any(
            n.startswith(("to_q.", "to_k.", "to_v.")) for n in names
        ), names


def test_cosyvoice2s_joined_estimator_gives_the_same_velocity():
    """The tiny preset's estimator (every transformer block's attention joined), a streaming
    call of two rows, one with padded frames."""
    cfg = parse_config(parse_yaml_text(cosyvoice2_yaml(TINY_SIZES), "cosyvoice2.yaml"))
    torch.manual_seed(3)
    estimator = CausalFlow(cfg.flow).eval().decoder.estimator
    joined = copy.deepcopy(estimator)
    blocks = join_qkv(joined)
    assert blocks == sum(isinstance(m, Attention) for m in estimator.modules()) > 0
    m, frames = cfg.flow.output_size, 60
    x, mu, cond = (torch.randn(2, m, frames) for _ in range(3))
    mask = torch.ones(2, 1, frames)
    mask[1, :, 45:] = 0
    t, spks = torch.rand(2), torch.randn(2, m)
    with torch.no_grad():
        want = estimator(x, mask, mu, t, spks, cond, streaming=True)
        got = joined(x, mask, mu, t, spks, cond, streaming=True)
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
