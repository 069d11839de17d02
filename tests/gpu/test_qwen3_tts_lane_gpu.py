"""Qwen3-TTS's first-chunk lane on the GPU: through the engine, the steady codec's graphs and
the lane's (two pools, replayed on two threads and CUDA streams at once, over the state slots
both share) give every request the audio an eager decode of the same pushes gives, with
streams going from one context to the other (and back, when every chunk counts as urgent).

    pytest tests/gpu -k qwen3_tts_lane

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.detok_threads import ThreadedDetokenizer
from engine.outputs import AudioChunk, SpeechRequest
from engine.request import SamplingParams
from models.qwen3_tts.checkpoint import load_qwen3_tts
from models.qwen3_tts.lane import Qwen3TtsLane
from models.qwen3_tts.presets import ensure_tiny_qwen3_tts
from tests.models.lane_codecs import LoggedCodec, assert_audio_is_eager_decode_of_pushes

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


@pytest.mark.parametrize("urgent", [False, True])
def test_engine_lane_audio_equals_eager_decode_of_the_same_pushes(tmp_path, urgent, ieee_float32):
    folder = ensure_tiny_qwen3_tts(tmp_path / "q3")
    model = load_qwen3_tts(str(folder), CUDA, torch.float32, name="tiny-qwen3-tts")
    config = dataclasses.replace(
        EngineConfig(max_num_seqs=8, max_batch_tokens=256, num_kv_blocks=256),
        first_audio_margin=0.0,
        realtime_admission=False,  # the test's arrivals, whatever the measured costs
    )
    core = EngineCore(model, config, CUDA, "sdpa")
    if urgent:
        core.scheduler.lane_urgent = lambda request, now: True
    lane = core.detok.lane  # captured by the engine with a CallableGraphs of its own
    assert isinstance(lane, Qwen3TtsLane) and lane.codec.graphs is not None
    core.detok.close()
    pushes: list[tuple] = []
    core.detok = ThreadedDetokenizer(
        LoggedCodec(model, pushes, lane=False), core.clock, CUDA, LoggedCodec(lane, pushes, True)
    )
    lengths = [40, 25, 33, 12, 37, 20, 30, 28]
    requests, audio, state_ids, step = [], {}, {}, 0
    try:
        while len(requests) < len(lengths) or core.has_work():
            if step % 4 == 0 and len(requests) < len(lengths):  # first chunks while jobs run
                n = lengths[len(requests)]
                sampling = SamplingParams(seed=len(requests), max_tokens=n, min_tokens=n)
                r = core.add_request(SpeechRequest("Hello there.", None, sampling))
                requests.append(r)
                audio[r.request_id] = []
                state_ids[r.request_id] = id(core.worker.stream_state(r.request_id))
            for event in core.step():
                if isinstance(event, AudioChunk):
                    audio[event.request_id].append(event.pcm)
            step += 1
    finally:
        core.close()
    assert core.lane_jobs >= 1
    assert_audio_is_eager_decode_of_pushes(model, requests, state_ids, pushes, audio, urgent)
