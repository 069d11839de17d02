"""A voice the model hands back pending (models/voice_clip.py, PendingVoice: Chatterbox's
conditioning table) in the engine's own process: encoded on the host's turns thread, put in
place on its loop thread, then served; a removal sent right behind the add (a caller that gave
up) is applied after the install, so the voice does not stay behind unlisted."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from engine.config import EngineConfig
from engine.factory import build_engine
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.voice_clip import VoiceClip

SHORT = SamplingParams(temperature=0.0, max_tokens=8, min_tokens=8)


def clip() -> VoiceClip:
    t = np.arange(40000) / 16000
    tone = 0.3 * np.sin(2 * np.pi * 140 * t * (1 + 0.2 * np.sin(2 * np.pi * 3 * t)))
    return VoiceClip(tone.astype(np.float32), 16000)


async def speaks(engine, voice: str) -> int:
    stream = await engine.submit(SpeechRequest("Hello.", voice, SHORT))
    return sum(len(e.pcm) for e in [e async for e in stream] if isinstance(e, AudioChunk))


async def test_a_pending_voice_is_installed_and_removed_in_order(tmp_path, monkeypatch):
    monkeypatch.setenv("VOXGATE_CACHE", str(tmp_path))
    # Real-time admission off: its calibration bursts at start-up (~7 s of CPU for
    # tiny-chatterbox) test nothing of the voices.
    config = EngineConfig(kv_cache_mb=32, engine_process=True, realtime_admission=False)
    engine = build_engine("tiny-chatterbox", config=config)
    try:
        assert engine.facts.voice_cloning and not engine.facts.clip_rules.needs_transcript
        assert await engine.add_clip_voice("clip-kept", clip()) > 0
        assert await speaks(engine, "clip-kept") > 0

        adding = asyncio.create_task(engine.add_clip_voice("clip-gone", clip()))
        await asyncio.sleep(0)  # the add is sent first
        engine.remove_clip_voice("clip-gone")
        assert await adding > 0
        with pytest.raises(ModelInputError, match="unknown voice 'clip-gone'"):
            await speaks(engine, "clip-gone")
        assert await speaks(engine, "clip-kept") > 0
    finally:
        await engine.shutdown()
