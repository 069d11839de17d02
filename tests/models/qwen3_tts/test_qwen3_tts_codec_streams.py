"""Qwen3-TTS's speech decoder streamed (models/qwen3_tts/codec_streams.py; tiny preset, fp32 on
the CPU): streams decoded in pieces, together or alone, at any position, give the whole
decode's samples, and so do the GPU's calls as a replay runs them (EagerGraphs: rows padded to
captured buckets on the scratch slot, frames cut into captured lengths, more rows than the
largest bucket in several calls). tests/gpu/test_qwen3_tts_codec_graphs_gpu.py replays the real
graphs."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from models.qwen3_tts import codec_streams
from models.qwen3_tts.codec_layers import SnakeBeta
from models.qwen3_tts.codec_streams import CodecStreams
from tests.cpu_graphs import EagerGraphs

ROUNDING = 2e-4  # float32 sums in another order (chunked convolutions, batched rows)


def random_codes(model, frames: int, seed: int) -> torch.Tensor:
    """[frames, K] codes."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.code_vocab, (frames, model.k), generator=g)


def whole(model, codes: torch.Tensor) -> np.ndarray:
    return model.decoder.decode(codes.T[None])[0].numpy()


def test_a_stream_decoded_in_pieces_equals_its_whole_decode(model):
    codes = random_codes(model, 9, seed=3)
    streams = CodecStreams(model.decoder)
    stream = streams.new_stream()
    parts = [
        streams.decode([stream], [codes[a:b].tolist()])[0] for a, b in ((0, 1), (1, 4), (4, 9))
    ]
    want = whole(model, codes)
    assert want.shape == (9 * 1920,) and np.abs(want).max() > 0
    np.testing.assert_allclose(np.concatenate(parts), want, atol=ROUNDING, rtol=0)


def test_streams_decode_together_as_they_decode_alone(model):
    """A batch of streams at different positions (one new, one 3 frames in) gives each the
    samples it gets on its own; a stream with nothing new gets nothing."""
    a, b = random_codes(model, 5, seed=4), random_codes(model, 5, seed=5)
    streams = CodecStreams(model.decoder)
    ahead, fresh, idle = streams.new_stream(), streams.new_stream(), streams.new_stream()
    (first,) = streams.decode([ahead], [a[:3].tolist()])
    both = streams.decode([ahead, fresh, idle], [a[3:].tolist(), b[:2].tolist(), []])
    (rest,) = streams.decode([fresh], [b[2:].tolist()])
    np.testing.assert_allclose(np.concatenate([first, both[0]]), whole(model, a), atol=ROUNDING)
    np.testing.assert_allclose(np.concatenate([both[1], rest]), whole(model, b), atol=ROUNDING)
    assert both[2].size == 0 and idle.slot is None


def test_an_in_context_clip_is_decoded_once_and_its_audio_dropped(model, monkeypatch):
    """A cloned voice's clip codes go through the decoder before its speech, their audio
    dropped: the speech's audio is the whole decode's of clip + speech, cut. The state the clip
    leaves is kept, so a second request of the voice starts from it without decoding it."""
    clip = random_codes(model, 7, seed=6)
    speeches = [random_codes(model, 4, seed=7), random_codes(model, 3, seed=8)]
    streams = CodecStreams(model.decoder)
    calls: list[int] = []
    step = streams.step
    monkeypatch.setattr(
        streams, "step", lambda codes, *a: calls.append(codes.shape[1]) or step(codes, *a)
    )
    for speech in speeches:
        stream = streams.new_stream(prime=clip.numpy())
        (audio,) = streams.decode([stream], [speech.tolist()])
        want = whole(model, torch.cat([clip, speech]))[7 * 1920 :]
        np.testing.assert_allclose(audio, want, atol=ROUNDING, rtol=0)
        assert stream.prime is None and stream.frames == 7 + len(speech)
    assert calls == [7, 4, 3]  # the clip decoded for the first request only


@pytest.mark.parametrize("top", [64, 2])
def test_replayed_calls_stream_as_the_eager_ones(model, top):
    """Five streams join one by one, all bringing r + 1 frames at round r (3 are cut into
    2 + 1, 5 into 4 + 1), each at its own position; stream 1 leaves at round 3, its row then
    taken by stream 3 (with a fresh state, not stream 1's). 3-4 rows go in a bucket of 4, or with
    a top bucket of 2 in two calls. Every call replays a captured key; the audio equals the
    eager decode's."""
    rows = tuple(b for b in codec_streams.GRAPH_ROWS if b <= top)
    graphs = EagerGraphs(deferred=True)  # traces only the keys that run
    replayed, eager = CodecStreams(model.decoder, rows), CodecStreams(model.decoder)
    replayed.enable_cuda_graphs(graphs)
    # The Snake activations are what a GPU's graphs compile (--compile-codec), every one.
    snakes = [m for m in model.decoder.modules() if isinstance(m, SnakeBeta)]
    assert snakes and graphs.regions == snakes
    codes = [random_codes(model, 15, seed=10 + i) for i in range(5)]
    heard: dict[str, list[list[np.ndarray]]] = {}
    for name, codec in (("replayed", replayed), ("eager", eager)):
        streams: list = [None] * 5
        audio: list[list[np.ndarray]] = [[] for _ in range(5)]
        at = [0] * 5
        for r in range(5):  # rounds of 1..5 frames
            if r == 3:
                streams[1] = None  # left: its row goes back to the slots
                gc.collect()
            streams[r] = codec.new_stream()
            live = [i for i in range(r + 1) if streams[i] is not None]
            sizes = dict.fromkeys(live, r + 1)
            pieces = [codes[i][at[i] : at[i] + sizes[i]].tolist() for i in live]
            for i, pcm in zip(live, codec.decode([streams[i] for i in live], pieces), strict=True):
                audio[i].append(pcm)
                at[i] += sizes[i]
        heard[name] = [np.concatenate(a) if a else np.zeros(0) for a in audio]
    assert graphs.shapes and set(graphs.shapes) <= graphs.keys
    assert max(rows for _, rows, _ in graphs.shapes) == min(top, 4)
    for got, want in zip(heard["replayed"], heard["eager"], strict=True):
        np.testing.assert_allclose(got, want, atol=ROUNDING, rtol=0)
