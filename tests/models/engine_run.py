"""Driving an engine core through a batch of requests in tests: two admitted a step, each
request's audio and Finished event collected, and the largest batch a step carried; and one
request of a given length through any tiny preset."""

from __future__ import annotations

import copy
from collections.abc import Callable

import numpy as np
import torch

from engine.api import TurnFromSpeech
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.loop import prepare_turn
from engine.outputs import AudioChunk, Finished, SpeechRequest
from engine.request import SamplingParams

# The tiny presets with a codec, by how a request to them is made.
TEXT_TO_SPEECH = [
    "voxgate-tiny",
    "tiny-orpheus",
    "tiny-csm",
    "tiny-zonos",
    "tiny-chatterbox",
    "tiny-qwen3-tts",
    "tiny-cosyvoice2",
]
SPOKEN_TURNS = ["tiny-glm-voice", "tiny-step-audio2"]


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


def generated(model, n: int, seed: int = 1, text: str = "A first chunk, and the cover it gives."):
    """An engine over `model` and its finished request of `n` generated tokens, with the
    request's audio: a spoken turn (seeded noise) for a turn model, `text` for the others."""
    config = EngineConfig(num_kv_blocks=256, realtime_admission=False)
    core = EngineCore(model, config, torch.device("cpu"), "sdpa")
    sampling = SamplingParams(max_tokens=n, min_tokens=n, seed=seed)
    if model.facts.accepts_turns:
        pcm = (0.1 * np.random.default_rng(seed - 1).standard_normal(16000)).astype(np.float32)
        turn = prepare_turn(model, TurnFromSpeech(pcm))
        spec = SpeechRequest("", sampling=sampling, turns=(turn,))
    else:
        spec = SpeechRequest(text, sampling=sampling)
    [request], audio, _, _ = run(core, [spec])
    assert len(request.output_ids) == n
    pcm = np.concatenate(audio.get(request.request_id, [np.zeros(0, np.float32)]))
    return core, request, pcm


def eager_and_graphed_runs(
    model, specs: list[SpeechRequest], config: EngineConfig, install_graphs: Callable
) -> tuple[list, list, list[int]]:
    """The same requests through an engine without graphs and one whose worker
    `install_graphs(worker)` gave the CPU's graph sets (tests/cpu_graphs.py): each run's
    (output ids, audio) per request, and the sampled rows of every step that ran prompts from
    graphs."""
    results, graphed = [], []
    for graphs in (False, True):
        core = EngineCore(model, config, torch.device("cpu"), "sdpa")
        if graphs:
            from tests.cpu_graphs import count_graphed_steps

            install_graphs(core.worker)
            graphed = count_graphed_steps(core.worker)
        requests, audio, _, _ = run(core, copy.deepcopy(specs))
        results.append([(r.output_ids, np.concatenate(audio[r.request_id])) for r in requests])
    return results[0], results[1], graphed


def assert_row_prompt_graphs_change_nothing(
    model, specs: list[SpeechRequest], config: EngineConfig
) -> None:
    """A row model's arrivals replayed from the prompt graphs as the CPU runs them
    (tests/cpu_graphs.with_cpu_row_graphs), some beside decodes, give the eager forwards'
    tokens and audio. The codec groups streams into batches as the steps ended, which moves
    samples by float32 rounding only."""
    from tests.cpu_graphs import with_cpu_row_graphs

    eager, from_graphs, graphed = eager_and_graphed_runs(
        model, specs, config, lambda w: with_cpu_row_graphs(w, prompt_buckets=(16, 32, 64, 128))
    )
    assert len(graphed) >= 2 and max(graphed) > 1  # arrivals beside decodes, from graphs
    assert [tokens for tokens, _ in from_graphs] == [tokens for tokens, _ in eager]
    for (_, pcm), (_, g_pcm) in zip(eager, from_graphs, strict=True):
        np.testing.assert_allclose(g_pcm, pcm, atol=1e-4)
