"""Guided attention (training/guided_attention.py): the penalty is low for attention that walks
the text diagonally, high for attention that does not, and it never changes the forward pass."""

import torch

from models.voxgate_tiny.lm import DenseCausalAttention
from training.guided_attention import (
    GuidedAttention,
    diagonal_penalty_weights,
    off_diagonal_mass,
    pointer_penalty_weights,
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


def test_pointer_guidance_aims_each_frame_at_the_symbol_it_says():
    # One sequence: <bos> s0 s1 s2 <audio> (5 text rows), then 4 frames saying s0 s0 s1 s2.
    text_len, length = torch.tensor([5]), 10
    pointer = torch.tensor([[-1] * 5 + [0, 0, 1, 2, -1]])  # the last row is padding
    w = pointer_penalty_weights(text_len, pointer)
    for query, said in zip(range(5, 9), (0, 0, 1, 2), strict=True):
        assert w[0, query, 1 + said] == 0  # its symbol's prompt row: no penalty
        by_distance = sorted(range(5), key=lambda key: abs(key - 1 - said))
        row = w[0, query, by_distance]
        assert (row[1:] >= row[:-1]).all() and row[-1] > 0.5  # grows with the distance
    assert (w[0, :5] == 0).all() and (w[0, 9] == 0).all()  # only frame rows are queries
    assert (w[0, :, 5:] == 0).all()  # only text rows are keys

    on_target = torch.zeros(1, length, length)
    off_target = torch.zeros(1, length, length)
    mask = (pointer >= 0).float()
    for query, said in zip(range(5, 9), (0, 0, 1, 2), strict=True):
        on_target[0, query, 1 + said] = 1.0
        off_target[0, query, 4 - said] = 1.0  # the text read backwards
    assert off_diagonal_mass(on_target, w, mask) == 0
    assert off_diagonal_mass(off_target, w, mask) > 0.5
