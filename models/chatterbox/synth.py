"""Whole-utterance synthesis with Voxgate's own modules (ChatterboxTTS.generate's steps): text →
T3 speech tokens with CFG on the paged KV → S3Gen audio at 24 kHz. The offline reference
path; serving through the engine is not wired yet (docs/models.md)."""

from __future__ import annotations

import numpy as np
import torch

from models.chatterbox.checkpoint import Chatterbox, Voice
from models.chatterbox.config import SAMPLING, SPEECH_CODES
from models.chatterbox.sampling import T3Sampling
from models.chatterbox.t3_decode import T3Request, generate_speech_tokens


def synthesize(
    model: Chatterbox,
    text: str,
    voice: Voice | None = None,
    rules: T3Sampling | None = None,
    exaggeration: float = SAMPLING.exaggeration,
    max_new_tokens: int = SAMPLING.max_new_tokens,
    seed: int | None = None,
) -> tuple[list[int], np.ndarray]:
    """→ (the speech tokens, the audio). `voice`: the checkpoint's conds.pt by default; the
    exaggeration replaces the voice's own, as generate does."""
    if not 0.0 <= exaggeration <= 2.0:
        raise ValueError(f"exaggeration {exaggeration} is outside [0, 2]")
    voice = voice or model.default_voice
    request = T3Request(
        model.tokenizer.text_ids(text),
        voice.t3.speaker,
        voice.t3.prompt_tokens,
        exaggeration,
        max_new_tokens,
    )
    generator = None if seed is None else torch.Generator().manual_seed(seed)
    tokens = generate_speech_tokens(model.t3, request, rules or T3Sampling(), generator)
    # T3's head has rows past the 6561 codes (start/stop and unused ones); generate drops them.
    codes = [t for t in tokens if t < SPEECH_CODES]
    if not codes:
        return tokens, np.zeros(0, dtype=np.float32)
    return tokens, model.s3gen.decode(codes, voice.s3gen)
