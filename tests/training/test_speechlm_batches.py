"""Batches made ahead of the training step by worker processes equal the ones made inline."""

from __future__ import annotations

import random

import numpy as np
import torch

from training.speechlm_data import Utterance, batches, prefetched_batches


def test_prefetched_batches_equal_inline_ones_in_order():
    rng = np.random.default_rng(0)
    utts = []
    for _ in range(40):
        n_text, n_rows = int(rng.integers(4, 12)), int(rng.integers(3, 30))
        text = [1, *rng.integers(3, 40, n_text - 2).tolist(), 2]
        pointer = np.sort(rng.integers(0, n_text - 2, n_rows))
        codes = rng.integers(0, 1000, (n_rows, 8)).astype(np.uint16)
        utts.append(Utterance(text, codes, pointer))
    groups = batches(utts, 200, random.Random(1))
    inline = list(prefetched_batches(groups, 8, 1000, 40, workers=0, pin=False))
    ahead = list(prefetched_batches(groups, 8, 1000, 40, workers=2, pin=False))
    assert len(inline) == len(ahead) == len(groups) > 3
    for a, b in zip(inline, ahead, strict=True):
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=0)
