"""Streaming Mimi encoder: encoded frame by frame, batched across streams at different
positions, equals transformers' whole-clip `MimiModel.encode` (CPU, tiny)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.codecs.mimi_encoder_streaming import MimiStreamEncoder
from tests.models.test_mimi import tiny_mimi

SPF = 1920
K = 8  # Moshi's codebooks


@pytest.fixture(scope="module")
def mimi():
    return tiny_mimi(seed=3)


def speechlike(n_frames: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n_frames * SPF) / 24000
    tone = np.sin(2 * np.pi * rng.uniform(100, 400) * t) * (0.5 + 0.5 * np.sin(2 * np.pi * 3 * t))
    return (0.3 * tone + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def whole_codes(mimi, audio: np.ndarray) -> np.ndarray:
    with torch.inference_mode():
        wave = torch.from_numpy(audio)[None, None]
        return mimi.encode(wave, num_quantizers=K).audio_codes[0].T.numpy()  # [frames, K]


@pytest.mark.parametrize("pad", [False, True], ids=["exact-batch", "padded-batch"])
def test_chunked_encode_equals_whole_encode(mimi, pad):
    """Padded (as on CUDA): calls of 3 streams run as 4 with a silent fresh stream."""
    encoder = MimiStreamEncoder(mimi, K)
    encoder.pad_batches = pad
    lengths = (14, 11, 9)  # frames; the tiny window (8 steps = 4 frames) slides in all of them
    clips = [speechlike(n, seed=i) for i, n in enumerate(lengths)]
    streams = [encoder.new_stream() for _ in clips]
    got: list[list[np.ndarray]] = [[] for _ in clips]
    # Irregular chunks per stream, all streams in the same calls, at different positions.
    chunkings = ([1, 3, 2, 1, 4, 3], [2, 1, 1, 5, 2], [1, 1, 1, 3, 2, 1])
    for step in range(6):
        batch, idx = [], []
        for i, plan in enumerate(chunkings):
            if step < len(plan):
                start = sum(plan[:step]) * SPF
                batch.append(clips[i][start : start + plan[step] * SPF])
                idx.append(i)
        codes = encoder.encode([streams[i] for i in idx], batch)
        for i, c in zip(idx, codes, strict=True):
            got[i].append(c)
    mismatched = 0
    for i, clip in enumerate(clips):
        streamed = np.concatenate(got[i])
        reference = whole_codes(mimi, clip)
        assert streamed.shape == reference.shape == (lengths[i], K)
        mismatched += int((streamed != reference).sum())
    assert mismatched == 0


def test_rejects_partial_frames(mimi):
    encoder = MimiStreamEncoder(mimi, K)
    with pytest.raises(ValueError, match="whole frames"):
        encoder.encode([encoder.new_stream()], [np.zeros(SPF + 5, np.float32)])
