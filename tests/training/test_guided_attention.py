"""Guided attention (training/guided_attention.py): the penalty is low for attention that walks
the text diagonally, high for attention that does not, and it never changes the forward pass."""

import torch

from models.voxgate_tiny.lm import DenseCausalAttention
from training.guided_attention import (
    GuidedAttention,
    diagonal_penalty_weights,
    off_diagonal_mass,
)


def _lengths():
    # Two sequences padded to L = 14: 4 text rows + 8 frames, and 3 text rows + 6 frames.
    return torch.tensor([4, 3]), torch.tensor([8, 6]), 14


def _attention(text_len, audio_len, length, pick) -> torch.Tensor:
    """One-hot attention from each frame row to the text row `pick(n, N, T)`."""
    probs = torch.zeros(len(text_len), length, length)
    for b, (t, n_frames) in enumerate(zip(text_len.tolist(), audio_len.tolist(), strict=True)):
        for n in range(n_frames):
            probs[b, t + n, pick(n, n_frames, t)] = 1.0
    return probs


def _query_mask(text_len, audio_len, length) -> torch.Tensor:
    pos = torch.arange(length)
    return ((pos >= text_len[:, None]) & (pos < (text_len + audio_len)[:, None])).float()


def test_weights_vanish_on_the_diagonal_and_outside_frame_to_text_pairs():
    text_len, audio_len, length = _lengths()
    w = diagonal_penalty_weights(text_len, audio_len, length)
    assert w.shape == (2, length, length)
    # frame 0 → text row 0 and frame N/2 → text row T/2 sit on the diagonal
    assert w[0, 4, 0] == 0 and w[0, 4 + 4, 2] == 0
    assert w[0, 4, 3] > 0.5  # first frame looking at the last character: far off
    # text queries, padding queries and non-text keys carry no weight
    assert w[0, :4].abs().sum() == 0 and w[0, 12:].abs().sum() == 0 and w[1, 9:].abs().sum() == 0
    assert w[0, :, 4:].abs().sum() == 0 and w[1, :, 3:].abs().sum() == 0


def test_diagonal_attention_scores_low_and_reversed_attention_high():
    text_len, audio_len, length = _lengths()
    w = diagonal_penalty_weights(text_len, audio_len, length)
    mask = _query_mask(text_len, audio_len, length)
    diagonal = _attention(text_len, audio_len, length, lambda n, big_n, t: n * t // big_n)
    reverse = _attention(text_len, audio_len, length, lambda n, big_n, t: t - 1 - n * t // big_n)
    low = off_diagonal_mass(diagonal, w, mask)
    high = off_diagonal_mass(reverse, w, mask)
    assert 0 <= low < 0.15 and high > 0.5


def test_guidance_scores_without_changing_the_output_and_its_gradient_reaches_queries():
    torch.manual_seed(0)
    text_len, audio_len, length = _lengths()
    b, heads, kv_heads, d = 2, 4, 2, 8
    q = torch.randn(b * length, heads, d, requires_grad=True)
    k = torch.randn(b * length, kv_heads, d)
    v = torch.randn(b * length, kv_heads, d)
    guided = GuidedAttention(b, length, text_len, audio_len, frozenset({1}), heads=2)
    plain = DenseCausalAttention(b, length)
    assert torch.allclose(guided.forward(0, q, k, v), plain.forward(0, q, k, v))
    assert guided.terms == []  # layer 0 is not guided
    out = guided.forward(1, q, k, v)
    assert torch.allclose(out, plain.forward(1, q, k, v))
    assert len(guided.terms) == 1 and 0 < guided.penalty.item() < 1
    guided.penalty.backward()
    grad = q.grad.view(b, length, heads, d)
    assert grad[:, :, :2].abs().sum() > 0  # the guided heads get a gradient
    assert grad[:, :, 2:].abs().sum() == 0  # the free heads do not
