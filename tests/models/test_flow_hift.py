"""The flow + HiFT detokenizer: streamed in chunks against decoded whole, batch against singles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from models.codecs.flow_hift.flow import CausalFlow
from models.codecs.flow_hift.hift import HiFTGenerator
from models.codecs.flow_hift.streaming import FlowHiftDetokenizer
from models.cosyvoice2.config import parse_config, read_yaml
from models.cosyvoice2.configs import TINY_SIZES, cosyvoice2_yaml


@pytest.fixture(scope="module")
def detok(tmp_path_factory) -> FlowHiftDetokenizer:
    folder: Path = tmp_path_factory.mktemp("flow_hift")
    (folder / "cosyvoice2.yaml").write_text(cosyvoice2_yaml(TINY_SIZES))
    cfg = parse_config(read_yaml(folder / "cosyvoice2.yaml"))
    torch.manual_seed(5)
    flow, hift = CausalFlow(cfg.flow).eval(), HiFTGenerator(cfg.hift).eval()
    hift.fold_weight_norm()
    return FlowHiftDetokenizer(flow, hift, cfg.chunk_size)


@pytest.fixture(scope="module")
def unbounded(detok) -> FlowHiftDetokenizer:
    """The same weights with CosyVoice's unbounded history: every chunk re-runs it all."""
    return FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk, context_chunks=None)


def stream_for(detok, seed: int, prompt_chunks: int):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 6561, (25 * prompt_chunks,), generator=g).tolist()
    return detok.new_stream(
        tokens, torch.randn(50 * prompt_chunks, 80, generator=g), torch.randn(192, generator=g)
    )


def codes(seed: int, n: int) -> list[int]:
    return torch.randint(0, 6561, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def streamed(detok, state, tokens, pushes) -> np.ndarray:
    out, i = [], 0
    for size in pushes:
        detok.push(state, tokens[i : i + size])
        i += size
        out += detok.decode([state], [False])
    detok.push(state, tokens[i:])
    out += detok.decode([state], [True])
    return np.concatenate(out)


def whole(detok, state, tokens) -> np.ndarray:
    detok.push(state, tokens)
    return detok.decode([state], [True])[0]


def test_chunked_equals_whole_within_hift_seam_tolerance(detok):
    tokens = codes(1, 90)
    chunked = streamed(detok, stream_for(detok, 2, 1), tokens, [10, 20, 25, 13])
    ref = whole(detok, stream_for(detok, 2, 1), tokens)
    assert len(chunked) == len(ref) == 90 * 2 * 480
    # The flow's mel is exact: a whole decode makes the same per-chunk window rows as the
    # stream (bounded history: prompt + 2 context chunks), and within a row attention is
    # chunk-causal, convs causal, noise frame-indexed, and the 3-token look-ahead is present
    # before a chunk is decoded. (How the bounded window departs from CosyVoice's unbounded
    # history is the window tests' subject below.) HiFT is not causal and sees only
    # 8 mel frames either side of what it emits, less than its receptive field, so the seams
    # carry a small error. Measured: ~1e-3 of the signal RMS at most.
    rms = np.sqrt(np.mean(ref**2))
    err = np.abs(chunked - ref)
    assert err.max() <= 0.02 * rms
    assert np.sqrt(np.mean(err**2)) <= 0.005 * rms


def test_flow_mel_chunked_equals_whole(detok):
    tokens = codes(3, 80)
    a, b = stream_for(detok, 4, 1), stream_for(detok, 4, 1)
    detok.push(a, tokens[:60])
    detok._flow_step([a], [False])  # 2 chunks (57 tokens + 3 look-ahead)
    assert a.tokens_decoded == 50
    detok.push(a, tokens[60:])
    detok._flow_step([a], [True])
    detok.push(b, tokens)
    detok._flow_step([b], [True])
    torch.testing.assert_close(a.mel, b.mel, atol=1e-4, rtol=1e-4)


def test_batch_of_n_equals_n_singles(detok):
    setups = [(11, 1, 70, [30, 30]), (12, 2, 55, [28, 10]), (13, 1, 40, [40])]
    singles = [
        streamed(detok, stream_for(detok, s, p), codes(s, n), pushes) for s, p, n, pushes in setups
    ]
    states = [stream_for(detok, s, p) for s, p, _, _ in setups]
    tokens = [codes(s, n) for s, _, n, _ in setups]
    out = [[] for _ in setups]
    for step in range(2):
        for st, toks, (_, _, _, pushes) in zip(states, tokens, setups, strict=True):
            if step < len(pushes):
                detok.push(st, toks[sum(pushes[:step]) : sum(pushes[: step + 1])])
        for k, pcm in enumerate(detok.decode(states, [False] * 3)):
            out[k].append(pcm)
    for st, toks, (_, _, _, pushes) in zip(states, tokens, setups, strict=True):
        detok.push(st, toks[sum(pushes) :])
    for k, pcm in enumerate(detok.decode(states, [True] * 3)):
        out[k].append(pcm)
    for single, parts in zip(singles, out, strict=True):
        np.testing.assert_allclose(np.concatenate(parts), single, atol=1e-5)


def chunk_mels(detok, state, tokens) -> torch.Tensor:
    """The mel of streaming `tokens` one chunk (+ look-ahead) per call, then the rest final."""
    for i in range(0, len(tokens), detok.chunk):
        detok.push(state, tokens[i : i + detok.chunk])
        detok._flow_step([state], [False])
    detok._flow_step([state], [True])
    return state.mel


def test_bounded_window_equals_unbounded_history_until_it_is_full(detok, unbounded):
    # 5 chunks + 10 tokens; a window holds the prompt and 2 chunks of context, so chunks 0-2
    # see the whole history and equal CosyVoice's unbounded streaming mel.
    tokens = codes(21, 135)
    ours = chunk_mels(detok, stream_for(detok, 22, 1), tokens)
    ref = chunk_mels(unbounded, stream_for(unbounded, 22, 1), tokens)
    assert ours.shape == ref.shape == (80, 270)
    exact = 2 * 3 * detok.chunk
    torch.testing.assert_close(ours[:, :exact], ref[:, :exact], atol=1e-4, rtol=1e-4)


def test_chunk_mel_does_not_depend_on_history_before_its_window(detok, unbounded):
    # Chunk 3's window is chunks 1-3: changing chunk 0 leaves its mel as it was (the noise of
    # its frames is still indexed by their place in the utterance), where CosyVoice's
    # unbounded history changes it.
    tokens = codes(23, 100)
    other = codes(24, 25) + tokens[25:]
    frames = slice(2 * 3 * detok.chunk, 2 * 4 * detok.chunk)
    a = chunk_mels(detok, stream_for(detok, 25, 1), tokens)[:, frames]
    b = chunk_mels(detok, stream_for(detok, 25, 1), other)[:, frames]
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    c = chunk_mels(unbounded, stream_for(unbounded, 25, 1), tokens)[:, frames]
    d = chunk_mels(unbounded, stream_for(unbounded, 25, 1), other)[:, frames]
    assert (c - d).abs().max() > 1e-3


class EagerGraphs:
    """engine.cuda_graphs.CallableGraphs' contract on the CPU: captured keys, and `run` calls
    the function on the (padded) inputs it is given, as a replay would."""

    def __init__(self) -> None:
        self.keys: set = set()
        self.shapes: list[tuple] = []

    def __contains__(self, key) -> bool:
        return key in self.keys

    def capture(self, key, fn, inputs) -> None:
        self.keys.add(key)

    def run(self, key, fn, inputs):
        self.shapes.append(key)
        return fn(*inputs)


def test_graph_buckets_pad_rows_and_frames_without_changing_the_mel(detok):
    # Three requests (prompts of 1 and 2 chunks) decoded through the graph buckets (rows
    # padded to 4, frames to whole chunks) equal the unpadded eager solve.
    graphed = FlowHiftDetokenizer(detok.flow, detok.hift, detok.chunk)
    graphs = EagerGraphs()
    graphed.enable_cuda_graphs(graphs)
    setups = [(31, 1, 70), (32, 2, 64), (33, 1, 37)]
    for final in (False, True):
        eager = [stream_for(detok, s, p) for s, p, _ in setups]
        padded = [stream_for(graphed, s, p) for s, p, _ in setups]
        for a, b, (s, _, n) in zip(eager, padded, setups, strict=True):
            detok.push(a, codes(s, n))
            graphed.push(b, codes(s, n))
        detok._flow_step(eager, [final] * 3)
        graphed._flow_step(padded, [final] * 3)
        for a, b in zip(eager, padded, strict=True):
            torch.testing.assert_close(a.mel, b.mel, atol=1e-5, rtol=1e-5)
    # Streamed: 5 chunk rows, the longest window 200 frames; final: 8 rows, 228 frames → 250.
    assert graphs.shapes == [("flow", 8, 200), ("flow", 8, 250)]


def test_window_rows_start_from_the_noise_of_their_place_in_the_utterance(detok):
    # A row of a 1-chunk prompt and generated tokens [50, 128): prompt frames start from noise
    # frames 0-49, generated ones from frames 50 + 2*50 on, as in the whole utterance.
    flow, g = detok.flow, torch.Generator().manual_seed(41)
    tokens = torch.randint(0, 6561, (1, 25 + 78), generator=g)
    z, *_ = flow.condition(
        tokens,
        torch.tensor([103]),
        torch.tensor([100]),
        torch.randn(1, 50, 80, generator=g),
        torch.tensor([50]),
        torch.randn(1, 192, generator=g),
        skipped=torch.tensor([50]),
    )
    assert z.shape == (1, 80, 200)
    torch.testing.assert_close(z[0, :, :50], flow.noise[0, :, :50])
    torch.testing.assert_close(z[0, :, 50:], flow.noise[0, :, 150:300])
