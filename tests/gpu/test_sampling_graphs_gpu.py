"""CosyVoice 2 on the GPU with the decode step's head and sampling replayed as graphs
(engine/sampling_graphs.py): the same seeded tokens as eager sampling, through the engine with
decode graphs and async scheduling.

Marker `gpu`: skipped on machines without CUDA (tests/conftest.py says why)."""

from __future__ import annotations

import copy
import importlib.util

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from models.cosyvoice2 import configs
from models.cosyvoice2.loading import load_cosyvoice2
from models.cosyvoice2.presets import write_cosyvoice2_checkpoint
from tests.models.test_cosyvoice2 import TEXTS, run

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(
        importlib.util.find_spec("flashinfer") is None,
        reason="flashinfer (the gpu extra) is not installed: no decode graphs without it",
    ),
]
CUDA = torch.device("cuda")
# The tiny backbone with FlashInfer's smallest head size (64): decode graphs need FlashInfer.
QWEN2_HEAD_64 = {
    **configs.TINY_QWEN2,
    "hidden_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 256,
}
SIZES_HEAD_64 = {**configs.TINY_SIZES, "llm_size": 128}


def test_sampling_graphs_draw_the_eager_samplers_tokens(tmp_path):
    folder = tmp_path / "model"
    write_cosyvoice2_checkpoint(folder, SIZES_HEAD_64, QWEN2_HEAD_64, seed=2025)
    model = load_cosyvoice2(
        str(folder), CUDA, torch.bfloat16, name="tiny-cosyvoice2"
    )  # FlashInfer: no fp32
    voices = ["narrator", "guide", "narrator", "guide"]
    specs = [
        SpeechRequest(t, v, SamplingParams(seed=i, max_tokens=n, min_tokens=n - 4))
        for i, (t, v, n) in enumerate(zip(TEXTS, voices, [30, 12, 26, 18], strict=True))
    ] + [SpeechRequest(TEXTS[0], "narrator", SamplingParams(temperature=0.0, max_tokens=20))]
    tokens = {}
    for graphed in (True, False):
        config = EngineConfig(
            max_num_seqs=8,
            max_batch_tokens=64,
            num_kv_blocks=64,
            sampling_graphs=graphed,
            async_scheduling=True,
        )
        core = EngineCore(model, config, CUDA, "flashinfer")
        assert (core.worker.sampling_graphs is not None) == graphed
        requests, _, _, _ = run(core, copy.deepcopy(specs))
        tokens[graphed] = [r.output_ids for r in requests]
        if graphed:
            assert core.worker.sampling_graphs.replays > 20  # the decode steps replayed
        core.close()
    assert tokens[True] == tokens[False]
