"""Driving an engine core through a batch of requests in tests: two admitted a step, each
request's audio and Finished event collected, and the largest batch a step carried."""

from __future__ import annotations

from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, SpeechRequest


def run(core: EngineCore, specs: list[SpeechRequest]):
    pending, requests, audio, finished, peak = list(specs), [], {}, {}, 0
    while pending or core.has_work():
        for _ in range(min(2, len(pending))):
            requests.append(core.add_request(pending.pop(0)))
        for event in core.step():
            if isinstance(event, AudioChunk):
                audio.setdefault(event.request_id, []).append(event.pcm)
            elif isinstance(event, Finished):
                finished[event.request_id] = event
        peak = max(peak, core.last_timing.batch_size)
    return requests, audio, finished, peak
