"""The steady codec confined to part of the SMs (engine/sm_partition.py) on the GPU: its stream
belongs to a green context of the SMs asked for, its CUDA graphs are captured and replayed
there, and through the engine every request's tokens and audio equal those of the same
requests with the codec on every SM.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.sm_partition import codec_stream
from models.cosyvoice2 import configs
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from tests.gpu.test_first_chunk_lane_gpu import run_staggered

pytestmark = pytest.mark.gpu
CUDA = torch.device("cuda")


def test_codec_stream_is_a_green_context_of_the_sms_asked_for():
    part = codec_stream(CUDA, 16)
    assert part.sms == 16, "no green context: needs a CUDA 12.4+ driver and torch support"
    assert part.context is not None
    x = torch.randn(256, 256, device=CUDA)
    with torch.cuda.stream(part.stream):
        y = x @ x
    part.stream.synchronize()
    torch.testing.assert_close(y, x @ x)
    assert codec_stream(CUDA, 0).sms is None  # 0: every SM, a plain stream


def test_engine_audio_with_the_codec_on_16_sms_equals_every_sm(tmp_path):
    folder = tmp_path / "model"
    write_cosyvoice2_checkpoint(folder, configs.TINY_SIZES, configs.TINY_QWEN2, seed=2025)
    model = load_cosyvoice2(str(folder), CUDA, torch.float32, name="tiny-cosyvoice2")
    lengths = [90, 60, 75, 40, 85, 50]
    runs = {}
    for sms in (0, 16):
        config = EngineConfig(
            max_num_seqs=8, max_batch_tokens=256, num_kv_blocks=256, codec_sms=sms
        )
        core = EngineCore(model, config, CUDA, "sdpa")
        assert core.detok._steady._partition.sms == (sms or None)
        try:
            requests, audio = run_staggered(core, lengths)
        finally:
            core.close()
        assert model.detok.graphs is not None  # captured on the (green) steady stream
        runs[sms] = [(r.output_ids, np.concatenate(audio[r.request_id])) for r in requests]
    for (ids_all, pcm_all), (ids_part, pcm_part) in zip(runs[0], runs[16], strict=True):
        assert ids_part == ids_all
        # Which streams share a job depends on thread timing; a different batch mix moves
        # float32 audio by ~1e-5, a wrong one by its scale.
        np.testing.assert_allclose(pcm_part, pcm_all, atol=1e-4)
