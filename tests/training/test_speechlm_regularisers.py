"""The SpeechLM trainer's guards against memorising a deterministic teacher: input-code noise
that leaves text and targets alone, and keeping the best held-out point rather than the last."""

import torch
from torch import nn

from training.speechlm import BestWeights, corrupt_codes


def _rows() -> torch.Tensor:
    # [B=2, L=6, K+1=5]: three text rows (codes absent), three frame rows (text absent).
    rows = torch.full((2, 6, 5), -1, dtype=torch.long)
    rows[:, :3, 4] = torch.tensor([1, 2, 3])
    rows[:, 3:, :4] = torch.arange(12).view(3, 4) % 7
    return rows


def test_code_noise_replaces_only_present_codes_and_keeps_text():
    torch.manual_seed(0)
    rows = _rows()
    noisy = corrupt_codes(rows, k=4, vocab=1000, share=0.5)
    assert torch.equal(noisy[..., 4], rows[..., 4])  # the text column is never touched
    absent = rows[..., :4] < 0
    assert torch.equal(noisy[..., :4][absent], rows[..., :4][absent])  # absent stays absent
    changed = (noisy != rows)[..., :4]
    assert changed.any() and not changed[absent].any()
    assert (noisy[..., :4][~absent] < 1000).all() and (noisy[..., :4][~absent] >= 0).all()


def test_code_noise_zero_share_is_identity():
    rows = _rows()
    assert corrupt_codes(rows, k=4, vocab=1000, share=0.0) is rows


def test_best_weights_keeps_the_lowest_held_out_point_and_counts_misses():
    net = nn.Linear(2, 2)
    best = BestWeights()
    with torch.no_grad():
        net.weight.fill_(1.0)
    assert best.offer(net, {"cb0": 2.0, "cb1": 1.0}, step=100)
    with torch.no_grad():
        net.weight.fill_(2.0)
    assert not best.offer(net, {"cb0": 2.5, "cb1": 1.0}, step=200)  # worse: not kept
    assert not best.stale(2) and best.stale(1)
    best.restore(net)
    assert torch.all(net.weight == 1.0) and best.step == 100
    assert best.offer(net, {"cb0": 1.0, "cb1": 1.0}, step=300) and best.misses == 0
