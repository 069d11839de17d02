"""Qwen3-TTS's steps through the engine's graph sets as the CPU runs them (tests/cpu_graphs.py):
arrivals beside decodes replay the talker's prompt graphs, codebook 0 and the depth stage
sampled after them (Worker._launch_graphed), with the tokens and audio of eager forwards."""

from __future__ import annotations

from engine.config import EngineConfig
from engine.outputs import SpeechRequest
from engine.request import SamplingParams
from tests.models.engine_run import assert_row_prompt_graphs_change_nothing

TEXTS = [
    "Hello there.",
    "A first chunk, and the cover it gives.",
    "Short one.",
    "And a last, slightly longer sentence.",
]


def test_the_model_lets_its_prompts_replay_apart_from_its_sampling(model):
    assert model.prompt_graphs_sample_eagerly()


def test_arrivals_from_the_prompt_graphs_change_nothing(model):
    """Greedy and seeded sampled requests (the model's defaults: top-k 50, which the depth
    graphs take), two arriving a step beside decodes: from the prompt graphs the same rows
    and audio as from eager forwards."""
    defaults = model.facts.sampling_defaults
    specs = [
        SpeechRequest(
            text,
            sampling=SamplingParams(**defaults, seed=i, max_tokens=n, min_tokens=n)
            if i % 2
            else SamplingParams(temperature=0.0, max_tokens=n, min_tokens=n),
        )
        for i, (text, n) in enumerate(zip(TEXTS, [9, 6, 8, 5], strict=True))
    ]
    config = EngineConfig(max_num_seqs=4, max_batch_tokens=512, num_kv_blocks=64)
    assert_row_prompt_graphs_change_nothing(model, specs, config)
