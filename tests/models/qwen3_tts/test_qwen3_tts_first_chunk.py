"""Qwen3-TTS's first chunk under the engine's first-chunk rule (engine/scheduler.py) with the
model's own margin (models/qwen3_tts/model.py, FIRST_AUDIO_MARGIN), at the step, codec and
second-chunk times its H100 runs measured: the first chunk goes out once it covers twice the
next chunk's wait, whole 80-ms frames, not the three times that held it for cover at 10 req/s."""

from __future__ import annotations

import pytest

from engine.block_manager import BlockManager
from engine.config import EngineConfig
from engine.scheduler import ChunkingFacts, Scheduler
from models.qwen3_tts.model import CHUNK_FRAMES, FIRST_AUDIO_MARGIN, FIRST_CHUNK_FRAMES
from tests.engine.sched_fakes import admit, fake_step

FACTS = ChunkingFacts(
    first_chunk_tokens=FIRST_CHUNK_FRAMES,
    chunk_tokens=CHUNK_FRAMES,
    seconds_per_token=0.08,  # 12.5 Hz
    first_audio_margin=FIRST_AUDIO_MARGIN,
)


def first_chunk_frames(margin_facts: ChunkingFacts, step_s: float, codec_s: float, gap_s: float):
    """Frames of a first chunk with a threaded codec (CUDA's), at these step, codec-job and
    second-chunk-gap times."""
    config = EngineConfig(first_audio_budget_s=10.0)  # the cover decides, not the budget
    sched = Scheduler(config, BlockManager(num_blocks=512, block_size=16), margin_facts, True)
    sched.step_time_s, sched.detok_time_s, sched.second_chunk_gap_s = step_s, codec_s, gap_s
    req = admit(sched, arrival=0.0, prompt_len=100)
    now = 0.0
    while req.first_audio_time is None:
        fake_step(sched, now)
        now += step_s
    return round(req.audio_emitted_s / FACTS.seconds_per_token)


@pytest.mark.parametrize(
    ("costs", "frames"),
    [((0.018, 0.026, 0.078), 3), ((0.027, 0.070, 0.162), 5)],  # 10 and 20 req/s on an H100
)
def test_the_first_chunk_covers_twice_the_next_chunks_wait(costs, frames):
    assert first_chunk_frames(FACTS, *costs) == frames
    engine_default = ChunkingFacts(**{**FACTS.__dict__, "first_audio_margin": 3.0})
    assert first_chunk_frames(engine_default, *costs) > frames
