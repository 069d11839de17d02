"""The clip the Qwen3-TTS Base tests clone voices from (tests/models/qwen3_tts/test_*.py), and
the tiny Base checkpoint they clone with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from models.qwen3_tts.checkpoint import Qwen3TtsModel, load_qwen3_tts, write_checkpoint
from models.qwen3_tts.configs import (
    TINY_QWEN3_TTS,
    TINY_SPEAKER_ENCODER,
    TINY_SPEECH_TOKENIZER,
    base,
)
from models.qwen3_tts.tiny_tokenizer import write_tiny_tokenizer


def clip_audio() -> np.ndarray:
    """One second at 24 kHz: a gliding tone in noise, within [-1, 1]."""
    t = np.arange(24000) / 24000
    rng = np.random.default_rng(0)
    return (
        0.4 * np.sin(2 * np.pi * (180 + 90 * t) * t) + 0.05 * rng.standard_normal(24000)
    ).astype(np.float32)


def tiny_cloner(folder: Path, clip_text: str) -> tuple[Path, Qwen3TtsModel]:
    """The tiny layout as a Base checkpoint in `folder` (a speaker encoder, the speech
    tokenizer's encoder), loaded with a voice cloned from clip_audio() by its x-vector alone
    ("clip") and one in context, with the clip's codes and `clip_text` as its transcript
    ("icl")."""
    cfg = base(TINY_QWEN3_TTS, TINY_SPEAKER_ENCODER)
    write_checkpoint(folder, cfg, TINY_SPEECH_TOKENIZER, seed=0, tokenizer=write_tiny_tokenizer)
    model = load_qwen3_tts(str(folder), torch.device("cpu"), torch.float32)
    model.add_voice("clip", clip_audio())
    model.add_voice("icl", clip_audio(), clip_text)
    return folder, model
