"""Qwen3-TTS on CUDA with every graph set: its prompts replay the prompt graphs beside the
decodes (Worker._launch_graphed, codebook 0 and the depth stage sampled after them), and each
request's frames stay its own."""

from __future__ import annotations

import copy

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from tests.gpu.markers import needs_flashinfer

pytestmark = [pytest.mark.gpu, needs_flashinfer]

CUDA = torch.device("cuda")
TEXTS = [
    "Hello there.",
    "A first chunk, and the cover it gives.",
    "Short one.",
    "And a last, slightly longer sentence.",
]


def tiny_for_flashinfer(root):
    """tiny-qwen3-tts with heads of 64 (FlashInfer's smallest; the tiny preset's are 16), its
    multimodal rotary sections scaled to match, written and loaded as the preset is."""
    from models.qwen3_tts import configs
    from models.qwen3_tts.checkpoint import write_checkpoint
    from models.qwen3_tts.tiny_tokenizer import write_tiny_tokenizer

    cfg = copy.deepcopy(configs.TINY_QWEN3_TTS)
    talker = cfg["talker_config"]
    heads = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 2, "head_dim": 64}
    talker.update(heads)
    talker["rope_scaling"] = {**talker["rope_scaling"], "mrope_section": [8, 12, 12]}
    talker["code_predictor_config"].update(heads)
    folder = root / "model"
    write_checkpoint(
        folder, cfg, configs.TINY_SPEECH_TOKENIZER, seed=0, tokenizer=write_tiny_tokenizer
    )
    return folder


def test_qwen3_tts_arrivals_replay_the_prompt_graphs(tmp_path):
    from models.qwen3_tts.checkpoint import load_qwen3_tts
    from tests.cpu_graphs import count_graphed_steps

    model = load_qwen3_tts(str(tiny_for_flashinfer(tmp_path)), CUDA, torch.bfloat16, name="tiny")
    defaults = model.facts.sampling_defaults
    lengths = (20, 14, 18, 12)
    specs = [
        SpeechRequest(t, sampling=SamplingParams(**defaults, seed=i, max_tokens=n, min_tokens=n))
        for i, (t, n) in enumerate(zip(TEXTS, lengths, strict=True))
    ]
    config = EngineConfig(num_kv_blocks=512, max_num_seqs=8, realtime_admission=False)
    core = EngineCore(model, config, CUDA, "flashinfer")
    worker = core.worker
    assert worker.graphs is not None and worker.depth_graphs is not None
    assert worker.prompt_graphs is not None  # captured although the decodes sample eagerly
    graphed = count_graphed_steps(worker)
    pending, reqs, step = list(specs), [], 0
    while pending or core.has_work():
        if pending and step % 3 == 0:  # one arrival every third step, beside decodes
            reqs.append(core.add_request(copy.deepcopy(pending.pop(0))))
        core.step()
        step += 1
    core.close()
    assert len(graphed) >= 3 and max(graphed) > 1
    vocab, eos = model.code_vocab, model.ids.eos
    for r, n in zip(reqs, lengths, strict=True):
        assert len(r.output_ids) == n
        for row in r.output_ids:  # frames of codes, the text column the pad id
            assert 0 <= row[0] < vocab or row[0] == eos
            assert all(0 <= c < vocab for c in row[1 : model.k])
