"""Turn-based conversations through the engine (tiny-glm-voice): the prompt built from turns,
the reply's ids on Finished, and the KV of a conversation kept between turns (prefix reuse)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch

from engine.api import TurnFromSpeech
from engine.config import EngineConfig
from engine.core import EngineCore
from engine.factory import build_engine
from engine.loop import prepare_turn
from engine.outputs import AudioChunk, Finished, FinishReason, SpeechRequest, TextDelta
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


def test_every_spoken_turn_gets_a_reply_with_speech(model):
    """The preset's random weights keep no text/speech mix of their own, so it samples in the
    trained 13 text : 26 speech blocks: a 1-s reply (19 tokens) to any turn carries 6 speech
    tokens and audio. Sampled freely, some of these turns drew no speech token at all."""
    core = make_core(model, num_kv_blocks=256, max_batch_tokens=256)
    for k in range(24):
        rng = np.random.default_rng(k)
        pcm = (0.1 * rng.standard_normal(int(rng.integers(8000, 40000)))).astype(np.float32)
        turn = prepare_turn(model, TurnFromSpeech(pcm))
        sampling = SamplingParams(max_tokens=19, min_tokens=19, seed=k)
        request = core.add_request(SpeechRequest("", sampling=sampling, turns=(turn,)))
        audio = 0
        while core.has_work():
            audio += sum(len(e.pcm) for e in core.step() if isinstance(e, AudioChunk))
        speech = [t for t in request.output_ids if model.speech_token(t) is not None]
        assert len(speech) == 6 and audio > 0, k


def test_turns_to_a_model_that_takes_none_are_a_clear_error():
    tts = load_model("tiny-orpheus")
    core = EngineCore(tts, EngineConfig(num_kv_blocks=16), torch.device("cpu"), "sdpa")
    with pytest.raises(ModelInputError, match="not a turn-based model"):
        core.add_request(SpeechRequest("", turns=(UserTurn(text="hi"),)))
    assert not core.has_work()


@pytest.mark.parametrize("engine_process", [False, True])
async def test_conversation_through_the_async_and_process_engines(engine_process):
    # Real-time admission off: its calibration at warm-up says nothing of conversations.
    config = EngineConfig(
        num_kv_blocks=128, block_size=8, engine_process=engine_process, realtime_admission=False
    )
    engine = build_engine("tiny-glm-voice", config=config)
    try:
        first = (UserTurn(text="Hello there."),)
        stream = await engine.submit(
            SpeechRequest("", sampling=greedy(5), turns=first, conversation_id="c")
        )
        reply = [e async for e in stream][-1]
        assert isinstance(reply, Finished) and len(reply.output_ids) == 5
        turns = (*first, AssistantTurn(reply.output_ids), UserTurn(text="Go on."))
        stream = await engine.submit(
            SpeechRequest("", sampling=greedy(5), turns=turns, conversation_id="c")
        )
        second = [e async for e in stream][-1]
        assert second.reused_tokens > len(reply.output_ids)
        with pytest.raises(ModelInputError, match="must end with a user turn"):
            await engine.submit(SpeechRequest("", turns=(UserTurn(text="x"), AssistantTurn((5,)))))
        engine.end_conversation("c")
        for _ in range(200):  # the process engine's stats arrive every 50 ms
            stats = engine.stats()
            # A snapshot from after the conversation: its reuse counted, its pages freed (one
            # from before the first turn has nothing kept or used either: both turns can run
            # between two snapshots).
            fresh = stats.prefix_reused_tokens > 0
            if fresh and stats.kv_blocks_kept == 0 and stats.kv_blocks_used == 0:
                break
            await asyncio.sleep(0.05)
        assert (stats.kv_blocks_kept, stats.kv_blocks_used) == (0, 0)
        assert stats.prefix_reused_tokens == second.reused_tokens
    finally:
        await engine.shutdown()


# --- prefix reuse ------------------------------------------------------------------------------
FIRST = UserTurn(text="Hello there, how are you today?")
SECOND = UserTurn(text="And what about tomorrow?")


def reference(model, turns, n: int) -> tuple:
    """Greedy reply to `turns` on a fresh synchronous engine, no conversation (all prefilled)."""
    core = make_core(model, async_scheduling=False)
    finished = run(core, SpeechRequest("", sampling=greedy(n), turns=tuple(turns)))
    assert finished.reused_tokens == 0
    return finished.output_ids


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_second_turn_reuses_the_first_turns_kv_and_equals_a_fresh_prefill(model, async_scheduling):
    core = make_core(model, async_scheduling=async_scheduling)
    first = run(core, SpeechRequest("", sampling=greedy(12), turns=(FIRST,), conversation_id="c"))
    prompt1 = len(model.preprocess_turns([FIRST]).token_ids)
    # The whole prompt and every reply token but the last (sampled, never run) have KV.
    assert core.stats().kv_blocks_kept == core.blocks.blocks_for(prompt1 + 11)
    turns = (FIRST, model.heard_reply(first.output_ids, None), SECOND)
    second = run(core, SpeechRequest("", sampling=greedy(10), turns=turns, conversation_id="c"))
    assert second.reused_tokens == prompt1 + 11
    assert core.stats().prefix_reused_tokens == prompt1 + 11
    assert second.output_ids == reference(model, turns, 10)
    core.end_conversation("c")
    assert core.blocks.num_used == 0 and core.stats().kv_blocks_kept == 0


def test_barged_in_reply_reuses_only_what_the_user_heard(model):
    core = make_core(model)
    request = core.add_request(
        SpeechRequest("", sampling=greedy(200), turns=(FIRST,), conversation_id="c")
    )
    while len(request.output_ids) < 40:
        core.step()
    (cancelled,) = core.cancel(request.request_id)
    assert cancelled.reason == FinishReason.CANCELLED
    assert cancelled.output_ids == tuple(request.output_ids[: len(cancelled.output_ids)])
    while core.has_work():
        core.step()
    heard = model.heard_reply(cancelled.output_ids, 0.3)  # 3 speech tokens' worth
    assert 0 < len(heard.token_ids) < len(cancelled.output_ids)
    turns = (FIRST, heard, SECOND)
    second = run(core, SpeechRequest("", sampling=greedy(10), turns=turns, conversation_id="c"))
    prompt1 = len(model.preprocess_turns([FIRST]).token_ids)
    # The heard part is a prefix of the kept reply; the next user marker differs from the
    # unheard reply token that followed it.
    assert second.reused_tokens == prompt1 + len(heard.token_ids)
    assert second.output_ids == reference(model, turns, 10)


def test_idle_conversations_are_evicted_lru_under_a_small_kv_budget(model):
    prompt1 = len(model.preprocess_turns([FIRST]).token_ids)
    per_turn = -(-(prompt1 + 8) // 8)  # pages reserved for a first turn (block_size 8)
    core = make_core(model, num_kv_blocks=2 * per_turn + 2)
    replies = {}
    for conv in ("old", "new"):
        replies[conv] = run(
            core, SpeechRequest("", sampling=greedy(8), turns=(FIRST,), conversation_id=conv)
        )
    assert core.stats().kv_blocks_kept == 2 * (core.blocks.blocks_for(prompt1 + 7))
    # A request that fits only when an idle conversation goes: admitted, the oldest evicted.
    other = SpeechRequest("", sampling=greedy(8), turns=(SECOND,))
    need = core.blocks.blocks_for(len(model.preprocess_turns([SECOND]).token_ids) + 8)
    kept_each = core.blocks.kept("old").blocks
    assert need + 2 * len(kept_each) > core.blocks.num_blocks >= need + len(kept_each)
    run(core, other)
    assert core.blocks.kept("old") is None and core.blocks.kept("new") is not None
    for conv, reused in (("new", prompt1 + 7), ("old", 0)):
        turns = (FIRST, model.heard_reply(replies[conv].output_ids, None), SECOND)
        second = run(core, SpeechRequest("", sampling=greedy(8), turns=turns, conversation_id=conv))
        assert second.reused_tokens == reused, conv
        assert second.output_ids == reference(model, turns, 8)


@pytest.mark.parametrize("async_scheduling", [False, True])
def test_the_transcript_streams_as_the_reply_is_generated(model, async_scheduling):
    """TextDelta events, joined, are the reply's transcript; each arrives in the step its text
    token resolves, ahead of the reply's end."""
    core = make_core(model, async_scheduling=async_scheduling)
    sampling = SamplingParams(temperature=1.0, top_k=0, max_tokens=40, min_tokens=40, seed=3)
    request = core.add_request(SpeechRequest("", sampling=sampling, turns=(UserTurn(text="Hi!"),)))
    deltas, finished, steps_with_text = [], None, 0
    while core.has_work():
        events = core.step()
        texts = [e.text for e in events if isinstance(e, TextDelta)]
        steps_with_text += bool(texts)
        deltas += texts
        finished = next((e for e in events if isinstance(e, Finished)), finished)
    text_tokens = [t for t in request.output_ids if model.is_text_token(t)]
    assert text_tokens and len(text_tokens) < len(request.output_ids)  # both kinds were drawn
    assert "".join(deltas) == model.reply_text(finished.output_ids) != ""
    assert steps_with_text > 1
