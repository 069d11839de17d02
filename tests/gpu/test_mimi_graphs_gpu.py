"""Mimi's streaming halves replayed from CUDA graphs (the state's gather and write-back inside
each replay) equal the same calls run eagerly, streams joining and leaving between frames as
a full-duplex engine's do."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.codecs.mimi import MimiDetokenizer
from models.codecs.mimi_encoder_streaming import MimiStreamEncoder
from tests.models.test_mimi import codes, tiny_mimi

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


class CountedGraphs(CallableGraphs):
    def __init__(self, device: torch.device) -> None:
        super().__init__(device)
        self.replays = 0

    def run(self, key, fn, inputs):
        self.replays += key in self
        return super().run(key, fn, inputs)


def _schedule(rounds: int) -> list[list[int]]:
    """Which of 6 streams take a frame each round: they join at rounds 0-5 and stream 1 leaves
    at round 7, so batches of 1-6 rows (padded to 1, 2, 4, 8) meet rows at every position."""
    return [[i for i in range(6) if i <= r and not (i == 1 and r >= 7)] for r in range(rounds)]


def test_decoder_graphs_equal_eager(ieee_float32):
    mimi = tiny_mimi().to(CUDA)
    graphs = CountedGraphs(CUDA)
    replayed, eager = MimiDetokenizer(mimi), MimiDetokenizer(mimi)
    replayed.enable_cuda_graphs(graphs)
    for det in (replayed, eager):
        det.warm_up_batches(8)
    frames = [codes(12, seed=20 + i) for i in range(6)]
    out: dict[str, list[list[np.ndarray]]] = {}
    for name, det in (("replayed", replayed), ("eager", eager)):
        streams = [det.new_stream() for _ in range(6)]
        audio: list[list[np.ndarray]] = [[] for _ in range(6)]
        for r, live in enumerate(_schedule(12)):
            for i in live:
                det.push(streams[i], frames[i][r - i : r - i + 1].tolist())
            for i, a in zip(live, det.decode([streams[i] for i in live]), strict=True):
                audio[i].append(a)
            if r == 7:
                streams[1] = None  # left: its row goes back, a later stream may take it
                gc.collect()
        out[name] = audio
    assert graphs.replays == 12
    for a, b in zip(out["replayed"], out["eager"], strict=True):
        a, b = np.concatenate(a), np.concatenate(b)
        assert np.abs(a - b).max() <= 1e-5 * np.sqrt(np.mean(b**2))


def test_encoder_graphs_equal_eager(ieee_float32):
    mimi = tiny_mimi().to(CUDA)
    graphs = CountedGraphs(CUDA)
    replayed, eager = MimiStreamEncoder(mimi, 8), MimiStreamEncoder(mimi, 8)
    replayed.enable_cuda_graphs(graphs)
    for enc in (replayed, eager):
        enc.warm_up_batches(8)
    spf = replayed.samples_per_frame
    rng = np.random.default_rng(0)
    waves = [rng.standard_normal(12 * spf).astype(np.float32) * 0.3 for _ in range(6)]
    out = {}
    for name, enc in (("replayed", replayed), ("eager", eager)):
        streams = [enc.new_stream() for _ in range(6)]
        got: list[list[np.ndarray]] = [[] for _ in range(6)]
        for r, live in enumerate(_schedule(12)):
            chunks = [waves[i][(r - i) * spf : (r - i + 1) * spf] for i in live]
            for i, c in zip(live, enc.encode([streams[i] for i in live], chunks), strict=True):
                got[i].append(c)
        out[name] = [np.concatenate(g) for g in got]
    assert graphs.replays == 12
    for a, b in zip(out["replayed"], out["eager"], strict=True):
        assert np.array_equal(a, b)
