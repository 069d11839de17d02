"""Zonos' DAC 44.1 kHz (the real decoder's shape, random weights made audible) replayed from
CUDA graphs equals the same windows decoded eagerly, and streams on the Zonos chunk grid,
several at once, still give their whole decodes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.codecs.dac import DacDetokenizer, make_audible
from models.zonos.presets import REAL_DAC
from tests.gpu.graph_compare import ComparedGraphs

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
FRAMES = 62  # a first chunk, three whole chunks, and a last of 10: 4 + 3 · 16 + 10


def test_real_dac_replays_equal_eager(ieee_float32):
    from transformers import DacConfig, DacModel

    torch.manual_seed(0)
    dac = make_audible(DacModel(DacConfig(**REAL_DAC)).eval(), 0).to(CUDA)
    graphs = ComparedGraphs(CUDA)
    detok = DacDetokenizer(dac)
    detok.enable_cuda_graphs(graphs)
    g = torch.Generator().manual_seed(1)
    sources = [torch.randint(0, 1024, (FRAMES, 9), generator=g).tolist() for _ in range(3)]
    streams = [detok.new_stream() for _ in sources]
    heard: list[list[np.ndarray]] = [[] for _ in sources]
    at = 0
    for size in (14, 16, 16, 16):  # as Zonos' scheduler pushes them, then the rest, final
        for stream, source in zip(streams, sources, strict=True):
            detok.push(stream, source[at : at + size])
        at += size
        for mine, pcm in zip(heard, detok.decode(streams, [at >= FRAMES] * 3), strict=True):
            mine.append(pcm)
    for stream, source in zip(streams, sources, strict=True):
        detok.push(stream, source[at:])
    for mine, pcm in zip(heard, detok.decode(streams, [True] * 3), strict=True):
        mine.append(pcm)
    assert {key[2] for key, _, _ in graphs.compared} == set(detok.window_lengths())
    for key, replayed, eager in graphs.compared:
        rms = float(eager.pow(2).mean().sqrt())
        assert rms > 1e-3, key  # audible
        assert float((replayed - eager).abs().max()) <= 1e-4 * max(rms, 1.0), key
    for mine, source in zip(heard, sources, strict=True):
        whole = detok.decode_frames(source)
        got = np.concatenate(mine)
        assert got.shape == whole.shape
        assert np.abs(got - whole).max() <= 1e-3 * np.abs(whole).max()
