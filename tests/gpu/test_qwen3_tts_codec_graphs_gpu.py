"""Qwen3-TTS's speech decoder (the real 12 Hz shape, random weights made audible) replayed from
CUDA graphs equals the same calls run eagerly, as streams join, leave and bring 1-6 frames;
every call of the schedule replays a captured shape."""

from __future__ import annotations

import copy
import gc

import numpy as np
import pytest
import torch

from engine.cuda_graphs import CallableGraphs
from models.qwen3_tts.codec import DecoderConfig, SpeechDecoder, make_audible
from models.qwen3_tts.codec_streams import CodecStreams
from models.qwen3_tts.configs import SPEECH_TOKENIZER
from tests.gpu.graph_compare import ComparedGraphs

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")


def test_real_shape_codec_replays_equal_eager(ieee_float32):
    torch.manual_seed(0)
    decoder = make_audible(
        SpeechDecoder(DecoderConfig.from_json(SPEECH_TOKENIZER["decoder_config"])), 0
    )
    decoder = decoder.to(CUDA).eval()
    graphs = ComparedGraphs(CUDA)
    codec = CodecStreams(decoder)
    codec.enable_cuda_graphs(graphs)
    g = torch.Generator().manual_seed(1)
    codes = [torch.randint(0, 2048, (24, 16), generator=g) for _ in range(6)]
    streams: list = [None] * 6
    at = [0] * 6
    heard: list[list[np.ndarray]] = [[] for _ in range(6)]
    for r in range(6):  # round r: every live stream brings r + 1 frames
        if r == 3:
            streams[1] = None  # left: its row is taken by the stream that joins now
            gc.collect()
        streams[r] = codec.new_stream()
        live = [i for i in range(r + 1) if streams[i] is not None]
        pieces = [codes[i][at[i] : at[i] + r + 1].tolist() for i in live]
        for i, pcm in zip(live, codec.decode([streams[i] for i in live], pieces), strict=True):
            heard[i].append(pcm)
            at[i] += r + 1
    assert graphs.compared, "no call replayed a graph"
    for key, replayed, eager in graphs.compared:
        rms = float(eager.float().pow(2).mean().sqrt())
        assert rms > 1e-3, key  # audible
        assert float((replayed - eager).abs().max()) <= 1e-4 * max(rms, 1.0), key
    # The whole schedule's audio, stream by stream, is each stream's whole decode.
    for i, pieces in enumerate(heard):
        if not pieces:
            continue
        got = np.concatenate(pieces)
        want = decoder.decode(codes[i][: at[i]].T[None].to(CUDA))[0].cpu().numpy()
        rms = float(np.sqrt(np.mean(want**2)))
        assert np.abs(got - want).max() <= 1e-3 * max(rms, 1.0), i


def test_compiled_snake_activations_decode_as_eager(ieee_float32):
    """With --compile-codec (the default) the decoder's Snake activations run as compiled
    programs inside the replays: the audio of streams decoded in pieces equals an eager copy's
    with the same weights."""
    torch.manual_seed(0)
    base = make_audible(
        SpeechDecoder(DecoderConfig.from_json(SPEECH_TOKENIZER["decoder_config"])), 0
    )
    eager = base.to(CUDA).eval()
    compiled = copy.deepcopy(eager)
    graphs = CallableGraphs(CUDA, compiled=True)
    codec = CodecStreams(compiled)
    codec.enable_cuda_graphs(graphs)
    assert graphs.compiled_blocks == len(compiled.repeated_blocks()) > 0
    g = torch.Generator().manual_seed(2)
    codes = [torch.randint(0, 2048, (12, 16), generator=g) for _ in range(3)]
    streams = [codec.new_stream() for _ in codes]
    heard: list[list[np.ndarray]] = [[] for _ in codes]
    for start, stop in ((0, 1), (1, 5), (5, 12)):
        pieces = [c[start:stop].tolist() for c in codes]
        for i, pcm in enumerate(codec.decode(streams, pieces)):
            heard[i].append(pcm)
    for i, c in enumerate(codes):
        want = eager.decode(c.T[None].to(CUDA))[0].cpu().numpy()
        rms = float(np.sqrt(np.mean(want**2)))
        assert rms > 1e-3
        assert np.abs(np.concatenate(heard[i]) - want).max() <= 1e-3 * max(rms, 1.0), i
