"""Turn-based conversations through the engine (tiny-glm-voice): the prompt built from turns,
the reply's ids on Finished, and the KV of a conversation kept between turns (prefix reuse)."""

from __future__ import annotations

import pytest
import torch

from engine.config import EngineConfig
from engine.core import EngineCore
from engine.factory import build_engine
from engine.outputs import Finished, FinishReason, SpeechRequest
from engine.request import SamplingParams
from models.base import ModelInputError
from models.glm_voice.prompt import AssistantTurn, UserTurn
from models.registry import load_model


def greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, repetition_penalty=1.0, max_tokens=n, min_tokens=n)


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-glm-voice")


def make_core(model, **config) -> EngineCore:
    settings = {"num_kv_blocks": 64, "block_size": 8, "max_batch_tokens": 64, **config}
    return EngineCore(model, EngineConfig(**settings), torch.device("cpu"), "sdpa")


def run(core: EngineCore, spec: SpeechRequest) -> Finished:
    """One request to its end, alone on the engine."""
    request = core.add_request(spec)
    while core.has_work():
        for event in core.step():
            if isinstance(event, Finished) and event.request_id == request.request_id:
                finished = event
    return finished


def test_turns_build_the_prompt_and_finished_carries_the_reply(model):
    core = make_core(model)
    turns = (UserTurn(text="Hello there, how are you?"),)
    request = core.add_request(SpeechRequest("", sampling=greedy(9), turns=turns))
    assert request.prompt_ids == model.preprocess_turns(turns).token_ids
    finished = None
    while core.has_work():
        for event in core.step():
            if isinstance(event, Finished):
                finished = event
    assert finished.reason == FinishReason.LENGTH
    assert finished.output_ids == tuple(request.output_ids) and len(finished.output_ids) == 9
    heard = model.heard_reply(finished.output_ids, None)
    assert heard.token_ids == tuple(t for t in request.output_ids if t not in model.ids.stop_ids)


def test_turns_to_a_model_that_takes_none_are_a_clear_error():
    tts = load_model("tiny-orpheus")
    core = EngineCore(tts, EngineConfig(num_kv_blocks=16), torch.device("cpu"), "sdpa")
    with pytest.raises(ModelInputError, match="not a turn-based model"):
        core.add_request(SpeechRequest("", turns=(UserTurn(text="hi"),)))
    assert not core.has_work()


async def test_turns_through_the_process_engine():
    engine = build_engine(
        "tiny-glm-voice", config=EngineConfig(num_kv_blocks=64, engine_process=True)
    )
    try:
        turns = (UserTurn(text="Hello there."),)
        stream = await engine.submit(SpeechRequest("", sampling=greedy(5), turns=turns))
        events = [e async for e in stream]
        assert isinstance(events[-1], Finished) and len(events[-1].output_ids) == 5
        with pytest.raises(ModelInputError, match="must end with a user turn"):
            await engine.submit(SpeechRequest("", turns=(UserTurn(text="x"), AssistantTurn((5,)))))
        engine.end_conversation("nobody")  # unknown conversations are fine
    finally:
        await engine.shutdown()
