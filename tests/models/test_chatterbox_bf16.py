"""Chatterbox's S3Gen flow in bfloat16, as it serves on CUDA (the model's --dtype, as CosyVoice
2's flow; `--flow-float32` keeps it in float32), run on the CPU at the tiny size so that CI
covers the path: the flow loads in the model's dtype and HiFT in float32, and the bf16 flow's
streamed audio and whole-utterance mel stay close to float32's.
tests/gpu/test_chatterbox_bf16_gpu.py bounds it at the real size on a GPU, graphs included.

Which part runs in which precision is checked on the weights themselves. The closeness
bounds are loose: bf16 keeps 8 significant bits (a relative rounding of 2^-9, 0.2 %), each of
the flow's layers rounds its output and the 10 Euler steps accumulate the mel in bf16, so how
far the audio moves is a property of the weights. With the tiny preset's the whole mel moves by
0.6 % (relative RMS) and the streamed audio by 1.3-1.4 % (HiFT's random, audible weights about
double the mel's error). The bounds, about twice that, still catch HiFT run in bf16 too
(3.9 %) or the voice prompt's mel lost (9 %); the speaker embedding weighs too little in the
tiny flow (3-4 % without it) for them to vouch for its path."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.chatterbox.checkpoint import load_chatterbox
from models.chatterbox.model import ChatterboxModel
from models.chatterbox.presets import ensure_tiny_chatterbox
from models.chatterbox.s3gen import S3Gen
from models.registry import load_model
from tests.models.test_chatterbox_graphs import streamed, voice_of

MAX_AUDIO_ERROR = 0.03  # relative RMS, bf16 flow against float32 (measured 1.3-1.4 %)
MAX_MEL_ERROR = 0.015  # relative RMS of the whole mel (measured 0.6 %)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return ensure_tiny_chatterbox(tmp_path_factory.mktemp("chatterbox"))


def relative_rms(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sqrt(np.mean((got - want) ** 2)) / np.sqrt(np.mean(want**2)))


def dtypes(module: torch.nn.Module) -> set[torch.dtype]:
    return {p.dtype for p in module.parameters()}


def test_flow_float32_leaves_t3_in_the_models_dtype_and_the_cpu_stays_float32(folder):
    # Each flow + HiFT family's flow follows the model's dtype unless --flow-float32
    # (tests/models/test_families.py); for Chatterbox, T3 keeps the model's dtype either way.
    model = load_model(str(folder), dtype=torch.bfloat16, options={"flow_float32": True})
    assert dtypes(model.parts.s3gen.flow) == {torch.float32}
    assert dtypes(model.t3) == {torch.bfloat16}
    # The CPU's default dtype, float32: all of S3Gen float32.
    model = load_model(str(folder))
    assert dtypes(model.parts.s3gen.flow) == dtypes(model.parts.s3gen.mel2wav) == {torch.float32}


def test_bf16_flow_streams_close_to_float32(folder):
    # Two voices in one batch, the default's prompt and a short clip's (not whole chunks); a
    # first chunk, a steady one and the final rest, as the engine pushes them.
    exact = ChatterboxModel(load_chatterbox(folder))
    bf16 = ChatterboxModel(load_chatterbox(folder, flow_dtype=torch.bfloat16))
    assert bf16.streamer.detok.dtype == torch.bfloat16
    lengths = [len(exact.voices["default"].s3gen.prompt_tokens), 37]
    voices = [voice_of(exact, n, 3 + i) for i, n in enumerate(lengths)]
    want = streamed(exact, [exact.stream_state_for({"voice": v}) for v in voices], 7)
    got = streamed(bf16, [bf16.stream_state_for({"voice": v}) for v in voices], 7)
    for a, b in zip(want, got, strict=True):
        assert len(a) == len(b) and np.abs(a).max() > 1e-3 and b.dtype == np.float32
        assert relative_rms(b, a) < MAX_AUDIO_ERROR


def test_bf16_whole_decode_is_close_to_float32(folder):
    # S3Gen.mel / decode (the offline path, synth.py) with a bf16 flow: a float32 mel.
    exact = load_chatterbox(folder).s3gen
    bf16 = load_chatterbox(folder, flow_dtype=torch.bfloat16).s3gen
    assert isinstance(bf16, S3Gen)
    voice = load_chatterbox(folder).default_voice.s3gen
    codes = torch.randint(0, 6561, (60,), generator=torch.Generator().manual_seed(2)).tolist()
    want, got = exact.mel(codes, voice), bf16.mel(codes, voice)
    assert got.dtype == torch.float32 and got.shape == want.shape
    assert relative_rms(got.numpy(), want.numpy()) < MAX_MEL_ERROR
    assert relative_rms(bf16.vocode(got), exact.vocode(want)) < MAX_AUDIO_ERROR
