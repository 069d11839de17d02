"""Requests without a listener (SpeechRequest.realtime False) through a real engine: tiny-orpheus
on the CPU, SNAC's stateful decoder. Their tokens reach the codec in its large chunks (8
frames), never in the small ones sized for a listener's buffer, and their audio comes out
whole."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import AudioChunk, Finished, FinishReason
from models.registry import load_model
from voxbench.throughput import speech_request
from voxbench.workload import PlannedRequest, WorkItem


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-orpheus")


def test_unheard_requests_are_decoded_in_large_chunks_and_come_out_whole(model):
    core = EngineCore(model, EngineConfig(), torch.device("cpu"), "sdpa")
    frame = model.detok.samples_per_frame
    large = model.facts.large_chunk_tokens // 7
    assert large > model.facts.chunk_tokens // 7  # the chunk a listener mostly gets
    try:
        frames = {}
        for i, n in enumerate((20, 27)):
            item = WorkItem(f"w{i}", "Hello there, how are you?", 7 * n / model.facts.token_rate_hz)
            spec = speech_request(model, PlannedRequest(i, item, 7 * n, 0.0), realtime=False)
            frames[core.add_request(spec).request_id] = n
        chunks = {request_id: [] for request_id in frames}
        finished = {}
        while core.has_work():
            for event in core.step():
                if isinstance(event, AudioChunk):
                    chunks[event.request_id].append(len(event.pcm))
                elif isinstance(event, Finished):
                    finished[event.request_id] = event.reason
    finally:
        core.close()
    for request_id, n in frames.items():
        assert finished[request_id] is FinishReason.LENGTH
        sizes = chunks[request_id]
        assert sum(sizes) == n * frame  # every frame's audio, once
        # The first job holds a large chunk's frames, less the look-ahead and the decoder's
        # delay; every later one but the end's a large chunk exactly.
        assert sizes[0] > (large - 3) * frame
        assert sizes[1:-1] == [large * frame] * (len(sizes) - 2)
