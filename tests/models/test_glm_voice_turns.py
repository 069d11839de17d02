"""The tiny-glm-voice preset through the registry, and what the turn machinery needs from it:
a turn's audio → speech tokens → prompt; a reply → transcript pieces and speech tokens; a
barged-in reply → the part the user heard."""

from __future__ import annotations

import copy
import dataclasses

import numpy as np
import pytest
import torch

from engine.api import ErasedTurn, TurnFromSpeech
from engine.loop import prepare_turn
from models.base import ModelInputError
from models.glm_voice.prompt import AssistantTurn, UserTurn
from models.registry import load_model


@pytest.fixture(scope="module")
def model():
    return load_model("tiny-glm-voice")


def test_audio_turn_becomes_a_speech_prompt(model):
    rng = np.random.default_rng(1)
    pcm = (0.1 * rng.standard_normal(8000)).astype(np.float32)  # 0.5 s at 16 kHz
    turn = model.user_audio_turn(pcm)
    assert turn.speech_tokens == tuple(model.speech_tokenizer.encode(pcm))
    assert len(turn.speech_tokens) == 7  # 12.5 per second, rounded up
    ids = model.preprocess_turns([turn]).token_ids
    ix = ids.index(model.ids.begin_of_audio)
    speech = [t - model.ids.audio_base for t in ids[ix + 1 : ix + 8]]
    assert tuple(speech) == turn.speech_tokens and ids[ix + 8] == model.ids.end_of_audio
    with pytest.raises(ModelInputError, match="empty"):
        model.user_audio_turn(np.zeros(0, np.float32))


def system_texts(model, ids: list[int]) -> list[str]:
    """The text of each `<|system|>` message in a prompt, in order."""
    out, start = [], None
    for i, token in enumerate([*ids, model.ids.user]):
        if token == model.ids.system:
            start = i + 1
        elif token == model.ids.user and start is not None:
            out.append(model.tokenizer.decode(ids[start:i]))
            start = None
    return out


def test_instructions_follow_the_output_format_prompt(model):
    """The Realtime API's `instructions` reach GLM-4-Voice: appended to its output-format
    system prompt (which stays word for word), from the turn that carries them on, without
    changing the ids of the turns before (their KV stays reusable)."""
    from models.glm_voice.tokens import SPEECH_SYSTEM_PROMPT, TEXT_SYSTEM_PROMPT

    assert model.facts.system_prompt
    pcm = (0.1 * np.random.default_rng(2).standard_normal(8000)).astype(np.float32)
    spoken = prepare_turn(model, TurnFromSpeech(pcm, system="Answer like a pirate."))
    ids = model.preprocess_turns([spoken]).token_ids
    assert system_texts(model, ids) == ["\n" + SPEECH_SYSTEM_PROMPT + "Answer like a pirate."]
    # No instructions: exactly the reference demo's prompt.
    plain = model.preprocess_turns([model.user_text_turn("hi")]).token_ids
    assert system_texts(model, plain) == ["\n" + TEXT_SYSTEM_PROMPT]
    # Changed later: a second system message before that turn; earlier ids unchanged.
    reply = model.heard_reply([5, 6, model.ids.audio_base + 1], None)
    later = model.user_text_turn("and now?", system="Be brief.")
    same = model.user_text_turn("again", system="Be brief.")
    history = [model.user_text_turn("hi"), reply, later, same]
    ids = model.preprocess_turns(history).token_ids
    assert ids[: len(plain)] == plain
    assert system_texts(model, ids) == [
        "\n" + TEXT_SYSTEM_PROMPT,
        "\n" + TEXT_SYSTEM_PROMPT + " Be brief.",
    ]
    # "" goes back to the format prompt alone.
    back = model.preprocess_turns([*history, reply, model.user_text_turn("x", system="")])
    assert system_texts(model, back.token_ids)[-1] == "\n" + TEXT_SYSTEM_PROMPT
    with pytest.raises(ModelInputError, match="instructions are 4001 characters"):
        model.preprocess_turns([model.user_text_turn("hi", system="x" * 4001)])
    # A turn-based model that declares no system prompt refuses a turn command carrying one.
    plain_model = copy.copy(model)
    plain_model.facts = dataclasses.replace(model.facts, system_prompt=False)
    with pytest.raises(ModelInputError, match="no system prompt"):
        prepare_turn(plain_model, TurnFromSpeech(pcm, system="Be brief."))


def test_an_erased_turn_keeps_the_prompts_form_and_instructions(model):
    """A turn taken out of the conversation (the engine's ErasedTurn) leaves an empty message
    of its role: a first spoken turn erased still selects the speech system prompt, with the
    instructions it carried; nothing of its speech, nor of an erased reply, is in the prompt."""
    from models.glm_voice.tokens import SPEECH_SYSTEM_PROMPT

    pcm = (0.1 * np.random.default_rng(3).standard_normal(8000)).astype(np.float32)
    spoken = prepare_turn(model, TurnFromSpeech(pcm, system="Be brief."))
    reply = model.heard_reply([5, 6, model.ids.audio_base + 1], None)
    erased = [prepare_turn(model, ErasedTurn(turn)) for turn in (spoken, reply)]
    assert erased == [
        UserTurn(speech_tokens=(), system="Be brief.", erased=True),
        AssistantTurn(()),
    ]
    ids = model.preprocess_turns([*erased, model.user_text_turn("again")]).token_ids
    assert system_texts(model, ids) == ["\n" + SPEECH_SYSTEM_PROMPT + "Be brief."]
    first_user, first_reply = ids.index(model.ids.user), ids.index(model.ids.assistant)
    mode = model.tokenizer.encode("\n", add_special_tokens=False).ids
    assert ids[first_user + 1 : first_reply] == mode  # an empty user message
    assert not any(model.ids.is_audio(t) for t in ids[first_user:])
    assert ids.count(model.ids.user) == 2 and ids.count(model.ids.assistant) == 2
    with pytest.raises(ModelInputError, match="not a"):
        prepare_turn(model, ErasedTurn("not a turn"))


def test_reply_routing_and_truncation_to_what_was_heard(model):
    ids = model.ids
    text = model.tokenizer.encode("Hi there", add_special_tokens=False).ids
    speech = [ids.audio_base + i for i in range(30)]
    reply = [*text, *speech[:26], *text, *speech[26:], ids.user]
    assert "".join(model.text_piece(t) for t in reply) == "Hi thereHi there"
    assert [model.speech_token(t) for t in speech] == list(range(30))
    assert model.heard_reply(reply, None) == AssistantTurn(tuple(reply[:-1]))
    # 1 s heard = 12 speech tokens (12.5/s, floored): the first text block and 12 codes.
    assert model.heard_reply(reply, 1.0).token_ids == tuple([*text, *speech[:12]])
    assert model.heard_reply(reply, 0.0).token_ids == ()
    history = [UserTurn(text="hello"), model.heard_reply(reply, 1.0), UserTurn(text="and?")]
    first = model.preprocess_turns(history[:1]).token_ids
    assert model.preprocess_turns(history).token_ids[: len(first)] == first


def test_detokenize_keeps_text_and_sends_speech_to_the_decoder(model):
    ids = model.ids
    reply = [[5, ids.audio_base + 3, 6], [ids.audio_base + 9, ids.user]]
    state = model.new_stream_state()
    pcm = [model.detokenize([state], [toks], [i == 1])[0] for i, toks in enumerate(reply)]
    assert state.text_ids == [5, 6] and state.audio_tokens == 2 and state.decoder.tokens == [3, 9]
    assert len(pcm[0]) == 0  # fewer than the first block's 10 tokens: nothing yet
    assert len(pcm[1]) == model.decoder.flow.mel_frames(2) * 256  # final: all of it
    assert model.facts.accepts_audio and model.facts.sample_rate == 22050
    assert torch.equal(torch.tensor(model.facts.stop_token_ids), torch.tensor(ids.stop_ids))
    transcript_only = copy.copy(model)
    transcript_only.decoder = None
    state = transcript_only.new_stream_state()
    assert len(transcript_only.detokenize([state], reply[:1], [True])[0]) == 0


def test_tokens_to_come_are_counted_as_the_trained_replies_mix_them(model):
    """What a first chunk would play after `more` tokens to come (the scheduler's past-budget
    wait asks): a reply is 13 text tokens, then 26 speech tokens, and text makes no audio."""
    dec = model.decoder
    reply = [5] * 13 + [model.ids.audio_base + i for i in range(26)]
    assert model.first_chunk_audio_s(reply[:23]) == dec.first_audio_s(10) > 0
    assert model.first_chunk_audio_s(reply[:23], 16) == model.first_chunk_audio_s(reply)
    assert model.first_chunk_audio_s(reply, 13) == dec.first_audio_s(26)  # 13 of text
    assert model.first_chunk_audio_s(reply, 15) == dec.first_audio_s(28)


def test_real_configuration_shapes_and_preset_errors():
    from models.checkpoint_errors import CheckpointError
    from models.glm_voice import configs
    from models.glm_voice.backbone import glm_args_from_chatglm_config
    from models.glm_voice.loading import load_glm_tokenizer
    from models.glm_voice.presets import ensure_real_config
    from models.glm_voice.tokens import GlmVoiceIds

    a = glm_args_from_chatglm_config(configs.GLM_4_VOICE_9B)
    assert (a.num_layers, a.num_heads, a.num_kv_heads, a.head_dim) == (40, 32, 2, 128)
    assert a.rope.rotary_fraction == 0.5 and a.rope.interleaved and a.attention_bias
    ids = GlmVoiceIds.from_tokenizer(load_glm_tokenizer(ensure_real_config()))
    assert ids.num_audio == 16384 and ids.audio_base + ids.num_audio <= a.vocab_size
    with pytest.raises(CheckpointError, match="random weights already"):
        load_model("tiny-glm-voice", random_weights=True)
    with pytest.raises(CheckpointError, match="drop --codec"):
        load_model("tiny-glm-voice", codec="snac")
