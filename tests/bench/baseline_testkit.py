"""What every per-request baseline's tests check the same way."""

from __future__ import annotations

import asyncio

import numpy as np

from engine.api import AudioChunk, Finished, FinishReason, SamplingParams, SpeechRequest
from models.base import ModelInputError


async def assert_cancels_a_running_request(baseline, sampling: SamplingParams) -> None:
    """A long request, cancelled while it runs, stops at its next token with CANCELLED and
    leaves the baseline idle. `sampling` asks for 2000 tokens."""
    long = await baseline.submit(SpeechRequest("Hello.", sampling=sampling, request_id="long"))
    await asyncio.sleep(0.3)
    baseline.cancel("long")
    events = [e async for e in long]
    assert events[-1].reason is FinishReason.CANCELLED and events[-1].num_tokens < 2000
    assert baseline.stats().waiting == 0 and baseline.stats().running == 0


async def audio_of(baseline, request: SpeechRequest) -> tuple[list[np.ndarray], Finished]:
    """The audio chunks a request streams, and how it finished."""
    stream = await baseline.submit(request)
    chunks, finished = [], None
    async for event in stream:
        if isinstance(event, AudioChunk):
            chunks.append(event.pcm)
        else:
            finished = event
    return chunks, finished


async def assert_refuses_an_unknown_voice_and_blank_text(baseline) -> None:
    """Refused at submit as the engine refuses them (ModelInputError)."""
    import pytest

    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("hi", voice="nobody"))
    with pytest.raises(ModelInputError):
        await baseline.submit(SpeechRequest("   "))
